// The official `openai` npm package against `troupe serve` for function calling (tools, tool_choice, tool
// turns), on a copy of stories260K whose GGUF carries a Llama 3.1-style tool template (tools_template.jinja,
// written into the copy by run_e2e.py --clients tools). stories260K writes random text, so the reply that
// must be a call is made one by constrained decoding (response_format: the call's JSON schema): the model's
// real output then goes through the server's llama3 tool-call parsing, whole and streamed; tool_choice required
// and a named function force the call through the server's own call schema; chat_template_kwargs is taken as
// template variables and one naming a variable the server sets is refused.
//   node openai_tools.mjs            (TROUPE_BASE_URL=http://127.0.0.1:PORT, set by run_e2e.py)
import assert from "node:assert/strict";
import OpenAI from "openai";

const base = process.env.TROUPE_BASE_URL;
assert.ok(base, "TROUPE_BASE_URL is not set (run through run_e2e.py)");
const client = new OpenAI({ baseURL: base + "/v1", apiKey: process.env.TROUPE_API_KEY || "unused", maxRetries: 0, timeout: 120000 });

const tools = [{
    type: "function",
    function: {
        name: "get_weather",
        description: "the weather of a city",
        parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
}];
// The only reply the schema allows: a call of get_weather for Paris in the template's format.
const call_schema = {
    type: "object",
    properties: {
        name: { const: "get_weather" },
        parameters: { type: "object", properties: { city: { const: "Paris" } }, required: ["city"], additionalProperties: false },
    },
    required: ["name", "parameters"],
    additionalProperties: false,
};
const as_call = { type: "json_schema", json_schema: { name: "call", schema: call_schema, strict: true } };
const question = [{ role: "user", content: "Weather in Paris?" }];

// The tools and the tool turns reach the model's template: each makes the prompt longer.
async function check_rendering(model) {
    const plain = await client.chat.completions.create({ model, messages: question, max_tokens: 1, temperature: 0 });
    const with_tools = await client.chat.completions.create({ model, messages: question, tools, max_tokens: 1, temperature: 0 });
    assert.ok(with_tools.usage.prompt_tokens > plain.usage.prompt_tokens + 10,
        `tools did not reach the template: ${with_tools.usage.prompt_tokens} vs ${plain.usage.prompt_tokens} prompt tokens`);
    const turns = [...question,
        { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Paris\"}" } }] },
        { role: "tool", tool_call_id: "call_1", content: "18 degrees and sunny" }];
    const answered = await client.chat.completions.create({ model, messages: turns, tools, max_tokens: 8, temperature: 0 });
    assert.ok(answered.usage.prompt_tokens > with_tools.usage.prompt_tokens + 10,
        `the tool turns did not reach the template: ${answered.usage.prompt_tokens} prompt tokens`);
    assert.equal(typeof answered.choices[0].message.role, "string");
    console.log(`rendering: ${plain.usage.prompt_tokens} prompt tokens, ${with_tools.usage.prompt_tokens} with tools, ${answered.usage.prompt_tokens} with the tool turns`);
}

function check_call(call, where) {
    assert.ok(/^call_/.test(call.id), `${where}: id ${call.id}`);
    assert.equal(call.type, "function", where);
    assert.equal(call.function.name, "get_weather", where);
    assert.deepEqual(JSON.parse(call.function.arguments), { city: "Paris" }, where);
}

