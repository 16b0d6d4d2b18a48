"""What the multi-host phase checks share: one line per check, the failures
kept for the verdict, and a results CSV read as dicts. Stdlib only."""

import csv

failures = []


def check(ok, what):
    print(("  ok    " if ok else "  FAIL  ") + what)
    if not ok:
        failures.append(what)
    return ok


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))
