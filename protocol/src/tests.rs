//! The protocol through the real frame codec: every message, command,
//! reply and error round-trips; malformed typed payloads are refused;
//! frames at the size limit of the densest values decode (the codec's
//! decode-limit contract holds for these types).

use super::*;
use edgemu_codec::ids::{ActorId, Direction, LinkId};
use edgemu_codec::wire::MAX_FRAME_BYTES;
use edgemu_config::command::*;
use edgemu_config::RebuildMode;
use edgemu_handoff::{BlockLayout, Scheme, SCHEMES};
use edgemu_policies::lyreo::SlotLoad;
use lyreo::{Answer, Expected, Outcome, SlotReport};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

// ---------------------------------------------------------------- fixtures

fn envelope(payload: Msg) -> Envelope {
    Envelope {
        src: ActorId(1),
        dst: ActorId(2),
        via: None,
        sent_at_ns: 0,
        due_ns: None,
        payload,
    }
}

fn offer(scheme: Scheme, rebuild: RebuildMode) -> HandoffOffer {
    HandoffOffer {
        handoff: 3,
        t0_ns: 1_000_000_000,
        deadline_ns: 48_000_000,
        rho: 0.8,
        layout: BlockLayout {
            n_layers: 30,
            n_tokens: 32,
            tokens_per_block: 16,
            block_bytes: 12_288,
        },
        utilities: vec![0.5, 0.25, 0.125],
        tokens: vec![1, 2, 49_151],
        context_id: "builtin:c1#0".into(),
        scheme,
        policy: "priorityfec-ddqn".into(),
        policy_version: "0123456789ab".into(),
        rebuild,
        decode_tokens: 16,
        k: 64,
        feedback_every: 8,
        source_packets: 540,
        cache_hit: true,
        kernel_tcp: None,
    }
}

/// One of every actor message kind.
fn all_messages() -> Vec<Msg> {
    let load = SlotLoad {
        eta: 0.25,
        peak_bytes: 9,
        high_kv: true,
        occupancy_bytes: 8,
        reserved_bytes: 7,
        waiting_kv_bytes: 6,
        backlog: 5,
        backlog_s: 1.25,
    };
    vec![
        Msg::Probe(Probe {
            seq: 1,
            size: 1400,
            pad: Vec::new(),
        }),
        Msg::Probe(Probe {
            seq: 2,
            size: 3,
            pad: vec![7, 8, 9],
        }),
        Msg::Ping(Ping {
            seq: 2,
            size: 64,
            reply_via: Some(LinkId(4)),
        }),
        Msg::Pong(Pong {
            seq: 2,
            size: 64,
            ping_sent_at_ns: 99,
        }),
        LyreoMsg::Request {
            id: 1 << 40,
            slot: 7,
            input_len: 70,
            output_len: 215,
            x_m: 12.5,
            y_m: -0.0,
            power_w: 0.1,
        }
        .into(),
        LyreoMsg::Assign {
            id: 7,
            slot: 2,
            server: ActorId(3),
            rate_bps: 1.5e7,
            upload_ns: 12_345,
            policy: "least-loaded".into(),
            policy_version: "ab12".into(),
        }
        .into(),
        LyreoMsg::Expect {
            slot: 2,
            requests: vec![Expected {
                id: 7,
                user: ActorId(9),
                input_len: 70,
                output_len: 215,
                upload_ns: 12_345,
            }],
        }
        .into(),
        LyreoMsg::Report(SlotReport {
            slot: 4,
            load,
            capability: None,
        })
        .into(),
        LyreoMsg::Report(SlotReport {
            slot: 5,
            load,
            capability: Some(edgemu_policies::lyreo::ServerCapability {
                capacity_bytes: 10,
                kv_bytes_per_token: 2,
                prefill_tok_s: 900.0,
                decode_step_empty_s: 0.03,
                decode_step_full_s: 0.04,
            }),
        })
        .into(),
        LyreoMsg::Answer(Answer {
            id: 7,
            outcome: Outcome::Failed,
            upload_ns: 1,
            wait_ns: 2,
            prefill_ns: 3,
            decode_ns: 4,
            finished_ns: 5,
            reason: "server killed".into(),
        })
        .into(),
        AgentMsg::Offer(Box::new(offer(Scheme::PriorityFec, RebuildMode::Mask))).into(),
        AgentMsg::Abort {
            handoff: 3,
            reason: "killed by control".into(),
            repair_sent: 12,
        }
        .into(),
        AgentMsg::SenderDone {
            handoff: 3,
            source_sent: 540,
            repair_sent: 12,
        }
        .into(),
        Msg::KvFrame(vec![0xa5; 1400]),
        Msg::KvFeedback(vec![1, 2, 3]),
        Msg::IpPacket(vec![0x45; 60]),
    ]
}

