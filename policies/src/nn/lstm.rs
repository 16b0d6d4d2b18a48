//! A multi-layer LSTM with back-propagation through time.
//!
//! Gates follow PyTorch's `nn.LSTM` (order i, f, g, o):
//! `z = W_ih x + b_ih + W_hh h + b_hh`, `i = σ(z_i)`, `f = σ(z_f)`,
//! `g = tanh(z_g)`, `o = σ(z_o)`, `c' = f c + i g`, `h' = o tanh(c')`.
//! Layer `l` stores, consecutively in the flat vector, `weight_ih` `[4H, in]`,
//! `weight_hh` `[4H, H]`, `bias_ih` `[4H]`, `bias_hh` `[4H]` (exactly PyTorch's
//! `weight_ih_l{l}` … so its `state_dict` maps one to one). Layer 0 reads the
//! input, layer `l > 0` the hidden state of layer `l − 1`; the output is the
//! top layer's hidden state at every step. State starts at zero.

use rand::Rng;

use super::optim::FlatParams;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LstmLayerSpec {
    inputs: usize,
    w_ih: usize,
    w_hh: usize,
    b_ih: usize,
    b_hh: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Lstm {
    input: usize,
    hidden: usize,
    layers: Vec<LstmLayerSpec>,
    params: Vec<f32>,
}

/// Recurrent state for step-by-step inference ([`Lstm::step`]): `h` and `c`
/// of every layer plus scratch, so a step does not allocate.
#[derive(Debug, Clone)]
pub struct LstmState {
    h: Vec<f32>,
    c: Vec<f32>,
    z: Vec<f32>,
    x: Vec<f32>,
}

impl LstmState {
    /// Back to the zero state (a new sequence).
    pub fn reset(&mut self) {
        self.h.iter_mut().for_each(|v| *v = 0.0);
        self.c.iter_mut().for_each(|v| *v = 0.0);
    }
}

/// What one layer recorded over a sequence.
#[derive(Debug, Clone)]
struct LayerTape {
    x: Vec<f32>,      // [T, in]
    gates: Vec<f32>,  // [T, 4H] post-activation i, f, g, o
    c: Vec<f32>,      // [T + 1, H], c[0] = 0
    h: Vec<f32>,      // [T + 1, H], h[0] = 0
    tanh_c: Vec<f32>, // [T, H]
}

/// Record of [`Lstm::forward_train`].
#[derive(Debug, Clone)]
pub struct LstmTape {
    steps: usize,
    layers: Vec<LayerTape>,
}

impl LstmTape {
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// The top layer's hidden state at step `t`.
    pub fn output(&self, t: usize) -> &[f32] {
        let top = self.layers.last().expect("an Lstm has layers");
        let h = top.h.len() / (self.steps + 1);
        &top.h[(t + 1) * h..(t + 2) * h]
    }
}

/// Gradients with the same flat layout as the parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct LstmGrads {
    pub g: Vec<f32>,
}

impl LstmGrads {
    pub fn zero_like(lstm: &Lstm) -> LstmGrads {
        LstmGrads {
            g: vec![0.0; lstm.params.len()],
        }
    }
    pub fn zero(&mut self) {
        self.g.iter_mut().for_each(|x| *x = 0.0);
    }
    pub fn scale(&mut self, s: f32) {
        self.g.iter_mut().for_each(|x| *x *= s);
    }
}

#[inline]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `y += W x`, `W` row-major `[y.len(), x.len()]`.
#[inline]
fn matvec_add(w: &[f32], x: &[f32], y: &mut [f32]) {
    let n = x.len();
    for (o, yo) in y.iter_mut().enumerate() {
        let row = &w[o * n..(o + 1) * n];
        *yo += row.iter().zip(x).map(|(a, b)| a * b).sum::<f32>();
    }
}

/// `x += Wᵀ d`.
#[inline]
fn matvec_t_add(w: &[f32], d: &[f32], x: &mut [f32]) {
    let n = x.len();
    for (o, &dv) in d.iter().enumerate() {
        if dv != 0.0 {
            let row = &w[o * n..(o + 1) * n];
            x.iter_mut().zip(row).for_each(|(xv, wv)| *xv += dv * wv);
        }
    }
}

