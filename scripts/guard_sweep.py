#!/usr/bin/env python3
"""Summarize `edgemu experiment lyreo` sweeps of learned policies, guarded
(`NAME`) and unguarded (`raw:NAME`), against Least-Loaded.

Usage: scripts/guard_sweep.py RESULTS_DIR [RESULTS_DIR ...]

Each RESULTS_DIR is a run folder whose grid ran `least-loaded` next to the
learned policies (see docs/experiments/lyreo.md for the commands). Prints,
per policy, the worst ratio of its mean latency to Least-Loaded's over the
grid points (and where), the median ratio, and the share of its decisions
the guard placed with Least-Loaded.
"""
import json
import statistics
import sys
from collections import defaultdict


def main(dirs):
    ratios = defaultdict(list)
    worst = {}
    fallbacks = defaultdict(int)
    decisions = defaultdict(int)
    for d in dirs:
        s = json.load(open(f"{d}/summary.json"))
        wl = s["settings"]["workload"]
        mob = s["settings"]["mobility"]
        slots = s["settings"]["slots"]
        ll = {(g["users"], g["servers"], g["mix"], g["nu"]): g["lat_mean_s"]
              for g in s["grid"] if g["policy"] == "least-loaded"}
        for g in s["grid"]:
            p = g["policy"]
            if p == "least-loaded":
                continue
            k = (g["users"], g["servers"], g["mix"], g["nu"])
            if k not in ll:
                continue
            r = g["lat_mean_s"] / ll[k]
            ratios[p].append(r)
            if r > worst.get(p, (0.0, None))[0]:
                worst[p] = (r, f"U={k[0]} S={k[1]} {k[2]} {wl} {mob}")
            fallbacks[p] += g.get("fallbacks", 0)
            decisions[p] += g["users"] * slots * g["seeds"]
    print(f"{'policy':16s} {'points':>6s} {'median lat/LL':>13s} {'worst lat/LL':>12s}  "
          f"{'guard %':>7s}  worst at")
    for p in sorted(ratios):
        rs = ratios[p]
        print(f"{p:16s} {len(rs):6d} {statistics.median(rs):13.3f} {worst[p][0]:12.3f}  "
              f"{100.0 * fallbacks[p] / max(decisions[p], 1):7.2f}  {worst[p][1]}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