fn ge_loss() -> serde_json::Map<String, serde_json::Value> {
    serde_json::json!({"model": "ge", "eps_g": 0.001, "eps_b": 0.5, "p_gb": 0, "p_bg": 1})
        .as_object()
        .cloned()
        .unwrap_or_default()
}

/// One of every command, with every optional key set and with none.
fn all_commands() -> Vec<Command> {
    let link = |dir, for_: Option<&str>| LinkTarget {
        link: "wan".into(),
        dir,
        for_: for_.map(Into::into),
    };
    let actor = |for_: Option<&str>| ActorTarget {
        actor: "s1".into(),
        for_: for_.map(Into::into),
    };
    let pair = |for_: Option<&str>| HostPair {
        hosts: vec!["alpha".into(), "beta".into()],
        for_: for_.map(Into::into),
    };
    vec![
        Command::Status(NoKeys {}),
        Command::Metrics(NoKeys {}),
        Command::MetricsSubscribe(Subscribe {
            interval: Some("250ms".into()),
        }),
        Command::LinkKill(link(Some(Dir::Ab), Some("3s"))),
        Command::LinkKill(link(None, None)),
        Command::LinkRestore(link(Some(Dir::Ba), None)),
        Command::LinkSet(LinkSet {
            link: "wan".into(),
            dir: Some(Dir::Ab),
            for_: Some("2s".into()),
            rate: Some("20Mbps".into()),
            rate_trace: Some("t/trace.mahi".into()),
            rate_steps: Some("t/steps.txt".into()),
            delay: Some("10ms".into()),
            rtt: Some("20ms".into()),
            jitter: Some("1ms".into()),
            queue: Some("unlimited".into()),
            loss: Some(ge_loss()),
        }),
        Command::LinkSet(LinkSet {
            link: "wan".into(),
            dir: None,
            for_: None,
            rate: None,
            rate_trace: None,
            rate_steps: None,
            delay: None,
            rtt: None,
            jitter: None,
            queue: None,
            loss: None,
        }),
        Command::LinkFlap(LinkFlap {
            link: "wan".into(),
            mtbf: "5s".into(),
            mttr: "1s".into(),
            seed: Some(u64::MAX),
            until: Some("18s".into()),
        }),
        Command::HostPartition(pair(Some("4s"))),
        Command::HostHeal(pair(None)),
        Command::PolicyGet(PolicyTarget {
            actor: "sched".into(),
        }),
        Command::PolicySwap(PolicySwap {
            actor: "sched".into(),
            policy: Some("lyreo".into()),
            weights: Some("w/lyreo.safetensors".into()),
            weights_base64: Some("AAEC".into()),
            url: Some("ws://127.0.0.1:7300".into()),
            deadline: Some("5ms".into()),
            fallback: None,
        }),
        Command::PolicyRollback(PolicyTarget {
            actor: "sched".into(),
        }),
        Command::ActorKill(actor(Some("5s"))),
        Command::ActorRestart(actor(None)),
        Command::RunStop(NoKeys {}),
    ]
}

