"""serve_policy: a fake edgemu client (websockets) sends decision requests
as a live run does; the policy gets the Gym env's observation."""

import json

import numpy as np
import pytest
from websockets.sync.client import connect

import edgemu
from edgemu.envs import KvRepairEnv, LyreoSchedulingEnv


def repair_request(rid, obs, mask):
    return json.dumps(
        {
            "protocol": 1,
            "id": rid,
            "problem": "repair",
            "obs": {"repair": {"features": obs.tolist(), "mask": mask.tolist()}},
        }
    )


def lyreo_request(rid, obs):
    u, s, _ = obs["pairs"].shape
    return json.dumps(
        {
            "protocol": 1,
            "id": rid,
            "problem": "lyreo",
            "obs": {
                "lyreo": {
                    "requests": u,
                    "servers": s,
                    "pairs": obs["pairs"].ravel().tolist(),
                    "lengths": obs["lengths"].ravel().tolist(),
                    "server_features": obs["servers"].ravel().tolist(),
                    "queues": obs["queues"].tolist(),
                }
            },
        }
    )


class Recorder:
    """A policy that keeps what it was given."""

    def __init__(self):
        self.seen = []

    def __call__(self, obs, info):
        self.seen.append((obs, info))
        if info["problem"] == "repair":
            return np.int64(info["action_mask"].argmax())
        return np.arange(obs["lengths"].shape[0]) % obs["queues"].shape[0]


def test_round_trip_gives_the_policy_the_envs_observation():
    policy = Recorder()
    renv = KvRepairEnv(layers=1)
    robs, rinfo = renv.reset(seed=2)
    lenv = LyreoSchedulingEnv(users=5, servers=3, slots=3)
    lobs, _ = lenv.reset(seed=2)
    lobs, *_ = lenv.step(np.arange(5) % 3)  # non-zero queues and load
    with edgemu.serve_policy_in_thread(policy) as server, connect(server.url) as ws:
        ws.send(repair_request(11, robs, rinfo["action_mask"]))
        reply = json.loads(ws.recv(timeout=10))
        assert reply == {"id": 11, "action": int(rinfo["action_mask"].argmax()), "error": None}
        ws.send(lyreo_request(12, lobs))
        reply = json.loads(ws.recv(timeout=10))
        assert reply == {"id": 12, "action": [0, 1, 2, 0, 1], "error": None}
    assert server.requests == 2 and server.errors == 0
    (obs, info), (lo, linfo) = policy.seen
    assert obs.dtype == robs.dtype and np.array_equal(obs, robs)
    assert info["problem"] == "repair" and info["id"] == 11
    assert info["action_mask"].dtype == np.bool_
    assert np.array_equal(info["action_mask"], rinfo["action_mask"])
    assert linfo["problem"] == "lyreo" and "action_mask" not in linfo
    assert lo.keys() == lobs.keys()
    for k in lo:
        assert lo[k].dtype == lobs[k].dtype and lo[k].shape == lobs[k].shape
        assert np.array_equal(lo[k], lobs[k]), k


def test_a_failing_policy_or_a_bad_frame_gets_an_error_and_serving_goes_on():
    calls = []

    def policy(obs, info):
        calls.append(info["id"])
        if info["id"] == 1:
            raise RuntimeError("no idea")
        if info["id"] == 2:
            return object()  # not JSON
        return 0

    obs = np.zeros(15, np.float32)
    mask = np.array([True, False, False, False])
    with edgemu.serve_policy_in_thread(policy) as server, connect(server.url) as ws:
        ws.send(repair_request(1, obs, mask))
        r = json.loads(ws.recv(timeout=10))
        assert r["id"] == 1 and r["action"] is None and "RuntimeError: no idea" in r["error"]
        ws.send(repair_request(2, obs, mask))
        r = json.loads(ws.recv(timeout=10))
        assert r["id"] == 2 and r["action"] is None and "TypeError" in r["error"]
        ws.send('{"id": 3, "problem": "repair"}')
        r = json.loads(ws.recv(timeout=10))
        assert r["id"] == 3 and r["error"].startswith("bad request")
        ws.send("not json at all")
        r = json.loads(ws.recv(timeout=10))
        assert r["id"] == 0 and r["error"].startswith("bad request")
        bad = json.loads(repair_request(4, obs, mask))
        bad["protocol"] = 99
        ws.send(json.dumps(bad))
        r = json.loads(ws.recv(timeout=10))
        assert r["id"] == 4 and "protocol" in r["error"]
        lyreo = json.loads(lyreo_request(5, LyreoSchedulingEnv(users=2, servers=2, slots=1).reset(seed=0)[0]))
        lyreo["obs"]["lyreo"]["queues"] = [0.0]
        ws.send(json.dumps(lyreo))
        r = json.loads(ws.recv(timeout=10))
        assert r["id"] == 5 and "queues" in r["error"]
        ws.send(repair_request(6, obs, mask))
        assert json.loads(ws.recv(timeout=10)) == {"id": 6, "action": 0, "error": None}
    assert calls == [1, 2, 6]
    assert server.requests == 7 and server.errors == 6


def test_stop_closes_the_server():
    server = edgemu.serve_policy_in_thread(lambda o, i: 0)
    url = server.url
    server.stop()
    with pytest.raises(OSError):
        connect(url, open_timeout=2)
