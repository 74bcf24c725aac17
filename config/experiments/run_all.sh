#!/usr/bin/env bash
# The serving experiments: for each (server config, load) pair, start `troupe serve` on a free loopback port,
# wait for /health, run the load with `troupe bench serve`, stop the server; then print the comparison of
# the figures the serving issue asks for, with their ratios.
#
#   config/experiments/run_all.sh [--model M.gguf] [--troupe build/troupe] [--out DIR] [--quick]
#                                 [--only RUN,RUN] [--capacity-rates "R R ..."] [--server-set KEY=VALUE]...
#                                 [-- BENCH FLAGS]
#
# --model      the GGUF to serve (default $TROUPE_MODEL, else ../shared/models/stories260K.gguf)
# --quick      8 requests per load instead of each file's n_requests
# --only       some of the runs: single_stream, concurrent_16, mixed_continuous, mixed_static,
#              longtail_continuous, longtail_static, shared_prefix, shared_prefix_nocache, capacity (the
#              sweep below) (the comparison shows the figures whose runs are there)
# --capacity-rates  arrival rates (requests/s) of the capacity sweep (capacity.yaml, open-loop Poisson, both
#              policies; default "0.5 1 2 3 4 6 8"): the comparison gives each policy's best output throughput among
#              the rates where its p99 TTFT stays within the load's slo.ttft_ms
# --server-set passed to every `troupe serve` as --set (e.g. threads=1)
# BENCH FLAGS  passed to every `troupe bench serve`, e.g. -- --set output.max_tokens=64
#              (prompts are cut with the served model's own tokenizer: --set prompt.tokenizer=MODEL is added)
# Everything stays on 127.0.0.1; every wait is bounded.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
troupe="$root/build/troupe"
model="${TROUPE_MODEL:-$root/../shared/models/stories260K.gguf}"
out=""
quick=0
only=""
capacity_rates="0.5 1 2 3 4 6 8"
server_flags=()
bench_flags=()
while [ $# -gt 0 ]; do
    case "$1" in
        --model) model="$2"; shift 2 ;;
        --troupe) troupe="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --quick) quick=1; shift ;;
        --only) only=",$2,"; shift 2 ;;
        --capacity-rates) capacity_rates="$2"; shift 2 ;;
        --server-set) server_flags+=(--set "$2"); shift 2 ;;
        --) shift; bench_flags=("$@"); break ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        *) echo "run_all.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
    esac
done
[ -x "$troupe" ] || { echo "run_all.sh: no troupe binary at $troupe (build it, or --troupe PATH)" >&2; exit 1; }
[ -f "$model" ] || { echo "run_all.sh: no model at $model (--model M.gguf)" >&2; exit 1; }
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
out="${out:-$root/bench-results/$(date -u +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
[ "$quick" = 1 ] && bench_flags+=(--n-requests 8)
bench_flags+=(--set "prompt.tokenizer=$model")

. "$here/serve_lib.sh"

# run SERVER_CONFIG LOAD_CONFIG RESULT_NAME [BENCH FLAGS of this run]
# (--only capacity selects every run of the capacity sweep, capacity_*)
run() {
    local server_name="$1" load_name="$2" name="$3"
    local server_cfg="$here/$1.yaml" load_cfg="$here/$2.yaml"
    shift 3
    if [ -n "$only" ] && [[ "$only" != *",$name,"* ]] && ! [[ "$name" == capacity_* && "$only" == *",capacity,"* ]]; then
        return 0
    fi
    echo "== $name: troupe serve --config ${server_name}.yaml, load ${load_name}.yaml" >&2
    start_server "$out/server-$name.log" --config "$server_cfg" --model "$model" \
        ${server_flags[@]+"${server_flags[@]}"} || return 1
    (cd "$root" && "$troupe" bench serve --config "$load_cfg" --url "http://127.0.0.1:$port" \
        --set "name=$name" --out "$out/$name.json" "${bench_flags[@]}" "$@") | tee "$out/$name.md"
    stop_server
}

run server_continuous single_stream single_stream
run server_continuous concurrent_16 concurrent_16
run server_continuous mixed_continuous mixed_continuous
run server_static mixed_static mixed_static
run server_continuous longtail_continuous longtail_continuous
run server_static longtail_static longtail_static
run server_continuous shared_prefix shared_prefix
# The capacity sweep: open-loop Poisson arrivals at each rate, both policies. Requests grow with the rate (12 s of
# arrivals, at least capacity.yaml's n_requests): with a fixed 32, a fast rate's run is mostly the tail of its
# longest outputs, which caps the output throughput it can show however well the server keeps up.
for rate in $capacity_rates; do
    sized=()
    if [ "$quick" != 1 ]; then
        sized=(--set "n_requests=$(awk -v r="$rate" 'BEGIN { n = int(12 * r + 0.5); print (n < 32 ? 32 : n) }')")
    fi
    run server_continuous capacity "capacity_continuous_r$rate" --set "arrivals.rate_per_s=$rate" ${sized[@]+"${sized[@]}"}
    run server_static capacity "capacity_static_r$rate" --set "arrivals.rate_per_s=$rate" ${sized[@]+"${sized[@]}"}
done
run server_no_prefix_cache shared_prefix shared_prefix_nocache

python3 - "$out" "$model" <<'PY' | tee "$out/comparison.md"
import json, os, sys
out, model = sys.argv[1], sys.argv[2]
names = ["single_stream", "concurrent_16", "mixed_continuous", "mixed_static", "longtail_continuous",
         "longtail_static", "shared_prefix", "shared_prefix_nocache"]
