//! Properties of `LinkModel` for arbitrary parameters and operation
//! sequences: nothing panics, counters balance, and without `reorder` due
//! times never go backwards.

use edgemu_links::{
    Arrival, Delivery, LinkModel, LinkParams, LossSpec, LossTrace, Offer, RateSpec, RateTrace,
};
use proptest::prelude::*;
use std::sync::Arc;

fn prob() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 0.0..=1.0f64,
        1 => any::<f64>(),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(-1.0),
    ]
}

fn mahimahi() -> impl Strategy<Value = RateSpec> {
    prop::collection::vec(0..4u64, 1..12).prop_map(|steps| {
        let mut t = 0;
        let mut lines = Vec::new();
        for s in &steps {
            t += s;
            lines.push(t.to_string());
        }
        lines.push((t + 1).to_string());
        let trace = RateTrace::parse_mahimahi(&lines.join("\n")).expect("valid by construction");
        RateSpec::Trace(Arc::new(trace))
    })
}

fn steps() -> impl Strategy<Value = RateSpec> {
    (
        prop::collection::vec((1..20u64, 0..2_000_000_000u64), 1..6),
        prop::option::of(1..20u64),
    )
        .prop_filter_map("trace with no capacity", |(segs, period)| {
            let mut t = 0;
            let mut text = String::new();
            for (dt, bps) in &segs {
                text += &format!("{t} {bps}\n");
                t += dt;
            }
            if let Some(extra) = period {
                text += &format!("{}\n", t + extra);
            }
            RateTrace::parse_steps(&text)
                .ok()
                .map(|tr| RateSpec::Trace(Arc::new(tr)))
        })
}

fn rate() -> impl Strategy<Value = RateSpec> {
    prop_oneof![
        Just(RateSpec::Unlimited),
        any::<u64>().prop_map(|bps| RateSpec::Fixed { bps }),
        (0..10_000_000_000u64).prop_map(|bps| RateSpec::Fixed { bps }),
        Just(RateSpec::Fixed { bps: 0 }),
        mahimahi(),
        steps(),
    ]
}

fn loss() -> impl Strategy<Value = LossSpec> {
    prop_oneof![
        Just(LossSpec::None),
        prob().prop_map(|p| LossSpec::Bernoulli { p }),
        (prob(), prob(), prob(), prob()).prop_map(|(eps_g, eps_b, p_gb, p_bg)| {
            LossSpec::GilbertElliott {
                eps_g,
                eps_b,
                p_gb,
                p_bg,
            }
        }),
        (prob(), prob()).prop_map(|(g, b)| {
            let t = LossTrace::parse("0 good\n3 bad\n5 0.5\n9\n")
                .expect("valid")
                .with_state_loss(g, b);
            LossSpec::Trace(Arc::new(t))
        }),
    ]
}

fn ns() -> impl Strategy<Value = u64> {
    prop_oneof![4 => 0..50_000_000u64, 1 => any::<u64>()]
}

fn params() -> impl Strategy<Value = LinkParams> {
    (
        rate(),
        ns(),
        ns(),
        prop::option::of(prop_oneof![0..100_000u64, any::<u64>()]),
        loss(),
        prop_oneof![Just(Delivery::Datagram), Just(Delivery::Reliable)],
        any::<bool>(),
    )
        .prop_map(
            |(rate, delay_ns, jitter_ns, queue_bytes, loss, delivery, reorder)| LinkParams {
                rate,
                delay_ns,
                jitter_ns,
                queue_bytes,
                loss,
                delivery,
                reorder,
            },
        )
}

#[derive(Clone, Debug)]
enum Op {
    Offer { dt: u64, size: u32 },
    Poll { dt: u64 },
    Kill,
    Restore,
    Set(LinkParams),
}

fn op(with_set: bool) -> BoxedStrategy<Op> {
    let size = prop_oneof![8 => 0..3000u32, 1 => any::<u32>()];
    let dt = prop_oneof![8 => 0..2_000_000u64, 1 => any::<u64>()];
    let base = prop_oneof![
        12 => (dt.clone(), size).prop_map(|(dt, size)| Op::Offer { dt, size }),
        4 => dt.prop_map(|dt| Op::Poll { dt }),
        1 => Just(Op::Kill),
        1 => Just(Op::Restore),
    ];
    if with_set {
        prop_oneof![10 => base, 1 => params().prop_map(Op::Set)].boxed()
    } else {
        base.boxed()
    }
}

