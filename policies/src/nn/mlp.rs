//! A multi-layer perceptron with all parameters in one flat vector.
//!
//! Layer `l` maps `sizes[l]` inputs to `sizes[l + 1]` outputs:
//! `y = act(W x + b)` with `W` row-major `[out, in]` (PyTorch `nn.Linear`
//! layout) followed by `b` `[out]`, stored at consecutive offsets in
//! [`Mlp::params`]. Hidden layers use the hidden activation, the last layer
//! the output activation.

use rand::Rng;

use super::activation::Activation;
use super::optim::FlatParams;

/// Where one dense layer's parameters live in the flat vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LayerSpec {
    pub inputs: usize,
    pub outputs: usize,
    pub w: usize,
    pub b: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Mlp {
    sizes: Vec<usize>,
    layers: Vec<LayerSpec>,
    hidden: Activation,
    out: Activation,
    params: Vec<f32>,
}

/// Two ping-pong buffers of the widest layer, so [`Mlp::forward`] does not
/// allocate.
#[derive(Debug, Clone)]
pub struct MlpScratch {
    a: Vec<f32>,
    b: Vec<f32>,
}

/// Post-activations of every layer (index 0 is the input) of one
/// [`Mlp::forward_train`] pass.
#[derive(Debug, Clone)]
pub struct MlpTape {
    acts: Vec<Vec<f32>>,
}

impl MlpTape {
    /// The network's output.
    pub fn output(&self) -> &[f32] {
        self.acts.last().map(Vec::as_slice).unwrap_or(&[])
    }
}

/// Gradients with the same flat layout as the parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct MlpGrads {
    pub g: Vec<f32>,
}

impl MlpGrads {
    pub fn zero_like(mlp: &Mlp) -> MlpGrads {
        MlpGrads {
            g: vec![0.0; mlp.params.len()],
        }
    }

    pub fn zero(&mut self) {
        self.g.iter_mut().for_each(|x| *x = 0.0);
    }

    /// Multiplies every gradient by `s` (e.g. `1 / batch`).
    pub fn scale(&mut self, s: f32) {
        self.g.iter_mut().for_each(|x| *x *= s);
    }
}

impl Mlp {
    /// A network with layer widths `sizes` (input first, at least two),
    /// initialised from `rng` (He / Glorot uniform, zero biases).
    ///
    /// # Panics
    /// When `sizes` has fewer than two entries or a zero width (a programming
    /// error, not input).
    pub fn new(sizes: &[usize], hidden: Activation, out: Activation, rng: &mut impl Rng) -> Mlp {
        let mut mlp = Mlp::zeros(sizes, hidden, out);
        for l in 0..mlp.layers.len() {
            let spec = mlp.layers[l];
            let act = mlp.activation_of(l);
            let a = act.init_bound(spec.inputs, spec.outputs);
            for w in &mut mlp.params[spec.w..spec.w + spec.inputs * spec.outputs] {
                *w = rng.random_range(-a..=a);
            }
        }
        mlp
    }

