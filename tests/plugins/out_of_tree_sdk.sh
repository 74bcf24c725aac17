#!/bin/sh
# An out-of-tree author's path, end to end: install the SDK from troupe's build, configure and build the example
# plugin plugins/examples/repeat as a separate CMake project against it (find_package(troupe)), check that it
# exports only the entry point, then run troupe with it chosen in YAML by `path:` and check that the host loaded it
# (ABI, path), that it ran (its own log lines through the host) and that the greedy text is the same as without it
# (the core verifies every draft).
#
#   out_of_tree_sdk.sh <troupe build dir> <source dir> <C compiler> <troupe binary> <shared dir>
#
# The model is models/stories260K.gguf of $TROUPE_SHARED_DIR, else of <shared dir>. Exit 77 (skipped) when it is
# missing, except in CI (CI=true), where that fails.
set -eu
build=$1 src=$2 cc=$3 troupe=$4
model="${TROUPE_SHARED_DIR:-$5}/models/stories260K.gguf"
if [ ! -f "$model" ]; then
    echo "model $model not found (set TROUPE_SHARED_DIR to the shared folder)"
    [ "${CI:-}" = true ] && exit 1
    exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/troupe_out_of_tree.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== install the SDK to $work/prefix"
cmake --install "$build" --prefix "$work/prefix" --component sdk > "$work/install.log"
for f in include/troupe/plugin.h include/troupe/types.h include/troupe/tensors.h lib/cmake/troupe/troupeConfig.cmake \
         lib/cmake/troupe/troupeConfigVersion.cmake lib/cmake/troupe/troupe_plugin.cmake; do
    [ -f "$work/prefix/$f" ] || { echo "missing after install: $f"; exit 1; }
done

echo "== configure and build plugins/examples/repeat against it"
cmake -S "$src/plugins/examples/repeat" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_C_COMPILER="$cc" \
      -DCMAKE_BUILD_TYPE=Release > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" -j2 > "$work/build.log" || { cat "$work/build.log"; exit 1; }
lib="$work/build/spec/libtroupe_spec_repeat.so"
[ -f "$lib" ] || { echo "no $lib"; cat "$work/build.log"; exit 1; }
exports=$(nm -D --defined-only "$lib" | awk '{print $3}' | tr '\n' ' ')
[ "$exports" = "troupe_plugin_query " ] || { echo "exports: $exports (expected only troupe_plugin_query)"; exit 1; }

echo "== run troupe with it chosen by path"
cat > "$work/repeat.yaml" <<YAML
plugins:
  spec:
    name: repeat
    path: $lib
    params: {max_period: 8}
YAML
prompt="the cat the cat the cat the cat"  # ends in a repeat: the plugin drafts at once
"$troupe" run --config "$work/repeat.yaml" --model "$model" --prompt "$prompt" --max-tokens 24 --temperature 0 \
    --log-level info > "$work/with.txt" 2> "$work/with.log" || { cat "$work/with.log"; exit 1; }
"$troupe" run --model "$model" --prompt "$prompt" --max-tokens 24 --temperature 0 \
    > "$work/without.txt" 2> "$work/without.log" || { cat "$work/without.log"; exit 1; }
cat "$work/with.log"
expect() {
    grep -q -- "$1" "$work/with.log" || { echo "expected in the log: $1"; exit 1; }
}
expect "loaded spec/repeat 1.0.0 (ABI 2) from $lib"
expect "plugin spec/repeat: repeats patterns of up to 8 tokens (built out of tree, ABI 2)"
calls=$(sed -n 's/.*plugin spec\/repeat: \([0-9]*\) propose calls, \([0-9]*\) with a draft.*/\1/p' "$work/with.log")
drafts=$(sed -n 's/.*plugin spec\/repeat: \([0-9]*\) propose calls, \([0-9]*\) with a draft.*/\2/p' "$work/with.log")
[ -n "$calls" ] && [ "$calls" -gt 0 ] || { echo "the plugin was never asked for a draft"; exit 1; }
[ -n "$drafts" ] && [ "$drafts" -gt 0 ] || { echo "the plugin never drafted, though the prompt ends in a repeat"; exit 1; }
expect "troupe run: speculative decoding: [1-9][0-9]* drafted"
cmp "$work/with.txt" "$work/without.txt" || { echo "greedy text differs with the plugin"; exit 1; }
echo "ok: built out of tree, loaded by path, $calls propose calls ($drafts with a draft), same greedy text"
