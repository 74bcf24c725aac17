#!/usr/bin/env bash
# The CUDA backend's checks for a session that has a GPU (CI has none, so there these tests skip):
# configure and build (Release, -j16) with nvcc, run the CUDA tests (test_cuda, with tree verification in
# cuda_tree_test.cpp and the dense architecture families in cuda_arch_test.cpp: qwen2, phi3, gemma2 against
# arch-greedy.json and the CPU graph, plus the soft-capping / window / GeGLU / bias kernels in cuda_kernels_test.cpp;
# test_cuda_quant_plugins: the quant plugins' CUDA kernels vs their CPU path; cuda_lane_order_test.cpp: swaps on the
# KV allocator's copy lane under a running step, ordered by events; cuda_plugin_graph_test.cpp: the CUDA graph calling
# quant/w4a16 on a W4_G128 file this script makes with `troupe quantize`, quant/fp8, and tap observers), bench_cuda_quant
# (GEMV GB/s vs copy), then `troupe bench --device cuda` on the shared models (beside the CPU) and on a 1B file
# `troupe synth` writes (F16 with step graphs on and off, 1/8/32 sequences, decode at depth 1920; W4_G128 through
# quant/w4a16; the mixture-of-experts moe-1B, as mixtral and as deepseek2 with latent attention; cuda_arch_moe: a
# prefill past the step graphs' 128 tokens, its experts grouped, against the CPU graph).
# PROFILE=1 adds ncu's GPU time per kernel for a 1B decode and prefill. QUICK=1 runs the tests and the 1B file's
# default, 8-sequence and depth benches only (a re-check after a fix, in half the device time).
#
#   kernels/cuda/gpu_check.sh            build into build-gpu/ beside this checkout's root
#   BUILD_DIR=... SHARED=... kernels/cuda/gpu_check.sh
#   PREBUILT=1 BUILD_DIR=... ...         use a build made elsewhere (gpu_pack.sh, gpu_device_run.sh): no build here
#   GTEST_FILTER=...                     as GoogleTest reads it (gpu_device_run.sh leaves out cases whose files
#                                        did not travel)
#
# Every section runs even after one fails (a lent GPU's minutes are few: one run should say everything); the
# script exits non-zero if any failed and names them at the end. A GPU test that SKIPS here is a failure (the
# script makes sure a device is visible first).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
shared=${SHARED:-$root/../shared}
jobs=${JOBS:-16}
failed=()
section() { echo; echo "== $*"; }
fail() { failed+=("$1"); echo "gpu_check: FAILED: $1" >&2; }

section "GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap,clocks.max.sm,clocks.max.mem \
    --format=csv,noheader || {
    echo "gpu_check: no GPU visible (nvidia-smi failed)" >&2
    exit 2
}
export PATH=/usr/local/cuda/bin:$PATH
nvcc --version 2>/dev/null | tail -1 || true

if [ -z "${PREBUILT:-}" ]; then
    section "configure + build ($build)"
    start=$(date +%s)
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTROUPE_CUDA=ON >/dev/null &&
        cmake --build "$build" -j"$jobs" --target troupe_cuda test_cuda test_cuda_quant_plugins bench_cuda_quant troupe ||
        { echo "gpu_check: build failed" >&2; exit 1; }
    echo "build took $(($(date +%s) - start)) s"
fi
test -f "$build/backends/libtroupe_cuda.so" || { echo "gpu_check: no $build/backends/libtroupe_cuda.so" >&2; exit 1; }

export TROUPE_SHARED_DIR=$shared
export TROUPE_BACKEND_DIR=$build/backends
export TROUPE_PLUGIN_DIR=$build/plugins
work=${WORK_DIR:-$build}

section "a W4_G128 model for the CUDA graph's plugin calls (troupe quantize, round to nearest)"
w4_model=$work/rand10M-W4_G128.gguf
if [ -f "$w4_model" ] || "$build/troupe" quantize --model "$shared/models/rand10M-F16.gguf" --method rtn \
    --type w4_g128 -o "$w4_model"; then
    export TROUPE_W4_G128_MODEL=$w4_model
