//! The request-scheduler core: Lyapunov virtual queues and the policy call.
//!
//! Each slot the scheduler collects the slot's requests and the servers'
//! reports, asks its [`SchedulingPolicy`] for one server per request, and
//! after the slot updates the virtual queues (paper §IV-A)
//!
//! `Z_s(t+1) = max(Z_s(t) + Y_s(t) − ε, 0)`, `Y_s(t) = (η_s(t) − η̄(t))²`,
//!
//! where `η̄` is the mean workload over servers.
//!
//! **Unavailable servers** (see [`crate::availability`]: no report for a
//! timeout, e.g. a killed server): the policy still gets every server —
//! learned policies have a fixed number S of inputs — but an unavailable
//! one is shown full (occupancy, reservation and queued KV at `M_s`, high
//! KV, η = 1), and any request the policy still gives it is moved to the
//! available server with the fewest requests of the slot so far (lowest
//! index on a tie), so nothing is assigned to a server known to be down
//! ([`SchedulerCore::assign_available`]). With no server available the
//! policy's choice stands (the requests fail at the dead servers). In the
//! queues, `η̄` is the mean over available servers and an unavailable
//! server's `Z_s` is held ([`LyapunovQueues::update_available`]). The queues
//! themselves live in `edgemu_policies::lyreo` (LYREO-Count's policy keeps its
//! own count-based ones with the same code).

pub use edgemu_policies::lyreo::LyapunovQueues;
use edgemu_policies::lyreo::{SchedulingPolicy, SlotLoad, SlotObservation};

/// The scheduler: queues plus a policy.
pub struct SchedulerCore {
    queues: LyapunovQueues,
    policy: Box<dyn SchedulingPolicy>,
    assignment: Vec<usize>,
}

impl SchedulerCore {
    pub fn new(servers: usize, epsilon: f64, policy: Box<dyn SchedulingPolicy>) -> Self {
        SchedulerCore {
            queues: LyapunovQueues::new(servers, epsilon),
            policy,
            assignment: Vec::new(),
        }
    }

    pub fn queues(&self) -> &LyapunovQueues {
        &self.queues
    }

    /// Replaces the policy (a hot swap, at a decision boundary); the
    /// Lyapunov queues carry on.
    pub fn set_policy(&mut self, policy: Box<dyn SchedulingPolicy>) {
        self.policy = policy;
    }

    pub fn policy_name(&self) -> &str {
        self.policy.name()
    }

    /// Assigns the observation's requests; the returned indices are checked
    /// to be valid servers (an out-of-range choice is clamped to server 0 —
    /// policies must not produce one; the tests hold them to it).
    pub fn assign(&mut self, obs: &SlotObservation) -> &[usize] {
        self.policy.assign(obs, &mut self.assignment);
        let n = obs.servers.len();
        self.assignment.resize(obs.requests.len(), 0);
        for s in &mut self.assignment {
            if *s >= n {
                *s = 0;
            }
        }
        &self.assignment
    }

    /// Ends a slot with the servers' workloads; returns `Y_s`.
    pub fn end_slot(&mut self, etas: &[f64]) -> Vec<f64> {
        self.queues.update(etas)
    }

    /// [`SchedulerCore::end_slot`] with unavailable servers left out of
    /// the balance (see the module doc).
    pub fn end_slot_available(&mut self, etas: &[f64], available: &[bool]) -> Vec<f64> {
        self.queues.update_available(etas, available)
    }

    /// Fresh Lyapunov queues (a restarted scheduler); the policy stays.
    pub fn reset_queues(&mut self) {
        self.queues = LyapunovQueues::new(self.queues.z().len(), self.queues.epsilon());
    }

