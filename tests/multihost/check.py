#!/usr/bin/env python3
"""Assertions of the multi-host test (tests/multihost/run.sh) on its results.

    python3 check.py --results WORK/results/RUN_ID --work WORK

WORK holds what run.sh recorded: ctl/<name>.{json,err,rc} (each `edgemu ctl`
call), logs/cluster-<host>.log (each node's stderr) and timeline.json (run start and
the wall-clock time gamma was killed, node exit codes). Times in the results
are run time in ns since the run epoch (start_unix_ns in run.json); every
namespace shares one clock, so wall-clock times convert exactly.

Prints what each check measured; exits 1 if any check failed. Stdlib only.
"""

import argparse
import csv
import json
import os
import sys

from checklib import check, failures, rows

MS = 1_000_000
S = 1_000_000_000

# Must match tests/multihost/cluster.toml and run.sh.
WAN_SENDER_BPS = 5_000_000
WAN_DELAY_NS = 40 * MS
KILL_FOR_NS = 3 * S
CELL_SENDER_BPS = 15_000_000
CELL_NEW_BPS = 8_000_000
RUN_END_NS = 20 * S
DOWN_WITHIN_NS = 3 * S
RATE_TOL = 0.05
# See the wan checks.
SENT_MARGIN_NS = 50 * MS
LEAD_MARGIN_NS = 5 * MS

def section(title):
    print(title)


def load_json(path):
    with open(path) as f:
        return json.load(f)


def events(results, host):
    out = []
    path = os.path.join(results, host, "events.jsonl")
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                # A killed node may leave a torn last line.
                pass
    return out


def probes(results, host, flow):
    """Packet records of `flow` at `host` (a killed host may leave a torn last line)."""
    out = []
    path = os.path.join(results, host, "probes.csv")
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            try:
                if r["kind"] != "packet" or r["flow"] != flow:
                    continue
                out.append({
                    "seq": int(r["seq"]),
                    "size": int(r["size"]),
                    "sent": int(r["sent_ns"]),
                    "due": int(r["due_ns"]) if r["due_ns"] else None,
                    "recv": int(r["recv_ns"]),
                })
            except (KeyError, TypeError, ValueError):
                pass
    return out


def link_of(e):
    """(link, dir) an event is about: {"target": "link wan ab"} or {"link": .., "dir": ..}."""
    d = e.get("detail") or {}
    t = d.get("target", "")
    if t.startswith("link "):
        parts = t.split()
        return parts[1], parts[2] if len(parts) > 2 else None
    return d.get("link"), d.get("dir")


def rtts(results, host, flow):
    path = os.path.join(results, host, "probes.csv")
    return [r for r in rows(path) if r.get("kind") == "rtt" and r.get("flow") == flow]


def links(results, host, name, direction):
    path = os.path.join(results, host, "links.csv")
    return [r for r in rows(path) if r["link"] == name and r["dir"] == direction]


def rate_bps(rows, lo, hi):
    """Received bits/s over [lo, hi) from packet records."""
    bits = sum(r["size"] * 8 for r in rows if lo <= r["recv"] < hi)
    return bits / ((hi - lo) / S)


def ctl(work, name):
    base = os.path.join(work, "ctl", name)
    with open(base + ".rc") as f:
        rc = int(f.read().strip())
    with open(base + ".json") as f:
        out = f.read()
    with open(base + ".err") as f:
        err = f.read()
    reply = None
    if rc == 0:
        try:
            reply = json.loads(out)
        except json.JSONDecodeError:
            pass
    return rc, reply, err.strip()


def s(ns):
    return f"{ns / S:.3f} s"


def applied(reply, host, target):
    for a in (reply or {}).get("applied", []):
        if a.get("host") == host and a.get("target") == target:
            return a
    return None


