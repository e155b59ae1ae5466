//! The quick start, `scripts/quickstart.sh`, as a user runs it (with the
//! built binaries, `--bin-dir`, so nothing is compiled, and free ports):
//! it says "running" once every daemon answers; a message published with
//! `/pub` reaches `nsq_tail` through nsqlookupd; Ctrl-C (SIGINT to the
//! script's process group, as a terminal sends it) stops all three and
//! exits 0 with nsqd's metadata saved; a port already taken makes it print
//! that daemon's own error, stop the others and exit 1.

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nsq_tests::*;

const WAIT: Duration = Duration::from_secs(30);

/// The five ports of one quick start: lookupd TCP, lookupd HTTP, nsqd TCP,
/// nsqd HTTP, nsqadmin HTTP.
struct QuickStart {
    child: Child,
    log: std::path::PathBuf,
    ports: Vec<u16>,
}

impl QuickStart {
    fn start(dir: &Path) -> QuickStart {
        let ports = free_ports(5);
        let log = dir.join("quickstart.log");
        let out = fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let flag = |name: &str, port: u16| format!("--{name}={port}");
        // `env --default-signal=INT`: a shell started in the background
        // ignores SIGINT and cannot trap it; a terminal's shell does not.
        let child = Command::new("env")
            .arg("--default-signal=INT")
            .arg("bash")
            .arg(workspace_root().join("scripts/quickstart.sh"))
            .arg(format!("--bin-dir={}", bin_dir().display()))
            .arg(format!("--data={}", dir.join("data").display()))
            .arg(flag("nsqlookupd-tcp-port", ports[0]))
            .arg(flag("nsqlookupd-http-port", ports[1]))
            .arg(flag("nsqd-tcp-port", ports[2]))
            .arg(flag("nsqd-http-port", ports[3]))
            .arg(flag("nsqadmin-http-port", ports[4]))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Its own process group, which Ctrl-C signals as a whole.
            .process_group(0)
            .spawn()
            .expect("spawn bash scripts/quickstart.sh");
        QuickStart { child, log, ports }
    }

    fn output(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.ports[i])
    }

    /// Ctrl-C: SIGINT to every process of the script's group.
    fn interrupt(&self) {
        let group = i32::try_from(self.child.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .expect("the script's pid");
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::INT);
    }

    fn exit_code(&mut self) -> Option<i32> {
        let status = wait_timeout(&mut self.child, WAIT);
        if status.is_none() {
            terminate(&mut self.child, Duration::from_secs(5));
            panic!("the quick start did not exit:\n{}", self.output());
        }
        status.and_then(|s| s.code())
    }
}

impl Drop for QuickStart {
    fn drop(&mut self) {
        // A failed assertion must not leave the script and its daemons.
        if let Ok(None) = self.child.try_wait() {
            send_signal(self.child.id(), libc::SIGTERM);
            terminate(&mut self.child, Duration::from_secs(35));
        }
    }
}

#[test]
fn publish_consume_and_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let mut qs = QuickStart::start(dir.path());
    wait_for(WAIT, "the quick start saying running", || {
        qs.output().contains("==> running").then_some(())
    });
    let out = qs.output();
    let nsqd_http = qs.addr(3);
    assert!(
        out.contains(&format!("http://{nsqd_http}/pub?topic=test")),
        "the publish command names nsqd's port:\n{out}"
    );
    for i in 1..5 {
        if i != 2 {
            assert_eq!(http_get(&qs.addr(i), "/ping").status, 200, "{out}");
        }
    }

    let body = b"hello from the quick start";
    assert_eq!(http_post(&nsqd_http, "/pub?topic=test", body).status, 200);
    let tail = run_bin(
        "nsq_tail",
        &[
            &format!("--lookupd-http-address={}", qs.addr(1)),
            "--topic=test",
            "--n=1",
        ],
        WAIT,
    );
    assert!(
        tail.stdout.contains("hello from the quick start"),
        "nsq_tail through nsqlookupd: {tail:?}"
    );

    qs.interrupt();
    assert_eq!(qs.exit_code(), Some(0), "{}", qs.output());
    let out = qs.output();
    assert!(out.contains("==> stopping"), "{out}");
    assert!(!out.contains("unexpectedly"), "{out}");
    assert!(
        dir.path().join("data/nsqd/nsqd.dat").exists(),
        "nsqd saved its metadata on the way out"
    );
    for i in [1, 3, 4] {
        assert!(
            TcpStream::connect(qs.addr(i)).is_err(),
            "port {} still answers after Ctrl-C",
            qs.ports[i]
        );
    }
}

#[test]
fn a_taken_port_is_reported_and_stops_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut qs = QuickStart::start(dir.path());
    // Taken before nsqadmin, the last daemon, starts: its two
    // predecessors are up by then and must be stopped again.
    let _taken = TcpListener::bind(qs.addr(4)).expect("take nsqadmin's port");
    assert_eq!(qs.exit_code(), Some(1), "{}", qs.output());
    let out = qs.output();
    assert!(!out.contains("==> running"), "{out}");
    assert!(out.contains("nsqadmin failed to start"), "{out}");
    assert!(
        out.contains(&format!(
            "FATAL: failed to instantiate nsqadmin - listen ({0}) failed - listen tcp {0}: bind: address already in use",
            qs.addr(4)
        )),
        "nsqadmin's own error is shown:\n{out}"
    );
    assert!(out.contains("==> stopping"), "{out}");
    for i in [1, 3] {
        assert!(
            TcpStream::connect(qs.addr(i)).is_err(),
            "port {} still answers after the failed start",
            qs.ports[i]
        );
    }
}
