//! Batched UDP I/O, the one owner of `sendmmsg` and `recvmmsg` in the project: the `udp` data
//! plane (`crates/dataplane/src/udp.rs`), the data planes' host replies
//! (`DataPlane::send_many`) and the overload flood (`crates/client/src/load.rs`) send and
//! receive through it.
//!
//! Written here rather than taken from a crate: nix 0.30's `sendmmsg` reports how many
//! datagrams went only through an iterator that reads receive addresses it never initialized,
//! and socket2 has no batched calls; this is two system calls and their buffers.

use std::io;
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// Datagrams one [`send_batch`] call sends at most.
pub const MAX_BATCH: usize = 64;

/// `a` as a C socket address and its length.
pub fn sockaddr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len = match a {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// The address in `ss` (as the kernel filled it), if it is IPv4 or IPv6.
pub fn socket_addr(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match ss.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in; it is large enough.
            let sin: libc::sockaddr_in =
                unsafe { std::ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6; it is large enough.
            let sin6: libc::sockaddr_in6 =
                unsafe { std::ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Sends the first [`MAX_BATCH`] datagrams of `msgs` (destination, bytes) with one
/// `sendmmsg`; returns how many the kernel took (fewer when it stopped short: the caller sends
/// the rest again or gives them up), or the error of the first that did not go.
pub fn send_batch<'a>(
    fd: RawFd,
    msgs: impl IntoIterator<Item = (SocketAddr, &'a [u8])>,
) -> io::Result<usize> {
    // SAFETY (zeroed): plain old data; all-zero is valid for each.
    let mut names: [libc::sockaddr_storage; MAX_BATCH] = unsafe { mem::zeroed() };
    let mut iov: [libc::iovec; MAX_BATCH] = unsafe { mem::zeroed() };
    let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { mem::zeroed() };
    let mut k = 0;
    for (to, bytes) in msgs.into_iter().take(MAX_BATCH) {
        let (ss, len) = sockaddr(to);
        names[k] = ss;
        iov[k] = libc::iovec {
            iov_base: bytes.as_ptr() as *mut libc::c_void,
            iov_len: bytes.len(),
        };
        hdrs[k].msg_hdr.msg_name = (&mut names[k] as *mut libc::sockaddr_storage).cast();
        hdrs[k].msg_hdr.msg_namelen = len;
        hdrs[k].msg_hdr.msg_iov = &mut iov[k];
        hdrs[k].msg_hdr.msg_iovlen = 1;
        k += 1;
    }
    if k == 0 {
        return Ok(0);
    }
    // SAFETY: the first k headers point at live names and iovecs, which point at the callers'
    // buffers (borrowed for 'a, past this call); the kernel only reads them and writes
    // msg_len.
    let rc = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), k as libc::c_uint, 0) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// Sends all `n` datagrams (`msg(i)`: destination and bytes), in order, in [`send_batch`]
/// calls; returns how many the kernel took. A full send buffer on a non-blocking socket is
/// waited for (at most 1 ms at a time, [`MAX_STALLS`] times in all); a datagram that cannot go
/// for another reason (an unreachable destination) is skipped, as if lost on the wire, and
/// `on_error` hears why.
pub fn send_all<'a>(
    fd: RawFd,
    n: usize,
    msg: impl Fn(usize) -> (SocketAddr, &'a [u8]),
    mut on_error: impl FnMut(SocketAddr, &io::Error),
) -> usize {
    let (mut done, mut sent, mut stalls) = (0, 0, 0);
    while done < n {
        match send_batch(fd, (done..n).map(&msg)) {
            Ok(k) => {
                // The kernel returns an error rather than 0 for a non-empty batch; a 0 would
                // loop forever, so it counts as one skipped.
                debug_assert!(k > 0, "sendmmsg took nothing without an error");
                done += k.max(1);
                sent += k;
            }
            Err(e) => match e.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock if stalls < MAX_STALLS => {
                    stalls += 1;
                    wait_writable(fd);
                }
                _ => {
                    on_error(msg(done).0, &e);
                    done += 1;
                }
            },
        }
    }
    sent
}

/// How many times [`send_all`] waits for a full send buffer before it gives datagrams up.
pub const MAX_STALLS: usize = 10;

/// Waits at most 1 ms for `fd` to be writable.
pub fn wait_writable(fd: RawFd) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, 1) };
}

/// A socket's buffer, for [`set_buffer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffer {
    /// `SO_RCVBUF`.
    Receive,
    /// `SO_SNDBUF`.
    Send,
}

/// Asks for a `bytes` buffer on `fd`: past the system's cap (`net.core.{r,w}mem_max`) as root
/// (the `FORCE` option), up to the cap otherwise. Whether either was taken; a refusal leaves
/// the buffer as it was, which is harmless.
pub fn set_buffer(fd: RawFd, which: Buffer, bytes: libc::c_int) -> bool {
    let (force, plain) = match which {
        Buffer::Receive => (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        Buffer::Send => (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    };
    [force, plain].into_iter().any(|opt| {
        // SAFETY: a live c_int of the size given.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&bytes as *const libc::c_int).cast(),
                mem::size_of::<libc::c_int>() as libc::socklen_t,
            ) == 0
        }
    })
}

