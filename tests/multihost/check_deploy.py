#!/usr/bin/env python3
"""Assertions of the deployment phase of the multi-host test.

    python3 check_deploy.py --results RUN_DIR/results/RUN_ID

Twenty replicated users on alpha send one request per slot from 2 s to 6 s to
a scheduler on gamma over four replicated servers on beta and gamma; every
host was dialed by its DNS name. Every request must be served. Stdlib only.
"""

import argparse
import os
import sys

from checklib import check, failures, rows

USERS = 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    R = ap.parse_args().results
    print("deploy (generated pods, DNS names)")
    path = os.path.join(R, "alpha", "requests.csv")
    if not check(os.path.exists(path), "alpha wrote requests.csv"):
        return 1
    reqs = rows(path)
    users = {r["user"] for r in reqs}
    check(len(users) == USERS, f"{len(users)} users recorded requests (expected {USERS})")
    served = [r for r in reqs if r["outcome"] == "served"]
    check(len(reqs) >= USERS * 3, f"{len(reqs)} requests (expected about {USERS * 4})")
    check(len(served) == len(reqs), f"{len(served)} of {len(reqs)} requests served")
    servers = {r["server"] for r in served}
    check(len(servers) == 4, f"served by {sorted(servers)} (expected the four replicas)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
