//! Shared by the XDP tests: the root check and frame helpers.
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddrV4};

use waverunner_dataplane::xdp::{XdpProgram, XdpSettings};

/// True if the test may run (root). When not root: a loud SKIP, or a failure under `CI=true`.
pub fn root_or_skip(test: &str) -> bool {
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: needs root (BPF, XDP, network namespaces) and CI=true");
    }
    eprintln!();
    eprintln!("################################################################");
    eprintln!("## SKIP {test}: needs root (BPF, XDP, network namespaces).");
    eprintln!("## Run as root (CI runs as root) to exercise the XDP data plane.");
    eprintln!("################################################################");
    false
}

pub const PORT: u16 = 7100;
pub const SELF_IP: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
pub const SELF_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
pub const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);
pub const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
pub const GROUP: Ipv4Addr = Ipv4Addr::new(239, 9, 1, 2);

pub fn settings(blind_reply_body: &[u8]) -> XdpSettings {
    XdpSettings {
        port: PORT,
        self_ip: SELF_IP,
        self_mac: SELF_MAC,
        multicast: GROUP,
        blind_reply_body: blind_reply_body.to_vec(),
    }
}

pub fn load(blind_reply_body: &[u8]) -> XdpProgram {
    XdpProgram::load(&settings(blind_reply_body)).expect("load the XDP program")
}

/// A frame from the peer (PEER_IP:5555) to us carrying `payload`.
pub fn frame_from_peer(payload: &[u8]) -> Vec<u8> {
    waverunner_dataplane::xdp::udp_frame(
        PEER_MAC,
        SocketAddrV4::new(PEER_IP, 5555),
        SELF_MAC,
        SocketAddrV4::new(SELF_IP, PORT),
        payload,
    )
}

/// The IPv4 header checksum of a frame verifies (sums to 0xffff).
pub fn ipv4_checksum_ok(frame: &[u8]) -> bool {
    let mut sum: u32 = frame[14..34]
        .chunks(2)
        .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
        .sum();
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum == 0xffff
}