names += sorted((f[:-5] for f in os.listdir(out) if f.startswith("capacity_") and f.endswith(".json")),
                key=lambda n: (n.split("_r")[0], float(n.split("_r")[-1])))
r = {n: json.load(open(os.path.join(out, n + ".json"))) for n in names if os.path.exists(os.path.join(out, n + ".json"))}
have = lambda *ns: all(n in r for n in ns)
def pct(x): return "%.1f%%" % (100 * x)
print("\n## Serving comparison: %s\n" % os.path.basename(model))
print("| run | completed/failed | req/s | output tok/s | TTFT median / p99 (ms) | TPOT median (ms) | ITL p99 (ms) "
      "| engine steps | ms per step | mean batch |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for n, j in r.items():
    steps = j["server_metrics"].get("troupe_steps_total", {}).get("delta", 0)
    batch = j["server_gauges_during_run"].get("troupe_batch_size", {}).get("mean", 0)
    print("| %s | %d/%d | %.2f | %.1f | %.1f / %.1f | %.1f | %.1f | %d | %s | %.1f |" % (
        n, j["completed"], j["failed"], j["request_throughput"], j["output_throughput"], j["ttft_ms"]["median"],
        j["ttft_ms"]["p99"], j["tpot_ms"]["median"], j["itl_ms"]["p99"], steps,
        "%.1f" % (1e3 * j["duration_s"] / steps) if steps else "-", batch))
print("\n| figure | measured | target | met |\n| --- | ---: | ---: | :---: |")
def row(name, value, target, ok): print("| %s | %s | %s | %s |" % (name, value, target, "yes" if ok else "NO"))
if have("concurrent_16", "single_stream"):
  c = r["concurrent_16"]["output_throughput"] / max(r["single_stream"]["output_throughput"], 1e-9)
  row("16 streams / 1 stream, output tokens/s", "%.2fx (%.1f / %.1f)" % (
      c, r["concurrent_16"]["output_throughput"], r["single_stream"]["output_throughput"]), ">= 4x", c >= 4)
for load, what in [("mixed", "mixed lengths"), ("longtail", "long-tailed outputs")]:
  cont, stat = load + "_continuous", load + "_static"
  if not have(cont, stat): continue
  b = r[cont]["output_throughput"] / max(r[stat]["output_throughput"], 1e-9)
  row("continuous / static batching, output tokens/s (%s)" % what, "%.2fx (%.1f / %.1f)" % (
      b, r[cont]["output_throughput"], r[stat]["output_throughput"]), ">= 2x", b >= 2)
  t_c, t_s = r[cont]["ttft_ms"]["p99"], r[stat]["ttft_ms"]["p99"]
  row("  p99 TTFT continuous vs static (ms)", "%.0f vs %.0f" % (t_c, t_s), "continuous <= static", t_c <= t_s)
for n in [n for n in ["concurrent_16", "mixed_continuous"] if n in r]:
    w = r[n]["kv_waste"]
    if w["available"]:
        row("KV waste, %s (%s, %d polls)" % (n, w["source"], w["n_samples"]), "mean %s, max %s" % (
            pct(w["mean"]), pct(w["max"])), "< 5%", w["mean"] < 0.05)
    else:
        row("KV waste, %s" % n, "not measured (no /metrics polls)", "< 5%", False)
# Capacity at equal p99 TTFT: per policy, the best output throughput of a sweep run whose p99 TTFT is within
# the load's slo.ttft_ms (the same bound for both).
cap = {}
for policy in ["continuous", "static"]:
    runs = [j for n, j in r.items() if n.startswith("capacity_%s_r" % policy)]
    if not runs: continue
    bound = runs[0]["slo"]["ttft_ms"]
    ok = [j for j in runs if j["failed"] == 0 and j["ttft_ms"]["p99"] <= bound]
    best = max(ok, key=lambda j: j["output_throughput"]) if ok else None
    cap[policy] = (best["output_throughput"] if best else 0.0, best["request_rate"] if best else 0, bound)
if len(cap) == 2:
  (c_tp, c_rate, bound), (s_tp, s_rate, _) = cap["continuous"], cap["static"]
  ratio = c_tp / s_tp if s_tp > 0 else float("inf")
  row("continuous / static, output tokens/s at p99 TTFT <= %g ms (capacity sweep)" % bound,
      "%s (%.1f at %g req/s / %.1f at %g req/s)" % ("%.2fx" % ratio if s_tp > 0 else "static meets the bound at no swept rate",
                                                c_tp, c_rate, s_tp, s_rate), ">= 2x", ratio >= 2)
if have("shared_prefix"):
  h = r["shared_prefix"]["prefix_cache_hit_rate"]
  row("prefix-cache hit rate, shared prefix", pct(h) if h >= 0 else "not reported", "> 90%", h > 0.9)
if have("shared_prefix", "shared_prefix_nocache"):
  a, z = r["shared_prefix"]["ttft_ms"], r["shared_prefix_nocache"]["ttft_ms"]
  row("TTFT median with / without prefix cache (ms)", "%.1f / %.1f (%.2fx)" % (
      a["median"], z["median"], z["median"] / max(a["median"], 1e-9)), "lower with", a["median"] < z["median"])
print("\nresults: %s" % out)
PY