/// `SO_MEMINFO` (the asm-generic value, x86's and arm's), which libc does not export.
const SO_MEMINFO: libc::c_int = 55;

/// How full `fd`'s receive queue is: the bytes queued and the buffer's size (`SO_MEMINFO`), or
/// `None` if the kernel does not say.
pub fn receive_queue(fd: RawFd) -> Option<(u32, u32)> {
    // SK_MEMINFO_VARS is 10 today; the kernel copies at most the length given.
    let mut info = [0u32; 16];
    let mut len = mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: getsockopt into a live array of the length given.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    let at = |i: libc::c_int| info[i as usize];
    (rc == 0 && len as usize > 4 * libc::SK_MEMINFO_RCVBUF as usize)
        .then(|| (at(libc::SK_MEMINFO_RMEM_ALLOC), at(libc::SK_MEMINFO_RCVBUF)))
}

/// Buffers for `recvmmsg`: `count` datagrams of at most `buf_len` bytes each, with their
/// source addresses (heap storage: the pointers stay valid when the batch moves).
pub struct RecvBatch {
    buf_len: usize,
    data: Vec<u8>,
    iov: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    hdrs: Vec<libc::mmsghdr>,
    /// Datagrams the last [`RecvBatch::recv`] received.
    n: usize,
}

