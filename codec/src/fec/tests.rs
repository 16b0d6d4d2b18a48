//! Codec-level tests: encoder → lossy channel → decoder, checked against an
//! independent rank computation.
//!
//! Properties (proptest, random and Gilbert–Elliott loss, delayed ACKs):
//! - every id the decoder reports decoded carries exactly the sent bytes;
//! - with in-order delivery the decoder decodes exactly the ids that the
//!   received equations determine (an id is determined iff its unit vector lies
//!   in their row space — in particular every id of an interval over which they
//!   have full rank), so full rank ⇒ the sent bytes come out, and no rank ⇒
//!   nothing comes out;
//! - the encoder window never starts above the decoder's prefix (ACK sliding
//!   never drops a packet the receiver still needs);
//! - the decoder's invariants and feedback counters hold after every packet.
//!
//! Case counts are modest for debug builds; `PROPTEST_CASES` raises them.

use std::collections::{BTreeSet, VecDeque};

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::coefficients::generate_coding_coefficients;
use super::gf::{gf_inv, gf_mul};
use super::packet::{build, FecPacket, PacketBody, RepairHeader, RepairPacket, SourcePacket};

/// The paper's channel (`edgemu_links::paper_channel`), seeded.
fn paper_channel(seed: u64) -> impl FnMut() -> bool {
    let mut ge = edgemu_links::paper_channel::GE;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    move || ge.lose(&mut rng)
}
use super::*;

/// Reference: which of the ids `0..n` the equations determine. Plain dense
/// Gauss–Jordan with scalar arithmetic, independent of the decoder.
fn determined(rows: &[Vec<u8>], n: usize) -> BTreeSet<u32> {
    let mut m: Vec<Vec<u8>> = rows.to_vec();
    let mut pivot_rows: Vec<Vec<u8>> = Vec::new();
    for col in 0..n {
        let Some(r) = m.iter().position(|row| row[col] != 0) else {
            continue;
        };
        let mut p = m.swap_remove(r);
        let inv = gf_inv(p[col]).unwrap();
        for x in p.iter_mut() {
            *x = gf_mul(*x, inv);
        }
        for row in m.iter_mut().chain(pivot_rows.iter_mut()) {
            let c = row[col];
            if c != 0 {
                for (a, b) in row.iter_mut().zip(&p) {
                    *a ^= gf_mul(c, *b);
                }
            }
        }
        pivot_rows.push(p);
    }
    pivot_rows
        .iter()
        .filter(|r| r.iter().filter(|&&c| c != 0).count() == 1)
        .map(|r| r.iter().position(|&c| c != 0).unwrap() as u32)
        .collect()
}

#[derive(Debug, Clone)]
struct Scenario {
    /// Per transmission: `None` = next source packet, `Some(m)` = repair with
    /// `max_symbols = m`; and whether the channel loses it.
    schedule: Vec<(Option<usize>, bool)>,
    k: u16,
    dt: u8,
    /// ACKs reach the encoder this many transmissions later.
    ack_delay: usize,
    /// Swap adjacent deliveries with this seed (None = in order).
    reorder: Option<u64>,
    payload_seed: u64,
}

struct Outcome {
    decoded: BTreeSet<u32>,
    determined: BTreeSet<u32>,
}

fn payload_for(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let len = if rng.random_bool(0.1) {
        MAX_PAYLOAD
    } else {
        rng.random_range(0..48)
    };
    let mut p = vec![0u8; len];
    rng.fill(&mut p[..]);
    p
}

fn padded_symbol(block: u32, frag: u16, payload: &[u8]) -> Vec<u8> {
    let mut s = vec![0u8; SYMBOL_SIZE];
    SourcePacket {
        id: 0,
        block_id: block,
        fragment_id: frag,
        payload,
    }
    .write_symbol(&mut s)
    .unwrap();
    s
}

