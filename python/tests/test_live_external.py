"""A live edgemu run (real time, loopback) whose scheduler and sending agent
ask a Python policy served by `edgemu.serve_policy`: every decision is
answered when the process is up, and killing the process mid-run costs no
request (the fallback decides, counted as `disconnected`).

The run is examples/external-policy.toml, shortened, with the policy's port
and generous deadlines (what is asserted are counts, never times; the round
trips are printed). The `edgemu` binary comes from $EDGEMU_BIN, else the
workspace's target folder; without one the tests are skipped, except under
CI=true, where they fail.
"""

import csv
import os
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import edgemu


def edgemu_bin(root):
    cands = [os.environ.get("EDGEMU_BIN")]
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(root, "target")
    cands += [os.path.join(target, p, "edgemu") for p in ("debug", "release")]
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    if os.environ.get("CI") == "true":
        pytest.fail("no edgemu binary (set EDGEMU_BIN or build it with cargo build -p edgemu-nodes)")
    pytest.skip("no edgemu binary (set EDGEMU_BIN or build it with cargo build -p edgemu-nodes)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def least_loaded(obs, info):
    """Every request of the slot on the server with the least KV held and
    reserved; the first feasible repair action."""
    if info["problem"] == "repair":
        return int(np.argmax(info["action_mask"]))
    load = obs["servers"][:, 3] + obs["servers"][:, 4]
    return [int(np.argmin(load))] * len(obs["lengths"])


def cluster(root, tmp_path, url, duration="8s"):
    """examples/external-policy.toml for a short run against `url`."""
    text = open(os.path.join(root, "examples", "external-policy.toml")).read()
    text = text.replace('"ws://127.0.0.1:8765"', f'"{url}"')
    text = text.replace('deadline = "20ms"', 'deadline = "300ms"')
    text = text.replace('deadline = "2ms"', 'deadline = "100ms"')
    text = re.sub(r'duration = "[^"]*"', f'duration = "{duration}"', text, count=1)
    text = re.sub(r'results = "[^"]*"', f'results = "{tmp_path / "results"}"', text, count=1)
    # Users from 1 s (the policy connection is up) to 2 s before the end,
    # so every request has finished when the run stops.
    stop = int(duration.rstrip("s")) - 2
    text = text.replace('stop = "26s"', f'start = "1s"\nstop = "{stop}s"')
    # Fresh ports, so a leftover process cannot collide.
    for old in ("7111", "7112", "7211", "7212"):
        text = text.replace(f"127.0.0.1:{old}", f"127.0.0.1:{free_port()}")
    path = tmp_path / "external.toml"
    path.write_text(text)
    return path


def run(binary, path, run_id, wait=None):
    p = subprocess.Popen(
        [binary, "run", "-c", str(path), "--run-id", run_id, "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, NO_COLOR="1", RUST_LOG="warn"),
    )
    if wait:
        wait()
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0, out
    return out


def table(tmp_path, run_id, host, name):
    with open(tmp_path / "results" / run_id / host / name, newline="") as f:
        return list(csv.DictReader(f))


def decider(rows, actor):
    (r,) = [r for r in rows if r["actor"] == actor]
    return {k: (float(v) if re.fullmatch(r"[0-9.]+", v or "") else v) for k, v in r.items()}


def test_a_python_policy_answers_every_decision_of_a_live_run(root, tmp_path):
    binary = edgemu_bin(root)
    with edgemu.serve_policy_in_thread(least_loaded) as server:
        run(binary, cluster(root, tmp_path, server.url), "answered")
    rows = table(tmp_path, "answered", "edge", "external_policies.csv")
    s, a = decider(rows, "sched"), decider(rows, "agent-a")
    print(f"slot decisions: {s['answered']:.0f} of {s['decisions']:.0f} answered, "
          f"round trip p50 {s['rtt_p50_ms']} ms, p99 {s['rtt_p99_ms']} ms")
    print(f"repair decisions: {a['answered']:.0f} of {a['decisions']:.0f} answered, "
          f"round trip p50 {a['rtt_p50_ms']} ms, p99 {a['rtt_p99_ms']} ms")
    for d in (s, a):
        assert d["decisions"] > 0
        assert d["answered"] == d["decisions"], d
        assert d["timeout"] + d["error"] + d["malformed"] + d["disconnected"] == 0, d
    reqs = table(tmp_path, "answered", "phones", "requests.csv")
    assert reqs and all(r["outcome"] == "served" for r in reqs)
    assert all(r["policy_version"].startswith("external:") for r in reqs)
    (handoffs,) = (tmp_path / "results" / "answered").glob("*/handoffs.csv")
    with open(handoffs, newline="") as f:
        hand = list(csv.DictReader(f))
    assert hand and all(h["policy"] == "external" for h in hand)


def test_a_policy_process_killed_mid_run_costs_no_request(root, tmp_path, python):
    binary = edgemu_bin(root)
    port = free_port()
    url = f"ws://127.0.0.1:{port}"
    code = (
        "import sys, numpy as np, edgemu\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from test_live_external import least_loaded\n"
        f"edgemu.serve_policy(least_loaded, {url!r})\n"
    )
    policy = subprocess.Popen([python, "-c", code, os.path.dirname(__file__)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # Up before the run starts (the scheduler connects at its start).
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the policy process did not start"
                assert policy.poll() is None, policy.stdout.read()
                time.sleep(0.1)

        def kill_at_4s():
            time.sleep(4.5)
            policy.kill()

        run(binary, cluster(root, tmp_path, url, duration="10s"), "killed", wait=kill_at_4s)
    finally:
        policy.kill()
        policy.wait()
    rows = table(tmp_path, "killed", "edge", "external_policies.csv")
    s = decider(rows, "sched")
    print(f"slot decisions: {s['answered']:.0f} answered, {s['disconnected']:.0f} by the "
          f"fallback after the kill, of {s['decisions']:.0f}")
    assert s["answered"] > 0, s
    assert s["disconnected"] > 0, s
    assert s["answered"] + s["timeout"] + s["error"] + s["malformed"] + s["disconnected"] \
        == s["decisions"], s
    reqs = table(tmp_path, "killed", "phones", "requests.csv")
    assert reqs and all(r["outcome"] == "served" for r in reqs), [
        r for r in reqs if r["outcome"] != "served"][:3]
