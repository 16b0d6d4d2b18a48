//! Units as written in `cluster.toml` and accepted by the control plane:
//! rates (`"100Mbps"`), durations (`"20ms"`) and sizes (`"64KiB"`), and their
//! human formatting for `edgemu check`.
//!
//! A value is a decimal number (`"2.5Mbps"`; no sign, no exponent), optional
//! spaces, and a unit; the unit is required. Units are case-sensitive:
//!
//! | kind     | units                                                      |
//! |----------|------------------------------------------------------------|
//! | rate     | `bps`, `Kbps` (also `kbps`), `Mbps`, `Gbps` — decimal      |
//! | duration | `ns`, `us` (also `µs`), `ms`, `s`, `m` (minutes)           |
//! | size     | `B`, `KB` (also `kB`), `MB`, `GB` — decimal; `KiB`, `MiB`, `GiB` — binary |
//!
//! Rates and durations are rounded to the nearest bit per second or
//! nanosecond; a size must come out as a whole number of bytes.
//! The `fmt_*` functions write values the parsers read back.

use edgemu_links::time::{NS_PER_MS, NS_PER_S, NS_PER_US};
use std::fmt;

/// Which kind of unit a value was expected to have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitKind {
    Rate,
    Duration,
    Bytes,
}

impl UnitKind {
    fn example(self) -> &'static str {
        match self {
            UnitKind::Rate => "a rate like \"100Mbps\" (bps, Kbps, Mbps, Gbps)",
            UnitKind::Duration => "a duration like \"20ms\" (ns, us, ms, s, m)",
            UnitKind::Bytes => "a size like \"64KiB\" (B, KB, MB, GB, KiB, MiB, GiB)",
        }
    }
}

/// A value that does not parse as the expected unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitError {
    pub kind: UnitKind,
    /// The text as written.
    pub found: String,
    /// Why, when it is more than "not this shape" (too large, fractional bytes).
    pub reason: Option<&'static str>,
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "expected {}, found {:?}",
            self.kind.example(),
            self.found
        )?;
        if let Some(r) = self.reason {
            write!(f, " ({r})")?;
        }
        Ok(())
    }
}

impl std::error::Error for UnitError {}

