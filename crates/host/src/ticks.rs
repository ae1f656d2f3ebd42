//! Ticks a replica missed during a stall (its process stopped, the machine starved it, one event
//! ran long), replayed in step with the frames that arrived meanwhile.
//!
//! Every tick that elapsed counts: a leader's lease and a follower's election timer follow real
//! time, so a paused leader's lease has expired before it serves again. But a frame that
//! arrived during the stall comes after the ticks that passed before it arrived, not after all
//! of them: a follower whose leader's heartbeats waited in its queue does not campaign because
//! of its own stall, and a leader whose followers' answers waited does not step down
//! (check-quorum). A frame that really came late still comes after the ticks it missed.
//! "Arrived" is the kernel's receive time in the node (`SO_TIMESTAMPNS`), the delivery time in
//! the simulator.

use std::time::Duration;

use waverunner_raft::Raft;

use crate::Time;

/// The plan of one replay: how many ticks go before each frame, and how many after.
///
/// Between two frames (and after the last) at most [`tick_cap`] ticks are counted: beyond two
/// election timeouts every timer has expired, and more would only repeat heartbeats. The cap
/// applies to each gap, never to the stall as a whole: capping the whole stall counted no tick
/// between frames that arrived late in it, so a leader paused for 100 ticks took a ReadIndex
/// request that waited 65 ms behind its followers' last answers for one inside its lease, and
/// answered it after a new leader had committed writes (a stale read the simulator found once
/// it queued messages for paused replicas; seed 878, 5 nodes, fsync, data plane off).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replay {
    /// When the next tick to replay was due.
    due: Time,
    tick: Duration,
    /// Ticks still due, the last one included (it is counted after every frame).
    remaining: u64,
    /// Ticks counted at most in one gap.
    cap: u64,
    /// Whether these ticks passed in a stall (counted a tick or more after the loop meant to):
    /// they are counted with [`Raft::tick_stalled_nth`], so no timeout against a peer expires
    /// before the second on-time tick.
    stalled: bool,
    /// Ticks counted so far: the place of the next in this stall.
    counted: u64,
}

/// Ticks beyond two election timeouts would only repeat heartbeats: every timer has expired.
pub fn tick_cap(election_ticks: u32) -> u64 {
    2 * u64::from(election_ticks) + 1
}

impl Replay {
    /// A replay of `ticks` ticks that fell due in a stall, the first at `first_due`, one every
    /// `tick`, at most `cap` of them counted in a row.
    pub fn new(ticks: u64, first_due: Time, tick: Duration, cap: u64) -> Replay {
        Replay {
            due: first_due,
            tick,
            remaining: ticks,
            cap: cap.max(1),
            stalled: true,
            counted: 0,
        }
    }

    /// Whether the ticks passed in a stall.
    pub fn stalled(&self) -> bool {
        self.stalled
    }

    /// Counts `n` of these ticks on `raft` (as stalled ticks if they passed in a stall, each
    /// with its place in the stall).
    pub fn count(&mut self, raft: &mut Raft, n: u64) {
        for _ in 0..n {
            if self.stalled {
                raft.tick_stalled_nth(self.counted);
            } else {
                raft.tick();
            }
            self.counted += 1;
        }
    }

    /// The ticks due at `now` when the next was due at `next_tick` (none before it): the ones
    /// missed and the one due. With it, the number missed and when the next tick is due after
    /// them. `wake` is when the loop meant to count them: `next_tick`, or later if it slept
    /// idle on purpose (those ticks are late but not stalled); they passed in a stall if
    /// `now` is a tick or more past it.
    pub fn due(
        next_tick: Time,
        wake: Time,
        now: Time,
        tick: Duration,
        election_ticks: u32,
    ) -> Option<(Replay, u64, Time)> {
        if now < next_tick {
            return None;
        }
        let tick_ns = tick.as_nanos().max(1);
        let missed = ((now - next_tick).as_nanos() / tick_ns) as u64;
        let mut next = next_tick + tick * u32::try_from(missed + 1).unwrap_or(u32::MAX);
        if next <= now {
            next = now + tick;
        }
        let mut replay = Replay::new(missed + 1, next_tick, tick, tick_cap(election_ticks));
        replay.stalled = now >= wake.max(next_tick) + tick;
        Some((replay, missed, next))
    }