// The model's reply, a call in the llama3 format, comes back as tool_calls with finish_reason "tool_calls".
async function check_call_parsed(model) {
    const r = await client.chat.completions.create({ model, messages: question, tools, tool_choice: "auto", response_format: as_call, temperature: 0, max_tokens: 200 });
    const c = r.choices[0];
    assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
    assert.equal(c.message.content, null, JSON.stringify(c.message));
    assert.equal(c.message.tool_calls.length, 1);
    check_call(c.message.tool_calls[0], "whole");

    const stream = await client.chat.completions.create({ model, messages: question, tools, response_format: as_call, temperature: 0, max_tokens: 200, stream: true });
    const calls = [];
    let content = "";
    let finish = null;
    for await (const chunk of stream) {
        for (const ch of chunk.choices) {
            content += (ch.delta && ch.delta.content) || "";
            for (const t of (ch.delta && ch.delta.tool_calls) || []) {
                calls[t.index] = calls[t.index] || { id: "", type: "", function: { name: "", arguments: "" } };
                if (t.id) calls[t.index].id = t.id;
                if (t.type) calls[t.index].type = t.type;
                if (t.function && t.function.name) calls[t.index].function.name += t.function.name;
                if (t.function && t.function.arguments) calls[t.index].function.arguments += t.function.arguments;
            }
            if (ch.finish_reason) finish = ch.finish_reason;
        }
    }
    assert.equal(finish, "tool_calls");
    assert.equal(content, "", `streamed content beside the call: ${content}`);
    assert.equal(calls.length, 1);
    check_call(calls[0], "streamed");

    // tool_choice none: the same reply is text.
    const none = await client.chat.completions.create({ model, messages: question, tools, tool_choice: "none", response_format: as_call, temperature: 0, max_tokens: 200 });
    assert.equal(none.choices[0].finish_reason, "stop");
    assert.equal(none.choices[0].message.tool_calls, undefined);
    assert.deepEqual(JSON.parse(none.choices[0].message.content), { name: "get_weather", parameters: { city: "Paris" } });
    console.log(`tool call: ${JSON.stringify(c.message.tool_calls[0])}`);
}

// tool_choice required / named: the template's calls are plain JSON (llama3 format), so the reply is held to
// the calls' schema and is a call whatever the model would have written.
async function check_forced(model) {
    const clock = { type: "function", function: { name: "get_time", description: "the time in a zone",
        parameters: { type: "object", properties: { zone: { enum: ["UTC", "CET"] } }, required: ["zone"], additionalProperties: false } } };
    const r = await client.chat.completions.create({ model, messages: question, tools: [clock], tool_choice: "required", temperature: 0, max_tokens: 200 });
    assert.equal(r.choices[0].finish_reason, "tool_calls", JSON.stringify(r.choices[0]));
    const call = r.choices[0].message.tool_calls[0];
    assert.equal(call.function.name, "get_time");
    assert.ok(["UTC", "CET"].includes(JSON.parse(call.function.arguments).zone), call.function.arguments);
    const named = await client.chat.completions.create({ model, messages: question, tools: [...tools, clock],
        tool_choice: { type: "function", function: { name: "get_time" } }, temperature: 0, max_tokens: 200 });
    assert.equal(named.choices[0].finish_reason, "tool_calls", JSON.stringify(named.choices[0]));
    assert.equal(named.choices[0].message.tool_calls[0].function.name, "get_time");
    console.log(`forced: ${call.function.name} ${call.function.arguments}`);
}

async function check_refusals(model) {
    await assert.rejects(
        client.chat.completions.create({ model, messages: question, tools, tool_choice: { type: "function", function: { name: "nope" } } }),
        (e) => {
            assert.equal(e.status, 400);
            assert.equal(e.param, "tool_choice");
            return true;
        });
    await assert.rejects(
        client.chat.completions.create({ model, messages: question, tools: [{ type: "function", function: { name: "bad name" } }] }),
        (e) => {
            assert.equal(e.status, 400);
            assert.ok(/tools\[0\]\.function\.name/.test(e.message), e.message);
            return true;
        });
}

// chat_template_kwargs as vLLM's and llama-server's clients send it (a body field the package passes on):
// accepted as template variables; one naming a variable the server sets is a 400 naming it.
async function check_template_kwargs(model) {
    const r = await client.chat.completions.create({ model, messages: question, max_tokens: 4,
        chat_template_kwargs: { enable_thinking: false } });
    assert.equal(r.object, "chat.completion");
    await assert.rejects(
        client.chat.completions.create({ model, messages: question, chat_template_kwargs: { tools: [] } }),
        (e) => {
            assert.equal(e.status, 400);
            assert.equal(e.param, "chat_template_kwargs");
            assert.ok(/chat_template_kwargs\.tools/.test(e.message), e.message);
            return true;
        });
}

async function main() {
    const model = (await client.models.list()).data[0].id;
    await check_rendering(model);
    await check_call_parsed(model);
    await check_forced(model);
    await check_refusals(model);
    await check_template_kwargs(model);
    console.log("openai tools: PASS");
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
