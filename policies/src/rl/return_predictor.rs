//! LYREO's LSTM return predictor and reward redistribution (§IV-B, after
//! RUDDER).
//!
//! A trajectory of step features `χ_t` (state, action and whatever else the
//! caller encodes) is cut into windows of at most `H` steps. The target of a
//! window starting at `t0` is its truncated return with value bootstrapping,
//! `G = Σ_{k<len} γ^k r_{t0+k} + γ^len · V(s_{t0+len})` (no bootstrap at the
//! end of an episode) — see [`ReturnPredictor::windows`]. The predictor
//! `g_ψ(χ_{0:t})` (a 2-layer LSTM, hidden 64, and a linear head) reads the
//! window's prefix and is fitted so that its prediction at every step
//! approaches `G` (the last step weighs 1, the mean over earlier steps
//! `aux_weight`, RUDDER's auxiliary loss). The redistributed reward is
//! `r'_t = g_t − g_{t−1}` with `g_{−1} = 0`: it sums to the window's
//! predicted return and moves credit to the step where the prediction
//! changed, i.e. to the decision that caused the delayed outcome.
//!
//! [`ReturnPredictor::redistribute_windows`] is what the LYREO trainer uses:
//! with `g_{−1} = 0` every window's first step carries the whole predicted
//! window return (a sawtooth with period `H` that no critic without a time
//! input can follow), so there each window's actual return `G_w` is spread
//! evenly over its steps and only the prediction's *changes* move credit:
//! `r'_t = G_w / n + (g_t − g_{t−1}) − (g_last − ḡ) / n` with
//! `g_{t0−1} = ḡ`, the mean first-step prediction over the episode's windows.
//! The shift terms sum to zero in each window, so `Σ r' = Σ G_w` — the
//! episode's return when the windows carry no bootstrap and `γ = 1`.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::nn::{clip_grad_norm, Activation, Adam, Lstm, LstmGrads, Mlp, MlpGrads};

#[derive(Debug, Clone, PartialEq)]
pub struct ReturnPredictorConfig {
    pub input: usize,
    pub hidden: usize,
    pub layers: usize,
    /// Truncation length H.
    pub horizon: usize,
    pub gamma: f32,
    pub lr: f32,
    pub grad_clip: f32,
    /// Weight of the mean loss over a window's earlier steps.
    pub aux_weight: f32,
    pub seed: u64,
}

impl ReturnPredictorConfig {
    /// The paper's shape (2 layers, hidden 64) over `input` features.
    pub fn new(input: usize, horizon: usize) -> ReturnPredictorConfig {
        ReturnPredictorConfig {
            input,
            hidden: 64,
            layers: 2,
            horizon,
            gamma: 0.98,
            lr: 1e-3,
            grad_clip: 1.0,
            aux_weight: 0.5,
            seed: 0,
        }
    }
}

/// One training window: `steps × input` features and its target return.
#[derive(Debug, Clone, PartialEq)]
pub struct ReturnWindow {
    pub features: Vec<f32>,
    pub target: f32,
}

#[derive(Debug, Clone)]
pub struct ReturnPredictor {
    cfg: ReturnPredictorConfig,
    lstm: Lstm,
    head: Mlp,
    adam_lstm: Adam,
    adam_head: Adam,
}

impl ReturnPredictor {
    pub fn new(cfg: ReturnPredictorConfig) -> ReturnPredictor {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let lstm = Lstm::new(cfg.input, cfg.hidden, cfg.layers, &mut rng);
        let head = Mlp::new(
            &[cfg.hidden, 1],
            Activation::Identity,
            Activation::Identity,
            &mut rng,
        );
        ReturnPredictor {
            adam_lstm: Adam::new(cfg.lr),
            adam_head: Adam::new(cfg.lr),
            lstm,
            head,
            cfg,
        }
    }

    pub fn config(&self) -> &ReturnPredictorConfig {
        &self.cfg
    }
    pub fn lstm(&self) -> &Lstm {
        &self.lstm
    }
    pub fn head(&self) -> &Mlp {
        &self.head
    }

    /// Cuts one trajectory into training windows of at most `H` steps.
    /// `features` is `[T, input]`, `rewards[t]` the reward of step `t`,
    /// `values[t]` the critic's `V(s_t)` (length `T`, or `T + 1` with the
    /// value of the state after the last step); `episode_ends` says the
    /// trajectory ends the episode (no bootstrap after its last step).
    pub fn windows(
        &self,
        features: &[f32],
        rewards: &[f32],
        values: &[f32],
        episode_ends: bool,
    ) -> Vec<ReturnWindow> {
        let d = self.cfg.input;
        let t_len = rewards.len();
        assert_eq!(features.len(), t_len * d, "features must be [T, input]");
        let h = self.cfg.horizon.max(1);
        let mut out = Vec::new();
        let mut t0 = 0;
        while t0 < t_len {
            let end = (t0 + h).min(t_len);
            let mut g = 0.0;
            let mut disc = 1.0;
            for &r in &rewards[t0..end] {
                g += disc * r;
                disc *= self.cfg.gamma;
            }
            let last = end == t_len;
            if !(last && episode_ends) {
                if let Some(&v) = values.get(end) {
                    g += disc * v;
                }
            }
            out.push(ReturnWindow {
                features: features[t0 * d..end * d].to_vec(),
                target: g,
            });
            t0 = end;
        }
        out
    }

