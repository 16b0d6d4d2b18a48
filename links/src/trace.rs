//! Time-varying links: rate traces and loss traces, and the arithmetic that
//! walks them.
//!
//! All trace times are relative to the moment the trace was installed on a
//! link (0 for [`crate::LinkModel::new`], `now` for a
//! [`crate::LinkModel::set_params`] that changes the spec). Blank lines and
//! everything after a `#` are ignored in every format. Parse errors name the
//! 1-based line number and what was expected there.
//!
//! # Rate traces
//!
//! **mahimahi** ([`RateTrace::parse_mahimahi`]): one integer millisecond
//! timestamp per line, non-decreasing; each line is one *delivery
//! opportunity* of [`MAHIMAHI_MTU`] = 1500 bytes (several lines with the same
//! timestamp are several opportunities in that millisecond). The trace
//! repeats with period = the last timestamp, which must be > 0 (as in
//! mahimahi, the opportunity at the last timestamp and one at 0 ms of the next
//! repetition fall on the same instant).
//!
//! Serialization rule (mahimahi's): an opportunity delivers up to 1500 bytes
//! of *queued* packets, in order. A packet larger than what is left spans
//! several opportunities and completes at the last one it uses. Bytes an
//! opportunity has left after a packet completes go to the next packet only
//! if that packet was already offered by the time of that opportunity;
//! otherwise they are wasted, as are all opportunities that pass while the
//! link is idle.
//!
//! **steps** ([`RateTrace::parse_steps`]): piecewise-constant rate, lines
//! `<ms> <bps>` (both non-negative integers, milliseconds strictly
//! increasing, the first at 0). Each line's rate holds until the next line.
//! An optional last line with a timestamp alone, `<ms>`, ends the period: the
//! trace then repeats with that period. Without it the last rate holds
//! forever. A 0 bps step is an outage: serialization pauses and resumes when
//! the rate comes back. A trace that could never finish a packet (the last,
//! endless step is 0 bps, or every step of a repeating trace is 0 bps) is
//! rejected.
//!
//! # Loss traces
//!
//! [`LossTrace::parse`]: lines `<ms> <state>`, the same timing rules as the
//! steps format (first at 0, strictly increasing, optional `<ms>` period
//! line). `<state>` is `good`, `bad`, or a loss probability in [0, 1]. A
//! packet sent while the trace is `good` is lost with probability `eps_good`,
//! while `bad` with `eps_bad` (defaults 0 and 1: a bad interval is an outage;
//! set them with [`LossTrace::with_state_loss`], e.g. to the link's
//! Gilbert–Elliott ε values); an explicit probability is used as is.

use crate::LinkError;

/// Bytes delivered by one mahimahi delivery opportunity.
pub const MAHIMAHI_MTU: u32 = 1500;

// The time units of [`crate::time`] for exact products of bits and nanoseconds.
const NS_PER_MS: u128 = crate::time::NS_PER_MS as u128;
const NS_PER_S: u128 = crate::time::NS_PER_S as u128;

/// A rate that varies with time. Build with [`RateTrace::parse_mahimahi`] or
/// [`RateTrace::parse_steps`]; the parsers guarantee the trace always
/// eventually carries every packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateTrace {
    kind: RateTraceKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RateTraceKind {
    Opportunities(OpportunityTrace),
    Steps(StepTrace),
}

/// mahimahi delivery opportunities: timestamps in ms, non-decreasing,
/// repeating with period = last timestamp (> 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OpportunityTrace {
    at_ms: Vec<u64>,
    period_ms: u64,
}

/// Piecewise-constant rate: `(start ms, bps)`, first at 0, strictly
/// increasing; optional period.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StepTrace {
    steps: Vec<(u64, u64)>,
    period_ms: Option<u64>,
}

