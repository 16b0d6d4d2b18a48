#!/usr/bin/env python3
"""Assertions of the live LYREO part of the multi-host test on its results.

    python3 check_lyreo.py --results WORK/results/RUN_ID

Users (alpha) send one request per 1 s slot from 2 s to 6 s: 2 users x 4
slots. Every request must be recorded on alpha with its upload, wait,
prefill, decode and end-to-end latency; the real server (beta) must have
served some; the scheduler's decisions (gamma) name the policy. Stdlib only.
"""

import hashlib
import argparse
import os
import sys

from checklib import check, failures, rows

USERS = ["u0", "u1"]
SLOTS = 4
LINK_DELAY_S = 0.010

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    R = ap.parse_args().results
    print("lyreo (live, across hosts)")
    path = os.path.join(R, "alpha", "requests.csv")
    if not check(os.path.exists(path), "alpha wrote requests.csv"):
        return 1
    reqs = rows(path)
    for u in USERS:
        n = sum(1 for r in reqs if r["user"] == u)
        check(n == SLOTS, f"{u}: {n} request records (expected {SLOTS})")
    served = [r for r in reqs if r["outcome"] == "served"]
    check(len(served) == len(reqs), f"{len(served)} of {len(reqs)} requests served")
    for r in served:
        parts = [float(r[k]) for k in ("sched_s", "upload_s", "wait_s", "prefill_s", "decode_s")]
        e2e = float(r["e2e_s"])
        ok = abs(sum(parts) - e2e) < 0.001 and float(r["upload_s"]) >= LINK_DELAY_S and float(r["decode_s"]) > 0
        check(ok, f"request {r['id']} ({r['user']} -> {r['server']}): sched {parts[0]:.3f} + upload {parts[1]:.4f} + wait {parts[2]:.4f} + prefill {parts[3]:.4f} + decode {parts[4]:.4f} = e2e {e2e:.4f} s")
        check(r["policy"] == "least-loaded" and r["policy_version"] == hashlib.sha256(b"least-loaded\x00").hexdigest(), f"request {r['id']} records its policy and version")
    check(any(r["server"] == "s-real" for r in served), "the real SmolLM2 server served requests")
    slots_path = os.path.join(R, "beta", "server_slots.csv")
    if check(os.path.exists(slots_path), "beta wrote server_slots.csv"):
        sl = rows(slots_path)
        real = [r for r in sl if r["server"] == "s-real"]
        check(any(int(r["iterations"]) > 0 for r in real), f"s-real ran decode iterations on the real backend ({sum(int(r['iterations']) for r in real)})")
        check(all(r["backend"] == "real" for r in real), "s-real rows say backend real")
    dec_path = os.path.join(R, "gamma", "decisions.csv")
    if check(os.path.exists(dec_path), "gamma wrote decisions.csv"):
        d = rows(dec_path)
        check(len(d) == len(USERS) * SLOTS, f"{len(d)} decisions (expected {len(USERS) * SLOTS})")
    print()
    if failures:
        print(f"multihost lyreo: {len(failures)} check(s) FAILED:")
        for f in failures:
            print(f"  - {f}")
        return 1
    print("multihost lyreo: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
