//! [`DeliveryLog`]: in-order bytes read by the receiving application, over time.

/// A step function: `(t_ns, total)` points with strictly increasing totals
/// and non-decreasing times; before the first point nothing was read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeliveryLog {
    steps: Vec<(u64, u64)>,
}

impl DeliveryLog {
    /// Records that `total` bytes had been read by `t_ns`; ignores totals
    /// that do not grow.
    pub fn record(&mut self, t_ns: u64, total: u64) {
        let last_total = self.steps.last().map_or(0, |&(_, b)| b);
        if total <= last_total {
            return;
        }
        match self.steps.last_mut() {
            Some(last) if last.0 == t_ns => last.1 = total,
            _ => self.steps.push((t_ns, total)),
        }
    }

    /// In-order bytes read by `t_ns` (inclusive).
    pub fn delivered_at(&self, t_ns: u64) -> u64 {
        let n = self.steps.partition_point(|&(t, _)| t <= t_ns);
        n.checked_sub(1).map_or(0, |i| self.steps[i].1)
    }

    /// The first time at least `bytes` had been read.
    pub fn time_of(&self, bytes: u64) -> Option<u64> {
        let i = self.steps.partition_point(|&(_, b)| b < bytes);
        self.steps.get(i).map(|&(t, _)| t)
    }

    /// The recorded points.
    pub fn steps(&self) -> &[(u64, u64)] {
        &self.steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_function_lookups() {
        let mut log = DeliveryLog::default();
        log.record(5, 0);
        log.record(10, 100);
        log.record(10, 150);
        log.record(20, 150);
        log.record(30, 400);
        assert_eq!(log.steps(), &[(10, 150), (30, 400)]);
        assert_eq!(log.delivered_at(9), 0);
        assert_eq!(log.delivered_at(10), 150);
        assert_eq!(log.delivered_at(29), 150);
        assert_eq!(log.delivered_at(u64::MAX), 400);
        assert_eq!(log.time_of(0), Some(10));
        assert_eq!(log.time_of(151), Some(30));
        assert_eq!(log.time_of(401), None);
    }
}
