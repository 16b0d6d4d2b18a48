//! edgemu's host process: the mesh between hosts, the host supervisor, the
//! control plane, chaos, results and the command-line interface's commands.
//! The binary `edgemu` (src/main.rs) is a thin clap front end over this.

pub mod attach;
pub mod bench;
pub mod control;
pub mod dashboard;
pub mod deploy;
pub mod experiment;
pub mod gateway;
pub mod generate;
pub mod heap;
pub mod host;
pub mod kv_retention;
pub mod mesh;
pub mod metrics;
pub mod netns;
pub mod plots;
pub mod profile_kv;
pub mod report;
pub mod results;
pub mod run;
pub mod setup;
pub mod train;
