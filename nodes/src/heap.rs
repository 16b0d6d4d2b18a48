//! How the process's heap treats large, short-lived buffers.
//!
//! The compute commands (the experiment grids, `profile-kv`, `profile`,
//! `train`, `bench`) allocate and free the same large buffers over and over:
//! a 1 536-token prefill's attention scores, mask and softmax are 85 MB per
//! layer (9 heads × 1 536² × 4 B), the quality evaluator rebuilds a 75 MB cache
//! per handoff. glibc serves anything above its mmap threshold (at most 32 MB,
//! however it adapts) with a fresh `mmap` and returns it with `munmap` on free,
//! so every layer of every prefill faults its pages in again, each one zeroed
//! by the kernel; a heap that shrinks whenever its top is free does the same to
//! the smaller buffers. Measured on one context (`edgemu experiment priorityfec
//! --contexts 1 --realizations 1 --rho 0.8 --batch 32`, release build): 3.0 M
//! minor faults and 10.5–11.6 s of system time against 17.5 s of user time.
//!
//! [`keep_large_buffers`] makes every allocation come from the heap and keeps
//! what is freed there for the next one: no mmap chunks, a 256 MB pad when the
//! heap grows, and no trimming until 2 GiB at its top are free (the most
//! `mallopt` takes; one context of the grid faults as often, 1.62 M, as with
//! a 4 GiB threshold set through `GLIBC_TUNABLES`). A thread other than the
//! main one allocates from an arena of 64 MB heaps, and glibc still maps a
//! request larger than that; the prefill's large tensors are made on the
//! calling thread, whose arena is the main heap.
//!
//! The same run then takes 0.76 M faults (the first touch of its ≈ 3 GB peak)
//! and 4.4–4.8 s of system time; one whole context (`--contexts 1 --batch
//! 32`, 200 handoffs) 1.6 M faults instead of 6.3–6.5 M, system time 16–21 s
//! instead of 30–33 s and 0.87–0.89× the wall time. The results are the
//! same bytes (allocation does not change arithmetic). The price is that
//! memory freed after a peak stays with the process until it exits, which
//! suits a command that runs to completion; the long-lived `run` and `node`
//! processes keep glibc's defaults.

/// Switch glibc's malloc to keeping large buffers (module docs). Call before
/// the work starts; a no-op where the allocator is not glibc's.
pub fn keep_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // Each call only sets a parameter of the allocator; a refused one
        // (0) leaves glibc's default, which is correct, only slower.
        let settings = [
            (libc::M_MMAP_MAX, 0),
            (libc::M_TOP_PAD, 256 << 20),
            (libc::M_TRIM_THRESHOLD, i32::MAX),
        ];
        for (param, value) in settings {
            // SAFETY: mallopt takes two ints and only changes malloc's tuning;
            // it is safe to call at any time, from any thread.
            let ok = unsafe { libc::mallopt(param, value) };
            if ok == 0 {
                tracing::debug!(param, value, "mallopt refused a setting");
            }
        }
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// With the settings applied, a buffer above glibc's largest mmap
    /// threshold (32 MB) comes from the heap: the count of mmapped chunks does
    /// not grow. (Other tests' threads can only lower that count meanwhile;
    /// without the settings this allocation alone adds one.) 40 MB, because a
    /// test runs on a thread of its own, whose arena is a 64 MB mmapped heap
    /// and still maps anything larger (module docs).
    #[test]
    fn large_buffers_come_from_the_heap() {
        keep_large_buffers();
        // SAFETY: mallinfo2 only reads malloc's statistics.
        let before = unsafe { libc::mallinfo2() }.hblks;
        let big: Vec<u8> = Vec::with_capacity(40 << 20);
        let big = std::hint::black_box(big);
        let during = unsafe { libc::mallinfo2() }.hblks;
        drop(big);
        assert!(
            during <= before,
            "a 40 MB buffer was mmapped ({before} → {during} mmapped chunks)"
        );
    }
}
