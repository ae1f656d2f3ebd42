//! The offered rates of the sweep and the rule that ends it.

/// The default offered rates, requests per second: from light load to past what two cores
/// can serve.
pub const DEFAULT_RATES: &[u64] = &[2_000, 5_000, 10_000, 20_000, 40_000, 80_000];

/// Growth below which throughput counts as no longer growing: the next rate must achieve at
/// least this factor of the best so far.
pub const MIN_GROWTH: f64 = 1.05;

/// Errors (failed or late requests) above this fraction end the sweep.
pub const MAX_ERROR_FRACTION: f64 = 0.01;

/// Parses a comma-separated list of rates; `k` multiplies by a thousand (`2k,5k,10000`).
/// The list must be non-empty and strictly increasing.
pub fn parse_rates(s: &str) -> Result<Vec<u64>, String> {
    let mut out: Vec<u64> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (num, mult) = match part.strip_suffix(['k', 'K']) {
            Some(n) => (n, 1_000),
            None => (part, 1),
        };
        let v = num
            .trim()
            .parse::<u64>()
            .ok()
            .and_then(|v| v.checked_mul(mult))
            .filter(|&v| v > 0)
            .ok_or_else(|| format!("`{part}` is not a rate (requests/s, e.g. 5000 or 5k)"))?;
        if out.last().is_some_and(|&l| v <= l) {
            return Err(format!(
                "rates must increase: `{part}` after {}",
                out[out.len() - 1]
            ));
        }
        out.push(v);
    }
    if out.is_empty() {
        return Err("no rates given".into());
    }
    Ok(out)
}

/// Why the sweep stops after a rate.
#[derive(Clone, Debug, PartialEq)]
pub enum Stop {
    /// More than [`MAX_ERROR_FRACTION`] of the requests failed or were late.
    Errors(f64),
    /// Throughput grew by less than [`MIN_GROWTH`] over the best so far.
    Saturated {
        /// The best achieved throughput before this rate.
        best: f64,
        /// The throughput this rate achieved.
        now: f64,
    },
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Errors(e) => write!(
                f,
                "errors {:.1}% > {:.0}%",
                e * 100.0,
                MAX_ERROR_FRACTION * 100.0
            ),
            Stop::Saturated { best, now } => write!(
                f,
                "throughput stopped growing ({now:.0}/s against {best:.0}/s before)"
            ),
        }
    }
}

/// Whether to stop after a rate that achieved `throughput` with `error_fraction` of its
/// requests failed, given the throughputs achieved before it.
pub fn should_stop(previous: &[f64], throughput: f64, error_fraction: f64) -> Option<Stop> {
    if error_fraction > MAX_ERROR_FRACTION {
        return Some(Stop::Errors(error_fraction));
    }
    let best = previous.iter().copied().fold(0.0, f64::max);
    if best > 0.0 && throughput < best * MIN_GROWTH {
        return Some(Stop::Saturated {
            best,
            now: throughput,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!(
            parse_rates("2k, 5k,10000").unwrap(),
            vec![2_000, 5_000, 10_000]
        );
        assert_eq!(parse_rates("1").unwrap(), vec![1]);
        assert!(parse_rates("").is_err());
        assert!(parse_rates("5k,2k").is_err());
        assert!(parse_rates("5k,5k").is_err());
        assert!(parse_rates("0").is_err());
        assert!(parse_rates("fast").is_err());
        assert!(parse_rates("99999999999999999999k").is_err());
    }

    #[test]
    fn stop_rule() {
        // The first rate never stops on throughput.
        assert_eq!(should_stop(&[], 2_000.0, 0.0), None);
        // Growing: go on.
        assert_eq!(should_stop(&[2_000.0], 5_000.0, 0.001), None);
        // Errors above 1%.
        assert_eq!(
            should_stop(&[2_000.0], 5_000.0, 0.02),
            Some(Stop::Errors(0.02))
        );
        // Flat or falling against the best so far, not just the last.
        assert!(matches!(
            should_stop(&[2_000.0, 9_000.0, 8_000.0], 9_200.0, 0.0),
            Some(Stop::Saturated { .. })
        ));
        assert!(matches!(
            should_stop(&[2_000.0, 9_000.0], 7_000.0, 0.0),
            Some(Stop::Saturated { .. })
        ));
        assert_eq!(should_stop(&[2_000.0, 9_000.0], 9_500.0, 0.0), None);
    }
}