fn run(sc: &Scenario) -> Outcome {
    let mut enc = RlcEncoder::new(EncoderConfig {
        k: sc.k,
        dt: sc.dt,
        session: 5,
        ..Default::default()
    })
    .unwrap();
    let mut dec = RlcDecoder::new(DecoderConfig {
        session: Some(5),
        ..Default::default()
    })
    .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(sc.payload_seed);
    let mut sent: Vec<(u32, u16, Vec<u8>)> = Vec::new();
    let mut frames: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut acks: VecDeque<(usize, Feedback)> = VecDeque::new();
    let mut rows: Vec<Vec<u8>> = Vec::new();
    let mut reorder_rng = sc.reorder.map(ChaCha8Rng::seed_from_u64);
    let mut held: Option<Vec<u8>> = None;

    // Build the whole transmission first is impossible (ACKs depend on the
    // decoder), so interleave: transmit at t, deliver, queue feedback.
    let n_src = sc.schedule.iter().filter(|(a, _)| a.is_none()).count();
    let deliver = |bytes: Vec<u8>,
                   dec: &mut RlcDecoder,
                   rows: &mut Vec<Vec<u8>>,
                   sent: &Vec<(u32, u16, Vec<u8>)>| {
        let pkt = parse(&bytes).unwrap();
        let mut row = vec![0u8; n_src];
        match pkt.body {
            PacketBody::Source(s) => row[s.id as usize] = 1,
            PacketBody::Repair(r) => {
                let mut cc = vec![0u8; r.header.count as usize];
                generate_coding_coefficients(r.header.key, &mut cc, r.header.dt).unwrap();
                for (i, c) in cc.iter().enumerate() {
                    row[r.header.first_id as usize + i] = *c;
                }
            }
        }
        rows.push(row);
        let before = dec.stats().payload_ops;
        let progress = dec.insert(&pkt).unwrap();
        if matches!(progress.outcome, super::decoder::Outcome::Redundant) {
            assert_eq!(
                dec.stats().payload_ops,
                before,
                "redundant repair touched payloads"
            );
        }
        for &id in &progress.decoded {
            let (b, f, p) = &sent[id as usize];
            assert_eq!(
                dec.symbol(id).unwrap(),
                &padded_symbol(*b, *f, p)[..],
                "id {id}"
            );
            let got = dec.get(id).unwrap().unwrap();
            assert_eq!(
                (got.block_id, got.fragment_id, got.payload),
                (*b, *f, &p[..])
            );
        }
        dec.check_invariants().unwrap();
        let fb = dec.feedback();
        assert_eq!(fb.cumulative, progress.prefix);
        assert_eq!(fb.deficit, fb.unknowns - fb.equations);
        if let Some(h) = fb.highest_seen {
            let undecoded = (fb.cumulative..=h).filter(|&i| !dec.is_decoded(i)).count() as u32;
            assert_eq!(undecoded, fb.unknowns);
        }
        fb
    };

    for (t, &(action, lost)) in sc.schedule.iter().enumerate() {
        while acks.front().is_some_and(|(at, _)| *at <= t) {
            let (_, fb) = acks.pop_front().unwrap();
            enc.on_ack(&fb).unwrap();
        }
        assert!(
            enc.window().start <= dec.prefix(),
            "encoder dropped a needed packet"
        );
        let frame = match action {
            None => {
                let p = payload_for(&mut rng);
                let (b, f) = (rng.random::<u32>(), rng.random::<u16>());
                let fr = enc.send_source(b, f, &p).unwrap();
                assert_eq!(fr.id as usize, sent.len());
                sent.push((b, f, p));
                Some(fr)
            }
            Some(m) => enc.repair(m),
        };
        let Some(frame) = frame else { continue };
        assert!(frame.bytes.len() <= FRAME_SIZE);
        frames.push((t, frame.bytes.clone()));
        if lost {
            continue;
        }
        let mut to_deliver = vec![frame.bytes];
        if let Some(r) = reorder_rng.as_mut() {
            if let Some(h) = held.take() {
                to_deliver.push(h);
            } else if r.random_bool(0.3) {
                held = to_deliver.pop();
            }
        }
        for bytes in to_deliver {
            let fb = deliver(bytes, &mut dec, &mut rows, &sent);
            acks.push_back((t + sc.ack_delay, fb));
        }
    }
    if let Some(h) = held.take() {
        deliver(h, &mut dec, &mut rows, &sent);
    }
    let decoded = (0..sent.len() as u32)
        .filter(|&i| dec.is_decoded(i))
        .collect();
    Outcome {
        decoded,
        determined: determined(&rows, n_src),
    }
}

