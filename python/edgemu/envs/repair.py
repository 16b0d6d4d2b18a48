"""`edgemu/KvRepair-v0`: PriorityFEC's repair scheduling as a Gymnasium env.

One episode is one KV-cache handoff from sender X to receiver Y over a lossy
link under a deadline; one step is one decision epoch of the sender's repair
scheduler, the decision the paper's Double DQN makes.

Observation: `Box(0, 1, (15,), float32)`, the DDQN's 15 normalized
transport features (`RepairObservation::features`: budget, slots, window,
progress, loss estimate, ...).

Action: `Discrete(4)`: 0 a source burst (up to 8 new packets), 1/2/3 a
repair burst of 1/4/16 coded packets. `info["action_mask"]` (bool, 4) says
which are feasible (budget, deadline, source left, window); a masked action
is replaced by the first feasible one and flagged in
`info["mask_violation"]`.

Reward: the paper's shaped reward `J(t+1) - J(t) + F(x(t+1)) - F(x(t))`
(§IV-C3) with `J` the receiver's recovered utility and `F` the shaping
potential; after the last decision `F = 0`, so an episode's rewards sum to
its recovered utility minus `F(x0)`. `info["recovered_utility"]` is `J`
(at the deadline once `terminated`).

Episodes (options, as constructor keywords or `reset(options=...)`):
`channel="paper"` (the paper's main channel: 100 Mb/s, 20 ms RTT,
Gilbert-Elliott (0.001, 0.5, 0.02, 0.1), rho in [0.7, 0.9], 30 layers) or
`"training"` (the trainer's randomized ranges); `profile` (default
`"built-in:smollm2-135m-kvu"`, the measured KV-utility profile; a profile
file; or `"synthetic"`); `layers`, `rho`, `rtt_ms` (number or (low, high));
`rate_mbps` (number or list); `loss="gilbert-elliott"` with
`ge=(eps_g, eps_b, p_gb, p_bg)` (numbers or ranges) or `loss="bernoulli"`
with `loss_rate`; `potential=(lambda_p, lambda_d, lambda_w)`.
"""

from __future__ import annotations

import operator
import os
from typing import Any, Iterable

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .. import _core
from ._seeds import check_seed, draw_seed

N_FEATURES = _core.REPAIR_FEATURES
N_ACTIONS = _core.REPAIR_ACTIONS

#: Action names in index order.
ACTIONS = ("source", "repair-1", "repair-4", "repair-16")


def repair_action(action) -> int:
    """An action of `Discrete(4)` as a Python int (range checked in Rust)."""
    if isinstance(action, (bool, np.bool_)):
        raise ValueError(f"action {action!r}: an integer 0..3 expected")
    if isinstance(action, np.ndarray):
        if action.size != 1 or not np.issubdtype(action.dtype, np.integer):
            raise ValueError(f"action {action!r}: one integer 0..3 expected")
        return int(action.reshape(()))
    try:
        return operator.index(action)
    except TypeError:
        raise ValueError(f"action {action!r}: an integer 0..3 expected") from None


def observation_space() -> spaces.Box:
    return spaces.Box(0.0, 1.0, (N_FEATURES,), np.float32)


class KvRepairEnv(gym.Env):
    """See the module docstring."""

    metadata = {"render_modes": []}

    def __init__(self, **options: Any):
        self._options = dict(options)
        self._core = _core.RepairCore(**self._options)
        self.observation_space = observation_space()
        self.action_space = spaces.Discrete(N_ACTIONS)
        self._started = False

    @property
    def options(self) -> dict:
        """The options the episodes are drawn with."""
        return dict(self._options)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if options:
            merged = {**self._options, **options}
            if merged != self._options:
                self._core = _core.RepairCore(**merged)
                self._options = merged
                self._started = False
        if seed is not None:
            t = self._core.reset(check_seed(seed))
        elif not self._started:
            t = self._core.reset(draw_seed(self.np_random))
        else:
            t = self._core.reset_next()
        self._started = True
        features, mask, _, _, recovered, _ = t
        info = {"action_mask": mask, "recovered_utility": recovered}
        info.update(self._core.episode())
        return features, info

    def step(self, action):
        features, mask, reward, done, recovered, violation = self._core.step(repair_action(action))
        info = {
            "action_mask": mask,
            "recovered_utility": recovered,
            "mask_violation": violation,
        }
        return features, reward, done, False, info


def evaluate_repair(
    weights_path: "str | os.PathLike[str]", seeds: Iterable[int], **options: Any
) -> np.ndarray:
    """Recovered utility of whole handoffs of the episodes of `seeds` (the
    episodes `KvRepairEnv(**options).reset(seed=s)` gives), each scheduled
    by the repair DDQN of the safetensors file at `weights_path`, loaded by
    the loader a live `policy.swap` uses. Runs in Rust (the harness
    evaluation), one float per seed."""
    core = _core.RepairCore(**options)
    u = core.evaluate_ddqn(os.fspath(weights_path), [check_seed(s) for s in seeds])
    return np.asarray(u, dtype=np.float64)
