//! A rolling upgrade under load (docs/replication.md, "Rolling upgrades"):
//! three members of the previous build (`NSQ_OLD_BIN_DIR`, built by
//! `scripts/rolling_upgrade.sh`) with a replicated topic that three
//! producers publish to at 50 messages a second each, through every member,
//! and a consumer that follows the group's leader. Each member in turn is
//! stopped (SIGTERM) and started on the new build from its data directory;
//! then the first is downgraded again. Every member speaks this build's
//! protocol (3) once all run the new build, and the old build's once one
//! runs it again, when what needs more is refused with 503
//! `REPLICATION_UPGRADE_PENDING`: a depth limit (protocol 2) from a build
//! of protocol 1, a membership change (protocol 3) from any older one. The
//! account at the end: every acknowledged message delivered (0 lost),
//! duplicates counted, and for each step the longest time without an OK.
//!
//! Without `NSQ_OLD_BIN_DIR` the test says SKIPPED and passes: the test
//! command does not build a second nsqd.

use std::path::{Path, PathBuf};
use std::time::Instant;

use nsq_tests::{free_ports, sleep_ms, Nsqd};

use super::load::*;
use super::members::*;

fn protocols(ms: &[Member]) -> Vec<Option<u64>> {
    ms.iter()
        .map(|m| replication(&m.nsqd)["protocol"].as_u64())
        .collect()
}

fn restart_on(members: &mut Vec<Member>, id: u64, bin: &Path, dir: &Path, addrs: &Addrs) {
    addrs.lock().unwrap().remove(&id);
    let gone = stop_member(members, id);
    let args: Vec<&str> = gone.args.iter().map(String::as_str).collect();
    let nsqd = Nsqd::start_in_bin(bin, dir, &args);
    addrs
        .lock()
        .unwrap()
        .insert(id, (nsqd.tcp_addr.clone(), nsqd.http_addr.clone()));
    let args = gone.args.clone();
    drop(gone);
    members.push(Member { id, nsqd, args });
    members.sort_by_key(|m| m.id);
}

#[test]
fn a_cluster_upgraded_and_downgraded_member_by_member_under_load_loses_nothing() {
    let Some(old) = std::env::var_os("NSQ_OLD_BIN_DIR").map(PathBuf::from) else {
        eprintln!("SKIPPED: NSQ_OLD_BIN_DIR is not set (scripts/rolling_upgrade.sh builds the previous nsqd and sets it)");
        return;
    };
    let new = nsq_tests::bin_dir();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let ports = free_ports(3);
    let peers = (1..=3u64)
        .map(|id| format!("{id}@127.0.0.1:{}", ports[id as usize - 1]))
        .collect::<Vec<_>>()
        .join(",");
    let mut members: Vec<Member> = (1..=3u64)
        .map(|id| {
            let args = member_args(id, ports[id as usize - 1], &peers);
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let nsqd = Nsqd::start_in_bin(&old, dirs[id as usize - 1].path(), &a);
            Member { id, nsqd, args }
        })
        .collect();
    topic_with_channel(&members, TOPIC, 3);
    // A build of protocol 1 says none; later ones say theirs.
    let old_protocol = protocols(&members)[0].unwrap_or(1);
    assert_eq!(
        protocols(&members),
        vec![(old_protocol > 1).then_some(old_protocol); 3],
        "every member of the old build says the same"
    );

    let load = Load::start(&members);
    sleep_ms(3000);

    let steps = [
        (1u64, &new, "upgrade"),
        (2, &new, "upgrade"),
        (3, &new, "upgrade"),
        (1, &old, "downgrade"),
    ];
    let mut windows = Vec::new();
    for (id, bin, what) in steps {
        let from = Instant::now();
        restart_on(
            &mut members,
            id,
            bin,
            dirs[id as usize - 1].path(),
            &load.addrs,
        );
        let m = by_id(&members, id);
        wait_standing(&m.nsqd, "member");
        agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
        if what == "upgrade" && id == 3 {
            // all three on the new build: each has met the other two
            nsq_tests::wait_for(WAIT, "every member speaking protocol 3", || {
                (protocols(&members) == vec![Some(3); 3]).then_some(())
            });
        }
        // the load runs a while on the new arrangement before the next step
        sleep_ms(3000);
        windows.push((format!("{what} member {id}"), from, Instant::now()));
    }
    // member 1 runs the old build again: the others speak what it speaks
    nsq_tests::wait_for(WAIT, "the new members back to the old protocol", || {
        (protocols(&members)[1..] == [Some(old_protocol), Some(old_protocol)]).then_some(())
    });
    // and what needs more is not proposed meanwhile: a limit (a Limit
    // entry, protocol 2) below 2, a membership change (protocol 3) below 3
    if old_protocol < 2 {
        let r = members[1].nsqd.post(
            &format!("/channel/config?topic={TOPIC}&channel=c&max_depth=100000"),
            b"",
        );
        assert_eq!(
            (r.status, r.text()),
            (
                503,
                "{\"message\":\"REPLICATION_UPGRADE_PENDING\"}".to_string()
            ),
            "a limit while member 1 runs the old build"
        );
    }
    let r = members[1]
        .nsqd
        .post("/replication/members/add?id=9&address=127.0.0.1:1", b"");
    assert_eq!(r.status, 503, "a membership change: {}", r.text());
    assert!(
        r.text()
            .contains("REPLICATION_UPGRADE_PENDING node 1 speaks replication protocol"),
        "{}",
        r.text()
    );

    let Account {
        lost,
        quiet_steps,
        report,
        ..
    } = load.finish(&members, &windows);
    eprintln!("{report}");
    if let Some(path) = std::env::var_os("NSQ_UPGRADE_REPORT") {
        std::fs::write(path, &report).expect("write the report");
    }
    assert!(
        lost.is_empty(),
        "acknowledged and never delivered: {lost:?}\n{report}"
    );
    assert!(
        quiet_steps.is_empty(),
        "the load ran through every step: {report}"
    );
}