fn schedule_strategy(max_len: usize) -> impl Strategy<Value = Vec<(Option<usize>, bool)>> {
    prop::collection::vec(
        (
            prop_oneof![4 => Just(None), 1 => (1usize..40).prop_map(Some)],
            prop::bool::weighted(0.2),
        ),
        1..max_len,
    )
}

fn ge_schedule(len: usize, repair_every: usize, seed: u32) -> Vec<(Option<usize>, bool)> {
    let mut lose = paper_channel(u64::from(seed));
    (0..len)
        .map(|i| {
            let action = if i % (repair_every + 1) == repair_every {
                Some(usize::MAX)
            } else {
                None
            };
            (action, lose())
        })
        .collect()
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Random loss, random repair sizes, random density, delayed ACKs.
    #[test]
    fn random_loss_decodes_exactly_what_is_determined(
        schedule in schedule_strategy(120),
        k in 1u16..24,
        dt in prop_oneof![Just(15u8), 0u8..15],
        ack_delay in 0usize..30,
        payload_seed in any::<u64>(),
    ) {
        let sc = Scenario { schedule, k, dt, ack_delay, reorder: None, payload_seed };
        let out = run(&sc);
        prop_assert_eq!(&out.decoded, &out.determined);
    }

    /// Bursty Gilbert–Elliott loss at the paper's parameters, one repair per
    /// `repair_every` sources, followed by a flush of repairs.
    #[test]
    fn bursty_loss_decodes_exactly_what_is_determined(
        len in 20usize..250,
        repair_every in 2usize..12,
        k in prop_oneof![Just(16u16), Just(64u16), 1u16..80],
        ack_delay in 0usize..60,
        seed in any::<u32>(),
    ) {
        let mut schedule = ge_schedule(len, repair_every, seed);
        schedule.extend((0..30).map(|_| (Some(usize::MAX), false)));
        let sc = Scenario { schedule, k, dt: 15, ack_delay, reorder: None, payload_seed: u64::from(seed) };
        let out = run(&sc);
        prop_assert_eq!(&out.decoded, &out.determined);
    }

    /// Reordered delivery: never wrong data (checked inside `run`), and never
    /// more than the equations determine.
    #[test]
    fn reordering_never_yields_wrong_data(
        schedule in schedule_strategy(100),
        k in 1u16..24,
        ack_delay in 0usize..20,
        seed in any::<u64>(),
    ) {
        let sc = Scenario { schedule, k, dt: 15, ack_delay, reorder: Some(seed), payload_seed: seed };
        let out = run(&sc);
        prop_assert!(out.decoded.is_subset(&out.determined));
    }

    /// Arbitrary bytes and mutated frames never panic the parser or the
    /// decoder, and the decoder's invariants survive.
    #[test]
    fn hostile_frames_are_errors_not_panics(
        frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 1..20),
        flips in prop::collection::vec((0usize..1400, any::<u8>()), 0..8),
    ) {
        let mut dec = RlcDecoder::new(DecoderConfig { max_window: 64, max_count: 32, session: None }).unwrap();
        let mut enc = RlcEncoder::new(EncoderConfig::default()).unwrap();
        for f in &frames {
            let _ = dec.insert_frame(f);
            dec.check_invariants().map_err(TestCaseError::fail)?;
            let good = enc.send_source(1, 2, f).unwrap();
            let mut bad = enc.repair(8).unwrap().bytes;
            for &(at, x) in &flips {
                if let Some(b) = bad.get_mut(at) { *b ^= x; }
            }
            let _ = dec.insert_frame(&good.bytes);
            let _ = dec.insert_frame(&bad);
            dec.check_invariants().map_err(TestCaseError::fail)?;
        }
    }
}

