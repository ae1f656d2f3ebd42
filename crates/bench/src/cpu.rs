//! CPU time from procfs: the whole machine (`/proc/stat`) and one process
//! (`/proc/<pid>/stat`), in clock ticks.
//!
//! XDP programs run in softirq context and are charged to the `softirq` column of
//! `/proc/stat` (and, on a kernel without `CONFIG_IRQ_TIME_ACCOUNTING`, also to whichever task
//! the softirq interrupted), never specifically to the replica that owns them: per-process time
//! alone under-counts a data plane in XDP, so the benchmark reports both.

use std::fs;

/// The machine's CPU time summed over CPUs (the `cpu` line of `/proc/stat`), in clock ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MachineCpu {
    /// Every non-idle state: user, nice, system, irq, softirq, steal (guest time is already
    /// part of user and nice).
    pub busy: u64,
    /// The softirq column alone (where XDP and the network stack's receive path are charged).
    pub softirq: u64,
    /// idle + iowait.
    pub idle: u64,
}

/// Parses the text of `/proc/stat`.
pub fn parse_proc_stat(text: &str) -> Result<MachineCpu, String> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))
        .ok_or("/proc/stat has no `cpu` line")?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse::<u64>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("/proc/stat: bad `cpu` line `{line}`: {e}"))?;
    if f.len() < 7 {
        return Err(format!("/proc/stat: short `cpu` line `{line}`"));
    }
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal guest guest_nice
    Ok(MachineCpu {
        busy: at(0) + at(1) + at(2) + at(5) + at(6) + at(7),
        softirq: at(6),
        idle: at(3) + at(4),
    })
}

/// Parses the text of `/proc/<pid>/stat`: user + system time of the process (all its threads,
/// fields 14 and 15), in clock ticks. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_pid_stat(text: &str) -> Result<u64, String> {
    let rest = text
        .rfind(')')
        .map(|i| &text[i + 1..])
        .ok_or("not a /proc/<pid>/stat line (no `)`)")?;
    // After `)`: field 3 (state) is index 0, so utime (14) is index 11 and stime (15) index 12.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| -> Result<u64, String> {
        f.get(i)
            .ok_or_else(|| format!("/proc/<pid>/stat: only {} fields after the name", f.len()))?
            .parse::<u64>()
            .map_err(|e| format!("/proc/<pid>/stat: field {}: {e}", i + 3))
    };
    Ok(num(11)? + num(12)?)
}

/// The machine's CPU time now.
pub fn machine() -> Result<MachineCpu, String> {
    parse_proc_stat(&fs::read_to_string("/proc/stat").map_err(|e| format!("/proc/stat: {e}"))?)
}

/// User + system time of process `pid` so far, in clock ticks.
pub fn process(pid: u32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/stat");
    parse_pid_stat(&fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?)
}

/// User + system time of the processes `pids` that still run, summed, in clock ticks.
pub fn processes(pids: &[u32]) -> u64 {
    pids.iter().filter_map(|&p| process(p).ok()).sum()
}

/// The share (percent of all CPUs) of `busy` ticks, out of `busy + idle`, not spent by `ours`.
pub fn background_pct(busy: u64, idle: u64, ours: u64) -> Option<f64> {
    let all = busy + idle;
    (all > 0).then(|| busy.saturating_sub(ours) as f64 * 100.0 / all as f64)
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// Microseconds of CPU per operation for `ticks` clock ticks spent on `ops` operations;
/// `None` without operations.
pub fn us_per_op(ticks: u64, ops: u64) -> Option<f64> {
    (ops > 0).then(|| ticks as f64 * 1e6 / ticks_per_second() as f64 / ops as f64)
}

/// Microseconds of the machine's busy CPU per operation between two readings of
/// [`machine`]; `None` if either reading failed or without operations.
pub fn machine_us_per_op(
    before: Option<MachineCpu>,
    after: Option<MachineCpu>,
    ops: u64,
) -> Option<f64> {
    us_per_op(after?.busy.saturating_sub(before?.busy), ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat() {
        let text = "cpu  930621 672 523537 524140 7405 3 71224 1191 50 0\n\
                    cpu0 465000 300 260000 262000 3700 1 35000 600 0 0\n\
                    intr 1 2 3\n";
        let m = parse_proc_stat(text).unwrap();
        assert_eq!(m.busy, 930621 + 672 + 523537 + 3 + 71224 + 1191);
        assert_eq!(m.softirq, 71224);
        assert_eq!(m.idle, 524140 + 7405);
        // An old kernel's shorter line still parses.
        assert_eq!(
            parse_proc_stat("cpu 1 2 3 4 5 6 7\n").unwrap().busy,
            1 + 2 + 3 + 6 + 7
        );
        assert!(parse_proc_stat("cpu0 1 2 3 4 5 6 7\n").is_err());
        assert!(parse_proc_stat("cpu 1 2 x 4 5 6 7\n").is_err());
        assert!(parse_proc_stat("cpu 1 2 3\n").is_err());
    }

    #[test]
    fn pid_stat() {
        // A command name with a space and a parenthesis.
        let text = "4242 (way (runner) S 1 4242 4242 0 -1 4194560 500 0 0 0 1234 567 0 0 20 0 \
                    9 0 12345 1000000 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0\n";
        assert_eq!(parse_pid_stat(text).unwrap(), 1234 + 567);
        assert!(parse_pid_stat("4242 (x) S 1 2").is_err());
        assert!(parse_pid_stat("no name here").is_err());
    }

    #[test]
    fn this_process_and_machine() {
        // Reading real procfs works (values are not asserted: no timing in tests).
        machine().unwrap();
        process(std::process::id()).unwrap();
        assert_eq!(us_per_op(0, 0), None);
        let at = |busy| {
            Some(MachineCpu {
                busy,
                ..MachineCpu::default()
            })
        };
        assert_eq!(machine_us_per_op(at(10), at(30), 4), us_per_op(20, 4));
        assert_eq!(machine_us_per_op(None, at(30), 4), None);
        assert_eq!(machine_us_per_op(at(10), at(30), 0), None);
        assert!(processes(&[std::process::id(), u32::MAX]) >= process(std::process::id()).unwrap());
        assert_eq!(background_pct(50, 150, 30), Some(10.0));
        assert_eq!(background_pct(50, 150, 80), Some(0.0));
        assert_eq!(background_pct(0, 0, 0), None);
        assert!(us_per_op(ticks_per_second(), 1_000).unwrap() > 999.0);
    }
}
