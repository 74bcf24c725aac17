#!/usr/bin/env bash
# Runs on a lent GPU machine over the working tree and the .devrun/pack.tgz gpu_pack.sh made (carried there):
# puts the build where its compiled-in paths point (/work/main/build when this checkout was /work/main), makes the
# carried yaml-cpp (and libstdc++ where the image's is older) findable, and runs gpu_check.sh with PREBUILT=1,
# its log under $OUT when the device tool sets it.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
pack=$root/.devrun
[ -f "$pack/pack.tgz" ] || { echo "gpu_device_run: no $pack/pack.tgz (run kernels/cuda/gpu_pack.sh, carry .devrun/pack.tgz)" >&2; exit 2; }
tar -C "$pack" -xzf "$pack/pack.tgz" || exit 2
[ -e "$root/build" ] || ln -s "$pack/build" "$root/build"
origin=${TROUPE_ORIGIN:-/work/main}  # the checkout the build was made in
if [ "$root" != "$origin" ] && [ ! -e "$origin" ]; then
    mkdir -p "$(dirname "$origin")" && ln -s "$root" "$origin"
fi
export LD_LIBRARY_PATH=$pack/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ! "$pack/build/troupe" --help >/dev/null 2>&1; then
    echo "gpu_device_run: troupe does not start with the image's libraries; adding the carried libstdc++"
    export LD_LIBRARY_PATH=$pack/lib-fallback:$LD_LIBRARY_PATH
    "$pack/build/troupe" --help >/dev/null || { ldd "$pack/build/troupe"; exit 2; }
fi
# The rand10M quantized files stay behind (gpu_pack.sh): their model cases are left out.
export GTEST_FILTER=${GTEST_FILTER:--*rand10M_Q*}
log=${OUT:-/tmp}/gpu_check.log
echo "gpu_device_run: log $log; GTEST_FILTER=$GTEST_FILTER"
PREBUILT=1 PROFILE=${PROFILE:-} BUILD_DIR=$pack/build SHARED=$pack/shared WORK_DIR=/tmp \
    "$root/kernels/cuda/gpu_check.sh" 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
