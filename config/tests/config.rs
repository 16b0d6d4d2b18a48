//! `cluster.toml` end to end: the full fixture, one test per error class
//! (each checks the line, column and key it names), digest stability, and
//! the control-plane vocabulary.

use edgemu_codec::ids::{ActorId, Direction, HostId, LinkId};
use edgemu_config::command::{Command, Resolved};
use edgemu_config::*;
use edgemu_links::{Delivery, LossSpec, RateSpec};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

const BASE: &str = r#"[run]
duration = "20s"

[[hosts]]
name = "alpha"
listen = "127.0.0.1:7101"

[[hosts]]
name = "beta"
listen = "127.0.0.1:7102"

[[actors]]
name = "cbr"
host = "alpha"
kind = "constant"
to = "sink"
via = "wan"
rate = "20Mbps"

[[actors]]
name = "sink"
host = "beta"
kind = "sink"

[[links]]
name = "wan"
a = "cbr"
b = "sink"
rate = "50Mbps"
delay = "10ms"
"#;

fn parse(text: &str) -> Result<Cluster, ConfigError> {
    Cluster::from_str(text, Path::new("test.toml"))
}

fn errors(text: &str) -> Vec<Diagnostic> {
    match parse(text) {
        Ok(_) => panic!("expected errors, the config was accepted:\n{text}"),
        Err(e) => {
            let d = e.diagnostics().to_vec();
            assert!(!d.is_empty(), "no diagnostics in {e}");
            d
        }
    }
}

/// (line, column) of the `nth` occurrence of `needle` in `text`, 1-based.
fn pos(text: &str, needle: &str, nth: usize) -> (usize, usize) {
    let offset = text
        .match_indices(needle)
        .nth(nth)
        .unwrap_or_else(|| panic!("{needle:?} not in text"))
        .0;
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    (line, col)
}

/// Asserts an error at the `nth` `needle` whose message contains every `parts`.
#[track_caller]
fn expect_error(text: &str, needle: &str, nth: usize, parts: &[&str]) {
    let diags = errors(text);
    let (line, column) = pos(text, needle, nth);
    let found = diags.iter().any(|d| {
        d.line == line && d.column == column && parts.iter().all(|p| d.message.contains(p))
    });
    assert!(
        found,
        "no error at {line}:{column} containing {parts:?}; got:\n{}",
        Diagnostics(diags)
    );
}

fn with(extra: &str) -> String {
    format!("{BASE}{extra}")
}

#[test]
fn base_is_valid() {
    let c = parse(BASE).unwrap();
    assert_eq!(c.run.name, "test");
    assert_eq!(c.run.duration_ns, 20_000_000_000);
    assert_eq!(c.run.seed, 0);
    assert_eq!(c.run.time, TimeMode::Real);
    assert_eq!(c.run.results_dir, PathBuf::from("results"));
    assert_eq!(c.run.token_env, "EDGEMU_TOKEN");
    assert_eq!(c.run.sample_ns, 1_000_000_000);
    assert_eq!(c.hosts[0].advertise, PeerAddr::Ip(c.hosts[0].listen));
    assert_eq!(c.hosts[0].control, None);
    let ActorKind::ConstantSender {
        size,
        start_ns,
        stop_ns,
        ..
    } = &c.actors[0].kind
    else {
        panic!()
    };
    assert_eq!((*size, *start_ns, *stop_ns), (1400, 0, None));
    assert_eq!(c.links[0].ab, c.links[0].ba);
    // Default queue: 100 ms of 50 Mb/s, like a router's buffer.
    assert_eq!(c.links[0].ab.queue_bytes, Some(625_000));
    assert_eq!(c.links[0].ab.loss, LossSpec::None);
    assert!(!c.requires_token());
}

#[test]
fn a_constant_sender_may_carry_real_bytes() {
    let c = parse(&BASE.replace(
        "rate = \"20Mbps\"\n",
        "rate = \"20Mbps\"\npayload = \"bytes\"\n",
    ))
    .unwrap();
    assert!(matches!(
        c.actors[0].kind,
        ActorKind::ConstantSender {
            real_bytes: true,
            ..
        }
    ));
    assert!(parse(&BASE.replace(
        "rate = \"20Mbps\"\n",
        "rate = \"20Mbps\"\npayload = \"lots\"\n"
    ))
    .is_err());
}

#[test]
fn default_queue_is_bounded_unless_asked_otherwise() {
    assert_eq!(
        default_queue_bytes(&RateSpec::Fixed { bps: 1_000 }),
        64 << 10
    );
    assert_eq!(
        default_queue_bytes(&RateSpec::Fixed {
            bps: 100_000_000_000
        }),
        64 << 20
    );
    assert_eq!(default_queue_bytes(&RateSpec::Unlimited), 1 << 20);
    let c = parse(&with("queue = \"unlimited\"\n")).unwrap();
    assert_eq!(c.links[0].ab.queue_bytes, None);
    let c = parse(&BASE.replace(
        "rate = \"50Mbps\"\n",
        "rate = \"50Mbps\"\n[links.ba]\nqueue = \"unlimited\"\n",
    ))
    .unwrap();
    assert_eq!(c.links[0].ab.queue_bytes, Some(625_000));
    assert_eq!(c.links[0].ba.queue_bytes, None);
}

