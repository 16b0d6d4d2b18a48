//! What LYREO actors (users, edge servers, the request scheduler) say to
//! each other: [`LyreoMsg`]. These travel directly over the mesh (no link);
//! they are small. A prompt upload is not one of them: it is a
//! declared-size [`crate::Probe`] whose `seq` is the request id and whose
//! `size` is `⌈l_in·β/8⌉` bytes, so a link charges it like the real upload
//! and chaos can delay, drop or kill it.

use edgemu_codec::ids::ActorId;
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

/// A server's end-of-slot state: the slot, its load, and its capability
/// (KV capacity and speed: its class's for a modeled server, what a real
/// server measured of itself), so the scheduler plans with what the server
/// can do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlotReport {
    pub slot: u64,
    pub load: SlotLoad,
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
    /// Why a request failed (`"server killed"`, `"server down"`); empty
    /// otherwise.
    pub reason: String,
}

impl Answer {
    /// Request `id` lost to a fault at `at_ns`, with why.
    pub fn failed(id: u64, at_ns: u64, reason: &str) -> Answer {
        Answer {
            id,
            outcome: Outcome::Failed,
            upload_ns: 0,
            wait_ns: 0,
            prefill_ns: 0,
            decode_ns: 0,
            finished_ns: at_ns,
            reason: reason.into(),
        }
    }
}

/// Tokens a server produced for a streamed request (a gateway's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenChunk {
    pub id: u64,
    /// Index of the first token in the request's output.
    pub first: u32,
    pub tokens: Vec<u32>,
    /// The backend's tokens are placeholders (a modeled server): only
    /// their count and timing are real.
    pub placeholder: bool,
    /// The tokens' text, one piece per token, when the server has text
    /// rather than token ids (an external serving stack); empty otherwise.
    pub pieces: Vec<String>,
    /// Set on the final chunk, which repeats every token from index 0 and
    /// carries the request's answer (a chunk lost on the way leaves a gap
    /// that this one fills).
    pub answer: Option<Answer>,
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
    /// Gateway → server when the request is assigned: stream its tokens
    /// back as they are produced ([`LyreoMsg::Tokens`]), and, when the
    /// gateway tokenized the prompt, the prompt's token ids (a real
    /// backend prefills them; empty: only the length is known), and the
    /// prompt as text (chat messages rendered; what an external serving
    /// stack is sent; empty when the client sent token ids).
    Stream {
        id: u64,
        prompt: Vec<u32>,
        text: String,
    },
    /// Server → gateway: the tokens of one iteration of a streamed request,
    /// over the link joining them when there is one; the last chunk
    /// carries the answer.
    Tokens(TokenChunk),
}

impl From<LyreoMsg> for crate::Msg {
    fn from(m: LyreoMsg) -> Self {
        crate::Msg::Lyreo(Box::new(m))
    }
}

impl LyreoMsg {
    /// The LYREO message a payload carries; `None` for any other kind
    /// (counted by callers).
    pub fn from_msg(msg: crate::Msg) -> Option<LyreoMsg> {
        match msg {
            crate::Msg::Lyreo(m) => Some(*m),
            _ => None,
        }
    }
}
