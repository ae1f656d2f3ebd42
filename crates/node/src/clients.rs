//! An application's client front-end, run to completion on the replica loop (issue 13).
//!
//! A [`ClientLoop`] registers its sockets on the replica loop's poll. With
//! [`ClientLoopKind::Replica`](crate::config::ClientLoopKind) (the default) the replica's own
//! thread reads a request, parses it, proposes it straight into Raft (no queue, no wake-up of
//! another thread), replicates it (the data plane, or the loop's sends) and writes the answer
//! once the entry is applied. With `Thread` the same front-end runs on a thread of its own and
//! submits through the replica loop's queue ([`serve_on_own_thread`]), as before.
//!
//! Other threads reach the replica loop through its [`Inbox`]: a bounded queue whose
//! senders ring the loop's poll only while it sleeps, so a busy loop is woken by no one.

use std::io;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::mpsc::{SendError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use mio::event::Event as IoEvent;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token, Waker};

use crate::replica::{Event, Handle, Submit};
use crate::stop::Stop;

/// The poll token of the poll's one waker: the replica loop's [`Bell`], or a front-end
/// thread's; a [`ClientLoop`] registers its sources from [`FIRST_TOKEN`] on.
pub const BELL: Token = Token(0);

/// The replica loop's poll token of the data plane's fast-path socket, when the loop reads it
/// ([`crate::fastpath::FastPort`]).
pub const FAST: Token = Token(1);

/// The replica loop's poll token of the data plane's ring, when the loop reads it
/// (`DataPlane::ring_fd`).
pub const RING: Token = Token(2);

/// A front-end thread's stop flag on its poll.
const STOP: Token = Token(usize::MAX);

/// Wakes the poll a [`ClientLoop`] runs on (if it sleeps): for answers given on another
/// thread. A poll has one waker, which the front-end shares.
pub type Wake = Arc<dyn Fn() + Send + Sync>;

/// The first token a [`ClientLoop`] may register.
pub const FIRST_TOKEN: usize = 3;

/// Events of one poll at most (a front-end's sockets): the rest are reported by the next.
pub const POLL_EVENTS: usize = 1_024;

/// Where a front-end's requests go: straight into the replica loop when it runs there, or
/// through its queue ([`Handle`]) from a thread of its own.
pub trait Propose {
    /// Submits a request; `reply` is called exactly once, on the replica loop's thread or at
    /// once (busy).
    fn submit(&mut self, s: Submit);
}

/// What an application does with a client request that reached the fast-path port and that
/// the data plane did not order itself: (source, datagram, where to submit it). Called on
/// the replica loop, which reads the port (`xdp`: `to` proposes straight into Raft), or on
/// the data plane's thread (`udp`: `to` is the replica's queue). Must not block.
pub type FastRequestFn = Arc<dyn Fn(std::net::SocketAddr, &[u8], &mut dyn Propose) + Send + Sync>;

impl Propose for Handle {
    fn submit(&mut self, s: Submit) {
        Handle::submit(self, s)
    }
}

/// A shared handle proposes through the queue too (no clone per request).
impl Propose for &Handle {
    fn submit(&mut self, s: Submit) {
        Handle::submit(self, s)
    }
}

/// An event-driven client front-end the replica loop (or a thread of its own) drives.
pub trait ClientLoop: Send + 'static {
    /// Registers its sockets on `registry` with tokens from [`FIRST_TOKEN`] on; `handle` is the
    /// replica's (status, counters, admission); `wake` wakes the poll.
    fn register(&mut self, registry: &Registry, handle: &Handle, wake: Wake) -> io::Result<()>;
    /// An event of one of its sources.
    fn event(&mut self, registry: &Registry, ev: &IoEvent, to: &mut dyn Propose);
    /// After the events of a poll and after every pass over the replica's ready batches:
    /// writes the answers that came, submits what its connections have ready.
    fn turn(&mut self, to: &mut dyn Propose);
    /// The loop is about to sleep: false if answers came meanwhile (then it must not).
    fn idle(&mut self) -> bool;
    /// How long it may sleep at most for the front-end (a parked blocking command).
    fn timeout(&self) -> Option<Duration>;
}

/// Rings the replica loop's poll while the loop sleeps.
pub struct Bell {
    asleep: AtomicBool,
    waker: Waker,
}

impl Bell {
    /// A bell on `registry`'s poll, at [`BELL`].
    pub fn new(registry: &Registry) -> io::Result<Bell> {
        Ok(Bell {
            asleep: AtomicBool::new(false),
            waker: Waker::new(registry, BELL)?,
        })
    }

