//! The shipped KV-utility profiles of SmolLM2-135M (`gpu/profiles/`, beside
//! the profiler that measured them), compiled into the binary
//! ([`edgemu_assets::Embedded`]) so that a copied or installed `edgemu` has
//! them wherever it runs.
//!
//! A profile comes from an [`Asset`]: built in (labelled `built-in
//! gpu/profiles/<name>.json`) or a file, read through the same validation
//! ([`crate::kv_profile::KvUtilityProfile::load`]). On the command line a
//! profile is a path or `built-in:<name>` ([`parse_profile`]).

use std::borrow::Cow;

use edgemu_assets::{Asset, AssetError, Embedded};

/// What the shipped files are, for messages.
const WHAT: &str = "KV-utility profile";

/// The most bytes a profile file may have (a profile is a few KB).
pub const MAX_PROFILE_BYTES: u64 = 16 << 20;

macro_rules! profile {
    ($name:literal) => {
        Embedded {
            name: $name,
            path: concat!("gpu/profiles/", $name, ".json"),
            bytes: include_bytes!(concat!("../../gpu/profiles/", $name, ".json")),
        }
    };
}

/// Measured by zero-filling (the handoff's default rebuild): the profile
/// PriorityFEC's experiment and the agents' handoffs use by default.
pub static SMOLLM2_KVU: Embedded = profile!("smollm2-135m-kvu");
/// Measured by masking rows out of attention (`--mode mask`).
pub static SMOLLM2_KVU_MASK: Embedded = profile!("smollm2-135m-kvu-mask");

/// Every shipped profile.
pub static SHIPPED_PROFILES: [&Embedded; 2] = [&SMOLLM2_KVU, &SMOLLM2_KVU_MASK];

/// How the default profile is written on the command line.
pub const DEFAULT_PROFILE_ARG: &str = "built-in:smollm2-135m-kvu";

/// The default profile, built in: [`SMOLLM2_KVU`].
pub fn default_profile() -> Asset {
    Asset::BuiltIn(&SMOLLM2_KVU)
}

/// The bytes of `profile` (a file over [`MAX_PROFILE_BYTES`] is refused
/// before it is read).
pub fn read_profile(profile: &Asset) -> Result<Cow<'static, [u8]>, AssetError> {
    profile.read(MAX_PROFILE_BYTES, WHAT)
}

/// A profile argument: `built-in:<name>` (one of [`SHIPPED_PROFILES`]) or
/// a path.
pub fn parse_profile(s: &str) -> Result<Asset, AssetError> {
    Asset::parse(s, &SHIPPED_PROFILES, WHAT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv_profile::{KvUtilityProfile, ModelIdentity};
    use std::path::Path;

    fn smollm2() -> ModelIdentity {
        ModelIdentity::smollm2_135m()
    }

    #[test]
    fn the_built_in_profiles_are_the_shipped_files_and_valid() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for p in SHIPPED_PROFILES {
            assert!(
                std::fs::read(root.join(p.path)).unwrap() == p.bytes,
                "{}",
                p.name
            );
            let a = parse_profile(&format!("built-in:{}", p.name)).unwrap();
            assert_eq!(a, Asset::BuiltIn(p));
            let from_bytes = KvUtilityProfile::load(&a, &smollm2()).unwrap();
            let from_file =
                KvUtilityProfile::load(&Asset::File(root.join(p.path)), &smollm2()).unwrap();
            assert_eq!(from_bytes, from_file, "{}", p.name);
        }
        assert_eq!(
            parse_profile(DEFAULT_PROFILE_ARG).unwrap(),
            default_profile()
        );
    }

    #[test]
    fn a_built_in_profile_is_checked_against_the_model_and_named_in_errors() {
        let tiny = ModelIdentity {
            n_layers: 2,
            ..smollm2()
        };
        let e = KvUtilityProfile::load(&Asset::BuiltIn(&SMOLLM2_KVU), &tiny)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("built-in gpu/profiles/smollm2-135m-kvu.json") && e.contains("not for"),
            "{e}"
        );
    }
}
