//! Radio cells: each server's uplink, shared equally by the requests assigned
//! to it in a slot (paper eq. for `R`):
//!
//! `R = (B/|Q|) · log2(1 + p·h / (N0 · B/|Q|))`, upload time `l_in·β / R`,
//!
//! with `N0 = −174 dBm/Hz`, `β = 16` bits per token, `p` in watts.
//!
//! **Path loss.** `h` is the large-scale channel gain from the 3GPP TR 36.814
//! macro-cell model used throughout the edge-computing literature:
//! `PL(dB) = 128.1 + 37.6·log10(d / 1 km)`, `h = 10^(−PL/10)`. Distances are
//! clamped below at 10 m (the model is not meant for the near field; a user
//! on top of a server would otherwise get an unbounded gain). No shadowing or
//! fast fading: the paper does not specify any, and leaving it out keeps the
//! channel a deterministic function of positions.

/// Noise power spectral density, dBm/Hz.
pub const N0_DBM_HZ: f64 = -174.0;
/// Bits uploaded per prompt token (`β`).
pub const BITS_PER_TOKEN: f64 = 16.0;
/// Closest distance the path-loss model is evaluated at, metres.
pub const MIN_DISTANCE_M: f64 = 10.0;
/// `N0` in W/Hz: `10^((−174 − 30)/10) = 10^−20.4`.
const N0_W_PER_HZ: f64 = 3.981_071_705_534_986e-21;
/// Gain at 1 km: `10^(−128.1/10) = 10^−12.81`.
const GAIN_AT_1KM: f64 = 1.548_816_618_912_479_5e-13;
/// Path-loss exponent: 37.6 dB per decade is `d^−3.76`.
const PATH_LOSS_EXPONENT: f64 = 3.76;

/// dBm to watts.
pub fn dbm_to_w(dbm: f64) -> f64 {
    10f64.powf((dbm - 30.0) / 10.0)
}

/// Path loss in dB at `d_m` metres (3GPP TR 36.814 macro).
pub fn path_loss_db(d_m: f64) -> f64 {
    128.1 + 37.6 * (d_m.max(MIN_DISTANCE_M) / 1000.0).log10()
}

/// Channel power gain `h` (linear) at `d_m` metres: `10^(−PL/10)`.
pub fn channel_gain(d_m: f64) -> f64 {
    gain_at_squared_distance(d_m * d_m)
}

/// [`channel_gain`] at squared distance `d2_m2` (m²): `10^−12.81 ·
/// (d²/1 km²)^−1.88`, through `exp2`/`log2`, which spares the square root
/// and the general `powf` (a 10 000 × 200 slot computes two million).
fn gain_at_squared_distance(d2_m2: f64) -> f64 {
    let d2_km2 = d2_m2.max(MIN_DISTANCE_M * MIN_DISTANCE_M) / 1e6;
    GAIN_AT_1KM * (-0.5 * PATH_LOSS_EXPONENT * d2_km2.log2()).exp2()
}

/// Shannon rate (bit/s) of one of `sharers` requests equally sharing
/// `bandwidth_hz`, sending `power_w` over gain `h`.
pub fn shannon_rate_bps(bandwidth_hz: f64, sharers: usize, power_w: f64, h: f64) -> f64 {
    let b = bandwidth_hz / sharers.max(1) as f64;
    b * (1.0 + power_w * h / (N0_W_PER_HZ * b)).log2()
}

/// [`shannon_rate_bps`] of a request at squared distance `d2_m2` (m²) from
/// the server: what the scheduler computes for every request and server.
pub fn uplink_rate_bps(bandwidth_hz: f64, sharers: usize, power_w: f64, d2_m2: f64) -> f64 {
    shannon_rate_bps(
        bandwidth_hz,
        sharers,
        power_w,
        gain_at_squared_distance(d2_m2),
    )
}

/// Upload time of `input_len` tokens at `rate_bps`, whole nanoseconds
/// (rounded up: the last bit must have arrived).
pub fn upload_ns(input_len: u32, rate_bps: f64) -> u64 {
    if rate_bps.is_nan() || rate_bps <= 0.0 {
        return u64::MAX;
    }
    (input_len as f64 * BITS_PER_TOKEN / rate_bps * 1e9).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_rate_and_upload() {
        // d = 100 m: PL = 128.1 + 37.6·log10(0.1) = 90.5 dB.
        assert!((path_loss_db(100.0) - 90.5).abs() < 1e-12);
        assert_eq!(path_loss_db(1.0), path_loss_db(10.0));
        let h = channel_gain(100.0); // 10^-9.05
        assert!((h - 8.912_509_381_337_459e-10).abs() < 1e-22);
        // p = 20 dBm = 0.1 W; B = 10 MHz shared by 4 → 2.5 MHz.
        // N0 = 10^-20.4 W/Hz = 3.981e-21; N0·B = 9.953e-15 W.
        // SNR = 0.1 × 8.91251e-10 / 9.95268e-15 = 8954.88 → log2(8955.88) = 13.1286
        // R = 2.5e6 × 13.1286 = 32.82 Mb/s.
        let r = shannon_rate_bps(10e6, 4, dbm_to_w(20.0), h);
        let snr = 0.1 * h / (10f64.powf(-20.4) * 2.5e6);
        assert!((snr - 8954.88).abs() < 0.01, "{snr}");
        assert!((r - 2.5e6 * (1.0 + snr).log2()).abs() < 1e-6);
        assert!((r / 1e6 - 32.82).abs() < 0.01, "{r}");
        // 70 tokens × 16 bits = 1120 bits → 34.13 µs, rounded up to the ns.
        let t = upload_ns(70, r);
        assert_eq!(t, (1120.0 / r * 1e9).ceil() as u64);
        assert!((t as f64 / 1e3 - 34.13).abs() < 0.01, "{t}");
        // More sharers → lower rate each.
        assert!(shannon_rate_bps(10e6, 8, 0.1, h) < r);
        assert_eq!(upload_ns(10, 0.0), u64::MAX);
    }

    #[test]
    fn uplink_rate_is_the_shannon_rate_at_the_distance() {
        for d in [0.0, 3.0, 10.0, 37.5, 100.0, 512.0, 1000.0, 2500.0] {
            for (b, n, p) in [(6e6, 1, 0.03), (14e6, 4, 0.3)] {
                let by_gain = shannon_rate_bps(b, n, p, channel_gain(d));
                let by_d2 = uplink_rate_bps(b, n, p, d * d);
                assert!(
                    (by_d2 / by_gain - 1.0).abs() < 1e-12,
                    "{d} m: {by_d2} vs {by_gain}"
                );
            }
        }
    }

    #[test]
    fn closed_forms_match_the_db_definitions() {
        assert!((N0_W_PER_HZ / dbm_to_w(N0_DBM_HZ) - 1.0).abs() < 1e-14);
        for d in [1.0, 10.0, 37.5, 100.0, 512.0, 1000.0, 2500.0] {
            let by_db = 10f64.powf(-path_loss_db(d) / 10.0);
            assert!((channel_gain(d) / by_db - 1.0).abs() < 1e-12, "{d} m");
        }
    }
}
