"""Interop: the official Python client (pynsq) against our nsqd.

Checklist item 134 (pynsq half): a pynsq Writer publishes, a pynsq Reader
consumes; requeue round-trips. The test starts `target/debug/nsqd` itself on
free 127.0.0.1 ports with a temporary --data-path and kills it afterwards.

Binary: $NSQ_BIN_DIR/nsqd if NSQ_BIN_DIR is set, else <repo>/target/debug/nsqd.
"""

import asyncio
import collections
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

import nsq

REPO = Path(__file__).resolve().parents[2]


def nsqd_binary():
    d = os.environ.get("NSQ_BIN_DIR")
    p = Path(d) / "nsqd" if d else REPO / "target" / "debug" / "nsqd"
    if not p.exists():
        pytest.fail("nsqd binary not found at %s (run cargo build --workspace --bins)" % p)
    return str(p)


def free_port():
    """A port free a moment ago on 127.0.0.1, below the kernel's ephemeral
    range: these tests run beside the Rust suites (scripts/test.sh), whose
    outgoing connections take their local ports from that range, so a port
    probed free there may be taken before nsqd binds it (tests/src/ports.rs).
    """
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    lo, hi = (low // 2, low) if low >= 10000 else (61000, 65535)
    for _ in range(1000):
        port = random.randrange(lo, hi)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    raise RuntimeError("no free port below the ephemeral range")


def http_get(addr, path, timeout=5):
    with urllib.request.urlopen("http://%s%s" % (addr, path), timeout=timeout) as r:
        return r.status, r.read()


class Nsqd:
    def __init__(self, extra_args=()):
        self.data = tempfile.mkdtemp(prefix="pynsq-nsqd-")
        self.logdir = tempfile.mkdtemp(prefix="pynsq-nsqd-log-")
        self.log_path = os.path.join(self.logdir, "nsqd.log")
        self.log = open(self.log_path, "wb")
        last = None
        for _ in range(5):
            self.tcp = "127.0.0.1:%d" % free_port()
            self.http = "127.0.0.1:%d" % free_port()
            args = [
                nsqd_binary(),
                "--tcp-address=" + self.tcp,
                "--http-address=" + self.http,
                "--https-address=127.0.0.1:%d" % free_port(),
                "--data-path=" + self.data,
                *extra_args,
            ]
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
            deadline = time.time() + 20
            while time.time() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    if http_get(self.http, "/ping", timeout=1) == (200, b"OK"):
                        return
                except Exception as e:  # not up yet
                    last = e
                time.sleep(0.05)
            self.stop()
        self.log.flush()
        with open(self.log_path, "rb") as f:
            tail = f.read()[-4000:].decode("utf-8", "replace")
        self.close()
        raise RuntimeError("nsqd did not start: %r\nlog:\n%s" % (last, tail))

    def stats(self, query=""):
        status, body = http_get(self.http, "/stats?format=json" + query)
        assert status == 200
        return json.loads(body)

    def channel(self, topic, channel):
        for t in self.stats().get("topics") or []:
            if t["topic_name"] == topic:
                for c in t["channels"]:
                    if c["channel_name"] == channel:
                        return c
        return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self):
        self.stop()
        self.log.close()
        shutil.rmtree(self.data, ignore_errors=True)
        shutil.rmtree(self.logdir, ignore_errors=True)


@pytest.fixture
def nsqd():
    n = Nsqd()
    try:
        yield n
    finally:
        n.close()


async def wait_until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))
        await asyncio.sleep(0.02)


async def connected_writer(addr):
    w = nsq.Writer([addr])
    await wait_until(lambda: any(c.connected() for c in w.conns.values()), 10, "writer connection")
    return w


def close_all(reader=None, writer=None):
    if reader is not None:
        reader.close()
    if writer is not None:
        for c in list(writer.conns.values()):
            c.close()


def test_writer_10000_reader_max_in_flight_100(nsqd):
    N = 10000
    topic, channel = "pynsq_bulk", "ch"
    expected = {b"msg-%05d" % i for i in range(N)}

    async def main():
        w = await connected_writer(nsqd.tcp)
        acks = []
        errors = []

        def on_pub(conn, data):
            if isinstance(data, nsq.Error):
                errors.append(data)
            else:
                acks.append(data)

        sent = 0
        for body in sorted(expected):
            w.pub(topic, body, callback=on_pub)
            sent += 1
            # keep at most 1000 publishes outstanding
            if sent - len(acks) - len(errors) > 1000:
                await wait_until(lambda: sent - len(acks) - len(errors) <= 200, 60, "publish acks")
        await wait_until(lambda: len(acks) + len(errors) == N, 60, "all %d publish responses" % N)
        assert errors == [], errors[:5]
        assert set(acks) == {b"OK"}

        received = []

        def handler(msg):
            received.append(msg.body)
            return True

        r = nsq.Reader(
            topic=topic,
            channel=channel,
            message_handler=handler,
            nsqd_tcp_addresses=[nsqd.tcp],
            max_in_flight=100,
        )
        try:
            await wait_until(lambda: len(set(received)) >= N, 120, "all %d messages consumed" % N)
            # all FINs accepted by nsqd
            await wait_until(
                lambda: (nsqd.channel(topic, channel) or {}).get("in_flight_count") == 0
                and sum(c["finish_count"] for c in nsqd.channel(topic, channel)["clients"]) >= N,
                30,
                "finish_count %d" % N,
            )
        finally:
            close_all(r, w)
        return received

    received = asyncio.run(main())
    assert set(received) == expected
    ch = nsqd.channel(topic, channel)
    assert ch["message_count"] == N
    assert ch["depth"] == 0
    assert ch["timeout_count"] == 0


