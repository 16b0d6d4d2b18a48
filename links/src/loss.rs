//! Loss models: which packets the channel erases.
//!
//! Every model answers one question per transmission, "is this packet
//! lost?", drawing from the link's loss RNG. Probabilities are used as given
//! through `u < p` with `u` uniform in [0, 1): a value ≤ 0 (or NaN) never
//! loses, ≥ 1 always does — nothing panics on odd parameters.
//!
//! **Gilbert–Elliott** is a two-state Markov chain (Good, Bad). For each
//! packet, in this order: (1) the packet is lost with probability `eps_g` in
//! Good or `eps_b` in Bad — the state it was sent in; (2) the chain moves
//! Good→Bad with probability `p_gb` or Bad→Good with `p_bg`. The chain starts
//! in Good. Its stationary probability of Bad is `p_gb / (p_gb + p_bg)`, so
//! the long-run loss rate is `(p_gb·eps_b + p_bg·eps_g) / (p_gb + p_bg)`, and
//! a stay in Bad lasts a geometric number of packets with mean `1 / p_bg`.
//! With the PriorityFEC paper's (0.001, 0.50, 0.02, 0.10) that is ≈ 8.42 %
//! loss and bad bursts of 10 packets on average.

use crate::trace::LossTrace;
use crate::LossSpec;
use rand::Rng;
use std::sync::Arc;

/// `true` with probability `p` (clamped to [0, 1]; NaN counts as 0).
fn chance<R: Rng + ?Sized>(rng: &mut R, p: f64) -> bool {
    rng.random::<f64>() < p
}

/// Independent losses with probability `p`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bernoulli {
    pub p: f64,
}

impl Bernoulli {
    /// Decides one packet.
    pub fn lose<R: Rng + ?Sized>(&mut self, rng: &mut R) -> bool {
        chance(rng, self.p)
    }
}

/// State of a [`GilbertElliott`] chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GeState {
    Good,
    Bad,
}

/// The Gilbert–Elliott bursty-loss channel (see the module docs for the
/// order of loss decision and transition).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GilbertElliott {
    pub eps_g: f64,
    pub eps_b: f64,
    pub p_gb: f64,
    pub p_bg: f64,
    state: GeState,
}

impl GilbertElliott {
    /// A chain in state Good.
    pub const fn new(eps_g: f64, eps_b: f64, p_gb: f64, p_bg: f64) -> Self {
        GilbertElliott {
            eps_g,
            eps_b,
            p_gb,
            p_bg,
            state: GeState::Good,
        }
    }

    /// The state the next packet will be sent in.
    pub fn state(&self) -> GeState {
        self.state
    }

    /// Back to Good.
    pub fn reset(&mut self) {
        self.state = GeState::Good;
    }

    /// Decides one packet in the current state, then moves the chain.
    pub fn lose<R: Rng + ?Sized>(&mut self, rng: &mut R) -> bool {
        let (eps, p_move, next) = match self.state {
            GeState::Good => (self.eps_g, self.p_gb, GeState::Bad),
            GeState::Bad => (self.eps_b, self.p_bg, GeState::Good),
        };
        let lost = chance(rng, eps);
        if chance(rng, p_move) {
            self.state = next;
        }
        lost
    }

    /// Stationary probability of being in Bad, `p_gb / (p_gb + p_bg)`. A
    /// chain that never moves (both 0) stays in its starting state, Good.
    pub fn stationary_bad(&self) -> f64 {
        let total = self.p_gb + self.p_bg;
        if total > 0.0 {
            self.p_gb / total
        } else {
            0.0
        }
    }

    /// Long-run loss rate `(p_gb·eps_b + p_bg·eps_g) / (p_gb + p_bg)`.
    pub fn stationary_loss(&self) -> f64 {
        let pi_b = self.stationary_bad();
        pi_b * self.eps_b + (1.0 - pi_b) * self.eps_g
    }

    /// Mean number of consecutive packets sent in Bad, `1 / p_bg`
    /// (infinite when `p_bg` = 0).
    pub fn mean_bad_burst(&self) -> f64 {
        1.0 / self.p_bg
    }

