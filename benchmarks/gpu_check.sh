#!/usr/bin/env bash
# Issue 11's GPU figures beside their targets, on an NVIDIA GPU machine (see ../shared/gpu/README.md).
#
# Run from the repository root, right after the pieces of `prepare-ort-gpu.sh` are in /tmp/pay:
#   source .gpu/d/unpack.sh && bash benchmarks/gpu_check.sh [--runs 5] [--skip-examples]
# CUPTI layer times need cupti-python (+ pyelftools) matching the machine's CUDA 13: put their
# wheels in .gpu/d before packing, and unpack.sh installs them with the rest:
#   python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_17_x86_64 -d .gpu/d "cupti-python==13.0.1" pyelftools
# Prints every figure beside its target, FAIL (or NOT MEASURED) where one falls short; exit 1 then.
# About 5-7 minutes on an H200 (calibration ~1 min, 6 example-suite runs ~50 s each).
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -c "import onnxruntime, pytest_roofline" 2>/dev/null || {
  echo "gpu_check: onnxruntime-gpu and pytest-roofline must import: source .gpu/d/unpack.sh first" >&2
  exit 2
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null || true
export PYTHONUNBUFFERED=1
if [ -n "${OUT:-}" ]; then
  python3 benchmarks/gpu_check.py "$@" 2>&1 | tee "$OUT/gpu_check.txt"
  exit "${PIPESTATUS[0]}"
fi
exec python3 benchmarks/gpu_check.py "$@"
