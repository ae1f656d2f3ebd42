//! A replica's stop flag, which threads can also wait on.
//!
//! Accept loops and the native front-end wait for a connection or a datagram *or* the stop,
//! instead of polling the flag every 100–200 ms: an idle replica's listeners were about 30 of
//! its 200 wake-ups a second (docs/bench.md, bench scale, idle CPU). Setting the flag writes a
//! byte into a pipe that nobody reads, so its read end stays readable and every waiter, present
//! or future, wakes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Set once, never cleared.
#[derive(Debug)]
pub struct Stop {
    /// Shared with signal handlers ([`Stop::on_signal`]).
    set: Arc<AtomicBool>,
    /// Readable once the flag is set.
    rd: OwnedFd,
    wr: OwnedFd,
}

impl Stop {
    /// A flag not set yet.
    pub fn new() -> io::Result<Stop> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded: both descriptors are open and owned by nobody else.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(Stop {
            set: Arc::new(AtomicBool::new(false)),
            rd,
            wr,
        })
    }

    /// Whether the flag is set.
    pub fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// Sets the flag and wakes every waiter.
    pub fn set(&self) {
        if !self.set.swap(true, Ordering::AcqRel) {
            // SAFETY: one byte from a valid buffer into our own open pipe. The pipe is empty
            // (this is the only write), so the byte always fits.
            let n = unsafe { libc::write(self.wr.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
            debug_assert_eq!(n, 1, "a stop byte fits in an empty pipe");
        }
    }

    /// Sets the flag when signal `sig` arrives (the flag first, then the pipe, so a woken
    /// waiter sees it).
    pub fn on_signal(&self, sig: libc::c_int) -> io::Result<()> {
        signal_hook::flag::register(sig, self.set.clone())?;
        // SAFETY: dup of our own open descriptor; the handler owns the copy.
        let wr = unsafe { libc::dup(self.wr.as_raw_fd()) };
        if wr < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `wr` was just opened and is owned by nobody else.
        let wr = unsafe { OwnedFd::from_raw_fd(wr) };
        signal_hook::low_level::pipe::register(sig, wr)?;
        Ok(())
    }

    /// Waits until `fd` is readable (true), the flag is set, or `max` passed (`None`: no
    /// limit). A signal that interrupts the wait ends it early; callers loop.
    pub fn wait_readable(&self, fd: RawFd, max: Option<Duration>) -> bool {
        self.wait(fd, libc::POLLIN, max)
    }

    /// Waits until `fd` is writable (true), the flag is set, or `max` passed (`None`: no
    /// limit). A signal that interrupts the wait ends it early; callers loop.
    pub fn wait_writable(&self, fd: RawFd, max: Option<Duration>) -> bool {
        self.wait(fd, libc::POLLOUT, max)
    }

    /// Waits for `events` on `fd` (true), the flag, or `max`.
    fn wait(&self, fd: RawFd, events: libc::c_short, max: Option<Duration>) -> bool {
        let on_fd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        let mut p = [on_fd, pollin(self.rd.as_raw_fd())];
        poll(&mut p, max) > 0 && p[0].revents != 0
    }

    /// A descriptor that becomes readable once the flag is set (for an event loop's poll set).
    pub fn fd(&self) -> RawFd {
        self.rd.as_raw_fd()
    }

    /// Sleeps for `d` or until the flag is set, whichever comes first.
    pub fn sleep(&self, d: Duration) {
        poll(&mut [pollin(self.rd.as_raw_fd())], Some(d));
    }
}

fn pollin(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// `poll(2)` over `p` for at most `max` (`None`: no limit).
fn poll(p: &mut [libc::pollfd], max: Option<Duration>) -> libc::c_int {
    let ms = max.map_or(-1, |d| {
        libc::c_int::try_from(d.as_millis()).unwrap_or(libc::c_int::MAX)
    });
    // SAFETY: valid pollfds for open descriptors, for the duration of the call.
    unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn setting_it_wakes_a_waiter_at_once_and_every_later_one() {
        let stop = Arc::new(Stop::new().unwrap());
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s2 = stop.clone();
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            s2.set();
        });
        let t = Instant::now();
        assert!(!stop.wait_readable(l.as_raw_fd(), Some(Duration::from_secs(30))));
        assert!(t.elapsed() < Duration::from_secs(20), "woken by the stop");
        setter.join().unwrap();
        assert!(stop.is_set());
        // Set stays set: a later wait returns at once, as does a second set.
        stop.set();
        assert!(!stop.wait_readable(l.as_raw_fd(), None));
        stop.sleep(Duration::from_secs(30));
    }

    #[test]
    fn a_signal_sets_it_and_wakes_a_sleeper() {
        let stop = Stop::new().unwrap();
        stop.on_signal(libc::SIGUSR2).unwrap();
        // SAFETY: raising a signal whose handler was just installed.
        assert_eq!(unsafe { libc::raise(libc::SIGUSR2) }, 0);
        assert!(stop.is_set());
        let t = Instant::now();
        stop.sleep(Duration::from_secs(30));
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "woken by the signal's byte"
        );
    }

    #[test]
    fn a_readable_descriptor_is_reported() {
        let stop = Stop::new().unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert!(stop.wait_readable(l.as_raw_fd(), Some(Duration::from_secs(30))));
        assert!(!stop.is_set());
    }
}
