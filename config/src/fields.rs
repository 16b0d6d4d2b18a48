//! Reading typed values out of a JSON object (a control command's fields, or
//! a TOML table converted to JSON), with errors that name the key.

use crate::error::ActionError;
use crate::units::{parse_bytes, parse_duration_ns, parse_rate};
use serde_json::{Map, Value};

pub(crate) type Obj = Map<String, Value>;

/// Collects errors so one pass reports as many as it can.
#[derive(Default)]
pub(crate) struct Errs(pub Vec<ActionError>);

impl Errs {
    pub fn ok<T>(&mut self, r: Result<T, ActionError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.0.push(e);
                None
            }
        }
    }
    pub fn push(&mut self, e: ActionError) {
        self.0.push(e);
    }
}

/// Every key of `obj` must be in `valid`.
pub(crate) fn check_keys(obj: &Obj, valid: &[&'static str], context: &str, errs: &mut Errs) {
    for key in obj.keys() {
        if !valid.contains(&key.as_str()) {
            errs.push(ActionError::UnknownField {
                field: key.clone(),
                context: context.to_string(),
                valid: valid.iter().map(|s| s.to_string()).collect(),
            });
        }
    }
}

/// `a string "x"`, `an integer 7`, `a table`, … for "found …" messages.
pub(crate) fn describe_value(v: &Value) -> String {
    match v {
        Value::Null => "null (or a non-finite number)".into(),
        Value::Bool(b) => format!("a boolean {b}"),
        Value::Number(n) if n.is_f64() => format!("a float {n}"),
        Value::Number(n) => format!("an integer {n}"),
        Value::String(s) => format!("a string {s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "a table".into(),
    }
}

fn wrong_type(key: &str, expected: &str, v: &Value) -> ActionError {
    ActionError::invalid(
        key,
        format!("expected {expected}, found {}", describe_value(v)),
    )
}

pub(crate) fn missing(key: &str, expected: &str) -> ActionError {
    ActionError::MissingField {
        field: key.to_string(),
        expected: expected.to_string(),
    }
}

pub(crate) fn opt_str<'a>(obj: &'a Obj, key: &str) -> Result<Option<&'a str>, ActionError> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(wrong_type(key, "a string", v)),
    }
}

pub(crate) fn req_str<'a>(obj: &'a Obj, key: &str, expected: &str) -> Result<&'a str, ActionError> {
    opt_str(obj, key)?.ok_or_else(|| missing(key, expected))
}

/// A name: a non-empty string.
pub(crate) fn req_name<'a>(obj: &'a Obj, key: &str, what: &str) -> Result<&'a str, ActionError> {
    let s = req_str(obj, key, what)?;
    if s.trim().is_empty() {
        return Err(ActionError::invalid(
            key,
            format!("expected {what}, found an empty string"),
        ));
    }
    Ok(s)
}

pub(crate) fn opt_u64(obj: &Obj, key: &str) -> Result<Option<u64>, ActionError> {
    match obj.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| wrong_type(key, "a non-negative integer", v)),
    }
}

/// A finite number (an integer is read as one).
pub(crate) fn opt_f64(obj: &Obj, key: &str) -> Result<Option<f64>, ActionError> {
    match obj.get(key) {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() => Ok(Some(x)),
            _ => Err(ActionError::invalid(
                key,
                format!("expected a number, found {}", describe_value(v)),
            )),
        },
    }
}

pub(crate) fn opt_bool(obj: &Obj, key: &str) -> Result<Option<bool>, ActionError> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(wrong_type(key, "true or false", v)),
    }
}

/// A probability in [0, 1] (integers 0 and 1 are accepted too).
pub(crate) fn opt_probability(obj: &Obj, key: &str) -> Result<Option<f64>, ActionError> {
    match obj.get(key) {
        None => Ok(None),
        Some(v) => {
            let p = v
                .as_f64()
                .ok_or_else(|| wrong_type(key, "a probability in [0, 1]", v))?;
            if !(0.0..=1.0).contains(&p) {
                return Err(ActionError::invalid(
                    key,
                    format!("expected a probability in [0, 1], found {p}"),
                ));
            }
            Ok(Some(p))
        }
    }
}

pub(crate) fn req_probability(obj: &Obj, key: &str) -> Result<f64, ActionError> {
    opt_probability(obj, key)?.ok_or_else(|| missing(key, "a probability in [0, 1]"))
}

/// A duration string; `nonzero` rejects `"0s"`.
pub(crate) fn opt_duration(
    obj: &Obj,
    key: &str,
    nonzero: bool,
) -> Result<Option<u64>, ActionError> {
    obj.get(key)
        .map(|v| duration_value(key, v, nonzero))
        .transpose()
}

