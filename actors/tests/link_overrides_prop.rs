//! Random interleavings of kill, set, restore and their timed variants on
//! one link direction, checked against a reference model that replays the
//! whole history at each instant (the semantics in `docs/cluster-toml.md`):
//! down iff some kill issued after the last restore is still within its
//! `for`; parameters = configured, then every set still within its `for`,
//! in issue order.

use edgemu_actors::link_overrides::{LayerId, LinkOverrides};
use edgemu_config::LinkPatch;
use edgemu_links::{LinkParams, RateSpec};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Kill {
        for_ms: Option<u64>,
    },
    Set {
        field: u8,
        value: u64,
        for_ms: Option<u64>,
    },
    Restore,
    Wait {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let dur = prop::option::of(1u64..50);
    prop_oneof![
        dur.clone().prop_map(|for_ms| Op::Kill { for_ms }),
        (0u8..3, 1u64..100, dur).prop_map(|(field, value, for_ms)| Op::Set {
            field,
            value,
            for_ms
        }),
        Just(Op::Restore),
        (1u64..30).prop_map(|ms| Op::Wait { ms }),
    ]
}

fn patch(field: u8, value: u64) -> LinkPatch {
    match field {
        0 => LinkPatch {
            rate: Some(RateSpec::Fixed { bps: value * 1000 }),
            ..Default::default()
        },
        1 => LinkPatch {
            delay_ns: Some(value),
            ..Default::default()
        },
        _ => LinkPatch {
            jitter_ns: Some(value),
            ..Default::default()
        },
    }
}

fn configured() -> LinkParams {
    LinkParams {
        rate: RateSpec::Fixed { bps: 50_000_000 },
        delay_ns: 7,
        ..Default::default()
    }
}

/// One issued command: when, what, until when (exclusive).
struct Issued {
    at: u64,
    op: Op,
    until: Option<u64>,
}

fn reference(history: &[Issued], now: u64) -> (bool, LinkParams) {
    let live = |i: &Issued| i.until.is_none_or(|u| now < u);
    let last_restore = history
        .iter()
        .rposition(|i| matches!(i.op, Op::Restore))
        .map_or(0, |p| p + 1);
    let down = history[last_restore..]
        .iter()
        .any(|i| matches!(i.op, Op::Kill { .. }) && live(i));
    let mut p = configured();
    for i in history.iter().filter(|i| i.at <= now && live(i)) {
        if let Op::Set { field, value, .. } = i.op {
            patch(field, value).apply(&mut p);
        }
    }
    (down, p)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn matches_the_reference(ops in prop::collection::vec(op(), 1..40)) {
        let mut core = LinkOverrides::new(configured());
        // Pending heals: (time, layer), fired in time order like timers.
        let mut heals: Vec<(u64, LayerId)> = Vec::new();
        let mut history: Vec<Issued> = Vec::new();
        let mut now = 0u64;
        for op in ops {
            match &op {
                Op::Wait { ms } => {
                    let end = now + ms;
                    heals.sort();
                    while let Some(&(t, _)) = heals.first() {
                        if t > end { break; }
                        // Every heal due at `t` fires before anyone looks.
                        while heals.first().is_some_and(|h| h.0 == t) {
                            core.expire(heals.remove(0).1);
                        }
                        now = t;
                        let (down, p) = reference(&history, now);
                        prop_assert_eq!(core.is_down(), down, "at {}", now);
                        prop_assert_eq!(core.params(), p, "at {}", now);
                    }
                    now = end;
                }
                Op::Kill { for_ms } => {
                    let id = core.kill(for_ms.is_some()).unwrap();
                    if let Some(f) = for_ms { heals.push((now + f, id)); }
                    history.push(Issued { at: now, op: op.clone(), until: for_ms.map(|f| now + f) });
                }
                Op::Set { field, value, for_ms } => {
                    let id = core.set(patch(*field, *value), for_ms.is_some()).unwrap();
                    if let Some(f) = for_ms { heals.push((now + f, id)); }
                    history.push(Issued { at: now, op: op.clone(), until: for_ms.map(|f| now + f) });
                }
                Op::Restore => {
                    core.restore();
                    history.push(Issued { at: now, op: op.clone(), until: None });
                }
            }
            let (down, p) = reference(&history, now);
            prop_assert_eq!(core.is_down(), down, "at {}", now);
            prop_assert_eq!(core.params(), p, "at {}", now);
        }
    }
}
