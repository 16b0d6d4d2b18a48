//! The shipped weights: the trained policies of `policies/weights/`,
//! compiled into the binary ([`edgemu_assets::Embedded`]), so that a copied
//! or installed `edgemu` has them wherever it runs.
//!
//! Weights come from an [`Asset`]: a shipped file built in (labelled
//! `built-in policies/weights/<name>.safetensors` in messages and results)
//! or a file. Both are read as bytes ([`read_weights`], bounded by
//! [`MAX_WEIGHTS_BYTES`]) and go through the same validation
//! ([`crate::nn::WeightsFile::from_bytes`]); the built-in bytes are the
//! files', so a run gives the same figures either way.
//!
//! `$EDGEMU_WEIGHTS_DIR` replaces the shipped set with the files of a folder
//! ([`shipped`]; e.g. `policies/weights/kv-budget-0.005`), so a name whose
//! file that folder lacks is not available then. On the command line a
//! weights argument is a path, or `built-in:<name>` ([`parse_weights`]).

use std::borrow::Cow;
use std::ffi::OsString;
use std::path::Path;

use edgemu_assets::{Asset, AssetError, Embedded};

use crate::nn::{PolicyError, MAX_WEIGHTS_BYTES};

/// The variable naming a folder whose files replace the shipped weights.
pub const WEIGHTS_DIR_ENV: &str = "EDGEMU_WEIGHTS_DIR";

/// What the shipped files are, for messages.
const WHAT: &str = "policy weights";

macro_rules! weights {
    ($name:literal) => {
        Embedded {
            name: $name,
            path: concat!("policies/weights/", $name, ".safetensors"),
            bytes: include_bytes!(concat!("../weights/", $name, ".safetensors")),
        }
    };
}

/// LYREO (paper §IV-B).
pub static LYREO: Embedded = weights!("lyreo");
/// Ly-PPO: LYREO without the return predictor.
pub static LY_PPO: Embedded = weights!("ly-ppo");
/// PPO with a load-balance penalty instead of virtual queues.
pub static PPO: Embedded = weights!("ppo");
/// LYREO with the count-based workload.
pub static LYREO_COUNT: Embedded = weights!("lyreo-count");
/// LYREO without the load-balance constraint.
pub static LYREO_NOLB: Embedded = weights!("lyreo-nolb");
/// PriorityFEC's DDQN repair scheduler.
pub static REPAIR_DDQN: Embedded = weights!("repair-ddqn");

/// Every shipped weights file: the five LYREO-family variants and
/// PriorityFEC's DDQN repair scheduler.
pub static SHIPPED_WEIGHTS: [&Embedded; 6] = [
    &LYREO,
    &LY_PPO,
    &PPO,
    &LYREO_COUNT,
    &LYREO_NOLB,
    &REPAIR_DDQN,
];

/// The shipped weights `w` under the process environment: the file
/// `$EDGEMU_WEIGHTS_DIR/<name>.safetensors` when that is set, else the
/// built-in copy.
pub fn shipped(w: &'static Embedded) -> Asset {
    shipped_with(w, |k| std::env::var_os(k))
}

/// [`shipped`] under the environment `var` (an empty value counts as unset).
pub fn shipped_with(w: &'static Embedded, var: impl Fn(&str) -> Option<OsString>) -> Asset {
    match var(WEIGHTS_DIR_ENV).filter(|v| !v.is_empty()) {
        Some(dir) => Asset::File(Path::new(&dir).join(format!("{}.safetensors", w.name))),
        None => Asset::BuiltIn(w),
    }
}

/// A weights argument: `built-in:<name>` (one of [`SHIPPED_WEIGHTS`]) or a
/// path.
pub fn parse_weights(s: &str) -> Result<Asset, AssetError> {
    Asset::parse(s, &SHIPPED_WEIGHTS, WHAT)
}

/// The bytes of `weights` (a file over [`MAX_WEIGHTS_BYTES`] is refused
/// before it is read).
pub fn read_weights(weights: &Asset) -> Result<Cow<'static, [u8]>, PolicyError> {
    Ok(weights.read(MAX_WEIGHTS_BYTES, WHAT)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lyreo::{LearnedModel, Variant};
    use crate::repair::ddqn::DdqnNet;
    use std::path::PathBuf;

    fn no_env(_: &str) -> Option<OsString> {
        None
    }

    /// The folder the shipped files are built from.
    fn weights_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("weights")
    }

    #[test]
    fn the_built_in_bytes_are_the_shipped_files() {
        for w in SHIPPED_WEIGHTS {
            let file = std::fs::read(weights_dir().join(format!("{}.safetensors", w.name)));
            assert!(file.unwrap() == w.bytes, "{}", w.name);
            let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join(w.path);
            assert!(repo.is_file(), "{}", w.path);
        }
    }

    #[test]
    fn every_variant_and_the_repair_ddqn_are_built_in_and_valid() {
        for v in Variant::ALL {
            let src = shipped_with(v.shipped_weights(), no_env);
            assert_eq!(
                src,
                Asset::BuiltIn(Embedded::find(&SHIPPED_WEIGHTS, v.name()).unwrap())
            );
            LearnedModel::from_source(&src, v).unwrap_or_else(|e| panic!("{}: {e}", v.name()));
        }
        let src = shipped_with(&REPAIR_DDQN, no_env);
        DdqnNet::from_source(&src).unwrap();
        assert_eq!(
            src.label(),
            Path::new("built-in policies/weights/repair-ddqn.safetensors")
        );
    }

    #[test]
    fn the_weights_folder_variable_replaces_the_built_in_set() {
        let dir = weights_dir().join("kv-budget-0.005");
        let d = dir.to_string_lossy().into_owned();
        let env = |k: &str| (k == WEIGHTS_DIR_ENV).then(|| OsString::from(&d));
        let src = shipped_with(&LYREO, env);
        assert_eq!(src, Asset::File(dir.join("lyreo.safetensors")));
        let bytes = read_weights(&src).unwrap();
        assert_eq!(bytes, std::fs::read(dir.join("lyreo.safetensors")).unwrap());
        assert!(bytes != LYREO.bytes);
        // This folder holds no repair scheduler: not available under it.
        assert!(!shipped_with(&REPAIR_DDQN, env).is_available());
        let empty = |k: &str| (k == WEIGHTS_DIR_ENV).then(OsString::new);
        assert_eq!(shipped_with(&LYREO, empty), Asset::BuiltIn(&LYREO));
    }

    #[test]
    fn a_weights_argument_is_a_built_in_name_or_a_path() {
        assert_eq!(
            parse_weights("built-in:repair-ddqn").unwrap(),
            Asset::BuiltIn(&REPAIR_DDQN)
        );
        assert_eq!(
            parse_weights("w/x.safetensors").unwrap(),
            Asset::File(PathBuf::from("w/x.safetensors"))
        );
        let e = parse_weights("built-in:repair-ddqn-1step")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("repair-ddqn, ") || e.contains(", repair-ddqn"),
            "{e}"
        );
    }

    #[test]
    fn a_file_over_the_limit_is_refused_as_weights() {
        let path = std::env::temp_dir().join(format!("edgemu-big-{}.st", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(MAX_WEIGHTS_BYTES + 1).unwrap();
        let e = read_weights(&Asset::File(path.clone())).unwrap_err();
        std::fs::remove_file(&path).ok();
        assert!(e.to_string().contains("limit for policy weights"), "{e}");
    }
}
