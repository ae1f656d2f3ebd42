//! FFI to the C compiled by `build.rs`, and the C codec wrappers used to prove that the Rust
//! and C implementations of the wire format agree.

use crate::handler::Output;
use crate::registers::Registers;
use crate::wire::{Header, WireError, HDR_LEN};

extern "C" {
    pub(crate) fn fp_handle(r: *mut Registers, input: *const Header, out: *mut Output) -> i32;
    pub(crate) fn fp_shed(
        r: *const Registers,
        input: *const Header,
        from_self: i32,
        load: *const [u64; 3],
    ) -> i32;
    pub(crate) fn fp_ahead(
        r: *const Registers,
        input: *const Header,
        from_self: i32,
        window: u32,
        clock: *mut [u64; 2],
    ) -> i32;
    pub(crate) fn fp_busy_answer(clock: *mut [u64; 2]) -> i32;
    pub(crate) fn fp_leader_heard(
        regs: *const Registers,
        input: *const Header,
        from_self: i32,
    ) -> i32;
    fn fp_parse_ffi(buf: *const u8, len: u32, out: *mut Header) -> i32;
    fn fp_write_ffi(h: *const Header, buf: *mut u8) -> i32;
    #[cfg(test)]
    static fp_layout_table: [u32; 41];
    #[cfg(test)]
    static fp_layout_len: u32;
    #[cfg(test)]
    static fp_payload_table: [u32; 16];
    #[cfg(test)]
    static fp_payload_len: u32;
}

/// Parses `buf` with the C `fp_parse` (the code the XDP program runs). Same contract as
/// [`Header::decode`], without the payload slice.
pub fn parse_c(buf: &[u8]) -> Result<Header, WireError> {
    let mut h = Header::default();
    // A buffer longer than u32::MAX is presented as u32::MAX bytes: fp_parse reads at most
    // HDR_LEN bytes and only compares `len` against the length.
    let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
    // SAFETY: `buf` is valid for `len` bytes and fp_parse reads at most HDR_LEN of them, only
    // after checking `len >= HDR_LEN`; `h` is a live `#[repr(C)]` mirror of `struct fp_hdr`.
    let rc = unsafe { fp_parse_ffi(buf.as_ptr(), len, &mut h) };
    match rc {
        0 => Ok(h),
        e => Err(WireError::from_code(e).expect("fp_parse returned an unknown error code")),
    }
}

/// Writes `hdr` as 64 wire bytes with the C `fp_write` (the code the XDP program runs).
pub fn write_c(hdr: &Header) -> [u8; HDR_LEN] {
    let mut b = [0u8; HDR_LEN];
    // SAFETY: `b` has HDR_LEN writable bytes, all fp_write touches; `hdr` is a live mirror.
    let n = unsafe { fp_write_ffi(hdr, b.as_mut_ptr()) };
    debug_assert_eq!(n as usize, HDR_LEN);
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layout_matches_c() {
        let rust: Vec<usize> = vec![
            size_of::<Header>(),
            offset_of!(Header, magic),
            offset_of!(Header, version),
            offset_of!(Header, kind),
            offset_of!(Header, flags),
            offset_of!(Header, group_id),
            offset_of!(Header, len),
            offset_of!(Header, reserved),
            offset_of!(Header, term),
            offset_of!(Header, from),
            offset_of!(Header, index),
            offset_of!(Header, log_term),
            offset_of!(Header, commit),
            offset_of!(Header, seq),
            size_of::<Registers>(),
            offset_of!(Registers, self_id),
            offset_of!(Registers, leader_id),
            offset_of!(Registers, group_id),
            offset_of!(Registers, term),
            offset_of!(Registers, last_index),
            offset_of!(Registers, last_term),
            offset_of!(Registers, commit_index),
            offset_of!(Registers, term_start_index),
            offset_of!(Registers, ids),
            offset_of!(Registers, match_index),
            offset_of!(Registers, n_nodes),
            offset_of!(Registers, quorum),
            offset_of!(Registers, enabled),
            offset_of!(Registers, is_leader),
            offset_of!(Registers, flags),
            offset_of!(Registers, halt_reason),
            offset_of!(Registers, gap_count),
            offset_of!(Registers, retx_requests),
            size_of::<Output>(),
            offset_of!(Output, actions),
            offset_of!(Output, halt_reason),
            offset_of!(Output, entry_index),
            offset_of!(Output, entry_term),
            offset_of!(Output, commit_index),
            offset_of!(Output, reply_index),
            offset_of!(Output, msg),
        ];
        // SAFETY: plain reads of immutable C globals.
        let (table, len) = unsafe { (fp_layout_table, fp_layout_len) };
        assert_eq!(len as usize, rust.len(), "layout table length");
        for (i, (c, r)) in table.iter().zip(&rust).enumerate() {
            assert_eq!(
                *c as usize, *r,
                "layout entry {i} differs between C and Rust"
            );
        }
    }

    #[test]
    fn payload_layout_matches_c() {
        use crate::payload::*;
        let rust: Vec<u32> = vec![
            u32::from(ENV_TAG),
            u32::from(ENTRY_MEMBER_RECORD),
            ENV_OFF_ORIGIN as u32,
            ENV_OFF_REQ as u32,
            ENV_OFF_CLIENT as u32,
            ENV_OFF_SEQ as u32,
            ENV_OFF_NOW_MS as u32,
            ENV_OFF_LEN as u32,
            ENV_PREFIX as u32,
            REPLY_OFF_STATUS as u32,
            REPLY_OFF_LEADER as u32,
            REPLY_PREFIX as u32,
            u32::from(STATUS_OK),
            u32::from(STATUS_ERROR),
            u32::from(STATUS_RETRY),
            u32::from(STATUS_UNKNOWN),
        ];
        // SAFETY: plain reads of immutable C globals.
        let (table, len) = unsafe { (fp_payload_table, fp_payload_len) };
        assert_eq!(len as usize, rust.len(), "payload table length");
        assert_eq!(table.to_vec(), rust, "payload.h and payload.rs differ");
    }

    #[test]
    fn c_and_rust_codecs_agree_on_a_header() {
        let h = Header {
            magic: crate::MAGIC,
            version: 1,
            kind: 2,
            flags: 3,
            group_id: 0xdead_beef,
            len: 0,
            reserved: 0,
            term: 1 << 40,
            from: 2,
            index: u64::MAX,
            log_term: 4,
            commit: 5,
            seq: 6,
        };
        assert_eq!(write_c(&h), h.to_bytes());
        assert_eq!(parse_c(&h.to_bytes()), Ok(h));
        assert_eq!(parse_c(&[0u8; 10]), Err(WireError::Short));
    }
}