const RATE_UNITS: &[(&str, u128)] = &[
    ("bps", 1),
    ("Kbps", 1_000),
    ("kbps", 1_000),
    ("Mbps", 1_000_000),
    ("Gbps", 1_000_000_000),
];
const DURATION_UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", NS_PER_US as u128),
    ("µs", NS_PER_US as u128),
    ("ms", NS_PER_MS as u128),
    ("s", NS_PER_S as u128),
    ("m", 60 * NS_PER_S as u128),
];
const BYTE_UNITS: &[(&str, u128)] = &[
    ("B", 1),
    ("KB", 1_000),
    ("kB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
];

fn parse_unit(text: &str, kind: UnitKind, units: &[(&str, u128)]) -> Result<u64, UnitError> {
    let err = |reason| UnitError {
        kind,
        found: text.to_string(),
        reason,
    };
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = (&s[..split], s[split..].trim_start());
    let (int, frac) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int.is_empty() || (number.contains('.') && frac.is_empty()) || frac.contains('.') {
        return Err(err(None));
    }
    let mult = units
        .iter()
        .find(|(u, _)| *u == unit)
        .map(|&(_, m)| m)
        .ok_or_else(|| err(None))?;
    if int.len() + frac.len() > 30 {
        return Err(err(Some("too large")));
    }
    let digits = |d: &str| -> u128 { d.bytes().fold(0u128, |a, b| a * 10 + u128::from(b - b'0')) };
    let scale = 10u128.pow(frac.len() as u32);
    let mantissa = digits(int) * scale + digits(frac);
    let total = mantissa
        .checked_mul(mult)
        .ok_or_else(|| err(Some("too large")))?;
    let value = match kind {
        UnitKind::Bytes => {
            if total % scale != 0 {
                return Err(err(Some("not a whole number of bytes")));
            }
            total / scale
        }
        _ => (total + scale / 2) / scale,
    };
    u64::try_from(value).map_err(|_| err(Some("too large")))
}

/// `"100Mbps"` → 100 000 000 (bits per second).
pub fn parse_rate(text: &str) -> Result<u64, UnitError> {
    parse_unit(text, UnitKind::Rate, RATE_UNITS)
}

/// `"20ms"` → 20 000 000 (nanoseconds).
pub fn parse_duration_ns(text: &str) -> Result<u64, UnitError> {
    parse_unit(text, UnitKind::Duration, DURATION_UNITS)
}

/// `"64KiB"` → 65 536, `"1.5MB"` → 1 500 000 (bytes).
pub fn parse_bytes(text: &str) -> Result<u64, UnitError> {
    parse_unit(text, UnitKind::Bytes, BYTE_UNITS)
}

/// `value / div` with at most three decimals, trailing zeros dropped.
fn scaled(value: u64, div: u64) -> String {
    let whole = value / div;
    let rem = value % div;
    let milli = ((u128::from(rem) * 1000 + u128::from(div) / 2) / u128::from(div)) as u64;
    if milli == 0 {
        whole.to_string()
    } else if milli == 1000 {
        (whole + 1).to_string()
    } else {
        let s = format!("{whole}.{milli:03}");
        s.trim_end_matches('0').to_string()
    }
}

/// 20 000 000 → `"20Mbps"`, 2 500 000 → `"2.5Mbps"`.
pub fn fmt_rate(bps: u64) -> String {
    let (div, unit) = match bps {
        b if b >= 1_000_000_000 => (1_000_000_000, "Gbps"),
        b if b >= 1_000_000 => (1_000_000, "Mbps"),
        b if b >= 1_000 => (1_000, "Kbps"),
        _ => (1, "bps"),
    };
    format!("{}{unit}", scaled(bps, div))
}

/// 20 000 000 → `"20ms"`, 1 500 000 000 → `"1.5s"`, 0 → `"0s"`.
pub fn fmt_duration(ns: u64) -> String {
    let (div, unit) = match ns {
        0 => (1, "s"),
        n if n >= NS_PER_S => (NS_PER_S, "s"),
        n if n >= NS_PER_MS => (NS_PER_MS, "ms"),
        n if n >= NS_PER_US => (NS_PER_US, "us"),
        _ => (1, "ns"),
    };
    format!("{}{unit}", scaled(ns, div))
}

/// 262 144 → `"256KiB"`, 1 500 000 → `"1500KB"`, 1400 → `"1400B"`.
/// Whole binary multiples use binary units, whole decimal ones decimal units;
/// anything else under 1 MiB is written in bytes, larger values approximately
/// in binary units.
pub fn fmt_bytes(bytes: u64) -> String {
    const BIN: &[(u64, &str)] = &[(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    const DEC: &[(u64, &str)] = &[(1_000_000_000, "GB"), (1_000_000, "MB"), (1_000, "KB")];
    if bytes == 0 {
        return "0B".into();
    }
    for &(div, unit) in BIN {
        if bytes >= div && bytes.is_multiple_of(div) {
            return format!("{}{unit}", bytes / div);
        }
    }
    for &(div, unit) in DEC {
        if bytes >= div && bytes.is_multiple_of(div) {
            return format!("{}{unit}", bytes / div);
        }
    }
    if bytes < 1 << 20 {
        return format!("{bytes}B");
    }
    for &(div, unit) in BIN {
        if bytes >= div {
            return format!("{}{unit}", scaled(bytes, div));
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100Mbps"), Ok(100_000_000));
        assert_eq!(parse_rate("2.5Mbps"), Ok(2_500_000));
        assert_eq!(parse_rate("64kbps"), Ok(64_000));
        assert_eq!(parse_rate("64Kbps"), Ok(64_000));
        assert_eq!(parse_rate("1Gbps"), Ok(1_000_000_000));
        assert_eq!(parse_rate("800bps"), Ok(800));
        assert_eq!(parse_rate("10 Mbps"), Ok(10_000_000));
        assert_eq!(parse_rate("0.0000001Mbps"), Ok(0));
        assert_eq!(parse_rate("0Mbps"), Ok(0));
    }

    #[test]
    fn bad_rates() {
        for bad in [
            "100 mbit",
            "100",
            "Mbps",
            "-1Mbps",
            "1e6bps",
            "1.Mbps",
            ".5Mbps",
            "100MBps",
            "100mbps",
            "",
            "1.2.3Mbps",
            "100Mbps/s",
        ] {
            let e = parse_rate(bad).unwrap_err();
            assert_eq!(e.kind, UnitKind::Rate);
            assert_eq!(e.found, bad);
        }
        assert_eq!(
            parse_rate("100 mbit").unwrap_err().to_string(),
            "expected a rate like \"100Mbps\" (bps, Kbps, Mbps, Gbps), found \"100 mbit\""
        );
        let huge = parse_rate("99999999999999Gbps").unwrap_err();
        assert_eq!(huge.reason, Some("too large"));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("20ms"), Ok(20_000_000));
        assert_eq!(parse_duration_ns("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_duration_ns("2m"), Ok(120_000_000_000));
        assert_eq!(parse_duration_ns("250us"), Ok(250_000));
        assert_eq!(parse_duration_ns("250µs"), Ok(250_000));
        assert_eq!(parse_duration_ns("7ns"), Ok(7));
        assert_eq!(parse_duration_ns("0s"), Ok(0));
        assert_eq!(parse_duration_ns("0.0000000015s"), Ok(2));
        for bad in ["20", "20 msec", "20S", "1h", "-1s", "s", "1.5.5s"] {
            assert_eq!(
                parse_duration_ns(bad).unwrap_err().kind,
                UnitKind::Duration,
                "{bad}"
            );
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("64KiB"), Ok(65_536));
        assert_eq!(parse_bytes("1.5MB"), Ok(1_500_000));
        assert_eq!(parse_bytes("1400B"), Ok(1400));
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("1.5KiB"), Ok(1536));
        assert_eq!(parse_bytes("3kB"), Ok(3000));
        let frac = parse_bytes("0.3B").unwrap_err();
        assert_eq!(frac.reason, Some("not a whole number of bytes"));
        for bad in ["64", "64kib", "64 bytes", "1TB", "64b"] {
            assert_eq!(parse_bytes(bad).unwrap_err().kind, UnitKind::Bytes, "{bad}");
        }
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_rate(100_000_000), "100Mbps");
        assert_eq!(fmt_rate(2_500_000), "2.5Mbps");
        assert_eq!(fmt_rate(999), "999bps");
        assert_eq!(fmt_rate(1_234_567_890), "1.235Gbps");
        assert_eq!(fmt_duration(20_000_000), "20ms");
        assert_eq!(fmt_duration(1_500_000_000), "1.5s");
        assert_eq!(fmt_duration(0), "0s");
        assert_eq!(fmt_duration(999_999), "999.999us");
        assert_eq!(fmt_duration(1_999_999_999), "2s");
        assert_eq!(fmt_duration(42), "42ns");
        assert_eq!(fmt_bytes(262_144), "256KiB");
        assert_eq!(fmt_bytes(1_500_000), "1500KB");
        assert_eq!(fmt_bytes(3_000_000), "3MB");
        assert_eq!(fmt_bytes(1_500_000_000), "1500MB");
        assert_eq!(fmt_bytes(1_500_000_001), "1.397GiB");
        assert_eq!(fmt_bytes(1400), "1400B");
        assert_eq!(fmt_bytes(64), "64B");
        assert_eq!(fmt_bytes(3 << 30), "3GiB");
        assert_eq!(fmt_bytes(0), "0B");
    }

    #[test]
    fn formatting_round_trips() {
        for bps in [1, 999, 1_000, 64_000, 2_500_000, 100_000_000, 7_000_000_000] {
            assert_eq!(parse_rate(&fmt_rate(bps)), Ok(bps));
        }
        for ns in [0, 1, 1_500, 20_000_000, 1_500_000_000, 90_000_000_000] {
            assert_eq!(parse_duration_ns(&fmt_duration(ns)), Ok(ns));
        }
        for b in [1, 64, 1400, 1500, 65_536, 1_500_000, 1 << 30] {
            assert_eq!(parse_bytes(&fmt_bytes(b)), Ok(b));
        }
    }
}
