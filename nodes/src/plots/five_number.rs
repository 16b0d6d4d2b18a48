//! Box-plot five-number summaries, with the quartiles and median taken by the
//! workspace's one percentile definition ([`edgemu_stats::percentile`],
//! nearest rank).

use edgemu_stats::{percentile, sorted_finite};

/// Box-plot summary: whiskers at the most extreme values within 1.5 IQR of the box.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FiveNumber {
    pub low_whisker: f64,
    pub q1: f64,
    pub median: f64,
    pub q3: f64,
    pub high_whisker: f64,
}

impl FiveNumber {
    /// The summary of the finite `values`; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Self> {
        let s = sorted_finite(values);
        let q1 = percentile(&s, 25.0)?;
        let median = percentile(&s, 50.0)?;
        let q3 = percentile(&s, 75.0)?;
        let iqr = q3 - q1;
        let low_whisker = s
            .iter()
            .copied()
            .find(|&x| x >= q1 - 1.5 * iqr)
            .unwrap_or(q1);
        let high_whisker = s
            .iter()
            .rev()
            .copied()
            .find(|&x| x <= q3 + 1.5 * iqr)
            .unwrap_or(q3);
        Some(Self {
            low_whisker,
            q1,
            median,
            q3,
            high_whisker,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_of_measured_values() {
        let b = FiveNumber::of(&[4.0, f64::NAN, 1.0, 3.0, 2.0, 100.0]).unwrap();
        assert_eq!((b.q1, b.median, b.q3), (2.0, 3.0, 4.0));
        assert_eq!((b.low_whisker, b.high_whisker), (1.0, 4.0)); // 100 is an outlier
                                                                 // Nearest rank: the quartiles of 1..=8 are the 2nd and 6th values.
        let b = FiveNumber::of(&(1..=8).map(f64::from).collect::<Vec<_>>()).unwrap();
        assert_eq!((b.q1, b.median, b.q3), (2.0, 4.0, 6.0));
        assert_eq!(FiveNumber::of(&[f64::NAN]), None);
    }
}
