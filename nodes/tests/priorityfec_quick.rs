//! `edgemu experiment priorityfec --quick` through the library: on the tiny
//! built-in model and texts always; on the real SmolLM2 and ShareGPT when they
//! are present (skipped with a message otherwise; under `CI` a missing model
//! fails, as in `gpu/tests/real_model.rs`). No timing thresholds.

use std::path::PathBuf;

use edgemu_assets::Asset;
use edgemu_gpu::shipped_profiles::parse_profile;
use edgemu_nodes::experiment::priorityfec::{report, PriorityFecArgs, DEFAULT_PROFILE};

fn args(tiny: bool, run: &str) -> PriorityFecArgs {
    PriorityFecArgs {
        quick: true,
        json: true,
        contexts: None,
        context_tokens: None,
        realizations: None,
        rho: None,
        // The virtual-time schemes: two runs compare bit for bit (the
        // kernel's TCP runs in real time; the quick grids below add it).
        schemes: Some(
            edgemu_handoff::SCHEMES
                .iter()
                .map(|s| s.name.to_string())
                .chain(["tcp".to_string(), "quic".to_string()])
                .collect(),
        ),
        profile: parse_profile(DEFAULT_PROFILE).expect("the built-in profile"),
        // No weights here: the DDQN schemes must be reported as not run.
        weights: Asset::File(PathBuf::from("/nonexistent/repair-ddqn.safetensors")),
        loss_trace: None,
        mode: "zero-fill".into(),
        seed: 1,
        k: edgemu_handoff::scenario::DEFAULT_K,
        context_seed: 0,
        model: None,
        tiny,
        decode_len: 8,
        batch: 8,
        decode_weights: None,
        stepwise: false,
        streams: None,
        results: std::env::temp_dir().join(format!("edgemu-pfec-test-{}", std::process::id())),
        run_id: Some(run.into()),
        resume: None,
    }
}

