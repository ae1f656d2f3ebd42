//! Compiles the BPF program of `waverunner_chaos::net` (`bpf/net_chaos.bpf.c`) with clang into
//! `$OUT_DIR/net_chaos.bpf.o`, which `src/net.rs` embeds and loads with libbpf-rs.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "bpf/net_chaos.bpf.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("net_chaos.bpf.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());

    // <asm/types.h> lives in the multiarch include directory, which clang does not search for
    // the bpf target.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = format!("/usr/include/{arch}-linux-gnu");

    let mut cmd = Command::new(&clang);
    cmd.args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg(format!("-I{multiarch}"))
        .arg("-c")
        .arg(src)
        .arg("-o")
        .arg(&out);
    let status = match cmd.status() {
        Ok(s) => s,
        Err(e) => panic!(
            "waverunner-chaos: cannot run `{clang}` ({e}) to compile {src}: install the Debian \
             package `clang` (scripts/install-deps.sh), or set CLANG to a clang binary"
        ),
    };
    if !status.success() {
        panic!(
            "waverunner-chaos: `{clang} -target bpf` failed on {src} ({status}); it needs the \
             Debian packages `clang`, `libbpf-dev` (<bpf/bpf_helpers.h>) and `linux-libc-dev` \
             (<linux/bpf.h>): run scripts/install-deps.sh"
        );
    }
}
