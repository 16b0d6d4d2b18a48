//! The numeric view of a decision that a policy outside the process gets,
//! and the JSON wire form it travels in.
//!
//! One view serves both ways a researcher plugs in a policy of their own:
//! the Gymnasium environments of the `edgemu` Python package hand these
//! arrays to a learner, and a live run's scheduler or agent sends the same
//! arrays to an external policy process (inverted control: observation out,
//! action back). A policy trained on the environment therefore sees exactly
//! the inputs it was trained on when it is deployed.
//!
//! **LYREO** ([`LyreoArrays`]): per (request, server) pair the twelve
//! normalized features of [`SlotObservation::pair_features`]; per request its
//! input and output lengths in tokens; per server [`SERVER_FEATURES`]
//! normalized figures (the same scales as the pair features); and the
//! Lyapunov queues `Z_s`. The action is one server index per request.
//!
//! **Repair** ([`RepairArrays`]): the fifteen transport features of
//! [`RepairObservation::features`] and the hard action mask; the action is
//! one index of [`RepairAction`] (0 source burst, 1/2/3 repair burst of
//! 1/4/16 packets). A masked action is refused like a malformed one.
//!
//! **Wire.** The policy process serves a websocket; edgemu connects as the
//! client and sends one [`DecisionRequest`] per decision as a JSON text
//! frame; the process answers one [`DecisionReply`] with the same `id`,
//! carrying an `action` or an `error`.

use serde::{Deserialize, Serialize};

use crate::lyreo::{SlotObservation, PAIR_FEATURES};
use crate::repair::{ActionMask, RepairAction, RepairObservation, N_ACTIONS, N_FEATURES};

/// Version of the wire protocol (sent in every request).
pub const EXTERNAL_PROTOCOL: u32 = 1;

/// Length of one server's row in [`LyreoArrays::server_features`].
pub const SERVER_FEATURES: usize = 8;

/// A LYREO slot observation as flat arrays (row-major).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LyreoArrays {
    /// Requests of the slot (R).
    pub requests: usize,
    /// Servers (S).
    pub servers: usize,
    /// `R × S × PAIR_FEATURES`: [`SlotObservation::pair_features`] of each pair.
    pub pairs: Vec<f32>,
    /// `R × 2`: input and output length of each request, tokens.
    pub lengths: Vec<f32>,
    /// `S × SERVER_FEATURES`: capacity / 24 GB, prefill rate / 8000 tok/s,
    /// empty-KV decode step / 20 ms, occupancy, reserved and waiting KV as
    /// shares of the capacity, `η`, and the backlog in slots.
    pub server_features: Vec<f32>,
    /// `S`: the virtual queues `Z_s`.
    pub queues: Vec<f32>,
}

impl LyreoArrays {
    /// The arrays of `obs`.
    pub fn from_observation(obs: &SlotObservation) -> Self {
        let mut a = LyreoArrays::default();
        a.fill_from(obs);
        a
    }

    /// Rewrites `self` from `obs`, reusing its buffers.
    pub fn fill_from(&mut self, obs: &SlotObservation) {
        let (r_n, s_n) = (obs.requests.len(), obs.servers.len());
        self.requests = r_n;
        self.servers = s_n;
        self.pairs.clear();
        self.pairs.reserve(r_n * s_n * PAIR_FEATURES);
        let mut row = [0f32; PAIR_FEATURES];
        for r in 0..r_n {
            for s in 0..s_n {
                obs.pair_features(r, s, &mut row);
                self.pairs.extend_from_slice(&row);
            }
        }
        self.lengths.clear();
        for q in &obs.requests {
            self.lengths.push(q.input_len as f32);
            self.lengths.push(q.output_len as f32);
        }
        self.server_features.clear();
        for v in &obs.servers {
            let cap = v.capacity_bytes.max(1) as f64;
            let slot_s = if obs.slot_s > 0.0 { obs.slot_s } else { 1.0 };
            self.server_features.extend_from_slice(&[
                (cap / 24e9) as f32,
                (v.prefill_tok_s / 8000.0) as f32,
                (v.decode_step_empty_s / 0.02) as f32,
                (v.load.occupancy_bytes as f64 / cap) as f32,
                (v.load.reserved_bytes as f64 / cap) as f32,
                (v.load.waiting_kv_bytes as f64 / cap) as f32,
                v.load.eta as f32,
                (v.load.backlog_s / slot_s) as f32,
            ]);
        }
        self.queues.clear();
        self.queues
            .extend((0..s_n).map(|s| obs.z.get(s).copied().unwrap_or(0.0) as f32));
    }
}

/// A repair decision's inputs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RepairArrays {
    /// [`RepairObservation::features`], each in [0, 1].
    pub features: [f32; N_FEATURES],
    /// Feasible actions, indexed like [`RepairAction::index`].
    pub mask: [bool; N_ACTIONS],
}