    /// Ticks to count before a frame that arrived at `at`: those due by then (at most the cap),
    /// never the last one (it is counted after every frame, so a read never sees the clock of
    /// before the stall).
    pub fn before(&mut self, at: Time) -> u64 {
        if self.remaining <= 1 || self.due > at {
            return 0;
        }
        let tick_ns = self.tick.as_nanos().max(1);
        let due_by_then = ((at - self.due).as_nanos() / tick_ns) as u64 + 1;
        let n = due_by_then.min(self.remaining - 1);
        self.remaining -= n;
        self.due += self.tick * u32::try_from(n).unwrap_or(u32::MAX);
        n.min(self.cap)
    }

    /// Ticks left to count after the frames (at most the cap).
    pub fn rest(&self) -> u64 {
        self.remaining.min(self.cap)
    }
}

/// A replica's host at the end of a stall, as [`replay_stall`] drives it. The node's loop and
/// the simulator's resume both implement it, so both replay a stall in the same order.
pub trait StallHost {
    /// A frame that waited: a peer's message, a packet the data plane passed up.
    type Frame;
    /// The replica's Raft core.
    fn raft(&mut self) -> &mut Raft;
    /// With a data plane: the ticks of `replay` before it last heard the leader are not
    /// counted (a follower's, `DataPlaneHost::skip_ticks_before_leader_heard`), then the ring
    /// it filled during the stall is fed to the core. Nothing without one.
    fn feed_data_plane(&mut self, replay: &mut Replay);
    /// The next frame that waited, with when it arrived; `None` when none is left.
    fn next_frame(&mut self) -> Option<(Time, Self::Frame)>;
    /// Steps `frame`; true if stepping it held the loop past the replay's end (the frames
    /// left come in the next replay, after the ticks of that hold).
    fn step_frame(&mut self, frame: Self::Frame) -> bool;
}

