#!/usr/bin/env bash
# Speculative decoding through the server at 1, 4 and 16 concurrent streams (spec_streams.yaml): for each stream
# count, `troupe serve` (server_continuous.yaml) with speculation off, on with the draft controller
# (scheduler.adaptive_draft: true, the default) and always on (adaptive_draft: false), in alternated rounds on a
# fresh server each; the median output tokens/s of each over the rounds (and their range), and each spec mode's
# ratio to off. The figure of issue 9: with the controller, never slower than off by more than 5%.
#
#   config/experiments/spec_serve.sh --model M.gguf --spec ngram [--spec-set KEY=VALUE]... [--troupe build/troupe]
#                                    [--streams "1 4 16"] [--rounds N] [--n-requests N] [--out DIR]
#                                    [--server-set KEY=VALUE]...
#
# --spec       the spec plugin (plugins.spec.name); --spec-set passes plugins.spec.params.KEY=VALUE
# --n-requests requests per run (default: 4 per stream, at least 24)
# --rounds     alternated rounds (default 2); the median of them is reported
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
troupe="$root/build/troupe"
model="${TROUPE_MODEL:-$root/../shared/models/stories260K.gguf}"
spec=ngram
streams="1 4 16"
rounds=2
n_requests=""
out=""
spec_flags=()
server_flags=()
while [ $# -gt 0 ]; do
    case "$1" in
        --model) model="$2"; shift 2 ;;
        --troupe) troupe="$2"; shift 2 ;;
        --spec) spec="$2"; shift 2 ;;
        --spec-set) spec_flags+=(--set "plugins.spec.params.$2"); shift 2 ;;
        --server-set) server_flags+=(--set "$2"); shift 2 ;;
        --streams) streams="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --n-requests) n_requests="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "spec_serve.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
    esac
done
[ -x "$troupe" ] || { echo "spec_serve.sh: no troupe binary at $troupe (build it, or --troupe PATH)" >&2; exit 1; }
[ -f "$model" ] || { echo "spec_serve.sh: no model at $model (--model M.gguf)" >&2; exit 1; }
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
out="${out:-$root/bench-results/spec-$(date -u +%Y%m%d-%H%M%S)}"
mkdir -p "$out"

. "$here/serve_lib.sh"

# run NAME STREAMS SERVER FLAGS...
run() {
    local name="$1" n="$2"
    shift 2
    local requests="${n_requests:-$((n * 4 > 24 ? n * 4 : 24))}"
    echo "== $name" >&2
    start_server "$out/server-$name.log" --config "$here/server_continuous.yaml" --model "$model" \
        ${server_flags[@]+"${server_flags[@]}"} "$@" || return 1
    (cd "$root" && "$troupe" bench serve --config "$here/spec_streams.yaml" --url "http://127.0.0.1:$port" \
        --max-concurrency "$n" --n-requests "$requests" --set "name=$name" --set "prompt.tokenizer=$model" \
        --out "$out/$name.json") >"$out/$name.md"
    stop_server
}

for r in $(seq 1 "$rounds"); do
    for n in $streams; do
        run "off_s${n}_r$r" "$n" --set plugins.spec.name=none
        run "adaptive_s${n}_r$r" "$n" --set "plugins.spec.name=$spec" ${spec_flags[@]+"${spec_flags[@]}"}
        run "always_s${n}_r$r" "$n" --set "plugins.spec.name=$spec" --set scheduler.adaptive_draft=false \
            ${spec_flags[@]+"${spec_flags[@]}"}
    done
done

python3 - "$out" "$model" "$spec" "$streams" "$rounds" <<'PY' | tee "$out/comparison.md"
import json, os, statistics, sys
out, model, spec, streams, rounds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), int(sys.argv[5])
def load(name):
    p = os.path.join(out, name + ".json")
    return json.load(open(p)) if os.path.exists(p) else None
def runs(mode, n):
    return [j for j in (load("%s_s%s_r%d" % (mode, n, r)) for r in range(1, rounds + 1)) if j and j["failed"] == 0]
def tps(js): return [j["output_throughput"] for j in js]
def metric(js, prefix):
    total = 0.0
    for j in js:
        for k, v in j["server_metrics"].items():
            if k.startswith(prefix): total += v["delta"]
    return total
print("\n## Speculation through the server: %s, spec/%s (median of %d alternated rounds, [min, max])\n" %
      (os.path.basename(model), spec, rounds))
print("| streams | off tok/s | adaptive tok/s | adaptive / off | always tok/s | always / off "
      "| adaptive: accepted / drafted | adaptive: decode steps with / without drafts | within 5% (medians) |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |")
for n in streams:
    off, ad, al = runs("off", n), runs("adaptive", n), runs("always", n)
    if not (off and ad and al):
        print("| %s | (missing runs) |||||||" % n)
        continue
    o, a, w = (statistics.median(tps(x)) for x in (off, ad, al))
    cell = lambda x: "%.1f [%.0f, %.0f]" % (statistics.median(tps(x)), min(tps(x)), max(tps(x)))
    on = metric(ad, 'troupe_spec_decode_steps_total{plugin="spec/%s",drafts="on"' % spec)
    offs = metric(ad, 'troupe_spec_decode_steps_total{plugin="spec/%s",drafts="off"' % spec)
    print("| %s | %s | %s | %.3f | %s | %.3f | %d / %d | %d / %d | %s |" % (
        n, cell(off), cell(ad), a / o, cell(al), w / o, metric(ad, "troupe_spec_accepted_tokens_total"),
        metric(ad, "troupe_spec_drafted_tokens_total"), on, offs, "yes" if a >= 0.95 * o else "NO"))
PY
