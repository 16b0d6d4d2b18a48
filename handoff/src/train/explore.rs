//! The ε-greedy behaviour policy of a training episode: a frozen snapshot of
//! the online network, uniform over the feasible actions with probability ε.
//! The snapshot is taken at the start of each episode and the learner takes
//! its updates (one every 16 transitions) when the episode's transitions are
//! handed over, so an episode is one call of the unchanged harness.

use edgemu_policies::repair::ddqn::DdqnNet;
use edgemu_policies::repair::{ActionMask, RepairAction, RepairObservation, RepairScheduler};
use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

pub struct ExploringScheduler {
    net: DdqnNet,
    epsilon: f32,
    rng: ChaCha8Rng,
}

impl ExploringScheduler {
    pub fn new(net: DdqnNet, epsilon: f32, seed: u64) -> Self {
        ExploringScheduler {
            net,
            epsilon,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }
}

impl RepairScheduler for ExploringScheduler {
    fn name(&self) -> &str {
        "ddqn-exploring"
    }

    fn decide(&mut self, obs: &RepairObservation, mask: ActionMask) -> RepairAction {
        if self.rng.random::<f32>() < self.epsilon {
            let allowed: Vec<RepairAction> = RepairAction::ALL
                .into_iter()
                .filter(|&a| mask.allows(a))
                .collect();
            if !allowed.is_empty() {
                return allowed[self.rng.random_range(0..allowed.len())];
            }
        }
        self.net
            .greedy(&obs.features, mask)
            .unwrap_or(RepairAction::Source)
    }
}