/// `G += d ⊗ x` for `G` `[d.len(), x.len()]`.
#[inline]
fn outer_add(g: &mut [f32], d: &[f32], x: &[f32]) {
    let n = x.len();
    for (o, &dv) in d.iter().enumerate() {
        if dv != 0.0 {
            let row = &mut g[o * n..(o + 1) * n];
            row.iter_mut().zip(x).for_each(|(gv, xv)| *gv += dv * xv);
        }
    }
}

impl Lstm {
    /// `layers` stacked LSTM layers of width `hidden` over `input` features,
    /// weights uniform in `±1/sqrt(hidden)`, forget-gate biases 1 (in
    /// `bias_ih`), other biases 0.
    pub fn new(input: usize, hidden: usize, layers: usize, rng: &mut impl Rng) -> Lstm {
        let mut lstm = Lstm::zeros(input, hidden, layers);
        let a = 1.0 / (hidden as f32).sqrt();
        for spec in lstm.layers.clone() {
            for w in &mut lstm.params[spec.w_ih..spec.b_ih] {
                *w = rng.random_range(-a..=a);
            }
            for f in &mut lstm.params[spec.b_ih + hidden..spec.b_ih + 2 * hidden] {
                *f = 1.0;
            }
        }
        lstm
    }

    /// All parameters zero (to be filled from a weights file).
    ///
    /// # Panics
    /// On a zero size (a programming error).
    pub fn zeros(input: usize, hidden: usize, layers: usize) -> Lstm {
        assert!(
            input > 0 && hidden > 0 && layers > 0,
            "Lstm sizes must be positive"
        );
        let mut specs = Vec::with_capacity(layers);
        let mut off = 0;
        for l in 0..layers {
            let inputs = if l == 0 { input } else { hidden };
            let w_ih = off;
            let w_hh = w_ih + 4 * hidden * inputs;
            let b_ih = w_hh + 4 * hidden * hidden;
            let b_hh = b_ih + 4 * hidden;
            off = b_hh + 4 * hidden;
            specs.push(LstmLayerSpec {
                inputs,
                w_ih,
                w_hh,
                b_ih,
                b_hh,
            });
        }
        Lstm {
            input,
            hidden,
            layers: specs,
            params: vec![0.0; off],
        }
    }