impl RateTrace {
    /// Parses a mahimahi delivery-opportunity trace (see the module docs).
    pub fn parse_mahimahi(text: &str) -> Result<RateTrace, LinkError> {
        let mut at_ms = Vec::new();
        let mut prev: Option<u64> = None;
        for (line, content) in content_lines(text) {
            let ms = parse_u64(line, content, "an integer millisecond timestamp")?;
            if let Some(p) = prev {
                if ms < p {
                    return Err(LinkError::TimeOrder {
                        line,
                        ms,
                        prev: p,
                        order: "at or after",
                    });
                }
            }
            prev = Some(ms);
            at_ms.push(ms);
        }
        let period_ms = *at_ms.last().ok_or(LinkError::Empty)?;
        if period_ms == 0 {
            return Err(LinkError::ZeroPeriod);
        }
        Ok(RateTrace {
            kind: RateTraceKind::Opportunities(OpportunityTrace { at_ms, period_ms }),
        })
    }

    /// Parses a piecewise-constant `<ms> <bps>` trace (see the module docs).
    pub fn parse_steps(text: &str) -> Result<RateTrace, LinkError> {
        let (steps, period_ms) =
            parse_stepped(text, "`<ms> <bps>` with an integer rate in bit/s", |s| {
                s.parse::<u64>().ok()
            })?;
        match period_ms {
            None => {
                if steps.last().is_some_and(|&(_, bps)| bps == 0) {
                    return Err(LinkError::NoCapacity(
                        "the last step is 0 bps and, without a period line, never ends",
                    ));
                }
            }
            Some(_) => {
                if steps.iter().all(|&(_, bps)| bps == 0) {
                    return Err(LinkError::NoCapacity("every step of the period is 0 bps"));
                }
            }
        }
        Ok(RateTrace {
            kind: RateTraceKind::Steps(StepTrace { steps, period_ms }),
        })
    }

    /// The repetition period in ms, if the trace repeats (mahimahi traces
    /// always do).
    pub fn period_ms(&self) -> Option<u64> {
        match &self.kind {
            RateTraceKind::Opportunities(o) => Some(o.period_ms),
            RateTraceKind::Steps(s) => s.period_ms,
        }
    }

    /// The long-run average rate in bit/s: opportunities × 1500 B × 8 per
    /// period for mahimahi; the time-weighted mean over the period for a
    /// repeating step trace; the last rate for one that does not repeat.
    pub fn long_run_bps(&self) -> f64 {
        match &self.kind {
            RateTraceKind::Opportunities(o) => {
                let bits = o.at_ms.len() as f64 * f64::from(MAHIMAHI_MTU) * 8.0;
                bits * 1000.0 / o.period_ms as f64
            }
            RateTraceKind::Steps(s) => match s.period_ms {
                // bit·ns per period over ns per period = bit/s.
                Some(p) => s.period_capacity() as f64 / (p as f64 * 1e6),
                None => s.steps.last().map_or(0.0, |&(_, bps)| bps as f64),
            },
        }
    }

    pub(crate) fn kind(&self) -> &RateTraceKind {
        &self.kind
    }
}

impl OpportunityTrace {
    fn len(&self) -> u128 {
        self.at_ms.len() as u128
    }

    /// Time (ns from the trace origin) of the opportunity with absolute index
    /// `idx` (counting across repetitions).
    pub(crate) fn time_ns(&self, idx: u128) -> u128 {
        let n = self.len();
        let rep = idx / n;
        let i = (idx % n) as usize;
        rep.saturating_mul(u128::from(self.period_ms))
            .saturating_add(u128::from(self.at_ms[i]))
            .saturating_mul(NS_PER_MS)
    }

    /// Absolute index of the first opportunity at or after `t_ns`.
    pub(crate) fn first_at_or_after(&self, t_ns: u128) -> u128 {
        let n = self.len();
        let period = u128::from(self.period_ms);
        let m = t_ns.div_ceil(NS_PER_MS);
        let r = m / period;
        // Index → time is monotone, and the last opportunity of repetition
        // r-1 sits on the same instant as r·period, so look one back.
        for rr in [r.saturating_sub(1), r] {
            let base = rr.saturating_mul(period);
            let i = self
                .at_ms
                .partition_point(|&x| base.saturating_add(u128::from(x)) < m);
            if (i as u128) < n {
                return rr.saturating_mul(n).saturating_add(i as u128);
            }
        }
        // (r+1)·period + at[0] > m always.
        r.saturating_add(1).saturating_mul(n)
    }
}

