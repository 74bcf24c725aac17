#!/usr/bin/env bash
# troupe's one entry point on a fresh Debian 12 machine: installs what is missing (apt, by package
# name, non-interactively), configures and builds, then runs the job you name.
#
#   ./setup.sh serve [flags]            build, then serve a real model (the README's first command)
#   ./setup.sh run [troupe run flags]   build, then stream a real model's text
#   ./setup.sh test                     build, then run every test (the README's second command; .ci/run)
#   ./setup.sh build                    build only
#   ./setup.sh <troupe command> ...     build, then run build/troupe with those arguments
set -euo pipefail
cd "$(dirname "$0")"

# Debian 12's default Boost (1.74) is too old for C++20 coroutines with Asio: libboost1.81-dev.
packages=(build-essential cmake ccache pkg-config libboost1.81-dev libyaml-cpp-dev libgtest-dev libgmock-dev
          googletest libbenchmark-dev)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}" >&2
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# What the end-to-end tests (tests/e2e) use besides the build, only for `test`: Debian's chromium (driven by
# playwright-core), python3-websockets, python3-jinja2 (tests/chat compares the Jinja interpreter with it),
# Node.js and npm (only when node or npm is missing: a newer one may be installed already), then `npm ci` in
# tests/e2e (the openai and playwright-core packages from its lock file).
install_e2e_dependencies() {
    local e2e_packages=(chromium fonts-liberation python3-websockets python3-jinja2) e2e_missing=()
    command -v node >/dev/null && command -v npm >/dev/null || e2e_packages+=(nodejs npm)
    for p in "${e2e_packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || e2e_missing+=("$p")
    done
    if ((${#e2e_missing[@]})); then
        echo "setup: installing ${e2e_missing[*]} (end-to-end tests)" >&2
        "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${e2e_missing[@]}"
    fi
    if [ ! -d tests/e2e/node_modules ] || [ tests/e2e/package-lock.json -nt tests/e2e/node_modules ]; then
        echo "setup: npm ci in tests/e2e" >&2
        (cd tests/e2e && npm ci --no-audit --no-fund >&2)
    fi
}

build_dir=${TROUPE_BUILD_DIR:-build}
jobs=$(nproc)
# A configure that failed (say, before the packages above were there) leaves a cache but no Makefile: redo it.
if [ ! -f "$build_dir/CMakeCache.txt" ] || [ ! -f "$build_dir/Makefile" ]; then
    cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >&2
fi
cmake --build "$build_dir" -j"$jobs" >&2

cmd=${1:-run}
[ $# -gt 0 ] && shift
case "$cmd" in
    build) ;;
    test)
        # The tests find ../shared (models, vocabularies, goldens) or $TROUPE_SHARED_DIR.
        install_e2e_dependencies
        ctest --test-dir "$build_dir" --output-on-failure -j"$jobs" --timeout 900 "$@"
        ;;
    *) exec "$build_dir/troupe" "$cmd" "$@" ;;
esac