def within(measured, want, tol=RATE_TOL):
    return abs(measured - want) <= tol * want


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True, help="results/<run-id> folder")
    ap.add_argument("--work", required=True, help="run.sh's work folder")
    a = ap.parse_args()
    R, W = a.results, a.work

    run = load_json(os.path.join(R, "run.json"))
    tl = load_json(os.path.join(W, "timeline.json"))
    start = run["start_unix_ns"]
    kill_gamma = tl["gamma_kill_unix_ns"] - start
    print(f"multihost check: {R}")
    print(f"  run start unix {start} ns; gamma killed at run time {s(kill_gamma)}")

    ev = {h: events(R, h) for h in ("alpha", "beta", "gamma")}

    # ---------------------------------------------------------------- status
    section("status across the mesh (t = 1 s, asked of beta from alpha's namespace)")
    rc, reply, err = ctl(W, "status-start")
    if check(rc == 0 and reply is not None, f"status succeeded (rc {rc} {err})"):
        hosts = {h.get("host"): h for h in reply.get("hosts", [])}
        check(set(hosts) == {"alpha", "beta", "gamma"} and all("error" not in h for h in hosts.values()),
              f"status reports all three hosts without error: {sorted(k for k in hosts if k)}")

    # ---------------------------------------------------------------- wan kill
    section("link.kill wan for 3 s (asked of gamma, which owns neither direction)")
    rc, reply, err = ctl(W, "kill-wan")
    k = None
    if check(rc == 0 and reply is not None, f"kill succeeded (rc {rc} {err})"):
        ab = applied(reply, "alpha", "link wan ab")
        ba = applied(reply, "beta", "link wan ba")
        check(ab is not None and ba is not None and "error" not in ab and "error" not in ba
              and not reply.get("errors"),
              f"forwarded to both owners: applied {reply.get('applied')}, errors {reply.get('errors')}")
        if ab is not None:
            k = ab["effective_ns"]
    if k is not None:
        kills = [e for e in ev["alpha"] if e["kind"] == "link.kill" and link_of(e) == ("wan", "ab")]
        restores = [e for e in ev["alpha"] if e["kind"] == "link.restore" and link_of(e) == ("wan", "ab")]
        check(len(kills) == 1 and kills[0]["t_ns"] == k and "via gamma" in kills[0]["source"],
              f"alpha logged one link.kill of wan at {s(k)}: {[(e['t_ns'], e['source']) for e in kills]}")
        r = restores[0]["t_ns"] if restores else None
        ok = r is not None and len(restores) == 1 and KILL_FOR_NS <= r - k <= KILL_FOR_NS + 500 * MS
        check(ok, f"alpha logged one link.restore of wan ab {('after ' + s(r - k)) if r else 'never'} (want 3 s)")
        if r is None:
            r = k + KILL_FOR_NS
        pk = probes(R, "beta", "cbr-wan")
        before = [p for p in pk if p["recv"] < k]
        lo, hi = k + WAN_DELAY_NS + 5 * MS, r
        window = [p for p in pk if lo <= p["recv"] <= hi]
        # A sender stamps a packet before the link actor sees it: one stamped
        # just before the restore may be offered just after it (and a burst
        # shares one stamp), hence the margin at the end.
        sent_in = [p for p in pk if k <= p["sent"] < r - SENT_MARGIN_NS]
        # The link releases a packet up to half the base RTT before it is due
        # (the lead): one due within the lead of the kill was already on the
        # wire. A packet due later than that was in the link and must be gone.
        early = [p for p in pk if p["due"] is not None and k < p["due"] < k + LEAD_MARGIN_NS]
        due_in = [p for p in pk if p["due"] is not None and k + LEAD_MARGIN_NS <= p["due"] <= r]
        after = [p for p in pk if p["recv"] > r]
        in_flight = [p for p in pk if p["recv"] <= k + LEAD_MARGIN_NS]
        gap = None
        if before and after:
            gap = min(p["seq"] for p in after) - max(p["seq"] for p in in_flight or before) - 1
        print(f"    sink-beta packets of cbr-wan: {len(before)} before the kill, {len(window)} received in "
              f"[{s(lo)}, {s(hi)}], {len(after)} after the restore; {gap} sequence numbers lost "
              f"(about {(r - k + WAN_DELAY_NS) / S * WAN_SENDER_BPS / 11200:.0f} expected: 3 s + one delay)")
        check(len(window) == 0, f"nothing received in the kill window [{s(lo)}, {s(hi)}]: {len(window)} packets")
        check(len(sent_in) == 0, f"nothing sent during the kill was delivered (sent in [{s(k)}, {s(r - SENT_MARGIN_NS)}]): "
                                 f"{len(sent_in)} packets")
        check(len(due_in) == 0, f"packets in flight at the kill were dropped (none due in [{s(k + LEAD_MARGIN_NS)}, {s(r)}]): "
                                f"{len(due_in)} packets ({len(early)} due within {LEAD_MARGIN_NS / MS:g} ms of the kill "
                                f"had already left)")
        b = rate_bps(pk, 1 * S, k)
        check(len(before) > 0 and within(b, WAN_SENDER_BPS),
              f"traffic before the kill: {b / 1e6:.3f} Mb/s over [1 s, {s(k)}] (want {WAN_SENDER_BPS / 1e6:g} ± 5 %)")
        first_after = min((p["recv"] for p in after), default=None)
        check(first_after is not None and first_after - r <= 500 * MS,
              f"traffic resumes after the restore: first packet {s(first_after - r) if first_after else 'never'} later")
        x = rate_bps(pk, r + 500 * MS, RUN_END_NS - 1 * S)
        check(len(after) > 0 and within(x, WAN_SENDER_BPS),
              f"traffic after the restore: {x / 1e6:.3f} Mb/s over [{s(r + 500 * MS)}, {s(RUN_END_NS - S)}] "
              f"(want {WAN_SENDER_BPS / 1e6:g} ± 5 %)")

    # ---------------------------------------------------------------- cell rate
    section("link.set cell ab rate 8 Mb/s (asked of alpha; beta owns it)")
    rc, reply, err = ctl(W, "set-cell")
    st = None
    if check(rc == 0 and reply is not None, f"set succeeded (rc {rc} {err})"):
        ab = applied(reply, "beta", "link cell ab")
        check(ab is not None and "error" not in ab and len(reply.get("applied", [])) == 1 and not reply.get("errors"),
              f"forwarded to beta only: applied {reply.get('applied')}, errors {reply.get('errors')}")
        if ab is not None:
            st = ab["effective_ns"]
    if st is not None:
        sets = [e for e in ev["beta"] if e["kind"] == "link.set" and link_of(e)[0] == "cell"]
        check(len(sets) == 1 and sets[0]["t_ns"] == st and "via alpha" in sets[0]["source"],
              f"beta logged one link.set of cell at {s(st)}: {[(e['t_ns'], e['source']) for e in sets]}")
        pc = probes(R, "gamma", "cbr-cell")
        # gamma was killed at kill_gamma: its last buffered probe lines may be lost.
        end = kill_gamma - 500 * MS
        b = rate_bps(pc, 1 * S, st)
        check(within(b, CELL_SENDER_BPS),
              f"before: sink-gamma received {b / 1e6:.3f} Mb/s over [1 s, {s(st)}] "
              f"(offered {CELL_SENDER_BPS / 1e6:g} Mb/s, link 20 Mb/s; want ± 5 %)")
        lo = st + 1 * S
        check(end - lo >= 2 * S, f"reduced-rate window [{s(lo)}, {s(end)}] is at least 2 s long")
        x = rate_bps(pc, lo, end)
        check(within(x, CELL_NEW_BPS),
              f"after: sink-gamma received {x / 1e6:.3f} Mb/s over [{s(lo)}, {s(end)}] "
              f"(new rate {CELL_NEW_BPS / 1e6:g} Mb/s, {100 * (x / CELL_NEW_BPS - 1):+.2f} %; want ± 5 %)")
        rows = links(R, "beta", "cell", "ab")
        win = [r for r in rows if lo <= float(r["t_s"]) * S <= end]
        if check(len(win) >= 2, f"beta links.csv has {len(win)} cell ab samples in the window"):
            t0, t1 = float(win[0]["t_s"]), float(win[-1]["t_s"])
            bits = (int(win[-1]["bytes_delivered"]) - int(win[0]["bytes_delivered"])) * 8
            y = bits / (t1 - t0)
            check(within(y, CELL_NEW_BPS) and all(r["rate_bps"] == str(CELL_NEW_BPS) for r in win),
                  f"links.csv: delivered {y / 1e6:.3f} Mb/s over [{t0:.3f} s, {t1:.3f} s], "
                  f"rate_bps {sorted(set(r['rate_bps'] for r in win))} (want {CELL_NEW_BPS})")
            dropped = int(win[-1]["queue_dropped"]) - int(win[0]["queue_dropped"])
            check(dropped > 0, f"the excess offered load was queue-dropped: {dropped} packets in the window")
        bad = [r for r in rows if float(r["t_s"]) * S < st and r["rate_bps"] != "20000000"]
        check(not bad, f"links.csv shows 20 Mb/s before the set ({len(bad)} rows differ)")

    # ---------------------------------------------------------------- refusals
    section("refused commands (wrong token to beta, no token to alpha)")
    for name, why in (("refused-wrong", "unauthorized: wrong token"), ("refused-unset", "unauthorized: missing token")):
        rc, _, err = ctl(W, name)
        check(rc != 0 and why in err, f"{name}: rc {rc}, {err!r} (want non-zero and {why!r})")
    killed_cell = [e for h in ev for e in ev[h] if e["kind"] == "link.kill" and link_of(e)[0] == "cell"]
    check(not killed_cell, f"the refused link.kill cell left no event ({len(killed_cell)} found)")
    wan_kills = [e for h in ev for e in ev[h] if e["kind"] == "link.kill" and link_of(e)[0] == "wan"]
    check(len(wan_kills) == 2, f"only the authorized wan kill (both directions) left link.kill events: {len(wan_kills)}")
    for h, why in (("beta", "wrong token"), ("alpha", "missing token")):
        with open(os.path.join(W, "logs", f"cluster-{h}.log"), errors="replace") as f:
            text = f.read()
        check(f"control request refused: {why}" in text, f"{h}'s log says the request was refused ({why})")
    sets = [e for h in ev for e in ev[h] if e["kind"] == "link.set"]
    check(len(sets) == 1, f"exactly one link.set event in the run (the authorized one): {len(sets)}")

    # ---------------------------------------------------------------- node kill
    section("gamma killed with SIGKILL")
    for h in ("alpha", "beta"):
        downs = [e for e in ev[h] if e["kind"] == "peer.down" and e["detail"].get("peer") == "gamma"]
        early = [e for e in ev[h] if e["kind"] == "peer.down" and e["t_ns"] < kill_gamma - 100 * MS]
        check(not early, f"{h}: no peer went down before the kill: {[(e['t_ns'], e['detail']) for e in early]}")
        if check(bool(downs), f"{h} logged peer.down for gamma"):
            d = downs[0]["t_ns"] - kill_gamma
            check(-100 * MS <= d <= DOWN_WITHIN_NS,
                  f"{h} logged gamma down {d / MS:.1f} ms after the kill (want ≤ 3000 ms)")
    rc, reply, err = ctl(W, "status-end")
    if check(rc == 0 and reply is not None, f"status after the kill succeeded (rc {rc} {err})"):
        hs = reply.get("hosts", [])
        ok_hosts = sorted(h["host"] for h in hs if "host" in h and "error" not in h)
        errs = [h.get("error", "") for h in hs if "error" in h]
        check(ok_hosts == ["alpha", "beta"] and len(errs) == 1 and "gamma" in errs[0],
              f"status reports alpha and beta, and gamma unreachable: {ok_hosts}, {errs}")
    pings = rtts(R, "alpha", "ping")
    check(len(pings) > 0, f"alpha's pinger got {len(pings)} round trips from gamma over the mesh")
    for h in ("alpha", "beta"):
        code = tl["exit_codes"][h]
        path = os.path.join(R, h, "summary.json")
        ok = code == 0 and os.path.isfile(path)
        reason = end_ns = None
        if ok:
            sm = load_json(path)
            reason, end_ns = sm.get("stop_reason"), sm.get("end_ns", 0)
            ok = reason == "duration reached" and end_ns >= RUN_END_NS
        check(ok, f"{h} finished the run: exit {code}, summary.json stop_reason {reason!r}, end {s(end_ns or 0)}")
        ends = [e for e in ev[h] if e["kind"] == "run.end"]
        check(len(ends) == 1, f"{h} logged run.end")
    check(not os.path.exists(os.path.join(R, "gamma", "summary.json")), "gamma (killed) wrote no summary.json")

    print()
    if failures:
        print(f"multihost: {len(failures)} check(s) FAILED:")
        for f in failures:
            print(f"  - {f}")
        return 1
    print("multihost: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
