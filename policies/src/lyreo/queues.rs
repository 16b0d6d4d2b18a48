//! Lyapunov virtual queues (paper §IV-A), one per server:
//!
//! `Z_s(t+1) = max(Z_s(t) + Y_s(t) − ε, 0)`, `Y_s(t) = (w_s(t) − w̄(t))²`,
//!
//! with `w_s` a server's workload of the slot (memory-time `η_s` for the
//! scheduler's queues; active requests / 32 for LYREO-Count's own) and `w̄`
//! the mean over servers. The one implementation: the scheduler core
//! (`edgemu-serving`), LYREO-Count's policy and the trainer's rewards use it.

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

    /// [`LyapunovQueues::update`] over the available servers only: `η̄` is
    /// their mean, and an unavailable server's `Z_s` is held (its `Y_s` is
    /// reported as 0). A mask of the wrong length counts every server.
    pub fn update_available(&mut self, etas: &[f64], available: &[bool]) -> Vec<f64> {
        if available.len() != etas.len() || available.iter().all(|&a| a) {
            return self.update(etas);
        }
        let up: Vec<f64> = etas
            .iter()
            .zip(available)
            .filter(|(_, &a)| a)
            .map(|(&e, _)| e)
            .collect();
        let mut y_up = Self::deviations(&up).into_iter();
        let mut y = Vec::with_capacity(etas.len());
        for (z, &a) in self.z.iter_mut().zip(available) {
            if a {
                let ys = y_up.next().unwrap_or(0.0);
                *z = (*z + ys - self.epsilon).max(0.0);
                y.push(ys);
            } else {
                y.push(0.0);
            }
        }
        y
    }
}
