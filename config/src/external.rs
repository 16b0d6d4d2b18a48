//! The `external` table of a decider (a `scheduler`, an `agent`): where a
//! policy outside the process is asked at each decision, how long edgemu
//! waits for its answer, and which built-in policy decides when it does not
//! answer in time (docs/external-policy.md).
//!
//! ```toml
//! [[actors]]
//! name = "sched"
//! kind = "scheduler"
//! policy = "external"
//! external = { url = "ws://127.0.0.1:7300", deadline = "20ms", fallback = "least-loaded" }
//! ```
//!
//! Only what a file can get wrong is checked here (the URL's form, the
//! deadline's range, that the fallback is not itself `external`); the
//! fallback's name is checked against the policy registry when the host
//! starts, like `policy` (this crate does not depend on `edgemu-policies`).

use crate::error::ActionError;
use crate::fields::*;
use crate::units::fmt_duration;

/// The policy name that asks a policy process (`policy = "external"`).
pub const EXTERNAL_POLICY: &str = "external";

/// Keys of an `external` table.
pub const EXTERNAL_KEYS: &[&str] = &["url", "deadline", "fallback"];

/// Default per-decision deadline of a scheduler's slot decision: 2 % of the
/// default 1 s slot, room for a Python policy's forward pass on loopback.
pub const DEFAULT_SLOT_DEADLINE_NS: u64 = 20_000_000;
/// Default per-decision deadline of a repair decision: the sender parks
/// while it waits, and at 100 Mb/s 2 ms is about 18 frames.
pub const DEFAULT_REPAIR_DEADLINE_NS: u64 = 2_000_000;
/// The longest deadline a decision may have.
pub const MAX_DEADLINE_NS: u64 = 1_000_000_000;

/// An `external` table as the file gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalPolicy {
    /// The policy process's websocket, `ws://host:port[/path]`.
    pub url: String,
    /// Per-decision deadline (`None`: the problem's default,
    /// [`DEFAULT_SLOT_DEADLINE_NS`] or [`DEFAULT_REPAIR_DEADLINE_NS`]).
    pub deadline_ns: Option<u64>,
    /// The built-in policy that decides on a timeout, an error, a malformed
    /// or masked action, or no connection (`None`: the problem's default).
    pub fallback: Option<String>,
}

impl ExternalPolicy {
    /// The deadline, with `default` when the file gives none.
    pub fn deadline_or(&self, default: u64) -> u64 {
        self.deadline_ns.unwrap_or(default)
    }
}

/// Checks a policy process's URL: `ws://` with a host (TLS is not built in:
/// a policy process runs next to the decider, on loopback or a lab network).
pub fn check_url(key: &str, url: &str) -> Result<(), ActionError> {
    let rest = url.strip_prefix("ws://").ok_or_else(|| {
        ActionError::invalid(
            key,
            format!("expected a websocket URL like \"ws://127.0.0.1:7300\", found {url:?}"),
        )
    })?;
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty() || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ActionError::invalid(
            key,
            format!(
                "expected a websocket URL with a host, like \"ws://127.0.0.1:7300\", found {url:?}"
            ),
        ));
    }
    if url.len() > 2048 {
        return Err(ActionError::invalid(
            key,
            "expected a URL of at most 2048 characters",
        ));
    }
    Ok(())
}

/// Checks a deadline: above 0 and at most [`MAX_DEADLINE_NS`].
pub fn check_deadline(key: &str, ns: u64) -> Result<(), ActionError> {
    if ns == 0 || ns > MAX_DEADLINE_NS {
        return Err(ActionError::invalid(
            key,
            format!(
                "expected a deadline above 0 and at most {}, found {}",
                fmt_duration(MAX_DEADLINE_NS),
                fmt_duration(ns)
            ),
        ));
    }
    Ok(())
}

/// Checks a fallback policy's name: a bare name, not `external`.
pub fn check_fallback(key: &str, name: &str) -> Result<(), ActionError> {
    let n = name.trim();
    if n.is_empty() {
        return Err(ActionError::invalid(
            key,
            "expected a policy name, found an empty string",
        ));
    }
    if n.eq_ignore_ascii_case(EXTERNAL_POLICY) {
        return Err(ActionError::invalid(
            key,
            "the fallback decides when the external policy cannot: expected a built-in policy, not \"external\"",
        ));
    }
    Ok(())
}

/// Reads the `external` table of `obj` (errors are named `external.<key>`).
pub(crate) fn external(obj: &Obj, errs: &mut Errs) -> Option<ExternalPolicy> {
    let t = errs.ok(opt_table(obj, "external")).flatten()?;
    let mut sub = Errs::default();
    check_keys(t, EXTERNAL_KEYS, "external", &mut sub);
    let url = sub.ok(req_str(
        t,
        "url",
        "the policy process's websocket, like \"ws://127.0.0.1:7300\"",
    ));
    if let Some(u) = url {
        sub.ok(check_url("url", u));
    }
    let deadline_ns = sub.ok(opt_duration(t, "deadline", true)).flatten();
    if let Some(d) = deadline_ns {
        sub.ok(check_deadline("deadline", d));
    }
    let fallback = sub.ok(opt_str(t, "fallback")).flatten();
    if let Some(f) = fallback {
        sub.ok(check_fallback("fallback", f));
    }
    let ok = sub.0.is_empty();
    errs.0
        .extend(sub.0.into_iter().map(|e| e.nested("external")));
    (ok).then(|| ExternalPolicy {
        url: url.unwrap_or_default().to_string(),
        deadline_ns,
        fallback: fallback.map(|f| f.trim().to_ascii_lowercase()),
    })
}

/// `policy = "external"` needs an `external` table (reported on `external`).
pub(crate) fn require_table(
    policy: &str,
    ext: Option<&ExternalPolicy>,
    obj: &Obj,
    errs: &mut Errs,
) {
    if policy.trim().eq_ignore_ascii_case(EXTERNAL_POLICY)
        && ext.is_none()
        && !obj.contains_key("external")
    {
        errs.push(missing(
            "external",
            "a table like { url = \"ws://127.0.0.1:7300\" } naming the policy process (policy = \"external\")",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_deadlines_and_fallbacks_are_checked() {
        assert!(check_url("url", "ws://127.0.0.1:7300").is_ok());
        assert!(check_url("url", "ws://localhost:7300/policy").is_ok());
        for bad in [
            "http://x:1",
            "ws://",
            "ws:///p",
            "127.0.0.1:7300",
            "ws://a b:1",
        ] {
            assert!(check_url("url", bad).is_err(), "{bad}");
        }
        assert!(check_deadline("deadline", 1).is_ok());
        assert!(check_deadline("deadline", MAX_DEADLINE_NS).is_ok());
        assert!(check_deadline("deadline", 0).is_err());
        assert!(check_deadline("deadline", MAX_DEADLINE_NS + 1).is_err());
        assert!(check_fallback("fallback", "least-loaded").is_ok());
        assert!(check_fallback("fallback", "External").is_err());
        assert!(check_fallback("fallback", " ").is_err());
    }
}
