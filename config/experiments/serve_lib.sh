# The server lifecycle the experiment scripts share (sourced by run_all.sh and kv_budget.sh): a free loopback port,
# `troupe serve` started and waited for until /health answers, and stopped (drained, then killed) on every exit.
#
#   start_server LOG ARGS...   starts "$troupe" serve ARGS... --host 127.0.0.1 --port $port with its output in LOG;
#                              sets server_pid and port; returns 1 (log tail on stderr) if it never became healthy
#   stop_server                SIGTERM, up to 30 s to drain, then SIGKILL

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

server_pid=""
port=""
stop_server() {
    [ -n "$server_pid" ] || return 0
    kill "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 60); do  # up to 30 s to drain
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.5
    done
    kill -9 "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
}
trap stop_server EXIT

start_server() {
    local log="$1"
    shift
    port=$(free_port)
    "$troupe" serve "$@" --host 127.0.0.1 --port "$port" >"$log" 2>&1 &
    server_pid=$!
    for _ in $(seq 1 240); do  # up to 120 s to load the model
        if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
        if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    echo "$(basename "$0"): the server did not become healthy; its log ($log):" >&2
    tail -20 "$log" >&2
    stop_server
    return 1
}
