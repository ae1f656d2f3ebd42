//! The XDP program passes the verifier and starts disabled: everything goes to the host.

mod xdp_common;

use waverunner_dataplane::xdp::XDP_PASS;
use xdp_common::*;

#[test]
fn xdp_program_loads_and_passes_while_disabled() {
    if !root_or_skip("xdp_program_loads_and_passes_while_disabled") {
        return;
    }
    let prog = load(b"ok");
    let regs = prog.read_registers();
    assert_eq!(regs.enabled, 0);
    let mut pkt = Vec::new();
    waverunner_fastpath::Header::of(waverunner_fastpath::MsgType::ClientRequest)
        .encode(&[], &mut pkt);
    let r = prog.test_run(&frame_from_peer(&pkt)).expect("test run");
    assert_eq!(r.verdict, XDP_PASS);
    assert_eq!(prog.counters().punted, 1);
    // Not ours at all: another port.
    let mut f = frame_from_peer(&pkt);
    f[36..38].copy_from_slice(&9999u16.to_be_bytes());
    assert_eq!(prog.test_run(&f).expect("test run").verdict, XDP_PASS);
    assert_eq!(prog.counters().punted, 1);
    // Ours but garbage.
    let r = prog.test_run(&frame_from_peer(b"hello")).expect("test run");
    assert_eq!(r.verdict, XDP_PASS);
    assert_eq!(prog.counters().malformed, 1);
}
