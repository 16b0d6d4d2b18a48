//! The normalized form behind [`Cluster::digest`] and the human description
//! that `edgemu check` prints.

use crate::command::{Command, Resolved};
use crate::model::*;
use crate::units::{fmt_bytes, fmt_duration, fmt_rate};
use edgemu_codec::ids::Direction;
use edgemu_links::{Delivery, LinkParams, LossSpec, RateSpec};
use sha2::{Digest, Sha256};
use std::fmt::{self, Write};
use std::path::Path;

/// Version of the normalized form; bump it when the form changes.
const NORMAL_FORM: &str = "edgemu-config normalized v1";

struct HashWriter(Sha256);

impl fmt::Write for HashWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.update(s.as_bytes());
        Ok(())
    }
}

impl Cluster {
    /// The canonical text of the resolved config: one line per run, host,
    /// actor, link and chaos entry, every value resolved (ids, ns, bps, bytes,
    /// parsed traces). Whitespace, comments, key order and spelling of units
    /// do not change it; the file's location does not either (the results
    /// folder is written relative to the config's folder).
    pub fn normalized(&self) -> String {
        let mut s = String::new();
        self.write_normalized(&mut s).expect("writing to a String");
        s
    }

    fn write_normalized(&self, w: &mut impl Write) -> fmt::Result {
        writeln!(w, "{NORMAL_FORM}")?;
        let r = &self.run;
        let base = self.source.parent().unwrap_or(Path::new(""));
        let results = r.results_dir.strip_prefix(base).unwrap_or(&r.results_dir);
        writeln!(
            w,
            "run name={:?} duration_ns={} seed={} time={:?} results={:?} token_env={:?} sample_ns={}",
            r.name, r.duration_ns, r.seed, r.time, results, r.token_env, r.sample_ns
        )?;
        for h in &self.hosts {
            writeln!(
                w,
                "host {} name={:?} listen={} advertise={} control={:?}",
                h.id.0, h.name, h.listen, h.advertise, h.control
            )?;
        }
        for a in &self.actors {
            writeln!(
                w,
                "actor {} name={:?} host={} kind={:?}",
                a.id.0, a.name, a.host.0, a.kind
            )?;
        }
        for l in &self.links {
            writeln!(
                w,
                "link {} name={:?} a={} b={} ab={:?} ba={:?} seeds={:?}",
                l.id.0, l.name, l.a.0, l.b.0, l.ab, l.ba, l.seeds
            )?;
        }
        for c in &self.chaos {
            writeln!(
                w,
                "chaos {} at_ns={} every_ns={:?} request={:?}",
                c.index, c.at_ns, c.every_ns, c.request
            )?;
        }
        Ok(())
    }

    /// SHA-256 of [`Cluster::normalized`] (what [`Cluster::digest`] holds).
    pub fn compute_digest(&self) -> [u8; 32] {
        let mut h = HashWriter(Sha256::new());
        self.write_normalized(&mut h).expect("hashing cannot fail");
        h.0.finalize().into()
    }

