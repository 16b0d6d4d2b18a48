//! What LYREO actors say to each other.
//!
//! Control messages ([`LyreoMsg`]) travel as JSON in `Msg::Bytes`, direct
//! (no link) unless a file routes them; they are small. A prompt upload is
//! not one of them: it is a declared-size `Msg::Probe` whose `seq` is the
//! request id and whose `size` is `⌈l_in·β/8⌉` bytes, so a link charges it
//! like the real upload and chaos can delay, drop or kill it.

use edgemu_codec::ids::ActorId;
use edgemu_codec::wire::{Msg, Probe};
use edgemu_policies::lyreo::{ServerCapability, SlotLoad};
use serde::{Deserialize, Serialize};

/// One request as the scheduler tells a server to expect it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Expected {
    pub id: u64,
    pub user: ActorId,
    pub input_len: u32,
    pub output_len: u32,
    /// Transmission time at the Shannon rate, ns.
    pub upload_ns: u64,
}

/// A server's end-of-slot state: the slot and its load (flattened, so the
/// JSON is one flat object), and what a real server measured of its own
/// speed (`None` from a modeled server: the scheduler knows its class).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlotReport {
    pub slot: u64,
    #[serde(flatten)]
    pub load: SlotLoad,
    #[serde(default)]
    pub capability: Option<ServerCapability>,
}

/// How a request ended, as its user records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Served,
    /// Could never fit in the server's KV (counted, never dropped silently).
    Rejected,
    /// Lost to a fault: the server was killed while holding it, or was
    /// down when it was assigned (the answer's `reason` says which).
    Failed,
}

/// The server's answer: the request's latency parts, ns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub id: u64,
    pub outcome: Outcome,
    /// From the start of the upload (the assignment reaching the user) to
    /// its arrival at the server.
    pub upload_ns: u64,
    pub wait_ns: u64,
    pub prefill_ns: u64,
    pub decode_ns: u64,
    /// Run time at which the last token was produced (failed: when it
    /// was lost).
    pub finished_ns: u64,
    /// Why a request failed (`"server killed"`, `"server down"`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LyreoMsg {
    /// User → scheduler at the start of a slot.
    Request {
        id: u64,
        slot: u64,
        input_len: u32,
        output_len: u32,
        /// Position (m) and transmit power (W) when the request was issued.
        x_m: f64,
        y_m: f64,
        power_w: f64,
    },
    /// Scheduler → user: where to upload, and how long the upload takes at
    /// the Shannon rate of the shared cell.
    Assign {
        id: u64,
        slot: u64,
        server: ActorId,
        rate_bps: f64,
        upload_ns: u64,
        /// The policy that decided, and its version: the SHA-256 hash of
        /// name and weights that `policy.get` reports (changes with a swap).
        policy: String,
        policy_version: String,
    },
    /// Scheduler → server: the requests assigned to it this slot (their
    /// uploads are prefilled together once all have arrived).
    Expect { slot: u64, requests: Vec<Expected> },
    /// Server → scheduler at the end of each slot.
    Report(SlotReport),
    /// Server → user when a request finished (or was rejected).
    Answer(Answer),
}

impl LyreoMsg {
    pub fn to_msg(&self) -> Msg {
        // Serializing plain data to JSON cannot fail (no maps with non-string keys).
        Msg::Bytes(serde_json::to_vec(self).unwrap_or_default())
    }

    /// `None` for a payload that is not a LYREO message (counted by callers).
    pub fn from_msg(msg: &Msg) -> Option<LyreoMsg> {
        match msg {
            Msg::Bytes(b) => serde_json::from_slice(b).ok(),
            _ => None,
        }
    }
}

/// Bits uploaded per prompt token (`β`), from the radio model.
pub use edgemu_serving::radio::BITS_PER_TOKEN;

/// The declared-size upload packet of request `id` with `input_len` tokens.
pub fn upload_packet(id: u64, input_len: u32) -> Msg {
    let bits = f64::from(input_len) * BITS_PER_TOKEN;
    Msg::Probe(Probe {
        seq: id,
        size: ((bits / 8.0).ceil() as u32).max(1),
        pad: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_upload_size() {
        let m = LyreoMsg::Assign {
            id: 7,
            slot: 2,
            server: ActorId(3),
            rate_bps: 1.5e7,
            upload_ns: 12_345,
            policy: "least-loaded".into(),
            policy_version: "ab12".into(),
        };
        assert_eq!(LyreoMsg::from_msg(&m.to_msg()), Some(m));
        assert_eq!(LyreoMsg::from_msg(&Msg::Bytes(b"nope".to_vec())), None);
        // 70 tokens × 16 bits = 1120 bits = 140 bytes.
        match upload_packet(1, 70) {
            Msg::Probe(p) => assert_eq!((p.seq, p.size), (1, 140)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_slot_report_is_one_flat_json_object() {
        let r = LyreoMsg::Report(SlotReport {
            slot: 4,
            load: SlotLoad {
                eta: 0.25,
                peak_bytes: 9,
                high_kv: true,
                occupancy_bytes: 8,
                reserved_bytes: 7,
                waiting_kv_bytes: 6,
                backlog: 5,
                backlog_s: 1.25,
            },
            capability: None,
        });
        let Msg::Bytes(bytes) = r.to_msg() else {
            panic!("not bytes")
        };
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let fields = v.as_object().and_then(|o| o.values().next()).unwrap();
        assert_eq!(fields["slot"], 4);
        assert_eq!(fields["eta"], 0.25);
        assert_eq!(fields["backlog"], 5);
        assert!(fields.get("load").is_none(), "{v}");
        assert_eq!(LyreoMsg::from_msg(&r.to_msg()), Some(r));
    }
}
