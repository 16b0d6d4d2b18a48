//! Replication: one `[[actors]]` or `[[links]]` entry stands for many.
//!
//! ```toml
//! [[actors]]
//! name = "user-{i}"          # {i} becomes 0, 1, …, count − 1
//! count = 1000
//! hosts = ["phones-{0..7}"]  # replica i on hosts[i mod 8]
//! kind = "user"
//! scheduler = "sched"
//!
//! [[actors]]
//! name = "sched"
//! host = "edge-0"
//! kind = "scheduler"
//! servers = ["edge-{0..49}"] # a range in a list: 50 names
//! ```
//!
//! - `count = N` (1 ≤ N ≤ [`MAX_COUNT`]) makes N copies of the entry; in
//!   every string of the copy (names, references, hosts) `{i}` is the copy's
//!   index. With N > 1 the name must hold `{i}`, so the copies' names differ.
//! - `hosts = [...]` (actors only, instead of `host`) spreads the copies
//!   round-robin: copy `i` runs on `hosts[i mod len]`.
//! - In any list of strings, an element with one `{a..b}` (integers, a ≤ b)
//!   stands for the b − a + 1 strings with each integer in its place, so a
//!   scheduler lists fifty servers as `["edge-{0..49}"]`.
//! - Every copy is then checked like a written entry; an error in one
//!   points at the template's line.
//!
//! Positions need nothing here: a server without `position` and every user
//! draw theirs from the run seed and the actor's id, so copies are spread
//! over the area and the same on every host.

use serde_json::Value;

use crate::error::ActionError;
use crate::fields::Obj;

/// Most copies one entry may make.
pub const MAX_COUNT: i64 = 100_000;

/// Most strings one `{a..b}` range may make.
pub const MAX_RANGE: i64 = 100_000;

/// One replicated entry as `edgemu check` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaGroup {
    /// `actor` or `link`.
    pub what: &'static str,
    /// The template's name (with `{i}`).
    pub template: String,
    pub count: usize,
    /// The first and last copy's names.
    pub first: String,
    pub last: String,
    /// Hosts and how many copies each runs (actors).
    pub hosts: Vec<(String, usize)>,
}

