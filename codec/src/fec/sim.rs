//! Simulation helpers shared by the benchmark and the tests: a Gilbert–Elliott
//! loss channel driven by TinyMT32 (deterministic for a seed).

use super::tinymt32::TinyMt32;

/// Two-state Markov loss model: in state Good a packet is lost with probability
/// `eps_g`, in Bad with `eps_b`; after each packet Good → Bad with `p_gb`,
/// Bad → Good with `p_bg`.
#[derive(Debug, Clone)]
pub struct GilbertElliott {
    pub eps_g: f64,
    pub eps_b: f64,
    pub p_gb: f64,
    pub p_bg: f64,
    bad: bool,
    rng: TinyMt32,
}

impl GilbertElliott {
    /// The paper's main channel: (εG, εB, pGB, pBG) = (0.001, 0.5, 0.02, 0.1),
    /// about 8.4 % average loss in bursts.
    pub fn paper(seed: u32) -> Self {
        Self::new(0.001, 0.5, 0.02, 0.1, seed)
    }

    pub fn new(eps_g: f64, eps_b: f64, p_gb: f64, p_bg: f64, seed: u32) -> Self {
        GilbertElliott {
            eps_g,
            eps_b,
            p_gb,
            p_bg,
            bad: false,
            rng: TinyMt32::new(seed),
        }
    }

    /// Stationary loss probability.
    pub fn mean_loss(&self) -> f64 {
        let pi_b = self.p_gb / (self.p_gb + self.p_bg);
        (1.0 - pi_b) * self.eps_g + pi_b * self.eps_b
    }

    /// Whether the next packet is lost.
    pub fn lose(&mut self) -> bool {
        let eps = if self.bad { self.eps_b } else { self.eps_g };
        let lost = self.rng.next_f64() < eps;
        let flip = if self.bad { self.p_bg } else { self.p_gb };
        if self.rng.next_f64() < flip {
            self.bad = !self.bad;
        }
        lost
    }
}
