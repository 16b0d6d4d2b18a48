//! A control request as a hostile client would send it: bytes parsed as
//! JSON, deserialized into the typed `Command`, and resolved against a
//! small cluster (as the control socket and a forwarded command are). Never
//! a panic; an error never quotes a trace file (none may be read: the
//! cluster's folder holds none, and paths outside it are refused first).
//! A parsed command survives both of its forms: the JSON request the
//! client writes, and the binary one the mesh forwards to other hosts.
#![no_main]

use edgemu_config::command::Command;
use edgemu_config::Cluster;
use edgemu_protocol::{decode_frame, encode_frame, ForwardedCommand, Frame};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

const CLUSTER: &str = r#"
[run]
duration = "10s"
[[hosts]]
name = "alpha"
listen = "127.0.0.1:7101"
[[hosts]]
name = "beta"
listen = "127.0.0.1:7102"
[[actors]]
name = "cbr"
host = "beta"
kind = "constant"
to = "sink"
via = "wan"
rate = "1Mbps"
[[actors]]
name = "sink"
host = "alpha"
kind = "sink"
[[links]]
name = "wan"
a = "cbr"
b = "sink"
"#;

fn cluster() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| {
        // A folder with no files: nothing a trace name could read.
        let dir = std::env::temp_dir().join("edgemu-fuzz-control-empty");
        let _ = std::fs::create_dir_all(&dir);
        Cluster::from_str(CLUSTER, &dir.join("cluster.toml")).expect("fixture")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok(cmd) = Command::from_request(&value) {
        let resolved = cmd.resolve(cluster());
        // Round trip: what we parsed serializes to something we parse again.
        let again = cmd.to_request();
        assert_eq!(Command::from_request(&again).as_ref(), Ok(&cmd));
        // Over the mesh. A loss table holding a table or a list has no
        // binary form, but such a command never resolves, so it is never
        // forwarded.
        let frame = Frame::ControlForward {
            id: 7,
            command: ForwardedCommand(cmd.clone()),
        };
        match encode_frame(&frame) {
            Ok(bytes) => match decode_frame(&bytes) {
                Ok(Frame::ControlForward { id: 7, command }) => assert_eq!(command.0, cmd),
                other => panic!("forwarded command came back as {other:?}"),
            },
            Err(e) => assert!(resolved.is_err(), "a resolved command does not encode: {e}"),
        }
    }
});
