//! Confidence intervals of a mean.

/// Mean and two-sided 95 % confidence interval `(mean, low, high)` of a
/// sample: Student t on n − 1 degrees of freedom over the standard error.
/// One value gives a zero-width interval; an empty sample gives `None`.
pub fn mean_ci95(samples: &[f64]) -> Option<(f64, f64, f64)> {
    let n = samples.len();
    if n == 0 {
        return None;
    }
    let mean = samples.iter().sum::<f64>() / n as f64;
    if n == 1 {
        return Some((mean, mean, mean));
    }
    let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let half = t975(n - 1) * (var / n as f64).sqrt();
    Some((mean, mean - half, mean + half))
}

/// The 97.5 % quantile of Student's t with `df` degrees of freedom: the
/// table to 30, then 2.00 / 1.98 / 1.96 (NaN for 0).
pub fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::NAN,
        1..=30 => T[df - 1],
        31..=60 => 2.00,
        61..=120 => 1.98,
        _ => 1.96,
    }
}

/// Means of `samples` grouped by key, in key order, non-finite values left
/// out (a key with none left gives no mean). A confidence interval must be
/// taken over units that vary independently: in a PriorityFEC grid a
/// handoff's recovered utility depends on its channel realization only, so
/// the contexts of one realization repeat one value and the interval belongs
/// over the realizations' means; task quality varies from context to
/// context, and its interval is taken over the contexts' means.
pub fn cluster_means<K: Ord>(samples: impl IntoIterator<Item = (K, f64)>) -> Vec<f64> {
    let mut by: std::collections::BTreeMap<K, (f64, usize)> = Default::default();
    for (k, v) in samples {
        if v.is_finite() {
            let e = by.entry(k).or_insert((0.0, 0));
            e.0 += v;
            e.1 += 1;
        }
    }
    by.into_values().map(|(s, n)| s / n as f64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_of_known_sample() {
        let (m, lo, hi) = mean_ci95(&[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        assert_eq!(m, 3.0);
        // sd = 1.5811, se = 0.7071, t(4) = 2.776 -> half width 1.963
        // (the normal 1.96 would give 1.386).
        assert!((hi - m - 1.963).abs() < 1e-3 && (m - lo - 1.963).abs() < 1e-3);
        assert_eq!(mean_ci95(&[2.0]), Some((2.0, 2.0, 2.0)));
        assert_eq!(mean_ci95(&[4.0, 4.0, 4.0]), Some((4.0, 4.0, 4.0)));
        assert_eq!(mean_ci95(&[]), None);
    }

    #[test]
    fn t_table_falls_to_the_normal() {
        assert_eq!(t975(1), 12.706);
        assert_eq!(t975(30), 2.042);
        assert_eq!(t975(45), 2.00);
        assert_eq!(t975(100), 1.98);
        assert_eq!(t975(1000), 1.96);
        assert!(t975(0).is_nan());
    }

    #[test]
    fn cluster_means_average_each_key_and_skip_non_finite() {
        let m = cluster_means([(2, 4.0), (1, 1.0), (2, 6.0), (1, 3.0), (3, f64::NAN)]);
        assert_eq!(m, vec![2.0, 5.0]);
        // 240 rows that repeat 5 values are 5 samples, not 240.
        let rows = (0..240).map(|i| (i % 5, (i % 5) as f64));
        let means = cluster_means(rows);
        assert_eq!(means.len(), 5);
        let (_, lo, hi) = mean_ci95(&means).unwrap();
        assert!((hi - lo) / 2.0 > 1.0, "interval over 5 clusters stays wide");
    }
}