    /// Mean number of consecutive packets sent in Good, `1 / p_gb`.
    pub fn mean_good_burst(&self) -> f64 {
        1.0 / self.p_gb
    }
}

/// A loss model built from a [`LossSpec`], dispatched by kind.
#[derive(Clone, Debug, PartialEq)]
pub enum LossModel {
    None,
    Bernoulli(Bernoulli),
    GilbertElliott(GilbertElliott),
    /// Loss probability looked up in the trace at the send time.
    Trace(Arc<LossTrace>),
}

impl LossSpec {
    /// The long-run fraction of packets the model loses: none 0, Bernoulli
    /// `p`, Gilbert–Elliott [`GilbertElliott::stationary_loss`]; `None` for a
    /// trace (its loss depends on the stretch of the trace a run covers).
    pub fn stationary_loss(&self) -> Option<f64> {
        match self {
            LossSpec::None => Some(0.0),
            LossSpec::Bernoulli { p } => Some(*p),
            &LossSpec::GilbertElliott {
                eps_g,
                eps_b,
                p_gb,
                p_bg,
            } => Some(GilbertElliott::new(eps_g, eps_b, p_gb, p_bg).stationary_loss()),
            LossSpec::Trace(_) => None,
        }
    }
}

impl LossModel {
    /// A fresh model (a Gilbert–Elliott chain starts in Good).
    pub fn from_spec(spec: &LossSpec) -> LossModel {
        match spec {
            LossSpec::None => LossModel::None,
            LossSpec::Bernoulli { p } => LossModel::Bernoulli(Bernoulli { p: *p }),
            &LossSpec::GilbertElliott {
                eps_g,
                eps_b,
                p_gb,
                p_bg,
            } => LossModel::GilbertElliott(GilbertElliott::new(eps_g, eps_b, p_gb, p_bg)),
            LossSpec::Trace(t) => LossModel::Trace(Arc::clone(t)),
        }
    }

    /// Decides one transmission sent at `trace_ns` after the trace origin
    /// (only a trace looks at the time).
    pub fn lose<R: Rng + ?Sized>(&mut self, rng: &mut R, trace_ns: u64) -> bool {
        match self {
            LossModel::None => false,
            LossModel::Bernoulli(b) => b.lose(rng),
            LossModel::GilbertElliott(ge) => ge.lose(rng),
            LossModel::Trace(t) => chance(rng, t.loss_probability_at(trace_ns)),
        }
    }