    /// A network of the given shape with every parameter zero (to be filled
    /// from a weights file).
    pub fn zeros(sizes: &[usize], hidden: Activation, out: Activation) -> Mlp {
        assert!(
            sizes.len() >= 2,
            "an Mlp needs an input and an output width"
        );
        assert!(
            sizes.iter().all(|&s| s > 0),
            "layer widths must be positive"
        );
        let mut layers = Vec::with_capacity(sizes.len() - 1);
        let mut off = 0;
        for win in sizes.windows(2) {
            let (inputs, outputs) = (win[0], win[1]);
            let w = off;
            let b = w + inputs * outputs;
            off = b + outputs;
            layers.push(LayerSpec {
                inputs,
                outputs,
                w,
                b,
            });
        }
        Mlp {
            sizes: sizes.to_vec(),
            layers,
            hidden,
            out,
            params: vec![0.0; off],
        }
    }

    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }
    pub fn input_dim(&self) -> usize {
        self.sizes[0]
    }
    pub fn output_dim(&self) -> usize {
        *self.sizes.last().unwrap_or(&0)
    }
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }
    pub fn num_params(&self) -> usize {
        self.params.len()
    }
    pub fn hidden_activation(&self) -> Activation {
        self.hidden
    }
    pub fn output_activation(&self) -> Activation {
        self.out
    }

    /// Weight `[out, in]` and bias `[out]` of layer `l`.
    pub fn layer(&self, l: usize) -> (&[f32], &[f32]) {
        let s = self.layers[l];
        (&self.params[s.w..s.b], &self.params[s.b..s.b + s.outputs])
    }

    /// Mutable weight and bias of layer `l`.
    pub fn layer_mut(&mut self, l: usize) -> (&mut [f32], &mut [f32]) {
        let s = self.layers[l];
        let (w, rest) = self.params[s.w..s.b + s.outputs].split_at_mut(s.b - s.w);
        (w, rest)
    }

    fn activation_of(&self, l: usize) -> Activation {
        if l + 1 == self.layers.len() {
            self.out
        } else {
            self.hidden
        }
    }

    /// Buffers for [`Mlp::forward`].
    pub fn scratch(&self) -> MlpScratch {
        let w = self.sizes.iter().copied().max().unwrap_or(0);
        MlpScratch {
            a: vec![0.0; w],
            b: vec![0.0; w],
        }
    }

    /// Inference: writes the output into `out` without allocating.
    ///
    /// # Panics
    /// When `x`, `out` or `scratch` do not match the network (programming
    /// errors).
    pub fn forward(&self, x: &[f32], out: &mut [f32], scratch: &mut MlpScratch) {
        assert_eq!(x.len(), self.input_dim(), "Mlp input width");
        assert_eq!(out.len(), self.output_dim(), "Mlp output width");
        let MlpScratch { a, b } = scratch;
        let n = self.layers.len();
        for (l, spec) in self.layers.iter().enumerate() {
            let act = self.activation_of(l);
            let w = &self.params[spec.w..spec.b];
            let bias = &self.params[spec.b..spec.b + spec.outputs];
            let input: &[f32] = if l == 0 { x } else { &a[..spec.inputs] };
            let dst: &mut [f32] = if l + 1 == n {
                &mut *out
            } else {
                &mut b[..spec.outputs]
            };
            dense(w, bias, input, dst);
            act.apply(dst);
            if l + 1 < n {
                std::mem::swap(a, b);
            }
        }
    }

    /// Forward pass that records what [`Mlp::backward`] needs.
    pub fn forward_train(&self, x: &[f32]) -> MlpTape {
        assert_eq!(x.len(), self.input_dim(), "Mlp input width");
        let mut acts = Vec::with_capacity(self.layers.len() + 1);
        acts.push(x.to_vec());
        for (l, spec) in self.layers.iter().enumerate() {
            let mut y = vec![0.0; spec.outputs];
            dense(
                &self.params[spec.w..spec.b],
                &self.params[spec.b..spec.b + spec.outputs],
                &acts[l],
                &mut y,
            );
            self.activation_of(l).apply(&mut y);
            acts.push(y);
        }
        MlpTape { acts }
    }

    /// Back-propagates `d_out` (the loss gradient with respect to the output)
    /// through the recorded pass and *adds* the parameter gradients to
    /// `grads` (so a minibatch accumulates; zero them between steps).
    pub fn backward(&self, tape: &MlpTape, d_out: &[f32], grads: &mut MlpGrads) {
        self.backward_input(tape, d_out, grads);
    }

    /// Like [`Mlp::backward`], and returns the gradient with respect to the
    /// input (to chain nets, e.g. an LSTM under a head).
    pub fn backward_input(&self, tape: &MlpTape, d_out: &[f32], grads: &mut MlpGrads) -> Vec<f32> {
        assert_eq!(d_out.len(), self.output_dim(), "Mlp gradient width");
        assert_eq!(grads.g.len(), self.params.len(), "MlpGrads shape");
        let mut delta = d_out.to_vec();
        for l in (0..self.layers.len()).rev() {
            let spec = self.layers[l];
            let act = self.activation_of(l);
            let y = &tape.acts[l + 1];
            for (d, &yv) in delta.iter_mut().zip(y) {
                *d *= act.grad_from_output(yv);
            }
            let x = &tape.acts[l];
            let (gw, gb) = grads.g[spec.w..spec.b + spec.outputs].split_at_mut(spec.b - spec.w);
            for (o, &d) in delta.iter().enumerate() {
                gb[o] += d;
                if d != 0.0 {
                    let row = &mut gw[o * spec.inputs..(o + 1) * spec.inputs];
                    for (g, &xv) in row.iter_mut().zip(x) {
                        *g += d * xv;
                    }
                }
            }
            let w = &self.params[spec.w..spec.b];
            let mut dx = vec![0.0; spec.inputs];
            for (o, &d) in delta.iter().enumerate() {
                if d != 0.0 {
                    let row = &w[o * spec.inputs..(o + 1) * spec.inputs];
                    for (g, &wv) in dx.iter_mut().zip(row) {
                        *g += d * wv;
                    }
                }
            }
            delta = dx;
        }
        delta
    }

    /// Copies every parameter from `other` (target-network sync).
    ///
    /// # Panics
    /// When the shapes differ.
    pub fn copy_from(&mut self, other: &Mlp) {
        assert_eq!(self.sizes, other.sizes, "Mlp shapes differ");
        self.params.copy_from_slice(&other.params);
    }
}