impl RepairArrays {
    pub fn new(obs: &RepairObservation, mask: ActionMask) -> Self {
        RepairArrays {
            features: obs.features,
            mask: mask.0,
        }
    }
}

/// Which decision a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Problem {
    /// A LYREO slot: one server per request.
    Lyreo,
    /// A PriorityFEC repair epoch: one action.
    Repair,
}

impl Problem {
    pub fn name(&self) -> &'static str {
        match self {
            Problem::Lyreo => "lyreo",
            Problem::Repair => "repair",
        }
    }
}

/// The observation a request carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WireObs {
    Lyreo(LyreoArrays),
    Repair(RepairArrays),
}

/// edgemu → policy process: one decision to make.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionRequest {
    /// Protocol version ([`EXTERNAL_PROTOCOL`]).
    pub protocol: u32,
    /// Matches the reply to the request (unique per connection).
    pub id: u64,
    pub problem: Problem,
    pub obs: WireObs,
}

impl DecisionRequest {
    pub fn new(id: u64, obs: WireObs) -> Self {
        let problem = match obs {
            WireObs::Lyreo(_) => Problem::Lyreo,
            WireObs::Repair(_) => Problem::Repair,
        };
        DecisionRequest {
            protocol: EXTERNAL_PROTOCOL,
            id,
            problem,
            obs,
        }
    }
}

/// Policy process → edgemu: the action for request `id`, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionReply {
    pub id: u64,
    #[serde(default)]
    pub action: Option<serde_json::Value>,
    #[serde(default)]
    pub error: Option<String>,
}

/// What is wrong with an outside policy's answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExternalError {
    #[error("the reply is not a decision reply: {0}")]
    Malformed(String),
    #[error("the policy answered an error: {0}")]
    PolicyError(String),
    #[error("the reply carries no action")]
    NoAction,
    #[error("the action must be a list of {expected} server indices, got {got}")]
    WrongShape { expected: usize, got: String },
    #[error("action {index}: server {server} does not exist (servers: {servers})")]
    NoSuchServer {
        index: usize,
        server: String,
        servers: usize,
    },
    #[error("repair action {0} is not one of 0 (source), 1, 2, 3 (repair 1, 4, 16)")]
    NoSuchAction(String),
    #[error("repair action {0} is masked (infeasible now)")]
    Masked(usize),
}

/// Parses a reply frame's text.
pub fn parse_reply(text: &str) -> Result<DecisionReply, ExternalError> {
    serde_json::from_str(text).map_err(|e| ExternalError::Malformed(e.to_string()))
}

/// The action of `reply`, or the error it carries.
pub fn reply_action(reply: &DecisionReply) -> Result<&serde_json::Value, ExternalError> {
    if let Some(e) = &reply.error {
        return Err(ExternalError::PolicyError(e.chars().take(200).collect()));
    }
    reply.action.as_ref().ok_or(ExternalError::NoAction)
}

fn short(v: &serde_json::Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(60).collect::<String>())
    } else {
        s
    }
}

/// One server index per request: a JSON list of `requests` non-negative
/// integers below `servers` (integral floats, as numpy may send, count).
pub fn parse_lyreo_action(
    v: &serde_json::Value,
    requests: usize,
    servers: usize,
) -> Result<Vec<usize>, ExternalError> {
    let list = v
        .as_array()
        .filter(|l| l.len() == requests)
        .ok_or_else(|| ExternalError::WrongShape {
            expected: requests,
            got: short(v),
        })?;
    list.iter()
        .enumerate()
        .map(|(index, x)| {
            as_index(x)
                .filter(|&s| s < servers)
                .ok_or_else(|| ExternalError::NoSuchServer {
                    index,
                    server: short(x),
                    servers,
                })
        })
        .collect()
}

/// One repair action: an integer 0..4 that `mask` allows.
pub fn parse_repair_action(
    v: &serde_json::Value,
    mask: ActionMask,
) -> Result<RepairAction, ExternalError> {
    let a = as_index(v)
        .and_then(RepairAction::from_index)
        .ok_or_else(|| ExternalError::NoSuchAction(short(v)))?;
    if mask.allows(a) {
        Ok(a)
    } else {
        Err(ExternalError::Masked(a.index()))
    }
}

