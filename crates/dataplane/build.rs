//! Compiles the XDP data plane (`bpf/waverunner.bpf.c`, which includes the fast-path handler of
//! `crates/fastpath/c`) with clang and generates its libbpf skeleton into
//! `$OUT_DIR/waverunner.skel.rs`, which `src/xdp.rs` includes: maps, programs and the BPF
//! globals (`.bss`, the registers) as typed Rust. Only with the `xdp` feature.

#[cfg(not(feature = "xdp"))]
fn main() {}

#[cfg(feature = "xdp")]
fn main() {
    use libbpf_cargo::SkeletonBuilder;
    use std::path::PathBuf;

    let src = "bpf/waverunner.bpf.c";
    for dep in [
        src,
        "bpf/wr_parse.h",
        "bpf/wr_maps.h",
        "bpf/wr_csum.h",
        "bpf/wr_ring.h",
        "bpf/wr_latency.h",
        "../fastpath/c/handler.h",
        "../fastpath/c/registers.h",
        "../fastpath/c/wire.h",
        "../fastpath/c/types.h",
        "../fastpath/c/payload.h",
    ] {
        println!("cargo:rerun-if-changed={dep}");
    }
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());

    // <asm/types.h> lives in the multiarch include directory, which clang does not search for
    // the bpf target. The skeleton builder adds `-g -O2 -target bpf` itself.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = format!("-I/usr/include/{arch}-linux-gnu");

    let result = SkeletonBuilder::new()
        .source(src)
        .obj(out.join("waverunner.bpf.o"))
        .clang(&clang)
        // -mcpu=v3: atomic exchange (the ring wake-up flag, wr_ring.h); Linux 5.12+.
        .clang_args(["-Wall", "-Werror", "-mcpu=v3", multiarch.as_str()])
        .build_and_generate(out.join("waverunner.skel.rs"));
    if let Err(e) = result {
        panic!(
            "waverunner-dataplane: compiling {src} with `{clang} -target bpf` failed: {e:#}\n\
             It needs the Debian packages `clang`, `libbpf-dev` (<bpf/bpf_helpers.h>) and \
             `linux-libc-dev` (<linux/bpf.h>): run scripts/install-deps.sh"
        );
    }
}
