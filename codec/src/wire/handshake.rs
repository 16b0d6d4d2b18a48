//! Host-to-host handshake: both sides send [`Hello`] (protocol version, host
//! name, incarnation, config digest, a fresh nonce), then each answers the
//! peer's nonce with [`Auth`], an HMAC-SHA256 keyed by the cluster token.
//! A [`Handshake`] is a pure state machine: feed it the peer's frames.
//!
//! The codec has no random number generator: the caller fills
//! [`Hello::nonce`] (and [`Hello::incarnation`]) with fresh random bytes for
//! every connection attempt. A reused nonce lets a recorded `Auth` be replayed.

use super::frame::Frame;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;

type HmacSha256 = Hmac<Sha256>;

/// Domain separation prefix of [`auth_mac`].
const AUTH_CONTEXT: &[u8] = b"edgemu-auth-v1";

pub const PROTOCOL_VERSION: u16 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol_version: u16,
    pub host: String,
    /// Random per process start: a restarted node is a new incarnation.
    pub incarnation: u64,
    /// SHA-256 of the normalized config (see [`config_digest`]).
    pub config_digest: [u8; 32],
    /// Fresh random bytes per connection, chosen by the caller (the codec has
    /// no RNG). The peer proves it holds the token by MACing this nonce.
    pub nonce: [u8; 32],
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Auth {
    pub mac: [u8; 32],
}

/// SHA-256 over the normalized config bytes.
pub fn config_digest(normalized: &[u8]) -> [u8; 32] {
    Sha256::digest(normalized).into()
}

fn auth_hmac(token: &[u8], peer_nonce: &[u8; 32], own_host: &str) -> HmacSha256 {
    // HMAC takes keys of any length (long ones are hashed), so this never fails.
    let mut mac = <HmacSha256 as Mac>::new_from_slice(token).expect("HMAC accepts any key length");
    mac.update(AUTH_CONTEXT);
    mac.update(peer_nonce);
    mac.update(own_host.as_bytes());
    mac
}

