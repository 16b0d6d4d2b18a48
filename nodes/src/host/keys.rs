//! Keys derived from the cluster token, one per use, so that a key seen by
//! one protocol (the mesh handshake's HMAC) is never the key of another
//! (control authentication): each is HMAC-SHA256(token, label). An empty
//! token (loopback-only runs) gives empty keys, which authenticate nothing.

use hmac::Mac;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

const MESH_LABEL: &[u8] = b"edgemu mesh handshake key v1";
const CONTROL_LABEL: &[u8] = b"edgemu control token check v1";

/// The keys a host uses, from the cluster token.
#[derive(Clone)]
pub struct ClusterKeys {
    /// Keys the mesh handshake's HMAC challenge.
    pub mesh: Vec<u8>,
    /// What a control token must hash to (see [`control_token_ok`]).
    pub control: Vec<u8>,
}

impl std::fmt::Debug for ClusterKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.write_str("ClusterKeys { .. }")
    }
}

fn derive(token: &[u8], label: &[u8]) -> Vec<u8> {
    if token.is_empty() {
        return Vec::new();
    }
    let mut mac = <HmacSha256 as Mac>::new_from_slice(token).expect("HMAC takes any key length");
    mac.update(label);
    mac.finalize().into_bytes().to_vec()
}

impl ClusterKeys {
    pub fn from_token(token: &[u8]) -> Self {
        ClusterKeys {
            mesh: derive(token, MESH_LABEL),
            control: derive(token, CONTROL_LABEL),
        }
    }
}

/// True if `given` (the token a control client sent) derives `control_key`;
/// constant-time. An empty key accepts anything (no token configured).
pub fn control_token_ok(control_key: &[u8], given: &str) -> bool {
    if control_key.is_empty() {
        return true;
    }
    if given.is_empty() {
        return false;
    }
    let Ok(mut mac) = <HmacSha256 as Mac>::new_from_slice(given.as_bytes()) else {
        return false;
    };
    mac.update(CONTROL_LABEL);
    mac.verify_slice(control_key).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mesh_and_control_keys_differ_and_neither_is_the_token() {
        let k = ClusterKeys::from_token(b"s3cret");
        assert_ne!(k.mesh, k.control);
        assert_ne!(k.mesh, b"s3cret".to_vec());
        assert_eq!(k.mesh.len(), 32);
        assert!(control_token_ok(&k.control, "s3cret"));
        assert!(!control_token_ok(&k.control, "s3cre"));
        assert!(!control_token_ok(&k.control, ""));
        // The mesh key is not accepted as a control token either.
        let as_text = String::from_utf8_lossy(&k.mesh).to_string();
        assert!(!control_token_ok(&k.control, &as_text));
        let none = ClusterKeys::from_token(b"");
        assert!(none.mesh.is_empty() && none.control.is_empty());
        assert!(control_token_ok(&none.control, "anything"));
    }
}
