#!/usr/bin/env bash
# Issue 19's checks on a machine with an NVIDIA GPU, CUDA, CMake, ninja, pybind11 and a CUDA
# PyTorch, but no Debian packages (no gRPC, no cadre program): builds the core and the Python
# extension (CADRE_CORE_ONLY), then runs as 2 ranks sharing the GPU: every collective with CUDA
# tensors, models trained on the GPU (staged, and on the NCCL path with Gloo in NCCL's place), and
# the Fashion-MNIST Horovod example for one epoch. Prints a table; exits 1 when a check failed.
# Takes at most about 10 minutes (each job has its own deadline, see python/tests/gpu_check.py).
#
#   scripts/gpu-check.sh [DATA_DIR]
#
# DATA_DIR holds Fashion-MNIST's four .gz IDX files (default data/fashion-mnist). Nothing can be
# fetched on such machines: copy them into the tree before it travels, e.g.
#   mkdir -p data/fashion-mnist && cp /usr/share/datasets/fashion-mnist/*.gz data/fashion-mnist/
# (data/ is ignored by git: name it among the paths that travel with the tree).
# Environment: PYTHON (python3), BUILD (build-gpu), OUT (where logs go; $BUILD/gpu-check; the
# device tool's $OUT brings them back), GPU_CHECK_DEVICE=sim (a dry run on CPUs, with the
# simulated device: checks this script where no GPU is), GPU_CHECK_CMAKE_ARGS (more cmake
# arguments, e.g. -DCMAKE_DISABLE_FIND_PACKAGE_OpenSSL=ON to build without OpenSSL).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
BUILD=${BUILD:-build-gpu}
DATA=${1:-data/fashion-mnist}
OUT=${OUT:-$BUILD/gpu-check}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
case "$DEVICE" in
  cuda|sim) ;;
  *) echo "gpu-check: GPU_CHECK_DEVICE=$DEVICE: use cuda (the default) or sim" >&2; exit 2 ;;
esac
mkdir -p "$OUT"

for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte \
         t10k-labels-idx1-ubyte; do
  [ -f "$DATA/$f.gz" ] || { echo "gpu-check: $DATA/$f.gz is missing (see the header)" >&2; exit 2; }
done

echo "== machine"
if command -v nvidia-smi > /dev/null; then nvidia-smi -L || true; else echo "(no nvidia-smi)"; fi
# Before the build (minutes): a PyTorch that cannot run the checks is said at once, plainly.
"$PYTHON" - "$DEVICE" <<'PY' || exit 2
import sys
try:
    import torch
except ImportError as e:
    sys.exit("gpu-check: %s has no PyTorch (%s); set PYTHON to the interpreter with a CUDA "
             "PyTorch" % (sys.executable, e))
cuda = torch.cuda.is_available()
print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPUs",
      torch.cuda.device_count() if cuda else 0,
      "NCCL", torch.cuda.nccl.version() if cuda else "-")
if sys.argv[1] == "cuda" and not cuda:
    sys.exit("gpu-check: this PyTorch (%s, CUDA %s) sees no GPU, so nothing can be checked on "
             "one; GPU_CHECK_DEVICE=sim runs the same script on CPUs with the simulated device"
             % (torch.__version__, torch.version.cuda))
PY
command -v cmake ninja nvcc c++ || true

echo "== build (core and Python extension only)"
start=$(date +%s)
# pybind11 from pip knows where its CMake files are; a system one is found by CMake itself.
pybind11_dir=$("$PYTHON" -m pybind11 --cmakedir 2>/dev/null || true)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCADRE_CORE_ONLY=ON \
  -DCADRE_WERROR=OFF -DPython3_EXECUTABLE="$(command -v "$PYTHON")" \
  ${pybind11_dir:+-Dpybind11_DIR="$pybind11_dir"} ${GPU_CHECK_CMAKE_ARGS:-} \
  > "$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; exit 1; }
grep -E "OpenSSL|cadre:" "$OUT/configure.log" || true
cmake --build "$BUILD" -j "$(nproc)" > "$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 1; }
echo "built in $(( $(date +%s) - start )) s"

echo "== checks (logs in $OUT)"
export PYTHONPATH="$PWD/$BUILD/python:$PWD/python:$PWD/python/tests${PYTHONPATH:+:$PYTHONPATH}"
"$PYTHON" python/tests/gpu_check.py --data-dir "$DATA" --ranks 2 --out "$OUT" --device "$DEVICE"
