"""The weights writer and evaluate_repair, through edgemu's Rust loader."""

import numpy as np
import pytest

import edgemu
from edgemu.envs import KvRepairEnv
from edgemu.weights import (
    REPAIR_DDQN_SIZES,
    load_repair_ddqn,
    repair_ddqn_q_values,
    save_repair_ddqn,
    write_weights,
)


def random_layers(seed):
    rng = np.random.default_rng(seed)
    return [
        (
            rng.normal(0, 1 / np.sqrt(i), (o, i)).astype(np.float32),
            rng.normal(0, 0.1, o).astype(np.float32),
        )
        for i, o in zip(REPAIR_DDQN_SIZES[:-1], REPAIR_DDQN_SIZES[1:])
    ]


def forward(layers, mean, std, x):
    h = ((x - mean) / std).astype(np.float32)
    for k, (w, b) in enumerate(layers):
        h = h @ w.T + b
        if k + 1 < len(layers):
            h = np.maximum(h, 0)
    return h


def test_round_trip_through_the_rust_loader(tmp_path):
    assert REPAIR_DDQN_SIZES == (15, 64, 64, 4)
    layers = random_layers(1)
    rng = np.random.default_rng(2)
    mean = rng.uniform(-0.5, 0.5, 15).astype(np.float32)
    std = rng.uniform(0.5, 2, 15).astype(np.float32)
    path = tmp_path / "ddqn.safetensors"
    save_repair_ddqn(path, layers, mean, std, notes="test")
    back, m, s, notes = load_repair_ddqn(path)
    assert notes == "test"
    assert np.array_equal(m, mean) and np.array_equal(s, std)
    for (w, b), (w2, b2) in zip(layers, back):
        assert w2.dtype == np.float32 and np.array_equal(w, w2) and np.array_equal(b, b2)
    x = rng.uniform(0, 1, (32, 15)).astype(np.float32)
    q = repair_ddqn_q_values(path, x)
    assert q.shape == (32, 4)
    np.testing.assert_allclose(q, forward(layers, mean, std, x), rtol=1e-5, atol=1e-5)
    # Same weights, same bytes (edgemu's writer sorts its metadata).
    again = tmp_path / "again.safetensors"
    save_repair_ddqn(again, layers, mean, std, notes="test")
    assert path.read_bytes() == again.read_bytes()


def test_files_edgemu_would_refuse_are_not_written(tmp_path):
    path = tmp_path / "bad.safetensors"
    good = random_layers(3)
    wrong_shape = [(good[0][0][:, :14], good[0][1])] + good[1:]
    nan = [(good[0][0].copy(), good[0][1])] + good[1:]
    nan[0][0][0, 0] = np.nan
    for layers, kw in [
        (wrong_shape, {}),
        (good[:2], {}),
        (nan, {}),
        (good, {"obs_mean": np.zeros(15), "obs_std": np.zeros(15)}),
        (good, {"obs_mean": np.zeros(14), "obs_std": np.ones(14)}),
        (good, {"obs_mean": np.zeros(15)}),
    ]:
        with pytest.raises(ValueError):
            save_repair_ddqn(path, layers, **kw)
        assert not path.exists()
    # The generic writer writes what it is given; the loader refuses it.
    write_weights(path, "repair-ddqn", {"q.0.weight": np.zeros((64, 15))})
    with pytest.raises(ValueError, match="q.0.bias|missing|tensor"):
        load_repair_ddqn(path)


def test_evaluate_repair_is_the_env_played_greedily(tmp_path):
    layers = random_layers(4)
    path = tmp_path / "ddqn.safetensors"
    save_repair_ddqn(path, layers)
    opts = {"layers": 2}
    seeds = [0, 1, 2]
    u = edgemu.evaluate_repair(path, seeds, **opts)
    assert u.shape == (3,) and np.all((u > 0) & (u <= 1))
    assert np.array_equal(u, edgemu.evaluate_repair(path, seeds, **opts))
    env = KvRepairEnv(**opts)
    for seed, expected in zip(seeds, u):
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            q = repair_ddqn_q_values(path, obs)[0]
            q[~info["action_mask"]] = -np.inf
            obs, _, done, _, info = env.step(int(q.argmax()))
        assert info["recovered_utility"] == expected, seed


def test_evaluate_repair_refuses_a_missing_file(tmp_path):
    with pytest.raises(ValueError):
        edgemu.evaluate_repair(tmp_path / "none.safetensors", [0], layers=1)