def test_requeue_once_then_finish(nsqd):
    N = 200
    topic, channel = "pynsq_requeue", "ch"
    expected = {b"rq-%03d" % i for i in range(N)}

    async def main():
        seen = collections.defaultdict(list)

        def handler(msg):
            seen[msg.body].append(msg.attempts)
            if msg.attempts == 1:
                msg.requeue(backoff=False, delay=0)
                return None
            return True

        r = nsq.Reader(
            topic=topic,
            channel=channel,
            message_handler=handler,
            nsqd_tcp_addresses=[nsqd.tcp],
            max_in_flight=20,
        )
        w = await connected_writer(nsqd.tcp)
        results = []
        w.mpub(topic, sorted(expected)[: N // 2], callback=lambda c, d: results.append(d))
        for body in sorted(expected)[N // 2:]:
            w.pub(topic, body, callback=lambda c, d: results.append(d))
        try:
            await wait_until(lambda: len(results) == 1 + N // 2, 30, "publish responses")
            assert all(d == b"OK" for d in results), results[:5]
            await wait_until(
                lambda: len(seen) == N and all(len(v) >= 2 for v in seen.values()),
                60,
                "every message delivered twice",
            )
            await wait_until(
                lambda: (nsqd.channel(topic, channel) or {}).get("requeue_count") == N
                and nsqd.channel(topic, channel)["in_flight_count"] == 0,
                30,
                "requeue_count %d and nothing in flight" % N,
            )
        finally:
            close_all(r, w)
        return seen

    seen = asyncio.run(main())
    assert set(seen) == expected
    for body, attempts in seen.items():
        assert len(attempts) >= 2, (body, attempts)
        assert attempts[:2] == [1, 2], (body, attempts)
    ch = nsqd.channel(topic, channel)
    assert ch["depth"] == 0
    assert ch["timeout_count"] == 0


def test_max_attempts_dead_letters_to_a_pynsq_reader():
    """Beyond NSQ, opt-in: with --max-attempts=3 a message a pynsq Reader
    requeues on every delivery is delivered three times, then lands on
    <topic>.<channel>.dead with its body unchanged, where a second pynsq
    Reader takes it."""
    N = 20
    topic, channel = "pynsq_poison", "work"
    dead_topic = "%s.%s.dead" % (topic, channel)
    expected = {b"poison-%02d" % i for i in range(N)}
    n = Nsqd(["--max-attempts=3"])
    try:

        async def main():
            attempts = collections.defaultdict(list)
            dead = {}

            def poison(msg):
                attempts[msg.body].append(msg.attempts)
                msg.requeue(backoff=False, delay=0)

            def dead_letter(msg):
                dead[msg.body] = msg.attempts
                return True

            # max_tries=0: the client never gives up itself; nsqd must.
            r = nsq.Reader(
                topic=topic,
                channel=channel,
                message_handler=poison,
                nsqd_tcp_addresses=[n.tcp],
                max_in_flight=10,
                max_tries=0,
            )
            d = nsq.Reader(
                topic=dead_topic,
                channel="inspect",
                message_handler=dead_letter,
                nsqd_tcp_addresses=[n.tcp],
                max_in_flight=10,
            )
            w = await connected_writer(n.tcp)
            results = []
            w.mpub(topic, sorted(expected), callback=lambda c, data: results.append(data))
            try:
                await wait_until(lambda: results == [b"OK"], 30, "MPUB answered OK")
                await wait_until(lambda: len(dead) == N, 60, "every message dead-lettered")
            finally:
                close_all(r, w)
                close_all(d)
            return attempts, dead

        attempts, dead = asyncio.run(main())
        assert set(dead) == expected
        for body, seen in attempts.items():
            assert seen == [1, 2, 3], (body, seen)
        ch = n.channel(topic, channel)
        assert ch["dead_letter_count"] == N
        assert ch["depth"] == 0 and ch["in_flight_count"] == 0 and ch["deferred_count"] == 0
    finally:
        n.close()


def test_dpub_longer_than_max_req_timeout_with_max_defer_timeout():
    """Beyond NSQ, opt-in: with --max-defer-timeout=48h a pynsq Writer may
    DPUB a message deferred for a day (NSQ's bound, --max-req-timeout, is
    1h); 49h is still refused."""
    day_ms = 24 * 3600 * 1000
    n = Nsqd(["--max-defer-timeout=48h"])
    try:
        urllib.request.urlopen(urllib.request.Request(
            "http://%s/topic/create?topic=pynsq_later" % n.http, method="POST"), timeout=5)
        urllib.request.urlopen(urllib.request.Request(
            "http://%s/channel/create?topic=pynsq_later&channel=c" % n.http, method="POST"), timeout=5)

        async def main():
            w = await connected_writer(n.tcp)
            results = []
            w.dpub("pynsq_later", day_ms, b"tomorrow", callback=lambda c, d: results.append(d))
            try:
                await wait_until(lambda: len(results) == 1, 30, "DPUB answered")
            finally:
                close_all(writer=w)
            return results

        results = asyncio.run(main())
        assert results == [b"OK"], results
        ch = n.channel("pynsq_later", "c")
        assert ch["deferred_count"] == 1 and ch["depth"] == 0, ch
    finally:
        n.close()


def test_dpub_spilled_to_disk_reaches_a_pynsq_reader_when_due():
    """Beyond NSQ, opt-in: with --deferred-spill and --mem-queue-size=10, a
    pynsq Writer's 200 DPUBs (3 s) mostly wait on disk; a pynsq Reader gets
    each once, none before it was due."""
    n = Nsqd(["--deferred-spill", "--mem-queue-size=10"])
    N, defer_ms = 200, 3000
    try:
        for path in ("/topic/create?topic=pynsq_spill", "/channel/create?topic=pynsq_spill&channel=c"):
            urllib.request.urlopen(urllib.request.Request(
                "http://%s%s" % (n.http, path), method="POST"), timeout=5)

        async def main():
            w = await connected_writer(n.tcp)
            results, due = [], {}
            for i in range(N):
                body = b"spill-%03d" % i
                due[body] = time.time() + defer_ms / 1000.0
                w.dpub("pynsq_spill", defer_ms, body, callback=lambda c, d: results.append(d))
            await wait_until(lambda: len(results) == N, 30, "DPUBs answered")
            assert set(results) == {b"OK"}, results[:5]
            ch = n.channel("pynsq_spill", "c")
            assert ch["deferred_count"] == N, ch
            spilled = [f for f in os.listdir(n.data) if ".deferred." in f]
            assert spilled, os.listdir(n.data)
            got = []

            def handler(msg):
                got.append((msg.body, time.time()))
                return True

            r = nsq.Reader(topic="pynsq_spill", channel="c", message_handler=handler,
                           nsqd_tcp_addresses=[n.tcp], max_in_flight=50)
            try:
                await wait_until(lambda: len(got) >= N, 30, "all deferred messages")
                await asyncio.sleep(0.5)
            finally:
                close_all(r, w)
            return got, due

        got, due = asyncio.run(main())
        bodies = [b for b, _ in got]
        assert sorted(bodies) == sorted(b"spill-%03d" % i for i in range(N)), "each once"
        early = [b for b, at in got if at + 0.05 < due[b]]
        assert early == [], early[:5]
    finally:
        n.close()


def test_publish_refused_at_max_depth_is_a_failed_publish_for_pynsq():
    """Beyond NSQ, opt-in: a channel with max_depth=3 and the reject
    policy. A pynsq Writer's PUBs succeed until the channel holds three;
    the fourth, and an MPUB that would cross the limit, come back to the
    callback as an nsq.Error (E_PUB_FAILED / E_MPUB_FAILED), the
    connection stays up, and nothing refused is queued anywhere."""
    topic = "pynsq_bounded"
    n = Nsqd()
    try:
        for path in ("/topic/create?topic=%s" % topic,
                     "/channel/create?topic=%s&channel=c" % topic,
                     "/channel/create?topic=%s&channel=other" % topic,
                     "/channel/config?topic=%s&channel=c&max_depth=3&max_depth_policy=reject" % topic):
            urllib.request.urlopen(urllib.request.Request(
                "http://%s%s" % (n.http, path), method="POST"), timeout=5)

        async def main():
            w = await connected_writer(n.tcp)
            results = []

            def cb(conn, data):
                results.append(data)

            try:
                for i in range(3):
                    w.pub(topic, b"m%d" % i, callback=cb)
                    await wait_until(lambda: len(results) == i + 1, 30, "PUB %d answered" % i)
                w.pub(topic, b"m3", callback=cb)
                await wait_until(lambda: len(results) == 4, 30, "the fourth PUB answered")
                w.mpub(topic, [b"a", b"b"], callback=cb)
                await wait_until(lambda: len(results) == 5, 30, "the MPUB answered")
                connected = any(c.connected() for c in w.conns.values())
            finally:
                close_all(writer=w)
            return results, connected

        results, connected = asyncio.run(main())
        assert results[:3] == [b"OK"] * 3, results
        for r, code in ((results[3], "E_PUB_FAILED"), (results[4], "E_MPUB_FAILED")):
            assert isinstance(r, nsq.Error), r
            assert code in str(r) and "max_depth 3" in str(r), str(r)
        assert connected, "a refused publish keeps the connection"
        assert n.channel(topic, "c")["depth"] == 3
        assert n.channel(topic, "other")["depth"] == 3, "refused for every channel"
    finally:
        n.close()
