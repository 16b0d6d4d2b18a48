//! The PriorityFEC paper's main channel (§V-A), defined once for every
//! experiment, benchmark and test that reproduces it: 100 Mb/s, 20 ms RTT,
//! Gilbert–Elliott loss (εG, εB, pGB, pBG) = (0.001, 0.50, 0.02, 0.10) on the
//! data direction — about 8.42 % loss in bursts of 10 packets on average
//! (see [`crate::loss`]).
//!
//! What the paper leaves open (a queue limit, the reverse direction) is the
//! choice of each user of the channel, so [`direction`] sets neither.

use crate::time::NS_PER_MS;
use crate::{GilbertElliott, LinkParams, LossSpec, RateSpec};

/// Rate of the paper's link, bits per second.
pub const RATE_BPS: u64 = 100_000_000;
/// Round-trip time of the paper's link, ns (half of it each way).
pub const RTT_NS: u64 = 20 * NS_PER_MS;
/// One-way delay of the paper's link, ns.
pub const ONE_WAY_NS: u64 = RTT_NS / 2;

/// The paper's Gilbert–Elliott chain, in state Good.
pub const GE: GilbertElliott = GilbertElliott::new(0.001, 0.50, 0.02, 0.10);

/// [`GE`] as a link's loss specification.
pub fn ge_loss() -> LossSpec {
    LossSpec::GilbertElliott {
        eps_g: GE.eps_g,
        eps_b: GE.eps_b,
        p_gb: GE.p_gb,
        p_bg: GE.p_bg,
    }
}

/// One direction of the paper's link with `loss`: its rate and one-way
/// delay, everything else the [`LinkParams`] defaults (an unbounded queue).
pub fn direction(loss: LossSpec) -> LinkParams {
    LinkParams {
        rate: RateSpec::Fixed { bps: RATE_BPS },
        delay_ns: ONE_WAY_NS,
        loss,
        ..LinkParams::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_figures() {
        assert_eq!(
            (RATE_BPS, RTT_NS, ONE_WAY_NS),
            (100_000_000, 20_000_000, 10_000_000)
        );
        let loss = ge_loss().stationary_loss().unwrap_or(0.0);
        assert!((loss - 0.084_166_666).abs() < 1e-6, "{loss}");
        assert_eq!(GE.mean_bad_burst(), 10.0);
        let d = direction(LossSpec::None);
        assert_eq!(d.rate, RateSpec::Fixed { bps: 100_000_000 });
        assert_eq!(d.queue_bytes, None);
    }
}
