#!/usr/bin/env python3
"""What a replicated topic's retention costs (issue 41, docs/features/replay.md):
the same run with and without `retention=`, each on a fresh three-member
cluster on 127.0.0.1: a topic of 3 replicas with a channel, N messages
published (HTTP /mpub, BATCH a request, each a log entry) and consumed and
FINed by nsq_bench, then every member's RSS (VmRSS) and its raft directory's
size once nothing is unfinished. Release binaries (as shipped):

    cargo build --release --bin nsqd -p nsq_bench
    python3 scripts/retention_rss.py [N] [BATCH] [SIZE]   # 1000000 100 100
    RUNS=24h,none python3 scripts/retention_rss.py       # the other order

Prints one line per run and member; exits 1 if a run fails.
"""

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release")


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def request(port, method, path, body=b""):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request(method, path, body=body)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def wait(what, f, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        try:
            v = f()
            if v:
                return v
        except (OSError, ValueError, KeyError, TypeError):
            pass
        time.sleep(0.2)
    raise SystemExit("timed out waiting for " + what)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def du(path):
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(d, f))
            except OSError:
                pass
    return total


def run(retention, n, batch, size):
    ports = free_ports(9)
    peers = ",".join("%d@127.0.0.1:%d" % (i + 1, ports[6 + i]) for i in range(3))
    dirs = [tempfile.mkdtemp(prefix="retention_rss") for _ in range(3)]
    procs = []
    try:
        for i in range(3):
            args = [
                os.path.join(BIN, "nsqd"),
                "--data-path=" + dirs[i],
                "--tcp-address=127.0.0.1:%d" % ports[2 * i],
                "--http-address=127.0.0.1:%d" % ports[2 * i + 1],
                "--node-id=%d" % (i + 1),
                "--replication-address=127.0.0.1:%d" % ports[6 + i],
                "--replication-peer=" + peers,
                "--replication-groups=1",
                "--log-level=warn",
            ]
            procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(os.path.join(dirs[i], "log"), "w")))
        http_ports = [ports[2 * i + 1] for i in range(3)]

        def leader():
            s = json.loads(request(http_ports[0], "GET", "/replication")[1])
            return s["groups"][0]["leader"]

        lid = wait("a leader", leader)
        lhttp, ltcp = http_ports[lid - 1], ports[2 * (lid - 1)]
        assert request(lhttp, "POST", "/topic/create?topic=t&replicas=3")[0] == 200
        if retention:
            st, body = request(lhttp, "POST", "/topic/config?topic=t&retention=" + retention)
            assert st == 200, body
        assert request(lhttp, "POST", "/channel/create?topic=t&channel=c")[0] == 200
        body = b"\n".join(b"%0*d" % (size, k) for k in range(batch))
        c = http.client.HTTPConnection("127.0.0.1", lhttp, timeout=30)
        start = time.time()
        for _ in range(n // batch):
            c.request("POST", "/mpub?topic=t", body=body)
            r = c.getresponse()
            r.read()
            assert r.status == 200
        c.close()
        published = time.time() - start
        sub = subprocess.run(
            [os.path.join(BIN, "nsq_bench"), "sub", "--nsqd-tcp-address=127.0.0.1:%d" % ltcp,
             "--topic=t", "--channel=c", "--readers=2", "--count=%d" % n, "--runfor=10m"],
            capture_output=True, text=True)
        assert sub.returncode == 0, sub.stderr

        def done():
            for p in http_ports:
                s = json.loads(request(p, "GET", "/stats?format=json&topic=t")[1])
                if s["topics"][0]["replication"]["unfinished"] != 0:
                    return False
            return s

        wait("nothing unfinished", done)
        time.sleep(5)
        s = json.loads(request(lhttp, "GET", "/stats?format=json&topic=t")[1])["topics"][0]["replication"]
        for i, p in enumerate(procs):
            print("retention=%-5s node %d%s: RSS %6.1f MiB  raft dir %7.1f MiB  (published in %.0f s; retained %s msgs)" % (
                retention or "none", i + 1, " (leader)" if i + 1 == lid else "",
                rss_kib(p.pid) / 1024.0, du(os.path.join(dirs[i], "raft")) / 1048576.0,
                published, s.get("retained_messages", 0)), flush=True)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    # RUNS="24h,none" for the other order
    for retention in os.environ.get("RUNS", "none,24h").split(","):
        run("" if retention == "none" else retention, n, batch, size)


if __name__ == "__main__":
    main()
