//! Compiles the fast-path C handler (`c/handler.c`) into a static library
//! linked into this crate, with every warning an error.

fn main() {
    for f in [
        "handler.c",
        "handler.h",
        "wire.h",
        "registers.h",
        "types.h",
        "payload.h",
    ] {
        println!("cargo:rerun-if-changed=c/{f}");
    }
    cc::Build::new()
        .file("c/handler.c")
        .include("c")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .flag("-Wall")
        .flag("-Wextra")
        .flag("-Werror")
        .flag_if_supported("-std=gnu11")
        .compile("waverunner_fastpath");
}
