#!/usr/bin/env python3
"""End-to-end driver: starts `troupe serve` on loopback with a real model, runs real clients against it,
stops it with SIGTERM and requires a clean exit.

    run_e2e.py --troupe build/troupe --clients openai,ws,browser [--out build/e2e]

Clients: openai (openai_client.mjs, the official npm package), features (openai_features.mjs, the same package:
n, best_of, echo, several prompts, logit_bias, response_format), ws (ws_client.py, python3-websockets),
browser (browser.mjs, playwright-core driving /usr/bin/chromium; screenshots chat.png and admin.png in --out).
With an API key (the server started with --api-key <random>, given to the clients as TROUPE_API_KEY):
secure (openai_client.mjs and openai_api_key.mjs through the key, ws_client.py with it as a subprotocol) and
browser_key (browser_key.mjs: the chat page asks for the key, takes it, streams). A run mixing keyed and
unkeyed clients is refused. tools (openai_tools.mjs: tools, tool_choice, tool turns and tool_calls) runs against
a copy of the model carrying tools_template.jinja as its chat template (gguf_with_template.py, in --out), apart
from the others.
What a client needs but the machine lacks (node, tests/e2e/node_modules from `npm ci`, chromium,
python3-websockets, ../shared) makes the test SKIP (exit 77) with a message, or FAIL when CI=true.
"""
import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))
SKIP = 77
MODEL = "models/stories260K.gguf"


def in_ci():
    return os.environ.get("CI") == "true"


def unavailable(what, fix):
    """A missing prerequisite: skip with a message, or fail in CI."""
    if in_ci():
        print(f"FAIL: {what} (CI=true, so this is a failure, not a skip): {fix}", flush=True)
        sys.exit(1)
    print(f"SKIP: {what}: {fix}", flush=True)
    sys.exit(SKIP)


def python_with_websockets():
    for exe in ("/usr/bin/python3", sys.executable, shutil.which("python3")):
        if exe and os.path.exists(exe):
            ok = subprocess.run([exe, "-c", "import websockets"], capture_output=True).returncode == 0
            if ok:
                return exe
    return None


def check_prerequisites(clients, troupe):
    if not os.access(troupe, os.X_OK):
        print(f"FAIL: {troupe} is not an executable (build the troupe target first)", flush=True)
        sys.exit(1)
    shared = os.environ.get("TROUPE_SHARED_DIR") or os.path.join(SOURCE_DIR, "..", "shared")
    model = os.path.normpath(os.path.join(shared, MODEL))
    if not os.path.isfile(model):
        unavailable(f"shared test data '{MODEL}' not found",
                    "put the shared folder beside the repository (../shared) or set TROUPE_SHARED_DIR")
    tools = {}
    if {"openai", "features", "browser", "secure", "browser_key", "tools"} & set(clients):
        node = shutil.which("node")
        if not node:
            unavailable("node is not installed", "apt-get install nodejs npm (./setup.sh test does it)")
        tools["node"] = node
        needed = ["openai"] if {"openai", "features", "secure", "tools"} & set(clients) else []
        needed += ["playwright-core"] if {"browser", "browser_key"} & set(clients) else []
        for mod in needed:
            if not os.path.isfile(os.path.join(HERE, "node_modules", mod, "package.json")):
                unavailable(f"the npm package {mod} is not installed in tests/e2e",
                            "run `npm ci` in tests/e2e (./setup.sh test does it)")
    if {"browser", "browser_key"} & set(clients):
        chromium = os.environ.get("TROUPE_CHROMIUM", "/usr/bin/chromium")
        if not os.access(chromium, os.X_OK):
            unavailable(f"{chromium} is missing", "apt-get install chromium (./setup.sh test does it)")
    if {"ws", "secure"} & set(clients):
        py = python_with_websockets()
        if not py:
            unavailable("no python3 with the websockets module", "apt-get install python3-websockets")
        tools["python"] = py
    return model, tools


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(proc, base, log_path, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"troupe serve exited with {proc.returncode} before /health answered")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return
                last = f"HTTP {r.status}"
        except (urllib.error.URLError, ConnectionError, OSError) as e:
            last = str(e)
        time.sleep(0.1)
    raise RuntimeError(f"/health did not answer 200 within {timeout_s} s (last: {last})")