#[test]
fn lossless_stream_decodes_in_order_and_repairs_are_free() {
    let mut enc = RlcEncoder::new(EncoderConfig::default()).unwrap();
    let mut dec = RlcDecoder::new(DecoderConfig::default()).unwrap();
    for i in 0..50u32 {
        let f = enc.send_source(i, 0, &i.to_be_bytes()).unwrap();
        let p = dec.insert_frame(&f.bytes).unwrap();
        assert_eq!(p.decoded, vec![i]);
        assert_eq!(p.prefix, i + 1);
        let r = enc.repair(16).unwrap();
        let ops = dec.stats().payload_ops;
        let p = dec.insert_frame(&r.bytes).unwrap();
        assert_eq!(p.outcome, decoder::Outcome::Redundant);
        assert_eq!(dec.stats().payload_ops, ops);
        enc.on_ack(&dec.feedback()).unwrap();
    }
    let fb = dec.feedback();
    assert_eq!(
        fb,
        Feedback {
            cumulative: 50,
            highest_seen: Some(49),
            equations: 0,
            unknowns: 0,
            deficit: 0
        }
    );
    assert_eq!(enc.window_len(), 0);
}

#[test]
fn burst_is_recovered_by_later_repairs() {
    let mut enc = RlcEncoder::new(EncoderConfig {
        k: 8,
        ..Default::default()
    })
    .unwrap();
    let mut dec = RlcDecoder::new(DecoderConfig::default()).unwrap();
    let payloads: Vec<Vec<u8>> = (0..8).map(|i| vec![i as u8; 100 + i]).collect();
    for (i, p) in payloads.iter().enumerate() {
        let f = enc.send_source(0, i as u16, p).unwrap();
        if !(2..5).contains(&i) {
            dec.insert_frame(&f.bytes).unwrap();
        }
    }
    assert_eq!(dec.prefix(), 2);
    let fb = dec.feedback();
    assert_eq!((fb.unknowns, fb.equations, fb.deficit), (3, 0, 3));
    let mut got = BTreeSet::new();
    for n in 0..3 {
        let p = dec.insert_frame(&enc.repair(8).unwrap().bytes).unwrap();
        assert_eq!(p.outcome, decoder::Outcome::Innovative);
        got.extend(p.decoded);
        if n < 2 {
            assert!(got.is_empty(), "decoded before full rank");
            assert_eq!(dec.feedback().deficit, 2 - n);
        }
    }
    assert_eq!(got, BTreeSet::from([2, 3, 4]));
    assert_eq!(dec.prefix(), 8);
    for (i, p) in payloads.iter().enumerate() {
        assert_eq!(dec.get(i as u32).unwrap().unwrap().payload, &p[..]);
    }
    // A fourth repair is redundant.
    let p = dec.insert_frame(&enc.repair(8).unwrap().bytes).unwrap();
    assert_eq!(p.outcome, decoder::Outcome::Redundant);
}

#[test]
fn source_arriving_after_repairs_completes_the_system() {
    // Lose 0 and 1, receive one repair over {0, 1, 2}, then source 2 and
    // source 1 arrive late: the equation's pivot moves and 0 decodes.
    let mut enc = RlcEncoder::new(EncoderConfig::default()).unwrap();
    let mut dec = RlcDecoder::new(DecoderConfig::default()).unwrap();
    let f: Vec<Frame> = (0..3u8)
        .map(|i| enc.send_source(0, 0, &[i + 10; 30]).unwrap())
        .collect();
    let r = enc.repair(3).unwrap();
    assert!(dec.insert_frame(&r.bytes).unwrap().decoded.is_empty());
    assert_eq!(dec.feedback().equations, 1);
    assert_eq!(dec.insert_frame(&f[2].bytes).unwrap().decoded, vec![2]);
    let p = dec.insert_frame(&f[1].bytes).unwrap();
    assert_eq!(BTreeSet::from_iter(p.decoded), BTreeSet::from([0, 1]));
    assert_eq!(dec.prefix(), 3);
    assert_eq!(dec.get(0).unwrap().unwrap().payload, &[10; 30]);
    dec.check_invariants().unwrap();
}

