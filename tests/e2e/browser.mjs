// Headless Chromium (Debian's /usr/bin/chromium, driven by playwright-core) on the chat page and the console:
//   /        type a message, send, see the reply's text grow delta by delta, then its speed line;
//            stop a second reply; screenshot chat.png
//   /admin   a wrong token is refused; the right one (from ?token=, then gone from the address) shows
//            the completed requests counted, the KV cache, plugins and config; under a load of 16 long
//            requests it lists them (screenshot admin.png) and cancels one; drain flips it to "draining"
//   TROUPE_BASE_URL=... TROUPE_ADMIN_TOKEN=... TROUPE_E2E_OUT=dir node browser.mjs   (run_e2e.py sets them)
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const base = process.env.TROUPE_BASE_URL;
const token = process.env.TROUPE_ADMIN_TOKEN;
const out_dir = process.env.TROUPE_E2E_OUT || ".";
const executable = process.env.TROUPE_CHROMIUM || "/usr/bin/chromium";
assert.ok(base && token, "TROUPE_BASE_URL and TROUPE_ADMIN_TOKEN must be set (run through run_e2e.py)");
fs.mkdirSync(out_dir, { recursive: true });

const page_errors = [];

// Every request a page makes goes to the server itself (no CDN, no web fonts: the pages work offline).
const foreign_requests = [];

function watch(page, name) {
    page.on("pageerror", (e) => page_errors.push(`${name}: ${e.message}`));
    page.on("request", (r) => {
        const u = r.url();
        if (!u.startsWith(base + "/") && !u.startsWith(base.replace("http://", "ws://") + "/") && !u.startsWith("data:")) {
            foreign_requests.push(`${name}: ${u}`);
        }
    });
    page.on("console", (m) => {
        if (m.type() === "error") console.log(`[${name} console] ${m.text()}`);
    });
}

async function chat(context) {
    const page = await context.newPage();
    watch(page, "chat");
    await page.goto(base + "/");
    await page.locator("#conn.conn-on").waitFor({ timeout: 15000 });
    // Record every length the reply's text takes, so streaming is seen even when the model is fast.
    await page.evaluate(() => {
        window.__lengths = [];
        new MutationObserver(() => {
            const b = document.querySelector(".msg-assistant.streaming .bubble");
            if (b) window.__lengths.push(b.textContent.length);
        }).observe(document.getElementById("log"), { subtree: true, childList: true, characterData: true });
    });
    await page.click(".settings summary");
    await page.fill("#temperature", "0");
    await page.fill("#max-tokens", "48");
    await page.fill("#input", "Once upon a time");
    await page.click("#send");
    await page.locator(".msg-user .bubble", { hasText: "Once upon a time" }).waitFor();
    await page.waitForFunction(() => document.body.dataset.state === "idle" && document.querySelector(".msg-assistant .meta").textContent, null, { timeout: 60000 });

    const reply = await page.locator(".msg-assistant .bubble").first().textContent();
    const meta = await page.locator(".msg-assistant .meta").first().textContent();
    const lengths = await page.evaluate(() => window.__lengths);
    const growth = [...new Set(lengths.filter((n) => n > 0))];
    console.log(`chat: reply ${JSON.stringify(reply)}`);
    console.log(`chat: stats "${meta}"; text grew through ${growth.length} lengths`);
    assert.ok(reply.trim().length > 0, "the reply is empty");
    assert.ok(growth.length >= 2, `the reply did not stream: lengths seen ${JSON.stringify(lengths)}`);
    for (let i = 1; i < growth.length; i++) assert.ok(growth[i] > growth[i - 1], `the reply's text shrank: ${growth}`);
    assert.match(meta, /\d+ tokens/);
    assert.match(meta, /tok\/s/);
    assert.match(meta, /TTFT \d/);

    // A second turn, stopped with the Stop button the moment its first text shows (this model writes
    // thousands of tokens a second, faster than a round trip from this script, so the page itself clicks).
    await page.fill("#temperature", "0.8");
    await page.fill("#max-tokens", "1900");
    await page.evaluate(() => {
        const obs = new MutationObserver(() => {
            const b = document.querySelectorAll(".msg-assistant .bubble")[1];
            if (b && b.textContent.length > 0) {
                obs.disconnect();
                document.getElementById("stop").click();
            }
        });
        obs.observe(document.getElementById("log"), { subtree: true, childList: true, characterData: true });
    });
    await page.fill("#input", "Tell me a long story about Tom");
    await page.click("#send");
    await page.locator(".msg-assistant").nth(1).waitFor();
    await page.waitForFunction(() => document.body.dataset.state === "idle", null, { timeout: 15000 });
    const meta2 = await page.locator(".msg-assistant .meta").nth(1).textContent();
    console.log(`chat: second reply stopped: "${meta2}"`);
    assert.match(meta2, /stopped/, "the stopped reply does not say so");
    const n_stopped = parseInt(meta2, 10);
    assert.ok(n_stopped >= 1 && n_stopped < 1900, `the stop did not stop the reply: ${meta2}`);
    assert.equal(await page.locator(".msg").count(), 4, "the conversation should hold two turns");

    // The conversation survives a reload.
    await page.reload();
    await page.locator("#conn.conn-on").waitFor({ timeout: 15000 });
    assert.equal(await page.locator(".msg").count(), 4, "the conversation was lost on reload");
    assert.equal(await page.locator(".msg-assistant .bubble").first().textContent(), reply);

    await page.screenshot({ path: path.join(out_dir, "chat.png") });
    console.log(`chat: screenshot ${path.join(out_dir, "chat.png")}`);
    await page.close();
}

