//! The shipped KV-utility profiles of SmolLM2-135M (`gpu/profiles/`),
//! compiled in: `edgemu_engine::shipped_kv_profiles`, re-exported here (the
//! profile format is candle-free, so what only reads profiles does not build
//! the model).

pub use edgemu_engine::shipped_kv_profiles::*;
