//! What a replicated topic costs, measured on the namespace hosts of the
//! fault runs (project issue 21, docs/replication.md "Cost"): a benchmark,
//! not a test (`#[ignore]`; `scripts/replicated_cost.sh` runs it with the
//! `release` binaries). It asserts nothing about the figures; it fails only
//! when a measurement could not be taken.
//!
//! Five nsqd members `n1..n5` on their own hosts (the fault runs' flags;
//! three `n1..n3` with `NSQ_REPLICATED_MEMBERS=3`), a topic `cost_r`
//! created with `replicas=3` (on five: a group of three of them) and a
//! topic `cost_u` without it on the replicated topic's leader, each with a
//! channel `c`. The load
//! comes from another host (`c1`), so every byte crosses the bridge, as it
//! would between machines. Each round, for `cost_u` then `cost_r`:
//! `nsq_bench pub` (2 writers, MPUB 200 × 200 B, 4 in flight each, 3 s:
//! acknowledged msgs/s; replicated, each `OK` after a majority fsynced the
//! batch), the backlog read to the end (1 reader, RDY 2500), then
//! `nsq_bench latency` at 20,000 msgs/s for 3 s on a fresh channel
//! (publish-to-delivery p50 / p99).
//!
//! With `nats-server` on the PATH (Debian's), each round also measures a
//! NATS JetStream R3 file stream at the same load shape, a server on each
//! member's host (`js_bench`, from `nsq-benches`: each publish
//! acknowledged by the stream, 800 unacknowledged per writer as 4 MPUBs of
//! 200; a pull consumer in batches of 2,500, every message acked).
//!
//! With Debian's `rabbitmq-server` installed, also a RabbitMQ quorum queue
//! of 3 members, a node of the cluster on each member's host (`amqp_bench`: publisher
//! confirms, 800 unconfirmed per writer; a prefetch of 2,500, every
//! message acked).
//!
//! `NSQ_REPLICATED_COST_ROUNDS` (default 3), `NSQ_REPLICATED_REPORT` (the
//! table as Markdown, also printed), `NSQ_REPLICATED_COST_OTHERS=0` (the
//! topics alone, not the other brokers).

use std::path::Path;
use std::time::Duration;

use nsq_tests::{bin_dir, netns};

use crate::replicated_faults::{
    agreed_leader_of, http, member_flags_in, start_members, wait, Shape,
};
use crate::topology::*;

/// The host the load runs on.
const LOAD: &str = "c1";
const REPLICATED: &str = "cost_r";
const UNREPLICATED: &str = "cost_u";
const LATENCY_RATE: u32 = 20_000;

#[test]
#[ignore = "a benchmark: scripts/replicated_cost.sh"]
fn replicated_topic_cost_on_namespace_hosts() {
    if let Err(why) = netns::available() {
        eprintln!("SKIPPED replicated_topic_cost_on_namespace_hosts: {why}");
        return;
    }
    let rounds = nsq_tests::env_usize("NSQ_REPLICATED_COST_ROUNDS", 3);
    let dir = tempfile::Builder::new()
        .prefix("nsq-replicated-cost-")
        .tempdir()
        .expect("temp dir");
    let rows = match run(dir.path(), rounds) {
        Ok(rows) => rows,
        Err(e) => {
            let _ = dir.keep();
            panic!("replicated cost run failed: {e}");
        }
    };
    let report = render(&rows);
    eprintln!("{report}");
    if let Ok(p) = std::env::var("NSQ_REPLICATED_REPORT") {
        std::fs::write(&p, &report).expect("write the report");
    }
}

/// One topic's measurements in one round.
struct Row {
    round: usize,
    label: &'static str,
    publish: f64,
    consume: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// Publish to its acknowledgement (`OK`, a JetStream ack, a publisher
    /// confirm), per message, at the same rate.
    ack_p50_ms: f64,
    ack_p99_ms: f64,
    missing: i64,
    /// Snapshots the members took during the latency run (replicated only).
    snapshots: Option<usize>,
    /// Messages of the topic committed and not finished when the latency
    /// run began (replicated only): FINs of the consume phase still on
    /// their way to the log.
    unfinished: Option<u64>,
    /// nsq_bench's deliveries over 50 ms: how many, and when in the run
    /// their messages were sent.
    slow: Option<String>,
}

