"""edgemu from Python: Gymnasium environments over the emulator's Rust cores,
the server side of its external-policy protocol, and its policy weights
format. See docs/python.md in the repository.

    import gymnasium as gym
    import edgemu                       # registers the environments
    env = gym.make("edgemu/KvRepair-v0")
    env = gym.make("edgemu/LyreoScheduling-v0", users=40, servers=8)
"""

import gymnasium as _gym

from . import _core
from .envs import KvRepairEnv, LyreoSchedulingEnv, evaluate_repair
from .serve import PolicyServer, serve_policy, serve_policy_in_thread

__version__ = _core.__version__

__all__ = [
    "KvRepairEnv",
    "LyreoSchedulingEnv",
    "PolicyServer",
    "evaluate_repair",
    "serve_policy",
    "serve_policy_in_thread",
]

for _id, _entry in (
    ("edgemu/KvRepair-v0", "edgemu.envs:KvRepairEnv"),
    ("edgemu/LyreoScheduling-v0", "edgemu.envs:LyreoSchedulingEnv"),
):
    if _id not in _gym.registry:
        _gym.register(id=_id, entry_point=_entry)
