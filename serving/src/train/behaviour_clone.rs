//! Behaviour cloning of the actor on recorded decisions (the warm start
//! clones Least-Loaded): cross-entropy of the factorized actor's softmax over
//! servers against the recorded action.

use edgemu_policies::lyreo::learned::{Decision, ACTOR_INPUT};
use edgemu_policies::lyreo::LearnedModel;
use edgemu_policies::nn::loss::log_softmax;
use edgemu_policies::nn::{clip_grad_norm, Adam, MlpGrads};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// Behaviour cloning: `epochs` passes of cross-entropy on the recorded
/// decisions (inputs already normalized as the model sees them), Adam at
/// `lr`, minibatch `minibatch`. Returns the share of decisions whose greedy
/// choice is the recorded action afterwards.
pub fn behaviour_clone(
    model: &mut LearnedModel,
    decisions: &[&Decision],
    epochs: usize,
    minibatch: usize,
    lr: f32,
    rng: &mut ChaCha8Rng,
) -> f64 {
    let mut adam = Adam::new(lr);
    let mut g = MlpGrads::zero_like(&model.actor);
    let mut order: Vec<usize> = (0..decisions.len()).collect();
    let mut logits = Vec::new();
    let mut logp = Vec::new();
    for _ in 0..epochs {
        order.shuffle(rng);
        for chunk in order.chunks(minibatch.max(1)) {
            g.zero();
            let m = chunk.len() as f32;
            for &k in chunk {
                let d = decisions[k];
                let ns = d.inputs.len() / ACTOR_INPUT;
                let tapes: Vec<_> = (0..ns)
                    .map(|s| {
                        model
                            .actor
                            .forward_train(&d.inputs[s * ACTOR_INPUT..(s + 1) * ACTOR_INPUT])
                    })
                    .collect();
                logits.clear();
                logits.extend(tapes.iter().map(|t| t.output()[0]));
                logp.resize(ns, 0.0);
                log_softmax(&logits, None, &mut logp);
                for (s, tape) in tapes.iter().enumerate() {
                    let onehot = if s == d.action { 1.0 } else { 0.0 };
                    let dz = (logp[s].exp() - onehot) / m;
                    model.actor.backward(tape, &[dz], &mut g);
                }
            }
            clip_grad_norm(&mut g, 1.0);
            adam.step(&mut model.actor, &g);
        }
    }
    let mut scratch = model.actor.scratch();
    let mut hits = 0usize;
    for d in decisions {
        let ns = d.inputs.len() / ACTOR_INPUT;
        let mut best = (f32::NEG_INFINITY, 0);
        for s in 0..ns {
            let mut y = [0.0f32];
            model.actor.forward(
                &d.inputs[s * ACTOR_INPUT..(s + 1) * ACTOR_INPUT],
                &mut y,
                &mut scratch,
            );
            if y[0] > best.0 {
                best = (y[0], s);
            }
        }
        hits += usize::from(best.1 == d.action);
    }
    hits as f64 / decisions.len().max(1) as f64
}
