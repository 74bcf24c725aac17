#!/usr/bin/env bash
# The CUDA backend's checks for a session that has a GPU (CI has none, so there these tests skip):
# configure and build (Release, -j16) with nvcc, run the CUDA tests (test_cuda, with tree verification in
# cuda_tree_test.cpp and the dense architecture families in cuda_arch_test.cpp: qwen2, phi3, gemma2 against
# arch-greedy.json and the CPU graph, plus the soft-capping / window / GeGLU / bias kernels in cuda_kernels_test.cpp;
# test_cuda_quant_plugins: the quant plugins' CUDA kernels vs their CPU path; cuda_lane_order_test.cpp: swaps on the
# KV allocator's copy lane under a running step, ordered by events; cuda_plugin_graph_test.cpp: the CUDA graph calling
# quant/w4a16 on a W4_G128 file this script makes with `troupe quantize`, quant/fp8, and tap observers), bench_cuda_quant
# (GEMV GB/s vs copy), then `troupe bench --device cuda`.
#
#   kernels/cuda/gpu_check.sh            build into build-gpu/ beside this checkout's root
#   BUILD_DIR=... SHARED=... kernels/cuda/gpu_check.sh
#
# Exits non-zero on the first failure; prints what it ran. A GPU test that SKIPS here is a failure of
# this check (the script makes sure a device is visible first), so it reruns ctest with no skips allowed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
shared=${SHARED:-$root/../shared}
jobs=${JOBS:-16}

echo "== GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader || {
    echo "gpu_check: no GPU visible (nvidia-smi failed)" >&2
    exit 2
}
export PATH=/usr/local/cuda/bin:$PATH
nvcc --version | tail -1

echo "== configure + build ($build)"
start=$(date +%s)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTROUPE_CUDA=ON >/dev/null
cmake --build "$build" -j"$jobs" --target troupe_cuda test_cuda test_cuda_quant_plugins bench_cuda_quant troupe
echo "build took $(($(date +%s) - start)) s"
test -f "$build/backends/libtroupe_cuda.so"

echo "== a W4_G128 model for the CUDA graph's plugin calls (troupe quantize, round to nearest)"
w4_model=$build/rand10M-W4_G128.gguf
[ -f "$w4_model" ] || "$build/troupe" quantize --model "$shared/models/rand10M-F16.gguf" --method rtn --type w4_g128 \
    -o "$w4_model"
export TROUPE_W4_G128_MODEL=$w4_model

echo "== test_cuda"
export TROUPE_SHARED_DIR=$shared
export TROUPE_BACKEND_DIR=$build/backends
# Every GPU test must run: a skip on a GPU machine means the backend did not load or data is missing.
# (The one test about machines WITHOUT a GPU skips here by design.)
"$build/tests/cuda/test_cuda" 2>&1 | tee "$build/test_cuda.log"
skipped=$(grep -E '^\[  SKIPPED \] [A-Za-z0-9_/]+\.' "$build/test_cuda.log" | grep -v without_a_gpu || true)
if [ -n "$skipped" ]; then
    echo "gpu_check: CUDA tests skipped on a GPU machine:" >&2
    echo "$skipped" >&2
    exit 1
fi

echo "== test_cuda_quant_plugins (quant/w4a16 and quant/fp8 on CUDA vs their CPU path)"
"$build/tests/cuda/test_cuda_quant_plugins" 2>&1 | tee "$build/test_cuda_quant_plugins.log"
skipped=$(grep -E '^\[  SKIPPED \] [A-Za-z0-9_/]+\.' "$build/test_cuda_quant_plugins.log" || true)
if [ -n "$skipped" ]; then
    echo "gpu_check: quant plugin CUDA tests skipped on a GPU machine:" >&2
    echo "$skipped" >&2
    exit 1
fi

echo "== bench_cuda_quant (GEMV GB/s vs the device's copy bandwidth)"
"$build/tests/cuda/bench_cuda_quant"

if [ -x "$build/troupe" ]; then
    echo "== troupe bench --device cuda"
    for model in stories260K.gguf rand10M-F16.gguf rand10M-Q4_K_M.gguf arch/tiny-qwen2.gguf arch/tiny-phi3.gguf \
        arch/tiny-gemma2.gguf; do
        [ -f "$shared/models/$model" ] || continue
        "$build/troupe" bench --model "$shared/models/$model" --device cuda
        "$build/troupe" bench --model "$shared/models/$model" --device cpu
    done
fi
echo "== gpu_check: all passed"
