//! Adam and global gradient-norm clipping over flat parameter vectors.

/// A net (or its gradients) whose parameters are one flat `f32` vector, in the
/// same order for the net and its gradients.
pub trait FlatParams {
    fn flat(&self) -> &[f32];
    fn flat_mut(&mut self) -> &mut [f32];
}

impl FlatParams for Vec<f32> {
    fn flat(&self) -> &[f32] {
        self
    }
    fn flat_mut(&mut self) -> &mut [f32] {
        self
    }
}

/// Adam (Kingma & Ba) with β1 = 0.9, β2 = 0.999, ε = 1e-8 and bias
/// correction. One optimiser per net: its moments are sized on the first step.
#[derive(Debug, Clone)]
pub struct Adam {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    t: u64,
    m: Vec<f32>,
    v: Vec<f32>,
}

impl Adam {
    pub fn new(lr: f32) -> Adam {
        Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            t: 0,
            m: Vec::new(),
            v: Vec::new(),
        }
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.t
    }

    /// One update `θ ← θ − lr · m̂ / (sqrt(v̂) + ε)`.
    ///
    /// # Panics
    /// When `grads` and `params` differ in size, or the net changed size
    /// since the first step (programming errors).
    pub fn step<P: FlatParams + ?Sized, G: FlatParams + ?Sized>(
        &mut self,
        params: &mut P,
        grads: &G,
    ) {
        let p = params.flat_mut();
        let g = grads.flat();
        assert_eq!(p.len(), g.len(), "Adam: params and grads differ in size");
        if self.m.is_empty() {
            self.m = vec![0.0; p.len()];
            self.v = vec![0.0; p.len()];
        }
        assert_eq!(self.m.len(), p.len(), "Adam: net changed size");
        self.t += 1;
        let bc1 = 1.0 - self.beta1.powi(self.t.min(i32::MAX as u64) as i32);
        let bc2 = 1.0 - self.beta2.powi(self.t.min(i32::MAX as u64) as i32);
        let step = self.lr / bc1;
        let bc2_sqrt = bc2.sqrt();
        for i in 0..p.len() {
            let gi = g[i];
            self.m[i] = self.beta1 * self.m[i] + (1.0 - self.beta1) * gi;
            self.v[i] = self.beta2 * self.v[i] + (1.0 - self.beta2) * gi * gi;
            p[i] -= step * self.m[i] / (self.v[i].sqrt() / bc2_sqrt + self.eps);
        }
    }
}

/// Scales `grads` so that their global L2 norm is at most `max`; returns the
/// norm before clipping. Non-finite gradients are zeroed (a step on NaN would
/// poison the net for good) and reported as an infinite norm.
pub fn clip_grad_norm<G: FlatParams + ?Sized>(grads: &mut G, max: f32) -> f32 {
    let g = grads.flat_mut();
    let norm = g
        .iter()
        .map(|x| (*x as f64) * (*x as f64))
        .sum::<f64>()
        .sqrt() as f32;
    if !norm.is_finite() {
        g.iter_mut().for_each(|x| *x = 0.0);
        return f32::INFINITY;
    }
    if norm > max && norm > 0.0 {
        let s = max / norm;
        g.iter_mut().for_each(|x| *x *= s);
    }
    norm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adam_minimises_a_quadratic() {
        let mut p = vec![3.0f32, -2.0];
        let mut adam = Adam::new(0.05);
        for _ in 0..2000 {
            let g: Vec<f32> = p.iter().map(|x| 2.0 * (x - 1.0)).collect();
            adam.step(&mut p, &g);
        }
        assert!(p.iter().all(|x| (x - 1.0).abs() < 1e-2), "{p:?}");
    }

    #[test]
    fn first_adam_step_is_lr_times_sign() {
        let mut p = vec![0.0f32, 0.0];
        let mut adam = Adam::new(0.1);
        adam.step(&mut p, &vec![5.0, -0.01]);
        assert!(
            (p[0] + 0.1).abs() < 1e-5 && (p[1] - 0.1).abs() < 1e-3,
            "{p:?}"
        );
    }

    #[test]
    fn clipping_scales_to_max_and_zeroes_nan() {
        let mut g = vec![3.0f32, 4.0];
        assert_eq!(clip_grad_norm(&mut g, 1.0), 5.0);
        assert!((g[0] - 0.6).abs() < 1e-6 && (g[1] - 0.8).abs() < 1e-6);
        let mut g = vec![0.3f32, 0.4];
        clip_grad_norm(&mut g, 1.0);
        assert_eq!(g, vec![0.3, 0.4]);
        let mut g = vec![f32::NAN, 1.0];
        assert!(clip_grad_norm(&mut g, 1.0).is_infinite());
        assert_eq!(g, vec![0.0, 0.0]);
    }
}
