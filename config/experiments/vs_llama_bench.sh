#!/usr/bin/env bash
# troupe bench (default config) beside llama.cpp's llama-bench on the same GGUF files, thread count and sizes, in one
# run: prefill (pp) and decode (tg) tokens/s, troupe's ratios to the limits it measures in the same run (decode:
# the memory-bandwidth bound, and a plain read of a step's bytes alternated with its steps; prefill: the peak of the
# arithmetic it uses), and troupe / llama.cpp.
#
#   config/experiments/vs_llama_bench.sh TROUPE LLAMA_BENCH [options] MODEL.gguf...
#
# Options (before the models): -t THREADS (2), -p PROMPT_TOKENS (128), -n GEN_TOKENS (64), -r REPS (3).
# llama-bench keeps its default F16 KV cache (builds before F32 support refuse -ctk f32); troupe its default F32 one
# (at these sizes attention is a small part of a step). Prints a markdown table, each row followed by troupe's
# measured limits as an HTML comment.
set -euo pipefail
troupe=$1
llama_bench=$2
shift 2
threads=2 n_prompt=128 n_gen=64 reps=3
while getopts "t:p:n:r:" opt; do
    case $opt in
        t) threads=$OPTARG ;;
        p) n_prompt=$OPTARG ;;
        n) n_gen=$OPTARG ;;
        r) reps=$OPTARG ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))

echo "| model | troupe pp$n_prompt | of its peak | llama.cpp pp$n_prompt | troupe tg$n_gen | of the bound | of a plain read | llama.cpp tg$n_gen | pp ratio | tg ratio |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for model in "$@"; do
    out=$("$troupe" bench --model "$model" -t "$threads" --n-prompt "$n_prompt" --n-gen "$n_gen" --reps "$reps" 2>/dev/null)
    pp=$(awk '$1 ~ /^pp/ {print $2}' <<<"$out")
    pp_pct=$(awk '$1 ~ /^pp/ {for (i = 1; i <= NF; ++i) if ($i ~ /%$/) {print $i; exit}}' <<<"$out")
    tg=$(awk '$1 ~ /^tg/ {print $2}' <<<"$out")
    tg_pct=$(awk '$1 ~ /^tg/ {for (i = 1; i <= NF; ++i) if ($i ~ /%$/) {print $i; exit}}' <<<"$out")
    read_pct=$(grep -o '[0-9.]*% of a plain read' <<<"$out" | cut -d' ' -f1 || true)
    limits=$(grep '^limits:' <<<"$out" || true)
    ref=$("$llama_bench" -m "$model" -t "$threads" -p "$n_prompt" -n "$n_gen" -r "$reps" -o csv 2>/dev/null || true)
    lpp=$(awk -F, -v n="$n_prompt" 'NR > 1 {gsub(/"/, ""); for (i = 1; i <= NF; ++i) h[i] = $i} NR == 1 {gsub(/"/, ""); for (i = 1; i <= NF; ++i) col[$i] = i} NR > 1 && h[col["n_prompt"]] == n && h[col["n_gen"]] == 0 {print h[col["avg_ts"]]}' <<<"$ref")
    ltg=$(awk -F, -v n="$n_gen" 'NR > 1 {gsub(/"/, ""); for (i = 1; i <= NF; ++i) h[i] = $i} NR == 1 {gsub(/"/, ""); for (i = 1; i <= NF; ++i) col[$i] = i} NR > 1 && h[col["n_gen"]] == n && h[col["n_prompt"]] == 0 {print h[col["avg_ts"]]}' <<<"$ref")
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }
    printf "| %s | %s | %s | %.1f | %s | %s | %s | %.1f | %s | %s |\n" "$(basename "$model")" "$pp" "$pp_pct" "${lpp:-0}" \
        "$tg" "$tg_pct" "${read_pct:--}" "${ltg:-0}" "$(ratio "$pp" "${lpp:-0}")" "$(ratio "$tg" "${ltg:-0}")"
    echo "<!-- $(basename "$model") $limits -->"
done