#[test]
fn full_fixture_resolves() {
    let path = fixtures().join("full.toml");
    let c = Cluster::load(&path).unwrap();
    assert_eq!(c.source, path);
    let r = &c.run;
    assert_eq!(r.name, "full");
    assert_eq!(r.duration_ns, 20_000_000_000);
    assert_eq!(r.seed, 7);
    assert_eq!(r.time, TimeMode::Virtual);
    assert_eq!(r.results_dir, fixtures().join("out/results"));
    assert_eq!(r.token_env, "FULL_TOKEN");
    assert_eq!(r.sample_ns, 500_000_000);

    assert_eq!(c.hosts.len(), 3);
    let alpha = &c.hosts[0];
    assert_eq!(alpha.id, HostId(0));
    assert_eq!(alpha.listen, "127.0.0.1:7101".parse().unwrap());
    assert_eq!(
        alpha.advertise,
        PeerAddr::Ip("10.0.0.1:7101".parse().unwrap())
    );
    assert_eq!(alpha.control, Some("127.0.0.1:7201".parse().unwrap()));
    assert_eq!(c.hosts[2].control, None);

    let names: Vec<&str> = c.actors.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["cbr", "burst", "ping", "sink-a", "sink-b"]);
    let (wan, cell, steps, back) = (LinkId(0), LinkId(1), LinkId(2), LinkId(3));
    assert_eq!(
        c.actors[0].kind,
        ActorKind::ConstantSender {
            route: Route {
                to: ActorId(4),
                via: Some(wan)
            },
            rate_bps: 20_000_000,
            size: 1200,
            real_bytes: false,
            start_ns: 1_000_000_000,
            stop_ns: Some(15_000_000_000),
        }
    );
    assert_eq!(
        c.actors[1].kind,
        ActorKind::BurstySender {
            route: Route {
                to: ActorId(4),
                via: Some(cell)
            },
            burst: 8,
            size: 1024,
            interval_ns: 50_000_000,
            start_ns: 500_000_000,
            stop_ns: Some(19_000_000_000),
        }
    );
    assert_eq!(
        c.actors[2].kind,
        ActorKind::Pinger {
            route: Route {
                to: ActorId(3),
                via: Some(steps)
            },
            reply_via: Some(back),
            size: 100,
            interval_ns: 200_000_000,
            start_ns: 0,
            stop_ns: Some(18_000_000_000),
        }
    );
    assert_eq!(c.actors[2].host, HostId(2));
    assert_eq!(c.actors[4].kind, ActorKind::Sink);

    let w = c.link(wan);
    assert_eq!((w.a, w.b), (ActorId(0), ActorId(4)));
    assert_eq!(w.ab.rate, RateSpec::Fixed { bps: 100_000_000 });
    assert_eq!(w.ab.delay_ns, 10_000_000);
    assert_eq!(w.ab.jitter_ns, 1_000_000);
    assert_eq!(w.ab.queue_bytes, None);
    assert_eq!(
        w.ab.loss,
        LossSpec::GilbertElliott {
            eps_g: 0.001,
            eps_b: 0.5,
            p_gb: 0.02,
            p_bg: 0.1
        }
    );
    assert_eq!(w.ab.delivery, Delivery::Datagram);
    assert!(!w.ab.reorder);
    assert_eq!(w.ba.rate, RateSpec::Fixed { bps: 10_000_000 });
    assert_eq!(w.ba.delay_ns, 20_000_000, "rtt 40ms is 20ms one way");
    assert_eq!(w.ba.jitter_ns, 0);
    assert_eq!(w.ba.queue_bytes, Some(256 * 1024));
    assert_eq!(w.ba.loss, LossSpec::None);
    assert_eq!(w.ba.delivery, Delivery::Reliable);
    assert!(w.ba.reorder);

    let ce = c.link(cell);
    assert!(matches!(ce.ab.rate, RateSpec::Trace(_)));
    assert_eq!(ce.ba.rate, RateSpec::Unlimited);
    let LossSpec::Trace(t) = &ce.ab.loss else {
        panic!("{:?}", ce.ab.loss)
    };
    assert_eq!((t.eps_good(), t.eps_bad()), (0.01, 0.9));
    assert_eq!(t.period_ms(), Some(1000));
    let RateSpec::Trace(rt) = &ce.ab.rate else {
        unreachable!()
    };
    assert_eq!(rt.period_ms(), Some(10));

    let st = c.link(steps);
    let RateSpec::Trace(rt) = &st.ab.rate else {
        panic!("{:?}", st.ab.rate)
    };
    assert_eq!(rt.period_ms(), Some(1000));
    assert_eq!(st.ab.delay_ns, 15_000_000);
    assert_eq!(st.ab.loss, LossSpec::Bernoulli { p: 0.01 });
    assert_eq!(st.ba.delivery, Delivery::Reliable);
    assert_eq!(c.link(back).ab.rate, RateSpec::Fixed { bps: 2_500_000 });

    assert_eq!(c.chaos.len(), 7);
    assert_eq!(
        (c.chaos[0].index, c.chaos[0].at_ns, c.chaos[0].every_ns),
        (1, 2_000_000_000, Some(5_000_000_000))
    );
    assert_eq!(
        c.chaos[0].request,
        Resolved::Action {
            action: NetAction::LinkKill {
                link: wan,
                dir: Some(Direction::AtoB)
            },
            for_ns: Some(1_000_000_000),
        }
    );
    assert_eq!(c.chaos[0].command.name(), "link.kill");
    assert_eq!(
        *c.chaos[1].action().unwrap(),
        NetAction::LinkRestore {
            link: cell,
            dir: None
        }
    );
    assert_eq!(
        *c.chaos[2].action().unwrap(),
        NetAction::LinkSet {
            link: wan,
            dir: Some(Direction::BtoA),
            patch: LinkPatch {
                rate: Some(RateSpec::Fixed { bps: 5_000_000 }),
                delay_ns: Some(30_000_000),
                jitter_ns: Some(2_000_000),
                queue_bytes: Some(Some(65_536)),
                loss: Some(LossSpec::Bernoulli { p: 0.05 }),
            },
        }
    );
    assert_eq!(c.chaos[2].for_ns(), Some(3_000_000_000));
    assert_eq!(
        *c.chaos[3].action().unwrap(),
        NetAction::HostPartition {
            a: HostId(0),
            b: HostId(1)
        }
    );
    assert_eq!(
        *c.chaos[4].action().unwrap(),
        NetAction::HostHeal {
            a: HostId(1),
            b: HostId(2)
        }
    );
    assert_eq!(
        *c.chaos[5].action().unwrap(),
        NetAction::LinkFlap {
            link: steps,
            mtbf_ns: 5_000_000_000,
            mttr_ns: 1_000_000_000,
            seed: 3,
            until_ns: Some(18_000_000_000),
        }
    );
    assert_eq!(c.chaos[6].request, Resolved::RunStop);
    assert_eq!(c.chaos[6].at_ns, 19_500_000_000);
    assert!(
        c.requires_token(),
        "alpha advertises a non-loopback address"
    );
}

#[test]
fn helpers() {
    let c = Cluster::load(&fixtures().join("full.toml")).unwrap();
    let wan = c.link_by_name("wan").unwrap();
    assert_eq!(wan.direction_from(ActorId(0)), Some(Direction::AtoB));
    assert_eq!(wan.direction_from(ActorId(4)), Some(Direction::BtoA));
    assert_eq!(wan.direction_from(ActorId(2)), None);
    assert_eq!(wan.params(Direction::BtoA), &wan.ba);
    assert_eq!(c.link_endpoint_host(wan.id, Direction::AtoB), HostId(0));
    assert_eq!(c.link_endpoint_host(wan.id, Direction::BtoA), HostId(1));
    assert!(c.get_actor(ActorId(99)).is_none());
    assert!(c.get_link(LinkId(99)).is_none());
    assert!(c.get_host(HostId(99)).is_none());
    assert_eq!(c.get_actor(ActorId(1)).unwrap().name, "burst");
    let on_alpha: Vec<&str> = c.actors_on(HostId(0)).map(|a| a.name.as_str()).collect();
    assert_eq!(on_alpha, ["cbr", "burst", "sink-a"]);
    assert_eq!(c.actor(ActorId(0)).kind.route().unwrap().via, Some(wan.id));
    assert!(c.actor(ActorId(4)).kind.route().is_none());
}

#[test]
fn describe_shows_the_topology() {
    let c = Cluster::load(&fixtures().join("full.toml")).unwrap();
    let d = c.describe();
    println!("{d}");
    for part in [
        "cluster \"full\"",
        "20s in virtual time, seed 7",
        "alpha: listen 127.0.0.1:7101, advertise 10.0.0.1:7101, control 127.0.0.1:7201",
        "cbr: constant -> sink-b via wan: 20Mbps in 1200B packets, from 1s to 15s",
        "burst: bursty -> sink-b via cell: 8 x 1KiB packets every 50ms",
        "ping: pinger -> sink-a via steps: 100B pings every 200ms, replies via ping-back",
        "wan: cbr (alpha) <-> sink-b (beta)",
        "ab cbr -> sink-b: rate 100Mbps, delay 10ms, jitter 1ms, queue unlimited, loss ge",
        "(stationary 8.42%)",
        "ba sink-b -> cbr: rate 10Mbps, delay 20ms, jitter 0s (may reorder), queue 256KiB, loss none, reliable",
        "rate trace (long-run",
        "#1 link.kill wan ab, heals after 1s, every 5s",
        "link.set wan ba: rate 5Mbps, delay 30ms, jitter 2ms, queue 64KiB, loss bernoulli p=0.05",
        "host.partition alpha | beta, heals after 2s",
        "link.flap steps: up ~Exp(mean 5s), down ~Exp(mean 1s), seed 3, until 18s",
        "19.5s  #7 run.stop",
    ] {
        assert!(d.contains(part), "missing {part:?} in:\n{d}");
    }
    // The timeline is in time order: #6 at 9s comes before #5 at 12s.
    assert!(d.find("#6 link.flap").unwrap() < d.find("#5 host.heal").unwrap());
}

