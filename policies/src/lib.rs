//! Policies: small neural networks with safetensors weights (`nn`), generic
//! learners (`rl`: Double DQN, PPO), the KV-handoff repair schedulers
//! (`repair`: PriorityFEC DDQN and baselines) and the request-scheduling
//! policies (`lyreo`: LYREO family and baselines), and the shipped trained
//! weights compiled in (`shipped`). Decision rules only: the
//! environments they act in live in `edgemu-handoff` and `edgemu-serving`.
pub mod external;
pub mod lyreo;
pub mod nn;
pub mod repair;
pub mod rl;
pub mod shipped;
pub mod slot;
