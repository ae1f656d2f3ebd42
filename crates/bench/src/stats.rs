//! Quantiles of latency samples and of the replicas' log-linear histograms.

use waverunner_client::load::quantile_sorted;
use waverunner_dataplane::LatencyHistogram;

/// Three quantiles of a latency distribution, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quantiles {
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// How many observations they were taken from.
    pub count: u64,
}

/// The median of a few measurements (the upper one of an even count); `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// p50, p90 and p99 of `samples` (sorted here); `None` when empty.
pub fn quantiles(samples: &mut [u64]) -> Option<Quantiles> {
    samples.sort_unstable();
    Some(Quantiles {
        p50: quantile_sorted(samples, 0.50)?,
        p90: quantile_sorted(samples, 0.90)?,
        p99: quantile_sorted(samples, 0.99)?,
        count: samples.len() as u64,
    })
}

/// The observations between two readings of a cumulative histogram (`after − before`, bucket
/// by bucket; a bucket missing on either side counts as 0, and a counter that went backwards —
/// the replica restarted — as 0).
pub fn histogram_delta(before: &[u64], after: &[u64]) -> LatencyHistogram {
    let buckets = after
        .iter()
        .enumerate()
        .map(|(i, a)| a.saturating_sub(before.get(i).copied().unwrap_or(0)))
        .collect();
    LatencyHistogram { buckets }
}

/// p50, p90 and p99 of a histogram (each the floor of its bucket, so up to a quarter below the
/// true value); `None` when it is empty.
pub fn histogram_quantiles(h: &LatencyHistogram) -> Option<Quantiles> {
    let count = h.count();
    (count > 0).then(|| Quantiles {
        p50: h.quantile(0.50),
        p90: h.quantile(0.90),
        p99: h.quantile(0.99),
        count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use waverunner_dataplane::bucket_of;

    #[test]
    fn median_of_measurements() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(3.0), "the upper of two");
    }

    #[test]
    fn nearest_rank() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        let q = quantiles(&mut v).unwrap();
        assert_eq!((q.p50, q.p90, q.p99, q.count), (50, 90, 99, 100));
        assert!(quantiles(&mut []).is_none());
    }

    #[test]
    fn histogram_difference() {
        let mut before = vec![0u64; 160];
        let mut after = vec![0u64; 160];
        before[bucket_of(1_000)] = 5; // observed before the window: not counted
        after[bucket_of(1_000)] = 5;
        after[bucket_of(9_000)] = 90;
        after[bucket_of(40_000)] = 10;
        let d = histogram_delta(&before, &after);
        let q = histogram_quantiles(&d).unwrap();
        assert_eq!(q.count, 100);
        assert!(q.p50 <= 9_000 && q.p50 * 5 / 4 > 9_000, "p50 {}", q.p50);
        assert!(q.p99 <= 40_000 && q.p99 * 5 / 4 > 40_000, "p99 {}", q.p99);
        // A shorter "before" (an empty histogram is an empty vector) and a counter that went
        // backwards.
        let d = histogram_delta(&[3], &after);
        assert_eq!(d.count(), 105);
        assert!(histogram_quantiles(&histogram_delta(&after, &before)).is_none());
        assert!(histogram_quantiles(&histogram_delta(&[], &[])).is_none());
    }
}