    /// The loop is about to sleep. It must look at its queue once more after this: what was
    /// queued before rang nobody.
    pub fn sleep(&self) {
        self.asleep.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// The loop is awake.
    pub fn awake(&self) {
        self.asleep.store(false, Ordering::Relaxed);
    }

    /// After an event was queued (or an answer left): wakes the loop if it sleeps (one write
    /// of its eventfd per sleep, whatever the number of senders).
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.asleep.load(Ordering::SeqCst) && self.asleep.swap(false, Ordering::SeqCst) {
            let _ = self.waker.wake();
        }
    }
}

/// The replica loop's queue, as other threads see it.
#[derive(Clone)]
pub struct Inbox {
    tx: SyncSender<Event>,
    bell: Arc<Bell>,
}

impl Inbox {
    /// The sending side of a queue the loop reads, and the bell on its poll.
    pub fn new(tx: SyncSender<Event>, bell: Arc<Bell>) -> Inbox {
        Inbox { tx, bell }
    }

    /// Queues `ev` unless the queue is full. The event comes back in the error, as from
    /// `SyncSender`: its sender answers a refused request from it.
    #[allow(clippy::result_large_err)]
    pub fn try_send(&self, ev: Event) -> Result<(), TrySendError<Event>> {
        self.tx.try_send(ev)?;
        self.bell.ring();
        Ok(())
    }

    /// Queues `ev`, waiting while the queue is full.
    #[allow(clippy::result_large_err)]
    pub fn send(&self, ev: Event) -> Result<(), SendError<Event>> {
        self.tx.send(ev)?;
        self.bell.ring();
        Ok(())
    }
}

/// Runs `fe` on the calling thread until `stop`, submitting through `handle` (the replica
/// loop's queue): [`ClientLoopKind::Thread`](crate::config::ClientLoopKind).
pub fn serve_on_own_thread(
    mut fe: Box<dyn ClientLoop>,
    handle: Handle,
    stop: Arc<Stop>,
) -> io::Result<()> {
    let mut poll = Poll::new()?;
    let stop_fd = stop.fd();
    poll.registry()
        .register(&mut SourceFd(&stop_fd), STOP, Interest::READABLE)?;
    let waker = Arc::new(Waker::new(poll.registry(), BELL)?);
    let wake: Wake = Arc::new(move || {
        let _ = waker.wake();
    });
    fe.register(poll.registry(), &handle, wake)?;
    let mut to = handle;
    let mut events = Events::with_capacity(POLL_EVENTS);
    while !stop.is_set() {
        let timeout = if fe.idle() {
            fe.timeout()
        } else {
            Some(Duration::ZERO)
        };
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for ev in events.iter() {
            if ev.token() != BELL && ev.token() != STOP {
                fe.event(poll.registry(), ev, &mut to);
            }
        }
        fe.turn(&mut to);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rang(poll: &mut Poll, events: &mut Events) -> usize {
        poll.poll(events, Some(Duration::ZERO)).unwrap();
        events.iter().filter(|e| e.token() == BELL).count()
    }

    /// Senders ring the loop's poll once per sleep, and never while it is awake: a busy loop
    /// takes its queue without a wake-up per event.
    #[test]
    fn the_inbox_rings_a_sleeping_loop_once_and_an_awake_one_never() {
        let (tx, rx) = std::sync::mpsc::sync_channel(8);
        let mut poll = Poll::new().unwrap();
        let mut events = Events::with_capacity(8);
        let bell = Arc::new(Bell::new(poll.registry()).unwrap());
        let inbox = Inbox::new(tx, bell.clone());
        inbox.try_send(Event::ClientError).unwrap();
        assert_eq!(rang(&mut poll, &mut events), 0, "awake: no ring");
        bell.sleep();
        inbox.try_send(Event::ClientError).unwrap();
        inbox.send(Event::ClientError).unwrap();
        assert_eq!(rang(&mut poll, &mut events), 1, "asleep: one ring for both");
        bell.awake();
        inbox.try_send(Event::ClientError).unwrap();
        assert_eq!(rang(&mut poll, &mut events), 0);
        assert_eq!(rx.try_iter().count(), 4, "every event queued");
        // Rung from another thread while the loop waits in its poll.
        bell.sleep();
        let t = std::thread::spawn(move || inbox.send(Event::Shutdown).unwrap());
        poll.poll(&mut events, Some(Duration::from_secs(10)))
            .unwrap();
        assert_eq!(events.iter().filter(|e| e.token() == BELL).count(), 1);
        t.join().unwrap();
        assert!(matches!(rx.try_recv(), Ok(Event::Shutdown)));
    }
}
