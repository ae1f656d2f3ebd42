//! Compiles `bpf/echo.bpf.c` (the XDP echo of the floor measurement) and `bpf/fanout.bpf.c`
//! (the fan-out measurement) with clang into `$OUT_DIR/<name>.bpf.o`, which `src/floor.rs` and
//! `src/fanout.rs` embed and load with libbpf-rs.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CLANG");
    for name in ["echo", "fanout"] {
        compile(name);
    }
}

fn compile(name: &str) {
    let src = format!("bpf/{name}.bpf.c");
    println!("cargo:rerun-if-changed={src}");
    let out =
        PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join(format!("{name}.bpf.o"));
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    // clang does not search the multiarch include directory (<asm/types.h>) for the bpf target.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg(format!("-I/usr/include/{arch}-linux-gnu"))
        .args(["-c", &src, "-o"])
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