fn balanced<P>(link: &LinkModel<P>) -> bool {
    let c = link.counters();
    c.offered == c.delivered + c.lost + c.queue_dropped + c.down_dropped + link.in_flight() as u64
}

/// Runs `ops`, checking the invariants after each; returns accepted due
/// times in offer order, with the number of kills before each (a kill
/// drops everything, so ordering only holds between packets of one epoch).
fn run(link: &mut LinkModel<u64>, ops: &[Op]) -> Result<Vec<(u32, u64)>, TestCaseError> {
    let mut epoch = 0;
    let mut now = 0u64;
    let mut dues = Vec::new();
    let mut seq = 0;
    for op in ops {
        match op {
            Op::Offer { dt, size } => {
                now = now.saturating_add(*dt);
                if let Offer::Accepted { due_ns } = link.offer(now, *size, seq) {
                    prop_assert!(due_ns >= now);
                    dues.push((epoch, due_ns));
                }
                seq += 1;
                let _ = link.queued_bytes(now);
            }
            Op::Poll { dt } => {
                now = now.saturating_add(*dt);
                let mut last = 0;
                while let Some(Arrival {
                    due_ns, offered_ns, ..
                }) = link.poll(now)
                {
                    prop_assert!(due_ns <= now);
                    prop_assert!(due_ns >= offered_ns);
                    prop_assert!(due_ns >= last);
                    last = due_ns;
                }
                if let Some(next) = link.next_due() {
                    prop_assert!(next > now);
                }
            }
            Op::Kill => {
                link.kill(now);
                epoch += 1;
                prop_assert!(!link.is_up());
                prop_assert_eq!(link.in_flight(), 0);
            }
            Op::Restore => {
                link.restore(now);
                prop_assert!(link.is_up());
            }
            Op::Set(p) => link.set_params(now, p.clone()),
        }
        prop_assert!(
            balanced(link),
            "counters out of balance: {:?}",
            link.counters()
        );
    }
    Ok(dues)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Arbitrary parameters, including parameter changes mid-run: no panic,
    /// counters balance.
    #[test]
    fn never_panics_and_counters_balance(
        p in params(),
        seed in any::<u64>(),
        ops in prop::collection::vec(op(true), 0..120),
    ) {
        let mut link = LinkModel::new(p, seed);
        run(&mut link, &ops)?;
        let _ = link.poll(u64::MAX);
    }

    /// Without reorder, due times are monotone in offer order and packets
    /// come out in offer order.
    #[test]
    fn due_times_are_monotone_without_reorder(
        p in params(),
        seed in any::<u64>(),
        ops in prop::collection::vec(op(false), 0..120),
    ) {
        let p = LinkParams { reorder: false, ..p };
        let mut link = LinkModel::new(p, seed);
        let dues = run(&mut link, &ops)?;
        prop_assert!(
            dues.windows(2).all(|w| w[0].0 != w[1].0 || w[0].1 <= w[1].1),
            "{:?}",
            dues
        );
        let mut last_seq = None;
        while let Some(a) = link.poll(u64::MAX) {
            prop_assert!(last_seq.is_none_or(|s| a.packet > s));
            last_seq = Some(a.packet);
        }
    }

    /// A datagram link with no loss and no queue limit delivers everything
    /// offered while up; bytes balance.
    #[test]
    fn lossless_link_delivers_everything(
        rate in rate(),
        delay in 0..10_000_000u64,
        sizes in prop::collection::vec(0..5000u32, 0..60),
    ) {
        let p = LinkParams { rate, delay_ns: delay, ..LinkParams::default() };
        let carries = !matches!(p.rate, RateSpec::Fixed { bps: 0 });
        let mut link = LinkModel::new(p, 0);
        for (i, s) in sizes.iter().enumerate() {
            link.offer(i as u64 * 1000, *s, i as u64);
        }
        while link.poll(u64::MAX).is_some() {}
        let c = link.counters();
        if carries {
            prop_assert_eq!(c.delivered, sizes.len() as u64);
            prop_assert_eq!(c.bytes_delivered, c.bytes_offered);
        } else {
            prop_assert_eq!(c.down_dropped, sizes.len() as u64);
        }
    }
}