impl Row {
    /// The row as a progress line; `messages`: how many were consumed.
    fn show(&self, messages: impl std::fmt::Display) {
        eprintln!(
            "round {} {}: publish {:.0} msgs/s, consume {:.0} msgs/s ({messages} messages), \
             at {LATENCY_RATE} msgs/s p50 {:.2} ms p99 {:.2} ms (acknowledged p50 {:.2} ms p99 {:.2} ms), \
             missing {}{}",
            self.round,
            self.label,
            self.publish,
            self.consume,
            self.p50_ms,
            self.p99_ms,
            self.ack_p50_ms,
            self.ack_p99_ms,
            self.missing,
            self.unfinished
                .map(|u| format!(", {u} unfinished when it began"))
                .unwrap_or_default(),
        );
        if let Some(s) = &self.slow {
            eprintln!("round {} {}: {s}", self.round, self.label);
        }
    }
}

fn run(dir: &Path, rounds: usize) -> Result<Vec<Row>, String> {
    let shape = Shape::from_env();
    let members = shape.members;
    eprintln!(
        "{} members, {REPLICATED} with replicas={}",
        members.len(),
        shape.replicas
    );
    let mut cluster = start_members(dir, members, |h| cost_flags(h, members))?;
    let create = format!(
        "/topic/create?topic={REPLICATED}&replicas={}",
        shape.replicas
    );
    let leader_of_replicated = || agreed_leader_of(REPLICATED, members);
    let replicas = shape.replicas.to_string();
    wait(Duration::from_secs(60), || {
        http(&nsqd_http("n1"), "POST", &create).ok()
    })
    .ok_or("the replicated topic was not created within 60 s")?;
    let channel = format!("/channel/create?topic={REPLICATED}&channel=c");
    wait(Duration::from_secs(30), || {
        http(&nsqd_http("n1"), "POST", &channel).ok()
    })
    .ok_or("its channel was not created within 30 s")?;
    let leader = wait(Duration::from_secs(30), leader_of_replicated)
        .ok_or("the members never agreed on the topic's leader")?;
    http(
        &nsqd_http(&leader),
        "POST",
        &format!("/topic/create?topic={UNREPLICATED}"),
    )?;
    http(
        &nsqd_http(&leader),
        "POST",
        &format!("/channel/create?topic={UNREPLICATED}&channel=c"),
    )?;
    eprintln!("{REPLICATED} led by {leader}; load from {LOAD}");
    // NSQ_REPLICATED_COST_OTHERS=0: the topics alone
    let others = std::env::var("NSQ_REPLICATED_COST_OTHERS").map_or(true, |v| v != "0");
    let jetstream = match which("nats-server").filter(|_| others) {
        Some(nats) => Some(start_jetstream(
            &mut cluster,
            dir,
            &nats,
            members,
            &replicas,
        )?),
        None => {
            eprintln!("no nats-server on the PATH: JetStream not measured");
            None
        }
    };
    let rabbitmq = if others && Path::new(RABBITMQ_SERVER).exists() {
        Some(start_rabbitmq(&mut cluster, dir, members, &replicas)?)
    } else {
        eprintln!("no {RABBITMQ_SERVER}: the quorum queue not measured");
        None
    };
    let bench = bin_dir().join("nsq_bench");
    let tcp = nsqd_tcp(&leader);
    let mut rows = Vec::new();
    for round in 1..=rounds {
        for (label, topic) in [("unreplicated", UNREPLICATED), ("replicated", REPLICATED)] {
            if leader_of_replicated().as_deref() != Some(leader.as_str()) {
                return Err(format!("{REPLICATED} is no longer led by {leader}"));
            }
            // the members are on other hosts: nsq_bench refuses that unless told
            let common = [
                "--allow-remote",
                "--nsqd-tcp-address",
                &tcp,
                "--topic",
                topic,
                "--size",
                "200",
            ];
            let publish = bench_result(
                &cluster,
                &bench,
                &[&["pub"], &common[..], &["--runfor", "3s", "--writers", "2"]].concat(),
                &["--batch-size", "200", "--pipeline", "4"],
            )?;
            let n = depth(&leader, topic)?;
            let count = n.to_string();
            let consume = bench_result(
                &cluster,
                &bench,
                &[
                    &["sub"],
                    &common[..],
                    &["--channel", "c", "--count", &count],
                ]
                .concat(),
                &["--readers", "1", "--rdy", "2500"],
            )?;
            // a fresh channel: one left from the last round would hold
            // this round's publishes, and the run would wait for them;
            // made before the run (for the replicated topic, committed),
            // as the other brokers' consumers are, so that the run does
            // not time the channel's creation
            let _ = http(
                &nsqd_http(&leader),
                "POST",
                &format!("/channel/delete?topic={topic}&channel=lat"),
            );
            let create = format!("/channel/create?topic={topic}&channel=lat");
            wait(Duration::from_secs(30), || {
                http(&nsqd_http(&leader), "POST", &create).ok()
            })
            .ok_or(format!("{create} did not succeed within 30 s"))?;
            let rate = LATENCY_RATE.to_string();
            let unfinished = (topic == REPLICATED)
                .then(|| {
                    let v = http(
                        &nsqd_http(&leader),
                        "GET",
                        &format!("/stats?format=json&topic={topic}"),
                    )
                    .ok()?;
                    v["topics"][0]["replication"]["unfinished"].as_u64()
                })
                .flatten();
            let before = snapshot_indexes(members);
            let logged = log_lengths(dir, members);
            let latency = bench_result(
                &cluster,
                &bench,
                &[&["latency"], &common[..], &["--channel", "lat"]].concat(),
                &["--rate", &rate, "--runfor", "3s"],
            )?;
            let after = snapshot_indexes(members);
            if topic == REPLICATED {
                // What the members logged meanwhile, past the routine.
                for line in logged_since(dir, members, &logged) {
                    eprintln!("round {round} during the latency run: {line}");
                }
            }
            let snapshots = (topic == REPLICATED)
                .then(|| before.iter().zip(&after).filter(|(b, a)| b != a).count());
            let row = Row {
                round,
                label,
                publish: publish["msgs_per_sec"].as_f64().unwrap_or(0.0),
                consume: consume["msgs_per_sec"].as_f64().unwrap_or(0.0),
                p50_ms: latency["latency"]["p50_us"].as_f64().unwrap_or(f64::NAN) / 1e3,
                p99_ms: latency["latency"]["p99_us"].as_f64().unwrap_or(f64::NAN) / 1e3,
                ack_p50_ms: latency["ack_latency"]["p50_us"]
                    .as_f64()
                    .unwrap_or(f64::NAN)
                    / 1e3,
                ack_p99_ms: latency["ack_latency"]["p99_us"]
                    .as_f64()
                    .unwrap_or(f64::NAN)
                    / 1e3,
                missing: latency["missing"].as_i64().unwrap_or(-1),
                snapshots,
                unfinished,
                slow: latency["slow"]["count"]
                    .as_u64()
                    .filter(|n| *n > 0)
                    .map(|n| {
                        format!(
                            "{n} deliveries over 50 ms, sent {}-{} s into the run",
                            latency["slow"]["first_sent_s"], latency["slow"]["last_sent_s"]
                        )
                    }),
            };
            row.show(n);
            rows.push(row);
        }
        if let Some(js) = &jetstream {
            let row = other_round(&cluster, round, "JetStream R3", js, "--stream")?;
            rows.push(row);
        }
        if let Some(mq) = &rabbitmq {
            let row = other_round(&cluster, round, "RabbitMQ quorum queue", mq, "--queue")?;
            rows.push(row);
        }
    }
    Ok(rows)
}

