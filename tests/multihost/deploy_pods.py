#!/usr/bin/env python3
"""The pods of `edgemu deploy k8s` manifests, as run.sh runs them.

    python3 deploy_pods.py K8S_DIR RUN_DIR

Checks that the ConfigMap holds the written cluster.toml, that the Secret's
token is $EDGEMU_TOKEN, and that each pod's DNS name (hostname.subdomain.
namespace.svc) is the name the cluster file advertises it by. Writes
RUN_DIR/cluster.toml: the ConfigMap's file with the results volume's mount
point replaced by RUN_DIR/results (the only path a pod has that a namespace
does not). Prints one line per pod: HOST DNS COMMAND..., the command with
the ConfigMap's mount path replaced by RUN_DIR/cluster.toml. Needs PyYAML
(kubernetes-validate's dependency).
"""

import os
import shlex
import sys

import yaml

CONFIG_PATH = "/etc/edgemu/cluster.toml"
RESULTS_PATH = "/var/lib/edgemu/results"


def main():
    k8s_dir, run_dir = sys.argv[1], sys.argv[2]
    docs = [d for d in yaml.safe_load_all(open(os.path.join(k8s_dir, "edgemu.yaml"))) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    (cm,) = by_kind["ConfigMap"]
    text = cm["data"]["cluster.toml"]
    if text != open(os.path.join(k8s_dir, "cluster.toml")).read():
        sys.exit("deploy_pods: the ConfigMap's cluster.toml differs from the written one")
    (secret,) = by_kind["Secret"]
    if secret["stringData"]["token"] != os.environ.get("EDGEMU_TOKEN"):
        sys.exit("deploy_pods: the Secret's token is not $EDGEMU_TOKEN")
    os.makedirs(run_dir, exist_ok=True)
    results = os.path.join(run_dir, "results")
    with open(os.path.join(run_dir, "cluster.toml"), "w") as f:
        f.write(text.replace(RESULTS_PATH, results))
    for pod in by_kind["Pod"]:
        spec = pod["spec"]
        (c,) = spec["containers"]
        dns = f'{spec["hostname"]}.{spec["subdomain"]}.{pod["metadata"]["namespace"]}.svc'
        port = next(p["containerPort"] for p in c["ports"] if p["name"] == "mesh")
        if f'advertise = "{dns}:{port}"' not in text:
            sys.exit(f"deploy_pods: {dns}:{port} is not advertised in the cluster file")
        cmd = [os.path.join(run_dir, "cluster.toml") if a == CONFIG_PATH else a for a in c["command"]]
        host = cmd[cmd.index("--host") + 1]
        print(host, dns, shlex.join(cmd))


if __name__ == "__main__":
    main()
