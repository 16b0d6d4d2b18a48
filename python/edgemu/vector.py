"""Vector environments: `n` environments stepped by one call into Rust,
returning stacked arrays, so the Python overhead of a step is paid once
for all `n` (Gymnasium `VectorEnv`s, autoreset in the same step).

- `KvRepairVec(n, **options)`: observations `(n, 15)` float32, actions
  `(n,)` ints; `info["action_mask"]` `(n, 4)` bool, `info["recovered_utility"]`
  `(n,)`, `info["mask_violation"]` `(n,)`.
- `LyreoSchedulingVec(n, **options)`: observations a dict of `(n, U, S, 12)`,
  `(n, U, 2)`, `(n, S, 8)`, `(n, S)`; actions `(n, U)` ints.

An environment whose episode ends starts its next one within the same step
(`AutoresetMode.SAME_STEP`): the returned observation is the new episode's
first, and `info["final_obs"][i]` (with `info["_final_obs"][i]` True) holds
the ended episode's last. `reset(seed=s)` starts environment i on the
episode of seed `s + i` (or of `seed[i]` for a list); later episodes come
from each environment's seed stream, so environment i plays exactly what a
single environment reset with `seed=s + i` and then without a seed plays.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from . import _core
from .envs import lyreo as _lyreo
from .envs import repair as _repair
from .envs._seeds import generator_seed, vector_seeds


def _final(done: np.ndarray, rows) -> dict:
    """`final_obs` / `_final_obs` entries for the ended environments."""
    n = len(done)
    final = np.empty(n, dtype=object)
    for i in np.flatnonzero(done):
        final[i] = rows(i)
    return {"final_obs": final, "_final_obs": done.copy()}


class KvRepairVec(VectorEnv):
    """`n` `KvRepair-v0` environments (module docstring)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, num_envs: int, **options: Any):
        self.num_envs = int(num_envs)
        self._core = _core.RepairVecCore(self.num_envs, **options)
        self.options = dict(options)
        self.single_observation_space = _repair.observation_space()
        self.single_action_space = spaces.Discrete(_repair.N_ACTIONS)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = spaces.MultiDiscrete(np.full(self.num_envs, _repair.N_ACTIONS))

    def reset(self, *, seed=None, options: dict | None = None):
        super().reset(seed=generator_seed(seed))
        if options:
            raise ValueError("KvRepairVec takes its options at construction")
        features, masks, _, _, recovered, _, _ = self._core.reset(
            vector_seeds(seed, self.num_envs, self.np_random)
        )
        return features, {"action_mask": masks, "recovered_utility": recovered}

    def step(self, actions):
        a = np.asarray(actions)
        if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"actions must be integers, got dtype {a.dtype}")
        features, masks, rewards, dones, recovered, violations, finals = self._core.step(
            np.ascontiguousarray(a.reshape(-1), dtype=np.int64)
        )
        infos = {
            "action_mask": masks,
            "recovered_utility": recovered,
            "mask_violation": violations,
        }
        if dones.any():
            infos.update(_final(dones, lambda i: finals[i]))
        return features, rewards, dones, np.zeros(self.num_envs, dtype=np.bool_), infos


class LyreoSchedulingVec(VectorEnv):
    """`n` `LyreoScheduling-v0` environments (module docstring)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, num_envs: int, **options: Any):
        self.num_envs = int(num_envs)
        self._core = _core.LyreoVecCore(self.num_envs, **options)
        self.options = dict(options)
        self.users, self.servers = self._core.dims()
        self.single_observation_space = _lyreo.observation_space(self.users, self.servers)
        self.single_action_space = spaces.MultiDiscrete(np.full(self.users, self.servers))
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    def reset(self, *, seed=None, options: dict | None = None):
        super().reset(seed=generator_seed(seed))
        if options:
            raise ValueError("LyreoSchedulingVec takes its options at construction")
        t = self._core.reset(vector_seeds(seed, self.num_envs, self.np_random))
        return _lyreo.obs_dict(t), {}

    def step(self, actions):
        a = np.asarray(actions)
        if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"actions must be integers, got dtype {a.dtype}")
        if a.shape != (self.num_envs, self.users):
            raise ValueError(f"actions must have shape ({self.num_envs}, {self.users}), got {a.shape}")
        obs, rewards, dones, finals, env_infos = self._core.step(np.ascontiguousarray(a, dtype=np.int64))
        infos: dict = {}
        for key in env_infos[0]:
            infos[key] = np.array([d[key] for d in env_infos])
        if dones.any():
            final = _lyreo.obs_dict(finals)
            infos.update(_final(dones, lambda i: {k: v[i] for k, v in final.items()}))
        return _lyreo.obs_dict(obs), rewards, dones, np.zeros(self.num_envs, dtype=np.bool_), infos
