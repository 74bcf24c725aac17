// The official `openai` npm package against `troupe serve` for the features clients use beyond one plain
// completion: n > 1, best_of, several prompts with echo, echo with logprobs, logit_bias, and response_format (json_object and
// json_schema by constrained decoding), streamed and not.
//   node openai_features.mjs            (TROUPE_BASE_URL=http://127.0.0.1:PORT, set by run_e2e.py)
import assert from "node:assert/strict";
import OpenAI from "openai";

const base = process.env.TROUPE_BASE_URL;
assert.ok(base, "TROUPE_BASE_URL is not set (run through run_e2e.py)");
const client = new OpenAI({ baseURL: base + "/v1", apiKey: process.env.TROUPE_API_KEY || "unused", maxRetries: 0, timeout: 120000 });

async function served_model() {
    const list = await client.models.list();
    return list.data[0].id;
}

// n: choices indexed 0..n-1, each its own sample (seed + index), choice 0 the n = 1 answer; usage adds up.
async function check_n(model) {
    const messages = [{ role: "user", content: "Lily and Tom" }];
    const common = { model, messages, max_tokens: 16, temperature: 1, seed: 11 };
    const three = await client.chat.completions.create({ ...common, n: 3 });
    assert.equal(three.choices.length, 3);
    assert.deepEqual(three.choices.map((c) => c.index), [0, 1, 2]);
    const one = await client.chat.completions.create({ ...common, n: 1 });
    assert.equal(three.choices[0].message.content, one.choices[0].message.content, "choice 0 differs from n = 1");
    assert.equal(three.usage.prompt_tokens, one.usage.prompt_tokens, "prompt tokens are counted once");
    assert.ok(three.usage.completion_tokens > one.usage.completion_tokens && three.usage.completion_tokens <= 3 * 16,
        `completion tokens of three choices: ${three.usage.completion_tokens}`);
    const texts = new Set(three.choices.map((c) => c.message.content));
    assert.ok(texts.size > 1, `n = 3 at temperature 1 gave the same text three times: ${[...texts]}`);

    // Streamed: every chunk names its choice; each choice's text equals the non-streamed one.
    const stream = await client.chat.completions.create({ ...common, n: 3, stream: true, stream_options: { include_usage: true } });
    const streamed = ["", "", ""];
    const finished = [null, null, null];
    let usage = null;
    for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices) {
            if (c.delta && c.delta.content) streamed[c.index] += c.delta.content;
            if (c.finish_reason) finished[c.index] = c.finish_reason;
        }
    }
    assert.deepEqual(streamed, three.choices.map((c) => c.message.content), "streamed choices differ");
    assert.deepEqual(finished, three.choices.map((c) => c.finish_reason));
    assert.deepEqual(usage, three.usage);
    console.log(`n = 3: ${JSON.stringify(three.choices.map((c) => c.message.content))}, streamed the same`);
}

// Several prompts with echo: index = prompt * n + choice, each text starting with its prompt.
async function check_prompts_and_echo(model) {
    const prompts = ["Once upon a time", "The cat"];
    const r = await client.completions.create({ model, prompt: prompts, n: 2, echo: true, max_tokens: 8, temperature: 1, seed: 3 });
    assert.equal(r.choices.length, 4);
    r.choices.forEach((c, i) => {
        assert.equal(c.index, i);
        assert.ok(c.text.startsWith(prompts[Math.floor(i / 2)]), `choice ${i} does not start with its prompt: ${c.text}`);
        assert.ok(c.text.length > prompts[Math.floor(i / 2)].length, `choice ${i} has no completion`);
    });
    const alone = await client.completions.create({ model, prompt: prompts[1], max_tokens: 8, temperature: 1, seed: 3 });
    assert.equal(r.choices[2].text, prompts[1] + alone.choices[0].text, "the second prompt's first choice differs from it alone");
    console.log(`two prompts x n = 2 with echo: ${JSON.stringify(r.choices.map((c) => c.text))}`);
}