    /// `g_t` for every prefix of `features` (`[T, input]`).
    pub fn predict(&self, features: &[f32]) -> Vec<f32> {
        let tape = self.lstm.forward_train(features);
        let mut scratch = self.head.scratch();
        let mut y = [0.0f32];
        (0..tape.steps())
            .map(|t| {
                self.head.forward(tape.output(t), &mut y, &mut scratch);
                y[0]
            })
            .collect()
    }

    /// Redistributed rewards `r'_t = g_t − g_{t−1}` (`g_{−1} = 0`).
    pub fn redistribute(&self, features: &[f32]) -> Vec<f32> {
        let g = self.predict(features);
        let mut prev = 0.0;
        g.iter()
            .map(|&gt| {
                let r = gt - prev;
                prev = gt;
                r
            })
            .collect()
    }

    /// Redistributes every window's target over its steps (see the module
    /// docs): sums to `Σ_w target_w` exactly (up to float rounding).
    pub fn redistribute_windows(&self, windows: &[ReturnWindow]) -> Vec<f32> {
        let preds: Vec<Vec<f32>> = windows.iter().map(|w| self.predict(&w.features)).collect();
        let firsts: Vec<f32> = preds.iter().filter_map(|g| g.first().copied()).collect();
        let g_bar = if firsts.is_empty() {
            0.0
        } else {
            firsts.iter().sum::<f32>() / firsts.len() as f32
        };
        let mut out = Vec::new();
        for (w, g) in windows.iter().zip(&preds) {
            let Some(&last) = g.last() else { continue };
            let n = g.len() as f32;
            let spread = (w.target - (last - g_bar)) / n;
            let mut prev = g_bar;
            for &gt in g {
                out.push(spread + gt - prev);
                prev = gt;
            }
        }
        out
    }

    /// The loss of one window (see the module docs), without training.
    pub fn loss(&self, w: &ReturnWindow) -> f32 {
        let g = self.predict(&w.features);
        window_loss(&g, w.target, self.cfg.aux_weight).0
    }

    /// One Adam step on the mean loss over `batch`; returns that loss.
    pub fn train_step(&mut self, batch: &[ReturnWindow]) -> f32 {
        if batch.is_empty() {
            return 0.0;
        }
        let mut gl = LstmGrads::zero_like(&self.lstm);
        let mut gh = MlpGrads::zero_like(&self.head);
        let n = batch.len() as f32;
        let mut total = 0.0;
        for w in batch {
            let tape = self.lstm.forward_train(&w.features);
            let steps = tape.steps();
            if steps == 0 {
                continue;
            }
            let heads: Vec<_> = (0..steps)
                .map(|t| self.head.forward_train(tape.output(t)))
                .collect();
            let g: Vec<f32> = heads.iter().map(|h| h.output()[0]).collect();
            let (loss, dg) = window_loss(&g, w.target, self.cfg.aux_weight);
            total += loss;
            let mut d_h = vec![0.0; steps * self.cfg.hidden];
            for (t, h) in heads.iter().enumerate() {
                let dx = self.head.backward_input(h, &[dg[t] / n], &mut gh);
                d_h[t * self.cfg.hidden..(t + 1) * self.cfg.hidden].copy_from_slice(&dx);
            }
            self.lstm.backward(&tape, &d_h, &mut gl);
        }
        // One global norm over both parts.
        let norm = (gl.g.iter().chain(&gh.g).map(|x| x * x).sum::<f32>()).sqrt();
        if norm.is_finite() && norm > self.cfg.grad_clip {
            let s = self.cfg.grad_clip / norm;
            gl.scale(s);
            gh.scale(s);
        } else if !norm.is_finite() {
            clip_grad_norm(&mut gl, 0.0);
            clip_grad_norm(&mut gh, 0.0);
        }
        self.adam_lstm.step(&mut self.lstm, &gl);
        self.adam_head.step(&mut self.head, &gh);
        total / n
    }
}

