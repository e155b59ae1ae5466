"""Interop: pynsq discovering nsqds through our nsqlookupd.

The quick start as NSQ documents it, with the official Python client: one
nsqlookupd, two nsqds registered with it, messages published before any
consumer exists, and a pynsq Reader given only the lookupd's HTTP address
receives every message from both nsqds (it polls /lookup itself).
"""

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import nsq

from test_pynsq import free_port

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ["NSQ_BIN_DIR"]) if os.environ.get("NSQ_BIN_DIR") else REPO / "target" / "debug"


def get(addr, path):
    with urllib.request.urlopen("http://%s%s" % (addr, path), timeout=2) as r:
        return r.read()


def post(addr, path, body=b""):
    req = urllib.request.Request("http://%s%s" % (addr, path), data=body, method="POST")
    with urllib.request.urlopen(req, timeout=2) as r:
        return r.read()


class Proc:
    """A daemon on free loopback ports; stopped with SIGTERM by its PID."""

    def __init__(self, name, args_for):
        self.tmp = tempfile.mkdtemp(prefix="pynsq-%s-" % name)
        for _ in range(5):
            self.tcp = "127.0.0.1:%d" % free_port()
            self.http = "127.0.0.1:%d" % free_port()
            self.proc = subprocess.Popen(
                [str(BIN / name)] + args_for(self),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.time() + 15
            while time.time() < deadline and self.proc.poll() is None:
                try:
                    if get(self.http, "/ping") == b"OK":
                        return
                except Exception:
                    time.sleep(0.05)
            self.stop()
        raise RuntimeError("%s did not start" % name)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def test_reader_via_lookupd_receives_from_two_nsqds():
    lookupd = Proc("nsqlookupd", lambda p: ["--tcp-address=" + p.tcp, "--http-address=" + p.http, "--broadcast-address=127.0.0.1"])
    nsqds = []
    try:
        for _ in range(2):
            nsqds.append(
                Proc(
                    "nsqd",
                    lambda p: [
                        "--tcp-address=" + p.tcp,
                        "--http-address=" + p.http,
                        "--data-path=" + p.tmp,
                        "--broadcast-address=127.0.0.1",
                        "--lookupd-tcp-address=" + lookupd.tcp,
                    ],
                )
            )
        expected = set()
        for i, n in enumerate(nsqds):
            for j in range(50):
                body = b"node%d-before-%d" % (i, j)
                post(n.http, "/pub?topic=qs", body)
                expected.add(body)

        received = []

        def handler(msg):
            received.append(msg.body)
            return True

        async def main():
            r = nsq.Reader(
                topic="qs",
                channel="ch",
                message_handler=handler,
                lookupd_http_addresses=["http://" + lookupd.http],
                lookupd_poll_interval=1,
                max_in_flight=10,
            )
            try:
                deadline = time.monotonic() + 30
                while len(set(received)) < len(expected) and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                # messages published after the reader connected arrive too
                for i, n in enumerate(nsqds):
                    for j in range(20):
                        body = b"node%d-after-%d" % (i, j)
                        post(n.http, "/pub?topic=qs", body)
                        expected.add(body)
                deadline = time.monotonic() + 30
                while len(set(received)) < len(expected) and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
            finally:
                r.close()

        asyncio.run(main())
        assert set(received) == expected
    finally:
        for n in nsqds:
            n.stop()
        lookupd.stop()