else
    fail "troupe quantize (W4_G128)"
fi

# run_gtest NAME: runs a test binary one test suite per process (each timed out after 4 minutes), so that a kernel's
# illegal address, which poisons its CUDA context for good, fails its own suite and not every one after it; a failure
# or a skip fails the section. GTEST_FILTER's negative part (after '-') applies to every suite.
run_gtest() {
    local name=$1 log=$work/$1.log bin=$build/tests/cuda/$1
    section "$name"
    : >"$log"
    local neg=""
    [[ "${GTEST_FILTER:-}" == *-* ]] && neg=${GTEST_FILTER#*-}
    local suites suite filter
    suites=$("$bin" --gtest_list_tests | grep -E '^[A-Za-z0-9_/]+\.' | cut -d' ' -f1)
    [ -n "$suites" ] || { fail "$name (lists no tests)"; return; }
    for suite in $suites; do
        filter="${suite}*"
        [ -n "$neg" ] && filter="$filter-$neg"
        timeout 240 "$bin" --gtest_filter="$filter" 2>&1 | tee -a "$log"
        [ "${PIPESTATUS[0]}" -eq 0 ] || fail "$name $suite"
    done
    # (The tests about machines WITHOUT a GPU skip here by design.)
    local skipped
    skipped=$(grep -E '^\[  SKIPPED \] [A-Za-z0-9_/]+\.' "$log" | grep -v without_a_gpu || true)
    if [ -n "$skipped" ]; then
        echo "gpu_check: tests skipped on a GPU machine:" >&2
        echo "$skipped" >&2
        fail "$name (skips)"
    fi
}
run_gtest test_cuda
run_gtest test_cuda_quant_plugins

quick=${QUICK:-}
if [ -z "$quick" ]; then
    section "bench_cuda_quant (GEMV GB/s vs the device's copy bandwidth)"
    timeout 120 "$build/tests/cuda/bench_cuda_quant" || fail bench_cuda_quant
fi

bench() {  # bench MODEL DEVICE [flags]: one troupe bench, a failure noted
    local model=$1 device=$2
    shift 2
    echo "-- troupe bench $(basename "$model") --device $device $*"
    timeout 120 "$build/troupe" bench --model "$model" --device "$device" "$@" || fail "bench $(basename "$model") $device"
}
[ -z "$quick" ] && section "troupe bench --device cuda (shared models, beside the CPU)"
for model in stories260K.gguf rand10M-F16.gguf rand10M-Q4_K_M.gguf arch/tiny-qwen2.gguf arch/tiny-phi3.gguf \
    arch/tiny-gemma2.gguf arch/tiny-mixtral.gguf; do
    [ -z "$quick" ] && [ -f "$shared/models/$model" ] || continue
    bench "$shared/models/$model" cuda
    bench "$shared/models/$model" cpu --reps 1
done

section "troupe bench --device cuda on a 1B file (troupe synth, llama vocabulary), graphs on (default) and off"
vocab=$shared/vocab/ggml-vocab-llama-spm.gguf
f16=$work/synth-1B-f16.gguf
if [ -f "$f16" ] || "$build/troupe" synth --shape 1B --vocab "$vocab" --type f16 -o "$f16" >/dev/null; then
    bench "$f16" cuda --n-prompt 512 --n-gen 128
    if [ -z "$quick" ]; then
        echo "(step graphs off:)"
        TROUPE_CUDA_GRAPHS=0 bench "$f16" cuda --n-prompt 512 --n-gen 128
        echo "(decode's products by cuBLASLt, not launch_gemv:)"
        TROUPE_CUDA_GEMV=0 bench "$f16" cuda --n-prompt 512 --n-gen 128
    fi
    bench "$f16" cuda --n-prompt 512 --n-gen 128 --n-seqs 8
    [ -z "$quick" ] && bench "$f16" cuda --n-prompt 512 --n-gen 128 --n-seqs 32
    echo "(decode at depth: context 1920..1983, against 0..63 in the same run)"
    bench "$f16" cuda --n-prompt 1920 --n-gen 64 --decode-after-prompt --compare-depth 64
    w4=$work/synth-1B-W4_G128.gguf
    if [ -n "$quick" ]; then
        :
    elif [ -f "$w4" ] || "$build/troupe" quantize --model "$f16" --method rtn --type w4_g128 -o "$w4" >/dev/null; then
        bench "$w4" cuda --n-prompt 512 --n-gen 128
    else
        fail "quantize 1B W4_G128"
    fi
    moe=$work/synth-moe-1B-f16.gguf
    if [ -n "$quick" ]; then
        :
    elif [ -f "$moe" ] || "$build/troupe" synth --shape moe-1B --vocab "$vocab" --type f16 -o "$moe" >/dev/null; then
        echo "(mixture of experts: moe-1B, top 2 of 8, decode reads the selected experts only)"
        bench "$moe" cuda --n-prompt 512 --n-gen 128
    else
        fail "synth moe-1B f16"
    fi
    mla=$work/synth-moe-1B-deepseek2-f16.gguf
    if [ -n "$quick" ]; then
        :
    elif [ -f "$mla" ] || "$build/troupe" synth --shape moe-1B --arch deepseek2 --vocab "$vocab" --type f16 -o "$mla" >/dev/null; then
        echo "(deepseek2: multi-head latent attention with q LoRA, a leading dense layer, experts with a shared one)"
        bench "$mla" cuda --n-prompt 512 --n-gen 128
        bench "$mla" cuda --n-prompt 1920 --n-gen 64 --decode-after-prompt --compare-depth 64
    else
        fail "synth moe-1B deepseek2 f16"
    fi
    if [ -n "${PROFILE:-}" ] && command -v ncu >/dev/null; then
        section "ncu: GPU time per kernel, 1B F16 decode (1-token prompt, 4 steps) and a 512-token prefill"
        timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel --launch-count 3000 \
            "$build/troupe" bench --model "$f16" --device cuda --n-prompt 1 --n-gen 4 --reps 1 2>&1 |
            grep -vE "^troupe: |^==PROF==|^    -|Metric Name|Section: |^$|Note: |metrics for each|If aggregating|mean can be" | tail -90 || fail "ncu decode"
        timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel --launch-count 800 \
            "$build/troupe" bench --model "$f16" --device cuda --n-prompt 512 --n-gen 1 --reps 1 2>&1 |
            grep -vE "^troupe: |^==PROF==|^    -|Metric Name|Section: |^$|Note: |metrics for each|If aggregating|mean can be" | tail -90 || fail "ncu prefill"
        limits=sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed
        limits=$limits,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed
        limits=$limits,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
        limits=$limits,launch__registers_per_thread
        section "ncu: what limits the quant plugins' decode GEMV (bench_cuda_quant's first launches: w4a16, 1 token)"
        timeout 100 ncu --clock-control none --kernel-name regex:gemv_kernel --launch-count 2 --metrics "$limits" \
            "$build/tests/cuda/bench_cuda_quant" 2>&1 | grep -E "gemv_kernel|pct|registers" | head -24 || fail "ncu quant gemv"
        section "ncu: what limits the backend's F16 decode GEMVs (1B, one decode step's first layers)"
        timeout 100 ncu --clock-control none --kernel-name regex:gemv_kernel --launch-skip 20 --launch-count 6 \
            --metrics "$limits" "$build/troupe" bench --model "$f16" --device cuda --n-prompt 1 --n-gen 2 --reps 1 2>&1 |
            grep -E "gemv_kernel|pct|registers" | head -48 || fail "ncu f16 gemv"
    fi
else
    fail "synth 1B f16"
fi

echo
if [ ${#failed[@]} -gt 0 ]; then
    echo "== gpu_check: ${#failed[@]} failed:"
    printf '   %s\n' "${failed[@]}"
    exit 1
fi
echo "== gpu_check: all passed"
