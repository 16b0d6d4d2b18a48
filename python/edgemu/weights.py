"""Policy weights files (safetensors) from Python.

Written and read by edgemu's own Rust code (`edgemu._core`), so a file
written here is exactly what `edgemu train` writes and what `policy.swap`
loads; a file edgemu would refuse raises `ValueError` with edgemu's reason.

The format (policies/README.md): float32 tensors named
`<net>.<layer>.weight` of shape `[out, in]` (PyTorch's `nn.Linear` layout)
and `<net>.<layer>.bias` `[out]`, plus metadata `format = edgemu-policy`,
`kind`, `version`, `obs_mean` / `obs_std` (the observation normalization
`(x - mean) / std`, JSON lists, empty for none) and `notes`.

The repair DDQN (`kind = repair-ddqn`, version 1) is 15 -> 64 -> 64 -> 4,
ReLU hidden, identity output, tensors `q.0.weight` [64, 15] ... `q.2.bias`
[4]; its Q-values are in action order (source burst, repair 1, 4, 16) and
the policy picks the feasible action with the largest Q-value.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence, Tuple

import numpy as np

from . import _core

#: Layer widths of the repair DDQN: 15 features -> 64 -> 64 -> 4 actions.
REPAIR_DDQN_SIZES: Tuple[int, ...] = tuple(_core.REPAIR_DDQN_SIZES)

Layer = Tuple[np.ndarray, np.ndarray]


def _f32(name: str, a) -> np.ndarray:
    t = np.ascontiguousarray(np.asarray(a, dtype=np.float32))
    if not np.all(np.isfinite(t)):
        raise ValueError(f"{name}: non-finite values")
    return t


def write_weights(
    path: "str | os.PathLike[str]",
    kind: str,
    tensors: Mapping[str, np.ndarray],
    obs_mean: Sequence[float] = (),
    obs_std: Sequence[float] = (),
    notes: str = "",
    version: int = 1,
) -> None:
    """Writes any edgemu policy file: `tensors` maps names to arrays (cast to
    float32). The loader of `kind` checks names and shapes when edgemu reads
    it; for the repair DDQN prefer `save_repair_ddqn`, which checks first."""
    ts = {k: _f32(k, v) for k, v in tensors.items()}
    _core.write_weights(
        os.fspath(path),
        kind,
        int(version),
        ts,
        [float(v) for v in obs_mean],
        [float(v) for v in obs_std],
        notes,
    )


def save_repair_ddqn(
    path: "str | os.PathLike[str]",
    layers: Sequence[Layer],
    obs_mean: "Sequence[float] | None" = None,
    obs_std: "Sequence[float] | None" = None,
    notes: str = "",
) -> None:
    """Writes a repair DDQN: `layers` is `[(W0, b0), (W1, b1), (W2, b2)]`
    with `W` of shape `[out, in]` (PyTorch's `linear.weight`) and `b` of
    `[out]`. `obs_mean`/`obs_std` (15 values each) normalize the features
    before the first layer; leave them out for none. Validated by edgemu's
    loader before anything is written."""
    sizes = REPAIR_DDQN_SIZES
    if len(layers) != len(sizes) - 1:
        raise ValueError(f"a repair DDQN has {len(sizes) - 1} layers {sizes}, got {len(layers)}")
    tensors = {}
    for i, (w, b) in enumerate(layers):
        tensors[f"q.{i}.weight"] = _f32(f"q.{i}.weight", w)
        tensors[f"q.{i}.bias"] = _f32(f"q.{i}.bias", b)
    if (obs_mean is None) != (obs_std is None):
        raise ValueError("give both obs_mean and obs_std, or neither")
    mean = [] if obs_mean is None else [float(v) for v in obs_mean]
    std = [] if obs_std is None else [float(v) for v in obs_std]
    _core.save_repair_ddqn(os.fspath(path), tensors, mean, std, notes)


def load_repair_ddqn(path: "str | os.PathLike[str]"):
    """Reads a repair DDQN through edgemu's loader. Returns
    `(layers, obs_mean, obs_std, notes)` with `layers` as `save_repair_ddqn`
    takes them and the normalization as float32 arrays (identity when the
    file has none)."""
    tensors, mean, std, notes = _core.load_repair_ddqn(os.fspath(path))
    n = len(REPAIR_DDQN_SIZES) - 1
    layers = [(tensors[f"q.{i}.weight"], tensors[f"q.{i}.bias"]) for i in range(n)]
    return layers, np.asarray(mean, np.float32), np.asarray(std, np.float32), notes


def repair_ddqn_q_values(path: "str | os.PathLike[str]", features) -> np.ndarray:
    """Q-values (n x 4) of edgemu's forward pass of the file at `path` for
    raw features (n x 15); the file's normalization is applied."""
    x = np.ascontiguousarray(np.atleast_2d(np.asarray(features, np.float32)))
    return _core.repair_ddqn_q_values(os.fspath(path), x)