impl FlatParams for Mlp {
    fn flat(&self) -> &[f32] {
        &self.params
    }
    fn flat_mut(&mut self) -> &mut [f32] {
        &mut self.params
    }
}

impl FlatParams for MlpGrads {
    fn flat(&self) -> &[f32] {
        &self.g
    }
    fn flat_mut(&mut self) -> &mut [f32] {
        &mut self.g
    }
}

/// `y = W x + b`, `W` row-major `[y.len(), x.len()]`.
#[inline]
pub(crate) fn dense(w: &[f32], b: &[f32], x: &[f32], y: &mut [f32]) {
    let n = x.len();
    for (o, (yo, &bo)) in y.iter_mut().zip(b).enumerate() {
        let row = &w[o * n..(o + 1) * n];
        // Four accumulators break the add dependency chain so the loop
        // vectorises; the order is fixed, so results are deterministic.
        let mut acc = [0.0f32; 4];
        let mut chunks_w = row.chunks_exact(4);
        let mut chunks_x = x.chunks_exact(4);
        for (cw, cx) in (&mut chunks_w).zip(&mut chunks_x) {
            acc[0] += cw[0] * cx[0];
            acc[1] += cw[1] * cx[1];
            acc[2] += cw[2] * cx[2];
            acc[3] += cw[3] * cx[3];
        }
        let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        for (wv, xv) in chunks_w.remainder().iter().zip(chunks_x.remainder()) {
            s += wv * xv;
        }
        *yo = s + bo;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn ddqn_shape_has_5444_params() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let m = Mlp::new(
            &[15, 64, 64, 4],
            Activation::Relu,
            Activation::Identity,
            &mut rng,
        );
        assert_eq!(m.num_params(), 5444);
    }

    #[test]
    fn forward_matches_forward_train_and_is_seeded() {
        let mut r1 = ChaCha8Rng::seed_from_u64(7);
        let mut r2 = ChaCha8Rng::seed_from_u64(7);
        let m1 = Mlp::new(&[5, 8, 3], Activation::Tanh, Activation::Identity, &mut r1);
        let m2 = Mlp::new(&[5, 8, 3], Activation::Tanh, Activation::Identity, &mut r2);
        assert_eq!(m1, m2);
        let x = [0.1, -0.2, 0.3, 0.4, -0.5];
        let mut out = [0.0; 3];
        let mut s = m1.scratch();
        m1.forward(&x, &mut out, &mut s);
        let t = m1.forward_train(&x);
        assert_eq!(t.output(), &out);
        assert!(out.iter().any(|&v| v != 0.0));
    }

    #[test]
    fn hand_computed_single_layer() {
        let mut m = Mlp::zeros(&[2, 2], Activation::Relu, Activation::Relu);
        let (w, b) = m.layer_mut(0);
        w.copy_from_slice(&[1.0, 2.0, -3.0, 1.0]);
        b.copy_from_slice(&[0.5, 0.0]);
        let mut out = [0.0; 2];
        m.forward(&[1.0, 1.0], &mut out, &mut m.scratch());
        assert_eq!(out, [3.5, 0.0]);
    }
}
