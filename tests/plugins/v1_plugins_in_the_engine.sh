#!/bin/sh
# Version-1 plugins in the whole engine: the fixtures built against the frozen ABI 1 header (attention v1ref,
# quant v1f32 for the F32 weights, spec v1bigram) chosen by path run stories260K; the host loads each as ABI 1,
# the quant plugin reports the products it computed, and the greedy text equals the default engine's.
#
#   v1_plugins_in_the_engine.sh <troupe binary> <fixture dir> <shared dir>
#
# The model is models/stories260K.gguf of $TROUPE_SHARED_DIR, else of <shared dir>. Exit 77 (skipped) when it is
# missing, except in CI (CI=true), where that fails.
set -eu
troupe=$1 fixtures=$2
model="${TROUPE_SHARED_DIR:-$3}/models/stories260K.gguf"
if [ ! -f "$model" ]; then
    echo "model $model not found (set TROUPE_SHARED_DIR to the shared folder)"
    [ "${CI:-}" = true ] && exit 1
    exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/troupe_v1_engine.XXXXXX")
trap 'rm -rf "$work"' EXIT
cat > "$work/v1.yaml" <<YAML
plugins:
  attention: {name: v1ref, path: $fixtures/attention/libtroupe_attention_v1ref.so}
  quant:
    - {name: v1f32, path: $fixtures/quant/libtroupe_quant_v1f32.so}
  spec: {name: v1bigram, path: $fixtures/spec/libtroupe_spec_v1bigram.so}
YAML
run() {
    "$troupe" run --model "$model" --prompt "Once upon a time" --max-tokens 32 --temperature 0 --log-level info "$@"
}
run --config "$work/v1.yaml" > "$work/v1.txt" 2> "$work/v1.log" || { cat "$work/v1.log"; exit 1; }
run > "$work/default.txt" 2> "$work/default.log" || { cat "$work/default.log"; exit 1; }
cat "$work/v1.log"
for kind_name in attention/v1ref quant/v1f32 spec/v1bigram; do
    grep -q "loaded $kind_name 1.0.0 (ABI 1) from $fixtures/" "$work/v1.log" || { echo "$kind_name not loaded as ABI 1"; exit 1; }
done
products=$(sed -n 's/.*plugin quant\/v1f32: [0-9]* weights prepared, \([0-9]*\) products.*/\1/p' "$work/v1.log")
[ -n "$products" ] && [ "$products" -gt 0 ] || { echo "quant/v1f32 computed no product"; exit 1; }
grep -q "troupe run: speculative decoding: [1-9][0-9]* drafted" "$work/v1.log" || { echo "spec/v1bigram never drafted"; exit 1; }
cmp "$work/v1.txt" "$work/default.txt" || { echo "greedy text differs from the default engine's"; exit 1; }
echo "ok: version-1 attention, quant ($products products) and spec plugins ran the model, same greedy text"
