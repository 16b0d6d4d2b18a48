"""The vector environments play exactly what single environments play."""

import numpy as np
import pytest

from edgemu.envs import KvRepairEnv, LyreoSchedulingEnv
from edgemu.vector import KvRepairVec, LyreoSchedulingVec

N = 3


def test_kv_repair_vec_equals_single_envs_across_episode_ends():
    opts = {"layers": 1, "rho": 0.6}
    vec = KvRepairVec(N, **opts)
    singles = [KvRepairEnv(**opts) for _ in range(N)]
    obs, info = vec.reset(seed=10)
    s_obs = [e.reset(seed=10 + i) for i, e in enumerate(singles)]
    for i in range(N):
        assert np.array_equal(obs[i], s_obs[i][0])
        assert np.array_equal(info["action_mask"][i], s_obs[i][1]["action_mask"])
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(400):
        actions = rng.integers(0, 4, size=N)
        obs, rew, term, trunc, info = vec.step(actions)
        assert obs.shape == (N, 15) and obs.dtype == np.float32
        assert not trunc.any()
        for i, e in enumerate(singles):
            o, r, t, _, inf = e.step(int(actions[i]))
            assert r == rew[i] and t == term[i]
            assert inf["mask_violation"] == info["mask_violation"][i]
            if t:
                ends += 1
                assert info["_final_obs"][i]
                assert np.array_equal(info["final_obs"][i], o)
                o, inf = e.reset()
            assert np.array_equal(obs[i], o)
            assert np.array_equal(info["action_mask"][i], inf["action_mask"])
    assert ends >= N, "the run crosses episode ends"


def test_lyreo_vec_equals_single_envs_across_episode_ends():
    opts = {"users": 5, "servers": 3, "slots": 3}
    vec = LyreoSchedulingVec(N, **opts)
    singles = [LyreoSchedulingEnv(**opts) for _ in range(N)]
    obs, _ = vec.reset(seed=[4, 9, 4])
    s_obs = [e.reset(seed=s)[0] for e, s in zip(singles, [4, 9, 4])]
    rng = np.random.default_rng(1)
    for step in range(7):
        for i in range(N):
            for k in obs:
                assert np.array_equal(obs[k][i], s_obs[i][k]), (step, i, k)
        actions = rng.integers(0, 3, size=(N, 5))
        obs, rew, term, _, info = vec.step(actions)
        assert obs["pairs"].shape == (N, 5, 3, 12)
        for i, e in enumerate(singles):
            o, r, t, _, inf = e.step(actions[i])
            assert r == rew[i] and t == term[i]
            assert inf["completed"] == info["completed"][i]
            if t:
                for k in o:
                    assert np.array_equal(info["final_obs"][i][k], o[k])
                o, _ = e.reset()
            s_obs[i] = o


def test_vector_actions_are_checked_before_any_env_steps():
    vec = KvRepairVec(2, layers=1)
    obs, _ = vec.reset(seed=1)
    with pytest.raises(ValueError):
        vec.step(np.array([0, 7]))
    with pytest.raises(ValueError):
        vec.step(np.array([0.0, 1.0]))
    with pytest.raises(ValueError):
        vec.step(np.array([0, 0, 0]))
    single = KvRepairEnv(layers=1)
    single.reset(seed=1)
    o, *_ = single.step(0)
    assert np.array_equal(vec.step(np.array([0, 0]))[0][0], o), "env 0 had not stepped"
    lvec = LyreoSchedulingVec(2, users=4, servers=2, slots=2)
    lvec.reset(seed=0)
    with pytest.raises(ValueError):
        lvec.step(np.array([[0, 1, 0, 1], [0, 1, 0, 2]]))
    with pytest.raises(ValueError):
        lvec.step(np.zeros((2, 3), np.int64))