// SAFETY: the raw pointers in `iov` and `hdrs` point only into the batch's own heap buffers;
// they are rewritten before every call that uses them.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// Room for `count` datagrams of `buf_len` bytes.
    pub fn new(count: usize, buf_len: usize) -> RecvBatch {
        assert!(count > 0 && buf_len > 0, "an empty receive batch");
        // SAFETY (zeroed): iovec, sockaddr_storage and mmsghdr are plain old data.
        RecvBatch {
            buf_len,
            data: vec![0; count * buf_len],
            iov: (0..count).map(|_| unsafe { mem::zeroed() }).collect(),
            names: (0..count).map(|_| unsafe { mem::zeroed() }).collect(),
            hdrs: (0..count).map(|_| unsafe { mem::zeroed() }).collect(),
            n: 0,
        }
    }

    /// Receives up to its count of datagrams from `fd` with one `recvmmsg` and `flags` (e.g.
    /// `MSG_DONTWAIT`, or `MSG_WAITFORONE` to block for the first up to the socket's read
    /// timeout); returns how many, or the error (`WouldBlock` when none waited).
    pub fn recv(&mut self, fd: RawFd, flags: libc::c_int) -> io::Result<usize> {
        self.n = 0;
        for i in 0..self.hdrs.len() {
            self.iov[i] = libc::iovec {
                iov_base: self.data[i * self.buf_len..].as_mut_ptr().cast(),
                iov_len: self.buf_len,
            };
            let h = &mut self.hdrs[i];
            h.msg_hdr.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_iov = &mut self.iov[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = std::ptr::null_mut();
            h.msg_hdr.msg_controllen = 0;
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        // SAFETY: every header points at a live iovec (into `data`, buf_len bytes each) and a
        // live sockaddr_storage of the size given, all owned by `self` and not otherwise
        // borrowed during the call.
        let rc = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                self.hdrs.len() as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        self.n = rc as usize;
        Ok(self.n)
    }

    /// Datagram `i` of the last [`RecvBatch::recv`]: its source (if IPv4 or IPv6), its bytes,
    /// and whether it was longer than the buffer (truncated).
    pub fn get(&self, i: usize) -> (Option<SocketAddr>, &[u8], bool) {
        assert!(i < self.n, "datagram {i} of a batch of {}", self.n);
        let h = &self.hdrs[i];
        let len = (h.msg_len as usize).min(self.buf_len);
        let truncated = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        let from = i * self.buf_len;
        (
            socket_addr(&self.names[i]),
            &self.data[from..from + len],
            truncated,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    #[test]
    fn a_larger_receive_buffer_is_taken() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let size = |s: &UdpSocket| {
            let mut v: libc::c_int = 0;
            let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: getsockopt into a live c_int of the length given.
            let rc = unsafe {
                libc::getsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    (&mut v as *mut libc::c_int).cast(),
                    &mut len,
                )
            };
            assert_eq!(rc, 0);
            v
        };
        let before = size(&s);
        assert!(set_buffer(s.as_raw_fd(), Buffer::Receive, 4 * before));
        // Root passes the cap (the kernel doubles what it is asked for); without root the cap
        // may hold it where it was.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert!(
                size(&s) >= 4 * before,
                "{} after asking {}",
                size(&s),
                4 * before
            );
        } else {
            assert!(size(&s) >= before);
        }
        assert!(!set_buffer(-1, Buffer::Send, 1 << 20), "a bad descriptor");
    }

    #[test]
    fn the_receive_queue_fills_and_empties() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (used, size) = receive_queue(rx.as_raw_fd()).expect("SO_MEMINFO");
        assert_eq!(used, 0);
        assert!(size > 0);
        for _ in 0..10 {
            tx.send_to(&[1; 100], rx.local_addr().unwrap()).unwrap();
        }
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = [0u8; 200];
        assert_eq!(rx.recv(&mut buf).unwrap(), 100);
        let (used, _) = receive_queue(rx.as_raw_fd()).unwrap();
        assert!(used >= 9 * 100, "nine datagrams queued: {used} bytes");
        for _ in 0..9 {
            rx.recv(&mut buf).unwrap();
        }
        assert_eq!(receive_queue(rx.as_raw_fd()).unwrap().0, 0);
        assert_eq!(receive_queue(-1), None);
    }

    #[test]
    fn addresses_round_trip_through_c() {
        for a in [
            "10.77.0.12:6379".parse::<SocketAddr>().unwrap(),
            "[fe80::1%2]:7000".parse().unwrap(),
            "[::1]:1".parse().unwrap(),
        ] {
            let (ss, len) = sockaddr(a);
            assert!(len as usize <= mem::size_of::<libc::sockaddr_storage>());
            assert_eq!(socket_addr(&ss), Some(a));
        }
        // SAFETY: all-zero is a valid sockaddr_storage (family AF_UNSPEC).
        let none: libc::sockaddr_storage = unsafe { mem::zeroed() };
        assert_eq!(socket_addr(&none), None);
    }

    /// More datagrams than one batch holds, to two receivers: every one arrives once, in
    /// order, with its source; a datagram longer than the buffer is flagged truncated.
    #[test]
    fn a_batch_goes_out_and_comes_back_with_sources() {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let rx: Vec<UdpSocket> = (0..2)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        for r in &rx {
            r.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        }
        let n = MAX_BATCH + 6;
        let pkts: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; 1 + i % 7]).collect();
        let dest = |i: usize| rx[i % 2].local_addr().unwrap();
        let mut sent = 0;
        while sent < n {
            let k = send_batch(
                tx.as_raw_fd(),
                (sent..n).map(|i| (dest(i), pkts[i].as_slice())),
            )
            .unwrap();
            assert!(k > 0 && k <= MAX_BATCH);
            sent += k;
        }
        let mut batch = RecvBatch::new(8, 16);
        for (j, r) in rx.iter().enumerate() {
            let mut want = (0..n).filter(|i| i % 2 == j);
            let mut got = 0;
            while got < n / 2 {
                let k = batch.recv(r.as_raw_fd(), libc::MSG_WAITFORONE).unwrap();
                for i in 0..k {
                    let (src, bytes, trunc) = batch.get(i);
                    let w = want.next().unwrap();
                    assert_eq!(src, Some(tx.local_addr().unwrap()));
                    assert_eq!(bytes, pkts[w].as_slice());
                    assert!(!trunc);
                }
                got += k;
            }
        }
        tx.send_to(&[7; 40], rx[0].local_addr().unwrap()).unwrap();
        assert_eq!(
            batch.recv(rx[0].as_raw_fd(), libc::MSG_WAITFORONE).unwrap(),
            1
        );
        let (_, bytes, trunc) = batch.get(0);
        assert_eq!((bytes, trunc), (&[7u8; 16][..], true));
        let e = batch
            .recv(rx[0].as_raw_fd(), libc::MSG_DONTWAIT)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    /// `send_all` sends every datagram in order across batches and skips one that cannot go
    /// (here: an IPv6 destination from an IPv4 socket), naming it, without losing the rest.
    #[test]
    fn send_all_sends_everything_and_skips_what_cannot_go() {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.set_nonblocking(true).unwrap();
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let bad: SocketAddr = "[::1]:9".parse().unwrap();
        let n = 2 * MAX_BATCH + 5;
        let skip = MAX_BATCH + 3;
        let pkts: Vec<Vec<u8>> = (0..n).map(|i| (i as u32).to_le_bytes().to_vec()).collect();
        let to = |i: usize| {
            if i == skip {
                bad
            } else {
                rx.local_addr().unwrap()
            }
        };
        let mut errors = Vec::new();
        let sent = send_all(
            tx.as_raw_fd(),
            n,
            |i| (to(i), pkts[i].as_slice()),
            |a, _| errors.push(a),
        );
        assert_eq!((sent, errors), (n - 1, vec![bad]));
        let mut buf = [0u8; 16];
        for i in (0..n).filter(|&i| i != skip) {
            let k = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..k], pkts[i].as_slice());
        }
        assert_eq!(
            send_all(tx.as_raw_fd(), 0, |i| (to(i), &[][..]), |_, _| ()),
            0
        );
    }
}
