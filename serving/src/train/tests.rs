//! The trainer's cores: rewards, credits, GAE, behaviour cloning, and whole
//! tiny runs (reproducible by seed, keeping the best held-out weights).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use edgemu_policies::lyreo::learned::{Decision, ACTOR_INPUT};
use edgemu_policies::lyreo::{LearnedModel, LearnedPolicy, PolicySpec, Rollout, Variant};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::advantages::{server_advantages, truncated_gae};
use super::rewards::{learning_rewards, reward_terms, slot_rewards};
use super::*;
use crate::run_episode_with;

fn tiny(variant: Variant) -> TrainConfig {
    TrainConfig::smoke(variant)
}

/// Every tensor's little-endian bytes, in name order. (Whole-file bytes
/// are not compared: `WeightsFile::to_bytes` hands safetensors its
/// metadata as a `HashMap`, whose header order varies run to run.)
fn bytes(v: Variant) -> Vec<u8> {
    let runs = train(&tiny(v), |_| {}).unwrap();
    tensor_bytes(&runs[0].model)
}

fn tensor_bytes(m: &LearnedModel) -> Vec<u8> {
    let w = m.to_weights("t");
    let mut out = Vec::new();
    for name in w.tensor_names() {
        out.extend(name.as_bytes());
        out.extend(
            w.tensor(name)
                .unwrap()
                .1
                .iter()
                .flat_map(|x| x.to_le_bytes()),
        );
    }
    out
}

/// The per-server reward terms sum to the slot rewards, and the
/// per-(slot, server) credit has zero mean within every slot.
#[test]
fn server_terms_sum_to_the_slot_reward_and_credit_is_centred_per_slot() {
    let cfg = tiny(Variant::Lyreo);
    let sc = cfg.scenario(1, 0);
    let model = LearnedModel::new(Variant::Lyreo, 1);
    let rec = Arc::new(Mutex::new(Rollout::default()));
    let policy = LearnedPolicy::sampling(Arc::new(model), 9, rec.clone());
    let spec = PolicySpec::parse("least-loaded").unwrap();
    let o = run_episode_with(&sc, &spec, Box::new(policy)).unwrap();
    let terms = reward_terms(&cfg, &sc, &o, true);
    let slot = slot_rewards(&cfg, &sc, &o);
    for (t, r) in slot.iter().enumerate() {
        let sum: f64 = terms[t * sc.servers..(t + 1) * sc.servers].iter().sum();
        assert!((sum - f64::from(*r)).abs() < 1e-5, "slot {t}: {sum} vs {r}");
    }
    let ro = rec.lock().unwrap().clone();
    let adv = server_advantages(&ro, &terms, sc.servers, 0.9);
    assert_eq!(adv.len(), ro.decisions.len());
    let mut per_slot: HashMap<u64, f32> = HashMap::new();
    for (d, a) in ro.decisions.iter().zip(&adv) {
        *per_slot.entry(d.slot).or_default() += a;
    }
    assert!(per_slot.values().all(|s| s.abs() < 1e-4), "{per_slot:?}");
    assert!(adv.iter().any(|a| *a != 0.0));
}

#[test]
fn training_is_reproducible_by_seed() {
    for v in [Variant::Lyreo, Variant::LyPpo] {
        let a = bytes(v);
        assert_eq!(a, bytes(v), "{}: identical weight bytes", v.name());
        assert_ne!(
            a,
            tensor_bytes(&LearnedModel::new(v, 3)),
            "training changed the weights"
        );
    }
}

#[test]
fn nu_and_budget_reach_every_scenario_and_bad_values_are_refused() {
    let mut c = tiny(Variant::Lyreo);
    c.nu = 2.0;
    c.kv_budget_share = 0.005;
    for s in [c.scenario(3, 1), c.warm_scenario(3), c.eval_scenario(5)] {
        assert_eq!((s.nu, s.kv_budget_share), (2.0, 0.005));
    }
    assert!(c.check().is_ok());
    for bad in [0.0, -1.0, f64::NAN] {
        c.nu = bad;
        let e = c.check().unwrap_err().to_string();
        assert!(e.contains("nu must be a positive number"), "{e}");
    }
}

/// γ = 0.5, λ = 1, a 3-step episode cut by the time limit: the last
/// step bootstraps from V(s_T) = 8 instead of ending.
#[test]
fn truncation_bootstraps_the_last_step() {
    let r = [1.0, 2.0, 4.0];
    let v = [0.0, 0.0, 0.0];
    let (adv, ret) = truncated_gae(&r, &v, 8.0, 0.5, 1.0);
    // G_2 = 4 + .5·8 = 8; G_1 = 2 + .5·8 = 6; G_0 = 1 + .5·6 = 4.
    assert_eq!(ret, vec![4.0, 6.0, 8.0]);
    assert_eq!(adv, ret);
    // With values: δ_2 = 4 + .5·8 − 2 = 6, δ_1 = 2 + .5·2 − 1 = 2,
    // δ_0 = 1 + .5·1 − 3 = −1.5; A_1 = 2 + .5·6 = 5; A_0 = −1.5 + .5·5 = 1.
    let (adv, _) = truncated_gae(&r, &[3.0, 1.0, 2.0], 8.0, 0.5, 1.0);
    assert_eq!(adv, vec![1.0, 5.0, 6.0]);
}

