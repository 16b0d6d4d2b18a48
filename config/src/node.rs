//! The parsed TOML document with the span of every key and value, so errors
//! found after parsing still point at the right line and column.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt;
use std::ops::Range;
use toml::Spanned;

/// Name toml uses for the single key of a datetime's map form.
const DATETIME_KEY: &str = "$__toml_private_datetime";

#[derive(Debug)]
pub(crate) enum Node {
    String(String),
    Integer(i64),
    Float(f64),
    Boolean(bool),
    Datetime(String),
    Array(Vec<Spanned<Node>>),
    /// Keys in file order, with their spans.
    Table(Vec<(Spanned<String>, Spanned<Node>)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct NodeVisitor;
        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a TOML value")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Boolean(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Integer(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
                i64::try_from(v)
                    .map(Node::Integer)
                    .map_err(|_| E::custom("integer out of range"))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
                Ok(Node::Float(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
                Ok(Node::String(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Node, E> {
                Ok(Node::String(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Node::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut entries: Vec<(Spanned<String>, Spanned<Node>)> = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    if key.get_ref() == DATETIME_KEY {
                        let value: String = map.next_value()?;
                        return Ok(Node::Datetime(value));
                    }
                    let value = map.next_value()?;
                    entries.push((key, value));
                }
                Ok(Node::Table(entries))
            }
        }
        d.deserialize_any(NodeVisitor)
    }
}

impl Node {
    pub fn to_json(&self) -> Value {
        match self {
            Node::String(s) | Node::Datetime(s) => Value::String(s.clone()),
            Node::Integer(i) => Value::from(*i),
            // Non-finite floats have no JSON form; they are never valid here.
            Node::Float(f) => serde_json::Number::from_f64(*f)
                .map(Value::Number)
                .unwrap_or(Value::Null),
            Node::Boolean(b) => Value::Bool(*b),
            Node::Array(items) => {
                Value::Array(items.iter().map(|i| i.get_ref().to_json()).collect())
            }
            Node::Table(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.get_ref().clone(), v.get_ref().to_json()))
                    .collect(),
            ),
        }
    }

    /// The entry for `key`, if this is a table that has it.
    pub fn entry(&self, key: &str) -> Option<(&Spanned<String>, &Spanned<Node>)> {
        match self {
            Node::Table(entries) => entries
                .iter()
                .find(|(k, _)| k.get_ref() == key)
                .map(|(k, v)| (k, v)),
            _ => None,
        }
    }
}

/// Where in `table` an error about the dotted `field` points: the key itself
/// when `at_key`, else its value; the closest enclosing table when the key
/// is not there.
pub(crate) fn locate(table: &Spanned<Node>, field: Option<&str>, at_key: bool) -> Range<usize> {
    let mut here = table;
    let Some(field) = field else {
        return here.span();
    };
    let parts: Vec<&str> = field.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let next = match here.get_ref() {
            Node::Table(_) => here.get_ref().entry(part),
            _ => None,
        };
        match next {
            Some((k, v)) => {
                if last && at_key {
                    return k.span();
                }
                here = v;
            }
            None => return here.span(),
        }
    }
    here.span()
}

/// 1-based line and column (in characters) of byte `offset` of `text`.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    (line, before[line_start..].chars().count() + 1)
}