async function admin(context) {
    // A wrong token: the console shows the token form with the refusal.
    const bad = await context.newPage();
    watch(bad, "admin-bad-token");
    await bad.goto(base + "/admin?token=wrong-" + token);
    await bad.locator("#login-error", { hasText: "refused" }).waitFor({ timeout: 15000 });
    assert.ok(await bad.locator("#console").isHidden());
    console.log("admin: a wrong token is refused");
    await bad.close();

    const page = await context.newPage();
    watch(page, "admin");
    await page.goto(base + "/admin?token=" + encodeURIComponent(token));
    await page.locator("#console").waitFor({ state: "visible", timeout: 15000 });
    assert.ok(!page.url().includes("token="), `the token stayed in the address: ${page.url()}`);
    await page.waitForFunction(() => parseInt(document.getElementById("n-completed").textContent.replace(/,/g, ""), 10) >= 1, null, { timeout: 15000 });
    const completed = await page.locator("#n-completed").textContent();
    const cancelled = await page.locator("#n-cancelled").textContent();
    const kv_total = await page.locator("#kv-total").textContent();
    const config = await page.locator("#config").textContent();
    const plugins = await page.locator("#plugins").textContent();
    console.log(`admin: completed ${completed}, cancelled ${cancelled}, KV blocks ${kv_total}, plugins "${plugins.trim()}"`);
    assert.ok(parseInt(kv_total.replace(/,/g, ""), 10) > 0, "no KV blocks shown");
    assert.ok(config.length > 10 && config !== "—", "no effective config shown");
    assert.equal(await page.locator("#error").textContent(), "");
    // Load: 16 long requests on one WebSocket from the page (the driver runs this server with 2 sequences
    // per step, so most wait). The console lists them with their state; the picture is taken then.
    const n_cancelled_before = parseInt(cancelled.replace(/,/g, ""), 10);
    await page.evaluate(() => new Promise((resolve) => {
        window.__load = { ends: {}, ws: new WebSocket("ws://" + location.host + "/ws") };
        window.__load.ws.onmessage = (e) => {
            const m = JSON.parse(e.data);
            if (m.type === "done" || m.type === "error") window.__load.ends[m.id] = m.finish_reason || "error: " + m.message;
        };
        window.__load.ws.onopen = () => {
            for (let i = 0; i < 16; i++) {
                window.__load.ws.send(JSON.stringify({ type: "start", id: "load-" + i, messages: [{ role: "user", content: "Tom and Lily " + i }],
                    params: { temperature: 0.8, max_tokens: 1900 } }));
            }
            resolve();
        };
    }));
    await page.locator("#requests tbody tr[data-id]").first().waitFor({ timeout: 20000 });
    const rows = await page.locator("#requests tbody tr[data-id]").count();
    const states = await page.locator("#requests tbody .state").allTextContents();
    console.log(`admin: ${rows} requests listed: ${[...new Set(states)].join(", ")}`);
    await page.screenshot({ path: path.join(out_dir, "admin.png"), fullPage: true });
    console.log(`admin: screenshot ${path.join(out_dir, "admin.png")}`);

    // Cancel the newest listed request from the console: the count goes up, and its stream ends with an
    // error saying the server cancelled it (the client did not ask: not a "done" with "cancelled").
    const last = page.locator("#requests tbody tr[data-id]").last();
    const cancel_id = await last.getAttribute("data-id");
    await last.locator("button.cancel").click();
    await page.waitForFunction((before) => parseInt(document.getElementById("n-cancelled").textContent.replace(/,/g, ""), 10) > before,
        n_cancelled_before, { timeout: 20000 });
    await page.waitForFunction(() => Object.values(window.__load.ends).some((e) => e.startsWith("error:") && e.includes("cancelled by the server")),
        null, { timeout: 20000 });
    console.log(`admin: cancelled request ${cancel_id} from the console; its WebSocket stream ended with the server's error`);
    await page.evaluate(() => window.__load.ws.close());
    assert.equal(await page.locator("#error").textContent(), "");
    assert.equal(await page.locator("#updated").textContent(), "live");

    // Drain: two clicks (the second confirms); the server stops accepting.
    await page.click("#drain");
    await page.locator("#drain", { hasText: "Confirm drain" }).waitFor();
    await page.click("#drain");
    await page.locator("#accepting", { hasText: "draining" }).waitFor({ timeout: 15000 });
    console.log("admin: drained (the console shows 'draining')");
    await page.close();
}

async function main() {
    const profile = fs.mkdtempSync(path.join(os.tmpdir(), "troupe-e2e-chromium-"));
    const context = await chromium.launchPersistentContext(profile, {
        executablePath: executable,
        headless: true,
        viewport: { width: 1200, height: 820 },
        args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"],
    });
    try {
        await chat(context);
        await admin(context);
    } finally {
        await context.close();
        fs.rmSync(profile, { recursive: true, force: true });
    }
    assert.deepEqual(page_errors, [], "uncaught errors in the pages");
    assert.deepEqual(foreign_requests, [], "the pages fetched something from elsewhere than the server");
    console.log("browser: PASS");
}

main().catch((e) => {
    console.error("browser: FAIL:", e && e.stack ? e.stack : e);
    if (page_errors.length) console.error("page errors:", page_errors.join("\n"));
    process.exit(1);
});
