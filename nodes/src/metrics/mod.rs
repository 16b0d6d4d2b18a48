//! Prometheus metrics of one host, served as `GET /metrics` on the control
//! address through the `prometheus-client` crate: OpenMetrics text when the
//! scraper asks for it (Prometheus does), else the classic Prometheus text
//! format that curl users and `promtool check metrics` read ([`text_format`]).
//!
//! Two kinds of metric families make up one scrape:
//!
//! - **Snapshot families** ([`exposition`]): the link, router and mesh
//!   counters the cores already keep. A scrape takes one [`HostSnapshot`]
//!   the way `status` does (one message per link actor, answered between
//!   packets) and encodes it; nothing on the data path changes to be
//!   scraped, and no lock is shared with it.
//! - **Registered families** ([`HostMetrics::register`],
//!   [`HostMetrics::register_collector`]): live `prometheus-client` metrics
//!   that an actor creates at spawn and updates itself. Its counters,
//!   gauges and histograms are atomics, so the data path never waits on a
//!   scrape; the registry's lock is only taken to register and to encode.
//!   This is how the serving and handoff actors add their families
//!   (server KV bytes, batch size, requests by state, Z_s, handoffs by
//!   outcome): clone the host's [`HostMetrics`], then for example
//!
//!   ```ignore
//!   let handoffs = Family::<HandoffLabels, Counter>::default();
//!   metrics.register("handoffs", "KV handoffs by scheme and outcome", handoffs.clone());
//!   handoffs.get_or_create(&HandoffLabels { scheme, outcome }).inc();
//!   ```
//!
//!   Names get the `edgemu_` prefix and every family a `host` label.
//!   Counters get `_total` appended by the encoder.
//!
//! The control socket counts every command it answers by command and result
//! ([`HostMetrics::count_command`]); the command label is one of the known
//! command names or `other`, so a client cannot grow the label set.

pub mod exposition;
pub mod gateway;
pub mod snapshot;
pub mod text_format;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Metric, Registry};
pub use snapshot::{HostSnapshot, TakeSnapshot};
use std::borrow::Cow;
use std::sync::{Arc, Mutex};
pub use text_format::Format;

/// How the control socket answered a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandResult {
    Ok,
    /// The command was understood and refused or failed.
    Error,
    /// Malformed JSON or an unknown command or argument.
    BadRequest,
    /// Missing or wrong token.
    Unauthorized,
}

impl CommandResult {
    pub fn label(self) -> &'static str {
        match self {
            CommandResult::Ok => "ok",
            CommandResult::Error => "error",
            CommandResult::BadRequest => "bad_request",
            CommandResult::Unauthorized => "unauthorized",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CommandLabels {
    command: &'static str,
    result: &'static str,
}

/// A host's metrics: the registry other actors add families to and the
/// control-command counters. Cheap to clone (shared).
#[derive(Clone)]
pub struct HostMetrics {
    host: String,
    registered: Arc<Mutex<Registry>>,
    commands: Family<CommandLabels, Counter>,
}

impl std::fmt::Debug for HostMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostMetrics")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

fn host_label(host: &str) -> impl Iterator<Item = (Cow<'static, str>, Cow<'static, str>)> {
    std::iter::once((Cow::Borrowed("host"), Cow::Owned(host.to_string())))
}

impl HostMetrics {
    pub fn new(host: &str) -> Self {
        let mut registry = Registry::with_prefix_and_labels("edgemu", host_label(host));
        let commands = Family::<CommandLabels, Counter>::default();
        registry.register(
            "control_commands",
            "Control commands answered by this host's control socket, by command and result",
            commands.clone(),
        );
        HostMetrics {
            host: host.to_string(),
            registered: Arc::new(Mutex::new(registry)),
            commands,
        }
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    /// Adds a live metric family (see the module docs). `name` without the
    /// `edgemu_` prefix; it must be unique on the host.
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        if let Ok(mut r) = self.registered.lock() {
            r.register(name, help, metric);
        }
    }

    /// Adds a collector that encodes its families at each scrape (for
    /// state that is cheaper to read than to mirror into atomics).
    pub fn register_collector(&self, collector: Box<dyn Collector>) {
        if let Ok(mut r) = self.registered.lock() {
            r.register_collector(collector);
        }
    }

    /// Counts one answered control command.
    pub fn count_command(&self, command: Option<&str>, result: CommandResult) {
        let command = command
            // Only the protocol's own names get a label, so a client cannot grow
            // the label set.
            .and_then(|c| {
                edgemu_config::command::Command::NAMES
                    .iter()
                    .find(|k| **k == c)
                    .copied()
            })
            .unwrap_or("other");
        self.commands
            .get_or_create(&CommandLabels {
                command,
                result: result.label(),
            })
            .inc();
    }

    /// The whole exposition in `format`: the snapshot's families, then the
    /// registered ones.
    pub fn encode_as(
        &self,
        snapshot: &HostSnapshot,
        format: Format,
    ) -> Result<String, std::fmt::Error> {
        let om = self.encode(snapshot)?;
        Ok(match format {
            Format::OpenMetrics => om,
            Format::Prometheus => text_format::to_prometheus_text(&om),
        })
    }

    /// The whole exposition as OpenMetrics: the snapshot's families, the
    /// registered ones, and the closing `# EOF`.
    pub fn encode(&self, snapshot: &HostSnapshot) -> Result<String, std::fmt::Error> {
        let mut out = String::with_capacity(16 * 1024);
        let snap = exposition::registry(snapshot);
        prometheus_client::encoding::text::encode_registry(&mut out, &snap)?;
        if let Ok(r) = self.registered.lock() {
            prometheus_client::encoding::text::encode_registry(&mut out, &r)?;
        }
        if let Some(g) = gateway::registry(&snapshot.lyreo) {
            prometheus_client::encoding::text::encode_registry(&mut out, &g)?;
        }
        prometheus_client::encoding::text::encode_eof(&mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::gauge::Gauge;

    #[test]
    fn commands_are_counted_by_known_name_and_result() {
        let m = HostMetrics::new("alpha");
        m.count_command(Some("link.kill"), CommandResult::Ok);
        m.count_command(Some("link.kill"), CommandResult::Ok);
        m.count_command(Some("rm -rf /"), CommandResult::BadRequest);
        m.count_command(None, CommandResult::Unauthorized);
        let text = m.encode(&HostSnapshot::default()).expect("encode");
        assert!(
            text.contains(
                r#"edgemu_control_commands_total{host="alpha",command="link.kill",result="ok"} 2"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"command="other",result="bad_request"} 1"#));
        assert!(text.contains(r#"command="other",result="unauthorized"} 1"#));
        assert!(!text.contains("rm -rf"));
        assert!(text.ends_with("# EOF\n"));
        assert_eq!(text.matches("# EOF").count(), 1);
    }

    #[test]
    fn registered_families_appear_with_prefix_and_host_label() {
        let m = HostMetrics::new("beta");
        let g = Gauge::<i64>::default();
        m.register("server_kv_bytes", "KV bytes held", g.clone());
        g.set(4096);
        let text = m.encode(&HostSnapshot::default()).expect("encode");
        assert!(
            text.contains("# TYPE edgemu_server_kv_bytes gauge"),
            "{text}"
        );
        assert!(
            text.contains(r#"edgemu_server_kv_bytes{host="beta"} 4096"#),
            "{text}"
        );
        g.set(8192);
        let text = m.encode(&HostSnapshot::default()).expect("encode");
        assert!(text.contains(r#"edgemu_server_kv_bytes{host="beta"} 8192"#));
    }
}
