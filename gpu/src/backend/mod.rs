//! The real backend of `edgemu_engine`'s batching engine: the candle model,
//! wall-clock timed ([`real`]). The [`edgemu_engine::Backend`] trait and the
//! modeled backend are in `edgemu-engine`.

pub mod real;

pub use real::RealBackend;

#[cfg(test)]
mod engine_tests;
