"""Interop: pynsq's TLS, Snappy, DEFLATE and AUTH against our nsqd.

A pynsq Writer publishes and a pynsq Reader consumes through each layer
(and TLS with Snappy stacked); /stats must show the layer on the clients.
Certificates are made here with `cryptography` (a CA and a server cert for
127.0.0.1); the auth server is a tiny http.server thread.

Binary: $NSQ_BIN_DIR/nsqd if NSQ_BIN_DIR is set, else <repo>/target/debug/nsqd.
"""

import asyncio
import datetime
import http.server
import ipaddress
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

import nsq
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from test_pynsq import free_port, http_get, nsqd_binary, wait_until


# ---------------------------------------------------------------------------
# certificates
# ---------------------------------------------------------------------------


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


@pytest.fixture(scope="module")
def pki():
    d = tempfile.mkdtemp(prefix="pynsq-pki-")
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("pynsq test CA"))
        .issuer_name(_name("pynsq test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = {n: os.path.join(d, n) for n in ("ca.pem", "cert.pem", "key.pem")}
    with open(paths["ca.pem"], "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(paths["cert.pem"], "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(paths["key.pem"], "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    yield paths
    shutil.rmtree(d, ignore_errors=True)


def tls_options(pki):
    return {"cert_reqs": ssl.CERT_REQUIRED, "ca_certs": pki["ca.pem"]}


# ---------------------------------------------------------------------------
# nsqd with extra flags
# ---------------------------------------------------------------------------


class Nsqd:
    def __init__(self, *extra):
        self.data = tempfile.mkdtemp(prefix="pynsq-sec-nsqd-")
        self.log = open(os.path.join(self.data, "nsqd.log"), "wb")
        for _ in range(5):
            self.tcp = "127.0.0.1:%d" % free_port()
            self.http = "127.0.0.1:%d" % free_port()
            args = [
                nsqd_binary(),
                "--tcp-address=" + self.tcp,
                "--http-address=" + self.http,
                "--https-address=127.0.0.1:%d" % free_port(),
                "--data-path=" + self.data,
            ] + list(extra)
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
            deadline = time.time() + 20
            while time.time() < deadline and self.proc.poll() is None:
                try:
                    if http_get(self.http, "/ping", timeout=1) == (200, b"OK"):
                        return
                except Exception:
                    pass
                time.sleep(0.05)
            self.stop()
        raise RuntimeError("nsqd did not start")

    # the secret for nsqd's HTTP API when it runs with --http-auth-required
    http_secret = None

    def stats(self):
        req = urllib.request.Request("http://%s/stats?format=json" % self.http)
        if self.http_secret:
            req.add_header("Authorization", "Bearer " + self.http_secret)
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.status == 200
            return json.loads(r.read())

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


@pytest.fixture
def nsqd_tls(pki):
    n = Nsqd("--tls-cert=" + pki["cert.pem"], "--tls-key=" + pki["key.pem"])
    try:
        yield n
    finally:
        n.close()


# ---------------------------------------------------------------------------
# publish through a pynsq Writer, consume through a pynsq Reader
# ---------------------------------------------------------------------------


def pub_and_consume(nsqd, topic, bodies, **conn_kwargs):
    """Publish `bodies` with a Writer and consume them with a Reader, both
    built with `conn_kwargs`; return the bodies received and the channel's
    /stats taken while the Reader is still connected."""
    channel = "ch"

    async def main():
        w = nsq.Writer([nsqd.tcp], **conn_kwargs)
        await wait_until(lambda: any(c.connected() for c in w.conns.values()), 15, "writer connection")
        acks = []
        for b in bodies:
            w.pub(topic, b, callback=lambda c, d: acks.append(d))
        received = []

        def handler(msg):
            received.append(msg.body)
            return True

        r = nsq.Reader(
            topic=topic,
            channel=channel,
            message_handler=handler,
            nsqd_tcp_addresses=[nsqd.tcp],
            max_in_flight=50,
            **conn_kwargs
        )
        try:
            await wait_until(lambda: len(acks) == len(bodies), 30, "publish responses")
            assert all(a == b"OK" for a in acks), acks[:5]
            await wait_until(lambda: len(received) >= len(bodies), 30, "all messages consumed")
            await wait_until(
                lambda: (nsqd.channel(topic, channel) or {}).get("in_flight_count") == 0, 15, "FINs applied"
            )
            stats = nsqd.stats()
        finally:
            r.close()
            for c in list(w.conns.values()):
                c.close()
        return received, stats

    return asyncio.run(main())


def bodies(prefix, n=100):
    out = [b"%s-%03d" % (prefix, i) for i in range(n)]
    out.append(prefix + b"-big-" + b"compressible " * 20000)
    return out


def producer_of(stats):
    return (stats.get("producers") or [{}])[0]


def consumer_of(stats, topic):
    for t in stats["topics"]:
        if t["topic_name"] == topic:
            return t["channels"][0]["clients"][0]
    raise AssertionError("no consumer for %s" % topic)


def test_tls_v1(nsqd_tls, pki):
    sent = bodies(b"tls")
    received, stats = pub_and_consume(nsqd_tls, "py_tls", sent, tls_v1=True, tls_options=tls_options(pki))
    assert sorted(received) == sorted(sent)
    c = consumer_of(stats, "py_tls")
    assert c["tls"] is True and c["tls_version"] == "TLS1.2", c  # pynsq pins TLS 1.2
    assert producer_of(stats)["tls"] is True


def test_snappy(nsqd_tls):
    sent = bodies(b"snappy")
    received, stats = pub_and_consume(nsqd_tls, "py_snappy", sent, snappy=True)
    assert sorted(received) == sorted(sent)
    c = consumer_of(stats, "py_snappy")
    assert c["snappy"] is True and c["deflate"] is False and c["tls"] is False, c
    assert producer_of(stats)["snappy"] is True


def test_deflate(nsqd_tls):
    sent = bodies(b"deflate")
    received, stats = pub_and_consume(nsqd_tls, "py_deflate", sent, deflate=True, deflate_level=3)
    assert sorted(received) == sorted(sent)
    c = consumer_of(stats, "py_deflate")
    assert c["deflate"] is True and c["snappy"] is False, c
    assert producer_of(stats)["deflate"] is True


def test_tls_and_snappy(nsqd_tls, pki):
    sent = bodies(b"tls+snappy", 30)
    received, stats = pub_and_consume(
        nsqd_tls, "py_tls_snappy", sent, tls_v1=True, tls_options=tls_options(pki), snappy=True
    )
    assert sorted(received) == sorted(sent)
    c = consumer_of(stats, "py_tls_snappy")
    assert c["tls"] is True and c["snappy"] is True, c


# ---------------------------------------------------------------------------
# AUTH
# ---------------------------------------------------------------------------


class AuthHandler(http.server.BaseHTTPRequestHandler):
    seen = []

    def do_GET(self):
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query, keep_blank_values=True)
        AuthHandler.seen.append(q)
        if q.get("secret") == ["py-secret"]:
            body = json.dumps(
                {
                    "ttl": 60,
                    "identity": "pynsq",
                    "identity_url": "",
                    "authorizations": [
                        {"topic": "^py_auth$", "channels": [".*"], "permissions": ["subscribe", "publish"]}
                    ],
                }
            ).encode()
            self.send_response(200)
        else:
            body = b'{"message":"denied"}'
            self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_auth_secret(pki):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), AuthHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    n = Nsqd("--auth-http-address=127.0.0.1:%d" % srv.server_address[1])
    try:
        sent = bodies(b"auth", 20)
        received, stats = pub_and_consume(n, "py_auth", sent, auth_secret="py-secret")
        assert sorted(received) == sorted(sent)
        c = consumer_of(stats, "py_auth")
        assert c["authed"] is True and c["auth_identity"] == "pynsq", c
        assert AuthHandler.seen and all(q["secret"] == ["py-secret"] for q in AuthHandler.seen)
        assert AuthHandler.seen[0]["remote_ip"] == ["127.0.0.1"] and AuthHandler.seen[0]["tls"] == ["false"]
    finally:
        n.close()
        srv.shutdown()


# ---------------------------------------------------------------------------
# AUTH over TCP beside the HTTP access control (--http-auth-required)
# ---------------------------------------------------------------------------


class HttpAccessAuthHandler(http.server.BaseHTTPRequestHandler):
    """py-secret may publish and subscribe to py_http_auth*; anything else is refused."""

    def do_GET(self):
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query, keep_blank_values=True)
        if q.get("secret") == ["py-secret"]:
            body = json.dumps(
                {
                    "ttl": 60,
                    "identity": "pynsq",
                    "identity_url": "",
                    "authorizations": [
                        {"topic": "^py_http_auth", "channels": [".*"], "permissions": ["subscribe", "publish"]}
                    ],
                }
            ).encode()
            self.send_response(200)
        else:
            body = b'{"message":"denied"}'
            self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def http_status(url, method="GET", body=None, secret=None):
    req = urllib.request.Request(url, data=body, method=method)
    if secret:
        req.add_header("Authorization", "Bearer " + secret)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_tcp_auth_beside_http_access_control():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HttpAccessAuthHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    n = Nsqd("--auth-http-address=127.0.0.1:%d" % srv.server_address[1], "--http-auth-required")
    n.http_secret = "py-secret"
    try:
        base = "http://%s" % n.http
        # HTTP: the same secret, as a bearer token
        assert http_status(base + "/ping") == (200, b"OK")
        status, body = http_status(base + "/pub?topic=py_http_auth", "POST", b"over-http")
        assert (status, json.loads(body)) == (401, {"message": "UNAUTHORIZED"})
        status, body = http_status(base + "/pub?topic=py_http_auth", "POST", b"over-http", "wrong")
        assert status == 401
        status, body = http_status(base + "/pub?topic=other", "POST", b"x", "py-secret")
        assert (status, json.loads(body)) == (403, {"message": "FORBIDDEN"})
        status, body = http_status(base + "/topic/delete?topic=py_http_auth", "POST", b"", "py-secret")
        assert status == 403, "publish and subscribe are not admin"
        assert http_status(base + "/pub?topic=py_http_auth_2", "POST", b"over-http", "py-secret") == (200, b"OK")
        # TCP: pynsq's Writer and Reader AUTH with it and move messages
        sent = bodies(b"httpauth", 20)
        received, stats = pub_and_consume(n, "py_http_auth", sent, auth_secret="py-secret")
        assert sorted(received) == sorted(sent)
        c = consumer_of(stats, "py_http_auth")
        assert c["authed"] is True and c["auth_identity"] == "pynsq", c
        names = [t["topic_name"] for t in stats["topics"]]
        assert sorted(names) == ["py_http_auth", "py_http_auth_2"], names
    finally:
        n.close()
        srv.shutdown()


# ---------------------------------------------------------------------------
# TLS between the daemons: a TLS-only nsqlookupd, nsqd registering over
# tls://, and a pynsq Reader querying the lookupd over https://
# ---------------------------------------------------------------------------

READER_SCRIPT = r"""
import asyncio, sys, nsq
got = []
def handler(msg):
    got.append(msg.body)
    return True
async def main():
    r = nsq.Reader(topic="lk_tls", channel="ch", message_handler=handler,
                   lookupd_http_addresses=[sys.argv[1]], lookupd_poll_interval=1,
                   max_in_flight=10)
    for _ in range(300):
        if got:
            break
        await asyncio.sleep(0.05)
    r.close()
    sys.stdout.write(b"".join(got).decode())
asyncio.run(main())
"""


def test_reader_queries_an_https_lookupd_and_nsqd_registers_over_tls(pki):
    lookupd_bin = os.path.join(os.path.dirname(nsqd_binary()), "nsqlookupd")
    tcp = "127.0.0.1:%d" % free_port()
    https = "127.0.0.1:%d" % free_port()
    log = tempfile.TemporaryFile()
    lookupd = subprocess.Popen(
        [
            lookupd_bin,
            "--tcp-address=" + tcp,
            "--http-address=",
            "--https-address=" + https,
            "--tls-required",
            "--tls-cert=" + pki["cert.pem"],
            "--tls-key=" + pki["key.pem"],
            "--broadcast-address=127.0.0.1",
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    ctx = ssl.create_default_context(cafile=pki["ca.pem"])

    def lookup():
        url = "https://%s/lookup?topic=lk_tls" % https
        try:
            with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
                return json.loads(r.read())["producers"]
        except Exception:
            return []

    n = Nsqd(
        "--lookupd-tcp-address=tls://" + tcp,
        "--tls-root-ca-file=" + pki["ca.pem"],
        "--broadcast-address=127.0.0.1",
    )
    try:
        status, _ = http_get(n.http, "/ping")
        assert status == 200
        req = urllib.request.Request("http://%s/pub?topic=lk_tls" % n.http, data=b"via https lookupd", method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.status == 200
        deadline = time.monotonic() + 15
        while len(lookup()) != 1:
            assert time.monotonic() < deadline, "the lookupd never listed the nsqd"
            time.sleep(0.1)
        # pynsq's lookupd queries go through tornado's default TLS context:
        # the test CA reaches it the way a user's would, as SSL_CERT_FILE.
        env = dict(os.environ, SSL_CERT_FILE=pki["ca.pem"])
        out = subprocess.run(
            [sys.executable, "-c", READER_SCRIPT, "https://" + https],
            env=env,
            capture_output=True,
            timeout=60,
        )
        assert out.stdout.decode() == "via https lookupd", out.stderr.decode()[-2000:]
    finally:
        n.close()
        if lookupd.poll() is None:
            lookupd.send_signal(signal.SIGTERM)
            lookupd.wait(timeout=10)
        log.close()
