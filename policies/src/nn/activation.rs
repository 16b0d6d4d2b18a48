//! Element-wise activations and their derivatives.

/// The non-linearity after a dense layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activation {
    Relu,
    Tanh,
    Identity,
}

impl Activation {
    /// Applies the activation in place.
    #[inline]
    pub fn apply(self, v: &mut [f32]) {
        match self {
            Activation::Relu => v.iter_mut().for_each(|x| *x = x.max(0.0)),
            Activation::Tanh => v.iter_mut().for_each(|x| *x = x.tanh()),
            Activation::Identity => {}
        }
    }

    /// Derivative expressed through the activation's *output* `y` (all three
    /// allow it, so a tape only keeps post-activations).
    #[inline]
    pub fn grad_from_output(self, y: f32) -> f32 {
        match self {
            Activation::Relu => {
                if y > 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
            Activation::Tanh => 1.0 - y * y,
            Activation::Identity => 1.0,
        }
    }

    /// Half-width of the uniform initialisation for a layer followed by this
    /// activation (He for ReLU, Glorot otherwise).
    pub fn init_bound(self, fan_in: usize, fan_out: usize) -> f32 {
        match self {
            Activation::Relu => (6.0 / fan_in.max(1) as f32).sqrt(),
            _ => (6.0 / (fan_in + fan_out).max(1) as f32).sqrt(),
        }
    }
}