/// A duration value of `key`; `nonzero` rejects `"0s"`.
pub(crate) fn duration_value(key: &str, v: &Value, nonzero: bool) -> Result<u64, ActionError> {
    let expected = "a duration like \"20ms\" (ns, us, ms, s, m)";
    let Value::String(s) = v else {
        return Err(wrong_type(key, expected, v));
    };
    let ns = parse_duration_ns(s).map_err(|e| ActionError::invalid(key, e.to_string()))?;
    if nonzero && ns == 0 {
        return Err(ActionError::invalid(
            key,
            format!("expected a duration greater than 0, found {s:?}"),
        ));
    }
    Ok(ns)
}

pub(crate) fn req_duration(obj: &Obj, key: &str, nonzero: bool) -> Result<u64, ActionError> {
    opt_duration(obj, key, nonzero)?
        .ok_or_else(|| missing(key, "a duration like \"20ms\" (ns, us, ms, s, m)"))
}

/// A rate string, greater than 0; `Ok(Some(None))` for `"unlimited"` when allowed.
pub(crate) fn opt_rate(
    obj: &Obj,
    key: &str,
    allow_unlimited: bool,
) -> Result<Option<Option<u64>>, ActionError> {
    opt_positive(
        obj,
        key,
        allow_unlimited,
        ("rate", "a rate like \"100Mbps\" (bps, Kbps, Mbps, Gbps)"),
        parse_rate,
    )
}

/// A size string, greater than 0; `Ok(Some(None))` for `"unlimited"` when allowed.
pub(crate) fn opt_bytes(
    obj: &Obj,
    key: &str,
    allow_unlimited: bool,
) -> Result<Option<Option<u64>>, ActionError> {
    opt_positive(
        obj,
        key,
        allow_unlimited,
        (
            "size",
            "a size like \"64KiB\" (B, KB, MB, GB, KiB, MiB, GiB)",
        ),
        parse_bytes,
    )
}

/// A unit string parsed by `parse` that must be greater than 0, or
/// `"unlimited"` (→ `Some(None)`) when allowed. `what` is (noun, example).
fn opt_positive(
    obj: &Obj,
    key: &str,
    allow_unlimited: bool,
    what: (&str, &str),
    parse: fn(&str) -> Result<u64, crate::units::UnitError>,
) -> Result<Option<Option<u64>>, ActionError> {
    let Some(v) = obj.get(key) else {
        return Ok(None);
    };
    let or = if allow_unlimited {
        " or \"unlimited\""
    } else {
        ""
    };
    let (noun, example) = what;
    let expected = format!("{example}{or}");
    let Value::String(s) = v else {
        return Err(wrong_type(key, &expected, v));
    };
    if allow_unlimited && s == "unlimited" {
        return Ok(Some(None));
    }
    let n = parse(s).map_err(|e| {
        let reason = e.reason.map(|r| format!(" ({r})")).unwrap_or_default();
        ActionError::invalid(key, format!("expected {expected}, found {s:?}{reason}"))
    })?;
    if n == 0 {
        return Err(ActionError::invalid(
            key,
            format!("expected a {noun} greater than 0{or}, found {s:?}"),
        ));
    }
    Ok(Some(Some(n)))
}

/// A size that must fit a packet (`u32`), greater than 0.
pub(crate) fn opt_packet_size(obj: &Obj, key: &str) -> Result<Option<u32>, ActionError> {
    match opt_bytes(obj, key, false)? {
        None => Ok(None),
        Some(b) => {
            let b = b.unwrap_or(0);
            u32::try_from(b).map(Some).map_err(|_| {
                ActionError::invalid(
                    key,
                    format!("expected a packet size below 4GiB, found {b} bytes"),
                )
            })
        }
    }
}

/// One of a fixed set of strings.
pub(crate) fn opt_enum<'a>(
    obj: &'a Obj,
    key: &str,
    valid: &[&'static str],
) -> Result<Option<&'a str>, ActionError> {
    let expected = || {
        valid
            .iter()
            .map(|v| format!("{v:?}"))
            .collect::<Vec<_>>()
            .join(" or ")
    };
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) if valid.contains(&s.as_str()) => Ok(Some(s)),
        Some(v) => Err(wrong_type(key, &expected(), v)),
    }
}

pub(crate) fn opt_table<'a>(obj: &'a Obj, key: &str) -> Result<Option<&'a Obj>, ActionError> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::Object(t)) => Ok(Some(t)),
        Some(v) => Err(wrong_type(key, "a table", v)),
    }
}
