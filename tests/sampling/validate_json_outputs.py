#!/usr/bin/python3
"""Checks bench_json_schema's outputs with Python: each line of OUTPUTS is one generated text (as a JSON
string); every text must parse with the json module and, where jsonschema is installed (Debian's
python3-jsonschema), validate against SCHEMA.   validate_json_outputs.py SCHEMA OUTPUTS"""
import json
import sys


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        schema = json.load(f)
    with open(sys.argv[2], encoding="utf-8") as f:
        texts = [json.loads(line) for line in f if line.strip()]
    try:
        import jsonschema
        from importlib.metadata import version
        validator = jsonschema.Draft202012Validator(schema)
        which = "jsonschema " + version("jsonschema")
    except ImportError:
        validator, which = None, None
    n_parsed = n_valid = 0
    for i, text in enumerate(texts):
        try:
            value = json.loads(text)
        except ValueError as e:
            print(f"   python3: output {i + 1} does not parse: {e}: {text!r}")
            continue
        n_parsed += 1
        if validator is not None:
            errors = list(validator.iter_errors(value))
            if errors:
                print(f"   python3: output {i + 1} does not match the schema: {errors[0].message}: {text!r}")
                continue
        n_valid += 1
    print(f"   python3 json: {n_parsed} / {len(texts)} parse", end="")
    print(f"; {which}: {n_valid} / {len(texts)} valid" if which else " (python3-jsonschema not installed)")
    return 0 if n_parsed == len(texts) and n_valid == len(texts) else 1


if __name__ == "__main__":
    sys.exit(main())