    /// The resolved topology in human units, for `edgemu check`.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        self.write_description(&mut s).expect("writing to a String");
        s
    }

    fn write_description(&self, w: &mut String) -> fmt::Result {
        let r = &self.run;
        writeln!(
            w,
            "cluster {:?} from {} (digest {})",
            r.name,
            self.source.display(),
            &self.digest_hex()[..16]
        )?;
        writeln!(
            w,
            "run: {} in {} time, seed {}, counters every {}, results under {}, token from ${}",
            fmt_duration(r.duration_ns),
            match r.time {
                TimeMode::Real => "real",
                TimeMode::Virtual => "virtual",
            },
            r.seed,
            fmt_duration(r.sample_ns),
            r.results_dir.display(),
            r.token_env
        )?;
        if !self.replicas.is_empty() {
            writeln!(w, "\nreplicated entries ({}):", self.replicas.len())?;
            for g in &self.replicas {
                write!(
                    w,
                    "  {} {:?} x{}: {} .. {}",
                    g.what, g.template, g.count, g.first, g.last
                )?;
                if !g.hosts.is_empty() {
                    let spread: Vec<String> =
                        g.hosts.iter().map(|(h, n)| format!("{h} {n}")).collect();
                    write!(w, ", on {}", spread.join(", "))?;
                }
                writeln!(w)?;
            }
        }
        writeln!(w, "\nhosts ({}):", self.hosts.len())?;
        for h in &self.hosts {
            write!(w, "  {}: listen {}", h.name, h.listen)?;
            if h.advertise != PeerAddr::Ip(h.listen) {
                write!(w, ", advertise {}", h.advertise)?;
            }
            match h.control {
                Some(c) => write!(w, ", control {c}")?,
                None => write!(w, ", no control socket")?,
            }
            if let Some(c) = h.resources.cpus {
                write!(w, ", {c} CPUs")?;
            }
            if let Some(m) = h.resources.memory_bytes {
                write!(w, ", {} memory", fmt_bytes(m))?;
            }
            writeln!(w)?;
            for a in self.actors_on(h.id) {
                writeln!(w, "    {}: {}", a.name, self.describe_kind(&a.kind))?;
            }
        }
        writeln!(w, "\nlinks ({}):", self.links.len())?;
        for l in &self.links {
            let (a, b) = (self.actor(l.a), self.actor(l.b));
            writeln!(
                w,
                "  {}: {} ({}) <-> {} ({})",
                l.name,
                a.name,
                self.host(a.host).name,
                b.name,
                self.host(b.host).name
            )?;
            for dir in [Direction::AtoB, Direction::BtoA] {
                let (src, dst) = l.endpoints(dir);
                let seed = l
                    .seed(dir)
                    .map(|s| format!(", seed {s}"))
                    .unwrap_or_default();
                writeln!(
                    w,
                    "    {dir} {} -> {}: {}{seed}",
                    self.actor(src).name,
                    self.actor(dst).name,
                    describe_params(l.params(dir))
                )?;
            }
        }
        writeln!(w, "\nchaos ({}):", self.chaos.len())?;
        let mut timeline: Vec<&ChaosSpec> = self.chaos.iter().collect();
        timeline.sort_by_key(|c| (c.at_ns, c.index));
        for c in timeline {
            write!(
                w,
                "  {:>8}  #{} {}",
                fmt_duration(c.at_ns),
                c.index,
                self.describe_request(&c.command, &c.request)
            )?;
            if let Some(f) = c.for_ns() {
                write!(w, ", heals after {}", fmt_duration(f))?;
            }
            if let Some(e) = c.every_ns {
                write!(w, ", every {}", fmt_duration(e))?;
            }
            writeln!(w)?;
        }
        Ok(())
    }

    fn describe_route(&self, route: &Route) -> String {
        let mut s = format!("-> {}", self.actor(route.to).name);
        match route.via {
            Some(l) => write!(s, " via {}", self.link(l).name).ok(),
            None => write!(s, " (direct)").ok(),
        };
        s
    }

    fn describe_kind(&self, kind: &ActorKind) -> String {
        let window = |start: u64, stop: Option<u64>| match stop {
            Some(stop) => format!("from {} to {}", fmt_duration(start), fmt_duration(stop)),
            None => format!("from {} to the end", fmt_duration(start)),
        };
        match kind {
            ActorKind::Attach(a) => format!(
                "TUN attach point {}/{} (MTU {}) in network namespace {:?}, its packets {}",
                a.address,
                a.prefix,
                a.mtu,
                a.netns,
                self.describe_route(&a.route)
            ),
            ActorKind::ConstantSender {
                route,
                rate_bps,
                size,
                real_bytes,
                start_ns,
                stop_ns,
            } => format!(
                "constant {}: {} in {} packets{}, {}",
                self.describe_route(route),
                fmt_rate(*rate_bps),
                fmt_bytes(u64::from(*size)),
                if *real_bytes { " of real bytes" } else { "" },
                window(*start_ns, *stop_ns)
            ),
            ActorKind::BurstySender {
                route,
                burst,
                size,
                interval_ns,
                start_ns,
                stop_ns,
            } => format!(
                "bursty {}: {burst} x {} packets every {}, {}",
                self.describe_route(route),
                fmt_bytes(u64::from(*size)),
                fmt_duration(*interval_ns),
                window(*start_ns, *stop_ns)
            ),
            ActorKind::Pinger {
                route,
                reply_via,
                size,
                interval_ns,
                start_ns,
                stop_ns,
            } => format!(
                "pinger {}: {} pings every {}, replies {}, {}",
                self.describe_route(route),
                fmt_bytes(u64::from(*size)),
                fmt_duration(*interval_ns),
                match reply_via {
                    Some(l) => format!("via {}", self.link(*l).name),
                    None => "direct".into(),
                },
                window(*start_ns, *stop_ns)
            ),
            ActorKind::Sink => "sink".into(),
            ActorKind::User(u) => format!(
                "LYREO user -> {}: one request per slot, {} lengths (at most {} in / {} out tokens), {} in {} m x {} m, {}-{} dBm, {}",
                self.actor(u.scheduler).name,
                u.workload.name(),
                u.max_input,
                u.max_output,
                u.mobility.name(),
                u.area_m[0],
                u.area_m[1],
                u.power_dbm[0],
                u.power_dbm[1],
                window(u.start_ns, u.stop_ns)
            ),
            ActorKind::Gateway(g) => format!(
                "OpenAI-compatible gateway on http://{} (HTTP on {}) -> {}: model {:?} ({} tokens), max_tokens {} (at most {} in / {} out), timeout {}, at ({} m, {} m), {} dBm{}",
                g.listen,
                g.http_thread.placement(),
                self.actor(g.scheduler).name,
                g.served_model_name,
                g.model.name(),
                g.max_tokens,
                g.max_input,
                g.max_output,
                fmt_duration(g.timeout_ns),
                g.position_m[0],
                g.position_m[1],
                g.power_dbm,
                match &g.api_key_env {
                    Some(e) => format!(", API key from ${e}"),
                    None => String::new(),
                }
            ),
            ActorKind::Server(s) => format!(
                "LYREO server: {} {}, uplink {} MHz, position {}",
                s.gpu.name(),
                match &s.backend {
                    ServerBackend::Modeled => "(modeled backend)".to_string(),
                    ServerBackend::Real(RealModel::SmolLm2) =>
                        "(real backend: SmolLM2-135M on the CPU)".to_string(),
                    ServerBackend::Real(RealModel::Tiny) =>
                        "(real backend: tiny random Llama on the CPU)".to_string(),
                    ServerBackend::OpenAi(o) =>
                        format!("(OpenAI-compatible backend: model {:?} at {})", o.model, o.url),
                },
                s.bandwidth_hz / 1e6,
                match s.position_m {
                    Some([x, y]) => format!("({x} m, {y} m)"),
                    None => "drawn from the seed".into(),
                }
            ),
            ActorKind::Agent(g) => {
                let mut d = format!(
                    "agent on server {} (context KV cache {}, repair policy {})",
                    self.actor(g.server).name,
                    fmt_bytes(g.kv_cache_bytes),
                    g.policy.as_deref().unwrap_or("the scheme's")
                );
                d.push_str(&describe_external(g.external.as_ref()));
                if let Some(t) = &g.handoff {
                    let deadline = match t.deadline {
                        crate::agent::HandoffDeadline::Rho(r) => format!("rho {r}"),
                        crate::agent::HandoffDeadline::Ttft(ns) => format!("ttft {}", fmt_duration(ns)),
                    };
                    let times = match (t.every_ns, t.count) {
                        (Some(e), Some(c)) => format!("{c} every {}", fmt_duration(e)),
                        (Some(e), None) => format!("every {}", fmt_duration(e)),
                        (None, c) => format!("{}", c.unwrap_or(1)),
                    };
                    d.push_str(&format!(
                        "; hands {} {}-token {} context(s) (seed {}) to {} via {}: {} handoff(s) from {}, {deadline}, scheme {}, {} rebuild, {} decoded tokens, coding window {}",
                        t.context_count,
                        t.context_tokens,
                        t.contexts.name(),
                        t.context_seed,
                        self.actor(t.to).name,
                        self.link(t.via).name,
                        times,
                        fmt_duration(t.start_ns),
                        t.scheme,
                        t.rebuild.name(),
                        t.decode_tokens,
                        t.coding_window
                    ));
                }
                d
            }
            ActorKind::Scheduler(s) => format!(
                "LYREO scheduler: policy {:?} over {} (slot {}, decides {} into each slot), epsilon {}, nu {}{}",
                s.policy,
                s.servers
                    .iter()
                    .map(|&a| self.actor(a).name.clone())
                    .collect::<Vec<_>>()
                    .join(", "),
                fmt_duration(s.slot_ns),
                fmt_duration(s.collect_ns),
                s.epsilon,
                s.nu,
                describe_external(s.external.as_ref())
            ),
        }
    }

    fn describe_request(&self, command: &Command, request: &Resolved) -> String {
        let cmd = command.name();
        match (command, request) {
            (_, Resolved::Action { action, .. }) => self.describe_action(action),
            (Command::PolicySwap(s), _) => {
                let mut what = Vec::new();
                if let Some(p) = &s.policy {
                    what.push(format!("policy {p}"));
                }
                if let Some(w) = &s.weights {
                    what.push(format!("weights {w}"));
                }
                if s.weights_base64.is_some() {
                    what.push("inline weights".into());
                }
                if let Some(u) = &s.url {
                    what.push(format!("url {u}"));
                }
                if let Some(d) = &s.deadline {
                    what.push(format!("deadline {d}"));
                }
                if let Some(f) = &s.fallback {
                    what.push(format!("fallback {f}"));
                }
                format!("{cmd} {}: {}", s.actor, what.join(", "))
            }
            (Command::PolicyGet(t) | Command::PolicyRollback(t), _) => {
                format!("{cmd} {}", t.actor)
            }
            _ => cmd.into(),
        }
    }

    fn describe_action(&self, action: &NetAction) -> String {
        let dir = |d: &Option<Direction>| match d {
            Some(d) => format!(" {d}"),
            None => " (both directions)".into(),
        };
        let cmd = action.command();
        match action {
            NetAction::LinkKill { link, dir: d } | NetAction::LinkRestore { link, dir: d } => {
                format!("{cmd} {}{}", self.link(*link).name, dir(d))
            }
            NetAction::LinkSet {
                link,
                dir: d,
                patch,
            } => {
                format!(
                    "{cmd} {}{}: {}",
                    self.link(*link).name,
                    dir(d),
                    describe_patch(patch)
                )
            }
            NetAction::HostPartition { a, b } | NetAction::HostHeal { a, b } => {
                format!("{cmd} {} | {}", self.host(*a).name, self.host(*b).name)
            }
            NetAction::ActorKill { actor } | NetAction::ActorRestart { actor } => {
                format!("{cmd} {}", self.actor(*actor).name)
            }
            NetAction::LinkFlap {
                link,
                mtbf_ns,
                mttr_ns,
                seed,
                until_ns,
            } => format!(
                "{cmd} {}: up ~Exp(mean {}), down ~Exp(mean {}), seed {seed}{}",
                self.link(*link).name,
                fmt_duration(*mtbf_ns),
                fmt_duration(*mttr_ns),
                match until_ns {
                    Some(u) => format!(", until {}", fmt_duration(*u)),
                    None => ", until the end".into(),
                }
            ),
        }
    }
}

