#!/usr/bin/env python3
"""Train PriorityFEC's repair scheduler in Python on `edgemu/KvRepair-v0`,
write it in edgemu's weights format, evaluate it with edgemu's own harness,
and print how to swap it into a live run.

A Double DQN of the paper's shape (15 -> 64 -> 64 -> 4, ReLU), numpy only:
epsilon-greedy over the feasible actions (`info["action_mask"]`), a replay
buffer, Huber loss on the masked Double-DQN target, Adam, a target network
copied every few hundred updates. The episodes come from a vector env
(`edgemu.vector.KvRepairVec`, one Rust call per step of all of them) on the
paper's channel with the measured KV-utility profile.

    pip install ./python
    python3 examples/python/train_repair.py                 # about a minute on one CPU core
    python3 examples/python/train_repair.py --quick         # a few seconds (smoke test)

Then, with a run going (`edgemu run cluster.toml`):

    edgemu ctl policy swap agent-a --policy priorityfec-ddqn --upload repair-ddqn-py.safetensors
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import edgemu
from edgemu.vector import KvRepairVec
from edgemu.weights import REPAIR_DDQN_SIZES, save_repair_ddqn

N_ACTIONS = REPAIR_DDQN_SIZES[-1]


class QNet:
    """The MLP with its Adam state; `layers` is [(W, b)] with W [out, in]."""

    def __init__(self, rng: np.random.Generator):
        self.layers = []
        for fan_in, fan_out in zip(REPAIR_DDQN_SIZES[:-1], REPAIR_DDQN_SIZES[1:]):
            bound = np.sqrt(6.0 / fan_in)  # He uniform, as edgemu's DdqnNet::random
            w = rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32)
            self.layers.append((w, np.zeros(fan_out, np.float32)))
        self.m = [(np.zeros_like(w), np.zeros_like(b)) for w, b in self.layers]
        self.v = [(np.zeros_like(w), np.zeros_like(b)) for w, b in self.layers]
        self.t = 0

    def copy_from(self, other: "QNet"):
        self.layers = [(w.copy(), b.copy()) for w, b in other.layers]

    def forward(self, x: np.ndarray, keep: bool = False):
        acts = [x]
        h = x
        for i, (w, b) in enumerate(self.layers):
            h = h @ w.T + b
            if i + 1 < len(self.layers):
                h = np.maximum(h, 0.0)
            acts.append(h)
        return (h, acts) if keep else h

    def train_step(self, x, actions, targets, lr: float, clip: float = 10.0) -> float:
        q, acts = self.forward(x, keep=True)
        n = len(x)
        err = q[np.arange(n), actions] - targets
        # Huber (delta 1) gradient on the chosen actions only.
        g_out = np.zeros_like(q)
        g_out[np.arange(n), actions] = np.clip(err, -1.0, 1.0) / n
        grads = []
        g = g_out
        for i in reversed(range(len(self.layers))):
            w, _ = self.layers[i]
            grads.append((g.T @ acts[i], g.sum(axis=0)))
            if i > 0:
                g = (g @ w) * (acts[i] > 0)
        grads.reverse()
        norm = np.sqrt(sum((gw**2).sum() + (gb**2).sum() for gw, gb in grads))
        scale = min(1.0, clip / (norm + 1e-12))
        self.t += 1
        b1, b2, eps = 0.9, 0.999, 1e-8
        for i, ((w, b), (gw, gb)) in enumerate(zip(self.layers, grads)):
            new = []
            for j, (p, gp) in enumerate(((w, gw), (b, gb))):
                gp = gp * scale
                self.m[i][j][...] = b1 * self.m[i][j] + (1 - b1) * gp
                self.v[i][j][...] = b2 * self.v[i][j] + (1 - b2) * gp * gp
                mh = self.m[i][j] / (1 - b1**self.t)
                vh = self.v[i][j] / (1 - b2**self.t)
                new.append((p - lr * mh / (np.sqrt(vh) + eps)).astype(np.float32))
            self.layers[i] = (new[0], new[1])
        return float(np.mean(np.minimum(err**2 / 2, np.abs(err) - 0.5)))


def masked_argmax(q: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return np.where(mask, q, -np.inf).argmax(axis=1)


def train(args) -> QNet:
    rng = np.random.default_rng(args.seed)
    env = KvRepairVec(args.envs, **args.options)
    online, target = QNet(rng), QNet(rng)
    target.copy_from(online)
    cap = args.buffer
    buf_s = np.zeros((cap, 15), np.float32)
    buf_a = np.zeros(cap, np.int64)
    buf_r = np.zeros(cap, np.float32)
    buf_s2 = np.zeros((cap, 15), np.float32)
    buf_m2 = np.zeros((cap, N_ACTIONS), bool)
    buf_d = np.zeros(cap, np.float32)
    size = head = 0
    obs, info = env.reset(seed=args.seed)
    mask = info["action_mask"]
    updates, episodes, returns_j = 0, 0, []
    rounds = args.steps // args.envs
    t0 = time.perf_counter()
    for it in range(rounds):
        eps = max(args.eps_end, 1.0 - it / (args.explore * rounds))
        greedy = masked_argmax(online.forward(obs), mask)
        # Exploration: a uniformly drawn feasible action.
        noise = masked_argmax(rng.random((args.envs, N_ACTIONS)), mask)
        actions = np.where(rng.random(args.envs) < eps, noise, greedy)
        obs2, rew, done, _, info2 = env.step(actions)
        next_obs = obs2.copy()
        if done.any():
            for i in np.flatnonzero(done):
                next_obs[i] = info2["final_obs"][i]
                returns_j.append(info2["recovered_utility"][i])
            episodes += int(done.sum())
        idx = (head + np.arange(args.envs)) % cap
        buf_s[idx], buf_a[idx], buf_r[idx] = obs, actions, rew
        buf_s2[idx], buf_m2[idx], buf_d[idx] = next_obs, info2["action_mask"], done
        head = (head + args.envs) % cap
        size = min(cap, size + args.envs)
        obs, mask = obs2, info2["action_mask"]
        if size >= args.batch * 4:
            for _ in range(args.updates_per_step):
                b = rng.integers(0, size, args.batch)
                # Double DQN: the online net picks a feasible action, the target net values it.
                a2 = masked_argmax(online.forward(buf_s2[b]), buf_m2[b] | (buf_d[b, None] > 0))
                q2 = target.forward(buf_s2[b])[np.arange(args.batch), a2]
                y = buf_r[b] + args.gamma * (1.0 - buf_d[b]) * q2
                online.train_step(buf_s[b], buf_a[b], y.astype(np.float32), args.lr)
                updates += 1
                if updates % args.target_every == 0:
                    target.copy_from(online)
        if args.log_every and (it + 1) % args.log_every == 0:
            recent = returns_j[-20:]
            print(
                f"  step {(it + 1) * args.envs:>7}  eps {eps:.2f}  episodes {episodes:>4}  "
                f"recovered utility (last {len(recent)}) "
                f"{np.mean(recent) if recent else float('nan'):.3f}  {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
    print(f"trained: {rounds * args.envs} steps, {episodes} episodes, {updates} updates, "
          f"{time.perf_counter() - t0:.1f} s")
    return online


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny episodes and few steps (smoke test)")
    ap.add_argument("--steps", type=int, help="environment steps (default 400000; --quick 2000)")
    ap.add_argument("--envs", type=int, default=8, help="environments of the vector env")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="repair-ddqn-py.safetensors")
    ap.add_argument("--eval-seeds", type=int, help="evaluation episodes (default 16; --quick 3)")
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--gamma", type=float, default=0.99)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--buffer", type=int, default=100_000)
    ap.add_argument("--updates-per-step", type=int, default=2, help="learning updates per vector step")
    ap.add_argument("--target-every", type=int, default=250)
    ap.add_argument("--explore", type=float, default=0.5, help="share of training with decaying epsilon")
    ap.add_argument("--eps-end", type=float, default=0.05)
    ap.add_argument("--log-every", type=int, default=10000, help="vector steps between progress lines (0: none)")
    args = ap.parse_args(argv)
    # --quick: 3-layer handoffs (a tenth of the paper's) so episodes end within the run.
    args.options = {"layers": 3} if args.quick else {}
    args.steps = args.steps or (2000 if args.quick else 400_000)
    n_eval = args.eval_seeds or (3 if args.quick else 16)
    if args.quick:
        args.log_every = 0

    print(f"training a repair DDQN on edgemu/KvRepair-v0 {args.options or '(paper channel, measured profile)'}")
    net = train(args)
    save_repair_ddqn(args.out, net.layers, notes=f"examples/python/train_repair.py seed {args.seed}")
    print(f"wrote {args.out}")

    # The harness evaluation: whole handoffs in Rust with the DDQN loaded from
    # the file by edgemu's loader, on episodes training never drew.
    seeds = list(range(1_000_000, 1_000_000 + n_eval))
    ours = edgemu.evaluate_repair(args.out, seeds, **args.options)
    shipped = edgemu.evaluate_repair("built-in:repair-ddqn", seeds, **args.options)
    print(f"recovered utility over {n_eval} evaluation handoffs (seeds {seeds[0]}..{seeds[-1]}):")
    print(f"  this policy           {ours.mean():.4f}  (min {ours.min():.4f})")
    print(f"  shipped repair DDQN   {shipped.mean():.4f}  (min {shipped.min():.4f})")
    print()
    print("hot-swap it into a live run (the PriorityFEC sender agent-a of cluster.toml):")
    print(f"  edgemu ctl --url ws://127.0.0.1:7201 policy swap agent-a --policy priorityfec-ddqn --upload {args.out}")
    print("  edgemu ctl --url ws://127.0.0.1:7201 policy get agent-a    # its version hash (handoffs.csv: policy_version)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