fn check(a: &PriorityFecArgs) {
    let v = report(a).expect("experiment runs");
    let rho = v["rho"].as_object().expect("rho object");
    assert_eq!(rho.len(), 2, "{v}");
    let mut schemes = 0;
    for (r, cells) in rho {
        let cells = cells.as_object().expect("cells");
        assert!(
            !cells.contains_key("priorityfec"),
            "ran without weights: {v}"
        );
        for s in ["udp", "uniform-fec", "priority-only", "tcp", "quic"] {
            assert!(cells.contains_key(s), "{s} missing at ρ {r}: {v}");
        }
        // The kernel's TCP runs wherever attach points can be made.
        assert_eq!(
            cells.contains_key("tcp-kernel"),
            edgemu_nodes::attach::pair::available().is_ok(),
            "tcp-kernel at ρ {r}: {v}"
        );
        for (s, c) in cells {
            for k in ["utility", "f1", "top1"] {
                let x = c[k].as_f64().unwrap_or(f64::NAN);
                assert!((0.0..=1.0).contains(&x), "{s} {k} = {x} at ρ {r}");
            }
        }
        schemes = cells.len();
    }
    // 2 contexts × 1 realization × 2 ρ × schemes.
    assert_eq!(v["handoffs"].as_u64(), Some(4 * schemes as u64), "{v}");
    let dir = a.results.join(a.run_id.as_deref().unwrap_or_default());
    let csv = std::fs::read_to_string(dir.join("handoffs.csv")).expect("handoffs.csv");
    let header = csv.lines().next().unwrap_or_default();
    for col in [
        "context",
        "realization",
        "rho",
        "scheme",
        "utility",
        "f1",
        "top1",
    ] {
        assert!(header.split(',').any(|c| c == col), "{col} not in {header}");
    }
    assert_eq!(csv.lines().count(), 1 + 4 * schemes);
    let summary = std::fs::read_to_string(dir.join("summary.json")).expect("summary.json");
    assert!(summary.contains("no weights"), "{summary}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The default schemes: the virtual-time ones, and the kernel's TCP where
/// attach points can be made.
fn defaults(mut a: PriorityFecArgs) -> PriorityFecArgs {
    a.schemes = None;
    a
}

#[test]
fn quick_grid_on_tiny_model() {
    check(&defaults(args(true, "tiny")));
}

#[test]
fn quick_grid_on_real_model() {
    if let Err(e) = edgemu_tokenizer::model_path() {
        if std::env::var_os("CI").is_some() {
            panic!("CI is set and the model is missing: {e}");
        }
        eprintln!("SKIP (real model): {e}");
        return;
    }
    if let Err(e) = edgemu_data::locate() {
        eprintln!("SKIP (ShareGPT data): {e}");
        return;
    }
    check(&defaults(args(false, "real")));
}

/// The shared quality computation (teacher forcing in one pass, free-running
/// only past the first disagreement, in three streams of contexts) gives the
/// direct computation's figures (in one stream) bit for bit: every handoff row
/// of the tiny grid is equal and in the same order, in both rebuild modes.
#[test]
fn shared_quality_path_equals_stepwise() {
    for mode in ["zero-fill", "mask"] {
        let mut rows = Vec::new();
        for stepwise in [false, true] {
            let run = format!("paths-{mode}-{stepwise}");
            let mut a = args(true, &run);
            a.mode = mode.into();
            a.stepwise = stepwise;
            // Contexts in three streams against one: the same rows, in order.
            a.streams = Some(if stepwise { 1 } else { 3 });
            a.decode_len = 12;
            report(&a).expect("experiment runs");
            let dir = a.results.join(&run);
            rows.push(std::fs::read_to_string(dir.join("handoffs.csv")).expect("handoffs.csv"));
            let _ = std::fs::remove_dir_all(dir);
        }
        assert!(rows[0].lines().count() > 1);
        assert_eq!(rows[0], rows[1], "{mode}: shared and stepwise paths differ");
    }
}

/// `--loss-trace` replaces the GE channel: a trace that loses every packet
/// leaves nothing at D for any scheme (GE never does that), and a malformed
/// trace is an error naming the file.
#[test]
fn loss_trace_replaces_the_channel() {
    let dir = std::env::temp_dir().join(format!("edgemu-pfec-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let trace = dir.join("all-lost.trace");
    std::fs::write(&trace, "# every packet lost\n0 1\n").expect("trace file");
    let mut a = args(true, "trace");
    a.results = dir.join("results");
    a.schemes = Some(vec!["udp".into(), "uniform-fec".into(), "tcp".into()]);
    a.loss_trace = Some(trace);
    let v = report(&a).expect("experiment runs on a trace");
    for (r, cells) in v["rho"].as_object().expect("rho object") {
        for (s, c) in cells.as_object().expect("cells") {
            assert_eq!(c["utility"].as_f64(), Some(0.0), "{s} at ρ {r}: {v}");
        }
    }
    let bad = dir.join("bad.trace");
    std::fs::write(&bad, "0 sometimes\n").expect("trace file");
    a.loss_trace = Some(bad);
    a.run_id = Some("bad".into());
    let e = format!(
        "{:#}",
        report(&a).expect_err("a malformed trace is an error")
    );
    assert!(e.contains("bad.trace"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A run stopped after 2 contexts (the third half-written, as a Ctrl-C would
/// leave it) and continued with `--resume` to 3 writes the same `handoffs.csv`
/// and `summary.csv` as one uninterrupted 3-context run; a changed setting or
/// a second start in the same folder is refused.
#[test]
fn resumed_run_equals_straight_run() {
    let mut straight = args(true, "straight3");
    straight.contexts = Some(3);
    straight.schemes = Some(vec![
        "udp".into(),
        "uniform-fec".into(),
        "priority-only".into(),
        "tcp".into(),
    ]);
    report(&straight).expect("straight run");
    let mut first = straight.clone();
    first.run_id = Some("resumed".into());
    first.contexts = Some(2);
    report(&first).expect("first part");
    let dir = first.results.join("resumed");
    {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("handoffs.csv"))
            .expect("handoffs.csv");
        std::io::Write::write_all(&mut f, b"2,0,0.8,udp,0.5").expect("append");
    }
    assert!(
        report(&first).is_err(),
        "a second start in the same folder must be refused"
    );
    let mut bad = straight.clone();
    bad.resume = Some(dir.clone());
    bad.mode = "mask".into();
    let e = format!("{:#}", report(&bad).expect_err("another mode"));
    assert!(e.contains("mode"), "{e}");
    let mut bad = straight.clone();
    bad.resume = Some(dir.clone());
    bad.decode_len = 9;
    let e = format!("{:#}", report(&bad).expect_err("another decode length"));
    assert!(e.contains("decode_len"), "{e}");
    let mut bad = straight.clone();
    bad.resume = Some(dir.clone());
    bad.k = 64;
    let e = format!("{:#}", report(&bad).expect_err("another coding window"));
    assert!(e.contains("grid.k: stored 256, now 64"), "{e}");
    let mut again = straight.clone();
    again.resume = Some(dir.clone());
    report(&again).expect("resumed run");
    let straight_dir = straight.results.join("straight3");
    for f in ["handoffs.csv", "summary.csv", "transport.csv"] {
        let a = std::fs::read_to_string(straight_dir.join(f)).expect("straight file");
        let b = std::fs::read_to_string(dir.join(f)).expect("resumed file");
        assert!(a.lines().count() > 1, "{f} is empty");
        assert_eq!(a, b, "{f} differs between the straight and the resumed run");
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&straight_dir);
}

/// The kernel's TCP runs in real time, so a resumed run reuses its stored
/// outcomes (running it again would give others, and the resume would be
/// refused as another build of the schemes). Root and the real model only.
#[test]
fn a_resumed_run_keeps_the_kernels_tcp_outcomes() {
    if edgemu_nodes::attach::pair::available().is_err() {
        eprintln!("SKIP (tcp-kernel needs attach points: root)");
        return;
    }
    if edgemu_tokenizer::model_path().is_err() || edgemu_data::locate().is_err() {
        if std::env::var_os("CI").is_some() {
            panic!("CI is set and the model or the data is missing");
        }
        eprintln!("SKIP (real model or data)");
        return;
    }
    let mut first = args(false, "kernel-resumed");
    first.contexts = Some(1);
    first.rho = Some(vec![0.5, 0.8]);
    first.schemes = Some(vec!["udp".into(), "tcp-kernel".into()]);
    report(&first).expect("first part");
    let dir = first.results.join("kernel-resumed");
    let stored = std::fs::read_to_string(dir.join("transport.csv")).expect("transport.csv");
    assert!(stored.contains("tcp-kernel"), "{stored}");
    let mut again = first.clone();
    again.contexts = Some(2);
    again.resume = Some(dir.clone());
    report(&again).expect("resumed run");
    let after = std::fs::read_to_string(dir.join("transport.csv")).expect("transport.csv");
    assert_eq!(stored, after);
    let handoffs = std::fs::read_to_string(dir.join("handoffs.csv")).expect("handoffs.csv");
    // 2 contexts × 1 realization × 2 ρ × 2 schemes.
    assert_eq!(handoffs.lines().count(), 1 + 8, "{handoffs}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Settings that cannot make a grid are refused before any work, each with
/// the flag it came from, and no results folder is left behind.
#[test]
fn bad_settings_are_refused_naming_the_flag() {
    type Set = fn(&mut PriorityFecArgs);
    let cases: [(&str, Set); 11] = [
        ("--contexts 0", |a| a.contexts = Some(0)),
        ("--realizations 0", |a| a.realizations = Some(0)),
        ("--rho", |a| a.rho = Some(Vec::new())),
        ("--rho -0.5", |a| a.rho = Some(vec![0.8, -0.5])),
        ("--schemes", |a| {
            a.schemes = Some(vec!["udp".into(), "tcpp".into()])
        }),
        ("--decode-len 0", |a| a.decode_len = 0),
        ("--batch 0", |a| a.batch = 0),
        ("--streams 0", |a| a.streams = Some(0)),
        // The tiny model's context length is 8 192 positions.
        ("--decode-len 9000", |a| a.decode_len = 9000),
        ("--decode-len 18446744073709551615", |a| {
            a.decode_len = usize::MAX
        }),
        ("--decode-weights \"q4_1\"", |a| {
            a.decode_weights = Some("q4_1".into())
        }),
    ];
    for (i, (flag, set)) in cases.into_iter().enumerate() {
        let mut a = args(true, &format!("refused{i}"));
        set(&mut a);
        let e = format!("{:#}", report(&a).expect_err(flag));
        assert!(e.contains(flag), "{flag}: {e}");
        let dir = a.results.join(a.run_id.as_deref().unwrap_or_default());
        assert!(!dir.exists(), "{flag}: {} was created", dir.display());
    }
}

/// `--decode-weights` picks the decode matmuls' format (q8_int, int8
/// activations, by default; q8_cpu, F32 activations): each run works, its
/// settings record the format and the quality path's arithmetic, the
/// transport figures are the same, and the loaded model holds the asked
/// format (`weight_layout` in summary.json); a q8_cpu run does not resume
/// without the flag, nor a run whose settings lack the arithmetic (older
/// code's bits).
#[test]
fn int8_decode_weights_run_and_are_recorded() {
    let mut rows = Vec::new();
    for fmt in [None, Some("q8_cpu"), Some("q8_int")] {
        let run = format!("decode-{}", fmt.unwrap_or("default"));
        let mut a = args(true, &run);
        a.decode_weights = fmt.map(String::from);
        check_keep(&a);
        let dir = a.results.join(&run);
        let settings = std::fs::read_to_string(dir.join("settings.json")).expect("settings");
        let v: serde_json::Value = serde_json::from_str(&settings).expect("settings json");
        assert_eq!(
            v.get("decode_weights").and_then(|x| x.as_str()),
            Some(fmt.unwrap_or("q8_int")),
            "{settings}"
        );
        assert_eq!(v["cue"].as_str(), Some("decode-rows"), "{settings}");
        let summary = std::fs::read_to_string(dir.join("summary.json")).expect("summary");
        let v: serde_json::Value = serde_json::from_str(&summary).expect("summary json");
        let layout = v["weight_layout"].as_str().unwrap_or_default().to_string();
        let expect = format!("decode={}", fmt.unwrap_or("q8_int"));
        assert!(layout.ends_with(&expect), "{layout} for {fmt:?}");
        let csv = std::fs::read_to_string(dir.join("handoffs.csv")).expect("handoffs.csv");
        rows.push(csv);
        if fmt == Some("q8_cpu") {
            // Resuming it without the flag would mix arithmetics: refused.
            let mut again = args(true, &run);
            again.run_id = None;
            again.resume = Some(dir.clone());
            let e = format!("{:#}", report(&again).expect_err("resume without the flag"));
            assert!(e.contains("decode_weights"), "{e}");
        }
        if fmt.is_none() {
            // A run of older code (no record of the cue's arithmetic): refused.
            let path = dir.join("settings.json");
            let mut old: serde_json::Value = serde_json::from_str(&settings).expect("json");
            old.as_object_mut().expect("object").remove("cue");
            std::fs::write(&path, old.to_string()).expect("write settings");
            let mut again = args(true, &run);
            again.run_id = None;
            again.resume = Some(dir.clone());
            let e = format!(
                "{:#}",
                report(&again).expect_err("resume of older code's run")
            );
            assert!(e.contains("cue"), "{e}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
    let column = |csv: &str, name: &str| -> Vec<String> {
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
        let i = header.iter().position(|c| *c == name).expect("column");
        lines
            .map(|l| l.split(',').nth(i).unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(rows[0], rows[2], "q8_int spelled out is the default");
    assert_eq!(column(&rows[0], "utility"), column(&rows[1], "utility"));
}

/// [`check`]'s assertions, keeping the run folder.
fn check_keep(a: &PriorityFecArgs) {
    let v = report(a).expect("experiment runs");
    for cells in v["rho"].as_object().expect("rho object").values() {
        for (s, c) in cells.as_object().expect("cells") {
            for k in ["utility", "f1", "top1"] {
                let x = c[k].as_f64().unwrap_or(f64::NAN);
                assert!((0.0..=1.0).contains(&x), "{s} {k} = {x}");
            }
        }
    }
}