#[test]
fn stationary_ge_loss_matches_the_paper() {
    let ge = LossSpec::GilbertElliott {
        eps_g: 0.001,
        eps_b: 0.5,
        p_gb: 0.02,
        p_bg: 0.1,
    };
    let l = ge
        .stationary_loss()
        .expect("a GE chain has a stationary loss");
    assert!((l - 0.0842).abs() < 0.0001, "{l}");
}

// ---------------------------------------------------------------- digest

const REFORMATTED: &str = r#"
# Same cluster as BASE: other order, spacing, comments, unit spellings.
[[links]]
delay="0.01s"      # 10 ms
rate  =  "50000Kbps"
b="sink"
a="cbr"
name="wan"

[[hosts]]
listen = "127.0.0.1:7101"
name = "alpha"
[[hosts]]
listen = "127.0.0.1:7102"
name = "beta"

[[actors]]
rate = "20000000bps"
via = "wan"
to = "sink"
kind = "constant"
host = "alpha"
name = "cbr"
[[actors]]
kind = "sink"
name = "sink"
host = "beta"

[run]
duration = "20000ms"
seed = 0
time = "real"
"#;

#[test]
fn digest_ignores_formatting() {
    let a = parse(BASE).unwrap();
    let b = parse(REFORMATTED).unwrap();
    assert_eq!(a.normalized(), b.normalized());
    assert_eq!(a.digest, b.digest);
    assert_eq!(a.digest, a.compute_digest());
    assert_eq!(a.digest_hex().len(), 64);
    // The file's location does not matter either (results stay relative).
    let elsewhere = Cluster::from_str(BASE, Path::new("/some/other/dir/test.toml")).unwrap();
    assert_eq!(elsewhere.digest, a.digest);
    // The fixture is stable across loads.
    let f1 = Cluster::load(&fixtures().join("full.toml")).unwrap();
    let f2 = Cluster::load(&fixtures().join("full.toml")).unwrap();
    assert_eq!(f1.digest, f2.digest);
}

#[test]
fn digest_sees_semantic_changes() {
    let base = parse(BASE).unwrap().digest;
    for (from, to) in [
        ("rate = \"50Mbps\"", "rate = \"51Mbps\""),
        ("delay = \"10ms\"", "delay = \"10ms\"\njitter = \"1ns\""),
        ("duration = \"20s\"", "duration = \"20s\"\nseed = 1"),
        (
            "duration = \"20s\"",
            "duration = \"20s\"\ntime = \"virtual\"",
        ),
        ("listen = \"127.0.0.1:7102\"", "listen = \"127.0.0.1:7103\""),
        ("name = \"sink\"", "name = \"sink2\""),
        ("b = \"sink\"", "b = \"sink2\""),
        ("to = \"sink\"", "to = \"sink2\""),
        ("rate = \"20Mbps\"", "rate = \"20Mbps\"\nsize = \"1401B\""),
    ] {
        let text = BASE.replacen(from, to, 1);
        let text = if from == "name = \"sink\"" {
            text.replace("b = \"sink\"", "b = \"sink2\"")
                .replace("to = \"sink\"", "to = \"sink2\"")
        } else if from == "b = \"sink\"" || from == "to = \"sink\"" {
            // Rename the sink so the reference still resolves.
            text.replace("name = \"sink\"", "name = \"sink2\"")
                .replace("b = \"sink\"", "b = \"sink2\"")
                .replace("to = \"sink\"", "to = \"sink2\"")
        } else {
            text
        };
        let c = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_ne!(c.digest, base, "{from} -> {to}");
    }
    let chaos = parse(&with("[[chaos]]\nat = \"1s\"\ncommand = \"run.stop\"\n")).unwrap();
    assert_ne!(chaos.digest, base);
}

// ---------------------------------------------------------------- errors

#[test]
fn syntax_error_has_a_location() {
    let text = "[run]\nduration = \"20s\nseed = 1\n";
    let d = errors(text);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].line, 2);
    assert_eq!(d[0].file, PathBuf::from("test.toml"));
    assert!(d[0].to_string().starts_with("test.toml:2:"), "{}", d[0]);
}

#[test]
fn unknown_keys_everywhere() {
    expect_error(
        &with("[runn]\nx = 1\n"),
        "runn",
        0,
        &["key `runn`", "valid keys: run, hosts"],
    );
    let t = BASE.replace("duration = \"20s\"", "duration = \"20s\"\nseeed = 3");
    expect_error(
        &t,
        "seeed",
        0,
        &["key `seeed` is not valid for [run]", "seed"],
    );
    let t = BASE.replace(
        "listen = \"127.0.0.1:7101\"",
        "listen = \"127.0.0.1:7101\"\nport = 1",
    );
    expect_error(&t, "port", 0, &["key `port` is not valid for [[hosts]]"]);
    let t = BASE.replace(
        "delay = \"10ms\"",
        "delay = \"10ms\"\nbandwidth = \"1Mbps\"",
    );
    expect_error(
        &t,
        "bandwidth",
        0,
        &["key `bandwidth` is not valid for [[links]]"],
    );
    let t = with("[links.ab]\nspeed = \"1Mbps\"\n");
    expect_error(&t, "speed", 0, &["key `speed` is not valid for [links.ab]"]);
    let t = with("loss = { model = \"bernoulli\", p = 0.1, q = 0.2 }\n");
    expect_error(
        &t,
        "q = ",
        0,
        &[
            "key `q` is not valid for loss model \"bernoulli\"",
            "valid keys: model, p",
        ],
    );
    let t = with("[[chaos]]\nat = \"1s\"\ncommand = \"link.kill\"\nlink = \"wan\"\nhosts = [\"alpha\", \"beta\"]\n");
    expect_error(
        &t,
        "hosts = [",
        0,
        &[
            "key `hosts` is not valid for command \"link.kill\"",
            "valid keys: link, dir, for, at, command, every",
        ],
    );
}

#[test]
fn key_of_another_actor_kind() {
    let t = BASE.replace("rate = \"20Mbps\"", "rate = \"20Mbps\"\nburst = 16");
    expect_error(
        &t,
        "burst",
        0,
        &["key `burst` is not valid for kind \"constant\"; valid keys: name, host, kind, to, via, rate, size, payload, start, stop"],
    );
    let t = BASE.replace("kind = \"sink\"", "kind = \"sink\"\nto = \"cbr\"");
    expect_error(
        &t,
        "to = \"cbr\"",
        0,
        &["key `to` is not valid for kind \"sink\""],
    );
}

#[test]
fn bad_units() {
    let t = BASE.replace("rate = \"20Mbps\"", "rate = \"100 mbit\"");
    expect_error(
        &t,
        "\"100 mbit\"",
        0,
        &[
            "`rate`",
            "expected a rate like \"100Mbps\"",
            "found \"100 mbit\"",
        ],
    );
    let t = BASE.replace("delay = \"10ms\"", "delay = \"10\"");
    expect_error(
        &t,
        "\"10\"",
        0,
        &["`delay`", "expected a duration like \"20ms\""],
    );
    let t = BASE.replace("delay = \"10ms\"", "delay = \"10ms\"\nqueue = \"64kb\"");
    expect_error(
        &t,
        "\"64kb\"",
        0,
        &[
            "`queue`",
            "expected a size like \"64KiB\"",
            "or \"unlimited\"",
        ],
    );
    let t = BASE.replace("delay = \"10ms\"", "delay = 10");
    expect_error(&t, "10\n", 0, &["`delay`", "found an integer 10"]);
    // Exact position: line 29 of BASE is `rate = "50Mbps"` in [[links]].
    let t = BASE.replace("rate = \"50Mbps\"", "rate = \"50MBps\"");
    let d = errors(&t);
    assert_eq!((d[0].line, d[0].column), (29, 8), "{}", d[0]);
}

