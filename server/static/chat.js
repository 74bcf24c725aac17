// troupe chat page: one WebSocket to /ws, JSON messages (see README.md, "Serving").
//   client -> {type:"start", id, messages:[{role, content}], params:{temperature, max_tokens}}
//   client -> {type:"cancel", id}
//   server -> {type:"delta", id, text} ... then {type:"done", id, finish_reason, usage, timings}
//             or {type:"error", id, message}; on connect {type:"hello", model, context_length, chat_template}
// The conversation lives in localStorage, so a reload keeps it; every start sends the whole history.
// A server with server.api_key wants the key on /ws: the page offers it as the subprotocol
// "troupe.key.<key>" beside "troupe" (a browser's WebSocket cannot set Authorization), or, for a key with
// characters a subprotocol cannot carry, as ?api_key=. The key comes from ?key=... in the address (then
// removed from it) or the Settings field, and is kept in sessionStorage (this tab) only.
"use strict";

(function () {
    const STORE_KEY = "troupe.chat.v1";
    const API_KEY = "troupe.api_key";
    const $ = (id) => document.getElementById(id);
    const log = $("log"), input = $("input"), send_btn = $("send"), stop_btn = $("stop");
    const conn = $("conn"), speed = $("speed"), empty = $("empty");

    // conversation: [{role, content, meta?}] (meta: the stats line shown under a reply)
    let conversation = load();
    let ws = null;
    let reconnect_ms = 250;
    let current = null;  // the reply being streamed: {id, el, body, meta, text, t0, t_first, n_deltas}

    function load() {
        try {
            const v = JSON.parse(localStorage.getItem(STORE_KEY) || "[]");
            return Array.isArray(v) ? v.filter((m) => m && typeof m.content === "string") : [];
        } catch (e) {
            return [];
        }
    }

    function save() {
        try {
            localStorage.setItem(STORE_KEY, JSON.stringify(conversation));
        } catch (e) {
            // storage full or disabled: the conversation still lives in this tab
        }
    }

    function near_bottom() {
        return log.scrollHeight - log.scrollTop - log.clientHeight < 80;
    }

    function scroll_down(force) {
        if (force || near_bottom()) log.scrollTop = log.scrollHeight;
    }

    function add_message(role, content, meta) {
        empty.hidden = true;
        const el = document.createElement("div");
        el.className = "msg msg-" + role;
        const who = document.createElement("div");
        who.className = "who";
        who.textContent = role === "user" ? "You" : role === "assistant" ? "Assistant" : role;
        const body = document.createElement("div");
        body.className = "bubble";
        body.textContent = content;
        const m = document.createElement("div");
        m.className = "meta";
        m.textContent = meta || "";
        el.append(who, body, m);
        log.appendChild(el);
        scroll_down(true);
        return { el, body, meta: m };
    }

    function render_all() {
        for (const el of log.querySelectorAll(".msg")) el.remove();
        empty.hidden = conversation.length > 0;
        for (const m of conversation) add_message(m.role, m.content, m.meta);
        const last = conversation.length ? conversation[conversation.length - 1] : null;
        speed.textContent = last && last.meta ? last.meta : "—";
    }

    function set_conn(state, text) {
        conn.className = "conn conn-" + state;
        conn.textContent = text;
    }

    function set_generating(on) {
        document.body.dataset.state = on ? "generating" : "idle";
        send_btn.disabled = on;
        stop_btn.disabled = !on;
    }

    function fmt_ms(ms) {
        if (!(ms >= 0)) return "—";
        return ms < 10 ? ms.toFixed(1) + " ms" : ms < 10000 ? Math.round(ms) + " ms" : (ms / 1000).toFixed(1) + " s";
    }

    function fmt_rate(r) {
        if (!(r > 0)) return "—";
        return (r < 10 ? r.toFixed(1) : Math.round(r)) + " tok/s";
    }

    // The live line while streaming: deltas stand in for tokens until the server's own count arrives.
    function live_speed() {
        if (!current) return;
        const now = performance.now();
        if (current.t_first === null) {
            speed.textContent = "waiting for the first token… " + fmt_ms(now - current.t0);
            return;
        }
        const ttft = current.t_first - current.t0;
        const dt = (now - current.t_first) / 1000;
        const rate = dt > 0 && current.n_deltas > 1 ? (current.n_deltas - 1) / dt : 0;
        speed.textContent = "streaming · TTFT " + fmt_ms(ttft) + " · ≈" + fmt_rate(rate) + " · " + current.n_deltas + " chunks";
    }

    function new_id() {
        return "c" + Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
    }

    function params() {
        const p = {};
        const t = parseFloat($("temperature").value);
        if (Number.isFinite(t)) p.temperature = t;
        const n = parseInt($("max-tokens").value, 10);
        if (Number.isFinite(n) && n > 0) p.max_tokens = n;
        return p;
    }

    function send_message(text) {
        if (current) return;
        if (!ws || ws.readyState !== WebSocket.OPEN) {
            speed.textContent = "not connected: the message was not sent (retrying the connection)";
            return;
        }
        conversation.push({ role: "user", content: text });
        save();
        add_message("user", text);

        const history = [];
        const sys = $("system").value.trim();
        if (sys) history.push({ role: "system", content: sys });
        for (const m of conversation) history.push({ role: m.role, content: m.content });

        const view = add_message("assistant", "");
        view.el.classList.add("streaming");
        current = { id: new_id(), ...view, text: "", t0: performance.now(), t_first: null, n_deltas: 0, stopping: false };
        set_generating(true);
        live_speed();
        ws.send(JSON.stringify({ type: "start", id: current.id, messages: history, params: params() }));
    }

    function on_delta(msg) {
        if (!current || msg.id !== current.id) return;
        if (current.t_first === null) current.t_first = performance.now();
        current.n_deltas += 1;
        current.text += msg.text || "";
        current.body.textContent = current.text;
        live_speed();
        scroll_down(false);
    }

    // Ends the current reply (done, error, stop timeout or a lost connection) and records its stats.
    function finish(meta, error) {
        if (!current) return;
        const c = current;
        current = null;
        c.el.classList.remove("streaming");
        if (error) c.el.classList.add("failed");
        c.meta.textContent = meta;
        if (c.text || !error) {
            conversation.push({ role: "assistant", content: c.text, meta });
            save();
        }
        speed.textContent = meta;
        set_generating(false);
        scroll_down(false);
        input.focus();
    }

    function on_done(msg) {
        if (!current || msg.id !== current.id) return;
        const now = performance.now();
        const usage = msg.usage || {};
        const timings = msg.timings || {};
        const n_tokens = usage.completion_tokens !== undefined ? usage.completion_tokens : current.n_deltas;
        const ttft = timings.ttft_ms !== undefined ? timings.ttft_ms : current.t_first !== null ? current.t_first - current.t0 : NaN;
        let rate = timings.tokens_per_s;
        if (rate === undefined && current.t_first !== null && now > current.t_first) rate = (n_tokens - 1) / ((now - current.t_first) / 1000);
        const parts = [n_tokens + " tokens", fmt_rate(rate), "TTFT " + fmt_ms(ttft), "total " + fmt_ms(now - current.t0)];
        if (msg.finish_reason) parts.push(msg.finish_reason === "cancelled" ? "stopped" : msg.finish_reason);
        finish(parts.join(" · "), false);
    }

    function on_error(msg) {
        if (current && (msg.id === undefined || msg.id === null || msg.id === current.id)) {
            finish("error: " + (msg.message || "unknown"), true);
        } else {
            speed.textContent = "server error: " + (msg.message || "unknown");
        }
    }

    // The server's greeting names the model it serves.
    function on_hello(msg) {
        if (msg.model) {
            $("model").textContent = msg.model + (msg.context_length ? " · " + msg.context_length + " ctx" : "");
            document.title = "troupe · " + msg.model;
        }
    }

    function stop() {
        if (!current || current.stopping) return;
        current.stopping = true;
        const id = current.id;
        if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "cancel", id }));
        speed.textContent = "stopping…";
        // The server answers a cancel with done (or error); if it never does, end the reply here.
        setTimeout(() => {
            if (current && current.id === id) finish("stopped (no answer from the server)", false);
        }, 3000);
    }

    // --- API key ----------------------------------------------------------------------------------
    function api_key() {
        try {
            return sessionStorage.getItem(API_KEY) || "";
        } catch (e) {
            return "";
        }
    }

    function set_api_key(k) {
        try {
            if (k) sessionStorage.setItem(API_KEY, k);
            else sessionStorage.removeItem(API_KEY);
        } catch (e) {
            // storage disabled: the key lasts until the page reloads
        }
    }

    function take_key_from_url() {
        const url = new URL(location.href);
        const k = url.searchParams.get("key");
        if (!k) return;
        set_api_key(k);
        url.searchParams.delete("key");
        try {
            window.history.replaceState(null, "", url.pathname + url.search + url.hash);
        } catch (e) {
            // not fatal: the key stays visible in the address bar
        }
    }

    // A socket that closed before it opened: a refused key (401) or a server that is down? Ask /v1/models.
    function needs_key() {
        const k = api_key();
        return fetch("/v1/models", { headers: k ? { Authorization: "Bearer " + k } : {} })
            .then((r) => r.status === 401)
            .catch(() => false);
    }

    function ask_for_key(had_one) {
        set_conn("off", had_one ? "wrong API key" : "API key needed");
        speed.textContent = "This server needs an API key: enter it under Settings (or open the page with ?key=...).";
        document.querySelector("details.settings").open = true;
        $("api-key").focus();
    }

    function connect() {
        const proto = location.protocol === "https:" ? "wss:" : "ws:";
        const k = api_key();
        const token_chars = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
        set_conn("off", "connecting…");
        let url = proto + "//" + location.host + "/ws";
        let protocols = [];
        if (k && token_chars.test(k)) protocols = ["troupe", "troupe.key." + k];
        else if (k) url += "?api_key=" + encodeURIComponent(k);
        let opened = false;
        ws = new WebSocket(url, protocols);
        ws.onopen = () => {
            opened = true;
            reconnect_ms = 250;
            set_conn("on", "connected");
        };
        ws.onmessage = (ev) => {
            let msg;
            try {
                msg = JSON.parse(ev.data);
            } catch (e) {
                return;
            }
            if (msg.type === "delta") on_delta(msg);
            else if (msg.type === "done") on_done(msg);
            else if (msg.type === "error") on_error(msg);
            else if (msg.type === "hello") on_hello(msg);
        };
        ws.onclose = () => {
            set_conn("off", "disconnected");
            if (current) finish("connection lost", true);
            const retry = () => {
                setTimeout(connect, reconnect_ms);
                reconnect_ms = Math.min(reconnect_ms * 2, 5000);
            };
            if (opened) return retry();
            // Refused at the handshake: a missing or wrong key waits for a new one (no retry loop).
            needs_key().then((yes) => (yes ? ask_for_key(k !== "") : retry()));
        };
    }

    $("composer").addEventListener("submit", (ev) => {
        ev.preventDefault();
        const text = input.value.trim();
        if (!text || current) return;
        input.value = "";
        send_message(text);
    });
    input.addEventListener("keydown", (ev) => {
        if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
            ev.preventDefault();
            $("composer").requestSubmit();
        }
    });
    document.addEventListener("keydown", (ev) => {
        if (ev.key === "Escape") stop();
    });
    stop_btn.addEventListener("click", stop);
    $("new-chat").addEventListener("click", () => {
        stop();
        if (current) finish("stopped", false);
        conversation = [];
        save();
        render_all();
        speed.textContent = "—";
        input.focus();
    });
    setInterval(live_speed, 250);

    const key_input = $("api-key");
    key_input.value = "";
    key_input.addEventListener("change", () => {
        set_api_key(key_input.value.trim());
        key_input.value = "";
        key_input.placeholder = api_key() ? "(set for this tab)" : "(none)";
        if (ws) {
            ws.onclose = null;
            ws.close();
        }
        reconnect_ms = 250;
        connect();
    });

    take_key_from_url();
    key_input.placeholder = api_key() ? "(set for this tab)" : "(none)";
    render_all();
    set_generating(false);
    connect();
    input.focus();
})();
