use super::*;

fn server(eta: f64, cap: u64) -> ServerObs {
    ServerObs {
        capacity_bytes: cap,
        kv_bytes_per_token: 1000,
        prefill_tok_s: 1000.0,
        decode_step_empty_s: 0.01,
        decode_step_full_s: 0.02,
        bandwidth_hz: 1e7,
        load: SlotLoad {
            eta,
            ..SlotLoad::default()
        },
    }
}

fn req(id: u64, lin: u32, lout: u32) -> RequestObs {
    RequestObs {
        id,
        user: id as usize,
        input_len: lin,
        output_len: lout,
        solo_rate_bps: vec![1e6; 3],
    }
}

fn obs(servers: Vec<ServerObs>, requests: Vec<RequestObs>) -> SlotObservation {
    let n = servers.len();
    SlotObservation {
        slot: 0,
        slot_s: 1.0,
        requests,
        servers,
        z: vec![0.0; n],
        epsilon: 0.01,
        nu: 0.5,
    }
}

#[test]
fn least_loaded_fills_the_lightest_server_and_updates_within_the_slot() {
    // η: 0.30, 0.10, 0.12 ; capacity 1 MB each.
    let o = obs(
        vec![
            server(0.30, 1_000_000),
            server(0.10, 1_000_000),
            server(0.12, 1_000_000),
        ],
        vec![req(1, 100, 100), req(2, 100, 100), req(3, 10, 10)],
    );
    // Request workload (100 in, 100 out): 1000·150 B × (0.1 + 1.0) s / 1e6 = 0.165.
    let w = LeastLoaded::request_workload(&o, 0, 1);
    assert!((w - 0.165).abs() < 1e-12, "{w}");
    let mut ll = LeastLoaded::new();
    let mut out = Vec::new();
    ll.assign(&o, &mut out);
    // 1 → server 1 (0.10 → 0.265); 2 → server 2 (0.12 → 0.285);
    // 3 → server 1 (0.265 < 0.285 < 0.30).
    assert_eq!(out, vec![1, 2, 1]);
    // Ties go to the lowest index.
    let o = obs(
        vec![server(0.2, 1_000_000), server(0.2, 1_000_000)],
        vec![req(1, 1, 1)],
    );
    ll.assign(&o, &mut out);
    assert_eq!(out, vec![0]);
}

#[test]
fn least_loaded_counts_queued_kv() {
    let mut a = server(0.1, 1_000_000);
    a.load.waiting_kv_bytes = 500_000; // +0.5
    let o = obs(vec![a, server(0.3, 1_000_000)], vec![req(1, 10, 10)]);
    let mut out = Vec::new();
    LeastLoaded::new().assign(&o, &mut out);
    assert_eq!(out, vec![1]);
}

#[test]
fn random_is_uniform_seeded_and_in_range() {
    let servers: Vec<ServerObs> = (0..4).map(|_| server(0.0, 1_000_000)).collect();
    let requests: Vec<RequestObs> = (0..4000).map(|i| req(i, 10, 10)).collect();
    let o = obs(servers, requests);
    let mut out = Vec::new();
    RandomPolicy::new(7).assign(&o, &mut out);
    let mut again = Vec::new();
    RandomPolicy::new(7).assign(&o, &mut again);
    assert_eq!(out, again, "same seed, same draws");
    let mut counts = [0usize; 4];
    for &s in &out {
        counts[s] += 1;
    }
    // Each server expects 1000 (sd ≈ 27); 5 sd either side.
    for c in counts {
        assert!((865..=1135).contains(&c), "{counts:?}");
    }
    let mut other = Vec::new();
    RandomPolicy::new(8).assign(&o, &mut other);
    assert_ne!(out, other);
}

#[test]
fn policy_names() {
    let s = PolicySpec::parse("static").unwrap();
    assert_eq!(s.batching, ServerBatching::Static);
    let inner = if Variant::Lyreo.has_default_weights() {
        "lyreo"
    } else {
        "least-loaded"
    };
    assert_eq!(s.assignment, inner);
    let s = PolicySpec::parse("Static:Random").unwrap();
    assert_eq!(
        (s.batching, s.assignment.as_str()),
        (ServerBatching::Static, "random")
    );
    assert_eq!(PolicySpec::parse("LL").unwrap().assignment, "least-loaded");
    let e = PolicySpec::parse("fastest").unwrap_err().to_string();
    assert!(
        e.contains("fastest") && e.contains("least-loaded, random, static"),
        "{e}"
    );
    let e = PolicySpec::parse("lyreo=/nonexistent/w.safetensors")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("learned") && e.contains("/nonexistent/w.safetensors"),
        "{e}"
    );
}

