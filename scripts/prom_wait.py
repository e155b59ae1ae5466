"""Waits until a running Prometheus shows something (scripts/check_monitoring.sh).

    python3 prom_wait.py ADDR SECONDS CHECK ARGS...

    targets N          N active targets, every one up
    series NAME...     every NAME has at least one series
    rules              every rule evaluated at least once, none with an error
    alerts A:K=V...    each alert A pending or firing with label K=V

Polls Prometheus's HTTP API every half second; exits 0 once CHECK holds,
else 1 after SECONDS with what is still missing and the last answer.
"""

import json
import sys
import time
import urllib.parse
import urllib.request


def api(addr, path, **query):
    url = f"http://{addr}/api/v1/{path}?" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)["data"]


def missing(addr, check, args):
    """What CHECK still lacks (empty once it holds), and the answer read."""
    if check == "targets":
        t = api(addr, "targets")["activeTargets"]
        bad = [f'{x["scrapeUrl"]}: {x["health"]} {x.get("lastError", "")}' for x in t if x["health"] != "up"]
        if len(t) != int(args[0]):
            bad.append(f"{len(t)} targets, not {args[0]}")
        return bad, t
    if check == "series":
        q = 'count by (__name__) ({__name__=~"%s"})' % "|".join(args)
        r = api(addr, "query", query=q)["result"]
        have = {x["metric"]["__name__"] for x in r}
        return [n for n in args if n not in have], r
    if check == "rules":
        groups = api(addr, "rules")["groups"]
        bad = [
            f'{r["name"]}: {r.get("lastError") or r["health"]}'
            for g in groups
            for r in g["rules"]
            if r["health"] != "ok" or not r.get("lastEvaluation", "").startswith("2")
        ]
        return bad, groups
    if check == "alerts":
        alerts = api(addr, "alerts")["alerts"]
        bad = []
        for want in args:
            name, _, kv = want.partition(":")
            key, _, value = kv.partition("=")
            if not any(a["labels"]["alertname"] == name and a["labels"].get(key) == value for a in alerts):
                bad.append(want)
        return bad, alerts
    sys.exit(f"prom_wait.py: unknown check {check}")


def main():
    addr, secs, check, args = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4:]
    deadline = time.monotonic() + secs
    while True:
        try:
            bad, last = missing(addr, check, args)
        except OSError as e:
            bad, last = [str(e)], None
        if not bad:
            return
        if time.monotonic() > deadline:
            sys.exit(f"after {secs:.0f} s still missing: {bad}\nlast answer: {json.dumps(last)[:3000]}")
        time.sleep(0.5)


main()
