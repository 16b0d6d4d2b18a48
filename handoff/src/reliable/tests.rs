//! The reliable baselines over the link model, both protocols.

use super::*;
use edgemu_links::paper_channel::{ONE_WAY_NS, RATE_BPS};
use edgemu_links::{LinkParams, LossSpec};

type Runner = fn(&ReliableRun) -> Result<ReliableOutcome, ReliableError>;
const PROTOCOLS: [(&str, Runner); 2] = [("QUIC", run_quic), ("TCP", run_tcp)];
const SEC: u64 = 1_000_000_000;

fn clean(bytes: u64, seed: u64) -> ReliableRun {
    ReliableRun::new(
        bytes,
        paper_link(LossSpec::None),
        paper_link(LossSpec::None),
        seed,
        60 * SEC,
    )
}

fn check_complete(name: &str, run: &ReliableRun, out: &ReliableOutcome) {
    assert_eq!(out.delivered_in_order_at_deadline, run.bytes, "{name}");
    let done = out
        .completion_ns
        .unwrap_or_else(|| panic!("{name}: not complete"));
    assert_eq!(out.delivered_at(done), run.bytes, "{name}");
    assert!(out.delivered_at(done - 1) < run.bytes, "{name}");
    assert_eq!(out.delivery.time_of(run.bytes), Some(done), "{name}");
    // Nothing arrives before one handshake and one one-way trip.
    assert!(out.delivery.steps()[0].0 >= 2 * ONE_WAY_NS, "{name}");
    assert!(
        out.packets_sent as f64 * 1400.0 >= run.bytes as f64,
        "{name}"
    );
}

#[test]
fn both_deliver_everything_on_a_clean_link() {
    let run = clean(1_000_000, 7);
    for (name, f) in PROTOCOLS {
        let out = f(&run).unwrap();
        check_complete(name, &run, &out);
        assert_eq!(out.forward_lost, 0, "{name}");
        // The only losses are the drop-tail queue's (slow start overshoots
        // one BDP of buffer); without them nothing is resent.
        if out.forward_queue_dropped == 0 {
            assert_eq!(out.retransmissions, 0, "{name}");
        }
        // 1 MB at 100 Mb/s is 80 ms of serialization: slow start needs a few
        // RTTs more, but far less than a second.
        let t = out.completion_ns.unwrap();
        assert!(t > 80_000_000 && t < SEC, "{name}: {t} ns");
    }
}

#[test]
fn both_deliver_everything_in_order_on_the_paper_ge_link() {
    // smoltcp's TCP needs minutes of simulated time on this channel (1-s
    // minimum RTO with exponential backoff, no SACK-based recovery); idle
    // simulated time costs nothing.
    let run = ReliableRun::paper(300_000, 3, 3_600 * SEC);
    for (name, f) in PROTOCOLS {
        let out = f(&run).unwrap();
        check_complete(name, &run, &out);
        assert!(out.forward_lost > 0, "{name}: the GE link lost nothing");
        assert!(out.retransmissions > 0, "{name}: no retransmission seen");
        eprintln!(
            "{name} GE 300 kB: done at {:.3} s, {} packets, {} lost, {} retransmissions",
            out.completion_ns.unwrap() as f64 / 1e9,
            out.packets_sent,
            out.forward_lost,
            out.retransmissions
        );
    }
}

#[test]
fn same_seed_same_outcome_other_seed_other_losses() {
    for (name, f) in PROTOCOLS {
        let a = f(&ReliableRun::paper(600_000, 11, 30 * SEC)).unwrap();
        let b = f(&ReliableRun::paper(600_000, 11, 30 * SEC)).unwrap();
        assert_eq!(a, b, "{name}: same seed, different outcome");
        let c = f(&ReliableRun::paper(600_000, 12, 30 * SEC)).unwrap();
        assert_ne!(a.delivery, c.delivery, "{name}: seed changed nothing");
    }
}

#[test]
fn a_deadline_cuts_the_prefix_and_later_runs_extend_it() {
    for (name, f) in PROTOCOLS {
        let full = f(&clean(1_000_000, 5).with_horizon(60 * SEC)).unwrap();
        let done = full.completion_ns.unwrap();
        let cut = f(&ReliableRun {
            deadline_ns: done / 2,
            horizon_ns: 0,
            ..clean(1_000_000, 5)
        })
        .unwrap();
        assert_eq!(cut.completion_ns, None, "{name}");
        assert_eq!(cut.end_ns, done / 2, "{name}");
        // The protocol does not know the deadline: the cut run is a prefix
        // of the long one.
        assert_eq!(
            cut.delivered_in_order_at_deadline,
            full.delivered_at(done / 2),
            "{name}"
        );
        assert!(cut.delivered_in_order_at_deadline > 0, "{name}");
        assert!(cut.delivered_in_order_at_deadline < 1_000_000, "{name}");
        let steps = full.delivery.steps();
        assert!(steps
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1));
    }
}

#[test]
fn an_empty_transfer_is_complete_at_once() {
    for (name, f) in PROTOCOLS {
        let out = f(&clean(0, 1)).unwrap();
        assert_eq!(out.completion_ns, Some(0), "{name}");
        assert_eq!(out.delivered_fraction_at(0), 1.0, "{name}");
    }
}

/// Goodput over a large clean transfer: a sensible fraction of 100 Mb/s
/// (headers, slow start and the handshake take their share; nothing here
/// reads a wall clock).
#[test]
fn clean_link_goodput_is_a_sensible_fraction_of_the_rate() {
    // An unbounded queue: no congestion loss, so this measures the
    // protocols' own efficiency (headers, ACK clocking, slow start).
    let run = ReliableRun {
        forward: LinkParams {
            queue_bytes: None,
            ..paper_link(LossSpec::None)
        },
        ..clean(12_000_000, 2)
    };
    for (name, f) in PROTOCOLS {
        let out = f(&run).unwrap();
        check_complete(name, &run, &out);
        let g = out.goodput_bps().unwrap();
        eprintln!(
            "{name} clean 12 MB: {:.1} Mb/s goodput ({:.3} s)",
            g / 1e6,
            out.completion_ns.unwrap() as f64 / 1e9
        );
        assert!(g > 0.6 * RATE_BPS as f64, "{name}: {g} b/s");
        assert!(g < RATE_BPS as f64, "{name}: {g} b/s");
    }
}

/// A link that carries nothing ends the run with an error (QUIC's idle
/// timeout, TCP's user timeout), not a hang, even with no horizon.
#[test]
fn a_dead_link_is_an_error_not_a_hang() {
    let dead = LinkParams {
        rate: edgemu_links::RateSpec::Fixed { bps: 0 },
        ..paper_link(LossSpec::None)
    };
    for (name, f) in PROTOCOLS {
        let run = ReliableRun {
            forward: dead.clone(),
            ..clean(10_000, 1).with_horizon(u64::MAX)
        };
        match f(&run) {
            Err(ReliableError::ConnectionLost { .. }) => {}
            other => panic!("{name}: {other:?}"),
        }
    }
}
