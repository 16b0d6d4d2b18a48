//! Gradient checks of [`Mlp`] and [`Lstm`] backward passes against central
//! finite differences, over random shapes, seeds and inputs.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;

/// Compares analytic and numeric gradients for a loss `L = Σ c·y`; a sample
/// of parameters is perturbed by ±h (f32 limits h to ~1e-2 with tanh nets).
fn check(analytic: &[f32], numeric: impl Fn(usize) -> f32, n: usize, rng: &mut ChaCha8Rng) {
    for _ in 0..24 {
        let i = rng.random_range(0..n);
        let a = analytic[i];
        let nu = numeric(i);
        let tol = 2e-2 * (a.abs().max(nu.abs())) + 2e-3;
        assert!(
            (a - nu).abs() <= tol,
            "param {i}: analytic {a} numeric {nu}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn mlp_gradients_match_finite_differences(
        seed in any::<u64>(),
        d_in in 1usize..6, h1 in 1usize..7, h2 in 1usize..7, d_out in 1usize..4,
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mlp = Mlp::new(&[d_in, h1, h2, d_out], Activation::Tanh, Activation::Tanh, &mut rng);
        let x: Vec<f32> = (0..d_in).map(|_| rng.random_range(-1.0..1.0)).collect();
        let c: Vec<f32> = (0..d_out).map(|_| rng.random_range(-1.0..1.0)).collect();
        let loss = |m: &Mlp| -> f32 {
            let mut out = vec![0.0; d_out];
            m.forward(&x, &mut out, &mut m.scratch());
            out.iter().zip(&c).map(|(a, b)| a * b).sum()
        };
        let tape = mlp.forward_train(&x);
        let mut g = MlpGrads::zero_like(&mlp);
        let dx = mlp.backward_input(&tape, &c, &mut g);
        let h = 1e-2;
        let n = mlp.num_params();
        check(&g.g, |i| {
            let mut p = mlp.clone();
            p.flat_mut()[i] += h;
            let up = loss(&p);
            p.flat_mut()[i] -= 2.0 * h;
            (up - loss(&p)) / (2.0 * h)
        }, n, &mut rng);
        // Input gradient too.
        for (k, &dxk) in dx.iter().enumerate() {
            let f = |d: f32| {
                let mut xx = x.clone();
                xx[k] += d;
                let mut out = vec![0.0; d_out];
                mlp.forward(&xx, &mut out, &mut mlp.scratch());
                out.iter().zip(&c).map(|(a, b)| a * b).sum::<f32>()
            };
            let nu = (f(h) - f(-h)) / (2.0 * h);
            prop_assert!((dxk - nu).abs() <= 2e-2 * dxk.abs().max(nu.abs()) + 2e-3);
        }
    }

    #[test]
    fn lstm_gradients_match_finite_differences(
        seed in any::<u64>(),
        d_in in 1usize..4, hidden in 1usize..5, layers in 1usize..3, steps in 1usize..5,
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let lstm = Lstm::new(d_in, hidden, layers, &mut rng);
        let xs: Vec<f32> = (0..steps * d_in).map(|_| rng.random_range(-1.0..1.0)).collect();
        let c: Vec<f32> = (0..steps * hidden).map(|_| rng.random_range(-1.0..1.0)).collect();
        let loss = |m: &Lstm| -> f32 {
            let tape = m.forward_train(&xs);
            (0..steps)
                .flat_map(|t| tape.output(t).to_vec())
                .zip(&c)
                .map(|(a, b)| a * b)
                .sum()
        };
        let tape = lstm.forward_train(&xs);
        let mut g = LstmGrads::zero_like(&lstm);
        let dx = lstm.backward(&tape, &c, &mut g);
        let h = 1e-2;
        check(&g.g, |i| {
            let mut p = lstm.clone();
            p.flat_mut()[i] += h;
            let up = loss(&p);
            p.flat_mut()[i] -= 2.0 * h;
            (up - loss(&p)) / (2.0 * h)
        }, lstm.num_params(), &mut rng);
        prop_assert_eq!(dx.len(), xs.len());
    }
}
