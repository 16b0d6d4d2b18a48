//! The handoff cores in the co-simulation harness (issue 7's list).

use std::sync::Arc;

use edgemu_handoff::blocks::BlockLayout;
use edgemu_handoff::scheme::{builtin_schemes, scheme, SCHEMES};
use edgemu_handoff::{
    placeholder_utilities, run_handoff, synthetic_payload, HandoffError, HandoffReceiver,
    HandoffRun, HandoffScenario, HandoffSender, ReceiverConfig, RepairGate, RunOptions, SchemeSpec,
    SenderConfig, SourceOrder,
};
use edgemu_links::paper_channel::{ge_loss as paper_ge, RATE_BPS, RTT_NS};
use edgemu_links::{LossSpec, LossTrace};
use edgemu_policies::repair::{DeficitHeuristic, RepairScheduler};

/// 8 layers × 256 tokens of SmolLM2-sized blocks: 128 blocks, 1 152 source
/// packets (129 ms at 100 Mb/s, several RTTs).
fn layout() -> BlockLayout {
    BlockLayout::new(8, 256, 16, 12_288).unwrap()
}

fn scenario(loss: LossSpec, rho: f64) -> HandoffScenario {
    let l = layout();
    HandoffScenario::symmetric(
        l,
        placeholder_utilities(&l).into(),
        synthetic_payload(&l, 7),
        RATE_BPS,
        RTT_NS,
        loss,
        rho,
    )
}

/// Every scheme's scheduler; the DDQN entries get the deficit heuristic as a
/// stand-in (the network is built elsewhere).
fn scheduler_of(spec: &SchemeSpec) -> Box<dyn RepairScheduler> {
    let external: Option<Box<dyn RepairScheduler>> = spec
        .needs_external()
        .then(|| Box::new(DeficitHeuristic) as _);
    spec.scheduler(external).unwrap()
}

fn run(sc: &HandoffScenario, spec: &SchemeSpec, seed: u64, opts: RunOptions) -> HandoffRun {
    run_handoff(sc, spec, scheduler_of(spec), seed, opts).unwrap()
}

#[test]
fn every_scheme_delivers_everything_without_loss_and_a_late_deadline() {
    let sc = scenario(LossSpec::None, 1.5);
    for spec in SCHEMES {
        let r = run(
            &sc,
            spec,
            1,
            RunOptions {
                keep_received: true,
                ..Default::default()
            },
        );
        assert_eq!(r.report.recovered_utility, 1.0, "{}", spec.name);
        assert_eq!(
            r.report.blocks_complete,
            layout().n_blocks(),
            "{}",
            spec.name
        );
        assert_eq!(
            r.report.decoded_prefix,
            layout().n_source_packets(),
            "{}",
            spec.name
        );
        let kv = r.received.unwrap();
        for (b, blk) in kv.blocks.iter().enumerate() {
            assert!(blk.is_complete(), "{} block {b}", spec.name);
            assert_eq!(blk.bytes[..], sc.payload[layout().block_range(b as u32)]);
        }
    }
}

#[test]
fn received_bytes_are_the_payload_where_present_and_zero_elsewhere() {
    let sc = scenario(paper_ge(), 0.8);
    for name in ["udp", "priority-fixed-fec"] {
        let r = run(
            &sc,
            scheme(name).unwrap(),
            3,
            RunOptions {
                keep_received: true,
                ..Default::default()
            },
        );
        let kv = r.received.unwrap();
        let mut complete = 0;
        let mut partial = 0;
        for (b, blk) in kv.blocks.iter().enumerate() {
            let truth = &sc.payload[layout().block_range(b as u32)];
            let mut covered = vec![false; blk.bytes.len()];
            for w in blk.present.windows(2) {
                assert!(w[0].end < w[1].start, "ranges merged and sorted");
            }
            for r in &blk.present {
                assert_eq!(blk.bytes[r.clone()], truth[r.clone()]);
                covered[r.clone()].iter_mut().for_each(|c| *c = true);
            }
            for (i, c) in covered.iter().enumerate() {
                if !c {
                    assert_eq!(blk.bytes[i], 0);
                }
            }
            if blk.is_complete() {
                complete += 1;
            } else if !blk.present.is_empty() {
                partial += 1;
            }
        }
        assert_eq!(complete, r.report.blocks_complete, "{name}");
        assert!(
            partial > 0,
            "{name}: losses at ρ = 0.8 leave partial blocks"
        );
        assert!(r.report.recovered_utility < 1.0, "{name}");
    }
}