/// A non-negative integer, given as an integer or an integral float.
fn as_index(x: &serde_json::Value) -> Option<usize> {
    if let Some(u) = x.as_u64() {
        return usize::try_from(u).ok();
    }
    let f = x.as_f64()?;
    (f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f < 1e15).then_some(f as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lyreo::{RequestObs, ServerObs, SlotLoad};
    use serde_json::json;

    fn obs() -> SlotObservation {
        let server = |cap: u64, occ: u64| ServerObs {
            capacity_bytes: cap,
            kv_bytes_per_token: 16_384,
            prefill_tok_s: 4000.0,
            decode_step_empty_s: 0.01,
            decode_step_full_s: 0.03,
            bandwidth_hz: 1e7,
            load: SlotLoad {
                eta: 0.25,
                occupancy_bytes: occ,
                backlog_s: 0.5,
                ..SlotLoad::default()
            },
        };
        SlotObservation {
            slot: 3,
            slot_s: 1.0,
            requests: (0..3)
                .map(|i| RequestObs {
                    id: i,
                    user: i as usize,
                    input_len: 10 + i as u32,
                    output_len: 100,
                    solo_rate_bps: vec![1e6, 2e6],
                })
                .collect(),
            servers: vec![server(10_000_000_000, 5_000_000_000), server(20_000, 0)],
            z: vec![0.5, 0.0],
            epsilon: 0.01,
            nu: 0.5,
        }
    }

    #[test]
    fn arrays_are_the_pair_features_row_major() {
        let o = obs();
        let a = LyreoArrays::from_observation(&o);
        assert_eq!((a.requests, a.servers), (3, 2));
        assert_eq!(a.pairs.len(), 3 * 2 * PAIR_FEATURES);
        let mut row = [0f32; PAIR_FEATURES];
        o.pair_features(2, 1, &mut row);
        let at = (2 * 2 + 1) * PAIR_FEATURES;
        assert_eq!(&a.pairs[at..at + PAIR_FEATURES], &row);
        assert_eq!(a.lengths, [10.0, 100.0, 11.0, 100.0, 12.0, 100.0]);
        assert_eq!(a.server_features.len(), 2 * SERVER_FEATURES);
        assert_eq!(a.server_features[3], 0.5, "occupancy share");
        assert_eq!(a.server_features[7], 0.5, "backlog in slots");
        assert_eq!(a.queues, [0.5, 0.0]);
        // Reuse gives the same arrays.
        let mut b = LyreoArrays::from_observation(&SlotObservation {
            requests: vec![],
            ..o.clone()
        });
        b.fill_from(&o);
        assert_eq!(a, b);
    }

    #[test]
    fn requests_round_trip_as_json() {
        let r = DecisionRequest::new(7, WireObs::Lyreo(LyreoArrays::from_observation(&obs())));
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("\"problem\":\"lyreo\""), "{text}");
        assert!(text.contains("\"obs\":{\"lyreo\":{"), "{text}");
        let back: DecisionRequest = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        let rep = DecisionRequest::new(
            8,
            WireObs::Repair(RepairArrays::new(
                &RepairObservation::default(),
                ActionMask([true, false, true, false]),
            )),
        );
        let text = serde_json::to_string(&rep).unwrap();
        assert!(text.contains("\"mask\":[true,false,true,false]"), "{text}");
    }

    #[test]
    fn lyreo_actions_are_checked() {
        assert_eq!(
            parse_lyreo_action(&json!([0, 1, 1.0]), 3, 2).unwrap(),
            [0, 1, 1]
        );
        for bad in [
            json!([0, 1]),
            json!([0, 1, 2]),
            json!([0, -1, 0]),
            json!([0, 0.5, 0]),
            json!("0,1,1"),
            json!(null),
            json!([0, 1, "1"]),
        ] {
            assert!(parse_lyreo_action(&bad, 3, 2).is_err(), "{bad}");
        }
    }

    #[test]
    fn repair_actions_are_checked_against_the_mask() {
        let mask = ActionMask([true, false, true, false]);
        assert_eq!(
            parse_repair_action(&json!(2), mask),
            Ok(RepairAction::Repair4)
        );
        assert_eq!(
            parse_repair_action(&json!(1), mask),
            Err(ExternalError::Masked(1))
        );
        for bad in [json!(4), json!(-1), json!([0]), json!("0"), json!(1.5)] {
            assert!(parse_repair_action(&bad, mask).is_err(), "{bad}");
        }
    }

    #[test]
    fn replies_parse_or_say_why_not() {
        let r = parse_reply(r#"{"id":3,"action":[1,0]}"#).unwrap();
        assert_eq!(r.id, 3);
        assert_eq!(reply_action(&r).unwrap(), &json!([1, 0]));
        let e = parse_reply(r#"{"id":4,"error":"boom"}"#).unwrap();
        assert!(matches!(
            reply_action(&e),
            Err(ExternalError::PolicyError(_))
        ));
        let none = parse_reply(r#"{"id":5}"#).unwrap();
        assert_eq!(reply_action(&none), Err(ExternalError::NoAction));
        assert!(parse_reply("not json").is_err());
        assert!(parse_reply(r#"{"action":1}"#).is_err(), "no id");
    }
}