fn link_status() -> LinkStatus {
    LinkStatus {
        link: LinkId(3),
        name: "wan".into(),
        dir: Direction::BtoA,
        t_ns: 1,
        up: true,
        rate_bps: Some(100_000_000),
        delay_ns: 20_000_000,
        offered: 10,
        delivered: 9,
        lost: 1,
        queue_dropped: 0,
        down_dropped: 0,
        retransmissions: 0,
        bytes_offered: 14_000,
        bytes_delivered: 12_600,
        queued_bytes: 0,
        delay_p50_ns: 20_100_000,
        delay_p99_ns: 21_000_000,
        delay_max_ns: 22_000_000,
        expected_loss: Some(0.084),
    }
}

fn host_status(kv: bool, error: Option<&str>) -> HostStatus {
    let kv_caches = if kv {
        BTreeMap::from([(
            "agent-a".to_string(),
            BTreeMap::from([("hits".to_string(), 3u64), ("bytes".to_string(), 1 << 20)]),
        )])
    } else {
        BTreeMap::new()
    };
    HostStatus {
        host: "alpha".into(),
        t_ns: 5,
        links: vec![link_status()],
        router: RouterStatus {
            delivered_local: 4,
            ..RouterStatus::default()
        },
        mesh: BTreeMap::from([(
            "beta".to_string(),
            MeshPeerStatus {
                up: true,
                malformed_frames: 1,
                ..MeshPeerStatus::default()
            },
        )]),
        control: ControlStatus::default(),
        kv_caches,
        // A loaded host's figures cross with the rest.
        load: kv.then_some(edgemu_config::command::HostLoad {
            timer_late_p99_ms: 1.5,
            ticks: 500,
            cpu_cores: 0.75,
            ..Default::default()
        }),
        error: error.map(Into::into),
    }
}

fn all_replies() -> Vec<ForwardedReply> {
    vec![
        Ok(CommandReply::Status(StatusReply {
            hosts: vec![host_status(true, None), host_status(false, Some("down"))],
        })),
        Ok(CommandReply::Applied(Applied {
            applied: vec![
                AppliedTarget {
                    host: "beta".into(),
                    target: "link wan ba".into(),
                    effective_ns: 7,
                    detail: None,
                    error: None,
                },
                AppliedTarget {
                    host: "beta".into(),
                    target: "actor s1".into(),
                    effective_ns: 0,
                    detail: Some("dropped 3 requests".into()),
                    error: Some("already dead".into()),
                },
            ],
            errors: vec!["host#2: down".into()],
        })),
        Ok(CommandReply::Policy(PolicyReply {
            host: "beta".into(),
            actor: "sched".into(),
            problem: "request scheduling".into(),
            policy: "lyreo".into(),
            version: "ff".repeat(32),
            loaded_at_ns: 9,
            requested_by: "control (via alpha)".into(),
            previous: Some("00".repeat(32)),
        })),
        Ok(CommandReply::Policy(PolicyReply {
            host: "beta".into(),
            actor: "sched".into(),
            problem: "request scheduling".into(),
            policy: "least-loaded".into(),
            version: "ab".into(),
            loaded_at_ns: 0,
            requested_by: "config".into(),
            previous: None,
        })),
    ]
}

