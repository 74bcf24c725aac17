// The official `openai` npm package against `troupe serve --api-key K`: the key is what the SDK sends
// (Authorization: Bearer K); a wrong key is the SDK's AuthenticationError (401) with OpenAI's error body;
// GET /v1/models/{id} through models.retrieve (an unknown id: NotFoundError, code model_not_found); an
// explicit max_tokens past the context is a BadRequestError with code context_length_exceeded; and
// llama-server's /tokenize and /detokenize answer with the key.
//   node openai_api_key.mjs   (TROUPE_BASE_URL and TROUPE_API_KEY set by run_e2e.py)
import assert from "node:assert/strict";
import OpenAI from "openai";

const base = process.env.TROUPE_BASE_URL;
const key = process.env.TROUPE_API_KEY;
assert.ok(base && key, "TROUPE_BASE_URL and TROUPE_API_KEY must be set (run through run_e2e.py with the secure client)");
const options = { baseURL: base + "/v1", maxRetries: 0, timeout: 60000 };
const client = new OpenAI({ ...options, apiKey: key });

async function rejects_with(promise, Type, status, code, what) {
    await assert.rejects(promise, (e) => {
        assert.ok(e instanceof Type, `${what}: expected ${Type.name}, got ${e && e.constructor && e.constructor.name}: ${e}`);
        assert.equal(e.status, status, `${what}: HTTP ${e.status}`);
        if (code) assert.equal(e.code, code, `${what}: code ${e.code}`);
        return true;
    });
    console.log(`${what}: ${Type.name} ${status}${code ? " " + code : ""} as expected`);
}

async function main() {
    const wrong = new OpenAI({ ...options, apiKey: "sk-not-the-key" });
    await rejects_with(wrong.models.list(), OpenAI.AuthenticationError, 401, "invalid_api_key", "wrong key, models.list");
    await rejects_with(
        wrong.chat.completions.create({ model: "x", messages: [{ role: "user", content: "Hi" }], max_tokens: 4 }),
        OpenAI.AuthenticationError, 401, "invalid_api_key", "wrong key, chat.completions.create");

    const list = await client.models.list();
    const model = list.data[0];
    assert.ok(model && model.id, "models.list with the key: no model");
    const one = await client.models.retrieve(model.id);
    assert.equal(one.id, model.id);
    assert.equal(one.object, "model");
    console.log(`models.retrieve(${JSON.stringify(model.id)}): ${one.object}, owned by ${one.owned_by}`);
    await rejects_with(client.models.retrieve("no-such-model"), OpenAI.NotFoundError, 404, "model_not_found",
        "models.retrieve of an unknown id");

    const n_ctx = model.context_length;
    assert.ok(n_ctx > 0, `/v1/models has no context_length: ${JSON.stringify(model)}`);
    await rejects_with(
        client.completions.create({ model: model.id, prompt: "Once upon a time", max_tokens: n_ctx }),
        OpenAI.BadRequestError, 400, "context_length_exceeded", `max_tokens ${n_ctx} past the context`);

    const headers = { Authorization: `Bearer ${key}`, "Content-Type": "application/json" };
    const tok = await fetch(base + "/tokenize", { method: "POST", headers, body: JSON.stringify({ content: "Once upon a time" }) });
    assert.equal(tok.status, 200);
    const { tokens } = await tok.json();
    const detok = await fetch(base + "/detokenize", { method: "POST", headers, body: JSON.stringify({ tokens }) });
    assert.equal(detok.status, 200);
    assert.equal((await detok.json()).content, "Once upon a time");
    const no_key = await fetch(base + "/tokenize", { method: "POST", body: JSON.stringify({ content: "a" }) });
    assert.equal(no_key.status, 401, "/tokenize without the key");
    console.log(`/tokenize -> ${tokens.length} tokens -> /detokenize gives the text back; without the key 401`);
    console.log("openai api key: PASS");
}

main().catch((e) => {
    console.error("openai api key: FAIL:", e && e.stack ? e.stack : e);
    process.exit(1);
});