#[test]
fn hostile_packets_are_rejected_without_changing_state() {
    let mut dec = RlcDecoder::new(DecoderConfig {
        max_window: 100,
        max_count: 16,
        session: Some(9),
    })
    .unwrap();
    let src = |id: u32, session: u32| {
        build(&FecPacket {
            session,
            seq: 0,
            body: PacketBody::Source(SourcePacket {
                id,
                block_id: 0,
                fragment_id: 0,
                payload: b"abc",
            }),
        })
        .unwrap()
    };
    let sym = [1u8; 16];
    let rep = |first_id: u32, count: u16| {
        build(&FecPacket {
            session: 9,
            seq: 0,
            body: PacketBody::Repair(RepairPacket {
                header: RepairHeader {
                    first_id,
                    count,
                    key: 3,
                    dt: 15,
                },
                symbol: &sym,
            }),
        })
        .unwrap()
    };
    dec.insert_frame(&src(0, 9)).unwrap();
    let before = dec.feedback();
    // The window is measured from the prefix (1): ids up to 100 fit.
    assert!(matches!(
        dec.insert_frame(&src(101, 9)),
        Err(FecError::TooFarAhead {
            id: 101,
            limit: 100
        })
    ));
    assert!(matches!(
        dec.insert_frame(&src(5, 8)),
        Err(FecError::WrongSession {
            expected: 9,
            got: 8
        })
    ));
    assert!(matches!(
        dec.insert_frame(&rep(1, 17)),
        Err(FecError::CountOverLimit {
            count: 17,
            limit: 16
        })
    ));
    assert!(matches!(
        dec.insert_frame(&rep(90, 16)),
        Err(FecError::TooFarAhead { .. })
    ));
    assert!(matches!(
        dec.insert_frame(&src(u32::MAX, 9)),
        Err(FecError::IdOverflow { .. })
    ));
    assert!(dec.insert_frame(&[0u8; 3]).is_err());
    assert_eq!(dec.feedback(), before);
    dec.check_invariants().unwrap();
    // Within the limits the same shapes are accepted.
    dec.insert_frame(&src(100, 9)).unwrap();
    dec.insert_frame(&rep(1, 16)).unwrap();
    dec.check_invariants().unwrap();
}

#[test]
fn memory_stays_bounded_on_a_long_stream() {
    // 3000 packets over the paper's GE channel with a small window: the decoder
    // never holds more than max_window slots and keeps decoding.
    let mut enc = RlcEncoder::new(EncoderConfig {
        k: 16,
        max_window: 256,
        ..Default::default()
    })
    .unwrap();
    let mut dec = RlcDecoder::new(DecoderConfig {
        max_window: 512,
        ..Default::default()
    })
    .unwrap();
    let mut lose = paper_channel(11);
    let mut acks = VecDeque::new();
    for t in 0..3000usize {
        while acks.front().is_some_and(|(at, _)| *at <= t) {
            let (_, c) = acks.pop_front().unwrap();
            enc.on_cumulative_ack(c).unwrap();
        }
        let frame = if t % 4 == 3 || enc.window_len() >= 256 {
            enc.repair(16)
        } else {
            Some(enc.send_source(0, 0, &[t as u8; 64]).unwrap())
        };
        let Some(frame) = frame else { continue };
        if lose() {
            continue;
        }
        let p = dec.insert_frame(&frame.bytes).unwrap();
        for id in p.decoded {
            assert_eq!(dec.get(id).unwrap().unwrap().payload.len(), 64);
        }
        acks.push_back((t + 40, dec.prefix()));
        dec.check_invariants().unwrap();
    }
    assert!(dec.prefix() > 1500, "prefix {}", dec.prefix());
}

#[test]
fn reference_rank_helper_sanity() {
    // e0 + e1 and e1 determine both; e0 + e1 alone determines none.
    assert_eq!(
        determined(&[vec![1, 1], vec![0, 1]], 2),
        BTreeSet::from([0, 1])
    );
    assert!(determined(&[vec![1, 1]], 2).is_empty());
    assert_eq!(
        determined(&[vec![1, 1, 0], vec![0, 0, 7]], 3),
        BTreeSet::from([2])
    );
}
