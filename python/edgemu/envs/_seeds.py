"""Episode seeds shared by the single and the vector environments.

`reset(seed=s)` plays the episode of seed `s` (the Rust stepper's, and the
one `evaluate_repair(..., seeds=[s])` runs) and seeds a stream in the Rust
core from which every later `reset()` without a seed draws its episode; a
first `reset()` without any seed draws `s` from the env's `np_random`.
"""

from __future__ import annotations

import numpy as np

#: Episode seeds are drawn below this (non-negative int64, fits u64).
SEED_BOUND = 2**63


def check_seed(seed) -> int:
    s = int(seed)
    if s < 0 or s >= 2**64:
        raise ValueError(f"seed {seed}: a non-negative integer below 2**64 expected")
    return s


def draw_seed(rng: np.random.Generator) -> int:
    return int(rng.integers(0, SEED_BOUND))


def vector_seeds(seed, n: int, rng: np.random.Generator) -> list[int]:
    """Per-env seeds: `seed + i` for an int, the list as given, or drawn."""
    if seed is None:
        return [draw_seed(rng) for _ in range(n)]
    if isinstance(seed, (list, tuple, np.ndarray)):
        if len(seed) != n:
            raise ValueError(f"{len(seed)} seeds for {n} environments")
        return [check_seed(s) for s in seed]
    return [check_seed(seed) + i for i in range(n)]


def generator_seed(seed):
    """What seeds a vector env's own `np_random`: the int, the first of a
    list, or nothing."""
    if seed is None or isinstance(seed, (int, np.integer)):
        return seed
    return int(seed[0]) if len(seed) else None
