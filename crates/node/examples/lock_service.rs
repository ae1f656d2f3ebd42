//! Replicating your own state machine: a lock service on three replicas in one process.
//!
//! Run with `cargo run -p waverunner-node --example lock_service`. Each replica listens on
//! loopback; the locks survive the loss of any one replica.
//!
//! Commands are text: `acquire NAME OWNER`, `release NAME OWNER`, `holder NAME`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use waverunner_node::config::{Listen, NodeConfig, Peer};
use waverunner_node::{start_replica, StateMachine};

/// Who holds which lock. Deterministic: depends only on the commands applied.
#[derive(Default)]
struct Locks(BTreeMap<String, String>);

impl StateMachine for Locks {
    fn apply(&mut self, _index: u64, _now_ms: u64, command: &[u8]) -> Vec<u8> {
        let text = String::from_utf8_lossy(command);
        let words: Vec<&str> = text.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["acquire", name, owner] => match self.0.get(*name) {
                Some(h) if h != owner => format!("busy: held by {h}"),
                _ => {
                    self.0.insert(name.to_string(), owner.to_string());
                    "granted".into()
                }
            },
            ["release", name, owner] => match self.0.get(*name) {
                Some(h) if h == owner => {
                    self.0.remove(*name);
                    "released".into()
                }
                _ => "not yours".into(),
            },
            ["holder", _] => return self.query(0, command),
            _ => "error: unknown command".into(),
        };
        answer.into_bytes()
    }

    fn is_read_only(&self, command: &[u8]) -> bool {
        command.starts_with(b"holder ")
    }

    fn query(&self, _now_ms: u64, command: &[u8]) -> Vec<u8> {
        let text = String::from_utf8_lossy(command);
        match text.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["holder", name] => self.0.get(*name).cloned().unwrap_or_else(|| "free".into()),
            _ => "error: not a read".into(),
        }
        .into_bytes()
    }

    fn snapshot(&self) -> Vec<u8> {
        self.0
            .iter()
            .map(|(k, v)| format!("{k} {v}\n"))
            .collect::<String>()
            .into_bytes()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(snapshot).map_err(|e| e.to_string())?;
        self.0 = text
            .lines()
            .map(|l| {
                l.split_once(' ')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .ok_or_else(|| format!("bad snapshot line {l:?}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(())
    }

    fn size(&self) -> u64 {
        self.0.len() as u64
    }
}

fn main() {
    let base = 27_000 + (std::process::id() % 1_000) as u16 * 10;
    let addr = |p: u16| format!("127.0.0.1:{p}").parse().expect("address");
    let dir = std::env::temp_dir().join(format!("waverunner-locks-{}", std::process::id()));
    let configs: Vec<NodeConfig> = (1..=3u16)
        .map(|i| NodeConfig {
            id: u64::from(i),
            data_dir: dir.join(format!("n{i}")),
            listen: Listen {
                raft: addr(base + i),
                client: addr(base + 5 + i),
                redis: None,
                memcache: None,
                admin: None,
            },
            peers: (1..=3u16)
                .filter(|j| *j != i)
                .map(|j| Peer {
                    id: u64::from(j),
                    raft: addr(base + j),
                    client: None,
                })
                .collect(),
            ..NodeConfig::from_toml(&format!(
                "id = {i}\ndata_dir = \"unused\"\n[listen]\nraft = \"127.0.0.1:1\"\nclient = \"127.0.0.1:1\""
            ))
            .expect("defaults")
        })
        .collect();
    let replicas: Vec<_> = configs
        .into_iter()
        .map(|c| start_replica(c, Locks::default()).expect("replica starts"))
        .collect();

    let deadline = Instant::now() + Duration::from_secs(10);
    while !replicas.iter().any(|r| r.handle.status().role == "leader") {
        assert!(Instant::now() < deadline, "no leader elected");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Any replica takes commands: followers forward them to the leader.
    let ask = |i: usize, cmd: &str| {
        let r = replicas[i].handle.call(0, 0, cmd.as_bytes().to_vec());
        let answer = r.map(|b| String::from_utf8_lossy(&b).into_owned());
        println!("replica {} <- {cmd:<28} -> {answer:?}", i + 1);
    };
    ask(0, "acquire printer alice");
    ask(1, "acquire printer bob");
    ask(2, "holder printer");
    ask(1, "release printer alice");
    ask(0, "release printer alice");
    ask(2, "acquire printer bob");
    ask(0, "holder printer");
    drop(replicas);
    let _ = std::fs::remove_dir_all(&dir);
}
