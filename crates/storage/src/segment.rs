//! One write-ahead-log segment file: `wal/<first index, 20 digits>.seg`.
//!
//! A segment is a header record (type `SegmentHeader`, payload `magic: u64 "WVRNSEG1",
//! version: u32, first_index: u64`) followed by one `Entry` record per entry, indexes
//! consecutive from `first_index`. Segments are created atomically (temp file with the header,
//! fsync, rename, directory fsync), so a segment file always starts with a valid header.
//!
//! [`parse`] is pure: it reads a segment's bytes and classifies the first bad record, if any,
//! as a torn tail (nothing valid follows it) or as damage (a valid entry follows it).

use crate::codec::{self, Reader, Writer};
use crate::error::{io_err, StorageError};
use crate::fsutil;
use crate::record::{self, RecordType};
use crate::StorageStats;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use waverunner_raft::{Entry, Index, Term};

const MAGIC: u64 = u64::from_le_bytes(*b"WVRNSEG1");
const VERSION: u32 = 1;
const HEADER_PAYLOAD_LEN: usize = 8 + 4 + 8;
/// Largest payload of an entry record.
pub(crate) const MAX_ENTRY_PAYLOAD: usize = codec::ENTRY_OVERHEAD + codec::MAX_ENTRY_DATA;
/// Suffix of segment files.
pub(crate) const SUFFIX: &str = ".seg";

/// File name of the segment whose first entry is `first`.
pub(crate) fn file_name(first: Index) -> String {
    format!("{first:020}{SUFFIX}")
}

/// The first index named by a segment file name, if it is one.
pub(crate) fn parse_name(name: &str) -> Option<Index> {
    let digits = name.strip_suffix(SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A segment as the WAL tracks it in memory.
#[derive(Debug)]
pub(crate) struct Segment {
    /// Index of the first entry (also of the next one when empty).
    pub first: Index,
    pub path: PathBuf,
    /// Bytes in the file; the next record goes here.
    pub len: u64,
    /// Byte offset of the record of entry `first + i`: where to cut to truncate from it.
    pub offsets: Vec<u64>,
}

impl Segment {
    /// Index the next entry appended to this segment must have.
    pub fn next_index(&self) -> Index {
        self.first + self.offsets.len() as Index
    }

    /// Creates an empty segment for entries from `first` in `dir`, durably, and opens it.
    pub fn create(
        dir: &Path,
        first: Index,
        stats: &mut StorageStats,
    ) -> Result<(Segment, File), StorageError> {
        let name = file_name(first);
        let path = dir.join(&name);
        let tmp = dir.join(format!("{name}{}", fsutil::TMP_SUFFIX));
        let mut buf = Vec::with_capacity(record::HEADER_LEN + HEADER_PAYLOAD_LEN);
        let start = record::begin(&mut buf);
        let mut w = Writer::from_vec(buf);
        w.put_u64(MAGIC);
        w.put_u32(VERSION);
        w.put_u64(first);
        let mut buf = w.into_inner();
        record::finish(&mut buf, start, RecordType::SegmentHeader);

        let mut f = fsutil::create_empty(&tmp)?;
        f.write_all(&buf).map_err(io_err(&tmp, "write"))?;
        stats.fsyncs += 1;
        f.sync_all().map_err(io_err(&tmp, "fsync"))?;
        fs::rename(&tmp, &path).map_err(io_err(&path, "rename into place"))?;
        fsutil::sync_dir(dir, stats)?;
        stats.bytes_written += buf.len() as u64;
        stats.records_written += 1;
        let seg = Segment {
            first,
            path,
            len: buf.len() as u64,
            offsets: Vec::new(),
        };
        Ok((seg, f))
    }

    /// Opens the segment's file for appending and truncating.
    pub fn open(&self) -> Result<File, StorageError> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(io_err(&self.path, "open"))
    }
}

/// The first bad record of a segment when nothing valid follows it: what a crash in the
/// middle of an unsynced write leaves.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Torn {
    /// Where the bad record starts: the file is cut here.
    pub offset: u64,
    /// Why the record is bad.
    pub why: &'static str,
}

/// What [`parse`] found in a segment.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub entries: Vec<Entry>,
    /// Offset of each entry's record.
    pub offsets: Vec<u64>,
    /// Length of the valid prefix (the file length unless `torn`).
    pub valid_len: u64,
    pub torn: Option<Torn>,
}