/// Every error a host may send a peer (all but `Remote`).
fn all_errors() -> Vec<ControlError> {
    vec![
        ControlError::Invalid("`link`: no link named \"x\"".into()),
        ControlError::SubscribeElsewhere,
        ControlError::TargetNeedsMesh,
        ControlError::NoTarget,
        ControlError::NoSuchActor(12),
        ControlError::NotForwardedAgain,
        ControlError::ActorNeedsMesh,
        ControlError::RouteMismatch("not an action".into()),
        ControlError::NoPolicySlot {
            actor: "s1".into(),
            host: "beta".into(),
        },
        ControlError::PolicyRefused {
            actor: "sched".into(),
            reason: "weights: not safetensors".into(),
        },
        ControlError::NothingApplied(vec!["a".into(), "b".into()]),
        ControlError::NotStarted,
        ControlError::TaskFailed {
            task: "policy command".into(),
            reason: "task 7 panicked".into(),
        },
        ControlError::HostStopping("Mailbox has closed".into()),
        ControlError::NoReply(Duration::from_secs(10)),
        ControlError::NoMesh,
        ControlError::NoSuchPeer(3),
        ControlError::PeerDown("beta".into()),
        ControlError::PeerQueueFull("beta".into()),
        ControlError::PeerLeaving("beta".into()),
        ControlError::PeerLost("beta".into()),
        ControlError::PeerSilent {
            host: "beta".into(),
            after: Duration::from_secs(5),
        },
    ]
}

fn round_trip(frame: Frame) {
    let bytes = match encode_frame(&frame) {
        Ok(b) => b,
        Err(e) => panic!("{} does not encode: {e}", frame.kind()),
    };
    assert!(decode_frame(&bytes) == Ok(frame), "round trip changed it");
}

// ---------------------------------------------------------------- round trips

#[test]
fn every_message_round_trips() {
    for m in all_messages() {
        round_trip(Frame::Envelopes(vec![envelope(m)]));
    }
    round_trip(Frame::Envelopes(
        all_messages().into_iter().map(envelope).collect(),
    ));
}

#[test]
fn every_scheme_and_rebuild_mode_round_trips() {
    for spec in SCHEMES {
        for rebuild in [RebuildMode::ZeroFill, RebuildMode::Mask] {
            let m: Msg = AgentMsg::Offer(Box::new(offer(spec.scheme, rebuild))).into();
            round_trip(Frame::Envelopes(vec![envelope(m)]));
        }
    }
}

#[test]
fn every_command_round_trips() {
    for (id, c) in all_commands().into_iter().enumerate() {
        round_trip(Frame::ControlForward {
            id: id as u64,
            command: ForwardedCommand(c),
        });
    }
}

#[test]
fn every_reply_and_error_round_trips() {
    for reply in all_replies() {
        round_trip(Frame::ControlReply { id: 1, reply });
    }
    for e in all_errors() {
        round_trip(Frame::ControlReply {
            id: 2,
            reply: Err(e),
        });
    }
}

#[test]
fn a_reply_never_carries_another_hosts_error() {
    // `Remote` is made by the host that forwarded; it has no wire form, so
    // an error decoded from a peer cannot nest.
    let nested = ControlError::Remote {
        host: "beta".into(),
        error: Box::new(ControlError::NoTarget),
    };
    assert_eq!(
        nested.to_string(),
        "beta: the command has no target on any host"
    );
    assert!(encode_frame(&Frame::ControlReply {
        id: 1,
        reply: Err(nested)
    })
    .is_err());
}

#[test]
fn a_loss_table_keeps_its_numbers_and_refuses_nesting() {
    let mut loss = ge_loss();
    loss.insert("file".into(), "t/loss.txt".into());
    loss.insert("neg".into(), (-3).into());
    let set = |loss| {
        ForwardedCommand(Command::LinkSet(LinkSet {
            link: "wan".into(),
            dir: None,
            for_: None,
            rate: None,
            rate_trace: None,
            rate_steps: None,
            delay: None,
            rtt: None,
            jitter: None,
            queue: None,
            loss: Some(loss),
        }))
    };
    round_trip(Frame::ControlForward {
        id: 1,
        command: set(loss.clone()),
    });
    loss.insert("nested".into(), serde_json::json!([1, 2]));
    assert!(encode_frame(&Frame::ControlForward {
        id: 1,
        command: set(loss)
    })
    .is_err());
}