#[test]
fn bad_enum_values() {
    let t = BASE.replace("duration = \"20s\"", "duration = \"20s\"\ntime = \"fast\"");
    expect_error(
        &t,
        "\"fast\"",
        0,
        &[
            "`time`",
            "expected \"real\" or \"virtual\"",
            "found a string \"fast\"",
        ],
    );
    let t = with("delivery = \"udp\"\n");
    expect_error(
        &t,
        "\"udp\"",
        0,
        &["`delivery`", "\"datagram\" or \"reliable\""],
    );
    let t = BASE.replace("kind = \"sink\"", "kind = \"drain\"");
    expect_error(
        &t,
        "\"drain\"",
        0,
        &[
            "`kind`",
            "\"constant\" or \"bursty\" or \"pinger\" or \"sink\"",
        ],
    );
    let t = with("loss = { model = \"gilbert\" }\n");
    expect_error(&t, "\"gilbert\"", 0, &["`loss.model`", "\"ge\""]);
    let t = with("[[chaos]]\nat = \"1s\"\ncommand = \"link.explode\"\n");
    expect_error(
        &t,
        "\"link.explode\"",
        0,
        &["unknown command \"link.explode\"", "link.kill"],
    );
    let t = with("[[chaos]]\nat = \"1s\"\ncommand = \"link.kill\"\nlink = \"wan\"\ndir = \"up\"\n");
    expect_error(&t, "\"up\"", 0, &["`dir`", "`ab` or `ba`"]);
}

#[test]
fn missing_required_keys() {
    let t = BASE.replace("duration = \"20s\"\n", "seed = 1\n");
    expect_error(&t, "[run]", 0, &["missing required key `duration`"]);
    let t = BASE.replace("rate = \"20Mbps\"\n", "");
    expect_error(&t, "[[actors]]", 0, &["missing required key `rate`"]);
    let t = BASE.replace("a = \"cbr\"\n", "");
    expect_error(&t, "[[links]]", 0, &["missing required key `a`"]);
    let t = BASE.replace("[run]\nduration = \"20s\"\n", "");
    let d = errors(&t);
    assert!(
        d.iter()
            .any(|d| d.line == 1 && d.column == 1 && d.message.contains("`run`")),
        "{d:?}"
    );
    let t = with("loss = { model = \"ge\", eps_g = 0.1, eps_b = 0.5, p_gb = 0.1 }\n");
    expect_error(&t, "{ model", 0, &["missing required key `loss.p_bg`"]);
    let t = with("[[chaos]]\ncommand = \"run.stop\"\n");
    expect_error(&t, "[[chaos]]", 0, &["missing required key `at`"]);
    let t =
        with("[[chaos]]\nat = \"1s\"\ncommand = \"link.flap\"\nlink = \"wan\"\nmtbf = \"1s\"\n");
    expect_error(&t, "[[chaos]]", 0, &["missing required key `mttr`"]);
    let no_hosts = "[run]\nduration = \"1s\"\n";
    expect_error(no_hosts, "[run]", 0, &["`hosts`"]);
}

#[test]
fn undefined_references_list_defined_names() {
    let t = BASE.replace("host = \"beta\"", "host = \"gamma\"");
    expect_error(
        &t,
        "\"gamma\"",
        0,
        &["`host`: no host named \"gamma\"; defined hosts: alpha, beta"],
    );
    let t = BASE.replace("to = \"sink\"", "to = \"snk\"");
    expect_error(
        &t,
        "\"snk\"",
        0,
        &["`to`: no actor named \"snk\"; defined actors: cbr, sink"],
    );
    let t = BASE.replace("via = \"wan\"", "via = \"lan\"");
    expect_error(
        &t,
        "\"lan\"",
        0,
        &["`via`: no link named \"lan\"; defined links: wan"],
    );
    let t = BASE.replace("b = \"sink\"", "b = \"nobody\"");
    expect_error(&t, "\"nobody\"", 0, &["`b`: no actor named \"nobody\""]);
    let t = with("[[chaos]]\nat = \"1s\"\ncommand = \"link.kill\"\nlink = \"lan\"\n");
    expect_error(
        &t,
        "\"lan\"",
        0,
        &["`link`: no link named \"lan\"; defined links: wan"],
    );
    let t = with(
        "[[chaos]]\nat = \"1s\"\ncommand = \"host.partition\"\nhosts = [\"alpha\", \"delta\"]\n",
    );
    expect_error(
        &t,
        "[\"alpha\"",
        0,
        &["no host named \"delta\"; defined hosts: alpha, beta"],
    );
}

#[test]
fn duplicate_names() {
    let t = BASE.replace("name = \"beta\"", "name = \"alpha\"");
    expect_error(
        &t,
        "\"alpha\"",
        1,
        &["duplicate host name \"alpha\"", "line 5"],
    );
    let t = BASE
        .replacen("name = \"sink\"", "name = \"cbr\"", 1)
        .replace("\"sink\"", "\"cbr\"");
    expect_error(&t, "\"cbr\"", 2, &["duplicate actor name \"cbr\""]);
    let t = with("\n[[links]]\nname = \"wan\"\na = \"sink\"\nb = \"cbr\"\n");
    expect_error(
        &t,
        "\"wan\"",
        2,
        &["duplicate link name \"wan\"", "line 26"],
    );
}

#[test]
fn duplicate_listen_address() {
    let t = BASE.replace("127.0.0.1:7102", "127.0.0.1:7101");
    expect_error(
        &t,
        "\"127.0.0.1:7101\"",
        1,
        &["`listen`", "already the listen address of host \"alpha\""],
    );
    let t = BASE.replace(
        "listen = \"127.0.0.1:7102\"",
        "listen = \"127.0.0.1:7102\"\ncontrol = \"127.0.0.1:7101\"",
    );
    expect_error(
        &t,
        "\"127.0.0.1:7101\"",
        1,
        &["`control`", "already the listen address"],
    );
    let t = BASE.replace("127.0.0.1:7102", "localhost:7102");
    expect_error(
        &t,
        "\"localhost:7102\"",
        0,
        &["expected a socket address like \"127.0.0.1:7101\""],
    );
}

#[test]
fn via_must_join_the_actor_and_its_destination() {
    let t = format!(
        "{BASE}\n[[actors]]\nname = \"other\"\nhost = \"beta\"\nkind = \"sink\"\n\n[[links]]\nname = \"side\"\na = \"cbr\"\nb = \"other\"\n"
    )
    .replace("via = \"wan\"", "via = \"side\"");
    expect_error(
        &t,
        "\"side\"",
        0,
        &["`via`: link \"side\" joins \"cbr\" and \"other\", not \"cbr\" and \"sink\""],
    );
}

#[test]
fn pinger_needs_a_sink() {
    let t = with("\n[[actors]]\nname = \"p\"\nhost = \"alpha\"\nkind = \"pinger\"\nto = \"cbr\"\n");
    expect_error(
        &t,
        "\"cbr\"\n",
        2,
        &["actor \"cbr\" is a constant and cannot receive"],
    );
    let t = with("\n[[actors]]\nname = \"p\"\nhost = \"alpha\"\nkind = \"pinger\"\nto = \"p\"\n");
    expect_error(&t, "\"p\"\n", 1, &["cannot send to itself"]);
}

#[test]
fn delay_and_rtt_together() {
    let t = with("rtt = \"20ms\"\n");
    expect_error(&t, "\"20ms\"", 0, &["`rtt`", "not both"]);
    // An override in [links.ab] may switch from delay to rtt.
    let c = parse(&with("[links.ab]\nrtt = \"50ms\"\n")).unwrap();
    assert_eq!(c.links[0].ab.delay_ns, 25_000_000);
    assert_eq!(c.links[0].ba.delay_ns, 10_000_000);
}

