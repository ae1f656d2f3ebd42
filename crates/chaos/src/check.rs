//! Running the linearizability checker, `tools/lincheck` (Go, Porcupine), on a history file.
//!
//! [`build_checker`] builds it once per process with `go build` (which fetches Porcupine
//! through the Go module proxy on a fresh machine, as pinned by `tools/lincheck/go.sum`);
//! [`check`] runs it. Set `WAVERUNNER_LINCHECK` to a prebuilt `lincheck` binary to skip the
//! build.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

/// The checker's answer about one history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// `Some(true)`: linearizable; `Some(false)`: not; `None`: the checker timed out.
    pub linearizable: Option<bool>,
    /// Operations given to Porcupine (after leaving out failed ones and unknown reads).
    pub ops: usize,
    /// Keys checked.
    pub keys: usize,
    /// Everything else the checker said: the failing keys, where the visualization is, counts.
    pub message: String,
}

/// How long [`check`] lets Porcupine search before answering unknown.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The repository this crate was built from (holds `tools/lincheck`).
pub fn default_repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `go` command: on PATH, else where Go's own installer and Debian put it; `Err` says how
/// to install it.
pub fn go_tool() -> Result<PathBuf, String> {
    let on_path = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if on_path {
        return Ok(PathBuf::from("go"));
    }
    ["/usr/local/go/bin/go", "/usr/lib/go/bin/go"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "the Go toolchain (`go`) is not installed or not on PATH; it builds the \
             linearizability checker tools/lincheck (Porcupine). Run scripts/install-deps.sh \
             (as root it installs golang), or install Go 1.19 or newer yourself (Debian: \
             apt-get install golang-go)"
                .to_string()
        })
}

fn target_dir(repo_root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if Path::new(&dir).is_absolute() => PathBuf::from(dir),
        Some(dir) => repo_root.join(dir),
        None => repo_root.join("target"),
    }
}

/// Checkers built by this process: (repo root, binary).
static BUILT: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());

/// Builds `tools/lincheck` into `<cargo target dir>/lincheck` (`$CARGO_TARGET_DIR`, else
/// `<repo_root>/target`) and returns its path. Runs `go build` once per process and repo;
/// later calls return the same path.
pub fn build_checker(repo_root: &Path) -> Result<PathBuf, String> {
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, bin)) = built.iter().find(|(root, _)| root == repo_root) {
        return Ok(bin.clone());
    }
    let src = repo_root.join("tools/lincheck");
    if !src.join("go.mod").is_file() {
        return Err(format!(
            "{} has no go.mod: not a Waverunner checkout?",
            src.display()
        ));
    }
    let go = go_tool()?;
    let target = target_dir(repo_root);
    std::fs::create_dir_all(&target).map_err(|e| format!("creating {}: {e}", target.display()))?;
    let target = target
        .canonicalize()
        .map_err(|e| format!("{}: {e}", target.display()))?;
    let bin = target.join("lincheck");
    let out = Command::new(&go)
        .arg("build")
        .arg("-o")
        .arg(&bin)
        .arg(".")
        .current_dir(&src)
        .output()
        .map_err(|e| format!("running {} build: {e}", go.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`go build -o {} ./tools/lincheck` failed ({}):\n{}\n(on a fresh machine go \
             downloads github.com/anishathalye/porcupine, pinned in tools/lincheck/go.sum, \
             through the Go module proxy: it must be reachable, or the module already in the \
             module cache)",
            bin.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    built.push((repo_root.to_path_buf(), bin.clone()));
    Ok(bin)
}

/// The checker binary: `$WAVERUNNER_LINCHECK` if set, else built from this repository.
pub fn checker_path() -> Result<PathBuf, String> {
    match std::env::var_os("WAVERUNNER_LINCHECK") {
        Some(p) => Ok(PathBuf::from(p)),
        None => build_checker(&default_repo_root()),
    }
}

/// Checks `history` for linearizability with [`DEFAULT_TIMEOUT`]; if it is not
/// linearizable, Porcupine's visualization of the failing keys is written to `html`.
///
/// `Err` when the checker cannot be built or run, or refuses the history (malformed).
pub fn check(history: &Path, html: &Path) -> Result<Verdict, String> {
    check_with(&checker_path()?, history, html, DEFAULT_TIMEOUT)
}

/// [`check`] with a given checker binary and timeout (`Duration::ZERO`: no limit).
pub fn check_with(
    checker: &Path,
    history: &Path,
    html: &Path,
    timeout: Duration,
) -> Result<Verdict, String> {
    let out = Command::new(checker)
        .arg("-history")
        .arg(history)
        .arg("-html")
        .arg(html)
        .arg("-timeout")
        .arg(format!("{}ms", timeout.as_millis()))
        .output()
        .map_err(|e| format!("running {}: {e}", checker.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("linearizable="));
    let Some(summary) = summary else {
        return Err(format!(
            "lincheck {} ({}): {}",
            history.display(),
            out.status,
            stderr.trim()
        ));
    };
    let verdict = parse_summary(summary)
        .ok_or_else(|| format!("lincheck printed an unexpected summary: {summary:?}"))?;
    let expected_code = match verdict.0 {
        Some(true) => 0,
        Some(false) => 1,
        None => 2,
    };
    if out.status.code() != Some(expected_code) {
        return Err(format!(
            "lincheck printed {summary:?} but exited with {}: {}",
            out.status,
            stderr.trim()
        ));
    }
    let mut message: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.starts_with("linearizable="))
        .collect();
    message.extend(stderr.lines());
    Ok(Verdict {
        linearizable: verdict.0,
        ops: verdict.1,
        keys: verdict.2,
        message: message.join("\n"),
    })
}

/// `linearizable=yes|no|unknown ops=N keys=K`
fn parse_summary(line: &str) -> Option<(Option<bool>, usize, usize)> {
    let mut fields = line.split_whitespace();
    let lin = match fields.next()?.strip_prefix("linearizable=")? {
        "yes" => Some(true),
        "no" => Some(false),
        "unknown" => None,
        _ => return None,
    };
    let ops = fields.next()?.strip_prefix("ops=")?.parse().ok()?;
    let keys = fields.next()?.strip_prefix("keys=")?.parse().ok()?;
    if fields.next().is_some() {
        return None;
    }
    Some((lin, ops, keys))
}

#[cfg(test)]
mod tests {
    use super::parse_summary;

    #[test]
    fn summary_line() {
        assert_eq!(
            parse_summary("linearizable=yes ops=12 keys=3"),
            Some((Some(true), 12, 3))
        );
        assert_eq!(
            parse_summary("linearizable=no ops=0 keys=0"),
            Some((Some(false), 0, 0))
        );
        assert_eq!(
            parse_summary("linearizable=unknown ops=7 keys=1"),
            Some((None, 7, 1))
        );
        assert_eq!(parse_summary("linearizable=maybe ops=7 keys=1"), None);
        assert_eq!(parse_summary("linearizable=yes ops=7"), None);
    }
}