def tail(path, n=60):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--troupe", required=True, help="the troupe executable")
    ap.add_argument("--clients", default="openai,ws,browser",
                    help="comma-separated: openai, features, ws, browser, or with an API key: secure, browser_key, "
                         "or alone: tools")
    ap.add_argument("--out", default=os.path.join(os.getcwd(), "e2e"), help="screenshots and logs")
    ap.add_argument("--timeout", type=int, default=180, help="seconds per client")
    args = ap.parse_args()
    clients = [c for c in args.clients.split(",") if c]
    keyed_clients = ("secure", "browser_key")
    for c in clients:
        if c not in ("openai", "features", "ws", "browser", "tools") + keyed_clients:
            ap.error(f"unknown client '{c}' (valid: openai, features, ws, browser, secure, browser_key, tools)")
    keyed = any(c in keyed_clients for c in clients)
    if keyed and not all(c in keyed_clients for c in clients):
        ap.error("secure and browser_key run against a server with an API key: run them apart from the others")

    args.out = os.path.abspath(args.out)
    args.troupe = os.path.abspath(args.troupe)
    if "tools" in clients and clients != ["tools"]:
        ap.error("tools runs against a copy of the model with a tool template: run it apart from the others")
    model, tools = check_prerequisites(clients, args.troupe)
    os.makedirs(args.out, exist_ok=True)
    if "tools" in clients:
        copy = os.path.join(args.out, "stories260K-tools.gguf")
        subprocess.run([sys.executable, os.path.join(HERE, "gguf_with_template.py"), model,
                        os.path.join(HERE, "tools_template.jinja"), copy], check=True)
        model = copy
    port = free_port()
    token = secrets.token_hex(16)
    api_key = "sk-" + secrets.token_hex(16) if keyed else None
    base = f"http://127.0.0.1:{port}"
    log_path = os.path.join(args.out, f"serve-{'-'.join(clients)}.log")
    cmd = [args.troupe, "serve", "--model", model, "--host", "127.0.0.1", "--port", str(port),
           "--set", f"server.admin_token={token}"]
    if api_key:
        cmd += ["--api-key", api_key]
    if "browser" in clients:
        # Two sequences per step: the browser's load of 16 long requests queues long enough for the console
        # (polled once a second) to list them and cancel one.
        cmd += ["--set", "scheduler.max_running_seqs=2"]
    shown = " ".join(cmd).replace(token, "<token>")
    print("starting:", shown.replace(api_key, "<api key>") if api_key else shown, flush=True)
    log = open(log_path, "w", encoding="utf-8")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=SOURCE_DIR)
    failed = []
    try:
        wait_healthy(proc, base, log_path)
        log.flush()
        banner = tail(log_path, 200)
        if f":{port}/" not in banner and f":{port}\n" not in banner:
            failed.append("banner")
            print(f"FAIL: troupe serve did not print its URLs (with port {port}) on stdout", flush=True)
        env = dict(os.environ, TROUPE_BASE_URL=base, TROUPE_ADMIN_TOKEN=token, TROUPE_E2E_OUT=args.out)
        if api_key:
            env["TROUPE_API_KEY"] = api_key
        commands = {
            "openai": [tools.get("node"), os.path.join(HERE, "openai_client.mjs")],
            "features": [tools.get("node"), os.path.join(HERE, "openai_features.mjs")],
            "ws": [tools.get("python"), os.path.join(HERE, "ws_client.py")],
            "browser": [tools.get("node"), os.path.join(HERE, "browser.mjs")],
            "secure": [tools.get("node"), os.path.join(HERE, "openai_client.mjs")],
            "browser_key": [tools.get("node"), os.path.join(HERE, "browser_key.mjs")],
            "tools": [tools.get("node"), os.path.join(HERE, "openai_tools.mjs")],
        }
        # The secure client is three programs through the one key.
        then = {"secure": [[tools.get("node"), os.path.join(HERE, "openai_api_key.mjs")],
                           [tools.get("python"), os.path.join(HERE, "ws_client.py")]]}
        for c in clients:
            print(f"--- {c} client", flush=True)
            t0 = time.monotonic()
            rc = 0
            for program in [commands[c]] + then.get(c, []):
                try:
                    rc = subprocess.run(program, env=env, cwd=HERE, timeout=args.timeout).returncode
                except subprocess.TimeoutExpired:
                    rc = "timeout"
                if rc != 0:
                    break
            print(f"--- {c} client: {'PASS' if rc == 0 else f'FAIL ({rc})'} in {time.monotonic() - t0:.1f} s", flush=True)
            if rc != 0:
                failed.append(c)
    except RuntimeError as e:
        failed.append("start")
        print(f"FAIL: {e}", flush=True)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                failed.append("sigterm")
                print("FAIL: troupe serve did not stop within 20 s of SIGTERM (killed)", flush=True)
        log.close()
    if proc.returncode not in (0, None) and "sigterm" not in failed and "start" not in failed:
        failed.append("exit")
        print(f"FAIL: troupe serve exited with {proc.returncode} after SIGTERM (expected 0)", flush=True)
    if failed:
        print(f"--- server log ({log_path}), last lines:\n{tail(log_path)}", flush=True)
        print(f"FAILED: {', '.join(failed)}", flush=True)
        return 1
    print(f"PASS: {', '.join(clients)} against troupe serve on port {port}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
