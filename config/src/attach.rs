//! `kind = "attach"`: a TUN device inside a network namespace that edgemu
//! creates, so unmodified programs (`ping`, `curl`, `iperf3`, the kernel's
//! TCP) use the emulated network. Every IP packet the namespace sends out
//! of the device crosses the link `via` to the attach point `to`, which
//! writes it into its own namespace's device; the link's rate, delay,
//! jitter, queue, loss and chaos apply in each direction.
//!
//! ```toml
//! [[actors]]
//! name = "client"
//! host = "h1"
//! kind = "attach"
//! to = "server"
//! via = "radio"
//! netns = "emu-client"        # created at start, removed at the end
//! address = "198.18.0.1/24"
//! ```
//!
//! Linux only, as root, real time only.

use crate::error::ActionError;
use crate::fields::*;
use crate::model::Route;
use std::net::Ipv4Addr;

/// One attach point.
#[derive(Clone, Debug, PartialEq)]
pub struct AttachSpec {
    /// The attach point at the other end, and the link to it.
    pub route: Route,
    /// The network namespace it creates (and removes at the end).
    pub netns: String,
    /// The device's address and prefix length in that namespace.
    pub address: Ipv4Addr,
    pub prefix: u8,
    pub mtu: u16,
}

/// Parses `address = "a.b.c.d/len"`.
pub fn parse_cidr(s: &str) -> Option<(Ipv4Addr, u8)> {
    let (a, p) = s.split_once('/')?;
    let p: u8 = p.parse().ok()?;
    (1..=30).contains(&p).then_some(())?;
    Some((a.parse().ok()?, p))
}

pub(crate) fn attach(obj: &Obj, name: &str, errs: &mut Errs, route: Route) -> AttachSpec {
    let netns = match errs.ok(opt_str(obj, "netns")).flatten() {
        Some(n) => n.to_string(),
        None => format!("emu-{name}"),
    };
    let valid = !netns.is_empty()
        && netns.len() <= 64
        && netns
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !netns.starts_with('.');
    if !valid {
        errs.push(ActionError::invalid(
            "netns",
            format!("expected a namespace name of letters, digits, '-', '_' and '.' (at most 64), found {netns:?}"),
        ));
    }
    let (address, prefix) = match errs.ok(req_str(obj, "address", "an IPv4 address with its prefix length, e.g. \"198.18.0.1/24\"")) {
        Some(a) => parse_cidr(a).unwrap_or_else(|| {
            errs.push(ActionError::invalid(
                "address",
                format!("expected an IPv4 address with a prefix length from 1 to 30, e.g. \"198.18.0.1/24\", found {a:?}"),
            ));
            (Ipv4Addr::UNSPECIFIED, 24)
        }),
        None => (Ipv4Addr::UNSPECIFIED, 24),
    };
    let mtu = match errs.ok(opt_u64(obj, "mtu")).flatten() {
        None => 1500,
        Some(m) if (576..=9000).contains(&m) => m as u16,
        Some(m) => {
            errs.push(ActionError::invalid(
                "mtu",
                format!("expected an MTU from 576 to 9000 bytes, found {m}"),
            ));
            1500
        }
    };
    AttachSpec {
        route,
        netns,
        address,
        prefix,
        mtu,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_have_a_prefix() {
        assert_eq!(
            parse_cidr("198.18.0.1/24"),
            Some((Ipv4Addr::new(198, 18, 0, 1), 24))
        );
        assert_eq!(parse_cidr("198.18.0.1"), None);
        assert_eq!(parse_cidr("198.18.0.1/31"), None);
        assert_eq!(parse_cidr("x/24"), None);
    }
}