/// A broker measured beside the topics: its load generator (a `nsq-benches`
/// binary taking nsq_bench's load shape) and where it listens.
struct Other {
    bench: std::path::PathBuf,
    server: String,
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

/// A nats-server with JetStream on each member's host (client port 4222,
/// routes on 6222), and the stream `bench` with `replicas` replicas.
fn start_jetstream(
    cluster: &mut Cluster,
    dir: &Path,
    nats: &Path,
    members: &[&str],
    replicas: &str,
) -> Result<Other, String> {
    for &h in members {
        let store = dir.join(format!("js-{h}"));
        std::fs::create_dir_all(&store).map_err(|e| e.to_string())?;
        let routes: Vec<String> = members
            .iter()
            .filter(|o| **o != h)
            .map(|o| format!("nats-route://{}:6222", ip_of(o)))
            .collect();
        let conf = dir.join(format!("js-{h}.conf"));
        std::fs::write(
            &conf,
            format!(
                "server_name: js-{h}\nlisten: {ip}:4222\njetstream {{ store_dir: \"{}\" }}\n\
                 cluster {{ name: bench, listen: {ip}:6222, routes: [{}] }}\n",
                store.display(),
                routes.join(", "),
                ip = ip_of(h),
            ),
        )
        .map_err(|e| e.to_string())?;
        cluster.launch(
            &format!("nats@{h}"),
            h,
            nats.to_path_buf(),
            vec!["-c".into(), conf.display().to_string()],
        )?;
    }
    let js = Other {
        bench: bin_dir().join("js_bench"),
        server: format!("{}:4222", ip_of(members[0])),
    };
    // the cluster needs a meta leader before the stream can be made
    let setup = wait(Duration::from_secs(60), || {
        bench_result(
            cluster,
            &js.bench,
            &["setup", "--server", &js.server, "--stream", "bench"],
            &["--replicas", replicas],
        )
        .ok()
    })
    .ok_or("the JetStream stream was not created within 60 s")?;
    eprintln!("JetStream: {setup}");
    Ok(js)
}

const RABBITMQ_SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
const RABBITMQCTL: &str = "/usr/lib/rabbitmq/bin/rabbitmqctl";

/// The environment of a RabbitMQ node (or of rabbitmqctl talking to it) on
/// `host`, as `env` arguments: long node names (`rabbit@<ip>`, as the
/// hosts have no names), the cookie in `home`, everything else under
/// `home/<host>`.
fn rabbit_env(home: &Path, host: &str) -> Vec<String> {
    let d = home.join(host);
    let ip = ip_of(host);
    vec![
        format!("HOME={}", home.display()),
        "RABBITMQ_USE_LONGNAME=true".into(),
        format!("RABBITMQ_NODENAME=rabbit@{ip}"),
        "RABBITMQ_DIST_PORT=25672".into(),
        format!("RABBITMQ_MNESIA_BASE={}/mnesia", d.display()),
        format!("RABBITMQ_LOG_BASE={}/log", d.display()),
        format!("RABBITMQ_ENABLED_PLUGINS_FILE={}/plugins", d.display()),
        format!("RABBITMQ_CONFIG_FILE={}/rabbitmq", d.display()),
        format!(
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {{{}}}",
            ip.replace('.', ",")
        ),
    ]
}

/// rabbitmqctl against the node on `host`, run on that host.
fn rabbitmqctl(cluster: &Cluster, home: &Path, host: &str, args: &[&str]) -> Result<(), String> {
    let out = cluster
        .net
        .command(host, Path::new("/usr/bin/env"))
        .args(rabbit_env(home, host))
        .arg(RABBITMQCTL)
        .args(["-n", &format!("rabbit@{}", ip_of(host))])
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "rabbitmqctl {} on {host}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// A RabbitMQ node on each member's host (AMQP on 5672), clustered, and
/// the quorum queue `bench` with `replicas` members. Their epmds run in
/// the hosts' namespaces and go with them.
fn start_rabbitmq(
    cluster: &mut Cluster,
    dir: &Path,
    members: &[&str],
    replicas: &str,
) -> Result<Other, String> {
    let home = dir.join("rabbit");
    std::fs::create_dir_all(&home).map_err(|e| e.to_string())?;
    let cookie = home.join(".erlang.cookie");
    std::fs::write(&cookie, format!("{:x}", nsq_tests::now_ns())).map_err(|e| e.to_string())?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cookie, std::fs::Permissions::from_mode(0o400))
            .map_err(|e| e.to_string())?;
    }
    for &h in members {
        let d = home.join(h);
        std::fs::create_dir_all(&d).map_err(|e| e.to_string())?;
        std::fs::write(d.join("plugins"), "").map_err(|e| e.to_string())?;
        std::fs::write(
            d.join("rabbitmq.conf"),
            format!(
                "listeners.tcp.1 = {}:5672\nloopback_users = none\n",
                ip_of(h)
            ),
        )
        .map_err(|e| e.to_string())?;
        let mut args = rabbit_env(&home, h);
        args.push(RABBITMQ_SERVER.into());
        cluster.launch(&format!("rabbit@{h}"), h, "/usr/bin/env".into(), args)?;
    }
    for &h in members {
        wait(Duration::from_secs(120), || {
            rabbitmqctl(cluster, &home, h, &["await_startup", "--timeout", "5"]).ok()
        })
        .ok_or(format!("RabbitMQ on {h} did not start within 120 s"))?;
    }
    let first = format!("rabbit@{}", ip_of(members[0]));
    for h in &members[1..] {
        rabbitmqctl(cluster, &home, h, &["stop_app"])?;
        rabbitmqctl(cluster, &home, h, &["join_cluster", &first])?;
        rabbitmqctl(cluster, &home, h, &["start_app"])?;
    }
    let mq = Other {
        bench: bin_dir().join("amqp_bench"),
        server: format!("{}:5672", ip_of(members[0])),
    };
    let setup = bench_result(
        cluster,
        &mq.bench,
        &["setup", "--server", &mq.server, "--queue", "bench"],
        &["--replicas", replicas],
    )?;
    eprintln!("RabbitMQ: {setup}");
    Ok(mq)
}

