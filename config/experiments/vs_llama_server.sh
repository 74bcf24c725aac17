#!/usr/bin/env bash
# troupe serve beside llama-server on the same GGUF file through the same load (vs_llama_server.yaml), at 1, 4,
# 16 and 64 concurrent streams: output tokens/s and TTFT / TPOT percentiles of each, and troupe's ratio. troupe
# runs with its default config (`troupe serve --model M` and the thread count, nothing else); llama-server with
# the same thread count, one slot per stream of the largest load, and continuous batching (its default).
#
#   config/experiments/vs_llama_server.sh --model M.gguf --llama-server PATH [--troupe build/troupe]
#                                         [--threads 2] [--streams "1 4 16 64"] [--n-requests N] [--out DIR]
#
# llama-server is a reference you build yourself from llama.cpp (never inside this repository).
# --n-requests  requests per run (default: 4 per stream, at least 16)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
troupe="$root/build/troupe"
llama_server=""
model=""
threads=2
streams="1 4 16 64"
n_requests=""
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --model) model="$2"; shift 2 ;;
        --llama-server) llama_server="$2"; shift 2 ;;
        --troupe) troupe="$2"; shift 2 ;;
        --threads) threads="$2"; shift 2 ;;
        --streams) streams="$2"; shift 2 ;;
        --n-requests) n_requests="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "vs_llama_server.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
    esac
done
[ -x "$troupe" ] || { echo "vs_llama_server.sh: no troupe binary at $troupe (build it, or --troupe PATH)" >&2; exit 1; }
[ -n "$llama_server" ] && [ -x "$llama_server" ] ||
    { echo "vs_llama_server.sh: --llama-server PATH to a llama-server binary is required" >&2; exit 1; }
[ -f "$model" ] || { echo "vs_llama_server.sh: no model at '$model' (--model M.gguf)" >&2; exit 1; }
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
out="${out:-$root/bench-results/vs-llama-server-$(date -u +%Y%m%d-%H%M%S)}"
mkdir -p "$out"

. "$here/serve_lib.sh"

max_streams=1
for n in $streams; do [ "$n" -gt "$max_streams" ] && max_streams=$n; done

# llama-server's lifecycle, like serve_lib.sh's start_server: a free port, waited for until /health answers.
start_llama_server() {
    local log="$1"
    port=$(free_port)
    # -c is shared by the slots: 256 tokens each holds the 32-token prompt and 128 generated tokens.
    "$llama_server" -m "$model" -t "$threads" -tb "$threads" -np "$max_streams" -c $((256 * max_streams)) \
        --host 127.0.0.1 --port "$port" >"$log" 2>&1 &
    server_pid=$!
    for _ in $(seq 1 240); do
        if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
        if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    echo "vs_llama_server.sh: llama-server did not become healthy; its log ($log):" >&2
    tail -20 "$log" >&2
    stop_server
    return 1
}

load() {
    local name="$1" n="$2"
    local requests="${n_requests:-$((n * 4 > 16 ? n * 4 : 16))}"
    (cd "$root" && "$troupe" bench serve --config "$here/vs_llama_server.yaml" --url "http://127.0.0.1:$port" \
        --max-concurrency "$n" --n-requests "$requests" --set "name=$name" --set "prompt.tokenizer=$model" \
        --out "$out/$name.json") >"$out/$name.md"
}

echo "== troupe serve --model $(basename "$model") --set threads=$threads" >&2
start_server "$out/server-troupe.log" --model "$model" --set "threads=$threads"
for n in $streams; do load "troupe_s$n" "$n"; done
stop_server
echo "== llama-server -m $(basename "$model") -t $threads -np $max_streams" >&2
start_llama_server "$out/server-llama.log"
for n in $streams; do load "llama_s$n" "$n"; done
stop_server

python3 - "$out" "$model" "$streams" "$threads" <<'PY' | tee "$out/comparison.md"
import json, os, sys
out, model, streams, threads = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4]
def load(name):
    p = os.path.join(out, name + ".json")
    return json.load(open(p)) if os.path.exists(p) else None
print("\n## troupe serve beside llama-server: %s, %s threads, 32-token prompts, 128 tokens each\n" %
      (os.path.basename(model), threads))
print("| streams | server | output tok/s | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | failed |")
print("| ---: | --- | ---: | ---: | ---: | ---: |")
for n in streams:
    rows = [("troupe", load("troupe_s" + n)), ("llama-server", load("llama_s" + n))]
    for name, j in rows:
        if j is None:
            print("| %s | %s | (missing) | | | |" % (n, name))
            continue
        print("| %s | %s | %.1f | %.0f / %.0f | %.1f / %.1f | %d |" % (
            n, name, j["output_throughput"], j["ttft_ms"]["median"], j["ttft_ms"]["p99"], j["tpot_ms"]["median"],
            j["tpot_ms"]["p99"], j["failed"]))
    t, l = rows[0][1], rows[1][1]
    if t and l and l["output_throughput"] > 0:
        print("| %s | troupe / llama-server | %.2fx | p99 %s | | |" % (
            n, t["output_throughput"] / l["output_throughput"],
            "lower" if t["ttft_ms"]["p99"] < l["ttft_ms"]["p99"] else "HIGHER"))
PY
