// troupe admin console: polls GET /admin/api/state about once a second with "Authorization: Bearer <token>"
// and draws what it returns; POST /admin/api/cancel/<id> and POST /admin/api/drain are the actions.
// The token comes from ?token=... (then removed from the address bar) or from the form, and is kept in
// sessionStorage for this tab only. The charts are drawn from the polled values, kept for the last minutes.
"use strict";

(function () {
    const TOKEN_KEY = "troupe.admin_token";
    const POLL_MS = 1000;
    const WINDOW_MS = 5 * 60 * 1000;
    const STATES = ["tokenizing", "waiting", "prefilling", "decoding", "preempted", "finishing"];
    const RUNNING = new Set(["prefilling", "decoding", "finishing", "running"]);
    const $ = (id) => document.getElementById(id);

    let token = null;
    let timer = null;
    let last_ok = 0;
    let history = [];  // [{t, tps, ttft50, ttft90, tpot50, tpot90}]

    // --- token -------------------------------------------------------------------------------------
    function take_token_from_url() {
        const url = new URL(location.href);
        const t = url.searchParams.get("token");
        if (t) {
            sessionStorage.setItem(TOKEN_KEY, t);
            url.searchParams.delete("token");
            history_replace(url);
        }
    }

    function history_replace(url) {
        try {
            window.history.replaceState(null, "", url.pathname + url.search + url.hash);
        } catch (e) {
            // not fatal: the token just stays visible in the address bar
        }
    }

    function show_login(message) {
        if (timer) clearTimeout(timer);
        timer = null;
        token = null;
        $("console").hidden = true;
        $("session").hidden = true;
        $("login").hidden = false;
        $("login-error").textContent = message || "";
        $("token").focus();
    }

    function show_console() {
        $("login").hidden = true;
        $("console").hidden = false;
        $("session").hidden = false;
        poll();
    }

    function auth_headers() {
        return { Authorization: "Bearer " + token };
    }

    // --- formatting ----------------------------------------------------------------------------------
    function num(v) {
        return typeof v === "number" && Number.isFinite(v) ? v : typeof v === "string" && v !== "" && !isNaN(+v) ? +v : null;
    }

    function fmt(v, digits) {
        const n = num(v);
        if (n === null) return "—";
        if (digits === undefined) digits = Math.abs(n) >= 100 || Number.isInteger(n) ? 0 : Math.abs(n) >= 10 ? 1 : 2;
        return n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
    }

    function fmt_ms(v) {
        const n = num(v);
        if (n === null) return "—";
        if (n >= 10000) return (n / 1000).toFixed(1) + " s";
        return (n >= 100 ? Math.round(n) : n >= 10 ? n.toFixed(1) : n.toFixed(2)) + " ms";
    }

    function fmt_age(ms) {
        const n = num(ms);
        if (n === null) return "—";
        if (n < 1000) return Math.round(n) + " ms";
        if (n < 60000) return (n / 1000).toFixed(1) + " s";
        return Math.floor(n / 60000) + " m " + Math.round((n % 60000) / 1000) + " s";
    }

    // A latency summary in milliseconds. The engine's summaries are named *_us but the snapshot's
    // ttft_ms / tpot_ms / e2e_ms hold milliseconds; explicit *_ms fields win, and a summary whose own
    // name ends in _us is taken as microseconds.
    function quantile(snap, name, which) {
        const s_ms = snap[name + "_ms"], s_us = snap[name + "_us"];
        const s = s_ms || s_us || snap[name];
        if (!s || typeof s !== "object") return null;
        if (num(s.n) === 0) return null;
        const alias = which === "median" ? ["median", "p50"] : [which];
        for (const a of alias) {
            if (num(s[a + "_ms"]) !== null) return num(s[a + "_ms"]);
        }
        for (const a of alias) {
            const v = num(s[a + "_us"]) !== null ? num(s[a + "_us"]) : num(s[a]);
            if (v !== null) return s_ms ? v : s_us ? v / 1000 : v;
        }
        return null;
    }

    function state_name(s) {
        if (typeof s === "number") return STATES[s] || "state " + s;
        return String(s || "unknown");
    }

    function set_text(id, text) {
        const el = $(id);
        if (el && el.textContent !== text) el.textContent = text;
    }

    // --- rendering -----------------------------------------------------------------------------------
    function render(state) {
        const snap = state.snapshot || state;
        const requests = Array.isArray(snap.requests) ? snap.requests : [];
        let n_running = 0, n_waiting = 0;
        for (const r of requests) RUNNING.has(state_name(r.state)) ? n_running++ : n_waiting++;
        if (num(snap.n_running) !== null) n_running = num(snap.n_running);
        if (num(snap.n_waiting) !== null) n_waiting = num(snap.n_waiting);

        const accepting = snap.accepting !== false;
        const pill = $("accepting");
        const loading = state.ready === false && !state.draining;
        pill.className = "pill " + (loading ? "pill-warn" : accepting ? "pill-ok" : "pill-bad");
        pill.textContent = loading ? "loading" : accepting ? "accepting" : "draining";
        const drain = $("drain");
        if (!accepting && !loading) {
            drain.disabled = true;
            drain.textContent = "Draining";
        }

        set_text("n-running", fmt(n_running));
        set_text("n-waiting", fmt(n_waiting));
        set_text("n-completed", fmt(snap.n_completed));
        set_text("n-cancelled", fmt(snap.n_cancelled));
        set_text("n-failed", fmt(snap.n_failed));
        set_text("n-refused", fmt(snap.n_refused));
        set_text("requests-per-s", fmt(snap.requests_per_s, 2));
        set_text("n-tokens", fmt(snap.n_generated_tokens) + " / " + fmt(snap.n_prompt_tokens));

        const steps = snap.steps || {};
        set_text("batch-size", fmt(steps.last_batch_size));
        set_text("batch-tokens", fmt(steps.last_batch_tokens));
        set_text("mean-batch-size", fmt(steps.mean_batch_size, 2));
        set_text("mean-batch-tokens", fmt(steps.mean_batch_tokens, 1));
        set_text("n-steps", fmt(steps.n_steps));

        const kv = snap.kv || {};
        const total = num(kv.n_blocks) || 0;
        const used = num(kv.n_used) || 0, cached = num(kv.n_cached) || 0;
        const free = num(kv.n_free) !== null ? num(kv.n_free) : Math.max(0, total - used - cached);
        set_text("kv-used", fmt(used));
        set_text("kv-used2", fmt(used));
        set_text("kv-total", fmt(total));
        set_text("kv-cached", fmt(cached));
        set_text("kv-free", fmt(free));
        set_text("n-preemptions", fmt(kv.n_preemptions));
        $("bar-used").style.width = total ? (100 * used) / total + "%" : "0";
        $("bar-cached").style.width = total ? (100 * cached) / total + "%" : "0";
        const queries = num(kv.n_prefix_queries);
        const rate = num(kv.prefix_hit_rate);
        set_text("kv-hit-rate", rate === null || queries === 0 ? "— (no lookups)" : (100 * rate).toFixed(1) + " %");
        $("kv-hit-rate").title = queries !== null ? fmt(kv.n_prefix_hits) + " of " + fmt(queries) + " prompt blocks found" : "";
        const bytes = num(kv.bytes_per_block);
        set_text("kv-block", (kv.block_size ? kv.block_size + " tokens" : "—") +
            (bytes ? " · " + (bytes >= 1 << 20 ? (bytes / (1 << 20)).toFixed(1) + " MiB" : (bytes / 1024).toFixed(1) + " KiB") : ""));

        render_spec(snap.spec);

        set_text("tokens-per-s", fmt(snap.tokens_per_s, 1));
        const ttft50 = quantile(snap, "ttft", "median"), ttft90 = quantile(snap, "ttft", "p90");
        const tpot50 = quantile(snap, "tpot", "median"), tpot90 = quantile(snap, "tpot", "p90");
        set_text("ttft-p50", fmt_ms(ttft50));
        set_text("ttft-p90-p99", fmt_ms(ttft90) + " / " + fmt_ms(quantile(snap, "ttft", "p99")));
        set_text("tpot-p50", fmt_ms(tpot50));
        set_text("tpot-p90-p99", fmt_ms(tpot90) + " / " + fmt_ms(quantile(snap, "tpot", "p99")));
        set_text("e2e", fmt_ms(quantile(snap, "e2e", "median")) + " / " + fmt_ms(quantile(snap, "e2e", "p90")));

        render_requests(requests);
        render_plugins(state.plugins);
        render_model(state);
        set_text("config", typeof state.config_yaml === "string" && state.config_yaml ? state.config_yaml : "—");
        const tmpl = typeof state.chat_template === "string" ? state.chat_template : "";
        $("template-card").hidden = !tmpl;
        set_text("template", tmpl);

        const now = Date.now();
        if (Array.isArray(state.history) && state.history.length && num(state.uptime_s) !== null) {
            // The server keeps the last minutes (one sample a second): a reloaded console has them at once.
            history = state.history.map((h) => ({
                t: now - (state.uptime_s - h.t_s) * 1000,
                tps: num(h.tokens_per_s),
                ttft50: num(h.ttft_p50_ms),
                ttft90: num(h.ttft_p90_ms),
                tpot50: num(h.tpot_p50_ms),
                tpot90: num(h.tpot_p90_ms),
            }));
        } else {
            history.push({ t: now, tps: num(snap.tokens_per_s), ttft50, ttft90, tpot50, tpot90 });
        }
        while (history.length && history[0].t < now - WINDOW_MS) history.shift();
        draw_charts();
    }

    function render_requests(requests) {
        const tbody = $("requests").tBodies[0];
        const rows = [];
        for (const r of requests) {
            const tr = document.createElement("tr");
            const st = state_name(r.state);
            const cells = [
                String(r.id),
                null,
                fmt_age(r.age_ms),
                fmt(r.n_prompt_tokens) + (num(r.n_computed_prompt_tokens) !== null && r.n_computed_prompt_tokens < r.n_prompt_tokens
                    ? " (" + fmt(r.n_computed_prompt_tokens) + " done)" : ""),
                fmt(r.n_cached_prompt_tokens),
                fmt(r.n_generated_tokens),
                fmt(r.n_kv_blocks),
            ];
            cells.forEach((c, i) => {
                const td = document.createElement("td");
                if (i === 1) {
                    const span = document.createElement("span");
                    span.className = "state state-" + st;
                    span.textContent = st;
                    td.appendChild(span);
                } else {
                    td.textContent = c;
                    if (i >= 2) td.className = "num";
                }
                if (i === 0 && (r.client_id || r.external_id)) td.title = r.client_id || r.external_id;
                tr.appendChild(td);
            });
            const td = document.createElement("td");
            td.className = "num";
            const b = document.createElement("button");
            b.className = "btn btn-small btn-danger cancel";
            b.type = "button";
            b.textContent = "Cancel";
            b.dataset.id = String(r.id);
            b.addEventListener("click", () => cancel(r.id, b));
            td.appendChild(b);
            tr.appendChild(td);
            tr.dataset.id = String(r.id);
            rows.push(tr);
        }
        if (!rows.length) {
            const tr = document.createElement("tr");
            tr.className = "none";
            tr.innerHTML = '<td colspan="8" class="muted">no requests</td>';
            rows.push(tr);
        }
        tbody.replaceChildren(...rows);
    }

    // Speculative decoding: shown only when a spec plugin drafts (snapshot.spec.plugin non-empty).
    function render_spec(spec) {
        const on = !!(spec && typeof spec.plugin === "string" && spec.plugin);
        $("spec-card").hidden = !on;
        if (!on) return;
        const proposals = num(spec.n_proposals) || 0;
        set_text("spec-plugin", spec.plugin);
        set_text("spec-acceptance-length", proposals ? fmt(spec.acceptance_length, 2) : "—");
        set_text("spec-acceptance-rate", proposals ? (100 * (num(spec.acceptance_rate) || 0)).toFixed(1) + " %" : "—");
        set_text("spec-draft-length", proposals ? fmt(spec.draft_length, 2) : "—");
        set_text("spec-draft-cap", fmt(spec.draft_cap) + " / " + fmt(spec.max_draft) + (spec.adaptive ? " (adaptive)" : ""));
        const rate = (v) => (num(v) ? fmt(v, 1) : "—");
        set_text("spec-rates", rate(spec.tokens_per_s_drafting) + " / " + rate(spec.tokens_per_s_plain));
        set_text("spec-steps", fmt(spec.n_steps_on) + " / " + fmt(spec.n_steps_off));
        set_text("spec-counts", fmt(proposals) + " · " + fmt(spec.n_accepted) + " / " + fmt(spec.n_drafted));
    }

    function render_plugins(plugins) {
        const ul = $("plugins");
        const items = [];
        let list = plugins;
        if (list && !Array.isArray(list) && typeof list === "object") {
            list = Object.entries(list).map(([kind, v]) => (v && typeof v === "object" ? { kind, ...v } : { kind, name: String(v) }));
        }
        for (const p of Array.isArray(list) ? list : []) {
            const li = document.createElement("li");
            if (p && typeof p === "object") {
                const b = document.createElement("b");
                b.textContent = [p.kind, p.name].filter(Boolean).join("/") || "plugin";
                li.appendChild(b);
                const rest = Object.entries(p)
                    .filter(([k, v]) => k !== "kind" && k !== "name" && v !== null && v !== "" && typeof v !== "object")
                    .map(([k, v]) => k + " " + v);
                if (rest.length) {
                    const s = document.createElement("div");
                    s.className = "detail";
                    s.textContent = rest.join(" · ");
                    li.appendChild(s);
                }
            } else {
                li.textContent = String(p);
            }
            items.push(li);
        }
        if (!items.length) {
            const li = document.createElement("li");
            li.className = "muted";
            li.textContent = "none loaded";
            items.push(li);
        }
        ul.replaceChildren(...items);
    }

    function render_model(state) {
        const m = state.model || {};
        set_text("model-name", m.name || "—");
        set_text("model-device", [m.device, m.context_length ? fmt(m.context_length) + " ctx" : ""].filter(Boolean).join(" · ") || "—");
        set_text("model-description", m.description || "");
        $("model-description").title = m.path || "";
        const srv = state.server || {};
        set_text("server-conns", num(srv.connections) === null ? "—" : fmt(srv.connections) + " / " + fmt(srv.websockets));
        set_text("server-uptime", num(state.uptime_s) === null ? "—" : fmt_age(state.uptime_s * 1000));
    }

    // --- charts: hand-drawn lines on a canvas, time on x (the last WINDOW_MS), 0..max on y ------------
    function css_var(name) {
        return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
    }

    function draw_chart(canvas, series) {
        const dpr = window.devicePixelRatio || 1;
        const w = canvas.clientWidth || 300, h = canvas.clientHeight || 90;
        if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
            canvas.width = Math.round(w * dpr);
            canvas.height = Math.round(h * dpr);
        }
        const g = canvas.getContext("2d");
        g.setTransform(dpr, 0, 0, dpr, 0, 0);
        g.clearRect(0, 0, w, h);
        const now = Date.now();
        // The x axis spans the history kept so far: one minute at least, WINDOW_MS at most.
        const span = Math.min(WINDOW_MS, Math.max(60000, history.length ? now - history[0].t : 0));
        const left = 4, right = w - 4, top = 14, bottom = h - 14;
        let max = 0;
        for (const s of series) for (const p of history) if (num(p[s.key]) !== null) max = Math.max(max, p[s.key]);
        max = max > 0 ? nice_max(max) : 1;

        g.strokeStyle = css_var("--line");
        g.lineWidth = 1;
        g.beginPath();
        for (const f of [0, 0.5, 1]) {
            const y = Math.round(bottom - f * (bottom - top)) + 0.5;
            g.moveTo(left, y);
            g.lineTo(right, y);
        }
        g.stroke();
        g.fillStyle = css_var("--muted");
        g.font = "10px " + css_var("--sans");
        g.textBaseline = "bottom";
        g.fillText(fmt(max), left, top - 2);
        g.textBaseline = "top";
        g.fillText("−" + (span >= 60000 ? Math.round(span / 60000) + " min" : Math.round(span / 1000) + " s"), left, bottom + 2);
        g.textAlign = "right";
        g.fillText("now", right, bottom + 2);
        g.textAlign = "left";

        const x_of = (t) => right - ((now - t) / span) * (right - left);
        const y_of = (v) => bottom - (v / max) * (bottom - top);
        for (const s of series) {
            g.strokeStyle = css_var(s.color);
            g.lineWidth = 1.6;
            g.beginPath();
            let pen = false;
            for (const p of history) {
                const v = num(p[s.key]);
                if (v === null) {
                    pen = false;
                    continue;
                }
                const x = x_of(p.t), y = y_of(v);
                pen ? g.lineTo(x, y) : g.moveTo(x, y);
                pen = true;
            }
            g.stroke();
        }
    }

    function nice_max(v) {
        const p = Math.pow(10, Math.floor(Math.log10(v)));
        for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
        return 10 * p;
    }

    function draw_charts() {
        draw_chart($("chart-throughput"), [{ key: "tps", color: "--accent" }]);
        draw_chart($("chart-ttft"), [{ key: "ttft90", color: "--warn" }, { key: "ttft50", color: "--accent" }]);
        draw_chart($("chart-tpot"), [{ key: "tpot90", color: "--warn" }, { key: "tpot50", color: "--accent" }]);
    }

    // --- polling and actions -------------------------------------------------------------------------
    async function poll() {
        if (timer) clearTimeout(timer);
        timer = null;
        if (!token) return;
        try {
            const res = await fetch("/admin/api/state", { headers: auth_headers(), cache: "no-store" });
            if (res.status === 401 || res.status === 403) {
                sessionStorage.removeItem(TOKEN_KEY);
                show_login("The server refused this token (HTTP " + res.status + ").");
                return;
            }
            if (!res.ok) throw new Error("HTTP " + res.status);
            render(await res.json());
            last_ok = Date.now();
            set_text("error", "");
        } catch (e) {
            set_text("error", "Could not read the server's state: " + e.message + " (retrying)");
        }
        if (token) timer = setTimeout(poll, POLL_MS);
    }

    function show_age() {
        if (!last_ok) return;
        const s = (Date.now() - last_ok) / 1000;
        const el = $("updated");
        el.textContent = s < 3 ? "live" : "stale: updated " + Math.round(s) + " s ago";
        el.style.color = s < 3 ? "" : "var(--danger)";
    }

    async function post(path) {
        const res = await fetch(path, { method: "POST", headers: auth_headers() });
        if (!res.ok) {
            let detail = "";
            try {
                detail = (await res.text()).slice(0, 200);
            } catch (e) {
                detail = "";
            }
            throw new Error("HTTP " + res.status + (detail ? ": " + detail : ""));
        }
    }

    async function cancel(id, button) {
        button.disabled = true;
        button.textContent = "Cancelling…";
        try {
            await post("/admin/api/cancel/" + encodeURIComponent(id));
        } catch (e) {
            set_text("error", "Cancel " + id + " failed: " + e.message);
        }
        poll();
    }

    // Drain asks for a second click within four seconds instead of a blocking confirm() dialog.
    let drain_armed = null;
    async function drain() {
        const b = $("drain");
        if (!drain_armed) {
            b.textContent = "Confirm drain";
            drain_armed = setTimeout(() => {
                drain_armed = null;
                if (!b.disabled) b.textContent = "Drain";
            }, 4000);
            return;
        }
        clearTimeout(drain_armed);
        drain_armed = null;
        b.disabled = true;
        b.textContent = "Draining…";
        try {
            await post("/admin/api/drain");
        } catch (e) {
            b.disabled = false;
            b.textContent = "Drain";
            set_text("error", "Drain failed: " + e.message);
        }
        poll();
    }

    $("drain").addEventListener("click", drain);
    $("logout").addEventListener("click", () => {
        sessionStorage.removeItem(TOKEN_KEY);
        show_login("");
    });
    $("login-form").addEventListener("submit", (ev) => {
        ev.preventDefault();
        const t = $("token").value.trim();
        if (!t) return;
        sessionStorage.setItem(TOKEN_KEY, t);
        token = t;
        $("token").value = "";
        show_console();
    });
    window.addEventListener("resize", draw_charts);
    setInterval(show_age, 500);

    take_token_from_url();
    token = sessionStorage.getItem(TOKEN_KEY);
    if (token) show_console();
    else show_login("");
})();