/// One round on another broker, the shape of the topics' rounds.
fn other_round(
    cluster: &Cluster,
    round: usize,
    label: &'static str,
    other: &Other,
    target: &str,
) -> Result<Row, String> {
    let at = ["--server", other.server.as_str(), target, "bench"];
    let publish = bench_result(
        cluster,
        &other.bench,
        &[&["pub"], &at[..]].concat(),
        &[
            "--writers",
            "2",
            "--window",
            "800",
            "--size",
            "200",
            "--runfor",
            "3",
        ],
    )?;
    let n = publish["msgs"].as_u64().unwrap_or(0).to_string();
    let consume = bench_result(
        cluster,
        &other.bench,
        &[&["sub"], &at[..]].concat(),
        &["--count", &n, "--batch", "2500"],
    )?;
    let rate = LATENCY_RATE.to_string();
    let latency = bench_result(
        cluster,
        &other.bench,
        &[&["latency"], &at[..]].concat(),
        &["--rate", &rate, "--runfor", "3", "--size", "200"],
    )?;
    let row = Row {
        round,
        label,
        publish: publish["msgs_per_sec"].as_f64().unwrap_or(0.0),
        consume: consume["msgs_per_sec"].as_f64().unwrap_or(0.0),
        p50_ms: latency["p50_ms"].as_f64().unwrap_or(f64::NAN),
        p99_ms: latency["p99_ms"].as_f64().unwrap_or(f64::NAN),
        ack_p50_ms: latency["ack_p50_ms"].as_f64().unwrap_or(f64::NAN),
        ack_p99_ms: latency["ack_p99_ms"].as_f64().unwrap_or(f64::NAN),
        missing: latency["sent"].as_i64().unwrap_or(0) - latency["received"].as_i64().unwrap_or(0),
        snapshots: None,
        unfinished: None,
        slow: None,
    };
    row.show(&n);
    Ok(row)
}