    pub fn input_dim(&self) -> usize {
        self.input
    }
    pub fn hidden(&self) -> usize {
        self.hidden
    }
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }
    pub fn num_params(&self) -> usize {
        self.params.len()
    }

    /// The four tensors of layer `l` (`weight_ih`, `weight_hh`, `bias_ih`,
    /// `bias_hh`) with their shapes.
    pub fn layer_tensors(&self, l: usize) -> [(&'static str, Vec<usize>, &[f32]); 4] {
        let s = self.layers[l];
        let h4 = 4 * self.hidden;
        [
            (
                "weight_ih",
                vec![h4, s.inputs],
                &self.params[s.w_ih..s.w_hh],
            ),
            (
                "weight_hh",
                vec![h4, self.hidden],
                &self.params[s.w_hh..s.b_ih],
            ),
            ("bias_ih", vec![h4], &self.params[s.b_ih..s.b_hh]),
            ("bias_hh", vec![h4], &self.params[s.b_hh..s.b_hh + h4]),
        ]
    }

    /// Mutable view of tensor `name` of layer `l` (see [`Lstm::layer_tensors`]).
    pub fn layer_tensor_mut(&mut self, l: usize, name: &str) -> Option<&mut [f32]> {
        let s = *self.layers.get(l)?;
        let h4 = 4 * self.hidden;
        let r = match name {
            "weight_ih" => s.w_ih..s.w_hh,
            "weight_hh" => s.w_hh..s.b_ih,
            "bias_ih" => s.b_ih..s.b_hh,
            "bias_hh" => s.b_hh..s.b_hh + h4,
            _ => return None,
        };
        Some(&mut self.params[r])
    }

    /// Zero state for [`Lstm::step`].
    pub fn state(&self) -> LstmState {
        let n = self.layers.len() * self.hidden;
        LstmState {
            h: vec![0.0; n],
            c: vec![0.0; n],
            z: vec![0.0; 4 * self.hidden],
            x: vec![0.0; self.hidden],
        }
    }

    /// One step of inference without allocating; returns the top layer's
    /// hidden state.
    pub fn step<'s>(&self, x: &[f32], state: &'s mut LstmState) -> &'s [f32] {
        assert_eq!(x.len(), self.input, "Lstm input width");
        let hd = self.hidden;
        let LstmState { h, c, z, x: buf } = state;
        for (l, s) in self.layers.iter().enumerate() {
            let p = &self.params;
            z.copy_from_slice(&p[s.b_ih..s.b_hh]);
            z.iter_mut()
                .zip(&p[s.b_hh..s.b_hh + 4 * hd])
                .for_each(|(a, b)| *a += b);
            let input: &[f32] = if l == 0 { x } else { buf };
            matvec_add(&p[s.w_ih..s.w_hh], input, z);
            let hl = &mut h[l * hd..(l + 1) * hd];
            matvec_add(&p[s.w_hh..s.b_ih], hl, z);
            let cl = &mut c[l * hd..(l + 1) * hd];
            for k in 0..hd {
                let i = sigmoid(z[k]);
                let f = sigmoid(z[hd + k]);
                let g = z[2 * hd + k].tanh();
                let o = sigmoid(z[3 * hd + k]);
                cl[k] = f * cl[k] + i * g;
                hl[k] = o * cl[k].tanh();
            }
            buf.copy_from_slice(hl);
        }
        let top = self.layers.len() - 1;
        &h[top * hd..(top + 1) * hd]
    }

    /// Forward over a sequence `xs` (`[T, input]`, flattened) from the zero
    /// state, recording what [`Lstm::backward`] needs.
    pub fn forward_train(&self, xs: &[f32]) -> LstmTape {
        assert_eq!(xs.len() % self.input, 0, "Lstm sequence width");
        let steps = xs.len() / self.input;
        let hd = self.hidden;
        let mut layers: Vec<LayerTape> = Vec::with_capacity(self.layers.len());
        for (l, s) in self.layers.iter().enumerate() {
            let x: Vec<f32> = if l == 0 {
                xs.to_vec()
            } else {
                layers[l - 1].h[hd..].to_vec()
            };
            let mut tape = LayerTape {
                x,
                gates: vec![0.0; steps * 4 * hd],
                c: vec![0.0; (steps + 1) * hd],
                h: vec![0.0; (steps + 1) * hd],
                tanh_c: vec![0.0; steps * hd],
            };
            let p = &self.params;
            for t in 0..steps {
                let z = &mut tape.gates[t * 4 * hd..(t + 1) * 4 * hd];
                z.copy_from_slice(&p[s.b_ih..s.b_hh]);
                z.iter_mut()
                    .zip(&p[s.b_hh..s.b_hh + 4 * hd])
                    .for_each(|(a, b)| *a += b);
                matvec_add(
                    &p[s.w_ih..s.w_hh],
                    &tape.x[t * s.inputs..(t + 1) * s.inputs],
                    z,
                );
                matvec_add(&p[s.w_hh..s.b_ih], &tape.h[t * hd..(t + 1) * hd], z);
                for k in 0..hd {
                    z[k] = sigmoid(z[k]);
                    z[hd + k] = sigmoid(z[hd + k]);
                    z[2 * hd + k] = z[2 * hd + k].tanh();
                    z[3 * hd + k] = sigmoid(z[3 * hd + k]);
                    let c = z[hd + k] * tape.c[t * hd + k] + z[k] * z[2 * hd + k];
                    let tc = c.tanh();
                    tape.c[(t + 1) * hd + k] = c;
                    tape.tanh_c[t * hd + k] = tc;
                    tape.h[(t + 1) * hd + k] = z[3 * hd + k] * tc;
                }
            }
            layers.push(tape);
        }
        LstmTape { steps, layers }
    }

    /// Back-propagation through time: `d_out` is the loss gradient with
    /// respect to the top layer's output at every step (`[T, hidden]`);
    /// parameter gradients are *added* to `grads`. Returns the gradient with
    /// respect to the input sequence.
    pub fn backward(&self, tape: &LstmTape, d_out: &[f32], grads: &mut LstmGrads) -> Vec<f32> {
        let hd = self.hidden;
        let steps = tape.steps;
        assert_eq!(d_out.len(), steps * hd, "Lstm gradient width");
        assert_eq!(grads.g.len(), self.params.len(), "LstmGrads shape");
        let mut d_h_out = d_out.to_vec();
        for l in (0..self.layers.len()).rev() {
            let s = self.layers[l];
            let lt = &tape.layers[l];
            let mut d_x = vec![0.0; steps * s.inputs];
            let mut dh_next = vec![0.0; hd];
            let mut dc_next = vec![0.0; hd];
            let mut dz = vec![0.0; 4 * hd];
            for t in (0..steps).rev() {
                let gates = &lt.gates[t * 4 * hd..(t + 1) * 4 * hd];
                for k in 0..hd {
                    let (i, f, g, o) = (
                        gates[k],
                        gates[hd + k],
                        gates[2 * hd + k],
                        gates[3 * hd + k],
                    );
                    let tc = lt.tanh_c[t * hd + k];
                    let dh = d_h_out[t * hd + k] + dh_next[k];
                    let d_o = dh * tc;
                    let dc = dh * o * (1.0 - tc * tc) + dc_next[k];
                    let d_i = dc * g;
                    let d_g = dc * i;
                    let d_f = dc * lt.c[t * hd + k];
                    dc_next[k] = dc * f;
                    dz[k] = d_i * i * (1.0 - i);
                    dz[hd + k] = d_f * f * (1.0 - f);
                    dz[2 * hd + k] = d_g * (1.0 - g * g);
                    dz[3 * hd + k] = d_o * o * (1.0 - o);
                }
                let x_t = &lt.x[t * s.inputs..(t + 1) * s.inputs];
                let h_prev = &lt.h[t * hd..(t + 1) * hd];
                outer_add(&mut grads.g[s.w_ih..s.w_hh], &dz, x_t);
                outer_add(&mut grads.g[s.w_hh..s.b_ih], &dz, h_prev);
                grads.g[s.b_ih..s.b_hh]
                    .iter_mut()
                    .zip(&dz)
                    .for_each(|(g, d)| *g += d);
                grads.g[s.b_hh..s.b_hh + 4 * hd]
                    .iter_mut()
                    .zip(&dz)
                    .for_each(|(g, d)| *g += d);
                matvec_t_add(
                    &self.params[s.w_ih..s.w_hh],
                    &dz,
                    &mut d_x[t * s.inputs..(t + 1) * s.inputs],
                );
                dh_next.iter_mut().for_each(|v| *v = 0.0);
                matvec_t_add(&self.params[s.w_hh..s.b_ih], &dz, &mut dh_next);
            }
            d_h_out = d_x;
        }
        d_h_out
    }
}