#[test]
fn a_link_charges_declared_sizes_and_the_cores_bytes() {
    let probe = Msg::Probe(Probe {
        seq: 0,
        size: 1500,
        pad: Vec::new(),
    });
    assert_eq!(probe.wire_size(), 1500);
    assert_eq!(Msg::KvFrame(vec![0; 1400]).wire_size(), 1400);
    assert_eq!(Msg::KvFeedback(vec![0; 10]).wire_size(), 10);
    assert_eq!(Msg::IpPacket(vec![0; 1500]).wire_size(), 1500);
    for m in all_messages() {
        if matches!(m, Msg::Lyreo(_) | Msg::Agent(_)) {
            let n = edgemu_codec::wire::encoded_len(&m).unwrap_or(0);
            assert!(n > 1 && m.wire_size() as usize == n, "{m:?}");
        }
    }
}

// ---------------------------------------------------------------- malformed payloads

/// Offset of the message's variant tag in a frame of one envelope from
/// `envelope()`: header 5, frame tag 1, vector length 1, then src, dst,
/// `via: None`, `sent_at_ns`, `due_ns: None` (one byte each).
const MSG_TAG_AT: usize = 5 + 1 + 1 + 5;

fn frame_of(m: Msg) -> Vec<u8> {
    encode_frame(&Frame::Envelopes(vec![envelope(m)])).unwrap_or_default()
}

fn is_malformed(bytes: &[u8]) -> bool {
    matches!(decode_frame(bytes), Err(WireError::Malformed(_)))
}

#[test]
fn unknown_variants_inside_a_message_are_malformed() {
    let report = frame_of(all_messages()[7].clone());
    assert!(decode_frame(&report).is_ok());
    // No eighth kind of message.
    let mut bad = report.clone();
    bad[MSG_TAG_AT] = 7;
    assert!(is_malformed(&bad));
    // No sixth kind of LYREO message.
    let mut bad = report.clone();
    bad[MSG_TAG_AT + 1] = 5;
    assert!(is_malformed(&bad));
    // A request's outcome past `Failed`.
    let answer = frame_of(all_messages()[9].clone());
    let outcome_at = MSG_TAG_AT + 3; // tags of Msg, LyreoMsg; the id (7)
    assert_eq!(answer[outcome_at], 2, "Failed");
    let mut bad = answer.clone();
    bad[outcome_at] = 3;
    assert!(is_malformed(&bad));
}

#[test]
fn an_offer_with_an_unknown_scheme_or_rebuild_mode_is_malformed() {
    // The two encodings differ only where the scheme is.
    let a = frame_of(AgentMsg::Offer(Box::new(offer(Scheme::Udp, RebuildMode::Mask))).into());
    let b = frame_of(
        AgentMsg::Offer(Box::new(offer(Scheme::DeficitHeuristic, RebuildMode::Mask))).into(),
    );
    let diff: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
    assert_eq!(diff.len(), 1, "{diff:?}");
    let mut bad = a.clone();
    bad[diff[0]] = SCHEMES.len() as u8;
    assert!(is_malformed(&bad));
    let z = frame_of(AgentMsg::Offer(Box::new(offer(Scheme::Udp, RebuildMode::ZeroFill))).into());
    let diff: Vec<usize> = (0..a.len()).filter(|&i| a[i] != z[i]).collect();
    assert_eq!(diff.len(), 1, "{diff:?}");
    let mut bad = a;
    bad[diff[0]] = 2;
    assert!(is_malformed(&bad));
}

#[test]
fn an_offer_whose_layout_fails_its_checks_is_malformed() {
    // A peer's layout with no tokens per block would divide by zero in
    // every count the receiver takes of it: it must not decode.
    let mut o = offer(Scheme::Udp, RebuildMode::Mask);
    o.layout.tokens_per_block = 0;
    assert!(is_malformed(&frame_of(AgentMsg::Offer(Box::new(o)).into())));
    let mut o = offer(Scheme::Udp, RebuildMode::Mask);
    o.layout.block_bytes = u32::MAX;
    assert!(is_malformed(&frame_of(AgentMsg::Offer(Box::new(o)).into())));
    let good = frame_of(AgentMsg::Offer(Box::new(offer(Scheme::Udp, RebuildMode::Mask))).into());
    assert!(!is_malformed(&good));
}

