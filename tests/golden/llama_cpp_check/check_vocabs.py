#!/usr/bin/env python3
"""troupe's tokenizer on llama.cpp's own tokenizer test vectors (not a test: it needs a llama.cpp checkout).

    check_vocabs.py LLAMA_DIR TROUPE_BUILD_DIR

For every LLAMA_DIR/models/ggml-vocab-*.gguf that has its .inp and .out beside it (llama.cpp's test-tokenizer-0
format: inputs separated by "\\n__ggml_vocab_test__\\n", one line of ids per input), it encodes each input with
`troupe tokenize --no-bos` and compares the ids, then decodes the expected ids with `troupe tokenize -d` and compares
the text with the input. A vocabulary troupe does not take (BERT's WordPiece) is reported as refused, with the
message troupe gives. Exits 1 if any encoded input differs.
"""
import os
import subprocess
import sys

SEPARATOR = "\n__ggml_vocab_test__\n"


def cases(vocab):
    with open(vocab + ".inp", encoding="utf-8", newline="") as f:
        inputs = f.read().split(SEPARATOR)[:-1]
    with open(vocab + ".out", encoding="utf-8") as f:
        outputs = [[int(t) for t in line.split()] for line in f.read().split("\n")]
    return list(zip(inputs, outputs[: len(inputs)]))


def encode(troupe, vocab, text):
    # "--" keeps an input that starts with '-' from being read as a flag.
    r = subprocess.run([troupe, "tokenize", "-m", vocab, "--no-bos", "--", text], capture_output=True)
    if r.returncode != 0:
        return None, r.stderr.decode("utf-8", "replace").strip()
    return [int(t) for t in r.stdout.split()], ""


def decode(troupe, vocab, ids):
    if not ids:
        return ""
    r = subprocess.run([troupe, "tokenize", "-m", vocab, "-d"] + [str(i) for i in ids], capture_output=True)
    text = r.stdout.decode("utf-8", "replace")
    return text[:-1] if text.endswith("\n") else text


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    models = os.path.join(sys.argv[1], "models")
    troupe = os.path.join(sys.argv[2], "troupe")
    all_equal = True
    for name in sorted(os.listdir(models)):
        vocab = os.path.join(models, name)
        if not name.endswith(".gguf") or not os.path.exists(vocab + ".inp") or not os.path.exists(vocab + ".out"):
            continue
        todo = cases(vocab)
        encoded = decoded = 0
        first_bad = ""
        refused = ""
        for text, want in todo:
            got, error = encode(troupe, vocab, text)
            if got is None:
                refused = error
                break
            if got == want:
                encoded += 1
            elif not first_bad:
                first_bad = f"first difference: {text[:40]!r} -> {got[:12]} (want {want[:12]})"
            if decode(troupe, vocab, want) == text:
                decoded += 1
        if refused:
            print(f"{name}: refused: {refused}")
            continue
        all_equal = all_equal and encoded == len(todo)
        print(f"{name}: encoded {encoded}/{len(todo)} as llama.cpp, decoded back {decoded}/{len(todo)} {first_bad}")
    print("all encoded as llama.cpp" if all_equal else "some inputs encode differently")
    sys.exit(0 if all_equal else 1)


if __name__ == "__main__":
    main()
