//! edgemu's actors. Each is a thin actix shell around a core without I/O:
//! the [`router::Router`] of a host, the [`link_actor::LinkActor`] of each
//! link direction, the probe actors (senders, pingers, sinks), and the LYREO
//! actors (mobile users, edge servers, the request scheduler). The host
//! process (in the `nodes` crate) creates them from the resolved
//! `cluster.toml` and connects routers of different hosts through the mesh.
//!
//! Time comes from [`clock::Clock`] (ns since the run epoch) and timers from
//! [`clock::Timer`], so the same actors run under real and virtual time.

pub mod clock;
pub mod deadlines;
pub mod events;
pub mod external;
pub mod handoff;
pub mod host_load;
pub mod inbound_gate;
pub mod link_actor;
pub mod link_overrides;
pub mod lyreo;
pub mod messages;
pub mod probes;
pub mod router;