/// Replays the stall of `replay` on `host` in the order that keeps the clocks honest: first
/// what the data plane took meanwhile (its last append proves the leader alive then), then
/// each frame that waited after the ticks that passed before it arrived. Returns whether a
/// frame overran the replay. The ticks left ([`Replay::rest`]) are the caller's to count: the
/// node counts them with its own tick work, the simulator at once.
pub fn replay_stall<H: StallHost>(host: &mut H, replay: &mut Replay) -> bool {
    host.feed_data_plane(replay);
    while let Some((arrived, frame)) = host.next_frame() {
        let n = replay.before(arrived);
        replay.count(host.raft(), n);
        if host.step_frame(frame) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn nothing_is_due_before_the_next_tick() {
        assert_eq!(Replay::due(10 * MS, 10 * MS, 9 * MS, 10 * MS, 10), None);
    }

    #[test]
    fn a_stall_counts_its_ticks_capped_after_the_frames() {
        // Due at 10 ms, now 95 ms: 8 missed, 9 to count, the next due at 100 ms.
        let (r, missed, next) = Replay::due(10 * MS, 10 * MS, 95 * MS, 10 * MS, 10).unwrap();
        assert_eq!((missed, r.rest(), next), (8, 9, 100 * MS));
        // A stall of 10 s with no frame: two election timeouts and one tick, then from now.
        let (r, missed, next) = Replay::due(10 * MS, 10 * MS, 10_000 * MS, 10 * MS, 10).unwrap();
        assert_eq!((missed, r.rest(), next), (999, 21, 10_010 * MS));
    }

    #[test]
    fn only_a_late_tick_is_a_stalled_one() {
        let (r, missed, _) = Replay::due(10 * MS, 10 * MS, 19 * MS, 10 * MS, 10).unwrap();
        assert_eq!(missed, 0);
        assert!(!r.stalled(), "on time: a timeout may expire");
        let (r, missed, _) = Replay::due(10 * MS, 10 * MS, 20 * MS, 10 * MS, 10).unwrap();
        assert_eq!(missed, 1);
        assert!(
            r.stalled(),
            "a tick was missed: no timeout expires in this replay"
        );
        // An idle loop slept until 50 ms on purpose: waking then, its 5 ticks are on time; a
        // tick past it, they passed in a stall.
        let (r, missed, _) = Replay::due(10 * MS, 50 * MS, 55 * MS, 10 * MS, 10).unwrap();
        assert_eq!(missed, 4);
        assert!(!r.stalled());
        let (r, _, _) = Replay::due(10 * MS, 50 * MS, 60 * MS, 10 * MS, 10).unwrap();
        assert!(r.stalled());
        assert!(Replay::new(3, 10 * MS, 10 * MS, 21).stalled());
    }

    #[test]
    fn frames_come_after_the_ticks_that_passed_before_they_arrived() {
        // 5 ticks due at 10, 20, 30, 40, 50 ms.
        let mut r = Replay::new(5, 10 * MS, 10 * MS, 21);
        assert_eq!(r.before(5 * MS), 0, "a frame before the first tick");
        assert_eq!(r.before(25 * MS), 2, "the ticks of 10 and 20 ms");
        assert_eq!(r.before(25 * MS), 0, "a second frame of the same moment");
        assert_eq!(
            r.before(1_000 * MS),
            2,
            "a late frame: all but the last tick"
        );
        assert_eq!(r.rest(), 1, "the last tick comes after every frame");
    }

    /// A host that records what `replay_stall` asked of it.
    struct Recorder {
        raft: Raft,
        frames: std::collections::VecDeque<(Time, &'static str)>,
        log: Vec<String>,
        overrun_at: Option<&'static str>,
    }

    impl StallHost for Recorder {
        type Frame = &'static str;
        fn raft(&mut self) -> &mut Raft {
            &mut self.raft
        }
        fn feed_data_plane(&mut self, replay: &mut Replay) {
            self.log.push(format!("feed ({} ticks due)", replay.rest()));
        }
        fn next_frame(&mut self) -> Option<(Time, &'static str)> {
            self.frames.pop_front()
        }
        fn step_frame(&mut self, f: &'static str) -> bool {
            self.log.push(f.to_string());
            self.overrun_at == Some(f)
        }
    }

    #[test]
    fn a_stall_replays_the_data_plane_first_then_each_frame_after_its_ticks() {
        let mut h = Recorder {
            raft: crate::testing::single_leader(&[]),
            frames: [(25 * MS, "a"), (1_000 * MS, "b")].into(),
            log: Vec::new(),
            overrun_at: None,
        };
        // 5 ticks due at 10, 20, 30, 40, 50 ms.
        let mut r = Replay::new(5, 10 * MS, 10 * MS, 21);
        assert!(!replay_stall(&mut h, &mut r));
        assert_eq!(h.log, ["feed (5 ticks due)", "a", "b"]);
        assert_eq!(
            r.rest(),
            1,
            "2 ticks before a, 2 before b, the last after both"
        );
        // A frame that holds the loop past the replay ends it: the next waits.
        let mut h = Recorder {
            frames: [(25 * MS, "a"), (30 * MS, "b")].into(),
            log: Vec::new(),
            overrun_at: Some("a"),
            ..h
        };
        let mut r = Replay::new(5, 10 * MS, 10 * MS, 21);
        assert!(replay_stall(&mut h, &mut r));
        assert_eq!(h.log, ["feed (5 ticks due)", "a"]);
        assert_eq!(h.frames.len(), 1);
    }

    #[test]
    fn the_cap_holds_per_gap_not_for_the_whole_stall() {
        // A leader stalled 100 ticks (1 ms each, cap 21): its followers' answers arrived at
        // 5 ms, a ReadIndex request at 70 ms. The request must come after more than an
        // election timeout of ticks since the answers (here: the cap, 21), not after none.
        let mut r = Replay::new(101, MS, MS, 21);
        assert_eq!(r.before(5 * MS), 5);
        assert_eq!(
            r.before(70 * MS),
            21,
            "65 ticks passed: every timer expired"
        );
        assert_eq!(r.before(71 * MS), 1);
        assert_eq!(r.rest(), 21, "30 ticks left, capped");
    }
}
