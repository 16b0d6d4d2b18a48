//! The control protocol's types in a binary format, as hosts forward
//! commands and replies to each other over the mesh (bincode).
//!
//! The types in [`crate::command`] are shaped for JSON: a command is tagged
//! by its `cmd` key, a `link.set` loss table is free-form JSON, and a reply
//! leaves empty optional fields out. bincode is positional and not
//! self-describing, so it can read none of those back. The same types
//! therefore carry a second, binary form — chosen by the serializer's
//! [`is_human_readable`](serde::Serializer::is_human_readable), or by a
//! field's `#[serde(with)]` — so one typed value crosses both edges and no
//! JSON crosses the mesh:
//!
//! - [`command`]: a [`Command`](crate::command::Command) tagged by variant (use as
//!   `#[serde(with = "edgemu_config::command_wire::command")]`);
//! - [`loss_table`]: a loss table as a list of scalar keys;
//! - `Serialize` of [`AppliedTarget`], [`PolicyReply`] and [`HostStatus`]:
//!   every field in binary formats, the empty optional ones left out of JSON.
//!
//! Decoding the binary forms never recurses on its input: nothing a peer
//! sends can nest deeper than these types do.

use crate::command::{AppliedTarget, HostStatus, PolicyReply};
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

/// [`Command`](crate::command::Command) in a binary format: externally
/// tagged by variant index, every field present. A variant added to
/// `Command` without its twin here does not compile.
pub mod command {
    use crate::command::{
        ActorTarget, Command, HostPair, LinkFlap, LinkSet, LinkTarget, NoKeys, PolicySwap,
        PolicyTarget, Subscribe,
    };
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(remote = "Command")]
    enum Binary {
        Status(NoKeys),
        Metrics(NoKeys),
        MetricsSubscribe(Subscribe),
        LinkKill(LinkTarget),
        LinkRestore(LinkTarget),
        LinkSet(LinkSet),
        LinkFlap(LinkFlap),
        HostPartition(HostPair),
        HostHeal(HostPair),
        PolicyGet(PolicyTarget),
        PolicySwap(PolicySwap),
        PolicyRollback(PolicyTarget),
        ActorKill(ActorTarget),
        ActorRestart(ActorTarget),
        RunStop(NoKeys),
    }

    pub fn serialize<S: Serializer>(command: &Command, s: S) -> Result<S::Ok, S::Error> {
        Binary::serialize(command, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Command, D::Error> {
        Binary::deserialize(d)
    }
}

/// A `link.set` loss table (`{"model": "ge", "eps_g": 0.001, …}`): the JSON
/// object itself in JSON, a list of `(key, scalar)` pairs in binary formats.
/// A loss table holds numbers and strings (the resolver refuses anything
/// else before a command is forwarded); a nested array or object does not
/// encode.
pub mod loss_table {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::{Map, Number, Value};

    #[derive(Serialize, Deserialize)]
    enum Scalar {
        Null,
        Bool(bool),
        Unsigned(u64),
        Signed(i64),
        Float(f64),
        Text(String),
    }

    fn scalar<E: serde::ser::Error>(v: &Value) -> Result<Scalar, E> {
        Ok(match v {
            Value::Null => Scalar::Null,
            Value::Bool(b) => Scalar::Bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => Scalar::Unsigned(u),
                (None, Some(i), _) => Scalar::Signed(i),
                (None, None, Some(f)) => Scalar::Float(f),
                (None, None, None) => return Err(E::custom("a number out of range")),
            },
            Value::String(s) => Scalar::Text(s.clone()),
            Value::Array(_) | Value::Object(_) => {
                return Err(E::custom(
                    "a loss table holds numbers and strings, not tables",
                ))
            }
        })
    }

    fn value(s: Scalar) -> Value {
        match s {
            Scalar::Null => Value::Null,
            Scalar::Bool(b) => Value::Bool(b),
            Scalar::Unsigned(u) => Value::Number(u.into()),
            Scalar::Signed(i) => Value::Number(i.into()),
            // A non-finite float has no JSON form: it reads as `null`,
            // which the resolver refuses as a probability.
            Scalar::Float(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
            Scalar::Text(s) => Value::String(s),
        }
    }

    pub fn serialize<S: Serializer>(
        t: &Option<Map<String, Value>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            return t.serialize(s);
        }
        let pairs = match t {
            None => None,
            Some(m) => Some(
                m.iter()
                    .map(|(k, v)| Ok((k.as_str(), scalar(v)?)))
                    .collect::<Result<Vec<_>, S::Error>>()?,
            ),
        };
        pairs.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Map<String, Value>>, D::Error> {
        if d.is_human_readable() {
            return Option::<Map<String, Value>>::deserialize(d);
        }
        let pairs = Option::<Vec<(String, Scalar)>>::deserialize(d)?;
        Ok(pairs.map(|p| p.into_iter().map(|(k, v)| (k, value(v))).collect()))
    }
}

/// Writes the optional field `key`: always in a binary format (its fields
/// are positional), in a text one only when it holds something.
fn optional_field<S: SerializeStruct, T: Serialize + ?Sized>(
    st: &mut S,
    text: bool,
    key: &'static str,
    value: &T,
    empty: bool,
) -> Result<(), S::Error> {
    if text && empty {
        st.skip_field(key)
    } else {
        st.serialize_field(key, value)
    }
}

impl Serialize for AppliedTarget {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let text = s.is_human_readable();
        let mut st = s.serialize_struct("AppliedTarget", 5)?;
        st.serialize_field("host", &self.host)?;
        st.serialize_field("target", &self.target)?;
        st.serialize_field("effective_ns", &self.effective_ns)?;
        optional_field(&mut st, text, "detail", &self.detail, self.detail.is_none())?;
        optional_field(&mut st, text, "error", &self.error, self.error.is_none())?;
        st.end()
    }
}