/// The fault run's flags, but snapshots as often as nsqd takes them by
/// default (`--replication-snapshot-entries=10000`): the fault run's 500
/// exercise the purge, which is not what a deployment pays.
fn cost_flags(host: &str, members: &[&str]) -> Vec<String> {
    member_flags_in(host, members)
        .into_iter()
        .filter(|f| !f.starts_with("--replication-snapshot-entries="))
        .collect()
}

/// Every member's every group's snapshot index (`GET /replication`), in
/// order; an unanswered member counts as none.
fn snapshot_indexes(members: &[&str]) -> Vec<Option<u64>> {
    members
        .iter()
        .flat_map(|h| {
            let groups = http(&nsqd_http(h), "GET", "/replication")
                .ok()
                .and_then(|v| v["groups"].as_array().cloned())
                .unwrap_or_default();
            groups.into_iter().map(|g| g["snapshot"].as_u64())
        })
        .collect()
}

fn member_log(dir: &Path, host: &str) -> String {
    std::fs::read_to_string(dir.join("logs").join(format!("nsqd@{host}.log"))).unwrap_or_default()
}

/// Each member's log length now, in lines.
fn log_lengths(dir: &Path, members: &[&str]) -> Vec<usize> {
    members
        .iter()
        .map(|h| member_log(dir, h).lines().count())
        .collect()
}

