//! The request-scheduler core: Lyapunov virtual queues and the policy call.
//!
//! Each slot the scheduler collects the slot's requests and the servers'
//! reports, asks its [`SchedulingPolicy`] for one server per request, and
//! after the slot updates the virtual queues (paper §IV-A)
//!
//! `Z_s(t+1) = max(Z_s(t) + Y_s(t) − ε, 0)`, `Y_s(t) = (η_s(t) − η̄(t))²`,
//!
//! where `η̄` is the mean workload over servers.

use edgemu_policies::lyreo::{SchedulingPolicy, SlotObservation};

/// Virtual queues `Z_s`, one per server.
#[derive(Debug, Clone, PartialEq)]
pub struct LyapunovQueues {
    z: Vec<f64>,
    epsilon: f64,
}

impl LyapunovQueues {
    pub fn new(servers: usize, epsilon: f64) -> Self {
        LyapunovQueues {
            z: vec![0.0; servers],
            epsilon,
        }
    }

    pub fn z(&self) -> &[f64] {
        &self.z
    }

    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    /// The deviations `Y_s = (η_s − η̄)²` of one slot's workloads.
    pub fn deviations(etas: &[f64]) -> Vec<f64> {
        if etas.is_empty() {
            return Vec::new();
        }
        let mean = etas.iter().sum::<f64>() / etas.len() as f64;
        etas.iter().map(|e| (e - mean) * (e - mean)).collect()
    }

    /// Applies one slot's workloads; returns the `Y_s` used.
    pub fn update(&mut self, etas: &[f64]) -> Vec<f64> {
        let y = Self::deviations(etas);
        for (z, y) in self.z.iter_mut().zip(&y) {
            *z = (*z + y - self.epsilon).max(0.0);
        }
        y
    }
}

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
}

#[cfg(test)]
mod tests {
    use super::*;

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
