//! Losses and distributions over discrete actions with masks.
//!
//! A mask is `&[bool]` with `true` for a feasible action; masked actions get
//! probability zero and never win an argmax. At least one action must be
//! feasible.

use rand::Rng;

/// Huber loss of the error `x`: quadratic within `delta`, linear outside.
pub fn huber(x: f32, delta: f32) -> f32 {
    let a = x.abs();
    if a <= delta {
        0.5 * x * x
    } else {
        delta * (a - 0.5 * delta)
    }
}

/// d huber / dx.
pub fn huber_grad(x: f32, delta: f32) -> f32 {
    x.clamp(-delta, delta)
}

/// Mean squared error and its gradient with respect to `pred` written into
/// `grad` (same length).
pub fn mse(pred: &[f32], target: &[f32], grad: &mut [f32]) -> f32 {
    assert_eq!(pred.len(), target.len());
    assert_eq!(pred.len(), grad.len());
    let n = pred.len().max(1) as f32;
    let mut sum = 0.0;
    for ((g, &p), &t) in grad.iter_mut().zip(pred).zip(target) {
        let e = p - t;
        sum += e * e;
        *g = 2.0 * e / n;
    }
    sum / n
}

fn allowed(mask: Option<&[bool]>, i: usize) -> bool {
    mask.is_none_or(|m| m.get(i).copied().unwrap_or(false))
}

/// Index of the largest logit among the allowed ones (lowest index on ties);
/// `None` when the mask allows nothing.
pub fn masked_argmax(values: &[f32], mask: Option<&[bool]>) -> Option<usize> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in values.iter().enumerate() {
        if !allowed(mask, i) {
            continue;
        }
        if best.is_none_or(|(_, bv)| v > bv) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i)
}

/// Log-probabilities of the masked softmax, written into `out`; masked
/// entries get `-inf`.
pub fn log_softmax(logits: &[f32], mask: Option<&[bool]>, out: &mut [f32]) {
    assert_eq!(logits.len(), out.len());
    let max = logits
        .iter()
        .enumerate()
        .filter(|(i, _)| allowed(mask, *i))
        .map(|(_, &v)| v)
        .fold(f32::NEG_INFINITY, f32::max);
    let mut z = 0.0f32;
    for (i, &v) in logits.iter().enumerate() {
        if allowed(mask, i) {
            z += (v - max).exp();
        }
    }
    let lz = max + z.ln();
    for (i, (o, &v)) in out.iter_mut().zip(logits).enumerate() {
        *o = if allowed(mask, i) {
            v - lz
        } else {
            f32::NEG_INFINITY
        };
    }
}

/// Probabilities of the masked softmax, written into `out`.
pub fn softmax(logits: &[f32], mask: Option<&[bool]>, out: &mut [f32]) {
    log_softmax(logits, mask, out);
    out.iter_mut().for_each(|x| *x = x.exp());
}

/// Entropy `−Σ p log p` of a distribution given as probabilities.
pub fn entropy(probs: &[f32]) -> f32 {
    -probs
        .iter()
        .filter(|&&p| p > 0.0)
        .map(|&p| p * p.ln())
        .sum::<f32>()
}

/// Draws an index from the probabilities `probs` (summing to ~1); the last
/// index with positive probability absorbs rounding.
pub fn sample_categorical(probs: &[f32], rng: &mut impl Rng) -> usize {
    let u: f32 = rng.random::<f32>();
    let mut acc = 0.0;
    let mut last = 0;
    for (i, &p) in probs.iter().enumerate() {
        if p > 0.0 {
            acc += p;
            last = i;
            if u < acc {
                return i;
            }
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn huber_is_quadratic_then_linear() {
        assert_eq!(huber(0.5, 1.0), 0.125);
        assert_eq!(huber(-3.0, 1.0), 2.5);
        assert_eq!(huber_grad(-3.0, 1.0), -1.0);
        assert_eq!(huber_grad(0.25, 1.0), 0.25);
    }

    #[test]
    fn masked_softmax_and_argmax() {
        let logits = [1.0, 5.0, 2.0];
        let mask = [true, false, true];
        let mut p = [0.0; 3];
        softmax(&logits, Some(&mask), &mut p);
        assert_eq!(p[1], 0.0);
        assert!((p[0] + p[2] - 1.0).abs() < 1e-6 && p[2] > p[0]);
        assert_eq!(masked_argmax(&logits, Some(&mask)), Some(2));
        assert_eq!(masked_argmax(&logits, Some(&[false; 3])), None);
        assert!((entropy(&[0.5, 0.5]) - 2f32.ln()).abs() < 1e-6);
    }

    #[test]
    fn sampling_follows_probabilities_and_skips_masked() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let probs = [0.25, 0.0, 0.75];
        let mut counts = [0usize; 3];
        for _ in 0..4000 {
            counts[sample_categorical(&probs, &mut rng)] += 1;
        }
        assert_eq!(counts[1], 0);
        assert!(
            (counts[2] as f32 / 4000.0 - 0.75).abs() < 0.05,
            "{counts:?}"
        );
    }

    #[test]
    fn mse_value_and_gradient() {
        let mut g = [0.0; 2];
        assert_eq!(mse(&[1.0, 3.0], &[0.0, 1.0], &mut g), 2.5);
        assert_eq!(g, [1.0, 2.0]);
    }
}