/// HMAC-SHA256(token, "edgemu-auth-v1" || peer_nonce || own_host).
pub fn auth_mac(token: &[u8], peer_nonce: &[u8; 32], own_host: &str) -> [u8; 32] {
    auth_hmac(token, peer_nonce, own_host)
        .finalize()
        .into_bytes()
        .into()
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HandshakeError {
    #[error("peer speaks protocol {found}, this build speaks {expected}")]
    Version { found: u16, expected: u16 },
    #[error("peer {host:?} has a different cluster config (digest mismatch)")]
    ConfigMismatch { host: String },
    #[error("peer {host:?} failed authentication (wrong cluster token)")]
    BadAuth { host: String },
    #[error("peer {found:?} is not the expected host {expected:?}")]
    UnexpectedHost { found: String, expected: String },
    #[error("unexpected frame during handshake: {0}")]
    Unexpected(&'static str),
}

/// What the handshake concluded.
#[derive(Clone, Debug, PartialEq)]
pub struct HandshakeOutcome {
    pub peer_host: String,
    pub peer_incarnation: u64,
}

/// Pure handshake state machine, the same on the dialing and accepting side.
///
/// ```text
/// let mut hs = Handshake::new(my_hello, token, expected_peer /* None when accepting */);
/// send(hs.hello_frame());
/// for each frame from the peer:
///     let (reply, done) = hs.on_frame(frame)?;   // reply: frame to send, if any
/// ```
///
/// The peer must send exactly `Hello` then `Auth`. On the peer's `Hello` the
/// machine checks, in order: the protocol version ([`HandshakeError::Version`]),
/// the config digest ([`HandshakeError::ConfigMismatch`]), the host name
/// against `expected_peer` ([`HandshakeError::UnexpectedHost`]; a peer that
/// claims our own host name or echoes our nonce is refused as `Unexpected`, which
/// stops a reflected `Auth`); then it returns our `Auth` to send. On the peer's
/// `Auth` it verifies the MAC in constant time ([`HandshakeError::BadAuth`]) and
/// returns the [`HandshakeOutcome`]. Any other frame, a frame out of order, or
/// any frame after the handshake finished or failed is
/// [`HandshakeError::Unexpected`]. After an error the connection must be closed.
///
/// `local.nonce` must be fresh random bytes for every connection (the codec
/// has no RNG); `local.protocol_version` should be [`PROTOCOL_VERSION`].
pub struct Handshake {
    local: Hello,
    token: Vec<u8>,
    expected_peer: Option<String>,
    state: State,
}

#[derive(Clone, Debug, PartialEq)]
enum State {
    /// Waiting for the peer's `Hello`.
    AwaitHello,
    /// Peer's `Hello` accepted, our `Auth` sent; waiting for the peer's `Auth`.
    AwaitAuth {
        peer_host: String,
        peer_incarnation: u64,
    },
    /// Peer authenticated.
    Done,
    /// An error was returned; nothing more is accepted.
    Failed,
}

impl fmt::Debug for Handshake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the token.
        f.debug_struct("Handshake")
            .field("local_host", &self.local.host)
            .field("expected_peer", &self.expected_peer)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Handshake {
    /// `expected_peer`: the dialing side knows whom it dialed; the
    /// accepting side passes `None` and learns it from the `Hello`.
    pub fn new(local: Hello, token: Vec<u8>, expected_peer: Option<String>) -> Self {
        Handshake {
            local,
            token,
            expected_peer,
            state: State::AwaitHello,
        }
    }

    /// The frame to send first (of any application protocol: the
    /// handshake looks only at `Hello` and `Auth`).
    pub fn hello_frame<M, C, R>(&self) -> Frame<M, C, R> {
        Frame::Hello(self.local.clone())
    }

    /// Whether the peer's `Auth` verified (an outcome was returned).
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Feed one peer frame. Returns a frame to send (the `Auth` answer after
    /// the peer's `Hello`), and `Some(outcome)` once the peer's `Auth` verified.
    #[allow(clippy::type_complexity)]
    pub fn on_frame<M, C, R>(
        &mut self,
        frame: Frame<M, C, R>,
    ) -> Result<(Option<Frame<M, C, R>>, Option<HandshakeOutcome>), HandshakeError> {
        let result = self.step(frame);
        if result.is_err() {
            self.state = State::Failed;
        }
        result
    }

    #[allow(clippy::type_complexity)]
    fn step<M, C, R>(
        &mut self,
        frame: Frame<M, C, R>,
    ) -> Result<(Option<Frame<M, C, R>>, Option<HandshakeOutcome>), HandshakeError> {
        match (&self.state, frame) {
            (State::AwaitHello, Frame::Hello(peer)) => {
                self.check_hello(&peer)?;
                let mac = auth_mac(&self.token, &peer.nonce, &self.local.host);
                self.state = State::AwaitAuth {
                    peer_host: peer.host,
                    peer_incarnation: peer.incarnation,
                };
                Ok((Some(Frame::Auth(Auth { mac })), None))
            }
            (State::AwaitHello, Frame::Auth(_)) => {
                Err(HandshakeError::Unexpected("Auth before the peer's Hello"))
            }
            (State::AwaitAuth { .. }, Frame::Hello(_)) => {
                Err(HandshakeError::Unexpected("a second Hello"))
            }
            (
                State::AwaitAuth {
                    peer_host,
                    peer_incarnation,
                },
                Frame::Auth(auth),
            ) => {
                let outcome = HandshakeOutcome {
                    peer_host: peer_host.clone(),
                    peer_incarnation: *peer_incarnation,
                };
                auth_hmac(&self.token, &self.local.nonce, &outcome.peer_host)
                    .verify_slice(&auth.mac)
                    .map_err(|_| HandshakeError::BadAuth {
                        host: outcome.peer_host.clone(),
                    })?;
                self.state = State::Done;
                Ok((None, Some(outcome)))
            }
            (State::Done, _) => Err(HandshakeError::Unexpected(
                "frame fed to a finished handshake",
            )),
            (State::Failed, _) => Err(HandshakeError::Unexpected(
                "frame fed to a failed handshake",
            )),
            (_, other) => Err(HandshakeError::Unexpected(match other {
                Frame::Heartbeat(_) => "Heartbeat during handshake",
                Frame::Envelopes(_) => "Envelopes during handshake",
                Frame::Start { .. } => "Start during handshake",
                Frame::ControlForward { .. } => "ControlForward during handshake",
                Frame::ControlReply { .. } => "ControlReply during handshake",
                Frame::Bye { .. } => "Bye during handshake",
                Frame::Hello(_) | Frame::Auth(_) => "handshake frame out of order",
            })),
        }
    }

    fn check_hello(&self, peer: &Hello) -> Result<(), HandshakeError> {
        if peer.protocol_version != PROTOCOL_VERSION {
            return Err(HandshakeError::Version {
                found: peer.protocol_version,
                expected: PROTOCOL_VERSION,
            });
        }
        if peer.config_digest != self.local.config_digest {
            return Err(HandshakeError::ConfigMismatch {
                host: peer.host.clone(),
            });
        }
        if let Some(expected) = &self.expected_peer {
            if &peer.host != expected {
                return Err(HandshakeError::UnexpectedHost {
                    found: peer.host.clone(),
                    expected: expected.clone(),
                });
            }
        }
        if peer.host == self.local.host {
            return Err(HandshakeError::Unexpected("peer claims our own host name"));
        }
        if peer.nonce == self.local.nonce {
            return Err(HandshakeError::Unexpected("peer echoed our nonce"));
        }
        Ok(())
    }
}
