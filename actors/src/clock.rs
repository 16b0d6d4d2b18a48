//! Run time and timers, the same code under both clocks.
//!
//! Every time in the emulator is nanoseconds since the run's *epoch*, one
//! instant shared by all hosts. In real mode the epoch comes from the unix
//! start time the coordinator announces; in virtual mode it is the start of
//! the paused tokio clock, and time only moves when every task is idle.
//!
//! [`Timer`] wakes an actor at a nanosecond deadline. Tokio's timer wheel has
//! millisecond resolution, which would put up to a millisecond of error on
//! every packet a link releases. In real mode the [`Timer::Precise`] variant
//! runs one OS thread per host that sleeps until the earliest deadline
//! (finishing the last stretch with a short spin) and then sends the actor a
//! [`Wake`]; the actor then releases everything that is due. In virtual mode
//! the tokio timer is exact enough (time is ms-quantized but deterministic,
//! and links record their model arrival time, not the clock).

use actix::prelude::*;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::mpsc;
use std::time::Duration;
use tokio::time::Instant;

/// Converts between tokio instants and run time (ns since the epoch).
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: Instant,
}

impl Clock {
    pub fn new(epoch: Instant) -> Self {
        Clock { epoch }
    }

    /// The epoch is `unix_ns` on the wall clock: map it to a local instant.
    pub fn from_unix_epoch(unix_ns: u64) -> Self {
        let now_unix = unix_now_ns();
        let now = Instant::now();
        let epoch = if unix_ns >= now_unix {
            now + Duration::from_nanos(unix_ns - now_unix)
        } else {
            now.checked_sub(Duration::from_nanos(now_unix - unix_ns))
                .unwrap_or(now)
        };
        Clock { epoch }
    }

    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// Run time now; 0 before the epoch.
    pub fn now_ns(&self) -> u64 {
        let now = Instant::now();
        if now <= self.epoch {
            return 0;
        }
        u64::try_from((now - self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    pub fn instant_at(&self, t_ns: u64) -> Instant {
        self.epoch + Duration::from_nanos(t_ns)
    }

    /// Duration from now until run time `t_ns` (zero if past).
    pub fn until(&self, t_ns: u64) -> Duration {
        // From the instant itself, not from `now_ns`, which is 0 all
        // before the epoch: an actor started ahead of the run still wakes at
        // its run time.
        self.instant_at(t_ns)
            .saturating_duration_since(Instant::now())
    }
}

/// Wall-clock unix time in nanoseconds.
pub fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Sent by a [`Timer`] when a deadline is reached; `generation` lets the
/// actor ignore wake-ups it no longer wants.
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct Wake {
    pub generation: u64,
}

/// How an actor asks to be woken at a nanosecond deadline.
#[derive(Clone)]
pub enum Timer {
    /// tokio timers (`run_later`): right for virtual time.
    Tokio,
    /// A dedicated thread with sub-millisecond accuracy: for real time.
    Precise(PreciseTimer),
}

impl Timer {
    /// Wakes `target` with `Wake { generation }` at run time `t_ns`.
    pub fn wake_at<A>(&self, clock: &Clock, t_ns: u64, generation: u64, ctx: &mut Context<A>)
    where
        A: Actor<Context = Context<A>> + Handler<Wake>,
    {
        match self {
            Timer::Tokio => {
                let wait = clock.until(t_ns);
                ctx.run_later(wait, move |act, ctx| {
                    <A as Handler<Wake>>::handle(act, Wake { generation }, ctx);
                });
            }
            Timer::Precise(p) => {
                p.wake_at(
                    clock.instant_at(t_ns).into_std(),
                    ctx.address().recipient(),
                    generation,
                );
            }
        }
    }
}

struct Deadline {
    at: std::time::Instant,
    seq: u64,
    target: Recipient<Wake>,
    generation: u64,
}

impl PartialEq for Deadline {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Deadline {}
impl PartialOrd for Deadline {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Deadline {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// Handle to the precise-timer thread of one host. Cloning shares the thread;
/// it ends when every handle is dropped.
#[derive(Clone)]
pub struct PreciseTimer {
    tx: mpsc::Sender<(std::time::Instant, Recipient<Wake>, u64)>,
}

/// The timer thread sleeps until `slack + SPIN_MARGIN` before a deadline and
/// spins the rest, since an OS sleep overshoots (Linux adds up to 50 µs of
/// timer slack to every sleep, plus the wake-up itself). `slack` is learned:
/// a running mean of how late the thread's own sleeps end, so it spins a few
/// µs per deadline instead of a fixed stretch (a fixed 60 µs spin kept a core
/// busy at high packet rates, which on a loaded machine delayed the host
/// threads by whole scheduler slices).
const SPIN_MARGIN: Duration = Duration::from_micros(5);
/// Starting guess of the sleep overshoot, and the most one sample may add.
const SLACK_INITIAL: Duration = Duration::from_micros(60);
const SLACK_SAMPLE_MAX: Duration = Duration::from_micros(200);

impl PreciseTimer {
    pub fn start(name: &str) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<(std::time::Instant, Recipient<Wake>, u64)>();
        std::thread::Builder::new()
            .name(format!("timer-{name}"))
            .spawn(move || precise_timer_loop(rx))?;
        Ok(PreciseTimer { tx })
    }

    pub fn wake_at(&self, at: std::time::Instant, target: Recipient<Wake>, generation: u64) {
        // A closed channel means the host is shutting down; nothing to wake.
        let _ = self.tx.send((at, target, generation));
    }
}

fn precise_timer_loop(rx: mpsc::Receiver<(std::time::Instant, Recipient<Wake>, u64)>) {
    let mut heap: BinaryHeap<Reverse<Deadline>> = BinaryHeap::new();
    let mut seq = 0u64;
    // Mean sleep overshoot, ns (exponential moving average, weight 1/8).
    let mut slack_ns = SLACK_INITIAL.as_nanos() as u64;
    loop {
        let now = std::time::Instant::now();
        // Fire everything due.
        while let Some(Reverse(d)) = heap.peek() {
            if d.at <= now {
                if let Some(Reverse(d)) = heap.pop() {
                    d.target.do_send(Wake {
                        generation: d.generation,
                    });
                }
            } else {
                break;
            }
        }
        let next = heap.peek().map(|Reverse(d)| d.at);
        let incoming = match next {
            None => match rx.recv() {
                Ok(v) => Some(v),
                Err(_) => return,
            },
            Some(at) => {
                let now = std::time::Instant::now();
                let left = at.saturating_duration_since(now);
                let early = Duration::from_nanos(slack_ns) + SPIN_MARGIN;
                if left > early {
                    let wake = now + (left - early);
                    match rx.recv_timeout(left - early) {
                        Ok(v) => Some(v),
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            let late = std::time::Instant::now()
                                .saturating_duration_since(wake)
                                .min(SLACK_SAMPLE_MAX);
                            let late_ns = late.as_nanos() as u64;
                            slack_ns = (slack_ns * 7 + late_ns) / 8;
                            None
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                } else {
                    match rx.try_recv() {
                        Ok(v) => Some(v),
                        Err(mpsc::TryRecvError::Empty) => {
                            std::hint::spin_loop();
                            None
                        }
                        Err(mpsc::TryRecvError::Disconnected) => return,
                    }
                }
            }
        };
        if let Some((at, target, generation)) = incoming {
            seq += 1;
            heap.push(Reverse(Deadline {
                at,
                seq,
                target,
                generation,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Before the epoch, a timer still points at its run time: an actor
    /// spawned ahead of the run wakes when the run says, not that long
    /// after it was spawned.
    #[test]
    fn until_counts_from_the_epoch_also_before_it() {
        let hour = Duration::from_secs(3600);
        let c = Clock::new(Instant::now() + hour);
        assert_eq!(c.now_ns(), 0);
        assert!(c.until(0) > hour - Duration::from_secs(60));
        assert!(c.until(0) <= hour);
        let five_s = 5_000_000_000;
        assert!(c.until(five_s) > hour + Duration::from_secs(4));
        // From it on: the time left, zero once past.
        let c = Clock::new(Instant::now());
        assert_eq!(c.until(0), Duration::ZERO);
        assert!(c.until(3600 * 1_000_000_000) > hour - Duration::from_secs(60));
    }
}
