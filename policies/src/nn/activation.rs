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
            Activation::Tanh => v.iter_mut().for_each(|x| *x = tanh(*x)),
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

/// `tanh` through one f64 `exp`: `(e^{2x} − 1)/(e^{2x} + 1)` in f64, rounded
/// to f32 (for `|x| < 1e-4`, `x` itself: `tanh x = x(1 − x²/3 …)` rounds to
/// `x` there; beyond 20, ±1). The f64 error (≤ 1e-12 relative) is far below
/// f32's half-ulp, so this is (nearly always) the correctly rounded tanh;
/// glibc's `tanhf` (through `expm1f`) is within 2 ulps of it and was ≈ 36 %
/// of LYREO training time.
#[inline]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    if a < 1e-4 {
        x
    } else if a > 20.0 {
        x.signum()
    } else {
        let e = (2.0 * f64::from(x)).exp();
        ((e - 1.0) / (e + 1.0)) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the f64 tanh rounded to f32 (at most one ulp: both round an
    /// f64 value), and within 3 ulps of glibc's `tanhf` (measured: 2).
    #[test]
    fn fast_tanh_is_the_rounded_f64_tanh() {
        let ulp = |b: f32| {
            let m = b.abs().max(f32::MIN_POSITIVE);
            f32::from_bits(m.to_bits() + 1) - m
        };
        let mut x = -25.0f32;
        while x < 25.0 {
            let a = tanh(x);
            let exact = f64::from(x).tanh() as f32;
            assert!(
                (a - exact).abs() <= ulp(exact),
                "tanh({x}) = {a} vs {exact}"
            );
            assert!(
                (a - x.tanh()).abs() <= 3.0 * ulp(exact),
                "tanh({x}) = {a} vs tanhf"
            );
            x += 0.000_37;
        }
        assert!(tanh(f32::NAN).is_nan());
        assert_eq!(tanh(0.0), 0.0);
        assert_eq!(tanh(f32::INFINITY), 1.0);
        assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
    }
}
