#!/bin/sh
# CTest fixture of the spec exactness harness: distills small Medusa heads and an EAGLE layer for each family of shared
# models (stories260K, rand10M, llama-2-tiny-random) with `troupe distill` (a few dozen steps: exactness needs valid
# files, not good ones; quantized copies share their float model's files), so the harness's medusa and eagle rows run
# wherever ../shared is. Without ../shared it writes nothing and the rows skip with their own message.
#   make_heads.sh TROUPE_BINARY SOURCE_DIR OUT_DIR
set -eu
troupe=$1
source_dir=$2
out=$3
shared=${TROUPE_SHARED_DIR:-$source_dir/../shared}
model=$shared/models/stories260K.gguf
if [ ! -f "$model" ]; then
    echo "make_heads: no $model: the medusa and eagle rows will skip"
    exit 0
fi
mkdir -p "$out"
# target file : the name the harness looks for (its family: the stem up to the first '-', or the whole stem)
for pair in stories260K.gguf:stories260K rand10M-F16.gguf:rand10M llama-2-tiny-random.gguf:llama-2-tiny-random; do
    target=$shared/models/${pair%%:*}
    name=${pair#*:}
    # stories260K's files draft well enough for the chi-square test to see many acceptances; the random models'
    # only need to load and propose (greedy equality): two steps on four openings, as their 32000-token output
    # layer makes a step take seconds on a slow AVX2 machine.
    steps=2 openings=4 gen=16
    if [ "$name" = stories260K ]; then steps=150 openings=80 gen=32; fi
    for kind in medusa eagle; do
        "$troupe" distill --target "$target" --kind "$kind" --data "$shared/text/stories.txt" \
            -o "$out/$name.$kind.gguf" --steps $steps --max-openings $openings --gen $gen --threads 2 >/dev/null
    done
done
echo "make_heads: medusa and eagle files for three model families in $out"
