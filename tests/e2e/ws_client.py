#!/usr/bin/python3
"""The chat page's WebSocket protocol from Python (Debian's python3-websockets) against `troupe serve`.

Checks: a greedy start streams several deltas then one done whose usage and timings add up, and is
repeatable; two starts on one socket stream interleaved under their own ids; a cancel sent after the
first delta ends that request early with finish_reason "cancelled"; a malformed start gets an error.
    TROUPE_BASE_URL=http://127.0.0.1:PORT /usr/bin/python3 ws_client.py   (run_e2e.py sets it)
"""
import asyncio
import json
import os
import sys

import websockets

TIMEOUT_S = 60


def check(cond, what):
    if not cond:
        raise AssertionError(what)


async def recv(ws):
    """The next message about a request; a "hello" (the server's greeting: model, context length) is skipped."""
    while True:
        raw = await asyncio.wait_for(ws.recv(), TIMEOUT_S)
        msg = json.loads(raw)
        check(isinstance(msg, dict) and "type" in msg, f"not a protocol message: {raw!r}")
        if msg["type"] != "hello":
            return msg
        print(f"hello: model {msg.get('model')!r}, context {msg.get('context_length')}")


def start_msg(req_id, text, max_tokens, temperature=0.0):
    return json.dumps({
        "type": "start",
        "id": req_id,
        "messages": [{"role": "user", "content": text}],
        "params": {"temperature": temperature, "max_tokens": max_tokens},
    })


async def collect(ws, ids):
    """Reads until every id in ids is done (or failed); returns {id: (text, n_deltas, done_or_error)}."""
    out = {i: ["", 0, None] for i in ids}
    while any(v[2] is None for v in out.values()):
        msg = await recv(ws)
        check(msg.get("id") in out, f"message for an unknown id: {msg}")
        entry = out[msg["id"]]
        check(entry[2] is None, f"message after the end of {msg['id']}: {msg}")
        if msg["type"] == "delta":
            check(isinstance(msg.get("text"), str), f"delta without text: {msg}")
            entry[0] += msg["text"]
            entry[1] += 1
        elif msg["type"] in ("done", "error"):
            entry[2] = msg
        else:
            raise AssertionError(f"unknown message type: {msg}")
    return {k: tuple(v) for k, v in out.items()}


def check_done(done, n_deltas, max_tokens, what):
    check(done["type"] == "done", f"{what}: ended with {done}")
    check(done.get("finish_reason") in ("length", "stop"), f"{what}: finish_reason {done.get('finish_reason')}")
    u = done.get("usage") or {}
    check(u.get("prompt_tokens", 0) > 0, f"{what}: usage.prompt_tokens {u}")
    check(0 < u.get("completion_tokens", 0) <= max_tokens, f"{what}: usage.completion_tokens {u}")
    check(u.get("total_tokens") == u["prompt_tokens"] + u["completion_tokens"], f"{what}: usage.total_tokens {u}")
    check(n_deltas <= u["completion_tokens"], f"{what}: {n_deltas} deltas for {u['completion_tokens']} tokens")
    t = done.get("timings") or {}
    check(t.get("ttft_ms", 0) > 0, f"{what}: timings.ttft_ms {t}")
    check(t.get("tokens_per_s", 0) > 0, f"{what}: timings.tokens_per_s {t}")


async def main():
    base = os.environ["TROUPE_BASE_URL"]
    url = base.replace("http://", "ws://", 1) + "/ws"
    # A server with an API key takes it as a subprotocol, the way the chat page sends it.
    key = os.environ.get("TROUPE_API_KEY")
    protocols = ["troupe", "troupe.key." + key] if key else None
    if key:
        try:
            async with websockets.connect(url, max_size=1 << 22):
                raise AssertionError("the server let a WebSocket in without its API key")
        except websockets.exceptions.InvalidStatusCode as e:
            check(e.status_code == 401, f"no key: HTTP {e.status_code}, expected 401")
            print("no key: the handshake is refused with 401")
    async with websockets.connect(url, max_size=1 << 22, subprotocols=protocols) as ws:
        if key:
            check(ws.subprotocol == "troupe", f"the server chose subprotocol {ws.subprotocol!r}, expected 'troupe'")
        # 1. greedy start: streamed deltas, then done; the same text again.
        res = await collect_one(ws, "greedy-1", "Once upon a time", 32)
        text, n_deltas, done = res
        check_done(done, n_deltas, 32, "greedy")
        check(n_deltas >= 2 and text.strip(), f"greedy: {n_deltas} deltas, text {text!r}")
        print(f"greedy: {n_deltas} deltas, {done['usage']['completion_tokens']} tokens, "
              f"ttft {done['timings']['ttft_ms']:.2f} ms, {done['timings']['tokens_per_s']:.0f} tok/s: {text!r}")
        again = await collect_one(ws, "greedy-2", "Once upon a time", 32)
        check(again[0] == text, f"greedy twice: {again[0]!r} != {text!r}")
        print("greedy again: same text")

        # 2. two requests on one socket, each under its own id.
        await ws.send(start_msg("pair-a", "Lily and Tom", 24))
        await ws.send(start_msg("pair-b", "The cat sat", 24))
        pair = await collect(ws, ["pair-a", "pair-b"])
        for rid, (t, n, d) in pair.items():
            check_done(d, n, 24, rid)
            check(t.strip(), f"{rid}: empty text")
        print(f"two on one socket: {pair['pair-a'][1]} and {pair['pair-b'][1]} deltas")

        # 3. cancel after the first delta: done with finish_reason "cancelled", fewer tokens than asked.
        await ws.send(start_msg("long", "Once upon a time", 1900, temperature=0.8))
        first = await recv(ws)
        check(first["type"] == "delta" and first["id"] == "long", f"cancel: first message {first}")
        await ws.send(json.dumps({"type": "cancel", "id": "long"}))
        n_after = 0
        while True:
            msg = await recv(ws)
            check(msg.get("id") == "long", f"cancel: message for another id {msg}")
            if msg["type"] == "delta":
                n_after += 1
                continue
            break
        check(msg["type"] == "done", f"cancel: ended with {msg}")
        check(msg.get("finish_reason") == "cancelled", f"cancel: finish_reason {msg.get('finish_reason')}")
        generated = (msg.get("usage") or {}).get("completion_tokens", 0)
        check(generated < 1900, f"cancel: {generated} tokens, the cancel did not stop it")
        print(f"cancel: stopped after {generated} tokens ({n_after} deltas after the cancel)")

        # 4. a malformed start gets an error naming the request, and the socket stays usable.
        await ws.send(json.dumps({"type": "start", "id": "bad", "messages": "not a list"}))
        err = await recv(ws)
        check(err["type"] == "error" and err.get("id") == "bad" and err.get("message"), f"malformed start: {err}")
        print(f"malformed start: error {err['message']!r}")
        res = await collect_one(ws, "after-error", "Once upon a time", 8)
        check_done(res[2], res[1], 8, "after an error")
        print("the socket still works after an error")
    print("ws client: PASS")


async def collect_one(ws, req_id, text, max_tokens):
    await ws.send(start_msg(req_id, text, max_tokens))
    return (await collect(ws, [req_id]))[req_id]


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as e:  # noqa: BLE001 - the edge: report and fail
        print(f"ws client: FAIL: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