    /// Fresh state: a Gilbert–Elliott chain goes back to Good.
    pub fn reset(&mut self) {
        if let LossModel::GilbertElliott(ge) = self {
            ge.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn paper() -> GilbertElliott {
        crate::paper_channel::GE
    }

    #[test]
    fn paper_stationary_values() {
        let ge = paper();
        assert!((ge.stationary_loss() - 0.084_166_666).abs() < 1e-6);
        assert!((ge.mean_bad_burst() - 10.0).abs() < 1e-12);
        assert!((ge.stationary_bad() - 1.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn a_loss_spec_knows_its_stationary_loss() {
        assert_eq!(LossSpec::None.stationary_loss(), Some(0.0));
        assert_eq!(
            LossSpec::Bernoulli { p: 0.25 }.stationary_loss(),
            Some(0.25)
        );
        // pGB = 0.2, pBG = 0.6: πB = 1/4, loss = 3/4 · 0.1 + 1/4 · 0.9 = 0.3.
        let ge = LossSpec::GilbertElliott {
            eps_g: 0.1,
            eps_b: 0.9,
            p_gb: 0.2,
            p_bg: 0.6,
        };
        assert!((ge.stationary_loss().unwrap_or(0.0) - 0.3).abs() < 1e-12);
        // A chain that never moves stays in Good.
        let frozen = LossSpec::GilbertElliott {
            eps_g: 0.1,
            eps_b: 0.9,
            p_gb: 0.0,
            p_bg: 0.0,
        };
        assert_eq!(frozen.stationary_loss(), Some(0.1));
        let trace = LossTrace::parse("0 bad\n").unwrap();
        assert_eq!(LossSpec::Trace(Arc::new(trace)).stationary_loss(), None);
    }

    /// Long-run loss of the paper's chain within 5σ of the stationary value.
    /// σ² of the sample mean of a hidden-Markov Bernoulli sequence is
    /// [p(1−p) + 2(εB−εG)²·πG·πB·λ/(1−λ)] / N with λ = 1 − pGB − pBG.
    #[test]
    fn ge_long_run_loss_matches_stationary() {
        let mut ge = paper();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let n = 400_000u32;
        let lost = (0..n).filter(|_| ge.lose(&mut rng)).count();
        let measured = f64::from(lost as u32) / f64::from(n);
        let p = ge.stationary_loss();
        let pi_b = ge.stationary_bad();
        let lambda = 1.0 - ge.p_gb - ge.p_bg;
        let d = ge.eps_b - ge.eps_g;
        let var = p * (1.0 - p) + 2.0 * d * d * pi_b * (1.0 - pi_b) * lambda / (1.0 - lambda);
        let sigma = (var / f64::from(n)).sqrt();
        assert!(
            (measured - p).abs() < 5.0 * sigma,
            "measured {measured}, stationary {p}, 5σ = {}",
            5.0 * sigma
        );
    }

    /// Runs of packets sent in Bad are geometric with mean 1/pBG and
    /// variance (1−pBG)/pBG²; check the sample mean within 5σ.
    #[test]
    fn ge_mean_bad_burst_is_one_over_p_bg() {
        let mut ge = paper();
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut runs: Vec<u64> = Vec::new();
        let mut current = 0u64;
        for _ in 0..400_000 {
            let state = ge.state();
            ge.lose(&mut rng);
            match state {
                GeState::Bad => current += 1,
                GeState::Good if current > 0 => {
                    runs.push(current);
                    current = 0;
                }
                GeState::Good => {}
            }
        }
        let k = runs.len() as f64;
        assert!(k > 4_000.0, "only {k} bad runs");
        let mean = runs.iter().sum::<u64>() as f64 / k;
        let p = ge.p_bg;
        let sigma = ((1.0 - p) / (p * p) / k).sqrt();
        assert!(
            (mean - ge.mean_bad_burst()).abs() < 5.0 * sigma,
            "mean bad run {mean}, expected {}, 5σ = {}",
            ge.mean_bad_burst(),
            5.0 * sigma
        );
    }

    #[test]
    fn loss_is_decided_before_the_transition() {
        // eps_g = 0, eps_b = 1, always moves: the first packet is sent in Good
        // (kept), the chain then alternates.
        let mut ge = GilbertElliott::new(0.0, 1.0, 1.0, 1.0);
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let pattern: Vec<bool> = (0..6).map(|_| ge.lose(&mut rng)).collect();
        assert_eq!(pattern, vec![false, true, false, true, false, true]);
        ge.reset();
        assert_eq!(ge.state(), GeState::Good);
    }

    #[test]
    fn odd_probabilities_do_not_panic() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for p in [f64::NAN, -1.0, 2.0, f64::INFINITY, f64::NEG_INFINITY] {
            let mut ge = GilbertElliott::new(p, p, p, p);
            let mut b = Bernoulli { p };
            for _ in 0..10 {
                ge.lose(&mut rng);
                b.lose(&mut rng);
            }
            let _ = ge.stationary_loss();
            let _ = ge.mean_bad_burst();
        }
        assert!(!Bernoulli { p: f64::NAN }.lose(&mut rng));
        assert!(Bernoulli { p: 1.0 }.lose(&mut rng));
        assert!(!Bernoulli { p: 0.0 }.lose(&mut rng));
        let frozen = GilbertElliott::new(0.1, 0.9, 0.0, 0.0);
        assert_eq!(frozen.stationary_loss(), 0.1);
    }

    #[test]
    fn bernoulli_rate_within_5_sigma() {
        let mut b = Bernoulli { p: 0.1 };
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let n = 200_000u32;
        let lost = (0..n).filter(|_| b.lose(&mut rng)).count() as f64 / f64::from(n);
        let sigma = (0.1f64 * 0.9 / f64::from(n)).sqrt();
        assert!((lost - 0.1).abs() < 5.0 * sigma, "{lost}");
    }
}
