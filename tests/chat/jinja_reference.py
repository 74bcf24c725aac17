#!/usr/bin/env python3
"""troupe's Jinja interpreter against Python's jinja2, configured as transformers' apply_chat_template
configures it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls, {% generation %},
tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now).

Every template in tests/chat/templates is rendered for every conversation in tests/chat/cases, with and
without the generation prompt, by jinja2 and by `troupe template`; the two must agree byte for byte, or
both fail: with the template's own message where it calls raise_exception, with an error otherwise.
Then the error cases: syntax errors (troupe names the line jinja2 names), raise_exception, undefined names.

Exit 0: all agree; 1: a difference (each printed with the first differing position); 77: python3-jinja2
is missing (a failure when CI=true: setup.sh installs it).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from datetime import datetime

SKIP = 77


def make_environment():
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class RaisedByTemplate(jinja2.exceptions.TemplateError):
        pass

    class AssistantTracker(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise RaisedByTemplate(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env, RaisedByTemplate, jinja2


def python_render(env, raised_type, source, messages, tools, add_generation_prompt, bos, eos):
    """('ok', text) | ('raise', message) | ('error', description)."""
    try:
        template = env.from_string(source)
        return ("ok", template.render(messages=messages, tools=tools, documents=None,
                                      add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos))
    except raised_type as e:
        return ("raise", str(e))
    except Exception as e:  # noqa: BLE001 - any other failure: troupe must fail too
        return ("error", f"{type(e).__name__}: {e}")


def troupe_render(troupe, template_path, case_path, add_generation_prompt, bos, eos):
    cmd = [troupe, "template", "--template", str(template_path), "--messages", str(case_path),
           "--bos-token", bos, "--eos-token", eos]
    if not add_generation_prompt:
        cmd.append("--no-generation-prompt")
    p = subprocess.run(cmd, capture_output=True, timeout=60)
    if p.returncode == 0:
        return ("ok", p.stdout.decode("utf-8"))
    return ("fail", p.stderr.decode("utf-8", "replace").strip(), p.returncode)


def first_difference(a, b):
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return k
    return min(len(a), len(b))


def compare(label, expected, got):
    """A failure description, or None."""
    if expected[0] == "ok":
        if got[0] != "ok":
            return f"{label}: jinja2 renders, troupe fails: {got[1]}"
        if got[1] != expected[1]:
            k = first_difference(expected[1], got[1])
            return (f"{label}: texts differ at character {k} (jinja2 {len(expected[1])} chars, troupe "
                    f"{len(got[1])})\n    jinja2: {expected[1][max(0, k - 60):k + 60]!r}\n"
                    f"    troupe: {got[1][max(0, k - 60):k + 60]!r}")
        return None
    if got[0] == "ok":
        return f"{label}: jinja2 fails ({expected[1]}), troupe renders {got[1][:200]!r}"
    if got[2] != 1:
        return f"{label}: troupe exits {got[2]}, expected 1 for a template error: {got[1]}"
    if expected[0] == "raise" and expected[1] not in got[1]:
        return f"{label}: the template raises {expected[1]!r}; troupe says {got[1]!r}"
    return None


# (name, template, what must happen): 'syntax' (both fail to parse, troupe names jinja2's line), 'raise'
# (troupe reports the message), 'error' (both fail while rendering), 'message' (both fail while rendering,
# troupe with jinja2's message).
ERROR_CASES = [
    ("unclosed_for", "line one\n{% for m in messages %}\n{{ m.role }}\n", "syntax"),
    ("unclosed_if", "{% if true %}\nx\n{% elif false %}\ny", "syntax"),
    ("stray_endif", "a\nb {% endif %}", "syntax"),
    ("bad_expression", "{{ messages[0].role + }}", "syntax"),
    ("missing_print_end", "text\n\n{{ 'x' ", "syntax"),
    ("unknown_tag", "{% frobnicate %}", "syntax"),
    ("unbalanced_bracket", "{{ [1, 2 }}", "syntax"),
    ("unterminated_string", "{{ 'abc }}", "syntax"),
    ("unterminated_comment", "x {# never closed", "syntax"),
    ("raise_simple", "{{ raise_exception('Conversation roles must alternate!') }}", "raise"),
    ("raise_in_loop", "{% for m in messages %}{% if m.role == 'user' %}{{ raise_exception('no ' ~ m.role ~ "
                      "' allowed at ' ~ loop.index) }}{% endif %}{% endfor %}", "raise"),
    ("undefined_function", "{{ no_such_function('x') }}", "error"),
    ("undefined_attribute_chain", "{{ messages[0].nothing.deeper }}", "error"),
    ("add_string_and_int", "{{ 'a' + 1 }}", "error"),
    ("unknown_filter_used", "{{ 'x' | no_such_filter }}", "error"),
    ("call_a_string", "{{ messages[0].role() }}", "error"),
    ("unpack_mismatch", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", "error"),
    ("printf_missing_argument", "{{ '%s and %s' % ('one',) }}", "error"),
    ("printf_extra_argument", "{{ 'no slot' | format(1) }}", "error"),
    ("printf_bad_number", "{{ '%d' % 'x' }}", "error"),
    ("macro_extra_argument_without_varargs", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", "error"),
    ("macro_extra_keyword_without_kwargs", "{% macro m(a) %}{{ varargs }}{% endmacro %}{{ m(1, x=2) }}", "message"),
    ("loop_called_without_recursive", "{% for i in [1] %}{{ loop([2]) }}{% endfor %}", "error"),
    ("with_missing_comma", "{% with a = 1 b = 2 %}{% endwith %}", "syntax"),
    ("str_format_missing_argument", "{{ '{} and {}'.format('one') }}", "error"),
    ("str_format_single_brace", "{{ 'a } b'.format() }}", "error"),
    ("sandbox_list_append", "{% set xs = [] %}{% set _ = xs.append(1) %}{{ xs }}", "message"),
    ("sandbox_dict_update", "{% set d = {'a': 1} %}{{ d.update({'b': 2}) }}", "message"),
    ("sandbox_list_sort", "{% set xs = [2, 1] %}{{ xs.sort() }}", "message"),
]


def run_error_cases(env, raised_type, jinja2, troupe, case_path, work):
    failures = []
    for name, source, kind in ERROR_CASES:
        path = work / f"{name}.jinja"
        path.write_text(source, encoding="utf-8")
        doc = json.loads(case_path.read_text(encoding="utf-8"))
        expected = python_render(env, raised_type, source, doc["messages"], None, True, "<s>", "</s>")
        got = troupe_render(troupe, path, case_path, True, "<s>", "</s>")
        label = f"error case {name}"
        if expected[0] == "ok" or got[0] == "ok":
            failures.append(f"{label}: expected both to fail, jinja2 {expected[0]}, troupe {got[0]}")
            continue
        if got[2] != 1:
            failures.append(f"{label}: troupe exits {got[2]}, expected 1: {got[1]}")
            continue
        if kind == "syntax":
            try:
                env.parse(source)
                failures.append(f"{label}: jinja2 parses it, so this is no syntax error case")
                continue
            except jinja2.exceptions.TemplateSyntaxError as e:
                want = f"line {e.lineno}"
            if "syntax error" not in got[1] or want not in got[1]:
                failures.append(f"{label}: expected a syntax error at {want} (jinja2: {e.message}); troupe: {got[1]}")
        elif kind == "raise":
            if expected[0] != "raise" or expected[1] not in got[1]:
                failures.append(f"{label}: the template raises {expected[1]!r}; troupe says {got[1]!r}")
        elif expected[0] != "error":
            failures.append(f"{label}: expected a rendering error from jinja2, got {expected}")
        elif kind == "message" and expected[1].split(": ", 1)[-1] not in got[1]:
            failures.append(f"{label}: jinja2 fails with {expected[1]!r}; troupe says {got[1]!r}")
        print(f"  {name}: troupe: {got[1]}")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--troupe", required=True)
    here = pathlib.Path(__file__).resolve().parent
    ap.add_argument("--templates", default=str(here / "templates"))
    ap.add_argument("--cases", default=str(here / "cases"))
    args = ap.parse_args()
    try:
        env, raised_type, jinja2 = make_environment()
    except ImportError as e:
        message = f"python3-jinja2 is not installed ({e}); ./setup.sh test installs it (apt: python3-jinja2)"
        if os.environ.get("CI") == "true":
            print(f"FAIL: {message}")
            return 1
        print(f"SKIP: {message}")
        return SKIP

    templates = sorted(pathlib.Path(args.templates).glob("*.jinja"))
    cases = sorted(pathlib.Path(args.cases).glob("*.json"))
    tokens_path = pathlib.Path(args.templates) / "tokens.json"
    tokens = json.loads(tokens_path.read_text(encoding="utf-8")) if tokens_path.exists() else {}
    if not templates or not cases:
        print(f"FAIL: no templates in {args.templates} or no cases in {args.cases}")
        return 1

    failures = []
    counts = {"ok": 0, "raise": 0, "error": 0}
    for template in templates:
        source = template.read_text(encoding="utf-8")
        bos, eos = tokens.get(template.stem, ["<s>", "</s>"])
        for case in cases:
            doc = json.loads(case.read_text(encoding="utf-8"))
            for gen in (True, False):
                label = f"{template.name} x {case.name} (add_generation_prompt={gen})"
                expected = python_render(env, raised_type, source, doc["messages"], doc.get("tools"), gen, bos, eos)
                got = troupe_render(args.troupe, template, case, gen, bos, eos)
                counts[expected[0]] += 1
                problem = compare(label, expected, got)
                if problem:
                    failures.append(problem)
    print(f"{len(templates)} templates x {len(cases)} conversations x 2: jinja2 rendered {counts['ok']}, "
          f"raised {counts['raise']}, failed {counts['error']}; troupe agreed on "
          f"{sum(counts.values()) - len(failures)} of {sum(counts.values())}")

    with tempfile.TemporaryDirectory() as tmp:
        failures += run_error_cases(env, raised_type, jinja2, args.troupe, cases[0], pathlib.Path(tmp))

    for f in failures:
        print(f"FAIL {f}")
    if failures:
        print(f"{len(failures)} differences")
        return 1
    print("all agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