/// Schemes whose transmissions up to a deadline do not depend on the
/// deadline (no feature of the remaining time enters their rule, the masks
/// differ only in the last 16 slots): on paired draws a later deadline sends
/// the same frames and then more, so recovered utility cannot fall. FlEC-RT
/// (its proactive mode starts one RTT before the deadline) and the DDQN
/// (τ, s_ddl, p_src are inputs) may send different frames, so monotonicity
/// holds for them only on average, not per realization.
#[test]
fn recovered_utility_is_monotone_in_rho_on_paired_draws() {
    let rhos = [0.6, 0.8, 1.0, 1.2];
    for name in [
        "udp",
        "priority-only",
        "uniform-fec",
        "priority-fixed-fec",
        "deficit-heuristic",
    ] {
        let spec = scheme(name).unwrap();
        for seed in 0..3 {
            let mut last = -1.0;
            for rho in rhos {
                let u = run(
                    &scenario(paper_ge(), rho),
                    spec,
                    seed,
                    RunOptions::default(),
                )
                .report
                .recovered_utility;
                assert!(
                    u >= last,
                    "{name} seed {seed}: {u} at ρ = {rho} after {last}"
                );
                last = u;
            }
        }
    }
}

#[test]
fn a_run_is_byte_identical_by_seed() {
    let sc = scenario(paper_ge(), 0.9);
    let opts = RunOptions {
        keep_received: true,
        record_decisions: true,
    };
    for spec in builtin_schemes() {
        let a = run(&sc, spec, 11, opts);
        let b = run(&sc, spec, 11, opts);
        assert_eq!(
            a.report.recovered_utility.to_bits(),
            b.report.recovered_utility.to_bits()
        );
        assert_eq!(a.report, b.report, "{}", spec.name);
        assert_eq!(a.sender, b.sender, "{}", spec.name);
        assert_eq!(a.received, b.received, "{}", spec.name);
        assert_eq!(a.decisions, b.decisions, "{}", spec.name);
        assert!(!a.decisions.is_empty());
    }
    // Another seed is another realization.
    let spec = scheme("udp").unwrap();
    assert_ne!(
        run(&sc, spec, 11, RunOptions::default()).report,
        run(&sc, spec, 12, RunOptions::default()).report
    );
}

#[test]
fn repair_schemes_recover_losses_and_stay_in_budget() {
    let sc = scenario(paper_ge(), 1.2);
    let budget = (sc.budget_fraction * f64::from(layout().n_source_packets())) as u32;
    let udp = run(&sc, scheme("udp").unwrap(), 5, RunOptions::default());
    for name in [
        "uniform-fec",
        "flec-rt",
        "priority-fixed-fec",
        "deficit-heuristic",
    ] {
        let r = run(&sc, scheme(name).unwrap(), 5, RunOptions::default());
        assert!(r.sender.repair_sent <= budget, "{name}");
        assert!(r.report.innovative_repairs > 0, "{name}");
        assert!(r.report.recovered_by_repair > 0, "{name}");
        assert_eq!(r.sender.mask_violations, 0, "{name}");
        assert!(
            r.report.recovered_utility > udp.report.recovered_utility,
            "{name}: {} vs udp {}",
            r.report.recovered_utility,
            udp.report.recovered_utility
        );
    }
    assert_eq!(udp.sender.repair_sent, 0);
}

#[test]
fn loss_trace_replays_through_the_same_path() {
    // Bad (all lost) for 10 ms starting at 20 ms of a 40 ms period.
    let trace = Arc::new(LossTrace::parse("0 good\n20 bad\n30 good\n40 good\n").unwrap());
    let sc = scenario(LossSpec::Trace(trace), 0.8);
    let a = run(&sc, scheme("udp").unwrap(), 1, RunOptions::default());
    let b = run(&sc, scheme("udp").unwrap(), 2, RunOptions::default());
    assert!(a.report.recovered_utility < 0.8);
    // Good = lossless, Bad = all lost: the seed changes nothing.
    assert_eq!(a.report, b.report);
    let fec = run(
        &sc,
        scheme("deficit-heuristic").unwrap(),
        1,
        RunOptions::default(),
    );
    assert!(fec.report.innovative_repairs > 0);
}