impl FlatParams for Lstm {
    fn flat(&self) -> &[f32] {
        &self.params
    }
    fn flat_mut(&mut self) -> &mut [f32] {
        &mut self.params
    }
}

impl FlatParams for LstmGrads {
    fn flat(&self) -> &[f32] {
        &self.g
    }
    fn flat_mut(&mut self) -> &mut [f32] {
        &mut self.g
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn param_count_matches_pytorch() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let l = Lstm::new(10, 64, 2, &mut rng);
        // PyTorch nn.LSTM(10, 64, 2): 4H(in+H) + 8H per layer.
        let per = |i: usize| 256 * (i + 64) + 512;
        assert_eq!(l.num_params(), per(10) + per(64));
    }

    #[test]
    fn step_matches_forward_train() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let l = Lstm::new(3, 4, 2, &mut rng);
        let xs = [0.1, 0.2, -0.3, 0.5, -0.1, 0.0, 0.9, 0.3, -0.7];
        let tape = l.forward_train(&xs);
        let mut st = l.state();
        for t in 0..3 {
            let h = l.step(&xs[t * 3..(t + 1) * 3], &mut st).to_vec();
            for (a, b) in h.iter().zip(tape.output(t)) {
                assert!((a - b).abs() < 1e-6);
            }
        }
    }
}