fn describe_rate(r: &RateSpec) -> String {
    match r {
        RateSpec::Unlimited => "unlimited".into(),
        RateSpec::Fixed { bps } => fmt_rate(*bps),
        RateSpec::Trace(t) => {
            let period = match t.period_ms() {
                Some(p) => format!(
                    "repeats every {}",
                    fmt_duration(p.saturating_mul(1_000_000))
                ),
                None => "last rate holds".into(),
            };
            format!(
                "trace (long-run {}, {period})",
                fmt_rate(t.long_run_bps().round() as u64)
            )
        }
    }
}

fn describe_loss(l: &LossSpec) -> String {
    match l {
        LossSpec::None => "none".into(),
        LossSpec::Bernoulli { p } => format!("bernoulli p={p} ({:.2}%)", p * 100.0),
        LossSpec::GilbertElliott {
            eps_g,
            eps_b,
            p_gb,
            p_bg,
        } => format!(
            "ge eps_g={eps_g} eps_b={eps_b} p_gb={p_gb} p_bg={p_bg} (stationary {:.2}%)",
            l.stationary_loss().unwrap_or(f64::NAN) * 100.0
        ),
        LossSpec::Trace(t) => format!(
            "trace (eps_g={} eps_b={}{})",
            t.eps_good(),
            t.eps_bad(),
            match t.period_ms() {
                Some(p) => format!(
                    ", repeats every {}",
                    fmt_duration(p.saturating_mul(1_000_000))
                ),
                None => String::new(),
            }
        ),
    }
}