impl StepTrace {
    /// Bit·ns of capacity in one period (bps × ns summed over the steps).
    fn period_capacity(&self) -> u128 {
        let Some(p) = self.period_ms else { return 0 };
        let mut total: u128 = 0;
        for (i, &(at, bps)) in self.steps.iter().enumerate() {
            let end = self.steps.get(i + 1).map_or(p, |&(next, _)| next);
            total = total
                .saturating_add(u128::from(bps).saturating_mul(u128::from(end - at) * NS_PER_MS));
        }
        total
    }

    /// Rate at `t_ns` and the end of its step (u128::MAX if it never ends).
    fn segment_at(&self, t_ns: u128) -> (u64, u128) {
        let (base, off) = match self.period_ms {
            Some(p) => {
                let pn = u128::from(p) * NS_PER_MS;
                (t_ns - t_ns % pn, t_ns % pn)
            }
            None => (0, t_ns),
        };
        let i = self
            .steps
            .partition_point(|&(at, _)| u128::from(at) * NS_PER_MS <= off)
            .saturating_sub(1);
        let bps = self.steps[i].1;
        let end = match (self.steps.get(i + 1), self.period_ms) {
            (Some(&(next, _)), _) => base.saturating_add(u128::from(next) * NS_PER_MS),
            (None, Some(p)) => base.saturating_add(u128::from(p) * NS_PER_MS),
            (None, None) => u128::MAX,
        };
        (bps, end)
    }

    /// Serializes `size` bytes, ready at `ready_ns`. Returns (start, end):
    /// start is the first instant at or after `ready_ns` with a non-zero
    /// rate, end is when the last bit has left (rounded up to the ns).
    pub(crate) fn serialize(&self, ready_ns: u128, size: u32) -> (u128, u128) {
        // Work in bit·ns so that every step contributes exactly bps × ns.
        let mut need = u128::from(size) * 8 * NS_PER_S;
        let mut t = ready_ns;
        let mut start = None;
        if need == 0 {
            return (t, t);
        }
        let per_period = self.period_capacity();
        let period_ns = self.period_ms.map(|p| u128::from(p) * NS_PER_MS);
        // Each pass visits one step; whole periods are skipped in one jump,
        // so this ends within about two periods' worth of steps.
        let max_iters = 4 * self.steps.len() + 8;
        for _ in 0..max_iters {
            let (bps, seg_end) = self.segment_at(t);
            if bps > 0 {
                start.get_or_insert(t);
                let bps = u128::from(bps);
                let cap = bps.saturating_mul(seg_end - t);
                if cap >= need {
                    let end = t.saturating_add(need.div_ceil(bps));
                    return (start.unwrap_or(t), end);
                }
                need -= cap;
            }
            if seg_end == u128::MAX {
                break;
            }
            t = seg_end;
            if let Some(pn) = period_ns {
                // (`is_multiple_of` would need Rust 1.87; the MSRV is 1.85.)
                let phase = t % pn;
                if per_period > 0 && phase == 0 && need > per_period {
                    let k = (need - 1) / per_period;
                    t = t.saturating_add(k.saturating_mul(pn));
                    need -= k * per_period;
                }
            }
        }
        (start.unwrap_or(t), u128::MAX)
    }
}

/// The loss state a [`LossTrace`] gives for an interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TraceState {
    /// Lose with the trace's `eps_good`.
    Good,
    /// Lose with the trace's `eps_bad`.
    Bad,
    /// Lose with this probability.
    Loss(f64),
}

