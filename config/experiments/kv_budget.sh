#!/usr/bin/env bash
# The KV-cache budget experiment: the same 16-stream load (kv_budget_16.yaml) through `troupe serve` with one KV
# budget (server_kv_budget.yaml, kv.memory 192MiB) for each cache: f16 (kv.dtype), kv.plugin=int8, kv.plugin=kivi,
# in rounds with the caches alternated (a shared machine's load moves a whole run), then one table: what the
# budget holds (the server's `KV pool` log line), the running sequences and preemptions seen through /metrics, and
# the load's throughput and latencies (per round, and the median over rounds).
#
#   config/experiments/kv_budget.sh --model 110M-q8_0.gguf [--troupe build/troupe] [--out DIR] [--rounds N]
#                                   [--caches "f16 int8 kivi"] [--server-set KEY=VALUE]... [-- BENCH FLAGS]
#
# Everything stays on 127.0.0.1; every wait is bounded.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
troupe="$root/build/troupe"
model="${TROUPE_MODEL:-}"
out=""
rounds=2
caches="f16 int8 kivi"
server_flags=()
bench_flags=()
while [ $# -gt 0 ]; do
    case "$1" in
        --model) model="$2"; shift 2 ;;
        --troupe) troupe="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --caches) caches="$2"; shift 2 ;;
        --server-set) server_flags+=(--set "$2"); shift 2 ;;
        --) shift; bench_flags=("$@"); break ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "kv_budget.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
    esac
done
[ -x "$troupe" ] || { echo "kv_budget.sh: no troupe binary at $troupe (build it, or --troupe PATH)" >&2; exit 1; }
[ -n "$model" ] && [ -f "$model" ] || { echo "kv_budget.sh: no model (--model M.gguf)" >&2; exit 1; }
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
out="${out:-$root/bench-results/kv-budget-$(date -u +%Y%m%d-%H%M%S)}"
mkdir -p "$out"

. "$here/serve_lib.sh"

# run CACHE ROUND
run() {
    local cache="$1" round="$2" name="$1_r$2"
    local cache_flags=()
    [ "$cache" != f16 ] && cache_flags=(--set kv.dtype=f32 --set "kv.plugin=$cache")  # the plugin owns the format
    echo "== $name: troupe serve --config server_kv_budget.yaml ${cache_flags[*]:-}" >&2
    start_server "$out/server-$name.log" --config "$here/server_kv_budget.yaml" --model "$model" \
        ${cache_flags[@]+"${cache_flags[@]}"} ${server_flags[@]+"${server_flags[@]}"} || return 1
    (cd "$root" && "$troupe" bench serve --config "$here/kv_budget_16.yaml" --url "http://127.0.0.1:$port" \
        --set "name=$name" --set "prompt.tokenizer=$model" --out "$out/$name.json" \
        ${bench_flags[@]+"${bench_flags[@]}"}) >"$out/$name.md"
    stop_server
}

for round in $(seq 1 "$rounds"); do
    for cache in $caches; do run "$cache" "$round"; done
done

python3 - "$out" "$caches" "$rounds" <<'PY' | tee "$out/kv_budget.md"
import json, os, re, statistics, sys
out, caches, rounds = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
print("| cache | KV pool (server log) | running seqs mean / max | preemptions | output tok/s | "
      "TTFT p50 / p99 (ms) | ITL p50 / p99 (ms) |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for cache in caches:
    runs = []
    for r in range(1, rounds + 1):
        name = "%s_r%d" % (cache, r)
        path = os.path.join(out, name + ".json")
        if not os.path.exists(path): continue
        j = json.load(open(path))
        pool = ""
        for line in open(os.path.join(out, "server-%s.log" % name), errors="replace"):
            m = re.search(r"KV pool \((.*)", line)
            if m: pool = "KV pool (" + m.group(1).strip()
        g = j["server_gauges_during_run"].get("troupe_requests_running", {})
        pre = j["server_metrics"].get("troupe_preemptions_total", {}).get("delta", 0)
        runs.append(dict(pool=pool, run_mean=g.get("mean", 0), run_max=g.get("max", 0), pre=pre,
                         tps=j["output_throughput"], ttft50=j["ttft_ms"]["median"], ttft99=j["ttft_ms"]["p99"],
                         itl50=j["itl_ms"]["median"], itl99=j["itl_ms"]["p99"], failed=j["failed"]))
    if not runs: continue
    fmt = lambda k, f="%.0f": ", ".join(f % x[k] for x in runs)
    med = lambda k: statistics.median(x[k] for x in runs)
    print("| %s | %s | %s / %s | %s | %s (median %.1f) | %s / %s | %s / %s |" % (
        cache, runs[0]["pool"], fmt("run_mean", "%.1f"), fmt("run_max"), fmt("pre"), fmt("tps", "%.1f"),
        med("tps"), fmt("ttft50"), fmt("ttft99"), fmt("itl50", "%.1f"), fmt("itl99", "%.1f")))
    if any(x["failed"] for x in runs): print("(%s: failed requests: %s)" % (cache, fmt("failed", "%d")))
print("\nper-round values in run order (%d rounds, caches alternated); results: %s" % (rounds, out))
PY