fn describe_params(p: &LinkParams) -> String {
    format!(
        "rate {}, delay {}, jitter {}{}, queue {}, loss {}, {}",
        describe_rate(&p.rate),
        fmt_duration(p.delay_ns),
        fmt_duration(p.jitter_ns),
        if p.reorder { " (may reorder)" } else { "" },
        p.queue_bytes
            .map(fmt_bytes)
            .unwrap_or_else(|| "unlimited".into()),
        describe_loss(&p.loss),
        match p.delivery {
            Delivery::Datagram => "datagram",
            Delivery::Reliable => "reliable",
        }
    )
}

fn describe_patch(p: &LinkPatch) -> String {
    let mut parts = Vec::new();
    if let Some(r) = &p.rate {
        parts.push(format!("rate {}", describe_rate(r)));
    }
    if let Some(d) = p.delay_ns {
        parts.push(format!("delay {}", fmt_duration(d)));
    }
    if let Some(j) = p.jitter_ns {
        parts.push(format!("jitter {}", fmt_duration(j)));
    }
    if let Some(q) = p.queue_bytes {
        parts.push(format!(
            "queue {}",
            q.map(fmt_bytes).unwrap_or_else(|| "unlimited".into())
        ));
    }
    if let Some(l) = &p.loss {
        parts.push(format!("loss {}", describe_loss(l)));
    }
    parts.join(", ")
}

/// `; external policy at URL (deadline …, fallback …)`, or nothing.
fn describe_external(e: Option<&crate::external::ExternalPolicy>) -> String {
    let Some(e) = e else {
        return String::new();
    };
    format!(
        "; external policy at {} (deadline {}, fallback {})",
        e.url,
        e.deadline_ns
            .map(fmt_duration)
            .unwrap_or_else(|| "the problem's default".into()),
        e.fallback.as_deref().unwrap_or("the default")
    )
}
