//! CPU time of this process, or of a set of its threads, from `/proc`
//! (user + system, in clock ticks of 10 ms): what an experiment or a bench
//! divides by its work to tell work from waiting for a core on a shared
//! machine. Where `/proc` is not there the clocks read 0.

/// CPU seconds (user + system, all threads) this process has used so far, from
/// `/proc/self/stat`; 0 where that is not available. On a shared machine it
/// tells work from waiting for a core.
pub fn process_cpu_s() -> f64 {
    stat_cpu_s("/proc/self/stat")
}

/// Where CPU seconds are counted: the whole process, or a set of threads —
/// e.g. the thread pool of one of several streams that run side by side
/// (then the process's CPU time would count the others' work too).
#[derive(Debug, Clone, Default)]
pub enum CpuClock {
    #[default]
    Process,
    /// Threads by Linux thread id ([`current_thread_id`]); a pool's start
    /// handler adds its threads.
    Threads(std::sync::Arc<std::sync::Mutex<Vec<u64>>>),
}

impl CpuClock {
    /// CPU seconds used so far (0 where `/proc` is not available).
    pub fn seconds(&self) -> f64 {
        match self {
            CpuClock::Process => process_cpu_s(),
            CpuClock::Threads(ids) => {
                let ids = ids.lock().map(|g| g.clone()).unwrap_or_default();
                ids.iter()
                    .map(|t| stat_cpu_s(&format!("/proc/self/task/{t}/stat")))
                    .sum()
            }
        }
    }
}

/// This thread's Linux thread id, from `/proc/thread-self` (`None` where
/// there is no `/proc`).
pub fn current_thread_id() -> Option<u64> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// User + system CPU seconds of a `/proc/…/stat` file (0 if unreadable).
fn stat_cpu_s(path: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0.0;
    };
    // Fields after the parenthesized command name; utime and stime are the
    // 14th and 15th fields of the line, in clock ticks (100 per second on Linux).
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread clock counts its threads' CPU time and nothing else's.
    #[test]
    fn thread_clock_counts_only_its_threads() {
        use std::sync::{Arc, Mutex};
        let me = current_thread_id().expect("Linux /proc/thread-self");
        let other = std::thread::spawn(|| current_thread_id().unwrap())
            .join()
            .unwrap();
        assert_ne!(me, other);
        let mine = CpuClock::Threads(Arc::new(Mutex::new(vec![me])));
        let t0 = mine.seconds();
        let mut x = 0u64;
        // Spins until this thread's clock has counted 50 ms.
        while mine.seconds() - t0 < 0.05 {
            for i in 0..100_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
        }
        std::hint::black_box(x);
        // The other thread has ended: nothing of it is left to count.
        let theirs = CpuClock::Threads(Arc::new(Mutex::new(vec![other])));
        assert_eq!(theirs.seconds(), 0.0);
        // Read in that order (this thread keeps running); the kernel splits
        // a thread's and the process's run time into user and system ticks
        // separately, so the two may differ by a tick either way.
        let mine_s = mine.seconds();
        let process_s = CpuClock::Process.seconds();
        assert!(process_s + 0.011 >= mine_s, "{process_s} < {mine_s}");
    }
}