#[test]
fn a_command_or_reply_with_a_bad_tag_is_malformed() {
    let cmd = encode_frame(&Frame::ControlForward {
        id: 1,
        command: ForwardedCommand(Command::RunStop(NoKeys {})),
    })
    .unwrap_or_default();
    // header, frame tag, id, then the command's variant.
    assert_eq!(cmd[5 + 1 + 1], 14, "RunStop");
    let mut bad = cmd;
    bad[5 + 1 + 1] = Command::NAMES.len() as u8;
    assert!(is_malformed(&bad));

    let reply = encode_frame(&Frame::ControlReply {
        id: 1,
        reply: Err(ControlError::NoTarget),
    })
    .unwrap_or_default();
    // header, frame tag, id, Result's tag (Err), the error's variant.
    let mut bad = reply.clone();
    bad[5 + 1 + 1] = 2;
    assert!(is_malformed(&bad), "Result has two variants");
    let mut bad = reply;
    bad[5 + 1 + 1 + 1] = 200;
    assert!(is_malformed(&bad));
}

#[test]
fn every_strict_prefix_of_every_typed_frame_is_an_error() {
    let mut frames: Vec<Frame> = all_messages()
        .into_iter()
        .map(|m| Frame::Envelopes(vec![envelope(m)]))
        .collect();
    frames.extend(all_commands().into_iter().map(|c| Frame::ControlForward {
        id: 1,
        command: ForwardedCommand(c),
    }));
    frames.extend(
        all_replies()
            .into_iter()
            .map(|reply| Frame::ControlReply { id: 1, reply }),
    );
    for f in frames {
        let bytes = encode_frame(&f).unwrap_or_default();
        for len in 0..bytes.len() {
            assert!(
                decode_frame(&bytes[..len]).is_err(),
                "{} cut at {len}",
                f.kind()
            );
        }
    }
}

// ---------------------------------------------------------------- the decode limit

/// Encoded length, for values of several types in one closure.
trait ErasedLen {
    fn len(&self) -> usize;
}

impl<T: serde::Serialize> ErasedLen for T {
    fn len(&self) -> usize {
        edgemu_codec::wire::encoded_len(self)
            .unwrap_or(usize::MAX)
            .max(1)
    }
}

/// The codec's decode limit allows 8 claimed bytes per wire byte: frames at
/// the size limit made of the values that claim the most per wire byte
/// must still decode.
#[test]
fn frames_of_the_densest_values_at_the_size_limit_decode() {
    let fill = |unit: usize| (MAX_FRAME_BYTES - 64) / unit;
    // Tiny envelopes: a pong with every number 0.
    let pong = envelope(Msg::Pong(Pong {
        seq: 0,
        size: 0,
        ping_sent_at_ns: 0,
    }));
    let len = |v: &dyn ErasedLen| v.len();
    let n = fill(len(&pong));
    let zero_request = Expected {
        id: 0,
        user: ActorId(0),
        input_len: 0,
        output_len: 0,
        upload_ns: 0,
    };
    let empty_host = HostStatus {
        host: String::new(),
        t_ns: 0,
        links: Vec::new(),
        router: RouterStatus::default(),
        mesh: BTreeMap::new(),
        control: ControlStatus::default(),
        kv_caches: BTreeMap::new(),
        load: None,
        error: None,
    };
    let frames = vec![
        Frame::Envelopes(vec![pong; n]),
        // One expectation of many zero requests.
        Frame::Envelopes(vec![envelope(
            LyreoMsg::Expect {
                slot: 0,
                requests: vec![zero_request.clone(); fill(len(&zero_request))],
            }
            .into(),
        )]),
        // A status of many empty hosts (every counter 0: 1 wire byte, 8 claimed).
        Frame::ControlReply {
            id: 0,
            reply: Ok(CommandReply::Status(StatusReply {
                hosts: vec![empty_host.clone(); fill(len(&empty_host))],
            })),
        },
    ];
    for f in frames {
        let bytes = match encode_frame(&f) {
            Ok(b) => b,
            Err(e) => panic!("{}: {e}", f.kind()),
        };
        assert!(bytes.len() > MAX_FRAME_BYTES * 9 / 10, "{}", bytes.len());
        assert!(
            decode_frame(&bytes) == Ok(f),
            "a full frame must round trip"
        );
    }
}

