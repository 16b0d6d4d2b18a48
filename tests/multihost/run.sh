#!/usr/bin/env bash
# The multi-host test: three `edgemu node` processes, one per network
# namespace, joined by veth pairs on a bridge (198.18.0.0/24), driven with
# `edgemu ctl` during the run; tests/multihost/check.py then asserts on the
# results files. Must run as root. Usage:
#
#   bash tests/multihost/run.sh [path/to/edgemu]     (default target/debug/edgemu)
#
# Environment: EMU_KEEP=1 keeps the work folder (logs, results) after a
# passing run; it is always kept after a failing one.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${1:-$ROOT/target/debug/edgemu}

die() { echo "multihost: $*" >&2; exit 1; }
log() { echo "multihost: $*"; }

[[ $EUID -eq 0 ]] || die "must run as root (it creates network namespaces)"
command -v ip >/dev/null || die "needs iproute2 (ip)"
command -v python3 >/dev/null || die "needs python3"
command -v timeout >/dev/null || die "needs coreutils timeout"
[[ -x $BIN ]] || die "no edgemu binary at $BIN (build it: cargo build -p edgemu-nodes)"
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")

# Unique names, so parallel runs and leftovers never collide.
P="emu-ci-$$"
NS_BR="$P-br"
declare -A NS=([alpha]="$P-a" [beta]="$P-b" [gamma]="$P-c")
declare -A IP=([alpha]=198.18.0.1 [beta]=198.18.0.2 [gamma]=198.18.0.3)
declare -A CTL=([alpha]=ws://198.18.0.1:7201 [beta]=ws://198.18.0.2:7202 [gamma]=ws://198.18.0.3:7203)
declare -A PID=()
CREATED_NS=()

WORK=$(mktemp -d "${TMPDIR:-/tmp}/edgemu-multihost.XXXXXX")
mkdir -p "$WORK/logs" "$WORK/ctl"
RUNID="multihost-$$"
RESULTS="$WORK/results/$RUNID"
export EDGEMU_TOKEN="mh-$$-$RANDOM$RANDOM$RANDOM"

cleanup() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    for h in "${!PID[@]}"; do
        kill -9 "${PID[$h]}" 2>/dev/null
    done
    for h in "${!PID[@]}"; do
        wait "${PID[$h]}" 2>/dev/null
    done
    for ns in "${CREATED_NS[@]}"; do
        # Anything still running in a namespace we created was started by us.
        for p in $(ip netns pids "$ns" 2>/dev/null); do
            kill -9 "$p" 2>/dev/null
        done
        ip netns del "$ns" 2>/dev/null
        rm -rf "/etc/netns/$ns"
    done
    if [[ $rc -ne 0 ]]; then
        for f in "$WORK"/logs/*-{alpha,beta,gamma}.log; do
            [[ -f $f ]] || continue
            echo "----- last lines of $f" >&2
            tail -n 20 "$f" >&2
        done
        echo "multihost: FAILED (rc $rc); logs and results kept in $WORK" >&2
    elif [[ ${EMU_KEEP:-0} == 1 ]]; then
        log "work folder kept: $WORK"
    else
        rm -rf "$WORK"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

addns() { ip netns add "$1"; CREATED_NS+=("$1"); }

# --- network: a bridge in its own namespace, one veth pair per host --------
addns "$NS_BR"
ip -n "$NS_BR" link set lo up
ip -n "$NS_BR" link add br0 type bridge
ip -n "$NS_BR" link set br0 up
for h in alpha beta gamma; do
    ns=${NS[$h]}
    addns "$ns"
    ip -n "$NS_BR" link add "v-$h" type veth peer name eth0 netns "$ns"
    ip -n "$NS_BR" link set "v-$h" master br0
    ip -n "$NS_BR" link set "v-$h" up
    ip -n "$ns" addr add "${IP[$h]}/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
done
log "namespaces ${NS[alpha]} ${NS[beta]} ${NS[gamma]} on bridge br0 in $NS_BR"

now_ns() { date +%s%N; }

# start_nodes NAME RUN_ID: copies tests/multihost/NAME.toml into the work
# folder (so results go there), checks it, and starts one `edgemu node` per
# host namespace (PID[host]; log $WORK/logs/NAME-host.log).
start_nodes() {
    local name=$1 run_id=$2 h
    cp "$HERE/$name.toml" "$WORK/$name.toml"
    "$BIN" check "$WORK/$name.toml" >"$WORK/logs/$name-check.log" \
        || die "edgemu check $name.toml failed: $(cat "$WORK/logs/$name-check.log")"
    for h in alpha beta gamma; do
        NO_COLOR=1 RUST_LOG="warn,edgemu_nodes=info" ip netns exec "${NS[$h]}" "$BIN" node \
            --config "$WORK/$name.toml" --host "$h" --run-id "$run_id" --wait-peers 20s --quiet \
            >"$WORK/logs/$name-$h.log" 2>&1 &
        PID[$h]=$!
    done
    log "$name nodes started: alpha ${PID[alpha]}, beta ${PID[beta]}, gamma ${PID[gamma]}; work folder $WORK"
}

# wait_nodes NAME DEADLINE_NS WHEN HOST...: waits for each HOST's node to
# exit by DEADLINE_NS (unix ns; WHEN says what that is, for the error) and
# records its exit status in RC[host].
declare -A RC=()
wait_nodes() {
    local name=$1 deadline=$2 when=$3 h rc
    shift 3
    for h in "$@"; do
        while kill -0 "${PID[$h]}" 2>/dev/null; do
            (( $(now_ns) < deadline )) || die "$name node $h did not finish $when"
            sleep 0.1
        done
        rc=0
        wait "${PID[$h]}" || rc=$?
        RC[$h]=$rc
        unset "PID[$h]"
        log "$name node $h exited with $rc"
    done
}

# --- nodes: the link and chaos phase (cluster.toml, check.py) -------------
cd "$ROOT"
start_nodes cluster "$RUNID"

# The run's start (unix ns) from run.json, once the coordinator announced it.
START_NS=""
deadline=$(( $(now_ns) + 30000000000 ))
while [[ -z $START_NS ]]; do
    (( $(now_ns) < deadline )) || die "the run did not start within 30 s"
    for h in alpha beta gamma; do
        kill -0 "${PID[$h]}" 2>/dev/null || die "node $h exited before the run started"
    done
    if [[ -f $RESULTS/run.json ]]; then
        START_NS=$(python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1]))["start_unix_ns"] or "")
except Exception: print("")' "$RESULTS/run.json")
    fi
    [[ -n $START_NS ]] || sleep 0.05
done
log "run $RUNID starts at unix $START_NS ns"

# Sleep until run time $1 (milliseconds).
at_ms() {
    local d=$(( START_NS + $1 * 1000000 - $(now_ns) ))
    if (( d > 0 )); then
        sleep "$(printf '%d.%09d' $(( d / 1000000000 )) $(( d % 1000000000 )))"
    fi
}

# ctl NAME FROM_HOST TO_HOST ARGS…: run `edgemu ctl` inside FROM_HOST's
# namespace against TO_HOST's control websocket; keeps stdout, stderr, rc.
ctl() {
    local name=$1 from=$2 to=$3
    shift 3
    local rc=0
    timeout 15 ip netns exec "${NS[$from]}" "$BIN" ctl --url "${CTL[$to]}" "$@" \
        >"$WORK/ctl/$name.json" 2>"$WORK/ctl/$name.err" || rc=$?
    echo "$rc" >"$WORK/ctl/$name.rc"
    log "ctl $name ($from -> $to: $*): rc $rc"
}

# t = 1 s: status through beta (forwarded to the two others).
at_ms 1000
ctl status-start alpha beta status
# t = 4 s: kill "wan" for 3 s, asked of gamma, which owns neither direction.
at_ms 4000
ctl kill-wan beta gamma link kill wan --for 3s
# t = 9 s: squeeze "cell" (beta's a→b direction) to 8 Mb/s, asked of alpha.
at_ms 9000
ctl set-cell gamma alpha link set cell --dir ab --rate 8Mbps
# t = 10 s: a wrong token and a missing one (asked of beta and alpha) must be refused.
at_ms 10000
ctl refused-wrong alpha beta --token "wrong-token-$$" link kill cell
(unset EDGEMU_TOKEN; ctl refused-unset alpha alpha link kill wan)
# t = 15 s: kill the gamma node outright.
at_ms 15000
GAMMA_KILL_NS=$(now_ns)
kill -9 "${PID[gamma]}"
wait "${PID[gamma]}" 2>/dev/null || true
unset 'PID[gamma]'
log "killed gamma at run time $(( (GAMMA_KILL_NS - START_NS) / 1000000 )) ms"
# t = 17 s: status through alpha: gamma must be reported unreachable.
at_ms 17000
ctl status-end beta alpha status

# --- the survivors finish the run -----------------------------------------
wait_nodes cluster $(( START_NS + 40000000000 )) "within 40 s of the start" alpha beta

cat >"$WORK/timeline.json" <<EOF
{
  "run_id": "$RUNID",
  "start_unix_ns": $START_NS,
  "gamma_kill_unix_ns": $GAMMA_KILL_NS,
  "exit_codes": { "alpha": ${RC[alpha]}, "beta": ${RC[beta]} }
}
EOF

python3 "$HERE/check.py" --results "$RESULTS" --work "$WORK"

# One live phase: start NAME.toml's three nodes (run id NAME-$$) and wait
# for all of them to exit 0 within LIMIT seconds.
run_phase() {
    local name=$1 limit=$2 h
    start_nodes "$name" "$name-$$"
    wait_nodes "$name" $(( $(now_ns) + limit * 1000000000 )) "within $limit s" alpha beta gamma
    for h in alpha beta gamma; do
        [[ ${RC[$h]} -eq 0 ]] || die "$name node $h failed: $(tail -n 5 "$WORK/logs/$name-$h.log")"
    done
}

# --- live LYREO: users on alpha, servers on beta (one real SmolLM2), the ---
# --- scheduler on gamma (lyreo.toml, other ports; check_lyreo.py)        ---
run_phase lyreo 90
python3 "$HERE/check_lyreo.py" --results "$WORK/results/lyreo-$$"

# --- live KV handoff: agent on alpha -> agent on beta over a lossy link, ---
# --- scheduler on gamma (handoff.toml; check_handoff.py compares with the ---
# --- same file in virtual time, i.e. the co-simulation harness)           ---
run_phase handoff 60
HRUN="handoff-$$"
sed 's/^time = "real"/time = "virtual"/' "$WORK/handoff.toml" >"$WORK/handoff-virtual.toml"
timeout 60 "$BIN" run --config "$WORK/handoff-virtual.toml" --run-id "$HRUN-virtual" --quiet \
    >"$WORK/logs/handoff-virtual.log" 2>&1 || die "virtual handoff run failed: $(tail -n 5 "$WORK/logs/handoff-virtual.log")"
python3 "$HERE/check_handoff.py" --live "$WORK/results/$HRUN" --virtual "$WORK/results/$HRUN-virtual"

# --- deployment: the pods `edgemu deploy k8s` writes, each pod's command   ---
# --- line run in a namespace, peers dialed by the pods' DNS names (from   ---
# --- /etc/netns/NS/hosts, which `ip netns exec` mounts over /etc/hosts)   ---
"$BIN" deploy k8s "$HERE/deploy.toml" --out "$WORK/k8s" --namespace emu-ci --token "$EDGEMU_TOKEN" \
    >"$WORK/logs/deploy-write.log" 2>&1 || die "edgemu deploy k8s failed: $(cat "$WORK/logs/deploy-write.log")"
python3 "$HERE/deploy_pods.py" "$WORK/k8s" "$WORK/k8s-run" >"$WORK/k8s-pods.txt" \
    || die "the generated pods are not what the cluster file says"
for h in alpha beta gamma; do
    mkdir -p "/etc/netns/${NS[$h]}"
    { echo "127.0.0.1 localhost"
      while read -r host dns _; do echo "${IP[$host]} $dns"; done <"$WORK/k8s-pods.txt"
    } >"/etc/netns/${NS[$h]}/hosts"
done
while read -r host dns cmd; do
    [[ -n ${NS[$host]:-} ]] || die "a generated pod runs host $host, which this test has no namespace for"
    # The image's binary is this build's; the rest of the command is the pod's.
    eval "set -- $cmd"
    shift
    NO_COLOR=1 RUST_LOG="warn,edgemu_nodes=info" ip netns exec "${NS[$host]}" "$BIN" "$@" \
        --run-id "deploy-$$" --wait-peers 20s >"$WORK/logs/deploy-$host.log" 2>&1 &
    PID[$host]=$!
    log "deploy pod $dns: $cmd"
done <"$WORK/k8s-pods.txt"
wait_nodes deploy $(( $(now_ns) + 60 * 1000000000 )) "within 60 s" alpha beta gamma
for h in alpha beta gamma; do
    [[ ${RC[$h]} -eq 0 ]] || die "deploy node $h failed: $(tail -n 5 "$WORK/logs/deploy-$h.log")"
done
python3 "$HERE/check_deploy.py" --results "$WORK/k8s-run/results/deploy-$$"