/// A crafted 3-server state: behaviour cloning on Least-Loaded's
/// decisions over varied loads makes the greedy network choose what
/// Least-Loaded chooses.
#[test]
fn behaviour_cloning_makes_greedy_equal_least_loaded() {
    use edgemu_policies::lyreo::{
        LeastLoaded, RequestObs, SchedulingPolicy, ServerObs, SlotLoad, SlotObservation,
    };
    use rand::Rng;
    let server = |eta: f64, v_pre: f64| ServerObs {
        capacity_bytes: 1_000_000,
        kv_bytes_per_token: 1000,
        prefill_tok_s: v_pre,
        decode_step_empty_s: 0.01,
        decode_step_full_s: 0.02,
        bandwidth_hz: 1e7,
        load: SlotLoad {
            eta,
            ..SlotLoad::default()
        },
    };
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let state = |rng: &mut ChaCha8Rng, slot: u64| SlotObservation {
        slot,
        slot_s: 1.0,
        requests: (0..4)
            .map(|i| RequestObs {
                id: slot * 10 + i,
                user: i as usize,
                input_len: rng.random_range(10..200),
                output_len: rng.random_range(10..200),
                solo_rate_bps: vec![1e6; 3],
            })
            .collect(),
        servers: vec![
            server(rng.random_range(0.0..0.6), 1000.0),
            server(rng.random_range(0.0..0.6), 2000.0),
            server(rng.random_range(0.0..0.6), 4000.0),
        ],
        z: vec![0.0; 3],
        epsilon: 0.01,
        nu: 0.5,
    };
    let mut model = LearnedModel::new(Variant::Lyreo, 1);
    let rec = Arc::new(Mutex::new(Rollout::default()));
    let mut teacher = LearnedPolicy::imitating(Arc::new(model.clone()), rec.clone());
    let mut out = Vec::new();
    for t in 0..150 {
        teacher.assign(&state(&mut rng, t), &mut out);
    }
    let mut ro = std::mem::take(&mut *rec.lock().unwrap());
    let raw: Vec<f32> = ro.decisions.iter().flat_map(|d| d.inputs.clone()).collect();
    model.fit_normalization(&raw);
    assert!(model.obs_std.iter().all(|s| *s > 0.0));
    for d in &mut ro.decisions {
        for row in d.inputs.chunks_mut(ACTOR_INPUT) {
            model.normalize_row(row);
        }
    }
    let picks: Vec<&Decision> = ro.decisions.iter().collect();
    let acc = behaviour_clone(&mut model, &picks, 30, 32, 3e-3, &mut rng);
    assert!(acc > 0.97, "training agreement {acc}");
    let model = Arc::new(model);
    let (mut agree, mut total) = (0, 0);
    for t in 1000..1020 {
        let o = state(&mut rng, t);
        let (mut ll, mut net) = (Vec::new(), Vec::new());
        LeastLoaded::new().assign(&o, &mut ll);
        LearnedPolicy::greedy(model.clone()).assign(&o, &mut net);
        agree += ll.iter().zip(&net).filter(|(a, b)| a == b).count();
        total += ll.len();
    }
    assert!(
        agree * 100 >= total * 95,
        "{agree}/{total} held-out decisions agree"
    );
}

#[test]
fn training_keeps_the_best_evaluated_weights_and_writes_eval_points() {
    let runs = train(&tiny(Variant::Lyreo), |_| {}).unwrap();
    let r = &runs[0];
    assert!(r.curve.iter().all(|p| p.eval_lat_s.is_some()));
    let evals: Vec<f64> = r.curve.iter().filter_map(|p| p.eval_lat_s).collect();
    assert!(
        evals.iter().all(|&e| r.best_eval.0 <= e),
        "{:?} {evals:?}",
        r.best_eval
    );
    assert!(r.ll_eval > 0.0);
    assert!(
        r.model.obs_std.iter().any(|s| *s != 1.0),
        "normalization fitted"
    );
}

#[test]
fn rewards_have_one_value_per_slot_and_are_not_positive() {
    let cfg = tiny(Variant::Ppo);
    let sc = cfg.scenario(1, 0);
    let spec = PolicySpec::parse("least-loaded").unwrap();
    let o = crate::run_episode(&sc, &spec).unwrap();
    let r = slot_rewards(&cfg, &sc, &o);
    assert_eq!(r.len(), 12);
    assert!(r.iter().all(|x| *x <= 0.0));
    let total: f64 = o.requests.iter().map(|q| q.e2e_ns as f64 / 1e9).sum();
    let credited: f64 = -r.iter().map(|x| *x as f64).sum::<f64>() * 4.0 / 0.5;
    assert!(credited >= total * 0.999, "every latency is credited once");
    // The learning reward leaves the drain lump out.
    let l = learning_rewards(&cfg, &sc, &o);
    assert!(l[..11] == r[..11] && l[11] >= r[11]);
}