// ---------------------------------------------------------------- properties

fn arb_lyreo() -> impl Strategy<Value = Msg> {
    prop_oneof![
        (
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<f64>()
        )
            .prop_map(|(id, slot, input_len, output_len, x)| LyreoMsg::Request {
                id,
                slot,
                input_len,
                output_len,
                x_m: x,
                y_m: -x,
                power_w: 0.1,
            }
            .into()),
        (any::<u64>(), any::<u32>(), ".{0,20}").prop_map(|(id, server, policy)| {
            LyreoMsg::Assign {
                id,
                slot: id / 3,
                server: ActorId(server),
                rate_bps: 1.0e7,
                upload_ns: id,
                policy,
                policy_version: "v".into(),
            }
            .into()
        }),
        (
            any::<u64>(),
            proptest::collection::vec(any::<(u64, u32)>(), 0..5)
        )
            .prop_map(|(slot, rs)| LyreoMsg::Expect {
                slot,
                requests: rs
                    .into_iter()
                    .map(|(id, len)| Expected {
                        id,
                        user: ActorId(len),
                        input_len: len,
                        output_len: len / 2,
                        upload_ns: id,
                    })
                    .collect(),
            }
            .into()),
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(Msg::KvFrame),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Msg::KvFeedback),
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(Msg::IpPacket),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn prop_messages_round_trip(ms in proptest::collection::vec(arb_lyreo(), 1..6)) {
        let frame = Frame::Envelopes(ms.into_iter().map(envelope).collect());
        let bytes = encode_frame(&frame).expect("encodes");
        // NaN positions compare unequal: compare the re-encoding instead.
        let back = decode_frame(&bytes).expect("decodes");
        prop_assert_eq!(encode_frame(&back).expect("re-encodes"), bytes);
    }

    #[test]
    fn prop_bit_flips_in_typed_frames_never_panic(
        which in 0usize..64,
        pos in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let mut frames: Vec<Frame> = all_messages()
            .into_iter()
            .map(|m| Frame::Envelopes(vec![envelope(m)]))
            .collect();
        frames.extend(all_commands().into_iter().map(|c| Frame::ControlForward {
            id: 1,
            command: ForwardedCommand(c),
        }));
        frames.extend(all_replies().into_iter().map(|reply| Frame::ControlReply { id: 1, reply }));
        let frame = &frames[which % frames.len()];
        let mut bytes = encode_frame(frame).expect("encodes");
        let i = pos.index(bytes.len());
        bytes[i] ^= 1 << bit;
        if let Ok(decoded) = decode_frame(&bytes) {
            let again = encode_frame(&decoded).expect("re-encodes");
            prop_assert!(decode_frame(&again).is_ok());
        }
    }
}

// ---------------------------------------------------------------- gathered frames

