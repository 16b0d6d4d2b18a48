"""`python -m edgemu.bench`: how fast the environments step from Python,
next to the Rust harness's own rate measured in the same run.

For each environment it times, on the same episodes:
- `rust`: the stepper loop run natively in Rust (`run_native`), building the
  observation arrays every step, with a fixed policy;
- `python`: `gym.make(...)`'s env stepped from Python with the same policy
  (KvRepair: the first feasible action, `info["action_mask"].argmax()`;
  Lyreo: request i to server i mod S), observation arrays handed to Python;
- `vector`: the vector env (`edgemu.vector`, `--vec` environments, one Rust
  call per step of all of them), per environment step.

The ratio is Python's rate over Rust's. Aims (issue 30): KvRepair >= 20 000
steps/s, Lyreo (U = 40, S = 8) >= 2 000 slots/s, each >= 0.5x Rust.
Timings depend on the machine; build in release (`pip install ./python`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import gymnasium as gym
import numpy as np

import edgemu  # noqa: F401  (registers the environments)
from edgemu import _core
from edgemu.vector import KvRepairVec, LyreoSchedulingVec


def bench_repair(steps: int, seed: int, n_vec: int, options: dict) -> dict:
    native_steps, native_s, episodes = _core.RepairCore(**options).run_native(steps, seed)
    env = gym.make("edgemu/KvRepair-v0", **options)
    _, info = env.reset(seed=seed)
    mask = info["action_mask"]
    t0 = time.perf_counter()
    for _ in range(steps):
        _, _, done, _, info = env.step(int(mask.argmax()))
        if done:
            _, info = env.reset()
        mask = info["action_mask"]
    py_s = time.perf_counter() - t0
    venv = KvRepairVec(n_vec, **options)
    _, info = venv.reset(seed=seed)
    rounds = max(1, steps // n_vec)
    t0 = time.perf_counter()
    for _ in range(rounds):
        _, _, _, _, info = venv.step(info["action_mask"].argmax(axis=1))
    vec_s = time.perf_counter() - t0
    return {
        "env": "KvRepair-v0",
        "unit": "steps/s",
        "steps": steps,
        "episodes": episodes,
        "rust": native_steps / native_s,
        "python": steps / py_s,
        "vector": rounds * n_vec / vec_s,
        "vector_envs": n_vec,
    }


def bench_lyreo(slots: int, seed: int, n_vec: int, options: dict) -> dict:
    core = _core.LyreoCore(**options)
    users, servers, _ = core.shape
    native_slots, native_s, episodes = core.run_native(slots, seed)
    env = gym.make("edgemu/LyreoScheduling-v0", **options)
    action = np.arange(users, dtype=np.int64) % servers
    env.reset(seed=seed)
    t0 = time.perf_counter()
    for _ in range(slots):
        _, _, done, _, _ = env.step(action)
        if done:
            env.reset()
    py_s = time.perf_counter() - t0
    venv = LyreoSchedulingVec(n_vec, **options)
    venv.reset(seed=seed)
    actions = np.tile(action, (n_vec, 1))
    rounds = max(1, slots // n_vec)
    t0 = time.perf_counter()
    for _ in range(rounds):
        venv.step(actions)
    vec_s = time.perf_counter() - t0
    return {
        "env": f"LyreoScheduling-v0 (U={users}, S={servers})",
        "unit": "slots/s",
        "steps": slots,
        "episodes": episodes,
        "rust": native_slots / native_s,
        "python": slots / py_s,
        "vector": rounds * n_vec / vec_s,
        "vector_envs": n_vec,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgemu.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repair-steps", type=int, default=50_000)
    ap.add_argument("--lyreo-slots", type=int, default=3_000)
    ap.add_argument("--users", type=int, default=40)
    ap.add_argument("--servers", type=int, default=8)
    ap.add_argument("--vec", type=int, default=8, help="environments of the vector runs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    a = ap.parse_args(argv)
    rows = [
        bench_repair(a.repair_steps, a.seed, a.vec, {}),
        bench_lyreo(a.lyreo_slots, a.seed, a.vec, {"users": a.users, "servers": a.servers}),
    ]
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'environment':<36} {'unit':<8} {'rust':>10} {'python':>10} {'ratio':>6} {'vector':>10}")
    for r in rows:
        print(
            f"{r['env']:<36} {r['unit']:<8} {r['rust']:>10.0f} {r['python']:>10.0f} "
            f"{r['python'] / r['rust']:>6.2f} {r['vector']:>10.0f}"
        )
    print(
        f"(rust: the stepper loop natively; python: gym.make env stepped from Python; "
        f"vector: {a.vec} envs per call, per env step. Same episodes, seed {a.seed}.)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