#[test]
fn a_direction_may_fix_its_seed() {
    let c = parse(&with("[links.ab]\nseed = 1000003\n")).unwrap();
    assert_eq!(c.links[0].seeds, [Some(1_000_003), None]);
    assert_eq!(c.links[0].seed(Direction::AtoB), Some(1_000_003));
    // Not for both directions at once: they would draw the same stream.
    let t = BASE.replace("delay = \"10ms\"", "delay = \"10ms\"\nseed = 4");
    expect_error(&t, "4\n", 0, &["`seed`", "[links.ab] or [links.ba]"]);
    let t = with("[links.ba]\nseed = -1\n");
    expect_error(&t, "-1", 0, &["`ba.seed`", "non-negative"]);
}

#[test]
fn probability_outside_unit_interval() {
    let t = with("loss = { model = \"bernoulli\", p = 1.5 }\n");
    expect_error(
        &t,
        "1.5",
        0,
        &["`loss.p`", "expected a probability in [0, 1], found 1.5"],
    );
    let t = with("[links.ba]\nloss = { model = \"ge\", eps_g = -0.1, eps_b = 0.5, p_gb = 0.1, p_bg = 0.1 }\n");
    expect_error(&t, "-0.1", 0, &["`ba.loss.eps_g`"]);
    // Integers 0 and 1 are probabilities too.
    parse(&with("loss = { model = \"bernoulli\", p = 1 }\n")).unwrap();
}

#[test]
fn zero_rate_and_zero_duration() {
    let t = BASE.replace("rate = \"50Mbps\"", "rate = \"0Mbps\"");
    expect_error(&t, "\"0Mbps\"", 0, &["`rate`", "greater than 0"]);
    let t = BASE.replace("rate = \"20Mbps\"", "rate = \"0bps\"");
    expect_error(&t, "\"0bps\"", 0, &["`rate`", "greater than 0"]);
    let t = BASE.replace("duration = \"20s\"", "duration = \"0s\"");
    expect_error(&t, "\"0s\"", 0, &["`duration`", "greater than 0"]);
    let t =
        with("[[chaos]]\nat = \"1s\"\ncommand = \"link.kill\"\nlink = \"wan\"\nfor = \"0ms\"\n");
    expect_error(&t, "\"0ms\"", 0, &["`for`", "greater than 0"]);
    // Zero delay, jitter and start are fine.
    parse(&BASE.replace("delay = \"10ms\"", "delay = \"0s\"\njitter = \"0s\"")).unwrap();
}

#[test]
fn chaos_at_beyond_the_run() {
    let t = with("[[chaos]]\nat = \"25s\"\ncommand = \"run.stop\"\n");
    expect_error(
        &t,
        "\"25s\"",
        0,
        &["`at`: 25s is beyond the run's duration (20s)"],
    );
}

#[test]
fn chaos_every_below_the_minimum_period() {
    let t =
        with("[[chaos]]\nat = \"1s\"\ncommand = \"link.kill\"\nlink = \"wan\"\nevery = \"1ns\"\n");
    expect_error(
        &t,
        "\"1ns\"",
        0,
        &["`every`: 1ns is shorter than the minimum repeat period (100ms)"],
    );
    let ok = with(
        "[[chaos]]\nat = \"1s\"\ncommand = \"link.kill\"\nlink = \"wan\"\nevery = \"100ms\"\n",
    );
    assert!(parse(&ok).is_ok());
}

#[test]
fn chaos_every_shorter_than_for() {
    let t = with("[[chaos]]\nat = \"1s\"\ncommand = \"link.kill\"\nlink = \"wan\"\nfor = \"3s\"\nevery = \"2s\"\n");
    expect_error(&t, "\"2s\"", 0, &["`every`: 2s is shorter than `for` (3s)"]);
    let t = with("[[chaos]]\nat = \"1s\"\ncommand = \"run.stop\"\nfor = \"3s\"\n");
    expect_error(
        &t,
        "\"3s\"",
        0,
        &[
            "`for`",
            "valid only with link.kill, link.set, host.partition",
        ],
    );
    let t = with("[[chaos]]\nat = \"1s\"\ncommand = \"link.flap\"\nlink = \"wan\"\nmtbf = \"1s\"\nmttr = \"1s\"\nuntil = \"500ms\"\n");
    expect_error(&t, "\"500ms\"", 0, &["`until`", "after `at` (1s)"]);
}

#[test]
fn several_errors_in_file_order() {
    let t = BASE
        .replace("duration = \"20s\"", "duration = \"20 sec\"")
        .replace("host = \"beta\"", "host = \"nowhere\"")
        .replace(
            "delay = \"10ms\"",
            "delay = \"10ms\"\nrtt = \"5ms\"\ncolour = \"red\"",
        );
    let d = errors(&t);
    assert_eq!(d.len(), 4, "{}", Diagnostics(d.clone()));
    let lines: Vec<usize> = d.iter().map(|d| d.line).collect();
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted);
    assert!(d[0].message.contains("`duration`"));
    assert!(d[1].message.contains("nowhere"));
    assert!(d[2].message.contains("`rtt`"));
    assert!(d[3].message.contains("`colour`"));
    let shown = ConfigError::Invalid(Diagnostics(d)).to_string();
    assert_eq!(shown.lines().count(), 4);
    assert!(
        shown.starts_with("test.toml:2:12: `duration`: expected a duration"),
        "{shown}"
    );
}

#[test]
fn trace_files_are_relative_to_the_config() {
    let dir = fixtures();
    let text = format!("{BASE}rate_trace = \"cell.mahimahi\"\n").replace("rate = \"50Mbps\"\n", "");
    let c = Cluster::from_str(&text, &dir.join("inline.toml")).unwrap();
    assert!(matches!(c.links[0].ab.rate, RateSpec::Trace(_)));
    let e = Cluster::from_str(&text, Path::new("/nonexistent/inline.toml")).unwrap_err();
    let d = &e.diagnostics()[0];
    assert!(
        d.message
            .contains("`rate_trace`: trace file \"cell.mahimahi\": cannot"),
        "{d}"
    );
    let both = format!("{BASE}rate_trace = \"cell.mahimahi\"\n");
    let e = Cluster::from_str(&both, &dir.join("inline.toml")).unwrap_err();
    assert!(
        e.to_string()
            .contains("set only one of `rate`, `rate_trace` and `rate_steps`"),
        "{e}"
    );
    let bad = format!("{BASE}loss = {{ model = \"trace\", file = \"full.toml\" }}\n");
    let e = Cluster::from_str(&bad, &dir.join("inline.toml")).unwrap_err();
    assert!(
        e.to_string()
            .contains("`loss.file`: in trace \"full.toml\""),
        "{e}"
    );
}

