#!/usr/bin/env python3
"""Write an edgemu policy weights file from Python, in the format documented
in policies/README.md, with the `edgemu` package's writer (`pip install
./python`: edgemu's own Rust writer, so the file is what `edgemu train`
writes; no torch needed).

PyTorch users train however they like and then call
`edgemu.weights.write_weights` (or `save_repair_ddqn` for the repair DDQN,
which also validates the file with edgemu's loader) with their tensors
(`module.weight.detach().numpy()`); this script shows the names, shapes,
dtype and metadata a file must have, and writes a seeded random one that
edgemu loads with the same validation as its own (`policy.swap` refuses
anything else).

    pip install ./python
    python3 scripts/write_policy_weights.py --kind repair-ddqn --seed 7 \
        --out ddqn.safetensors --expect ddqn-expect.json

`--expect` also writes fixed inputs and the outputs of the forward pass
computed here in numpy (float32), which `policies/tests/python_weights.rs`
compares with edgemu's Rust forward pass.
"""

import argparse
import json
import sys

import numpy as np

try:
    from edgemu.weights import write_weights
except ImportError as e:  # pragma: no cover - a message, not a fallback
    sys.exit(f"{e}: install the edgemu package first (pip install ./python from the repository)")

# kind -> (net prefix -> (layer sizes, hidden activation)), observation width,
# metadata version. Mirrors policies/README.md's "Policies" table.
KINDS = {
    "repair-ddqn": {
        "nets": {"q": ([15, 64, 64, 4], "relu")},
        "obs": 15,
        "normalized_net": "q",
        "version": 1,
        "notes": "written by scripts/write_policy_weights.py",
    },
    "lyreo-actor-critic": {
        "nets": {
            "actor": ([21, 64, 64, 64, 1], "tanh"),
            "critic": ([19, 64, 64, 64, 1], "tanh"),
        },
        "obs": 21,
        "normalized_net": "actor",
        # 2: 12 pair + 9 slot-context features per row, fitted normalization.
        "version": 2,
        # edgemu reads the variant from the start of `notes`.
        "notes": "variant=lyreo; written by scripts/write_policy_weights.py",
    },
}


def linear_init(rng, fan_in, fan_out):
    """PyTorch's nn.Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / np.sqrt(fan_in)
    w = rng.uniform(-bound, bound, size=(fan_out, fan_in)).astype(np.float32)
    b = rng.uniform(-bound, bound, size=(fan_out,)).astype(np.float32)
    return w, b


def forward(layers, act, x):
    """The MLP forward pass as edgemu computes it: hidden activation on every
    layer but the last, identity output; float32 throughout."""
    h = x.astype(np.float32)
    for i, (w, b) in enumerate(layers):
        h = (h @ w.T + b).astype(np.float32)
        if i + 1 < len(layers):
            h = np.maximum(h, 0.0) if act == "relu" else np.tanh(h)
    return h.astype(np.float32)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=sorted(KINDS), required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="the .safetensors file to write")
    ap.add_argument("--expect", help="also write fixed inputs and numpy outputs (JSON)")
    ap.add_argument("--inputs", type=int, default=8, help="how many fixed inputs for --expect")
    args = ap.parse_args(argv)

    spec = KINDS[args.kind]
    rng = np.random.default_rng(args.seed)
    tensors, nets = {}, {}
    for prefix, (sizes, act) in spec["nets"].items():
        layers = []
        for l, (fi, fo) in enumerate(zip(sizes[:-1], sizes[1:])):
            w, b = linear_init(rng, fi, fo)
            tensors[f"{prefix}.{l}.weight"] = w
            tensors[f"{prefix}.{l}.bias"] = b
            layers.append((w, b))
        nets[prefix] = (sizes, act, layers)
    # A non-trivial normalization so a loader that ignored it would fail the check.
    obs_mean = rng.uniform(-0.5, 0.5, size=spec["obs"]).astype(np.float32)
    obs_std = rng.uniform(0.5, 2.0, size=spec["obs"]).astype(np.float32)
    write_weights(args.out, args.kind, tensors, obs_mean, obs_std, spec["notes"], spec["version"])

    if args.expect:
        cases = {}
        for prefix, (sizes, act, layers) in nets.items():
            x = rng.uniform(-1.0, 1.0, size=(args.inputs, sizes[0])).astype(np.float32)
            xin = (x - obs_mean) / obs_std if prefix == spec["normalized_net"] else x
            y = forward(layers, act, xin.astype(np.float32))
            cases[prefix] = {
                "normalized": prefix == spec["normalized_net"],
                "inputs": x.tolist(),
                "outputs": y.tolist(),
            }
        with open(args.expect, "w") as f:
            json.dump({"kind": args.kind, "seed": args.seed, "nets": cases}, f, indent=1)
            f.write("\n")
    print(f"wrote {args.out}" + (f" and {args.expect}" if args.expect else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
