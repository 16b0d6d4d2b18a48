//! Location of a sample: mean and nearest-rank percentiles.

/// The `p`-th percentile (`p` in percent, clamped to 0..=100) of values
/// sorted ascending, by nearest rank: the value of rank `⌈p/100 · n⌉`
/// (rank 1 for `p` = 0). `None` when `sorted` is empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p.clamp(0.0, 100.0) / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Arithmetic mean, summed in the order given. `None` when empty.
pub fn mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    // Summed from 0.0 (a float `sum()` starts at −0.0).
    Some(values.iter().fold(0.0, |s, x| s + x) / values.len() as f64)
}

/// Finite values sorted ascending (NaN and infinities dropped).
pub fn sorted_finite(values: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_takes_measured_values() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        // Five values: P50 is the 3rd, P25 the 2nd (⌈1.25⌉), P99 the 5th.
        let s = [1.0, 2.0, 3.0, 4.0, 100.0];
        assert_eq!(percentile(&s, 50.0), Some(3.0));
        assert_eq!(percentile(&s, 25.0), Some(2.0));
        assert_eq!(percentile(&s, 99.0), Some(100.0));
        assert_eq!(
            percentile(&s, 20.0),
            Some(1.0),
            "exactly 20 % at or below 1"
        );
        assert_eq!(percentile(&s, 20.5), Some(2.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&s, 250.0), Some(100.0), "clamped");
    }

    #[test]
    fn mean_and_sorting() {
        assert_eq!(mean(&[1.0, 2.0, 6.0]), Some(3.0));
        assert_eq!(mean(&[]), None);
        assert!(mean(&[-0.0]).is_some_and(|m| m == 0.0));
        let s = sorted_finite(&[4.0, f64::NAN, 1.0, f64::INFINITY, 3.0]);
        assert_eq!(s, vec![1.0, 3.0, 4.0]);
    }
}
