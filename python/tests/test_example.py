"""examples/python/train_repair.py in --quick mode: trains, writes, evaluates."""

import os
import subprocess

import numpy as np

from edgemu.weights import load_repair_ddqn


def test_the_training_example_runs_quick(root, python, tmp_path):
    out = tmp_path / "ddqn.safetensors"
    script = os.path.join(root, "examples", "python", "train_repair.py")
    r = subprocess.run(
        [python, script, "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "policy swap agent-a --policy priorityfec-ddqn --upload" in r.stdout
    assert "this policy" in r.stdout and "shipped repair DDQN" in r.stdout
    layers, mean, std, notes = load_repair_ddqn(out)
    assert [w.shape for w, _ in layers] == [(64, 15), (64, 64), (4, 64)]
    assert np.all(std == 1) and "train_repair.py" in notes
