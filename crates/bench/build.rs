//! Compiles `bpf/echo.bpf.c` (the XDP echo of the floor measurement) with clang into
//! `$OUT_DIR/echo.bpf.o`, which `src/floor.rs` embeds and loads with libbpf-rs.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "bpf/echo.bpf.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("echo.bpf.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    // clang does not search the multiarch include directory (<asm/types.h>) for the bpf target.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg(format!("-I/usr/include/{arch}-linux-gnu"))
        .args(["-c", src, "-o"])
        .arg(&out)
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "waverunner-bench: cannot run `{clang}` ({e}) to compile {src}: install clang \
                 (scripts/install-deps.sh) or set CLANG"
            )
        });
    assert!(
        status.success(),
        "waverunner-bench: `{clang} -target bpf` failed on {src} ({status}); it needs clang, \
         libbpf-dev and linux-libc-dev (scripts/install-deps.sh)"
    );
}
