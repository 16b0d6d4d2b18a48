#!/usr/bin/env bash
# The one script to run on a GPU machine (an H200 of the device tool): checks and
# measures edgemu's CUDA path with the SmolLM2-135M architecture and seeded
# random weights (the 98 MB GGUF cannot travel; same shapes and quantized types,
# so the same time per token), and the Hugging Face transformers baseline.
#
# Prepare here (no GPU needed), then send the binary along:
#   eval "$(scripts/install-cuda.sh)"
#   cargo build --release -p edgemu-nodes --features cuda
#   mkdir -p .gpu-bin && strip -o .gpu-bin/edgemu "$CARGO_TARGET_DIR/release/edgemu"   # (or target/release)
#   xz -T2 -6 .gpu-bin/edgemu        # 62 MiB stripped -> ~10 MB .gpu-bin/edgemu.xz (the carry limit is 64 MiB)
#   echo /.gpu-bin/ >> .git/info/exclude
# and on the device tool:  run(command="bash scripts/h200-check.sh", carry=[".gpu-bin"], timeout_s=600)
#
# Steps (each with its own time limit; a failing step is reported, the rest run):
#   0. environment: nvidia-smi, the CUDA 13 libraries the binary needs, ldd
#   1. cuda-vs-cpu: `edgemu generate` on the tiny random model, same seed, F32
#      layout on both (must be equal), and the default layouts (agreement shown)
#   2. `edgemu bench decode --device cuda:0 --random-weights 42 --batches 1,4,16,32,64,128`
#      (prefill 200/1536, decode under continuous batching, candle-transformers
#      baseline, NVML reading)
#   2b. (GPU only) the same decode with EDGEMU_CUDA_BATCHED_ATTENTION=0, the
#      per-sequence attention path: the batched kernel's gain in the same run
#   3. scripts/hf_baseline.py --device cuda --batches 1,32 (LlamaForCausalLM, eager)
#   4. the other weight layouts (EDGEMU_CHECK_LAYOUTS, default "f16,f16 q8_0,q8_0")
#      at batches 1,32,128: is `keep` (the CUDA default) the fastest?
#   5. `edgemu profile --device cuda:0 --random-weights 42` (5b: GPU only, again
#      with the per-sequence attention path)
#   6. NVML telemetry straight from nvidia-smi for comparison
#   7. (GPU only) gpu/tests/cuda_decode.rs, with and without the batched kernel,
#      when its test binary came along as .gpu-bin/cuda_decode[.xz]
# Everything lands in $OUT (the device tool's folder; default ./h200-out) and a
# summary is printed at the end.
#
# CPU dry run (what can be proven without a GPU):
#   EDGEMU_CHECK_DEVICE=cpu EDGEMU_CHECK_QUICK=1 EDGEMU_BIN=target/release/edgemu scripts/h200-check.sh
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT="${OUT:-$PWD/h200-out}"
mkdir -p "$OUT"
BIN="${EDGEMU_BIN:-.gpu-bin/edgemu}"
DEV="${EDGEMU_CHECK_DEVICE:-cuda:0}"
QUICK="${EDGEMU_CHECK_QUICK:-0}"
SEED="${EDGEMU_CHECK_SEED:-42}"
if [ "$QUICK" = 1 ]; then
  ARCH_BENCH="tiny:$SEED"; BATCHES="1,4,16"; BENCH_FLAGS="--quick"; PROFILE_FLAGS="--quick"
  HF_FLAGS="--layers 2 --new-tokens 8 --batches 1,4 --dtype float32"
else
  ARCH_BENCH="smollm2-135m:$SEED"; BATCHES="1,4,16,32,64,128"; BENCH_FLAGS=""; PROFILE_FLAGS=""
  HF_FLAGS="--batches 1,32 --new-tokens 128"