/// Parses a segment's bytes. `first` comes from the file name; `prev_term` is the term of the
/// entry before it (0 if unknown), to check that terms never decrease. `Err((offset, what))`
/// means damage that no crash can explain.
pub(crate) fn parse(data: &[u8], first: Index, prev_term: Term) -> Result<Parsed, (u64, String)> {
    let h = record::parse(data, 0, HEADER_PAYLOAD_LEN)
        .map_err(|why| (0, format!("segment header: {why}")))?;
    if h.ty != RecordType::SegmentHeader as u8 || h.payload.len() != HEADER_PAYLOAD_LEN {
        return Err((
            0,
            format!("segment header: unexpected record type {}", h.ty),
        ));
    }
    let mut r = Reader::new(h.payload);
    let (magic, version, hdr_first) = (|| Ok((r.get_u64()?, r.get_u32()?, r.get_u64()?)))()
        .map_err(|e: codec::CodecError| (0, format!("segment header: {e}")))?;
    if magic != MAGIC {
        return Err((0, format!("segment header: bad magic {magic:#018x}")));
    }
    if version != VERSION {
        return Err((0, format!("segment header: unsupported version {version}")));
    }
    if hdr_first != first || first == 0 {
        return Err((
            0,
            format!("segment header says first index {hdr_first}, file name says {first}"),
        ));
    }

    let mut out = Parsed {
        entries: Vec::new(),
        offsets: Vec::new(),
        valid_len: data.len() as u64,
        torn: None,
    };
    let mut off = h.end;
    let mut term = prev_term;
    while off < data.len() {
        let f = match record::parse(data, off, MAX_ENTRY_PAYLOAD) {
            Ok(f) => f,
            Err(why) => {
                let next = first + out.entries.len() as Index;
                if let Some(at) = valid_entry_after(data, off + 1, next) {
                    return Err((
                        off as u64,
                        format!("{why}, yet a valid entry record follows at offset {at}"),
                    ));
                }
                out.valid_len = off as u64;
                out.torn = Some(Torn {
                    offset: off as u64,
                    why,
                });
                return Ok(out);
            }
        };
        // The checksums matched: anything wrong from here on was written that way, which no
        // crash explains.
        let at = off as u64;
        if f.ty != RecordType::Entry as u8 {
            return Err((
                at,
                format!("record type {} where an entry was expected", f.ty),
            ));
        }
        let e = codec::decode_entry(f.payload).map_err(|e| (at, format!("entry record: {e}")))?;
        let want = first + out.entries.len() as Index;
        if e.index != want {
            return Err((
                at,
                format!("entry index {} where {want} was expected", e.index),
            ));
        }
        if e.term == 0 || e.term < term {
            return Err((
                at,
                format!("entry {} has term {} after term {term}", e.index, e.term),
            ));
        }
        term = e.term;
        out.offsets.push(at);
        out.entries.push(e);
        off = f.end;
    }
    Ok(out)
}

/// The offset of the first intact entry record at or after `from` whose index is at least
/// `min_index`, if any. Testing each offset costs one 12-byte checksum (the frame header's), so
/// this is cheap even on a long tail.
fn valid_entry_after(data: &[u8], from: usize, min_index: Index) -> Option<usize> {
    (from..data.len().saturating_sub(record::HEADER_LEN - 1)).find(|&at| {
        record::parse(data, at, MAX_ENTRY_PAYLOAD).is_ok_and(|f| {
            f.ty == RecordType::Entry as u8
                && codec::decode_entry(f.payload).is_ok_and(|e| e.index >= min_index)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use waverunner_raft::EntryKind;

    fn build(first: Index, n: u64) -> Vec<u8> {
        let dir =
            std::env::temp_dir().join(format!("wr-seg-unit-{}-{first}-{n}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let mut stats = StorageStats::default();
        let (seg, _f) = Segment::create(&dir, first, &mut stats).unwrap();
        let mut data = fs::read(&seg.path).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        for i in first..first + n {
            let start = record::begin(&mut data);
            let mut w = Writer::from_vec(data);
            codec::put_entry(
                &mut w,
                &Entry {
                    term: 1,
                    index: i,
                    kind: EntryKind::Normal,
                    data: vec![i as u8; 40].into(),
                },
            );
            data = w.into_inner();
            record::finish(&mut data, start, RecordType::Entry);
        }
        data
    }

    #[test]
    fn names() {
        assert_eq!(file_name(1), "00000000000000000001.seg");
        assert_eq!(parse_name(&file_name(12345)), Some(12345));
        assert_eq!(parse_name("1.seg"), None);
        assert_eq!(parse_name("0000000000000000000x.seg"), None);
        assert_eq!(parse_name("00000000000000000001.seg.tmp"), None);
    }

    #[test]
    fn clean_torn_and_damaged() {
        let data = build(5, 4);
        let p = parse(&data, 5, 0).unwrap();
        assert_eq!(p.entries.len(), 4);
        assert_eq!(p.torn, None);
        assert_eq!(parse(&data, 6, 0).unwrap_err().0, 0, "name/header mismatch");

        // Cut inside the last record: torn.
        let cut = &data[..data.len() - 3];
        let p = parse(cut, 5, 0).unwrap();
        assert_eq!(p.entries.len(), 3);
        assert_eq!(p.torn.as_ref().unwrap().offset, p.offsets[2] + 77);
        assert_eq!(p.valid_len, p.torn.unwrap().offset);

        // Garbage (zeros) after the last record: torn.
        let mut z = data.clone();
        z.extend_from_slice(&[0u8; 4096]);
        let p = parse(&z, 5, 0).unwrap();
        assert_eq!(p.entries.len(), 4);
        assert_eq!(p.valid_len, data.len() as u64);

        // A flipped byte in the second record: valid records follow, damage.
        let second = parse(&data, 5, 0).unwrap().offsets[1];
        let mut bad = data.clone();
        bad[second as usize + 30] ^= 0x40;
        let (off, what) = parse(&bad, 5, 0).unwrap_err();
        assert_eq!(off, second);
        assert!(what.contains("valid entry record follows"), "{what}");

        // Decreasing terms.
        assert!(parse(&data, 5, 2).unwrap_err().1.contains("term"));
    }
}