#[test]
fn ddqn_schemes_need_a_scheduler() {
    for name in ["priorityfec", "rl-fec-only"] {
        let spec = scheme(name).unwrap();
        assert!(matches!(
            spec.scheduler(None),
            Err(HandoffError::NeedsScheduler(_))
        ));
    }
    assert!(matches!(
        scheme("tcp-ish"),
        Err(HandoffError::UnknownScheme(_))
    ));
    assert_eq!(scheme("priorityfec").unwrap().order, SourceOrder::Priority);
    assert_eq!(scheme("rl-fec-only").unwrap().order, SourceOrder::Fifo);
}

fn cores() -> (HandoffSender, HandoffReceiver) {
    let l = layout();
    let u: Arc<[f64]> = placeholder_utilities(&l).into();
    let tx = HandoffSender::new(
        SenderConfig {
            session: 4,
            k: 16,
            slot_ns: 112_000,
            slots_total: 2000,
            repair_budget: 100,
            rtt_ns: 20_000_000,
            gate: RepairGate::Deficit,
            record_decisions: false,
        },
        l,
        Arc::clone(&u),
        SourceOrder::Priority,
        synthetic_payload(&l, 1),
        Box::new(DeficitHeuristic),
    )
    .unwrap();
    let rx = HandoffReceiver::new(
        ReceiverConfig {
            session: 4,
            deadline_ns: 1_000_000_000,
            feedback_every: 4,
            max_repair_count: 16,
        },
        l,
        u,
    )
    .unwrap();
    (tx, rx)
}

#[test]
fn hostile_frames_and_feedback_are_typed_errors() {
    let (mut tx, mut rx) = cores();
    // Hostile frames at the receiver.
    assert!(matches!(
        rx.handle_packet(0, &[]),
        Err(HandoffError::Frame(_))
    ));
    assert!(matches!(
        rx.handle_packet(0, &[0xEF; 1401]),
        Err(HandoffError::Frame(_))
    ));
    let good = tx.poll_transmit(0).unwrap();
    let mut other_session = good.clone();
    other_session[15] ^= 1;
    assert!(matches!(
        rx.handle_packet(0, &other_session),
        Err(HandoffError::WrongSession { .. })
    ));
    let mut bad_block = good.clone();
    bad_block[24..28].copy_from_slice(&9999u32.to_be_bytes());
    assert!(matches!(
        rx.handle_packet(0, &bad_block),
        Err(HandoffError::BadBlock { .. })
    ));
    assert_eq!(rx.report().frames_rejected, 4);
    rx.handle_packet(0, &good).unwrap();
    assert_eq!(rx.report().frames_received, 1);

    // Hostile feedback at the sender.
    assert!(matches!(
        tx.handle_feedback(0, &[0xFB; 10]),
        Err(HandoffError::FeedbackTruncated { .. })
    ));
    let mut fb = rx.feedback();
    fb.report = 1;
    fb.cumulative = 0;
    let mut ahead = fb;
    ahead.highest_seen = Some(50);
    ahead.last_seq = Some(50);
    ahead.received = 51;
    assert!(matches!(
        tx.handle_feedback(0, &ahead.encode()),
        Err(HandoffError::FeedbackInconsistent(_))
    ));
    let mut foreign = fb;
    foreign.session = 5;
    assert!(tx.handle_feedback(0, &foreign.encode()).is_err());
    tx.handle_feedback(0, &fb.encode()).unwrap();
    assert_eq!(tx.stats().feedback_rejected, 3);
    assert_eq!(tx.stats().feedback_received, 1);
}

#[test]
fn observation_features_are_normalized() {
    let sc = scenario(paper_ge(), 0.8);
    let r = run(
        &sc,
        scheme("deficit-heuristic").unwrap(),
        2,
        RunOptions {
            record_decisions: true,
            ..Default::default()
        },
    );
    assert!(r.decisions.len() > 100);
    assert_eq!(r.decision_utility.len(), r.decisions.len());
    assert!(r.decision_utility.windows(2).all(|w| w[0] <= w[1]));
    assert!(*r.decision_utility.last().unwrap() <= r.report.recovered_utility);
    for d in &r.decisions {
        for f in d.obs.features {
            assert!((0.0..=1.0).contains(&f), "{:?}", d.obs.features);
        }
        assert!(d.mask.allows(d.action));
    }
    // Some epoch saw a positive deficit and some loss estimate.
    assert!(r
        .decisions
        .iter()
        .any(|d| d.obs.deficit > 0 && d.obs.features[4] > 0.0));
}
