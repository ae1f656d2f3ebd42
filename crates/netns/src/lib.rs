//! Network namespaces, the one module the cluster launcher, the benchmarks and the chaos
//! harness share: the `ip` command, entering a namespace, running code inside one, and
//! removing what a run left behind.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;

/// Runs `cmd ARGS` and returns its standard output, or an error naming the command and
/// carrying its standard error.
pub fn command(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound && cmd == "ip" {
            "the `ip` command is missing: install iproute2 (apt-get install iproute2)".to_string()
        } else {
            format!("cannot run `{cmd} {}`: {e}", args.join(" "))
        }
    })?;
    if !out.status.success() {
        return Err(format!(
            "`{cmd} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `ip ARGS` and returns its standard output, or an error naming the command.
pub fn ip(args: &[&str]) -> Result<String, String> {
    command("ip", args)
}

/// Where `ip netns` keeps namespace `ns`.
pub fn path(ns: &str) -> PathBuf {
    PathBuf::from("/run/netns").join(ns)
}

/// Whether namespace `ns` exists.
pub fn exists(ns: &str) -> bool {
    path(ns).exists()
}

/// Opens namespace `ns`, to enter it later ([`enter_file`]).
pub fn open(ns: &str) -> Result<File, String> {
    File::open(path(ns)).map_err(|e| format!("network namespace {ns}: {}: {e}", path(ns).display()))
}

/// Moves the calling thread into the namespace `file` refers to (`ns` names it in errors).
pub fn enter_file(file: &File, ns: &str) -> Result<(), String> {
    // SAFETY: setns on a descriptor we own; it changes only the calling thread's namespace.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!(
            "setns into network namespace {ns}: {} (needs root)",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Moves the calling thread into network namespace `ns` (a name of `ip netns`). Sockets the
/// thread opens afterwards belong to that namespace; other threads are not affected.
pub fn enter(ns: &str) -> Result<(), String> {
    enter_file(&open(ns)?, ns)
}

/// Runs `f` on a scoped thread inside network namespace `ns` (it may borrow from the caller)
/// and returns what it returns; the calling thread's namespace is untouched.
pub fn run_in_scoped<T, E, F>(ns: &str, f: F) -> Result<T, E>
where
    T: Send,
    E: Send + From<String>,
    F: FnOnce() -> Result<T, E> + Send,
{
    let file = open(ns)?;
    std::thread::scope(|s| {
        s.spawn(move || {
            enter_file(&file, ns)?;
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(format!("the thread in network namespace {ns} panicked").into()))
    })
}

/// Runs `f` on a new thread inside network namespace `ns` and returns what it returns.
pub fn run_in<T, F>(ns: &str, f: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, String> + Send + 'static,
{
    let ns2 = ns.to_string();
    std::thread::Builder::new()
        .name(format!("in-{ns}"))
        .spawn(move || {
            enter(&ns2)?;
            f()
        })
        .map_err(|e| format!("cannot start a thread: {e}"))?
        .join()
        .map_err(|_| format!("the thread in network namespace {ns} panicked"))?
}

/// The index of interface `name` in the calling thread's network namespace.
pub fn ifindex(name: &str) -> Result<i32, String> {
    let c = std::ffi::CString::new(name).map_err(|_| format!("bad interface name {name:?}"))?;
    // SAFETY: a valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(format!(
            "no interface {name}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(i as i32)
}

/// Our network namespaces that exist now: those whose name starts with `prefix`.
pub fn namespaces_with_prefix(prefix: &str) -> Result<Vec<String>, String> {
    Ok(ip(&["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(String::from)
        .collect())
}

/// Links of the host namespace whose name starts with `prefix`.
pub fn links_with_prefix(prefix: &str) -> Result<Vec<String>, String> {
    // `ip -o link show` lines look like `7: wrb-near@if2: <BROADCAST,…> …`.
    Ok(ip(&["-o", "link", "show"])?
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .filter(|n| n.starts_with(prefix))
        .collect())
}

/// Whether the calling process is root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Removes the namespaces and links whose names start with `prefix`, refusing when a process
/// still runs in one of those namespaces (another run is going on).
pub fn remove_leftovers(prefix: &str) -> Result<(), String> {
    let namespaces = namespaces_with_prefix(prefix)?;
    for ns in &namespaces {
        let pids = ip(&["netns", "pids", ns])?;
        if !pids.trim().is_empty() {
            return Err(format!(
                "network namespace {ns} still has processes ({}): another run is going on?",
                pids.split_whitespace().collect::<Vec<_>>().join(" ")
            ));
        }
    }
    for ns in &namespaces {
        ip(&["netns", "del", ns])?;
    }
    for link in links_with_prefix(prefix)? {
        match ip(&["link", "del", &link]) {
            Err(e) if !e.contains("Cannot find device") => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Creates bridge `name` in the host namespace and sets it up. Multicast snooping is off, so
/// the bridge floods multicast to every port (the data plane's fan-out, docs/dataplane.md).
pub fn add_bridge(name: &str) -> Result<(), String> {
    ip(&["link", "add", name, "type", "bridge", "mcast_snooping", "0"])?;
    ip(&["link", "set", name, "up"])?;
    Ok(())
}

/// Creates namespace `ns` with a veth pair: the host end, named `ns`, on `bridge` and up; the
/// namespace end `eth0` with address `addr` (/24), MAC `mac` if given, up, and `lo` up.
pub fn add_host(
    ns: &str,
    bridge: &str,
    addr: std::net::Ipv4Addr,
    mac: Option<&str>,
) -> Result<(), String> {
    ip(&["netns", "add", ns])?;
    ip(&[
        "link", "add", ns, "type", "veth", "peer", "name", "eth0", "netns", ns,
    ])?;
    ip(&["link", "set", ns, "master", bridge])?;
    ip(&["link", "set", ns, "up"])?;
    if let Some(mac) = mac {
        ip(&["-n", ns, "link", "set", "eth0", "address", mac])?;
    }
    let cidr = format!("{addr}/24");
    ip(&["-n", ns, "addr", "add", &cidr, "dev", "eth0"])?;
    ip(&["-n", ns, "link", "set", "lo", "up"])?;
    ip(&["-n", ns, "link", "set", "eth0", "up"])?;
    Ok(())
}

/// Namespaces on one bridge in the host namespace, every name starting with one prefix: a
/// benchmark's testbed. Created after removing a leftover one; removed by
/// [`Bridged::remove`] or, failing that, when dropped (also on error and panic).
pub struct Bridged {
    prefix: &'static str,
    removed: bool,
}

impl Bridged {
    /// Removes what a run with `prefix` left, then creates `bridge` and a namespace per host
    /// (name, address, MAC), each on the bridge ([`add_host`]). A failure removes what was
    /// made.
    pub fn create(
        prefix: &'static str,
        bridge: &str,
        hosts: &[(&str, std::net::Ipv4Addr, Option<&str>)],
    ) -> Result<Bridged, String> {
        for name in std::iter::once(bridge).chain(hosts.iter().map(|h| h.0)) {
            assert!(
                name.starts_with(prefix),
                "{name} does not start with {prefix}"
            );
        }
        remove_leftovers(prefix)?;
        let made = Bridged {
            prefix,
            removed: false,
        };
        add_bridge(bridge)?;
        for &(ns, addr, mac) in hosts {
            add_host(ns, bridge, addr, mac)?;
        }
        Ok(made)
    }

    /// Removes the namespaces and links now (their veths and the programs attached to them go
    /// with them); what could not be removed.
    pub fn remove(&mut self) -> Result<(), String> {
        self.removed = true;
        remove_leftovers(self.prefix)
    }
}

impl Drop for Bridged {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        if let Err(e) = self.remove() {
            eprintln!(
                "removing the `{}*` namespaces and links failed: {e}; remove them by hand \
                 (`ip netns del …`, `ip link del …`)",
                self.prefix
            );
        }
    }
}