// Echo with logprobs: tokens, token_logprobs, top_logprobs and text_offset cover the prompt's tokens (the first
// with null logprobs) and then the generated ones, which are those the same request without echo reports.
async function check_echo_logprobs(model) {
    const common = { model, prompt: "The cat sat on the", max_tokens: 6, temperature: 0, logprobs: 2 };
    const plain = await client.completions.create(common);
    const r = await client.completions.create({ ...common, echo: true });
    const lp = r.choices[0].logprobs;
    const gen = plain.choices[0].logprobs;
    assert.ok(r.choices[0].text.startsWith(common.prompt), `echoed text does not start with the prompt: ${r.choices[0].text}`);
    assert.equal(r.choices[0].text, common.prompt + plain.choices[0].text);
    const n_prompt = lp.tokens.length - gen.tokens.length;
    assert.ok(n_prompt >= 2, `only ${n_prompt} prompt tokens in logprobs`);
    assert.equal(lp.token_logprobs[0], null, "the first prompt token has a logprob");
    assert.equal(lp.top_logprobs[0], null);
    for (let i = 1; i < n_prompt; ++i) {
        assert.ok(lp.token_logprobs[i] <= 0, `prompt token ${i}: logprob ${lp.token_logprobs[i]}`);
        assert.equal(Object.keys(lp.top_logprobs[i]).length, 2, `prompt token ${i}: top_logprobs`);
    }
    assert.deepEqual(lp.tokens.slice(n_prompt), gen.tokens);
    lp.token_logprobs.slice(n_prompt).forEach((x, i) => assert.ok(Math.abs(x - gen.token_logprobs[i]) < 1e-4));
    assert.equal(lp.text_offset.length, lp.tokens.length);
    for (let i = 1; i < lp.tokens.length; ++i) assert.equal(lp.text_offset[i], lp.text_offset[i - 1] + Buffer.byteLength(lp.tokens[i - 1]));
    console.log(`echo with logprobs: ${n_prompt} prompt tokens ${JSON.stringify(lp.token_logprobs.slice(0, n_prompt))}`);
}

// best_of: the n returned are the most likely (cumulative logprob) of best_of samples, which are the n = best_of
// choices of the same seed.
async function check_best_of(model) {
    const common = { model, prompt: "Tom had a", max_tokens: 10, temperature: 1, seed: 21 };
    const all = await client.completions.create({ ...common, n: 4, logprobs: 0 });
    const sums = all.choices.map((c) => c.logprobs.token_logprobs.reduce((a, b) => a + b, 0));
    const best = await client.completions.create({ ...common, n: 1, best_of: 4 });
    assert.equal(best.choices.length, 1);
    assert.equal(best.choices[0].logprobs, null, "logprobs were not asked for");
    const top = sums.indexOf(Math.max(...sums));
    assert.equal(best.choices[0].text, all.choices[top].text, `best_of picked another choice (sums ${sums})`);
    assert.equal(best.usage.completion_tokens, all.usage.completion_tokens, "best_of counts every sampled token");
    console.log(`best_of 4: picked choice ${top} of cumulative logprobs ${sums.map((s) => s.toFixed(2)).join(", ")}`);
}

// logit_bias: +100 makes one token the only choice (the text repeats its piece); -100 bans it even against +100
// elsewhere.
async function check_logit_bias(model) {
    const common = { model, prompt: "Once upon a time", max_tokens: 4, temperature: 0 };
    const forced = await client.completions.create({ ...common, logit_bias: { 300: 100 } });
    const t = forced.choices[0].text;
    assert.ok(t.length % 4 === 0 && t === t.slice(0, t.length / 4).repeat(4), `+100 did not force one token: ${JSON.stringify(t)}`);
    const other = await client.completions.create({ ...common, logit_bias: { 300: -100, 301: 100 } });
    const u = other.choices[0].text;
    assert.ok(u === u.slice(0, u.length / 4).repeat(4), `+100 did not force token 301: ${JSON.stringify(u)}`);
    assert.notEqual(u.slice(0, u.length / 4), t.slice(0, t.length / 4), "-100 did not ban token 300");
    await assert.rejects(client.completions.create({ ...common, logit_bias: { 999999: 1 } }), (e) => e.status === 400);
    console.log(`logit_bias: +100 on 300 gives ${JSON.stringify(t)}, on 301 ${JSON.stringify(u)}`);
}