#[test]
fn pair_features_are_finite_and_sized() {
    let o = obs(vec![server(0.2, 1_000_000)], vec![req(1, 70, 215)]);
    let mut f = [0f32; PAIR_FEATURES];
    o.pair_features(0, 0, &mut f);
    assert!(f.iter().all(|x| x.is_finite()));
    assert!((f[9] - 0.2).abs() < 1e-6);
}

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("edgemu-lyreo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn paper_like_obs(servers: usize, requests: usize) -> SlotObservation {
    let s: Vec<ServerObs> = (0..servers)
        .map(|i| server(0.01 * i as f64, 10_000_000_000))
        .collect();
    let mut r: Vec<RequestObs> = (0..requests as u64).map(|i| req(i, 70, 215)).collect();
    for q in &mut r {
        q.solo_rate_bps = vec![2e7; servers];
    }
    obs(s, r)
}

/// The weights trained at `--kv-budget-share 0.005` (docs/experiments/lyreo.md)
/// are a complete second set: every variant, each loading as its own kind.
#[test]
fn the_kv_budget_weights_are_a_complete_valid_set() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("weights/kv-budget-0.005");
    for v in Variant::ALL {
        let path = dir.join(format!("{}.safetensors", v.name()));
        let spec = PolicySpec::parse(&format!("{}={}", v.name(), path.display()))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let o = paper_like_obs(8, 40);
        let mut out = Vec::new();
        spec.build(1).assign(&o, &mut out);
        assert!(
            out.len() == 40 && out.iter().all(|&s| s < 8),
            "{}",
            v.name()
        );
    }
}

#[test]
fn every_shipped_learned_policy_loads_and_assigns_valid_servers() {
    let shipped: Vec<Variant> = Variant::ALL
        .into_iter()
        .filter(|v| v.has_default_weights())
        .collect();
    assert!(
        shipped.contains(&Variant::Lyreo),
        "lyreo's weights must be shipped (or in $EDGEMU_WEIGHTS_DIR)"
    );
    for v in shipped {
        let spec = PolicySpec::parse(v.name()).unwrap();
        assert_eq!(spec.assignment, v.name());
        for (ns, nr) in [(8, 40), (3, 5), (12, 1)] {
            let o = paper_like_obs(ns, nr);
            let mut out = Vec::new();
            spec.build(1).assign(&o, &mut out);
            assert_eq!(out.len(), nr, "{}", v.name());
            assert!(out.iter().all(|&s| s < ns), "{}: {out:?}", v.name());
        }
    }
}

#[test]
fn learned_policy_round_trips_and_sampling_records_every_decision() {
    let m = LearnedModel::new(Variant::LyPpo, 9);
    let p = tmp("rt.safetensors");
    m.save(&p, "test").unwrap();
    let back = LearnedModel::load(&p, Variant::LyPpo).unwrap();
    assert_eq!(back, m);
    let spec = PolicySpec::parse(&format!("ly-ppo={}", p.display())).unwrap();
    assert_eq!(spec.learned.as_ref().unwrap().0.as_ref(), &m);
    let rec = std::sync::Arc::new(std::sync::Mutex::new(Rollout::default()));
    let mut pol = LearnedPolicy::sampling(std::sync::Arc::new(m), 3, rec.clone());
    let o = paper_like_obs(4, 6);
    let mut out = Vec::new();
    pol.assign(&o, &mut out);
    let r = rec.lock().unwrap();
    assert_eq!(r.decisions.len(), 6);
    assert_eq!(r.critic_inputs.len(), 1);
    for (d, &a) in r.decisions.iter().zip(&out) {
        assert_eq!(d.action, a);
        assert!(d.logp <= 0.0 && d.logp.is_finite());
        assert_eq!(d.inputs.len(), 4 * learned::ACTOR_INPUT);
    }
}