    /// [`SchedulerCore::assign`] that never picks a server marked
    /// unavailable in `available` while another is available (see the
    /// module doc); returns the assignment and how many requests were moved
    /// off unavailable servers.
    pub fn assign_available(
        &mut self,
        obs: &SlotObservation,
        available: &[bool],
    ) -> (&[usize], usize) {
        let n = obs.servers.len();
        let all_up = available.len() != n || available.iter().all(|&a| a);
        if all_up || !available.iter().any(|&a| a) {
            return (self.assign(obs), 0);
        }
        let mut shown = obs.clone();
        for (o, _) in shown.servers.iter_mut().zip(available).filter(|(_, &a)| !a) {
            let full = o.capacity_bytes;
            o.load = SlotLoad {
                eta: 1.0,
                peak_bytes: full,
                high_kv: true,
                occupancy_bytes: full,
                reserved_bytes: full,
                waiting_kv_bytes: full,
                backlog: o.load.backlog,
            };
        }
        self.assign(&shown);
        let mut count = vec![0usize; n];
        for &s in &self.assignment {
            if available[s] {
                count[s] += 1;
            }
        }
        let mut moved = 0;
        for s in &mut self.assignment {
            if !available[*s] {
                let to = (0..n)
                    .filter(|&i| available[i])
                    .min_by_key(|&i| (count[i], i))
                    .unwrap_or(*s);
                count[to] += 1;
                *s = to;
                moved += 1;
            }
        }
        (&self.assignment, moved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_policies::lyreo::{RequestObs, ServerObs};

    /// Sends every request to server 0, whatever it sees.
    struct AllToFirst;
    impl SchedulingPolicy for AllToFirst {
        fn name(&self) -> &str {
            "all-to-first"
        }
        fn assign(&mut self, obs: &SlotObservation, out: &mut Vec<usize>) {
            out.clear();
            out.resize(obs.requests.len(), 0);
        }
    }

    fn obs(requests: usize, servers: usize) -> SlotObservation {
        let server = ServerObs {
            capacity_bytes: 1000,
            kv_bytes_per_token: 1,
            prefill_tok_s: 1000.0,
            decode_step_empty_s: 0.01,
            decode_step_full_s: 0.02,
            bandwidth_hz: 1e6,
            load: SlotLoad::default(),
        };
        SlotObservation {
            slot: 0,
            slot_s: 1.0,
            requests: (0..requests)
                .map(|i| RequestObs {
                    id: i as u64,
                    user: i,
                    input_len: 10,
                    output_len: 10,
                    solo_rate_bps: vec![1e6; servers],
                })
                .collect(),
            servers: vec![server; servers],
            z: vec![0.0; servers],
            epsilon: 0.01,
            nu: 0.5,
        }
    }

    #[test]
    fn requests_never_go_to_an_unavailable_server_while_another_is_up() {
        let mut core = SchedulerCore::new(3, 0.01, Box::new(AllToFirst));
        let o = obs(5, 3);
        let (a, moved) = core.assign_available(&o, &[true, true, true]);
        assert_eq!((a.to_vec(), moved), (vec![0; 5], 0));
        // Server 0 down: its five requests spread over 1 and 2, fewest first.
        let (a, moved) = core.assign_available(&o, &[false, true, true]);
        assert_eq!((a.to_vec(), moved), (vec![1, 2, 1, 2, 1], 5));
        // Everything down: the policy's choice stands.
        let (a, moved) = core.assign_available(&o, &[false, false, false]);
        assert_eq!((a.to_vec(), moved), (vec![0; 5], 0));
    }

    #[test]
    fn least_loaded_sees_an_unavailable_server_as_full() {
        let policy = edgemu_policies::lyreo::PolicySpec::parse("least-loaded")
            .expect("least-loaded")
            .build(1);
        let mut core = SchedulerCore::new(2, 0.01, policy);
        let (a, moved) = core.assign_available(&obs(4, 2), &[true, false]);
        assert_eq!(a.to_vec(), vec![0; 4]);
        assert_eq!(
            moved, 0,
            "the policy itself avoided the full-looking server"
        );
    }

    #[test]
    fn unavailable_servers_are_out_of_the_balance_and_hold_their_queue() {
        let mut q = LyapunovQueues::new(3, 0.01);
        q.update(&[0.5, 0.1, 0.3]);
        let z2 = q.z()[2];
        // Server 2 down: mean over (0.4, 0.2) = 0.3, Y = 0.01 each.
        let y = q.update_available(&[0.4, 0.2, 0.0], &[true, true, false]);
        assert!((y[0] - 0.01).abs() < 1e-12 && (y[1] - 0.01).abs() < 1e-12);
        assert_eq!(y[2], 0.0);
        assert_eq!(q.z()[2], z2, "held");
        // All up (or a mask of the wrong length): the plain update.
        let mut a = q.clone();
        let mut b = q.clone();
        a.update_available(&[0.1, 0.2, 0.3], &[true; 3]);
        b.update(&[0.1, 0.2, 0.3]);
        assert_eq!(a, b);
        let mut core = SchedulerCore::new(2, 0.01, Box::new(AllToFirst));
        core.end_slot(&[1.0, 0.0]);
        assert!(core.queues().z()[0] > 0.0);
        core.reset_queues();
        assert_eq!(core.queues().z(), &[0.0, 0.0]);
    }

    #[test]
    fn lyapunov_queues_hand_computed() {
        let mut q = LyapunovQueues::new(2, 0.01);
        // Slot 0: η = (0.5, 0.1), mean 0.3, Y = (0.04, 0.04) → Z = (0.03, 0.03)
        let y = q.update(&[0.5, 0.1]);
        assert!((y[0] - 0.04).abs() < 1e-15 && (y[1] - 0.04).abs() < 1e-15);
        assert!((q.z()[0] - 0.03).abs() < 1e-15);
        // Slot 1: η = (0.3, 0.3), Y = 0 → Z = 0.02
        q.update(&[0.3, 0.3]);
        assert!((q.z()[0] - 0.02).abs() < 1e-15);
        // Slot 2: η = (0.0, 0.4), Y = 0.04 → Z = 0.05
        q.update(&[0.0, 0.4]);
        assert!((q.z()[1] - 0.05).abs() < 1e-15);
        // Three idle slots: 0.04, 0.03, 0.02 ; then never below zero.
        for _ in 0..3 {
            q.update(&[0.2, 0.2]);
        }
        assert!((q.z()[0] - 0.02).abs() < 1e-15);
        for _ in 0..5 {
            q.update(&[0.2, 0.2]);
        }
        assert_eq!(q.z(), &[0.0, 0.0]);
    }
}
