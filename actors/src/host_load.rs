//! How loaded a host is, measured while it runs: a probe timer on the
//! host's actor thread and the process's CPU time.
//!
//! The probe ([`LoadProbe`]) wakes every [`TICK`] on the same actix system
//! as the host's links, users, servers and schedulers, and notes how late
//! each wake-up came. When those actors keep the thread busy, or the
//! machine has fewer cores than the host's processes need, the probe's
//! wake-ups fall late just as their timers do: a link's delivery, a
//! scheduler's slot decision. The lateness of the last [`WINDOW`] ticks
//! (p50, p99, max, and how many were more than one period late) is what
//! `status`, `/metrics` and the dashboard show, with the CPU cores the
//! process used over the last second (`getrusage`, a system call: no file
//! is read on the actor thread).
//!
//! [`LatenessWindow`] is the core (no clock, no I/O); the probe is its shell.
//! Real time only: in virtual time a timer cannot be late.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;
use edgemu_config::command::HostLoad;

/// The probe's period.
pub const TICK: Duration = Duration::from_millis(10);
/// Ticks the figures cover (5 s).
pub const WINDOW: usize = 500;
/// Ticks between two publications (1 s).
const PUBLISH_EVERY: u64 = 100;

/// The lateness of the last `capacity` ticks, ns.
#[derive(Debug, Clone)]
pub struct LatenessWindow {
    late_ns: VecDeque<u64>,
    capacity: usize,
    period_ns: u64,
}

impl LatenessWindow {
    pub fn new(capacity: usize, period_ns: u64) -> Self {
        LatenessWindow {
            late_ns: VecDeque::with_capacity(capacity),
            capacity: capacity.max(1),
            period_ns,
        }
    }

    /// A tick came `late_ns` after it was due.
    pub fn push(&mut self, late_ns: u64) {
        if self.late_ns.len() == self.capacity {
            self.late_ns.pop_front();
        }
        self.late_ns.push_back(late_ns);
    }

    /// The window's figures with the CPU ones given (`None` before any tick).
    pub fn figures(&self, cpu_cores: f64, cpu_s: f64) -> Option<HostLoad> {
        if self.late_ns.is_empty() {
            return None;
        }
        let mut sorted: Vec<f64> = self.late_ns.iter().map(|&n| n as f64 / 1e6).collect();
        sorted.sort_by(f64::total_cmp);
        let pct = |p: f64| edgemu_stats::percentile(&sorted, p).unwrap_or(0.0);
        Some(HostLoad {
            timer_late_p50_ms: pct(50.0),
            timer_late_p99_ms: pct(99.0),
            timer_late_max_ms: sorted.last().copied().unwrap_or(0.0),
            ticks: sorted.len() as u64,
            late_ticks: self.late_ns.iter().filter(|&&n| n > self.period_ns).count() as u64,
            window_s: sorted.len() as f64 * self.period_ns as f64 / 1e9,
            cpu_cores,
            cpu_s,
        })
    }
}

/// The latest figures of one host, shared with `status` and the metrics.
#[derive(Clone, Default, Debug)]
pub struct HostLoadLive(Arc<Mutex<Option<HostLoad>>>);

impl HostLoadLive {
    pub fn get(&self) -> Option<HostLoad> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, v: Option<HostLoad>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = v;
    }
}

/// CPU seconds (user + system) this process used so far.
fn process_cpu_s() -> Option<f64> {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return None;
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(s(u.ru_utime) + s(u.ru_stime))
}

/// The probe actor (module doc).
pub struct LoadProbe {
    live: HostLoadLive,
    window: LatenessWindow,
    due: Option<Instant>,
    ticks: u64,
    cpu_at: Option<(Instant, f64)>,
    cpu_cores: f64,
}

impl LoadProbe {
    pub fn new(live: HostLoadLive) -> Self {
        LoadProbe {
            live,
            window: LatenessWindow::new(WINDOW, TICK.as_nanos() as u64),
            due: None,
            ticks: 0,
            cpu_at: None,
            cpu_cores: 0.0,
        }
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        let now = Instant::now();
        if let Some(due) = self.due {
            let late = now.saturating_duration_since(due);
            self.window
                .push(u64::try_from(late.as_nanos()).unwrap_or(u64::MAX));
        }
        // The next tick is due one period from now: lateness is measured
        // per wake-up, not accumulated.
        self.due = Some(now + TICK);
        ctx.run_later(TICK, |act, ctx| act.tick(ctx));
        self.ticks += 1;
        if self.ticks.is_multiple_of(PUBLISH_EVERY) {
            let cpu = process_cpu_s();
            if let (Some(c), Some((t0, c0))) = (cpu, self.cpu_at) {
                let wall = now.saturating_duration_since(t0).as_secs_f64();
                if wall > 0.0 {
                    self.cpu_cores = (c - c0).max(0.0) / wall;
                }
            }
            if let Some(c) = cpu {
                self.cpu_at = Some((now, c));
            }
            let cpu_s = cpu.unwrap_or(0.0);
            self.live.set(self.window.figures(self.cpu_cores, cpu_s));
        }
    }
}

impl Actor for LoadProbe {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.cpu_at = process_cpu_s().map(|c| (Instant::now(), c));
        self.tick(ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_keeps_the_last_ticks_and_counts_the_late_ones() {
        let mut w = LatenessWindow::new(4, 10_000_000);
        assert!(w.figures(0.0, 0.0).is_none());
        for late_us in [100, 200, 30_000, 400, 500] {
            w.push(late_us * 1000);
        }
        let f = w.figures(1.5, 3.0).unwrap();
        assert_eq!(f.ticks, 4, "the first tick left the window");
        assert_eq!(f.late_ticks, 1, "30 ms is more than one 10 ms period late");
        assert_eq!(f.timer_late_max_ms, 30.0);
        assert_eq!(
            f.timer_late_p50_ms, 0.4,
            "nearest rank of 0.2, 0.4, 0.5, 30"
        );
        assert_eq!(f.timer_late_p99_ms, 30.0);
        assert!((f.window_s - 0.04).abs() < 1e-12);
        assert_eq!((f.cpu_cores, f.cpu_s), (1.5, 3.0));
    }

    #[test]
    fn process_cpu_time_grows() {
        let a = process_cpu_s().expect("getrusage");
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        assert!(process_cpu_s().unwrap() > a);
    }

    #[actix_rt::test]
    async fn the_probe_publishes_its_figures() {
        let live = HostLoadLive::default();
        LoadProbe::new(live.clone()).start();
        tokio::time::sleep(Duration::from_millis(1300)).await;
        let f = live.get().expect("published after 100 ticks");
        assert!(f.ticks >= 99, "{f:?}");
        assert!(f.cpu_s > 0.0);
    }
}
