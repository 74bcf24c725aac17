// The official `openai` npm package against `troupe serve`: a chat completion without and with streaming,
// greedy, so the streamed text must equal the whole one; usage must add up; a bad request is a 400.
//   node openai_client.mjs            (TROUPE_BASE_URL=http://127.0.0.1:PORT, set by run_e2e.py)
import assert from "node:assert/strict";
import OpenAI from "openai";

const base = process.env.TROUPE_BASE_URL;
assert.ok(base, "TROUPE_BASE_URL is not set (run through run_e2e.py)");
const client = new OpenAI({ baseURL: base + "/v1", apiKey: process.env.TROUPE_API_KEY || "unused", maxRetries: 0, timeout: 60000 });

const MAX_TOKENS = 24;
const messages = [{ role: "user", content: "Once upon a time" }];

function check_usage(usage, what) {
    assert.ok(usage, `${what}: no usage`);
    assert.ok(usage.prompt_tokens > 0, `${what}: prompt_tokens ${usage.prompt_tokens}`);
    assert.ok(usage.completion_tokens > 0 && usage.completion_tokens <= MAX_TOKENS, `${what}: completion_tokens ${usage.completion_tokens}`);
    assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens, `${what}: total_tokens`);
}

async function main() {
    // The model the server names, or any name when it has no /v1/models.
    let model = "troupe";
    try {
        const list = await client.models.list();
        if (list.data && list.data.length) model = list.data[0].id;
        console.log(`models: ${list.data.map((m) => m.id).join(", ")}`);
    } catch (e) {
        console.log(`models: /v1/models not available (${e.status || e.message}); using '${model}'`);
    }

    const whole = await client.chat.completions.create({ model, messages, max_tokens: MAX_TOKENS, temperature: 0 });
    assert.equal(whole.object, "chat.completion");
    assert.equal(whole.choices.length, 1);
    const choice = whole.choices[0];
    assert.equal(choice.message.role, "assistant");
    assert.equal(typeof choice.message.content, "string");
    assert.ok(choice.message.content.trim().length > 0, "non-streamed completion is empty");
    assert.ok(["length", "stop"].includes(choice.finish_reason), `finish_reason ${choice.finish_reason}`);
    check_usage(whole.usage, "non-streamed");
    if (choice.finish_reason === "length") assert.equal(whole.usage.completion_tokens, MAX_TOKENS);
    console.log(`non-streamed: ${whole.usage.completion_tokens} tokens, ${choice.finish_reason}: ${JSON.stringify(choice.message.content)}`);

    const stream = await client.chat.completions.create({
        model, messages, max_tokens: MAX_TOKENS, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    let text = "", n_chunks = 0, n_text_chunks = 0, finish_reason = null, usage = null, role = null;
    for await (const chunk of stream) {
        n_chunks++;
        assert.equal(chunk.object, "chat.completion.chunk");
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices || []) {
            if (c.delta && c.delta.role) role = c.delta.role;
            if (c.delta && typeof c.delta.content === "string" && c.delta.content.length) {
                text += c.delta.content;
                n_text_chunks++;
            }
            if (c.finish_reason) finish_reason = c.finish_reason;
        }
    }
    assert.equal(role, "assistant", "no chunk named the assistant role");
    assert.ok(n_text_chunks > 1, `the text came in ${n_text_chunks} chunk(s), not streamed`);
    assert.equal(text, choice.message.content, "greedy: the streamed text differs from the non-streamed text");
    assert.equal(finish_reason, choice.finish_reason);
    check_usage(usage, "streamed (stream_options.include_usage)");
    assert.deepEqual(usage, whole.usage, "streamed usage differs from non-streamed usage");
    console.log(`streamed: ${n_text_chunks} text chunks of ${n_chunks}, same text and usage as non-streamed`);

    // A request the server must refuse: the SDK raises an APIError with the HTTP status.
    await assert.rejects(
        client.chat.completions.create({ model, messages: [], max_tokens: 4 }),
        (e) => {
            assert.ok(e instanceof OpenAI.APIError, `expected an APIError, got ${e}`);
            assert.equal(e.status, 400, `empty messages: HTTP ${e.status}`);
            return true;
        },
    );
    console.log("empty messages: 400 as expected");
    console.log("openai client: PASS");
}

main().catch((e) => {
    console.error("openai client: FAIL:", e && e.stack ? e.stack : e);
    process.exit(1);
});