fi
HF_DEV=cuda; case "$DEV" in cpu) HF_DEV=cpu ;; esac
status=()
step() { printf '\n=== %s ===\n' "$*" | tee -a "$OUT/log.txt"; }
record() { status+=("$1: $2"); echo "[$2] $1" | tee -a "$OUT/log.txt"; }
# The device tool kills a command after 600 s: every step's limit is cut to
# what is left of a total budget (keeping 20 s for the summary), so a slow
# step costs the steps after it, never the summary. Each result is also in
# $OUT/log.txt as it happens, which comes back even if the call is killed.
BUDGET_S="${EDGEMU_CHECK_BUDGET_S:-570}"
t_start=$(date +%s)
limit() { # wanted_s -> what the budget still allows (at least 1)
  local left=$(( BUDGET_S - 20 - ($(date +%s) - t_start) ))
  [ "$left" -lt 1 ] && left=1
  [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}
run_step() { # name timeout_s command...
  local name=$1 t; t=$(limit "$2"); shift 2
  if timeout "$t" "$@"; then record "$name" ok; else record "$name" "FAILED rc=$? (limit ${t} s)"; fi
}
run_out() { # name timeout_s outfile command...   (stdout to outfile)
  local name=$1 t f=$3; t=$(limit "$2"); shift 3
  if timeout "$t" "$@" >"$f"; then record "$name" ok; else record "$name" "FAILED rc=$? (limit ${t} s)"; fi
}

step "0. environment"
{ date -u; uname -a; nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 || true; } | tee "$OUT/env.txt"
# The stripped CUDA binary is ~62 MiB, too close to the device tool's 64 MiB
# limit on everything sent with the working tree: it travels xz-compressed
# (~10 MB) and is unpacked here.
# unpacked PATH: PATH itself if executable, else PATH.xz unpacked into a
# temporary folder (not under $OUT: what is there is sent back; python3's lzma,
# in case xz is absent); prints the path to run, or PATH when there is neither.
unpacked() {
  local p=$1 u
  if [ ! -x "$p" ] && [ -f "$p.xz" ]; then
    u="$(mktemp -d)/$(basename "$p")"
    python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' "$p.xz" "$u" \
      && chmod +x "$u" && p="$u"
  fi
  echo "$p"
}
BIN="$(unpacked "$BIN")"
if [ ! -x "$BIN" ]; then
  echo "no binary at $BIN or $BIN.xz (see the top of this script)"; exit 2
fi
# The binary links libcuda.so.1 (driver) and CUDA 13's libcublas/libcublasLt/
# libcurand/libnvrtc/libcudart: look for them where the machine has them
# (a CUDA toolkit, or PyTorch's nvidia-* wheels) unless the loader finds them.
if [ "$DEV" != cpu ]; then
  libdirs=""
  for lib in libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13; do
    if ! ldconfig -p 2>/dev/null | grep -q "$lib"; then
      d=$( { ls -d /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu \
                  /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib 2>/dev/null
             python3 -c 'import site,sys; print("\n".join(site.getsitepackages()+[site.getusersitepackages()]))' 2>/dev/null; } |
           while read -r base; do find "$base" -maxdepth 5 -name "$lib" -print 2>/dev/null; done | head -n1)
      [ -n "$d" ] && libdirs="$libdirs:$(dirname "$d")"
    fi
  done
  export LD_LIBRARY_PATH="${libdirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" | tee -a "$OUT/env.txt"
fi
ldd "$BIN" 2>&1 | tee -a "$OUT/env.txt" | grep -E "not found|cuda|cublas|nvrtc|curand" || true
"$BIN" --version | tee -a "$OUT/env.txt"

step "1. cuda vs cpu tokens (tiny random model, seed $SEED)"
gen=("$BIN" generate --random-weights "tiny:$SEED" --batch 4 --prompt-len 12 --tokens 24)
run_out "generate cpu f32" 120 "$OUT/gen-cpu-f32.json" "${gen[@]}" --device cpu --layout f32,f32
run_out "generate $DEV f32" 120 "$OUT/gen-dev-f32.json" "${gen[@]}" --device "$DEV" --layout f32,f32
run_out "generate cpu default layout" 120 "$OUT/gen-cpu-default.json" "${gen[@]}" --device cpu
run_out "generate $DEV default layout" 120 "$OUT/gen-dev-default.json" "${gen[@]}" --device "$DEV"
python3 - "$OUT" <<'EOF' | tee "$OUT/token-equality.txt"
import json, sys, os
out = sys.argv[1]
def load(n):
    p = os.path.join(out, n)
    try:
        return json.load(open(p))
    except Exception as e:
        return None
for kind in ("f32", "default"):
    a, b = load(f"gen-cpu-{kind}.json"), load(f"gen-dev-{kind}.json")
    if not a or not b:
        print(f"{kind}: missing output"); continue
    ta, tb = a["tokens"], b["tokens"]
    same = sum(x == y for ra, rb in zip(ta, tb) for x, y in zip(ra, rb))
    total = sum(len(r) for r in ta)
    verdict = "EQUAL" if ta == tb else "DIFFERENT"
    print(f"{kind} layouts (cpu {a['layout']} / {b['device']} {b['layout']}): {verdict}, {same}/{total} tokens agree")
EOF
grep -q "^f32 .*EQUAL" "$OUT/token-equality.txt" && record "cuda-vs-cpu tokens equal (f32)" ok || record "cuda-vs-cpu tokens equal (f32)" FAILED

step "2. bench decode on $DEV ($ARCH_BENCH, batches $BATCHES)"
run_out "bench decode" 420 "$OUT/bench-decode.json" "$BIN" bench decode --device "$DEV" \
  --random-weights "$ARCH_BENCH" --batches "$BATCHES" $BENCH_FLAGS --json
[ -s "$OUT/bench-decode.json" ] && python3 -c "
import json,sys; r=json.load(open('$OUT/bench-decode.json'))
print('prefill tok/s', r['prefill_tok_s']); print('decode tok/s', r['decode_tok_s'])
print('speedup_16', round(r['speedup_16'],2), 'model_error', round(r['model_error'],3), r['model_error_check'])
print('baselines', json.dumps(r.get('baselines'))); print('vs candle-transformers', r.get('vs_candle_transformers'))
print('gpu', r.get('gpu'), r.get('gpu_unavailable') or '')" | tee "$OUT/bench-decode.txt"

if [ "$DEV" != cpu ]; then
  step "2b. the same decode with the per-sequence attention path (EDGEMU_CUDA_BATCHED_ATTENTION=0)"
  # Before 2026-12-04 every sequence's decode attention was its own ~8 candle
  # launches per layer; the batched kernel does a step's layer in one. Same run,
  # same weights: the ratio of the two is the kernel's gain.
  EDGEMU_CUDA_BATCHED_ATTENTION=0 run_out "bench decode per-sequence attention" 120 "$OUT/bench-decode-perseq.json" \
    "$BIN" bench decode --device "$DEV" --random-weights "$ARCH_BENCH" --batches "$BATCHES" \
    --no-baselines $BENCH_FLAGS --json
  [ -s "$OUT/bench-decode-perseq.json" ] && python3 -c "
import json; a=json.load(open('$OUT/bench-decode.json')); p=json.load(open('$OUT/bench-decode-perseq.json'))
print('per-sequence attention: decode tok/s', {k: round(v) for k, v in p['decode_tok_s'].items()})
print('batched kernel / per-sequence:', {k: round(a['decode_tok_s'][k] / v, 2) for k, v in p['decode_tok_s'].items() if k in a['decode_tok_s']})
d=a['decode_tok_s']; print('batched kernel: batch-32 aggregate / batch-1:', round(d['32'] / d['1'], 2) if '32' in d and '1' in d else 'n/a')" | tee "$OUT/perseq.txt"
fi

step "3. Hugging Face transformers baseline ($HF_DEV)"
if python3 -c "import torch, transformers" 2>/dev/null; then
  run_out "hf baseline" 300 "$OUT/hf-baseline.json" python3 scripts/hf_baseline.py --device "$HF_DEV" $HF_FLAGS
else
  python3 scripts/hf_baseline.py --print-config $HF_FLAGS > "$OUT/hf-baseline-config.json" && \
    record "hf baseline" "SKIPPED: torch/transformers not installed (arguments checked)"
fi

step "4. other weight layouts on $DEV (keep is the CUDA default: is it the fastest?)"
# Each PREFILL,DECODE layout of EDGEMU_CHECK_LAYOUTS (space-separated) once,
# without baselines, at three batch sizes: which format the CUDA default should be.
for lay in ${EDGEMU_CHECK_LAYOUTS-f16,f16 q8_0,q8_0}; do  # set it empty to skip
  run_out "bench decode layout $lay" 120 "$OUT/bench-decode-$lay.json" "$BIN" bench decode --device "$DEV" \
    --random-weights "$ARCH_BENCH" --layout "$lay" --batches "${EDGEMU_CHECK_LAYOUT_BATCHES:-1,32,128}" \
    --no-baselines $BENCH_FLAGS --json
  [ -s "$OUT/bench-decode-$lay.json" ] && python3 -c "
import json; r=json.load(open('$OUT/bench-decode-$lay.json'))
print('layout $lay: prefill tok/s', {k: round(v) for k, v in r['prefill_tok_s'].items()}, 'decode tok/s', {k: round(v) for k, v in r['decode_tok_s'].items()})" | tee -a "$OUT/layouts.txt"
done

step "5. profile on $DEV"
run_step "profile" 240 "$BIN" profile "$OUT/profile.json" --device "$DEV" --random-weights "$ARCH_BENCH" $PROFILE_FLAGS

if [ "$DEV" != cpu ]; then
  step "5b. profile with the per-sequence attention path (EDGEMU_CUDA_BATCHED_ATTENTION=0)"
  EDGEMU_CUDA_BATCHED_ATTENTION=0 run_step "profile per-sequence attention" 240 "$BIN" profile "$OUT/profile-perseq.json" \
    --device "$DEV" --random-weights "$ARCH_BENCH" $PROFILE_FLAGS
fi

step "6. NVML telemetry from nvidia-smi (compare with the bench's reading)"
nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu,power.draw --format=csv 2>&1 | tee "$OUT/nvidia-smi-after.txt" || true

if [ "$DEV" != cpu ]; then
  step "7. gpu/tests/cuda_decode.rs (batched decode steps vs the CPU's F32 logits)"
  # Only when its test binary came along (.gpu-bin/cuda_decode[.xz], built with
  # `cargo test --release -p edgemu-gpu --features cuda --test cuda_decode --no-run`).
  TEST_BIN="$(unpacked "${EDGEMU_CHECK_TEST_BIN:-.gpu-bin/cuda_decode}")"
  if [ -x "$TEST_BIN" ]; then
    run_out "cuda_decode test (batched kernel)" 120 "$OUT/cuda-decode-test.txt" "$TEST_BIN" --nocapture
    EDGEMU_CUDA_BATCHED_ATTENTION=0 run_out "cuda_decode test (per-sequence path)" 120 \
      "$OUT/cuda-decode-test-perseq.txt" "$TEST_BIN" --nocapture
  else
    record "cuda_decode test" "SKIPPED: no test binary at $TEST_BIN(.xz)"
  fi
fi

step "summary ($(( $(date +%s) - t_start )) s)"
{
  printf '%s\n' "${status[@]}"
  cat "$OUT/token-equality.txt" 2>/dev/null
  cat "$OUT/bench-decode.txt" 2>/dev/null
  cat "$OUT/perseq.txt" 2>/dev/null
  cat "$OUT/layouts.txt" 2>/dev/null
  grep -h "^test \|test result" "$OUT"/cuda-decode-test*.txt 2>/dev/null
  [ -s "$OUT/hf-baseline.json" ] && echo "hf: $(cat "$OUT/hf-baseline.json")"
  for f in profile profile-perseq; do
    [ -s "$OUT/$f.json" ] && python3 -c "
import json; p=json.load(open('$OUT/$f.json'))
print('$f:', p['source'], '| prefill', round(p['prefill_tok_s']), 'tok/s | step ms at the first-last context length:', ', '.join(f\"b{c['batch']}: {c['points'][0]['step_s']*1e3:.2f}-{c['points'][-1]['step_s']*1e3:.2f}\" for c in p['decode']))"
  done
} | tee "$OUT/summary.txt"
# The device tool returns at most 8 files: with EDGEMU_CHECK_PACK=1 everything
# but the summary and the log goes into one archive.
if [ "${EDGEMU_CHECK_PACK:-0}" = 1 ]; then
  # The archive is written outside $OUT first: tar refuses a folder that
  # changes while it reads it ("file changed as we read it").
  tgz="$(mktemp -d)/h200-files.tgz"
  (cd "$OUT" && tar czf "$tgz" --exclude summary.txt --exclude log.txt . \
    && find . -maxdepth 1 -type f ! -name summary.txt ! -name log.txt -delete && mv "$tgz" "$OUT/")
fi