/// A per-interval loss state following a recorded trace (see the module
/// docs).
#[derive(Clone, Debug, PartialEq)]
pub struct LossTrace {
    entries: Vec<(u64, TraceState)>,
    period_ms: Option<u64>,
    eps_good: f64,
    eps_bad: f64,
}

impl LossTrace {
    /// Parses `<ms> <good|bad|probability>` lines (see the module docs),
    /// with `eps_good` = 0 and `eps_bad` = 1.
    pub fn parse(text: &str) -> Result<LossTrace, LinkError> {
        let (entries, period_ms) = parse_stepped(
            text,
            "`<ms> <state>` with state `good`, `bad` or a probability in [0, 1]",
            |s| match s {
                "good" | "Good" | "GOOD" | "g" | "G" => Some(TraceState::Good),
                "bad" | "Bad" | "BAD" | "b" | "B" => Some(TraceState::Bad),
                _ => s
                    .parse::<f64>()
                    .ok()
                    .filter(|p| (0.0..=1.0).contains(p))
                    .map(TraceState::Loss),
            },
        )?;
        Ok(LossTrace {
            entries,
            period_ms,
            eps_good: 0.0,
            eps_bad: 1.0,
        })
    }

    /// Sets the loss probabilities used in `good` and `bad` intervals.
    pub fn with_state_loss(mut self, eps_good: f64, eps_bad: f64) -> LossTrace {
        self.eps_good = eps_good;
        self.eps_bad = eps_bad;
        self
    }

    /// Loss probability in `good` intervals.
    pub fn eps_good(&self) -> f64 {
        self.eps_good
    }

    /// Loss probability in `bad` intervals.
    pub fn eps_bad(&self) -> f64 {
        self.eps_bad
    }

    /// The repetition period in ms, if the trace repeats.
    pub fn period_ms(&self) -> Option<u64> {
        self.period_ms
    }

    /// The state at `t_ns` after the trace origin.
    pub fn state_at(&self, t_ns: u64) -> TraceState {
        let t_ms = t_ns / 1_000_000;
        let off = match self.period_ms {
            Some(p) => t_ms % p,
            None => t_ms,
        };
        let i = self
            .entries
            .partition_point(|&(at, _)| at <= off)
            .saturating_sub(1);
        self.entries[i].1
    }

    /// The loss probability at `t_ns` after the trace origin.
    pub fn loss_probability_at(&self, t_ns: u64) -> f64 {
        match self.state_at(t_ns) {
            TraceState::Good => self.eps_good,
            TraceState::Bad => self.eps_bad,
            TraceState::Loss(p) => p,
        }
    }
}

/// Non-blank lines with comments stripped, numbered from 1.
fn content_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().filter_map(|(i, l)| {
        let l = l.split('#').next().unwrap_or("").trim();
        (!l.is_empty()).then_some((i + 1, l))
    })
}

fn parse_u64(line: usize, tok: &str, expected: &'static str) -> Result<u64, LinkError> {
    tok.parse::<u64>().map_err(|_| LinkError::Parse {
        line,
        expected,
        found: tok.to_string(),
    })
}

type Stepped<T> = (Vec<(u64, T)>, Option<u64>);