#[test]
fn bad_weights_files_are_refused_with_a_clear_error() {
    use crate::nn::WeightsFile;
    let m = LearnedModel::new(Variant::Lyreo, 1);
    let good = m.to_weights("t");
    // Wrong tensor name.
    let mut w = WeightsFile::new(learned::WEIGHTS_KIND, learned::WEIGHTS_VERSION);
    for name in good.tensor_names() {
        let (shape, data) = good.tensor(name).unwrap();
        let n = if name == "actor.0.weight" {
            "actor.0.weights"
        } else {
            name
        };
        w.insert(n, shape.to_vec(), data.to_vec());
    }
    let p = tmp("names.safetensors");
    w.save(&p).unwrap();
    let e = LearnedModel::load(&p, Variant::Lyreo)
        .unwrap_err()
        .to_string();
    assert!(e.contains("actor.0.weight"), "{e}");
    // Wrong shape (a 12-input actor).
    let mut w = good.clone();
    w.insert("actor.0.weight", vec![64, 12], vec![0.0; 64 * 12]);
    let p = tmp("shape.safetensors");
    w.save(&p).unwrap();
    let e = LearnedModel::load(&p, Variant::Lyreo)
        .unwrap_err()
        .to_string();
    assert!(e.contains("actor.0.weight"), "{e}");
    // NaN.
    let mut w = good.clone();
    let (shape, data) = good.tensor("critic.2.bias").unwrap();
    let mut data = data.to_vec();
    data[3] = f32::NAN;
    w.insert("critic.2.bias", shape.to_vec(), data);
    let p = tmp("nan.safetensors");
    w.save(&p).unwrap();
    let e = LearnedModel::load(&p, Variant::Lyreo)
        .unwrap_err()
        .to_string();
    assert!(e.contains("critic.2.bias"), "{e}");
    let e = PolicySpec::parse(&format!("lyreo={}", p.display()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("critic.2.bias") && e.contains("lyreo"), "{e}");
    // Another policy's file.
    let mut w = good;
    w.kind = "repair-ddqn".into();
    let p = tmp("kind.safetensors");
    w.save(&p).unwrap();
    let e = LearnedModel::load(&p, Variant::Lyreo)
        .unwrap_err()
        .to_string();
    assert!(e.contains("repair-ddqn") || e.contains("kind"), "{e}");
}

#[test]
fn fitted_normalization_round_trips_through_the_weights_file() {
    let mut m = LearnedModel::new(Variant::Lyreo, 4);
    // Two features per column at very different scales; column 3 constant.
    let mut rows = Vec::new();
    for i in 0..50 {
        let mut row = vec![0.0f32; learned::ACTOR_INPUT];
        for (k, x) in row.iter_mut().enumerate() {
            *x = if k == 3 {
                7.0
            } else {
                (i as f32 - 24.5) * 10f32.powi(k as i32 % 5 - 4) + k as f32
            };
        }
        rows.extend(row);
    }
    m.fit_normalization(&rows);
    assert_eq!(m.obs_std[3], 1.0, "a constant feature keeps std 1");
    assert!((m.obs_mean[3] - 7.0).abs() < 1e-6);
    for k in [0, 1, 2, 4, 12] {
        // Column k: mean k, std = 10^(k%5−4) · std(−24.5..24.5) ≈ 14.43.
        assert!((m.obs_mean[k] - k as f32).abs() < 1e-3, "{k}");
        let want = 10f32.powi(k as i32 % 5 - 4) * 14.430869;
        assert!(
            (m.obs_std[k] / want - 1.0).abs() < 1e-3,
            "{k}: {}",
            m.obs_std[k]
        );
    }
    let mut row = rows[..learned::ACTOR_INPUT].to_vec();
    m.normalize_row(&mut row);
    assert!(row.iter().all(|x| x.abs() < 2.0), "{row:?}");
    let p = tmp("norm.safetensors");
    m.save(&p, "test").unwrap();
    let back = LearnedModel::load(&p, Variant::Lyreo).unwrap();
    assert_eq!(back.obs_mean, m.obs_mean);
    assert_eq!(back.obs_std, m.obs_std);
    assert_eq!(back, m);
}

#[test]
fn version_1_weights_are_refused_with_a_version_error() {
    use crate::nn::WeightsFile;
    let mut w = LearnedModel::new(Variant::Lyreo, 1).to_weights("t");
    w.version = 1;
    let p = tmp("v1.safetensors");
    w.save(&p).unwrap();
    let e = LearnedModel::load(&p, Variant::Lyreo)
        .unwrap_err()
        .to_string();
    assert!(e.contains("version is 1"), "{e}");
    let _ = WeightsFile::new(learned::WEIGHTS_KIND, learned::WEIGHTS_VERSION);
}

#[test]
fn imitating_policy_acts_as_least_loaded() {
    let mut s: Vec<ServerObs> = (0..4)
        .map(|i| server(0.05 * (3 - i) as f64, 1_000_000))
        .collect();
    s[1].load.waiting_kv_bytes = 300_000;
    let o = obs(s, (0..9).map(|i| req(i, 20 + 10 * i as u32, 50)).collect());
    let mut ll = Vec::new();
    LeastLoaded::new().assign(&o, &mut ll);
    let rec = std::sync::Arc::new(std::sync::Mutex::new(Rollout::default()));
    let mut p = LearnedPolicy::imitating(
        std::sync::Arc::new(LearnedModel::new(Variant::Lyreo, 2)),
        rec.clone(),
    );
    let mut out = Vec::new();
    p.assign(&o, &mut out);
    assert_eq!(out, ll);
    let r = rec.lock().unwrap();
    // The last context feature is 0 on Least-Loaded's choice.
    for d in &r.decisions {
        let row = &d.inputs[d.action * learned::ACTOR_INPUT..(d.action + 1) * learned::ACTOR_INPUT];
        assert_eq!(row[learned::ACTOR_INPUT - 1], 0.0);
    }
}

#[test]
fn the_guard_hands_off_distribution_decisions_to_least_loaded_only() {
    // A fresh network with identity normalization: the raw features are
    // the z-scores. Servers like the training's: every input well inside.
    let model = std::sync::Arc::new(LearnedModel::new(Variant::Lyreo, 5));
    let usual = obs(
        vec![
            server(0.30, 1_000_000),
            server(0.10, 1_000_000),
            server(0.12, 1_000_000),
        ],
        vec![req(1, 100, 100), req(2, 50, 20), req(3, 10, 10)],
    );
    let (mut guarded, mut raw) = (
        LearnedPolicy::greedy(model.clone()),
        LearnedPolicy::unguarded(model.clone()),
    );
    let (mut a, mut b) = (Vec::new(), Vec::new());
    guarded.assign(&usual, &mut a);
    raw.assign(&usual, &mut b);
    assert_eq!(a, b, "in distribution the guard changes nothing");
    assert_eq!(guarded.fallbacks(), 0);

    // One server decodes 2 000× slower than any class: its decode feature
    // is far past GUARD_Z, so every decision of the slot is Least-Loaded's.
    let mut odd = usual.clone();
    odd.servers[2].decode_step_empty_s = 20.0;
    let mut ll = Vec::new();
    LeastLoaded::new().assign(&odd, &mut ll);
    guarded.assign(&odd, &mut a);
    assert_eq!(a, ll);
    assert_eq!(guarded.fallbacks(), 3);
    raw.assign(&odd, &mut b);
    assert_eq!(raw.fallbacks(), 0, "the raw network is never overridden");

    // A NaN input is off-distribution too.
    let mut nan = usual.clone();
    nan.servers[0].load.eta = f64::NAN;
    guarded.assign(&nan, &mut a);
    assert_eq!(guarded.fallbacks(), 6);
}

#[test]
fn raw_names_the_unguarded_network_and_static_is_the_papers() {
    let raw = ArmName::parse("raw:lyreo").expect("raw");
    assert!(!raw.guarded);
    assert_eq!(raw.variant, Some(Variant::Lyreo));
    assert!(ArmName::parse("lyreo").expect("lyreo").guarded);
    assert!(!ArmName::parse("static").expect("static").guarded);
    assert!(
        ArmName::parse("raw:least-loaded").is_err(),
        "a heuristic has no network"
    );
}