/// Every message kind, and byte strings on both sides of the gathering
/// threshold, under random envelope fields.
fn arb_gatherable() -> impl Strategy<Value = Envelope> {
    let n = all_messages().len();
    let bytes = || proptest::collection::vec(any::<u8>(), 0..3000);
    let payload = prop_oneof![
        (0..n).prop_map(|i| all_messages().swap_remove(i)),
        bytes().prop_map(Msg::KvFrame),
        bytes().prop_map(Msg::KvFeedback),
        bytes().prop_map(Msg::IpPacket),
    ];
    // Integers in each of bincode's varint widths (1, 3, 5 and 9 bytes).
    let wide = || {
        prop_oneof![
            0u64..=250,
            251u64..=0xffff,
            0x1_0000u64..=0xffff_ffff,
            any::<u64>()
        ]
    };
    let narrow = || prop_oneof![0u32..=250, 251u32..=0xffff, any::<u32>()];
    (
        payload,
        narrow(),
        narrow(),
        proptest::option::of(narrow()),
        wide(),
        proptest::option::of(wide()),
    )
        .prop_map(|(payload, src, dst, via, sent_at_ns, due_ns)| Envelope {
            src: ActorId(src),
            dst: ActorId(dst),
            via: via.map(LinkId),
            sent_at_ns,
            due_ns,
            payload,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A gathered frame's parts, in order, are `encode_frame`'s bytes, and
    /// decode to the envelopes it was given.
    #[test]
    fn prop_a_gathered_frame_is_the_encoded_frame(
        envs in proptest::collection::vec(arb_gatherable(), 0..12)
    ) {
        let frame = Frame::Envelopes(envs.clone());
        let expected = encode_frame(&frame).expect("encodes");
        let mut gathered = edgemu_codec::wire::GatheredFrame::new();
        gather_envelopes(envs.into_iter(), &mut gathered).expect("gathers");
        prop_assert_eq!(gathered.len(), expected.len());
        let bytes = gathered.to_vec();
        prop_assert_eq!(&bytes, &expected);
        prop_assert!(decode_frame(&bytes).is_ok());
        // Masking part by part at each part's offset is masking the whole.
        let key = [0x12u8, 0x34, 0x56, 0x78];
        gathered.for_each_part_mut(|offset, part| {
            for (i, b) in part.iter_mut().enumerate() {
                *b ^= key[(offset + i) % 4];
            }
        });
        let masked: Vec<u8> = expected.iter().enumerate().map(|(i, b)| b ^ key[i % 4]).collect();
        prop_assert_eq!(gathered.to_vec(), masked);
    }
}

#[test]
fn large_byte_strings_are_gathered_and_small_ones_copied() {
    let small = edgemu_codec::wire::GATHER_MIN_BYTES - 1;
    let batch = vec![
        envelope(Msg::KvFrame(vec![1; 1400])),
        envelope(Msg::KvFeedback(vec![2; small])),
        envelope(Msg::IpPacket(vec![3; 1500])),
    ];
    let mut gathered = edgemu_codec::wire::GatheredFrame::new();
    gather_envelopes(batch.into_iter(), &mut gathered).expect("gathers");
    assert_eq!(gathered.gathered_parts(), 2);
    let mut slices = Vec::new();
    gathered.io_slices(&mut slices);
    let big: Vec<usize> = slices
        .iter()
        .map(|s| s.len())
        .filter(|&n| n >= 1400)
        .collect();
    assert_eq!(big, vec![1400, 1500]);
}

#[test]
fn a_gathered_frame_over_the_limit_is_refused_as_encode_frame_refuses_it() {
    let part = MAX_FRAME_BYTES / 4;
    let envs: Vec<Envelope> = (0..5)
        .map(|_| envelope(Msg::KvFrame(vec![0; part])))
        .collect();
    assert!(matches!(
        encode_frame(&Frame::Envelopes(envs.clone())),
        Err(WireError::TooLarge { .. })
    ));
    let mut gathered = edgemu_codec::wire::GatheredFrame::new();
    assert!(matches!(
        gather_envelopes(envs.into_iter(), &mut gathered),
        Err(WireError::TooLarge { .. })
    ));
    assert!(gathered.is_empty());
}
/// Envelopes are moved by value through every queue and mailbox on the
/// data path; a large message kind belongs in a box.
#[test]
fn an_envelope_stays_small() {
    let size = std::mem::size_of::<Envelope>();
    assert!(
        size <= 96,
        "an Envelope takes {size} bytes; box the large message kind"
    );
}
