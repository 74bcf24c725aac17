#!/usr/bin/env bash
# Packs a build made on this machine (with nvcc, Boost, yaml-cpp and GoogleTest) for a GPU machine that has the
# CUDA toolkit and driver but none of the build's other dependencies: the lent device machines. What travels to
# such a machine is capped (64 MiB with the working tree), so this copies stripped binaries, the plugins, the
# backends, the one shared library they need beyond glibc/libstdc++/CUDA (yaml-cpp), and the part of ../shared
# that the GPU checks read into .devrun/, archived as .devrun/pack.tgz (both ignored by git; carry .devrun/pack.tgz).
# There, gpu_device_run.sh unpacks it and runs gpu_check.sh with PREBUILT=1:
#
#   kernels/cuda/gpu_pack.sh                         here, after building build/ (Release, nvcc found)
#   (device) kernels/cuda/gpu_device_run.sh          links build/ and the compiled-in paths, runs gpu_check.sh
#
# The rand10M quantized files (60 MB) do not fit beside the rest: gpu_device_run.sh leaves their CUDA cases out
# (they dequantize to F32 on the host, the path stories260K's quantized files also take, which runs).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
shared=${SHARED:-$root/../shared}
out=$root/.devrun

rm -rf "$out"
stage=$out/stage
mkdir -p "$stage"
out=$stage
mkdir -p "$out/build/tests/cuda" "$out/lib" "$out/shared/models/arch" "$out/shared/golden" "$out/shared/vocab"
strip_copy() {  # strip_copy SRC DEST: the binary without its symbols (the debug info is most of its size)
    mkdir -p "$(dirname "$2")"
    cp "$1" "$2"
    strip --strip-unneeded "$2"
}
strip_copy "$build/troupe" "$out/build/troupe"
for t in test_cuda test_cuda_quant_plugins bench_cuda_quant; do
    strip_copy "$build/tests/cuda/$t" "$out/build/tests/cuda/$t"
done
for so in $(cd "$build" && find backends plugins tests/cuda/fake_backend_* -name '*.so'); do
    strip_copy "$build/$so" "$out/build/$so"
done
for lib in $(ldd "$build/troupe" "$build/tests/cuda/test_cuda" | awk '/yaml-cpp/ {print $3}' | sort -u); do
    cp -L "$lib" "$out/lib/"
done
# libstdc++ as a fallback for an image whose own is older than the one this build needs (used only then).
mkdir -p "$out/lib-fallback"
cp -L "$(g++ -print-file-name=libstdc++.so.6)" "$out/lib-fallback/"

cp "$shared"/models/stories260K*.gguf "$shared/models/rand10M-F16.gguf" "$out/shared/models/"
# The architectures the CUDA graph runs (cuda_arch_test.cpp) and two it refuses (cuda_host_test.cpp).
cp "$shared"/models/arch/tiny-{qwen2,phi3,gemma2,deepseek2,mixtral}.gguf "$out/shared/models/arch/"
cp "$shared"/golden/*.json "$out/shared/golden/"
cp "$shared/vocab/ggml-vocab-llama-spm.gguf" "$out/shared/vocab/"
tar -C "$stage" -cf - . | gzip -6 >"$root/.devrun/pack.tgz"
rm -rf "$stage"
ls -la "$root/.devrun/pack.tgz"