/// The copies of one entry (the entry itself, ranges expanded, without
/// `count`), and its group when it had a `count`.
pub(crate) fn expand(
    obj: &Obj,
    what: &'static str,
) -> Result<(Vec<Obj>, Option<ReplicaGroup>), ActionError> {
    let count = match obj.get("count") {
        None => None,
        Some(v) => Some(
            v.as_i64()
                .filter(|n| (1..=MAX_COUNT).contains(n))
                .ok_or_else(|| {
                    ActionError::invalid(
                        "count",
                        format!("expected an integer from 1 to {MAX_COUNT}, found {v}"),
                    )
                })? as usize,
        ),
    };
    let hosts = match obj.get("hosts") {
        None => None,
        Some(_) if what != "actor" => {
            return Err(ActionError::invalid(
                "hosts",
                "only actors run on hosts; a link runs where its sending actor does",
            ))
        }
        Some(_) if obj.contains_key("host") => {
            return Err(ActionError::invalid(
                "hosts",
                "give `host` (one host) or `hosts` (copies spread over them), not both",
            ))
        }
        Some(_) if count.is_none() => {
            return Err(ActionError::invalid(
                "hosts",
                "`hosts` spreads the copies of a replicated entry: add `count`",
            ))
        }
        Some(Value::Array(items)) => {
            let names = expand_list(items, "hosts")?;
            let names: Option<Vec<String>> = names
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect();
            match names {
                Some(n) if !n.is_empty() => Some(n),
                _ => {
                    return Err(ActionError::invalid(
                        "hosts",
                        "expected a non-empty list of host names",
                    ))
                }
            }
        }
        Some(v) => {
            return Err(ActionError::invalid(
                "hosts",
                format!("expected a list of host names, found {v}"),
            ))
        }
    };
    let Some(n) = count else {
        return Ok((vec![expand_value_lists(obj)?], None));
    };
    let name = obj.get("name").and_then(Value::as_str).unwrap_or("");
    if n > 1 && !name.contains("{i}") {
        return Err(ActionError::invalid(
            "count",
            format!(
                "`count = {n}` makes {n} copies of this entry, so its name must hold `{{i}}` \
                 (the copy's index), e.g. \"{name}-{{i}}\"{}",
                if what == "actor" {
                    "; an agent's number of handoffs is `handoffs`"
                } else {
                    ""
                }
            ),
        ));
    }
    let mut template = obj.clone();
    template.remove("count");
    template.remove("hosts");
    let mut copies = Vec::with_capacity(n);
    let mut per_host: Vec<(String, usize)> = hosts
        .as_ref()
        .map(|h| h.iter().map(|h| (h.clone(), 0)).collect())
        .unwrap_or_default();
    for i in 0..n {
        let mut copy = Obj::new();
        for (k, v) in &template {
            copy.insert(k.clone(), substitute(v, i));
        }
        if let Some(h) = &hosts {
            copy.insert("host".into(), Value::String(h[i % h.len()].clone()));
            per_host[i % h.len()].1 += 1;
        }
        copies.push(expand_value_lists(&copy)?);
    }
    if hosts.is_none() {
        if let Some(Value::String(h)) = copies[0].get("host") {
            per_host.push((h.clone(), n));
        }
    }
    let copy_name = |c: &Obj| {
        c.get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let group = ReplicaGroup {
        what,
        template: name.to_string(),
        count: n,
        first: copy_name(&copies[0]),
        last: copy_name(&copies[n - 1]),
        hosts: per_host,
    };
    Ok((copies, Some(group)))
}

/// `{i}` → `i` in every string of `v`.
fn substitute(v: &Value, i: usize) -> Value {
    match v {
        Value::String(s) if s.contains("{i}") => Value::String(s.replace("{i}", &i.to_string())),
        Value::Array(items) => Value::Array(items.iter().map(|x| substitute(x, i)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), substitute(x, i)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `obj` with the `{a..b}` ranges of its lists of strings expanded.
fn expand_value_lists(obj: &Obj) -> Result<Obj, ActionError> {
    let mut out = Obj::new();
    for (k, v) in obj {
        let v = match v {
            Value::Array(items) => Value::Array(expand_list(items, k)?),
            other => other.clone(),
        };
        out.insert(k.clone(), v);
    }
    Ok(out)
}

/// The elements of a list with each string's `{a..b}` range expanded.
fn expand_list(items: &[Value], key: &str) -> Result<Vec<Value>, ActionError> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match item.as_str().map(|s| range_of(s, key)).transpose()? {
            Some(Some((head, a, b, tail))) => {
                out.extend((a..=b).map(|k| Value::String(format!("{head}{k}{tail}"))))
            }
            _ => out.push(item.clone()),
        }
    }
    Ok(out)
}

/// A string's `{a..b}`: (before, a, b, after), or `None` without one.
fn range_of<'s>(
    s: &'s str,
    key: &str,
) -> Result<Option<(&'s str, i64, i64, &'s str)>, ActionError> {
    let Some(open) = s.find('{') else {
        return Ok(None);
    };
    let Some(close) = s[open..].find('}').map(|c| open + c) else {
        return Ok(None);
    };
    let inner = &s[open + 1..close];
    let Some((a, b)) = inner.split_once("..") else {
        return Ok(None);
    };
    let bad = || {
        ActionError::invalid(
            key,
            format!(
                "`{s}`: a range is {{a..b}} with integers a ≤ b and at most {MAX_RANGE} values"
            ),
        )
    };
    let (a, b) = match (a.trim().parse::<i64>(), b.trim().parse::<i64>()) {
        (Ok(a), Ok(b)) if a <= b && b - a < MAX_RANGE => (a, b),
        _ => return Err(bad()),
    };
    if s[close + 1..].contains("..") && s[close + 1..].contains('{') {
        return Err(ActionError::invalid(
            key,
            format!("`{s}`: one range per string"),
        ));
    }
    Ok(Some((&s[..open], a, b, &s[close + 1..])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Obj {
        match v {
            Value::Object(o) => o,
            _ => unreachable!(),
        }
    }

    #[test]
    fn copies_substitute_the_index_and_spread_over_hosts() {
        let t = obj(json!({"name": "u-{i}", "count": 5, "hosts": ["p{0..1}"],
            "kind": "user", "scheduler": "s", "extra": {"to": "x-{i}"}}));
        let (copies, group) = expand(&t, "actor").unwrap();
        assert_eq!(copies.len(), 5);
        assert_eq!(copies[3]["name"], "u-3");
        assert_eq!(copies[3]["host"], "p1");
        assert_eq!(copies[4]["host"], "p0");
        assert_eq!(copies[2]["extra"]["to"], "x-2");
        assert!(!copies[0].contains_key("count") && !copies[0].contains_key("hosts"));
        let g = group.unwrap();
        assert_eq!(
            (g.first.as_str(), g.last.as_str(), g.count),
            ("u-0", "u-4", 5)
        );
        assert_eq!(g.hosts, [("p0".to_string(), 3), ("p1".to_string(), 2)]);
    }

    #[test]
    fn ranges_in_lists_expand_everywhere() {
        let t = obj(json!({"name": "s", "servers": ["e-{0..2}", "x", "f{10..11}b"]}));
        let (copies, group) = expand(&t, "actor").unwrap();
        assert!(group.is_none());
        assert_eq!(
            copies[0]["servers"],
            json!(["e-0", "e-1", "e-2", "x", "f10b", "f11b"])
        );
        // Braces that are not a range stay as written.
        let t = obj(json!({"name": "s", "servers": ["{x}", "a{1..}"]}));
        assert!(expand(&t, "actor").is_err(), "an open range is an error");
        let t = obj(json!({"name": "s", "servers": ["{x}"]}));
        assert_eq!(expand(&t, "actor").unwrap().0[0]["servers"], json!(["{x}"]));
    }

    #[test]
    fn bad_replication_is_a_located_error() {
        for (v, field) in [
            (json!({"name": "u", "count": 3}), "count"),
            (json!({"name": "u-{i}", "count": 0}), "count"),
            (json!({"name": "u-{i}", "count": "3"}), "count"),
            (
                json!({"name": "u-{i}", "count": 3, "host": "a", "hosts": ["b"]}),
                "hosts",
            ),
            (json!({"name": "u-{i}", "hosts": ["b"]}), "hosts"),
            (json!({"name": "u-{i}", "count": 2, "hosts": []}), "hosts"),
            (json!({"name": "u-{i}", "count": 2, "hosts": "b"}), "hosts"),
            (json!({"name": "s", "servers": ["e-{5..1}"]}), "servers"),
        ] {
            let e = expand(&obj(v.clone()), "actor").unwrap_err();
            assert_eq!(e.field(), Some(field), "{v}: {e}");
        }
        let e = expand(
            &obj(json!({"name": "l-{i}", "count": 2, "hosts": ["b"]})),
            "link",
        );
        assert_eq!(e.unwrap_err().field(), Some("hosts"));
        // One copy needs no {i}.
        assert_eq!(
            expand(&obj(json!({"name": "u", "count": 1})), "actor")
                .unwrap()
                .0
                .len(),
            1
        );
    }
}
