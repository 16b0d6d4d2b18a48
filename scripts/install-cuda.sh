#!/usr/bin/env bash
# Installs what `cargo build --features cuda` needs on a machine WITHOUT a GPU or
# a system CUDA toolkit, from PyPI, into a cache folder, and prints the
# environment to export:
#
#   eval "$(scripts/install-cuda.sh)"      # or: scripts/install-cuda.sh --env-file F
#   cargo build --release -p edgemu-nodes --features cuda
#
# What it installs (CUDA 13.0, the version of the H200 machines' driver 580:
# PTX from a newer nvcc would not load there):
#   nvidia-cuda-nvcc     nvcc, ptxas, fatbinary, nvlink
#   nvidia-nvvm          cicc and libdevice (nvcc's device front end)
#   nvidia-cuda-crt      crt/ headers nvcc includes
#   nvidia-cuda-runtime  CUDA runtime headers and libcudart.so (candle-kernels links it)
#   nvidia-cuda-cccl     <cuda/std/...> headers (candle's kernels include them)
# The wheels are unpacked (not pip-installed) into one tree laid out like a
# toolkit: $ROOT/{bin,nvvm,include,lib64}.
#
# Link stubs. candle's cudarc links dynamically against libcuda (the driver),
# libnvrtc, libcurand, libcublas and libcublasLt. Their PyPI wheels weigh
# ~700 MB and the driver library is not on PyPI at all, so — like the toolkit's
# own lib64/stubs/libcuda.so — this script writes stub shared libraries with the
# real SONAMEs (libcuda.so.1, libnvrtc.so.13, libcurand.so.10, libcublas.so.13,
# libcublasLt.so.13) that define every symbol cudarc declares (read from its
# sources). They only satisfy the linker: at run time the binary loads the real
# libraries of the GPU machine (driver + CUDA 13 libraries, see
# scripts/h200-check.sh for how it finds them).
#
# Options / environment:
#   EDGEMU_CUDA_DIR   cache folder (default cuda/ in edgemu's cache directory:
#                     $EDGEMU_CACHE_DIR, else $XDG_CACHE_HOME/edgemu, else ~/.cache/edgemu)
#   CUDA_COMPUTE_CAP  compute capability to build kernels for (default 90 = H100/H200)
#   --env-file F      also write the exports to F
# Idempotent: a second run only prints the environment (< 1 s).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CUDA_VER=13.0
NVCC_VER=13.0.88
NVVM_VER=13.0.88
CRT_VER=13.0.88
RUNTIME_VER=13.0.96
CCCL_VER=13.0.85
CUDARC_CUDA_VERSION=13000
COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"

env_file=""
while [ $# -gt 0 ]; do
  case "$1" in
    --env-file) env_file="$2"; shift 2 ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    *) echo "install-cuda.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

CACHE="${EDGEMU_CUDA_DIR:-${EDGEMU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/edgemu}/cuda}"
ROOT="$CACHE/cuda-$CUDA_VER"
STAMP="$ROOT/.complete-$NVCC_VER-$RUNTIME_VER-$CCCL_VER-stubs2"
log() { echo "install-cuda: $*" >&2; }

need() { command -v "$1" >/dev/null 2>&1 || { log "needs \`$1\` on PATH"; exit 1; }; }

if [ ! -f "$STAMP" ]; then
  need python3; need unzip; need cc; need cargo
  mkdir -p "$CACHE/wheels"
  log "downloading CUDA $CUDA_VER wheels from PyPI into $CACHE/wheels"
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_27_x86_64 \
    --python-version 3.11 --implementation py \
    -d "$CACHE/wheels" \
    "nvidia-cuda-nvcc==$NVCC_VER" "nvidia-nvvm==$NVVM_VER" "nvidia-cuda-crt==$CRT_VER" \
    "nvidia-cuda-runtime==$RUNTIME_VER" "nvidia-cuda-cccl==$CCCL_VER" >&2
  tmp="$ROOT.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp/unpack"
  for spec in "nvidia_cuda_nvcc-$NVCC_VER" "nvidia_nvvm-$NVVM_VER" "nvidia_cuda_crt-$CRT_VER" \
              "nvidia_cuda_runtime-$RUNTIME_VER" "nvidia_cuda_cccl-$CCCL_VER"; do
    whl=$(ls "$CACHE/wheels/$spec"-*.whl | head -n1)
    unzip -q -o "$whl" 'nvidia/*' -d "$tmp/unpack"
  done
  mv "$tmp/unpack/nvidia/cu13" "$tmp/root"
  rm -rf "$tmp/unpack"
  r="$tmp/root"
  chmod +x "$r"/bin/* "$r"/nvvm/bin/* 2>/dev/null || true
  # Toolkit layout: lib64 with unversioned names for the linker.
  mkdir -p "$r/lib"
  ln -sfn lib "$r/lib64"
  for so in "$r"/lib/*.so.*; do
    [ -e "$so" ] || continue
    base=$(basename "$so"); ln -sfn "$base" "$r/lib/${base%%.so.*}.so"
  done
  # Link stubs from cudarc's own declarations (the symbols it may reference).
  cudarc_ver=$(awk '/^name = "cudarc"/{getline; gsub(/[" ]/,""); sub("version=",""); print; exit}' Cargo.lock)
  [ -n "$cudarc_ver" ] || { log "cudarc is not in Cargo.lock"; exit 1; }
  cargo fetch --quiet >&2 || true
  src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"cudarc-$cudarc_ver"/src 2>/dev/null | head -n1)
  [ -d "$src" ] || { log "cudarc $cudarc_ver sources not found (cargo fetch failed?)"; exit 1; }
  mkdir -p "$r/lib/stubs"
  for spec in "cuda:libcuda.so.1:driver" "nvrtc:libnvrtc.so.13:nvrtc" "curand:libcurand.so.10:curand" \
              "cublas:libcublas.so.13:cublas" "cublasLt:libcublasLt.so.13:cublaslt"; do
    IFS=: read -r name soname dir <<<"$spec"
    c="$tmp/$name.c"
    echo "/* link stub for $soname: symbols from cudarc $cudarc_ver src/$dir/sys */" >"$c"
    grep -ohE 'load::<_F>\("[A-Za-z0-9_]+"\)' "$src/$dir/sys/"*.rs | sed -E 's/.*"(.*)".*/void \1(void) {}/' | sort -u >>"$c"
    cc -shared -fPIC -O0 -Wl,-soname,"$soname" -o "$r/lib/stubs/lib$name.so" "$c"
  done
  touch "$r/.complete-$NVCC_VER-$RUNTIME_VER-$CCCL_VER-stubs2"
  rm -rf "$ROOT"
  mv "$r" "$ROOT"
  rm -rf "$tmp"
  log "installed into $ROOT ($(du -sh "$ROOT" | cut -f1))"
fi

"$ROOT/bin/nvcc" --version >/dev/null || { log "$ROOT/bin/nvcc does not run"; exit 1; }
exports=$(cat <<EOF
export CUDA_ROOT="$ROOT"
export CUDA_PATH="$ROOT"
export CUDA_HOME="$ROOT"
export NVCC="$ROOT/bin/nvcc"
export PATH="$ROOT/bin:$ROOT/nvvm/bin:\$PATH"
export CUDA_COMPUTE_CAP=$COMPUTE_CAP
export CUDARC_CUDA_VERSION=$CUDARC_CUDA_VERSION
export LIBRARY_PATH="$ROOT/lib64:$ROOT/lib64/stubs\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
EOF
)
[ -n "$env_file" ] && printf '%s\n' "$exports" >"$env_file"
printf '%s\n' "$exports"
