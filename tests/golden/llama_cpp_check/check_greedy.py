#!/usr/bin/env python3
"""Greedy tokens of troupe beside llama.cpp's on prompts of one's own (not a test: it needs a llama.cpp build).

    check_greedy.py LLAMA_DIR TROUPE_BUILD_DIR [N_NEW] [SETUP] [MODEL.gguf ...]

LLAMA_DIR is a llama.cpp checkout built in LLAMA_DIR/build (its CPU backend); TROUPE_BUILD_DIR holds
tests/golden/troupe_greedy_ids. For every rand10M file in ../shared/models and every prompt below, it prints how
many of the N_NEW (32) greedy tokens agree before the two part, the first-step logit difference, and at how many of
the agreeing steps the largest logit is the same float (all of them: the arithmetic is llama.cpp's bit for bit). SETUP
(default builtin_quantized: llama.cpp's CPU arithmetic, the recipe the goldens call 8-bit activations) is one
of tests/golden/golden_model.h's. MODEL.gguf ...: other files instead of the rand10M ones (e.g. rand10M-F16 written
as Q5_0 by llama.cpp's `llama-quantize --pure`).
"""
import os
import subprocess
import sys
import tempfile

PROMPTS = [
    "The quick brown fox jumps over the lazy dog",
    "In a small village by the sea, an old fisherman",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21",
    "Tom had a red kite. He ran up the hill with it, and the wind took it high into the sky, "
    "over the trees and the river, until it was only a dot.",
    "Q:",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
]
MODELS = ["F16", "Q8_0", "Q4_0", "Q4_K_M", "Q6_K"]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    llama, build = sys.argv[1], sys.argv[2]
    n_new = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    setup = sys.argv[4] if len(sys.argv) > 4 else "builtin_quantized"
    here = os.path.dirname(os.path.abspath(__file__))
    shared = os.path.normpath(os.path.join(here, "..", "..", "..", "..", "shared"))
    tool = os.path.join(tempfile.mkdtemp(), "llama_greedy")
    lib = os.path.join(llama, "build", "bin")
    subprocess.run(["g++", "-O2", "-std=c++17", os.path.join(here, "llama_greedy.cpp"), "-I" + os.path.join(llama, "include"),
                    "-I" + os.path.join(llama, "ggml", "include"), "-L" + lib, "-lllama", "-lggml", "-lggml-base",
                    "-Wl,-rpath," + lib, "-o", tool], check=True)
    all_equal = True
    models = sys.argv[5:] or [os.path.join(shared, "models", f"rand10M-{m}.gguf") for m in MODELS]
    for model in models:
        out = subprocess.run([os.path.join(build, "tests", "golden", "troupe_greedy_ids"), model, str(n_new), setup]
                             + PROMPTS, check=True, capture_output=True, text=True).stdout.split("\n")
        agree = []
        for i in range(len(PROMPTS)):
            prompt = out[4 * i].split()[1:]  # prompt, greedy, first_logits, max_logits
            ours = [int(t) for t in out[4 * i + 1].split()[1:]]
            our_logits = [float(v) for v in out[4 * i + 2].split()[1:]]
            our_top = out[4 * i + 3].split()[1:]
            ref = subprocess.run([tool, model, str(n_new), "2", ",".join(prompt)], check=True, capture_output=True,
                                 text=True).stdout.split("\n")
            theirs = [int(t) for t in ref[0].split(",")]
            their_logits = [float(v) for v in ref[1].split()[:8]]
            their_top = ref[2].split()
            k = next((j for j in range(n_new) if ours[j] != theirs[j]), n_new)
            dl = max(abs(a - b) for a, b in zip(our_logits, their_logits))
            # Both print %.9g, which identifies a float: equal strings are equal floats.
            same = sum(1 for a, b in zip(our_top[:k], their_top[:k]) if a == b)
            agree.append(f"{k}/{n_new} ({len(prompt)} prompt tokens, first logits within {dl:.1e}, "
                         f"top logit bit-equal at {same} of {k} steps)")
            all_equal = all_equal and k == n_new
        print(f"{os.path.basename(model)}, {setup}: " + ", ".join(agree), flush=True)
    print("all equal" if all_equal else "some runs part from llama.cpp")


if __name__ == "__main__":
    main()
