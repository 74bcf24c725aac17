// Headless Chromium (playwright-core, /usr/bin/chromium) on the chat page of `troupe serve --api-key K`:
// without a key the page says it needs one (the WebSocket handshake is refused with 401); a key typed
// under Settings connects it and a reply streams; ?key=K connects at once and leaves the address
// without the key; a wrong ?key= says so. The page sends the key as the subprotocol troupe.key.K.
//   TROUPE_BASE_URL=... TROUPE_API_KEY=... TROUPE_E2E_OUT=dir node browser_key.mjs   (run_e2e.py sets them)
import assert from "node:assert/strict";
import path from "node:path";
import { chromium } from "playwright-core";

const base = process.env.TROUPE_BASE_URL;
const key = process.env.TROUPE_API_KEY;
const out_dir = process.env.TROUPE_E2E_OUT || ".";
const executable = process.env.TROUPE_CHROMIUM || "/usr/bin/chromium";
assert.ok(base && key, "TROUPE_BASE_URL and TROUPE_API_KEY must be set (run through run_e2e.py)");

const page_errors = [];

async function open(browser, url) {
    const context = await browser.newContext();
    const page = await context.newPage();
    page.on("pageerror", (e) => page_errors.push(e.message));
    await page.goto(url);
    return { context, page };
}

async function reply_streams(page) {
    await page.evaluate(() => { document.querySelector("details.settings").open = true; });
    await page.fill("#temperature", "0");
    await page.fill("#max-tokens", "24");
    await page.fill("#input", "Once upon a time");
    await page.click("#send");
    await page.waitForFunction(
        () => document.body.dataset.state === "idle" && document.querySelector(".msg-assistant .meta").textContent,
        null, { timeout: 60000 });
    const reply = await page.locator(".msg-assistant .bubble").first().textContent();
    assert.ok(reply.trim().length > 0, "the reply is empty");
    return reply;
}

async function main() {
    const browser = await chromium.launch({
        executablePath: executable,
        headless: true,
        args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"],
    });
    try {
        // No key: the page says so and opens Settings at the key field.
        const bare = await open(browser, base + "/");
        await bare.page.locator("#conn", { hasText: "API key needed" }).waitFor({ timeout: 15000 });
        console.log("no key: the page says an API key is needed");
        await bare.page.fill("#api-key", key);
        await bare.page.$eval("#api-key", (el) => el.blur());
        await bare.page.locator("#conn.conn-on").waitFor({ timeout: 15000 });
        const reply = await reply_streams(bare.page);
        console.log(`key typed under Settings: connected, reply ${JSON.stringify(reply)}`);
        await bare.page.screenshot({ path: path.join(out_dir, "chat-key.png"), fullPage: true });
        await bare.context.close();

        // ?key=K: connected at once, and the key leaves the address bar.
        const linked = await open(browser, base + "/?key=" + encodeURIComponent(key));
        await linked.page.locator("#conn.conn-on").waitFor({ timeout: 15000 });
        assert.ok(!linked.page.url().includes(key), `the key stayed in the address: ${linked.page.url()}`);
        await reply_streams(linked.page);
        console.log("?key=: connected, the address no longer shows the key, a reply streamed");
        await linked.context.close();

        const wrong = await open(browser, base + "/?key=sk-wrong");
        await wrong.page.locator("#conn", { hasText: "wrong API key" }).waitFor({ timeout: 15000 });
        console.log("?key=<wrong>: the page says the key is wrong");
        await wrong.context.close();
    } finally {
        await browser.close();
    }
    assert.deepEqual(page_errors, [], "the page threw");
    console.log("browser api key: PASS");
}

main().catch((e) => {
    console.error("browser api key: FAIL:", e && e.stack ? e.stack : e);
    process.exit(1);
});
