#!/usr/bin/env python3
"""Assertions of the live KV-handoff part of the multi-host test.

    python3 check_handoff.py --live WORK/results/RUN --virtual WORK/results/VRUN

The live run (alpha -> beta over "wan", real time across namespaces) must
record every handoff on beta with outcome ok and the declared tokens
decoded. The same file in virtual time gives the co-simulation harness's
utility for the same channel draws (nodes/tests/handoff_live.rs checks that
equality); live, across namespaces, the recovered utility must be within
MEAN_TOLERANCE of it on average over the handoffs, and each handoff's within
HANDOFF_TOLERANCE (measured differences: README.md in this folder).
Stdlib only.
"""

import argparse
import os
import sys

from checklib import check, failures, rows

HANDOFFS = 3
TOKENS = 4
# |live - virtual| recovered utility (debug build, 2-core machine under load, 256-token
# ShareGPT context of SmolLM2, 4 320 frames, T_ser = 0.48 s; measured differences in
# README.md in this folder). Live, the repair policy's feedback arrives at other times
# than in virtual time, so one handoff may split its packets between source and repair
# otherwise and meet other channel draws: a single handoff differs by up to ~0.05. The
# mean over the handoffs is held to MEAN_TOLERANCE; a single handoff only to
# HANDOFF_TOLERANCE, which a handoff that lost its frames to lateness (0.3 and more)
# still fails.
MEAN_TOLERANCE = 0.05
HANDOFF_TOLERANCE = 0.15

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--live", required=True)
    ap.add_argument("--virtual", required=True)
    a = ap.parse_args()
    print("live KV handoff (alpha -> beta):")
    live_path = os.path.join(a.live, "beta", "handoffs.csv")
    virt_path = os.path.join(a.virtual, "beta", "handoffs.csv")
    if not check(os.path.isfile(live_path), f"{live_path} exists"):
        sys.exit(1)
    live = rows(live_path)
    virt = rows(virt_path) if os.path.isfile(virt_path) else []
    check(len(live) == HANDOFFS, f"{HANDOFFS} handoffs recorded live (got {len(live)})")
    check(len(virt) == HANDOFFS, f"{HANDOFFS} handoffs recorded in virtual time (got {len(virt)})")
    for r in live:
        h = r["handoff"]
        check(r["outcome"] == "ok", f"handoff {h}: outcome ok ({r['outcome']})")
        check(r["from"] == "a-alpha" and r["to"] == "b-beta", f"handoff {h}: a-alpha -> b-beta")
        check(int(r["tokens_decoded"] or 0) == TOKENS, f"handoff {h}: {TOKENS} tokens decoded")
        u = float(r["recovered_utility"])
        check(0.0 <= u <= 1.0, f"handoff {h}: utility {u} in [0, 1]")
        check(float(r["ttft_ms"] or 0) > 10.0, f"handoff {h}: TTFT {r['ttft_ms']} ms > one-way delay")
        check(r["policy"] == "deficit-heuristic", f"handoff {h}: policy recorded")
    diffs = []
    for lr, vr in zip(live, virt):
        lu, vu = float(lr["recovered_utility"]), float(vr["recovered_utility"])
        diffs.append(abs(lu - vu))
        check(abs(lu - vu) <= HANDOFF_TOLERANCE,
              f"handoff {lr['handoff']}: live utility {lu:.6f} within {HANDOFF_TOLERANCE} of virtual (harness) {vu:.6f} (diff {abs(lu - vu):.6f})")
    if diffs:
        mean = sum(diffs) / len(diffs)
        check(mean <= MEAN_TOLERANCE,
              f"mean |live - virtual| utility over {len(diffs)} handoffs {mean:.6f} within {MEAN_TOLERANCE}")
    if failures:
        print(f"handoff: {len(failures)} check(s) failed")
        sys.exit(1)
    print("handoff: all checks passed")


if __name__ == "__main__":
    main()
