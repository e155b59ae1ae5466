"""Prints N distinct loopback ports, each free a moment ago: python3 free_ports.py N

Picked at random below the kernel's ephemeral range (as tests/src/ports.rs
does, for the same reason: a port found free inside it can become some
outgoing connection's local port before the daemon binds it), checked by
binding, and claimed in $TMPDIR/nsq-rs-test-ports/ like the Rust tests'
picks, so a test running beside this script does not take the same port.
"""

import os
import random
import socket
import sys
import time


def pick_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return (low // 2, low) if low >= 10000 else (61000, 65535)


def claim(port):
    d = os.path.join(os.environ.get("TMPDIR", "/tmp"), "nsq-rs-test-ports")
    try:
        os.makedirs(d, exist_ok=True)
    except OSError:
        return True
    path = os.path.join(d, str(port))
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        return True
    except FileExistsError:
        try:
            stale = time.time() - os.path.getmtime(path) > 60
        except OSError:
            return False
        if stale:
            os.utime(path)
        return stale


def free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def main():
    n = int(sys.argv[1])
    lo, hi = pick_range()
    ports = []
    for _ in range(100 * n):
        p = random.randrange(lo, hi)
        if p not in ports and free(p) and claim(p):
            ports.append(p)
            if len(ports) == n:
                print(" ".join(map(str, ports)))
                return
    sys.exit("free_ports.py: no free ports below the ephemeral range")


main()