const person = {
    type: "object",
    properties: {
        name: { type: "string", maxLength: 12 },
        age: { type: "integer" },
        mood: { enum: ["happy", "sad", "sleepy"] },
        friends: { type: "array", items: { type: "string", maxLength: 10 }, maxItems: 3 },
        pet: { type: "boolean" },
    },
    required: ["name", "age", "mood", "friends"],
    additionalProperties: false,
};

function check_person(v, text) {
    assert.equal(typeof v, "object", text);
    const keys = Object.keys(v);
    for (const k of keys) assert.ok(k in person.properties, `unexpected key ${k}: ${text}`);
    for (const k of person.required) assert.ok(k in v, `missing ${k}: ${text}`);
    assert.equal(typeof v.name, "string", text);
    assert.ok([...v.name].length <= 12, text);
    assert.ok(Number.isInteger(v.age), text);
    assert.ok(person.properties.mood.enum.includes(v.mood), text);
    assert.ok(Array.isArray(v.friends) && v.friends.length <= 3, text);
    for (const f of v.friends) assert.ok(typeof f === "string" && [...f].length <= 10, text);
    if ("pet" in v) assert.equal(typeof v.pet, "boolean", text);
}

// response_format: sampled at temperature 1, every answer parses and matches the schema, streamed or not;
// json_object gives an object; a schema troupe cannot enforce is a 400.
async function check_response_format(model) {
    const messages = [{ role: "user", content: "Tell me about Lily" }];
    const response_format = { type: "json_schema", json_schema: { name: "person", schema: person, strict: true } };
    for (let seed = 1; seed <= 8; seed++) {
        const r = await client.chat.completions.create({ model, messages, response_format, temperature: 1, seed, max_tokens: 300 });
        const text = r.choices[0].message.content;
        assert.equal(r.choices[0].finish_reason, "stop", `seed ${seed}: did not end with the JSON: ${text}`);
        check_person(JSON.parse(text), text);
    }
    const stream = await client.chat.completions.create({ model, messages, response_format, temperature: 1, seed: 99, max_tokens: 300, stream: true });
    let text = "";
    for await (const chunk of stream) for (const c of chunk.choices) text += (c.delta && c.delta.content) || "";
    check_person(JSON.parse(text), text);
    const obj = await client.chat.completions.create({ model, messages, response_format: { type: "json_object" }, temperature: 1, seed: 5, max_tokens: 200 });
    const o = obj.choices[0].message.content;
    if (obj.choices[0].finish_reason === "stop") {
        const v = JSON.parse(o);
        assert.ok(v !== null && typeof v === "object" && !Array.isArray(v), o);
    }
    await assert.rejects(
        client.chat.completions.create({ model, messages, response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", format: "ipv6" } } } }),
        (e) => {
            assert.equal(e.status, 400);
            assert.ok(/format 'ipv6' is not supported/.test(e.message), e.message);
            return true;
        },
    );
    console.log(`response_format: 9 schema answers valid (e.g. ${text}), json_object ${obj.choices[0].finish_reason}`);
}

async function main() {
    const model = await served_model();
    await check_n(model);
    await check_prompts_and_echo(model);
    await check_echo_logprobs(model);
    await check_best_of(model);
    await check_logit_bias(model);
    await check_response_format(model);
    console.log("openai features: PASS");
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
