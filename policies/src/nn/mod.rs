//! Small neural networks in plain `f32` Rust: no tensor library, deterministic
//! by seed, allocation-free inference.
//!
//! The nets here are tiny (the PriorityFEC Q-network has 5 444 parameters), so
//! a straight loop over row-major weights beats any framework's dispatch
//! overhead, and a decision costs a few microseconds.
//!
//! - [`Mlp`]: fully connected layers with [`Activation`]s; [`Mlp::forward`]
//!   for inference into caller-owned buffers ([`MlpScratch`]),
//!   [`Mlp::forward_train`] records an [`MlpTape`] that [`Mlp::backward`]
//!   turns into accumulated [`MlpGrads`].
//! - [`Lstm`]: a multi-layer LSTM (PyTorch gate order i, f, g, o) with
//!   forward over a sequence and back-propagation through time.
//! - [`Adam`], [`clip_grad_norm`]: optimisation over any [`FlatParams`]
//!   (every net stores all its parameters in one flat vector).
//! - [`loss`]: Huber, MSE, masked softmax / log-softmax, categorical sampling
//!   and entropy.
//! - [`WeightsFile`]: safetensors files with documented tensor names and
//!   metadata, validated on load (see `policies/README.md`).
//!
//! Initialisation (documented contract, reproducible by seed): weights are
//! drawn uniformly in `[-a, a]`, with `a = sqrt(6 / fan_in)` (He uniform) for
//! layers followed by ReLU and `a = sqrt(6 / (fan_in + fan_out))` (Glorot
//! uniform) otherwise; LSTM weights use `a = 1 / sqrt(hidden)` (PyTorch's
//! default); biases start at zero except the LSTM forget-gate bias, which
//! starts at 1 so that early training remembers.

mod activation;
mod error;
pub mod loss;
mod lstm;
mod mlp;
mod optim;
mod weights;

pub use activation::Activation;
pub use error::PolicyError;
pub use loss::{huber, huber_grad, mse};
pub use lstm::{Lstm, LstmGrads, LstmState, LstmTape};
pub use mlp::{Mlp, MlpGrads, MlpScratch, MlpTape};
pub use optim::{clip_grad_norm, Adam, FlatParams};
pub use weights::{Expected, TensorSpec, WeightsFile, MAX_WEIGHTS_BYTES, WEIGHTS_FORMAT};

#[cfg(test)]
mod gradcheck_tests;
