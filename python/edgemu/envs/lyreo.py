"""`edgemu/LyreoScheduling-v0`: LYREO's request scheduling as a Gymnasium env.

U mobile users in a 200 m x 200 m area each send one LLM request per slot
(1 s); one step assigns every request of the slot to one of S edge servers
(heterogeneous GPUs, continuous batching, KV-memory limits), runs the slot
and returns the next slot's observation.

Observation: `Dict` of float32 arrays (the view a live run sends an external
policy, `LyreoArrays`):
- `pairs` `(U, S, 12)`: normalized features of assigning request i to
  server s (lengths, upload time, the server's class and state, `Z_s`);
- `lengths` `(U, 2)`: input and output length of each request, tokens;
- `servers` `(S, 8)`: capacity / 24 GB, prefill rate / 8000 tok/s, empty
  decode step / 20 ms, occupancy, reserved and waiting KV as shares of the
  capacity, the KV memory-time `eta`, the backlog in slots;
- `queues` `(S,)`: the Lyapunov virtual queues `Z_s`.

Action: `MultiDiscrete([S] * U)`: request i's server.

Reward: eq. 30 of the paper divided by U, per slot:
`-(nu * sum of the latencies of requests completed in the slot
+ sum_s Z_s * Y_s + rho * (servers over 90 % KV + rejected requests)) / U`.
The episode ends (`terminated`) after `slots` slots; the requests still
running then are drained and credited to the last slot.

Options (constructor keywords or `reset(options=...)`): `users` (40),
`servers` (8), `mix` (`"hom"`, `"mod"`, `"het"`), `workload`
(`"lmsys-like"`, `"sharegpt"`), `mobility` (`"random-walk"`,
`"random-waypoint"`), `slots` (800), `epsilon` (0.01), `nu` (0.5),
`bandwidth_mhz` ((6, 14)), `power_dbm` ((15, 25)), `kv_budget_share` (1.0),
`batching` (`"continuous"`, `"static"`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .. import _core
from ._seeds import check_seed, draw_seed

PAIR_FEATURES = _core.PAIR_FEATURES
SERVER_FEATURES = _core.SERVER_FEATURES


def observation_space(users: int, servers: int) -> spaces.Dict:
    """Every feature is a non-negative ratio (most near [0, 1]; backlogs,
    queues and loads have no fixed upper bound)."""
    f32 = np.float32
    inf = np.inf
    return spaces.Dict(
        {
            "pairs": spaces.Box(0.0, inf, (users, servers, PAIR_FEATURES), f32),
            "lengths": spaces.Box(1.0, float(_core.MAX_REQUEST_TOKENS), (users, 2), f32),
            "servers": spaces.Box(0.0, inf, (servers, SERVER_FEATURES), f32),
            "queues": spaces.Box(0.0, inf, (servers,), f32),
        }
    )


def lyreo_action(action, users: int) -> np.ndarray:
    """An assignment as a contiguous int64 array (shape and range checked
    in Rust)."""
    a = np.asarray(action)
    if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"the action must be integer server indices, got dtype {a.dtype}")
    if a.shape != (users,):
        raise ValueError(f"the action must have shape ({users},), got {a.shape}")
    return np.ascontiguousarray(a, dtype=np.int64)


def obs_dict(t) -> dict:
    pairs, lengths, servers, queues = t
    return {"pairs": pairs, "lengths": lengths, "servers": servers, "queues": queues}


class LyreoSchedulingEnv(gym.Env):
    """See the module docstring."""

    metadata = {"render_modes": []}

    def __init__(self, **options: Any):
        self._options = dict(options)
        self._build()

    def _build(self):
        self._core = _core.LyreoCore(**self._options)
        self.users, self.servers, self.slots = self._core.shape
        self.observation_space = observation_space(self.users, self.servers)
        self.action_space = spaces.MultiDiscrete(np.full(self.users, self.servers, dtype=np.int64))
        self._started = False

    @property
    def options(self) -> dict:
        return dict(self._options)

    @property
    def server_classes(self) -> list:
        """The GPU class of each server."""
        return self._core.classes

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if options:
            merged = {**self._options, **options}
            if merged != self._options:
                self._options = merged
                self._build()
        if seed is not None:
            t = self._core.reset(check_seed(seed))
        elif not self._started:
            t = self._core.reset(draw_seed(self.np_random))
        else:
            t = self._core.reset_next()
        self._started = True
        return obs_dict(t), {"slot": 0}

    def step(self, action):
        t, reward, done, info = self._core.step(lyreo_action(action, self.users))
        return obs_dict(t), reward, done, False, info
