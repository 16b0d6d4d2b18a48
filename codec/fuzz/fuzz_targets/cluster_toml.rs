//! `cluster.toml` as any text: parse and validate, never a panic; a valid
//! file's digest is stable when parsed twice.
#![no_main]

use edgemu_config::Cluster;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // A folder with no files: trace names resolve to nothing readable.
    let source = std::env::temp_dir().join("edgemu-fuzz-toml-empty/cluster.toml");
    if let Ok(c) = Cluster::from_str(text, &source) {
        let again = Cluster::from_str(text, &source).expect("parses twice");
        assert_eq!(c.digest, again.digest);
        let _ = c.describe();
    }
});
