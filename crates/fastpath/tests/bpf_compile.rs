//! The handler must stay acceptable to `clang -target bpf` (the XDP program includes it).

use std::process::Command;

#[test]
fn handler_compiles_for_bpf() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let obj =
        std::env::temp_dir().join(format!("waverunner-fastpath-{}.bpf.o", std::process::id()));
    let run = Command::new("clang")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-target", "bpf", "-c"])
        .arg(format!("{dir}/c/handler.c"))
        .arg("-o")
        .arg(&obj)
        .output();
    let out = match run {
        Ok(out) => out,
        Err(e) => {
            eprintln!("SKIPPED: clang not found ({e}); the BPF compile check did not run");
            return;
        }
    };
    let _ = std::fs::remove_file(&obj);
    assert!(
        out.status.success(),
        "clang -target bpf failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