impl Serialize for PolicyReply {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let text = s.is_human_readable();
        let mut st = s.serialize_struct("PolicyReply", 8)?;
        st.serialize_field("host", &self.host)?;
        st.serialize_field("actor", &self.actor)?;
        st.serialize_field("problem", &self.problem)?;
        st.serialize_field("policy", &self.policy)?;
        st.serialize_field("version", &self.version)?;
        st.serialize_field("loaded_at_ns", &self.loaded_at_ns)?;
        st.serialize_field("requested_by", &self.requested_by)?;
        let previous = &self.previous;
        optional_field(&mut st, text, "previous", previous, previous.is_none())?;
        st.end()
    }
}

impl Serialize for HostStatus {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let text = s.is_human_readable();
        let mut st = s.serialize_struct("HostStatus", 9)?;
        st.serialize_field("host", &self.host)?;
        st.serialize_field("t_ns", &self.t_ns)?;
        st.serialize_field("links", &self.links)?;
        st.serialize_field("router", &self.router)?;
        st.serialize_field("mesh", &self.mesh)?;
        st.serialize_field("control", &self.control)?;
        let caches = &self.kv_caches;
        optional_field(&mut st, text, "kv_caches", caches, caches.is_empty())?;
        optional_field(&mut st, text, "load", &self.load, self.load.is_none())?;
        optional_field(&mut st, text, "error", &self.error, self.error.is_none())?;
        st.end()
    }
}

#[cfg(test)]
mod tests {
    //! The JSON forms (the control socket's). The binary forms are tested
    //! through the real frame codec in `edgemu_protocol`.
    use crate::command::*;
    use serde_json::json;

    #[test]
    fn json_replies_leave_empty_optional_fields_out() {
        let mut t = AppliedTarget {
            host: "alpha".into(),
            target: "link wan ab".into(),
            effective_ns: 5,
            detail: None,
            error: None,
        };
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(
            v,
            json!({"host": "alpha", "target": "link wan ab", "effective_ns": 5})
        );
        t.error = Some("down".into());
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["error"], "down");
        assert!(v.get("detail").is_none(), "{v}");
        assert_eq!(serde_json::from_value::<AppliedTarget>(v).unwrap(), t);

        let p = PolicyReply {
            host: "a".into(),
            actor: "s".into(),
            problem: "repair".into(),
            policy: "no-repair".into(),
            version: "ab".into(),
            loaded_at_ns: 1,
            requested_by: "config".into(),
            previous: None,
        };
        let v = serde_json::to_value(&p).unwrap();
        assert!(v.get("previous").is_none(), "{v}");
        assert_eq!(v.as_object().map(|o| o.len()), Some(7));

        let h = HostStatus {
            host: "a".into(),
            t_ns: 0,
            links: Vec::new(),
            router: RouterStatus::default(),
            mesh: Default::default(),
            control: ControlStatus::default(),
            kv_caches: Default::default(),
            load: None,
            error: None,
        };
        let v = serde_json::to_value(&h).unwrap();
        assert!(
            v.get("kv_caches").is_none() && v.get("error").is_none(),
            "{v}"
        );
        assert_eq!(serde_json::from_value::<HostStatus>(v).unwrap(), h);
    }

    #[test]
    fn a_request_leaves_absent_keys_out_and_parses_back() {
        let c = Command::LinkKill(LinkTarget {
            link: "wan".into(),
            dir: None,
            for_: None,
        });
        assert_eq!(c.to_request(), json!({"cmd": "link.kill", "link": "wan"}));
        let set = Command::LinkSet(LinkSet {
            link: "wan".into(),
            dir: Some(Dir::Ba),
            for_: Some("3s".into()),
            rate: None,
            rate_trace: None,
            rate_steps: None,
            delay: Some("10ms".into()),
            rtt: None,
            jitter: None,
            queue: None,
            loss: json!({"model": "ge", "eps_g": 0.001, "eps_b": 0.5, "p_gb": 0, "p_bg": 1})
                .as_object()
                .cloned(),
        });
        let req = set.to_request();
        assert_eq!(req["loss"]["eps_b"], 0.5);
        assert!(req.get("rate").is_none(), "{req}");
        for c in [c, set] {
            assert_eq!(Command::from_request(&c.to_request()).unwrap(), c);
        }
    }
}
