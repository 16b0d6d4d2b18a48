#!/usr/bin/env bash
# Builds the codec fuzz targets and runs each one for a few seconds.
#
#   scripts/fuzz-smoke.sh [SECONDS] [TARGET...]
#
# SECONDS defaults to 20 (per target); TARGETs default to every target of
# codec/fuzz. Needs cargo-fuzz (`cargo install cargo-fuzz`). On a stable
# toolchain the sanitizer flags need RUSTC_BOOTSTRAP=1, which this script sets
# unless the active toolchain is nightly. Exits non-zero on the first crash;
# the crashing input is left under codec/fuzz/artifacts/<target>/.
set -euo pipefail

secs="${1:-20}"
shift || true
case "$secs" in
  '' | *[!0-9]*) echo "usage: $0 [SECONDS] [TARGET...]" >&2; exit 2 ;;
esac

cd "$(dirname "$0")/../codec"

if ! cargo fuzz --help >/dev/null 2>&1; then
  echo "cargo-fuzz is not installed: cargo install cargo-fuzz" >&2
  exit 2
fi
if ! rustc --version | grep -q nightly; then
  export RUSTC_BOOTSTRAP=1
fi

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi

cargo fuzz build
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for t in "${targets[@]}"; do
  echo "== fuzz $t for ${secs}s"
  mkdir -p "fuzz/corpus/$t"
  # -rss_limit_mb: a decoder that tries to allocate a hostile length fails here.
  status=0
  cargo fuzz run "$t" "fuzz/corpus/$t" -- \
    -max_total_time="$secs" -rss_limit_mb=1024 -print_final_stats=1 >"$log" 2>&1 || status=$?
  grep -E '^(Done |stat::number_of_executed_units)' "$log" || true
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$log" >&2
    echo "fuzz target $t failed (exit $status)" >&2
    exit 1
  fi
done
echo "fuzz smoke: ${#targets[@]} targets, ${secs}s each, no crash"