/// Shared reader of the `<ms> <value>` formats: first entry at 0, strictly
/// increasing, an optional lone `<ms>` period line last.
fn parse_stepped<T>(
    text: &str,
    expected: &'static str,
    value: impl Fn(&str) -> Option<T>,
) -> Result<Stepped<T>, LinkError> {
    let mut entries: Vec<(u64, T)> = Vec::new();
    let mut period: Option<u64> = None;
    for (line, content) in content_lines(text) {
        if period.is_some() {
            return Err(LinkError::Parse {
                line,
                expected: "nothing after the period line (a lone `<ms>` must be last)",
                found: content.to_string(),
            });
        }
        let mut toks = content.split_whitespace();
        let ms_tok = toks.next().unwrap_or("");
        let ms = parse_u64(line, ms_tok, expected)?;
        let val_tok = toks.next();
        if toks.next().is_some() {
            return Err(LinkError::Parse {
                line,
                expected,
                found: content.to_string(),
            });
        }
        match entries.last() {
            None if ms != 0 => return Err(LinkError::FirstNotZero { line, ms }),
            Some(&(prev, _)) if ms <= prev => {
                return Err(LinkError::TimeOrder {
                    line,
                    ms,
                    prev,
                    order: "after",
                })
            }
            _ => {}
        }
        match val_tok {
            None if entries.is_empty() => {
                return Err(LinkError::Parse {
                    line,
                    expected,
                    found: content.to_string(),
                })
            }
            None => period = Some(ms),
            Some(v) => {
                let v = value(v).ok_or_else(|| LinkError::Parse {
                    line,
                    expected,
                    found: content.to_string(),
                })?;
                entries.push((ms, v));
            }
        }
    }
    if entries.is_empty() {
        return Err(LinkError::Empty);
    }
    Ok((entries, period))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opp(trace: &RateTrace) -> &OpportunityTrace {
        match trace.kind() {
            RateTraceKind::Opportunities(o) => o,
            RateTraceKind::Steps(_) => panic!("not mahimahi"),
        }
    }

    fn steps(trace: &RateTrace) -> &StepTrace {
        match trace.kind() {
            RateTraceKind::Steps(s) => s,
            RateTraceKind::Opportunities(_) => panic!("not steps"),
        }
    }

    #[test]
    fn mahimahi_parses_and_repeats() {
        let t = RateTrace::parse_mahimahi("# comment\n1\n1\n3\n\n5\n").unwrap();
        assert_eq!(t.period_ms(), Some(5));
        let o = opp(&t);
        let ms: Vec<u128> = (0..9).map(|i| o.time_ns(i) / NS_PER_MS).collect();
        assert_eq!(ms, vec![1, 1, 3, 5, 6, 6, 8, 10, 11]);
        // 4 opportunities × 12000 bit per 5 ms.
        assert!((t.long_run_bps() - 4.0 * 12_000.0 * 200.0).abs() < 1e-6);
    }

    #[test]
    fn mahimahi_first_at_or_after_is_the_smallest_index() {
        let t = RateTrace::parse_mahimahi("0\n2\n2\n4\n").unwrap();
        let o = opp(&t);
        for t_ns in (0..30_000_000u128).step_by(250_000) {
            let idx = o.first_at_or_after(t_ns);
            assert!(o.time_ns(idx) >= t_ns, "t={t_ns}");
            if idx > 0 {
                assert!(o.time_ns(idx - 1) < t_ns, "t={t_ns} idx={idx}");
            }
        }
    }

    #[test]
    fn mahimahi_errors_name_the_line() {
        let e = RateTrace::parse_mahimahi("1\n2\nx\n").unwrap_err();
        assert!(matches!(e, LinkError::Parse { line: 3, .. }), "{e}");
        assert!(e.to_string().contains("line 3"));
        let e = RateTrace::parse_mahimahi("5\n3\n").unwrap_err();
        assert!(matches!(e, LinkError::TimeOrder { line: 2, .. }), "{e}");
        assert_eq!(RateTrace::parse_mahimahi("\n#\n"), Err(LinkError::Empty));
        assert_eq!(
            RateTrace::parse_mahimahi("0\n0\n"),
            Err(LinkError::ZeroPeriod)
        );
        assert!(RateTrace::parse_mahimahi("-1\n").is_err());
    }

    #[test]
    fn steps_parse_and_walk() {
        // 8 Mbps for 10 ms, outage for 10 ms, 16 Mbps for 10 ms, repeat at 30.
        let t = RateTrace::parse_steps("0 8000000\n10 0\n20 16000000\n30\n").unwrap();
        assert_eq!(t.period_ms(), Some(30));
        assert!((t.long_run_bps() - 8_000_000.0).abs() < 1e-3);
        let s = steps(&t);
        // 1000 B at 8 Mbps = 1 ms.
        assert_eq!(s.serialize(0, 1000), (0, 1_000_000));
        // Starting at 9.5 ms: 0.5 ms at 8 Mbps carries 500 B, the rest waits
        // out the outage and takes 0.25 ms at 16 Mbps.
        assert_eq!(s.serialize(9_500_000, 1000), (9_500_000, 20_250_000));
        // Ready in the outage: starts when the rate comes back.
        assert_eq!(s.serialize(15_000_000, 2000), (20_000_000, 21_000_000));
        // A packet much larger than a period: 30 000 B per period.
        // 95 000 B = 3 periods (90 ms) + 5000 B = 5 ms at 8 Mbps.
        assert_eq!(s.serialize(0, 95_000).1, 95_000_000);
    }

    #[test]
    fn steps_without_period_hold_the_last_rate() {
        let t = RateTrace::parse_steps("0 0\n5 8000000").unwrap();
        assert_eq!(t.period_ms(), None);
        assert_eq!(t.long_run_bps(), 8_000_000.0);
        let s = steps(&t);
        assert_eq!(s.serialize(0, 1000), (5_000_000, 6_000_000));
        assert_eq!(
            s.serialize(1_000_000_000, 0),
            (1_000_000_000, 1_000_000_000)
        );
    }

    #[test]
    fn steps_errors() {
        assert!(matches!(
            RateTrace::parse_steps("5 100\n"),
            Err(LinkError::FirstNotZero { line: 1, ms: 5 })
        ));
        assert!(matches!(
            RateTrace::parse_steps("0 100\n0 200\n"),
            Err(LinkError::TimeOrder { line: 2, .. })
        ));
        assert!(matches!(
            RateTrace::parse_steps("0 100\n10 100Mbps\n"),
            Err(LinkError::Parse { line: 2, .. })
        ));
        assert!(matches!(
            RateTrace::parse_steps("0 100\n10\n20 5\n"),
            Err(LinkError::Parse { line: 3, .. })
        ));
        assert!(matches!(
            RateTrace::parse_steps("0 100\n10 0\n"),
            Err(LinkError::NoCapacity(_))
        ));
        assert!(matches!(
            RateTrace::parse_steps("0 0\n10\n"),
            Err(LinkError::NoCapacity(_))
        ));
        assert!(matches!(
            RateTrace::parse_steps("0 1 2\n"),
            Err(LinkError::Parse { line: 1, .. })
        ));
        assert_eq!(RateTrace::parse_steps(""), Err(LinkError::Empty));
    }

    #[test]
    fn loss_trace_states() {
        let t = LossTrace::parse("0 good\n10 bad\n20 0.25\n30\n")
            .unwrap()
            .with_state_loss(0.001, 0.5);
        assert_eq!(t.state_at(0), TraceState::Good);
        assert_eq!(t.state_at(10_000_000), TraceState::Bad);
        assert_eq!(t.state_at(25_000_000), TraceState::Loss(0.25));
        assert_eq!(t.state_at(31_000_000), TraceState::Good);
        assert_eq!(t.loss_probability_at(0), 0.001);
        assert_eq!(t.loss_probability_at(45_000_000), 0.5);
        assert_eq!(t.loss_probability_at(59_999_999), 0.25);
        let forever = LossTrace::parse("0 good\n10 bad\n").unwrap();
        assert_eq!(forever.loss_probability_at(u64::MAX), 1.0);
    }

    #[test]
    fn loss_trace_errors() {
        let e = LossTrace::parse("0 good\n10 worse\n").unwrap_err();
        assert!(matches!(e, LinkError::Parse { line: 2, .. }), "{e}");
        assert!(e.to_string().contains("good"), "{e}");
        assert!(LossTrace::parse("0 1.5\n").is_err());
        assert!(LossTrace::parse("0 NaN\n").is_err());
        assert!(LossTrace::parse("0\n").is_err());
        assert!(matches!(
            LossTrace::parse("3 good\n"),
            Err(LinkError::FirstNotZero { .. })
        ));
    }
}
