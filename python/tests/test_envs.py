"""The Gymnasium environments: checker, spaces, seeding, actions, options."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import edgemu
from edgemu.envs import KvRepairEnv, LyreoSchedulingEnv

# Small episodes keep the tests fast; the defaults are checked once each.
SMALL_REPAIR = {"layers": 2}
SMALL_LYREO = {"users": 6, "servers": 3, "slots": 5}


def first_allowed(info):
    return int(info["action_mask"].argmax())


@pytest.mark.parametrize("env_id", ["edgemu/KvRepair-v0", "edgemu/LyreoScheduling-v0"])
def test_check_env_passes_for_the_registered_defaults(env_id):
    check_env(gym.make(env_id).unwrapped, skip_render_check=True)


def test_check_env_passes_with_options():
    check_env(KvRepairEnv(channel="training", profile="synthetic"), skip_render_check=True)
    check_env(KvRepairEnv(loss="bernoulli", loss_rate=0.05, layers=3), skip_render_check=True)
    check_env(LyreoSchedulingEnv(mix="het", mobility="random-waypoint", **SMALL_LYREO), skip_render_check=True)


def test_spaces_and_observations_have_the_documented_shapes():
    env = KvRepairEnv(**SMALL_REPAIR)
    obs, info = env.reset(seed=1)
    assert obs.dtype == np.float32 and obs.shape == (15,)
    assert env.observation_space.contains(obs)
    assert info["action_mask"].dtype == np.bool_ and info["action_mask"].shape == (4,)
    assert env.action_space == gym.spaces.Discrete(4)

    lenv = LyreoSchedulingEnv(users=7, servers=3, slots=4)
    obs, _ = lenv.reset(seed=1)
    shapes = {k: v.shape for k, v in obs.items()}
    assert shapes == {"pairs": (7, 3, 12), "lengths": (7, 2), "servers": (3, 8), "queues": (3,)}
    assert all(v.dtype == np.float32 for v in obs.values())
    assert lenv.observation_space.contains(obs)
    assert lenv.action_space == gym.spaces.MultiDiscrete([3] * 7)


def rollout(env, seed, steps, policy):
    obs, info = env.reset(seed=seed)
    out = [(obs, None, info)]
    for _ in range(steps):
        obs, r, term, trunc, info = env.step(policy(obs, info))
        out.append((obs, r, info))
        if term or trunc:
            break
    return out


def same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return np.array_equal(a, b)


@pytest.mark.parametrize(
    "make,policy",
    [
        (lambda: KvRepairEnv(**SMALL_REPAIR), lambda o, i: first_allowed(i)),
        (lambda: LyreoSchedulingEnv(**SMALL_LYREO), lambda o, i: np.arange(6) % 3),
    ],
)
def test_reset_with_a_seed_is_reproducible_bit_for_bit(make, policy):
    a = rollout(make(), 5, 60, policy)
    b = rollout(make(), 5, 60, policy)
    assert len(a) == len(b) > 1
    for (oa, ra, ia), (ob, rb, ib) in zip(a, b):
        assert same(oa, ob)
        assert ra == rb  # exact, not approximate
    c = rollout(make(), 6, 60, policy)
    assert not all(same(x[0], y[0]) for x, y in zip(a, c)), "another seed, another episode"


def test_a_repair_episode_runs_to_its_deadline():
    env = KvRepairEnv(**SMALL_REPAIR)
    obs, info = env.reset(seed=3)
    assert info["layers"] == 2 and 0.7 <= info["rho"] <= 0.9
    total, steps, done = 0.0, 0, False
    while not done:
        obs, r, done, trunc, info = env.step(first_allowed(info))
        assert not trunc and not info["mask_violation"]
        total += r
        steps += 1
    assert steps > 10
    assert 0.0 < info["recovered_utility"] <= 1.0
    with pytest.raises(ValueError, match="reset"):
        env.step(0)
    # Without a seed the next episode comes from the seed stream of seed 3.
    after = env.reset()[0]
    other = KvRepairEnv(**SMALL_REPAIR)
    other.reset(seed=3)
    assert same(after, other.reset()[0])


def test_a_masked_action_is_replaced_and_flagged():
    env = KvRepairEnv(**SMALL_REPAIR)
    _, info = env.reset(seed=2)
    masked = np.flatnonzero(~info["action_mask"])
    assert masked.size, "repair is infeasible before anything is sent"
    _, _, _, _, info = env.step(int(masked[-1]))
    assert info["mask_violation"]


@pytest.mark.parametrize("bad", [4, -1, 1.5, True, "1", np.array([0, 1]), np.float32(1.0)])
def test_invalid_repair_actions_are_refused(bad):
    env = KvRepairEnv(**SMALL_REPAIR)
    env.reset(seed=0)
    with pytest.raises(ValueError):
        env.step(bad)
    env.step(np.int64(0))  # still usable
    env.step(np.array(0))


@pytest.mark.parametrize(
    "bad",
    [np.zeros(5, np.int64), np.zeros((6, 1), np.int64), np.full(6, 3), np.full(6, -1), np.zeros(6, np.float32), [0.5] * 6],
)
def test_invalid_assignments_are_refused_and_leave_the_env_usable(bad):
    env = LyreoSchedulingEnv(**SMALL_LYREO)
    env.reset(seed=0)
    with pytest.raises(ValueError):
        env.step(bad)
    obs, r, term, trunc, info = env.step([0, 1, 2, 0, 1, 2])
    assert info["slot"] == 0 and np.isfinite(r) and r <= 0.0


def test_a_lyreo_episode_ends_after_its_slots_and_credits_every_request():
    env = LyreoSchedulingEnv(**SMALL_LYREO)
    env.reset(seed=4)
    completed = rejected = 0
    for t in range(5):
        _, r, term, _, info = env.step(np.arange(6) % 3)
        completed += info["completed"]
        rejected += info["rejected"]
        assert term == (t == 4)
    assert completed + rejected == 6 * 5
    with pytest.raises(ValueError):
        env.step(np.zeros(6, np.int64))


def test_step_before_reset_is_an_error():
    with pytest.raises(ValueError):
        KvRepairEnv(**SMALL_REPAIR).step(0)
    with pytest.raises(ValueError):
        LyreoSchedulingEnv(**SMALL_LYREO).step(np.zeros(6, np.int64))


def test_options_pick_the_episodes():
    base = KvRepairEnv(layers=2, rho=0.8)
    assert base.reset(seed=1)[1]["rho"] == 0.8
    _, info = base.reset(seed=1, options={"rho": 1.1, "loss": "bernoulli", "loss_rate": 0.2})
    assert info["rho"] == 1.1 and "0.2" in info["loss"]
    env = LyreoSchedulingEnv(**SMALL_LYREO)
    env.reset(seed=1, options={"users": 9, "mix": "hom"})
    assert env.action_space.shape == (9,) and len(set(env.server_classes)) == 1
    for bad in [
        {"channel": "moon"},
        {"loss": "bernoulli"},
        {"rho": (2.0, 1.0)},
        {"layers": 31},
        {"profile": "/nonexistent/kvu.json"},
        {"ge": (0.1, 0.2)},
    ]:
        with pytest.raises(ValueError):
            KvRepairEnv(**bad)
    for bad in [{"mix": "gold"}, {"users": 0}, {"mobility": "teleport"}, {"batching": "lazy"}]:
        with pytest.raises(ValueError):
            LyreoSchedulingEnv(**bad)


def test_the_package_registers_both_environments():
    assert "edgemu/KvRepair-v0" in gym.registry
    assert "edgemu/LyreoScheduling-v0" in gym.registry
    env = gym.make("edgemu/LyreoScheduling-v0", **SMALL_LYREO)
    assert isinstance(env.unwrapped, edgemu.LyreoSchedulingEnv)