/// Loss `(g_last − G)² + aux · mean_{t<last} (g_t − G)²` and `d loss / d g_t`.
fn window_loss(g: &[f32], target: f32, aux: f32) -> (f32, Vec<f32>) {
    let n = g.len();
    let mut d = vec![0.0; n];
    if n == 0 {
        return (0.0, d);
    }
    let e_last = g[n - 1] - target;
    let mut loss = e_last * e_last;
    d[n - 1] = 2.0 * e_last;
    if n > 1 {
        let m = (n - 1) as f32;
        for t in 0..n - 1 {
            let e = g[t] - target;
            loss += aux * e * e / m;
            d[t] = 2.0 * aux * e / m;
        }
    }
    (loss, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn windows_truncate_and_bootstrap() {
        let mut cfg = ReturnPredictorConfig::new(1, 2);
        cfg.gamma = 0.5;
        cfg.hidden = 4;
        let p = ReturnPredictor::new(cfg);
        let f = [0.0; 5];
        let r = [1.0, 2.0, 3.0, 4.0, 5.0];
        let v = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0];
        let w = p.windows(&f, &r, &v, false);
        let t: Vec<f32> = w.iter().map(|w| w.target).collect();
        // [1 + .5·2 + .25·30, 3 + .5·4 + .25·50, 5 + .5·60]
        assert_eq!(t, vec![9.5, 17.5, 35.0]);
        let w = p.windows(&f, &r, &v, true);
        assert_eq!(w[2].target, 5.0);
        assert_eq!(w[2].features.len(), 1);
    }

    /// A hand-built episode of 5 steps in windows of 2: the redistributed
    /// rewards sum to the episode's return whatever the (untrained)
    /// predictor says, and a window whose prediction never changes gets its
    /// return spread evenly.
    #[test]
    fn window_redistribution_sums_to_the_episode_return() {
        let mut cfg = ReturnPredictorConfig::new(2, 2);
        cfg.gamma = 1.0;
        cfg.hidden = 4;
        cfg.seed = 5;
        let p = ReturnPredictor::new(cfg);
        let f = [0.3, -1.0, 0.7, 0.2, -0.4, 0.9, 1.0, 0.0, 0.5, 0.5];
        let r = [-1.0, -2.0, 0.5, -4.0, -3.0];
        let w = p.windows(&f, &r, &[], true);
        assert_eq!(w.len(), 3);
        assert_eq!(
            w.iter().map(|w| w.target).collect::<Vec<_>>(),
            vec![-3.0, -3.5, -3.0]
        );
        let rr = p.redistribute_windows(&w);
        assert_eq!(rr.len(), 5);
        let total: f32 = rr.iter().sum();
        assert!((total - (-9.5)).abs() < 1e-5, "{rr:?} sums to {total}");
        // Per window, too.
        assert!((rr[0] + rr[1] + 3.0).abs() < 1e-5 && (rr[2] + rr[3] + 3.5).abs() < 1e-5);
        // Identical steps: the prediction changes only between steps through
        // the LSTM state, never by a whole window return at the first step.
        let same = [0.1f32; 4];
        let w = p.windows(&same, &[-10.0, -10.0], &[], true);
        let rr = p.redistribute_windows(&w);
        assert!((rr[0] - rr[1]).abs() < 2.0, "no sawtooth: {rr:?}");
    }

    /// Delayed reward: 8 steps of random bits, the only reward at the end is
    /// the number of ones. The predictor must count.
    #[test]
    fn fits_a_delayed_reward_and_redistributes_it() {
        let mut cfg = ReturnPredictorConfig::new(1, 8);
        cfg.hidden = 8;
        cfg.gamma = 1.0;
        cfg.lr = 1e-2;
        cfg.seed = 2;
        let mut p = ReturnPredictor::new(cfg);
        let mut rng = ChaCha8Rng::seed_from_u64(99);
        let make = |rng: &mut ChaCha8Rng| {
            let bits: Vec<f32> = (0..8)
                .map(|_| if rng.random::<bool>() { 1.0 } else { 0.0 })
                .collect();
            let mut r = vec![0.0; 8];
            r[7] = bits.iter().sum();
            p.windows(&bits, &r, &[], true).remove(0)
        };
        let eval: Vec<ReturnWindow> = (0..32).map(|_| make(&mut rng)).collect();
        let train: Vec<ReturnWindow> = (0..128).map(|_| make(&mut rng)).collect();
        let mean_loss =
            |p: &ReturnPredictor| eval.iter().map(|w| p.loss(w)).sum::<f32>() / eval.len() as f32;
        let start = mean_loss(&p);
        for _ in 0..30 {
            for b in train.chunks(16) {
                p.train_step(b);
            }
        }
        let end = mean_loss(&p);
        assert!(end < 0.1 * start, "loss {start} -> {end}");
        // Credit lands on the ones: redistributed reward at a 1-step exceeds
        // that at a 0-step, and the sum equals the last prediction.
        let x = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0];
        let r = p.redistribute(&x);
        let g = p.predict(&x);
        assert!((r.iter().sum::<f32>() - g[7]).abs() < 1e-4);
        assert!((g[7] - 3.0).abs() < 1.0, "g = {g:?}");
        assert!(r[3] > r[4] && r[5] > r[6], "r' = {r:?}");
    }
}