/// The warnings and errors each member logged after `lengths`, and its
/// lines about elections and votes, prefixed by the member (at most 20
/// each).
fn logged_since(dir: &Path, members: &[&str], lengths: &[usize]) -> Vec<String> {
    members
        .iter()
        .zip(lengths)
        .flat_map(|(h, n)| {
            member_log(dir, h)
                .lines()
                .skip(*n)
                .filter(|l| {
                    l.contains("WARN")
                        || l.contains("ERROR")
                        || l.contains("vote")
                        || l.contains("leader")
                })
                .take(20)
                .map(|l| format!("{h}: {l}"))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Messages waiting on channel `c` of `topic` on `host`.
fn depth(host: &str, topic: &str) -> Result<u64, String> {
    let v = http(
        &nsqd_http(host),
        "GET",
        &format!("/stats?format=json&topic={topic}&channel=c"),
    )?;
    v["topics"][0]["channels"][0]["depth"]
        .as_u64()
        .ok_or(format!("no depth for {topic}/c on {host}: {v}"))
}

/// Runs `nsq_bench` on the load host and returns its `RESULT` object.
fn bench_result(
    cluster: &Cluster,
    bench: &Path,
    args: &[&str],
    more: &[&str],
) -> Result<serde_json::Value, String> {
    let out = cluster
        .net
        .command(LOAD, bench)
        .args(args)
        .args(more)
        .output()
        .map_err(|e| format!("{}: {e}", bench.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "nsq_bench {} failed ({}): {}{}",
            args.join(" "),
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .and_then(|j| serde_json::from_str(j).ok())
        .ok_or(format!(
            "nsq_bench {}: no RESULT in {stdout}",
            args.join(" ")
        ))
}

fn render(rows: &[Row]) -> String {
    let mut s = String::from(
        "| round | topic | publish msgs/s | consume msgs/s | at 20,000 msgs/s: publish to delivery p50 / p99 ms | publish acknowledged p50 / p99 ms | missing | snapshots meanwhile |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {:.2} / {:.2} | {:.2} / {:.2} | {} | {} |\n",
            r.round,
            r.label,
            r.publish,
            r.consume,
            r.p50_ms,
            r.p99_ms,
            r.ack_p50_ms,
            r.ack_p99_ms,
            r.missing,
            r.snapshots.map_or("-".to_string(), |n| n.to_string())
        ));
    }
    for round in rows
        .iter()
        .map(|r| r.round)
        .collect::<std::collections::BTreeSet<_>>()
    {
        let of = |label: &str| rows.iter().find(|r| r.round == round && r.label == label);
        if let (Some(u), Some(r)) = (of("unreplicated"), of("replicated")) {
            s.push_str(&format!(
                "\nround {round}: replicated / unreplicated publish {:.2}, consume {:.2}",
                r.publish / u.publish,
                r.consume / u.consume
            ));
            for o in rows
                .iter()
                .filter(|o| o.round == round && !o.label.ends_with("replicated"))
            {
                s.push_str(&format!(
                    "; replicated / {} publish {:.1}, consume {:.1}",
                    o.label,
                    r.publish / o.publish,
                    r.consume / o.consume
                ));
            }
        }
    }
    s.push('\n');
    s
}