/// Control (`link.set`) and `cluster.toml` may name only regular files
/// inside the config's folder, and no error quotes what a file holds.
#[test]
fn trace_files_outside_the_config_folder_are_refused() {
    let dir = std::env::temp_dir().join(format!("edgemu-trace-access-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("run")).unwrap();
    let file = dir.join("run/cluster.toml");
    std::fs::write(&file, BASE).unwrap();
    std::fs::write(
        dir.join("run/secret.txt"),
        "root:x:0:0:root:/root:/bin/bash\n",
    )
    .unwrap();
    std::fs::write(dir.join("outside.trace"), "0\n").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(dir.join("outside.trace"), dir.join("run/link.trace")).unwrap();
    let c = Cluster::load(&file).unwrap();
    let set = |key: &str, name: &str| {
        let f = if key == "file" {
            serde_json::json!({ "link": "wan", "loss": { "model": "trace", "file": name } })
        } else {
            serde_json::json!({ "link": "wan", key: name })
        };
        resolve(&c, "link.set", f.as_object().unwrap())
            .unwrap_err()
            .to_string()
    };
    for key in ["rate_trace", "rate_steps", "file"] {
        for name in [
            "/etc/passwd",
            "../../../etc/hostname",
            "../outside.trace",
            "/dev/zero",
            "",
        ] {
            let e = set(key, name);
            assert!(
                e.contains("relative to the config file's folder"),
                "{key} {name}: {e}"
            );
        }
        let e = set(key, "secret.txt");
        assert!(!e.contains("root"), "{key}: file content echoed: {e}");
        assert!(e.contains("line 1"), "{e}");
        #[cfg(unix)]
        {
            let e = set(key, "link.trace");
            assert!(e.contains("leads outside"), "{key}: {e}");
        }
        let e = set(key, "nothing-here");
        assert!(e.contains("cannot open"), "{e}");
    }
    // A device or a folder is not a regular file.
    std::fs::create_dir_all(dir.join("run/sub")).unwrap();
    assert!(set("rate_trace", "sub").contains("not a regular file"));
    // Larger than the limit: refused before reading.
    let big = std::fs::File::create(dir.join("run/big.trace")).unwrap();
    big.set_len(MAX_TRACE_BYTES + 1).unwrap();
    assert!(set("rate_trace", "big.trace").contains("more than the limit"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_file_is_an_io_error() {
    let e = Cluster::load(Path::new("/nonexistent/cluster.toml")).unwrap_err();
    assert!(matches!(e, ConfigError::Io { .. }));
    assert!(e.to_string().contains("/nonexistent/cluster.toml"));
}

// ---------------------------------------------------------------- control plane

fn fields(json: &str) -> serde_json::Map<String, serde_json::Value> {
    serde_json::from_str(json).unwrap()
}

/// A control command through the one typed path: parse, then resolve.
fn resolve(
    c: &Cluster,
    cmd: &str,
    fields: &serde_json::Map<String, serde_json::Value>,
) -> Result<Resolved, ActionError> {
    let mut f = fields.clone();
    f.insert("cmd".into(), cmd.into());
    Command::from_fields(&f)?.resolve(c)
}

/// [`resolve`] for a link or host command: its action.
fn parse_action(
    c: &Cluster,
    cmd: &str,
    fields: &serde_json::Map<String, serde_json::Value>,
) -> Result<NetAction, ActionError> {
    match resolve(c, cmd, fields)? {
        Resolved::Action { action, .. } => Ok(action),
        other => panic!("{other:?}"),
    }
}

#[test]
fn control_commands_use_the_chaos_vocabulary() {
    let c = parse(BASE).unwrap();
    let a = parse_action(&c, "link.set", &fields(r#"{"link":"wan","dir":"ab","rate":"20Mbps","queue":"unlimited","loss":{"model":"bernoulli","p":0.1}}"#)).unwrap();
    assert_eq!(
        a,
        NetAction::LinkSet {
            link: LinkId(0),
            dir: Some(Direction::AtoB),
            patch: LinkPatch {
                rate: Some(RateSpec::Fixed { bps: 20_000_000 }),
                queue_bytes: Some(None),
                loss: Some(LossSpec::Bernoulli { p: 0.1 }),
                ..LinkPatch::default()
            },
        }
    );
    assert_eq!(
        parse_action(&c, "link.kill", &fields(r#"{"link":"wan"}"#)).unwrap(),
        NetAction::LinkKill {
            link: LinkId(0),
            dir: None
        }
    );
    assert_eq!(
        parse_action(&c, "host.heal", &fields(r#"{"hosts":["beta","alpha"]}"#)).unwrap(),
        NetAction::HostHeal {
            a: HostId(1),
            b: HostId(0)
        }
    );
    assert_eq!(
        resolve(&c, "run.stop", &fields("{}")).unwrap(),
        Resolved::RunStop
    );
    let flap = parse_action(
        &c,
        "link.flap",
        &fields(r#"{"link":"wan","mtbf":"2s","mttr":"100ms"}"#),
    )
    .unwrap();
    assert!(matches!(
        flap,
        NetAction::LinkFlap {
            seed: 0,
            until_ns: None,
            ..
        }
    ));

    let e = parse_action(&c, "link.zap", &fields("{}")).unwrap_err();
    assert!(matches!(e, ActionError::UnknownCommand { .. }));
    let e = parse_action(&c, "link.kill", &fields(r#"{"link":"wan","rate":"1Mbps"}"#)).unwrap_err();
    assert_eq!(e.field(), Some("rate"));
    let e = parse_action(&c, "link.set", &fields(r#"{"link":"wan","rate":"fast"}"#)).unwrap_err();
    assert_eq!(e.field(), Some("rate"));
    assert!(
        e.to_string().contains("expected a rate like \"100Mbps\""),
        "{e}"
    );
    let e = parse_action(&c, "link.set", &fields(r#"{"link":"wan"}"#)).unwrap_err();
    assert!(e.to_string().contains("at least one of"), "{e}");
    let e = parse_action(
        &c,
        "link.set",
        &fields(r#"{"link":"wan","loss":{"model":"ge","eps_g":0.1}}"#),
    )
    .unwrap_err();
    assert_eq!(e.field(), Some("loss.eps_b"));
    let e = parse_action(
        &c,
        "host.partition",
        &fields(r#"{"hosts":["alpha","alpha"]}"#),
    )
    .unwrap_err();
    assert!(e.to_string().contains("two different hosts"), "{e}");
    let e = parse_action(&c, "host.partition", &fields(r#"{"hosts":["alpha"]}"#)).unwrap_err();
    assert!(e.to_string().contains("two host names"), "{e}");
    let e = parse_action(&c, "link.kill", &fields(r#"{"link":"lan"}"#)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`link`: no link named \"lan\"; defined links: wan"
    );
}

#[test]
fn documented_example_is_valid() {
    let doc = include_str!("../../docs/cluster-toml.md");
    let start = doc.find("```toml\n").expect("an example") + "```toml\n".len();
    let end = start + doc[start..].find("```").unwrap();
    let c = Cluster::from_str(&doc[start..end], Path::new("docs/cluster.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.run.name, "default");
    assert_eq!(c.chaos.len(), 2);
    // The crate docs carry the same example.
    let lib = include_str!("../src/lib.rs");
    assert!(lib.contains(
        "//! loss = { model = \"ge\", eps_g = 0.001, eps_b = 0.5, p_gb = 0.02, p_bg = 0.1 }"
    ));
}

#[test]
fn sections_of_the_wrong_shape() {
    let t = BASE.replace(
        "[[hosts]]\nname = \"beta\"",
        "[[hosts]]\nname = \"beta\"\n[hosts.extra]\nx = 1",
    );
    // A subtable inside [[hosts]] is an unknown key of that host.
    expect_error(&t, "extra", 0, &["key `extra` is not valid for [[hosts]]"]);
    let t = format!("{BASE}\n[chaos]\nat = \"1s\"\n");
    let d = errors(&t);
    assert!(
        d.iter().any(|d| d
            .message
            .contains("expected an array of tables ([[chaos]] sections)")),
        "{d:?}"
    );
    let t = BASE.replace("[run]\nduration = \"20s\"", "run = 5");
    expect_error(&t, "5\n", 0, &["expected a [run] table"]);
}

#[test]
fn a_bad_duration_does_not_cascade() {
    let t =
        with("[[chaos]]\nat = \"30s\"\ncommand = \"run.stop\"\n").replace("\"20s\"", "\"20 sec\"");
    let d = errors(&t);
    assert_eq!(d.len(), 1, "{}", Diagnostics(d.clone()));
    assert!(d[0].message.contains("`duration`"));
}

#[test]
fn root_cluster_toml_is_valid() {
    // Owned by the lead engineer; checked here when it exists.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cluster.toml");
    if path.exists() {
        let c = Cluster::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(!c.hosts.is_empty());
        println!("{}", c.describe());
    }
}

#[test]
fn chaos_entries_are_typed_commands() {
    // A policy swap on the timeline: the same typed command as over control.
    let t = with(
        "[[chaos]]\nat = \"2s\"\ncommand = \"policy.swap\"\nactor = \"sink\"\npolicy = \"least-loaded\"\nweights = \"w/ll.safetensors\"\nevery = \"5s\"\n",
    );
    let c = parse(&t).unwrap();
    let spec = &c.chaos[0];
    assert_eq!(spec.command.name(), "policy.swap");
    assert_eq!(
        spec.request,
        Resolved::Policy {
            actor: ActorId(1),
            op: edgemu_config::command::PolicyOp::Swap {
                policy: Some("least-loaded".into()),
                weights: Some(edgemu_config::command::Weights::File(
                    "w/ll.safetensors".into()
                )),
                external: None,
            },
        }
    );
    // The control request with the same keys resolves to the same value.
    let same = resolve(
        &c,
        "policy.swap",
        &fields(r#"{"actor":"sink","policy":"least-loaded","weights":"w/ll.safetensors"}"#),
    )
    .unwrap();
    assert_eq!(same, spec.request);
    assert!(c
        .describe()
        .contains("policy.swap sink: policy least-loaded"));

    // Located errors through the typed parse.
    let t = with("[[chaos]]\nat = \"1s\"\ncommand = \"policy.swap\"\nactor = \"sink\"\nweights = \"../w.safetensors\"\n");
    expect_error(
        &t,
        "\"../w.safetensors\"",
        0,
        &["`weights`", "relative to the config file's folder"],
    );
    let t = with("[[chaos]]\nat = \"1s\"\ncommand = \"policy.swap\"\nactor = \"nobody\"\npolicy = \"random\"\n");
    expect_error(&t, "\"nobody\"", 0, &["`actor`: no actor named \"nobody\""]);
    let t = with("[[chaos]]\nat = \"1s\"\ncommand = \"policy.swap\"\nactor = \"sink\"\n");
    expect_error(&t, "[[chaos]]", 0, &["missing required key `policy`"]);
    let t = with("[[chaos]]\nat = \"1s\"\ncommand = \"link.kill\"\nlink = 5\n");
    expect_error(&t, "5\n", 0, &["`link`", "expected a string"]);
    let t =
        with("[[chaos]]\nat = \"1s\"\ncommand = \"link.restore\"\nlink = \"wan\"\nfor = \"1s\"\n");
    let d = errors(&t);
    assert!(
        d.iter()
            .any(|d| d.message.contains("`for`") && d.message.contains("no fault to heal")),
        "{}",
        Diagnostics(d.clone())
    );
    // Commands that only answer a client are not chaos commands.
    let t = with("[[chaos]]\nat = \"1s\"\ncommand = \"status\"\n");
    expect_error(&t, "\"status\"", 0, &["unknown command \"status\""]);
    // A control `link.restore` with `for` is refused the same way.
    let e = resolve(
        &parse(BASE).unwrap(),
        "link.restore",
        &fields(r#"{"link":"wan","for":"1s"}"#),
    )
    .unwrap_err();
    assert!(e.to_string().contains("no fault to heal"), "{e}");
}

/// `examples/scale-1000.toml`: 1000 users, 50 servers and 8 hosts in under
/// 80 lines, expanded as its comments say.
#[test]
fn the_scale_example_expands_to_a_thousand_users_and_fifty_servers() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/scale-1000.toml");
    let text = std::fs::read_to_string(&path).expect("the example");
    assert!(text.lines().count() < 80, "the example is under 80 lines");
    let c = Cluster::from_str(&text, &path).expect("valid");
    assert_eq!(c.hosts.len(), 8);
    let users: Vec<&ActorSpec> = c
        .actors
        .iter()
        .filter(|a| matches!(a.kind, ActorKind::User(_)))
        .collect();
    let servers = c
        .actors
        .iter()
        .filter(|a| matches!(a.kind, ActorKind::Server(_)))
        .count();
    assert_eq!((users.len(), servers), (1000, 50));
    assert_eq!(users[999].name, "user-999");
    // Users spread round-robin over the six phone hosts.
    let on = |name: &str| users.iter().filter(|u| c.host(u.host).name == name).count();
    assert_eq!((on("phones-0"), on("phones-5")), (167, 166));
    let ActorKind::Scheduler(s) = &c.actors[0].kind else {
        panic!("the scheduler comes first");
    };
    assert_eq!(s.servers.len(), 50, "{{a..b}} ranges list every server");
    let d = c.describe();
    assert!(
        d.contains("actor \"user-{i}\" x1000: user-0 .. user-999"),
        "{d}"
    );
    // The digest covers the expansion: one more user changes it.
    let more = text.replace("count = 1000", "count = 1001");
    assert_ne!(Cluster::from_str(&more, &path).unwrap().digest, c.digest);
}

#[test]
fn replication_errors_point_at_the_template() {
    let text = with(
        "\n[[actors]]\nname = \"s{i}\"\ncount = 3\nhosts = [\"alpha\", \"gamma\"]\nkind = \"sink\"\n",
    );
    expect_error(
        &text,
        "[\"alpha\", \"gamma\"]",
        0,
        &["no host named \"gamma\""],
    );
    let text = with("\n[[actors]]\nname = \"s\"\ncount = 3\nhost = \"alpha\"\nkind = \"sink\"\n");
    expect_error(&text, "3\nhost", 0, &["must hold `{i}`", "handoffs"]);
    let text = with(
        "\n[[actors]]\nname = \"s{i}\"\ncount = 2\nhost = \"alpha\"\nkind = \"sink\"\n\
         \n[[actors]]\nname = \"s1\"\nhost = \"alpha\"\nkind = \"sink\"\n",
    );
    let diags = errors(&text);
    assert!(
        diags.iter().any(|d| d.message.contains("s1")),
        "a copy's name clashing with a written one is a duplicate: {}",
        Diagnostics(diags)
    );
    // Links replicate too, with references substituted.
    let text = with(
        "\n[[actors]]\nname = \"src{i}\"\ncount = 2\nhost = \"alpha\"\nkind = \"constant\"\n\
         to = \"sink\"\nvia = \"wan{i}\"\nrate = \"1Mbps\"\n\
         \n[[links]]\nname = \"wan{i}\"\ncount = 2\na = \"src{i}\"\nb = \"sink\"\nrate = \"10Mbps\"\n",
    );
    let c = parse(&text).expect("valid");
    assert_eq!(c.links.len(), 3);
    assert_eq!(c.actor(c.links[2].a).name, "src1");
}

#[test]
fn advertise_takes_a_dns_name_and_hosts_take_resources() {
    let text = BASE.replace(
        "name = \"alpha\"\nlisten = \"127.0.0.1:7101\"",
        "name = \"alpha\"\nlisten = \"0.0.0.0:7101\"\nadvertise = \"Alpha.edgemu-mesh.emu.svc:7101\"\ncpus = 0.5\nmemory = \"2GiB\"",
    );
    let c = parse(&text).expect("valid");
    assert_eq!(
        c.hosts[0].advertise,
        PeerAddr::Name {
            host: "alpha.edgemu-mesh.emu.svc".into(),
            port: 7101
        }
    );
    assert_eq!(
        c.hosts[0].advertise.to_string(),
        "alpha.edgemu-mesh.emu.svc:7101"
    );
    assert!(c.requires_token(), "a name is reached over a network");
    assert_eq!(c.hosts[0].resources.cpus, Some(0.5));
    assert_eq!(c.hosts[0].resources.memory_bytes, Some(2 << 30));
    for bad in [
        "a_b.svc:7101",
        "host",
        "host:0",
        "-x.svc:1",
        "a..b:1",
        "h:99999",
    ] {
        let t = text.replace("Alpha.edgemu-mesh.emu.svc:7101", bad);
        expect_error(
            &t,
            &format!("\"{bad}\""),
            0,
            &["`advertise`", "dns-name:port"],
        );
    }
    let t = text.replace("cpus = 0.5", "cpus = 0");
    expect_error(&t, "0\nmemory", 0, &["`cpus`"]);
}

#[test]
fn the_documented_replication_example_is_valid() {
    let doc = include_str!("../../docs/cluster-toml.md");
    let tag = "```toml replication\n";
    let start = doc.find(tag).expect("the replication example") + tag.len();
    let end = start + doc[start..].find("```").expect("its end");
    let mut text = String::from("[run]\nduration = \"5s\"\n");
    for (i, h) in [
        "edge-0", "edge-1", "phones-0", "phones-1", "phones-2", "phones-3", "phones-4", "phones-5",
    ]
    .iter()
    .enumerate()
    {
        text += &format!(
            "[[hosts]]\nname = \"{h}\"\nlisten = \"127.0.0.1:{}\"\n",
            7300 + i
        );
    }
    let c = parse(&format!("{text}{}", &doc[start..end])).unwrap_or_else(|e| panic!("{e}"));
    let ActorKind::Scheduler(s) = &c.actors[0].kind else {
        panic!("a scheduler first");
    };
    assert_eq!(s.servers.len(), 50);
    assert_eq!(c.actors.len(), 1 + 50 + 1000);
}

/// Gateways, `openai` servers and attach points: what a file can get wrong
/// is refused with the key and why.
#[test]
fn gateways_external_servers_and_attach_points_are_checked() {
    let lyreo = "\n[[actors]]\nname = \"sched\"\nhost = \"alpha\"\nkind = \"scheduler\"\nservers = [\"s0\"]\n\n[[actors]]\nname = \"s0\"\nhost = \"beta\"\nkind = \"server\"\n";
    let gw = |keys: &str| {
        with(&format!(
            "{lyreo}\n[[actors]]\nname = \"gw\"\nhost = \"alpha\"\nkind = \"gateway\"\nscheduler = \"sched\"\n{keys}\n"
        ))
    };
    let ok = parse(&gw("listen = \"127.0.0.1:8000\"")).expect("a loopback gateway");
    assert!(ok.describe().contains(
        "OpenAI-compatible gateway on http://127.0.0.1:8000 (HTTP on the host's thread)"
    ));
    let own = parse(&gw("listen = \"127.0.0.1:8000\"\nhttp_thread = \"own\""))
        .expect("a gateway with its own HTTP thread");
    assert!(own.describe().contains("(HTTP on its own thread)"));
    let msgs = |text: &str| -> String {
        errors(text)
            .iter()
            .map(|d| d.message.clone())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let m = msgs(&gw("listen = \"0.0.0.0:8000\""));
    assert!(
        m.contains("api_key_env") && m.contains("not a loopback"),
        "{m}"
    );
    let m = msgs(&gw(
        "listen = \"127.0.0.1:8000\"\nmax_tokens = 5000\nmax_output = 100",
    ));
    assert!(
        m.contains("max_tokens") && m.contains("at most `max_output`"),
        "{m}"
    );
    let m = msgs(&gw("listen = \"127.0.0.1:8000\"\nmodel = \"gpt-9\""));
    assert!(m.contains("model"), "{m}");
    let m = msgs(&gw("listen = \"127.0.0.1:8000\"\nhttp_thread = \"mine\""));
    assert!(m.contains("http_thread") && m.contains("own"), "{m}");
    let m = msgs(&gw("").replace("duration", "time = \"virtual\"\nduration"));
    assert!(m.contains("listen"), "{m}");
    let m = msgs(
        &gw("listen = \"127.0.0.1:8000\"").replace("duration", "time = \"virtual\"\nduration"),
    );
    assert!(m.contains("cannot run under `time = \"virtual\"`"), "{m}");

    let server = |keys: &str| {
        with(&lyreo.replace(
            "kind = \"server\"\n",
            &format!("kind = \"server\"\n{keys}\n"),
        ))
    };
    let ok = parse(&server(
        "backend = \"openai\"\nurl = \"http://127.0.0.1:8080/v1\"\nmodel = \"m\"",
    ))
    .expect("an openai server");
    assert!(ok
        .describe()
        .contains("OpenAI-compatible backend: model \"m\" at http://127.0.0.1:8080/v1"));
    let m = msgs(&server("backend = \"openai\"\nmodel = \"m\""));
    assert!(m.contains("url"), "{m}");
    let m = msgs(&server(
        "backend = \"openai\"\nurl = \"https://x/v1\"\nmodel = \"m\"",
    ));
    assert!(m.contains("http://"), "{m}");
    let m = msgs(&server("url = \"http://x/v1\""));
    assert!(m.contains("only for `backend = \"openai\"`"), "{m}");
    // The URL is parsed at load, not when the server starts.
    for (url, says) in [
        ("http://x:80a/v1", "port \"80a\""),
        ("http://x:0/v1", "port \"0\""),
        ("http:///v1", "no host"),
        ("http://:8080/v1", "no host"),
        ("http://x/v1?model=m", "query"),
        ("http://user:pw@x/v1", "api_key_env"),
    ] {
        let m = msgs(&server(&format!(
            "backend = \"openai\"\nurl = \"{url}\"\nmodel = \"m\""
        )));
        assert!(m.contains("url") && m.contains(says), "{url}: {m}");
    }
    for (url, authority, base) in [
        ("http://127.0.0.1:8080/v1/", "127.0.0.1:8080", "/v1"),
        ("http://llm.local", "llm.local:80", ""),
        ("http://[::1]:9000/v1", "[::1]:9000", "/v1"),
        ("http://[::1]/v1", "[::1]:80", "/v1"),
    ] {
        let c = parse(&server(&format!(
            "backend = \"openai\"\nurl = \"{url}\"\nmodel = \"m\""
        )))
        .expect(url);
        let o = c
            .actors
            .iter()
            .find_map(|a| match &a.kind {
                edgemu_config::ActorKind::Server(s) => match &s.backend {
                    edgemu_config::ServerBackend::OpenAi(o) => Some(o.clone()),
                    _ => None,
                },
                _ => None,
            })
            .expect("the openai server");
        assert_eq!(
            (o.authority.as_str(), o.base_path.as_str()),
            (authority, base),
            "{url}"
        );
    }

    let attach = |a_keys: &str| {
        with(&format!(
            "\n[[actors]]\nname = \"ta\"\nhost = \"alpha\"\nkind = \"attach\"\nto = \"tb\"\n{a_keys}\n\n[[actors]]\nname = \"tb\"\nhost = \"beta\"\nkind = \"attach\"\nto = \"ta\"\naddress = \"198.18.0.2/24\"\n"
        ))
    };
    let ok = parse(&attach("address = \"198.18.0.1/24\"")).expect("two attach points");
    assert!(ok.describe().contains("TUN attach point 198.18.0.1/24"));
    for (keys, says) in [
        ("address = \"198.18.0.1\"", "prefix length"),
        ("", "address"),
        (
            "address = \"198.18.0.1/24\"\nnetns = \"a b\"",
            "namespace name",
        ),
        ("address = \"198.18.0.1/24\"\nmtu = 100", "MTU"),
        ("address = \"198.18.0.1/24\"\nstart = \"1s\"", "start"),
    ] {
        let m = msgs(&attach(keys));
        assert!(m.contains(says), "{keys}: {m}");
    }
}
