//! Learners over plain data: the environments (the handoff harness, the
//! serving harness) live in their own crates, collect transitions or
//! trajectories, and hand them here.
//!
//! - [`DdqnLearner`]: Double DQN with masks (PriorityFEC §IV-D, §V-B).
//! - [`PpoLearner`]: PPO actor-critic with masks and GAE (LYREO §IV-B,
//!   Table I).
//! - [`ReturnPredictor`]: LYREO's LSTM return predictor with truncated
//!   returns, value bootstrapping and reward redistribution.
//!
//! Every learner owns a `ChaCha8Rng` seeded from its config, so a run is
//! reproducible bit for bit from its seed and its input data.

mod ddqn;
mod ppo;
mod replay;
mod return_predictor;

pub use ddqn::{DdqnConfig, DdqnLearner, Transition};
pub use ppo::{gae, PpoConfig, PpoLearner, PpoSample, PpoStats};
pub use replay::ReplayBuffer;
pub use return_predictor::{ReturnPredictor, ReturnPredictorConfig, ReturnWindow};
