//! `cluster.toml`: parsing, strict validation and the resolved topology.
//!
//! Entry points: [`Cluster::load`] / [`Cluster::from_str`] (a [`Cluster`] or a
//! [`ConfigError`] whose [`Diagnostic`]s carry file, line and column),
//! [`Cluster::describe`] (what `edgemu check` prints), [`command::Command`] (the
//! control-plane command vocabulary, shared with `[[chaos]]`), and the units in
//! [`units`]. This doc is also `docs/cluster-toml.md`.
//!
//! # The file format
//!
//! One file describes a testbed: the run, the host processes, the actors on them, the links
//! between actors, and a chaos timeline. Every host reads the same file; hosts, actors and
//! links are numbered by their position in it, so ids agree everywhere, and the mesh
//! handshake compares a digest of the normalized file (see [Digest](#digest)).
//!
//! `edgemu check FILE` validates a file and prints the resolved topology (hosts with
//! addresses, actors per host, each link direction in human units, the chaos timeline).
//!
//! Parsing is **strict**: an unknown key (anywhere, including inside `loss` tables and chaos
//! entries, and a key that belongs to another actor kind), a bad unit, a bad enum value, a
//! missing required key, a reference to an undefined host, actor or link, a duplicate name,
//! and the other checks listed under [Validation](#validation) are errors. Every error is
//! reported as `file:line:column: what was wrong, what was expected`, all of them in file
//! order where more than one is found.
//!
//! ### Units
//!
//! Values with units are strings: a decimal number (a fraction is allowed: `"2.5Mbps"`; no
//! sign, no exponent), optional spaces, and a unit, which is required and case-sensitive.
//!
//! | kind     | units                                                                 | example    |
//! |----------|-----------------------------------------------------------------------|------------|
//! | rate     | `bps`, `Kbps` (or `kbps`), `Mbps`, `Gbps` — decimal (1 Kbps = 1000 bps) | `"100Mbps"` |
//! | duration | `ns`, `us` (or `µs`), `ms`, `s`, `m` (minutes)                          | `"20ms"`    |
//! | size     | `B`, `KB` (or `kB`), `MB`, `GB` — decimal; `KiB`, `MiB`, `GiB` — binary | `"64KiB"`   |
//!
//! Rates round to the nearest bit per second and durations to the nearest nanosecond; a
//! size must be a whole number of bytes (`"1.5KiB"` is 1536 B, `"0.5B"` is an error).
//! Where noted, a rate or a queue size may also be `"unlimited"`. The control plane accepts
//! the same units ([`units`]).
//!
//! ### `[run]` (required)
//!
//! | key         | type     | default          | meaning |
//! |-------------|----------|------------------|---------|
//! | `name`      | string   | the file's stem  | run name |
//! | `duration`  | duration | **required**, > 0 | how long the run lasts |
//! | `seed`      | integer ≥ 0 | `0`           | seed of every random choice |
//! | `time`      | `"real"` \| `"virtual"` | `"real"` | real time across hosts, or virtual time in one process |
//! | `results`   | path     | `"results"`      | folder for `<run-id>/`, relative to the config file's folder |
//! | `token_env` | string   | `"EDGEMU_TOKEN"` | name of the environment variable holding the cluster token |
//! | `sample`    | duration | `"1s"`, > 0      | per-link counter sampling period |
//!
//! ### `[[hosts]]` (at least one)
//!
//! | key         | type           | default         | meaning |
//! |-------------|----------------|-----------------|---------|
//! | `name`      | string         | **required**, unique | host name |
//! | `listen`    | `"ip:port"`    | **required**, unique | mesh websocket listen address |
//! | `advertise` | `"ip:port"` or `"dns-name:port"` | `listen` | address peers dial (a name is resolved at each dial) |
//! | `control`   | `"ip:port"`    | none            | control websocket listen address |
//!
//! Addresses are IP socket addresses (`"127.0.0.1:7101"`, `"[::1]:7101"`), not host names.
//! No two hosts may use the same `listen` or `control` address. A token is required when
//! any `listen`, `advertise` or `control` address is not loopback.
//!
//! ### `[[actors]]`
//!
//! Common keys:
//!
//! | key    | type   | default | meaning |
//! |--------|--------|---------|---------|
//! | `name` | string | **required**, unique | actor name |
//! | `host` | host name | **required** | the host the actor runs on |
//! | `kind` | `"constant"` \| `"bursty"` \| `"pinger"` \| `"sink"` | **required** | what it does |
//!
//! Senders (`constant`, `bursty`, `pinger`) also take:
//!
//! | key     | type       | default   | meaning |
//! |---------|------------|-----------|---------|
//! | `to`    | actor name | **required** | destination; must be a receiving actor (a `sink`), not itself |
//! | `via`   | link name  | none (direct over the mesh) | link to cross; it must join this actor and `to` |
//! | `start` | duration   | `"0s"`    | when sending starts, from the run's start |
//! | `stop`  | duration   | the end   | when sending stops; after `start` |
//!
//! Per kind (a key of another kind is an error):
//!
//! | kind       | key         | type      | default   | meaning |
//! |------------|-------------|-----------|-----------|---------|
//! | `constant` | `rate`      | rate      | **required**, > 0 | constant bit rate |
//! |            | `size`      | size      | `"1400B"` | packet size |
//! | `bursty`   | `burst`     | integer   | `16`, > 0 | packets sent back to back |
//! |            | `interval`  | duration  | `"100ms"`, > 0 | time between bursts |
//! |            | `size`      | size      | `"1400B"` | packet size |
//! | `pinger`   | `interval`  | duration  | `"100ms"`, > 0 | time between pings |
//! |            | `size`      | size      | `"64B"`   | ping size |
//! |            | `reply_via` | link name | `via`     | link the replies cross; it must join this actor and `to` |
//! | `sink`     | —           |           |           | records every packet, answers pings |
//!
//! Packet sizes are > 0 and below 4 GiB.
//!
//! ### `[[links]]`
//!
//! | key    | type       | default | meaning |
//! |--------|------------|---------|---------|
//! | `name` | string     | **required**, unique | link name |
//! | `a`    | actor name | **required** | one endpoint |
//! | `b`    | actor name | **required** | the other endpoint (not `a`) |
//!
//! The keys below set **both directions**; `[links.ab]` (a→b) and `[links.ba]` (b→a) take
//! the same keys and override them for one direction.
//!
//! | key          | type | default | meaning |
//! |--------------|------|---------|---------|
//! | `rate`       | rate or `"unlimited"` | `"unlimited"` | serialization rate; > 0 |
//! | `rate_trace` | path | none | mahimahi delivery-opportunity trace (one ms timestamp per line, 1500 B each); replaces `rate` |
//! | `rate_steps` | path | none | piecewise-constant rate trace, lines `<ms> <bps>`, optional last `<ms>` period line; replaces `rate` |
//! | `delay`      | duration | `"0s"` | one-way propagation delay |
//! | `rtt`        | duration | — | round-trip time instead of `delay` (one-way = rtt/2); not together with `delay` in one table |
//! | `jitter`     | duration | `"0s"` | uniform extra delay in [0, jitter] per packet |
//! | `queue`      | size or `"unlimited"` | 100 ms of `rate` | drop-tail byte limit of the queue waiting for serialization; > 0 |
//! | `loss`       | table | `{ model = "none" }` | loss model, see below |
//! | `delivery`   | `"datagram"` \| `"reliable"` | `"datagram"` | a lost packet is dropped, or arrives late by one retransmission delay per loss |
//! | `reorder`    | bool | `false` | let jitter reorder packets |
//! | `seed`       | integer ≥ 0 | derived from the run's `seed` and the link | seed of this direction's random draws (loss, jitter); only in `[links.ab]` / `[links.ba]` — the experiment uses it to replay a virtual-time run's loss draws on a real link |
//!
//! At most one of `rate`, `rate_trace`, `rate_steps` per table. Trace paths are relative to
//! the config file's folder; the trace formats are documented in [`edgemu_links::trace`].
//!
//! ### Loss models
//!
//! | `model`       | keys | meaning |
//! |---------------|------|---------|
//! | `"none"`      | — | no loss |
//! | `"bernoulli"` | `p` (required) | each packet lost with probability `p` |
//! | `"ge"`        | `eps_g`, `eps_b`, `p_gb`, `p_bg` (all required) | Gilbert–Elliott: lose with `eps_g` in Good, `eps_b` in Bad; move Good→Bad with `p_gb`, Bad→Good with `p_bg` (stationary loss = π_G·eps_g + π_B·eps_b, π_B = p_gb/(p_gb+p_bg)) |
//! | `"trace"`     | `file` (required), `eps_g` (default 0), `eps_b` (default 1) | loss state from a trace file, lines `<ms> good\|bad\|<probability>`; a packet is lost with `eps_g` while `good`, `eps_b` while `bad` |
//!
//! Probabilities are numbers in [0, 1] (`0` and `1` may be written as integers).
//!
//! ### `[[chaos]]`
//!
//! Each entry runs one control command at a time offset. The command keys are exactly those
//! of the control plane: an entry (less `at`, `command`, `every`) is parsed into the same typed
//! [`command::Command`] as a control request and resolved by the same
//! [`command::Command::resolve`], so both accept the same vocabulary and give the same errors.
//!
//! | key       | type     | default | meaning |
//! |-----------|----------|---------|---------|
//! | `at`      | duration | **required**, ≤ run duration | when, from the run's start |
//! | `command` | string   | **required** | see below |
//! | `for`     | duration | none, > 0 | heal after this long: kill→restore, set→restore the previous parameters, partition→heal; only with `link.kill`, `link.set`, `host.partition` |
//! | `every`   | duration | none, > 0 | repeat with this period; not shorter than `for`; not with `link.flap`, `run.stop` |
//!
//! | `command`        | keys |
//! |------------------|------|
//! | `link.kill`      | `link` (required), `dir` (`"ab"` \| `"ba"`; default both directions) |
//! | `link.restore`   | `link` (required), `dir` |
//! | `link.set`       | `link` (required), `dir`, and at least one of `rate`, `rate_trace`, `rate_steps`, `delay`, `rtt`, `jitter`, `queue`, `loss` (same syntax as in `[[links]]`) |
//! | `host.partition` | `hosts = ["alpha", "beta"]` (two different hosts) |
//! | `host.heal`      | `hosts = ["alpha", "beta"]` |
//! | `link.flap`      | `link` (required), `mtbf` (required, > 0: mean up time), `mttr` (required, > 0: mean down time), `seed` (default: the run's seed), `until` (duration from the run's start, after `at`; default the end) — up for Exp(mtbf), down for Exp(mttr) |
//! | `policy.swap`    | `actor` (required: an actor with a policy slot), `policy` (a policy name), `weights` (a safetensors file relative to the config file's folder, read on the actor's host) or `weights_base64` (inline, at most 512 KiB); at least one of `policy` and the weights; with `policy = "external"` also `url`, `deadline`, `fallback` (defaults: the actor's `external` table; refused in virtual time) — see `docs/control.md`, `docs/external-policy.md` |
//! | `policy.rollback`| `actor` (required) — back to the previous policy version |
//! | `policy.get`     | `actor` (required) — records the active version in the event log |
//! | `run.stop`       | — |
//!
//! ### Validation
//!
//! Besides unknown keys, types, units and enum values:
//!
//! - names of hosts, of actors and of links are unique (each kind separately);
//! - no two hosts share a `listen` or `control` address;
//! - `host`, `to`, `via`, `reply_via`, `a`, `b`, `link`, `hosts` name defined entries (the
//!   error lists the defined names);
//! - `via` and `reply_via` join the actor and its `to`; `to` is a sink and not the actor itself;
//! - `delay` and `rtt` are not both set in one table;
//! - probabilities are in [0, 1]; rates, sizes of queues and packets, `duration`, `sample`,
//!   `interval`, `for`, `every`, `mtbf`, `mttr` are > 0;
//! - a sender's `stop` is after its `start`;
//! - a chaos entry's `at` is not beyond the run's duration; `every` is not shorter than
//!   `for`; `until` is after `at`.
//!
//! ### Digest
//!
//! [`Cluster::digest`] is the SHA-256 of a normalized text of the *resolved* config (values in
//! ns, bps and bytes, names resolved to ids, trace files parsed). Whitespace, comments, key
//! order, unit spelling (`"10ms"` vs `"0.01s"`) and the file's location do not change it;
//! any semantic difference does.
//!
//! ### Example
//!
//! ```toml
//! [run]
//! name = "default"
//! duration = "20s"
//! seed = 7
//! time = "real"
//! results = "results"
//! token_env = "EDGEMU_TOKEN"
//! sample = "1s"
//!
//! [[hosts]]
//! name = "alpha"
//! listen = "127.0.0.1:7101"
//! advertise = "127.0.0.1:7101"
//! control = "127.0.0.1:7201"
//!
//! [[hosts]]
//! name = "beta"
//! listen = "127.0.0.1:7102"
//!
//! [[actors]]
//! name = "cbr"
//! host = "alpha"
//! kind = "constant"
//! to = "sink-b"
//! via = "wan"
//! rate = "20Mbps"
//! size = "1400B"
//! start = "0s"
//! stop = "15s"
//!
//! [[actors]]
//! name = "sink-b"
//! host = "beta"
//! kind = "sink"
//!
//! [[links]]
//! name = "wan"
//! a = "cbr"
//! b = "sink-b"
//! rate = "50Mbps"
//! delay = "10ms"
//! jitter = "1ms"
//! queue = "256KiB"
//! loss = { model = "ge", eps_g = 0.001, eps_b = 0.5, p_gb = 0.02, p_bg = 0.1 }
//! delivery = "datagram"
//!
//! [links.ab]
//! rate = "100Mbps"
//!
//! [links.ba]
//! rate = "10Mbps"
//!
//! [[chaos]]
//! at = "8s"
//! command = "link.kill"
//! link = "wan"
//! dir = "ab"
//! for = "3s"
//! every = "10s"
//!
//! [[chaos]]
//! at = "2s"
//! command = "link.flap"
//! link = "wan"
//! mtbf = "5s"
//! mttr = "1s"
//! seed = 3
//! until = "18s"
//! ```
//!
//! `config/tests/fixtures/full.toml` uses every key.

mod action;
pub mod agent;
pub mod attach;
pub mod command;
pub mod command_wire;
mod describe;
mod error;
pub mod external;
mod fields;
mod load;
pub mod lyreo;
mod model;
mod node;
pub mod replicate;
pub mod units;

pub use action::{read_run_file, MAX_TRACE_BYTES};
pub use error::{ActionError, ConfigError, ControlError, Diagnostic, Diagnostics};
pub use load::{default_queue_bytes, MIN_EVERY_NS};
pub use model::*;
pub use units::{
    fmt_bytes, fmt_duration, fmt_rate, parse_bytes, parse_duration_ns, parse_rate, UnitError,
    UnitKind,
};
