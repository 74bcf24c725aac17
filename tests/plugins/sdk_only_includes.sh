#!/bin/sh
# Checks that plugin sources include only the SDK (<troupe/...>), files of the plugin tree (their own folder,
# plugins/common/, a kind's shared folder such as plugins/quant/kv_common/) and system headers: no troupe header from
# core/, kernels/, actors/, server/, cli/ or tests/, so a plugin builds against the installed SDK alone.
#
#   sdk_only_includes.sh <plugins folder>      prints each offending line as file:line: include, exits 1 if any
#
# Allowed by name (with the reason in the file itself):
#   quant/q8/q8_kernels_troupe.cpp   the q8 plugin's binding to troupe's CPU kernel library (troupe_kernels), so the
#                                    core and the plugin share one copy of the Q8_0 kernels; the plugin's ABI code
#                                    and its SDK-only build (q8_kernels_scalar.cpp) include nothing of troupe's
set -u
root=${1:?usage: sdk_only_includes.sh <plugins folder>}
allowed="quant/q8/q8_kernels_troupe.cpp"
bad=0
for file in $(cd "$root" && find . -path ./include -prune -o -type f \( -name '*.c' -o -name '*.cc' -o -name '*.cpp' \
        -o -name '*.h' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \) -print | sed 's|^\./||' | sort); do
    case " $allowed " in *" $file "*) continue ;; esac
    dir=$(dirname "$file")
    # Each #include line: "name" or <name>.
    grep -n '^[[:space:]]*#[[:space:]]*include' "$root/$file" | while IFS= read -r line; do
        inc=$(printf '%s\n' "$line" | sed -n 's/^[0-9]*:[[:space:]]*#[[:space:]]*include[[:space:]]*\([<"][^>"]*[>"]\).*/\1/p')
        name=$(printf '%s\n' "$inc" | sed 's/^[<"]//; s/[>"]$//')
        ok=1
        case "$name" in
            troupe/*) ;;                                            # the SDK
            core/* | kernels/* | actors/* | server/* | cli/* | tests/*) ok=0 ;;  # troupe's internals
            plugins/*) [ -f "$root/${name#plugins/}" ] || ok=0 ;;   # the plugin tree, from the repository root
            *) case "$inc" in \"*) [ -f "$root/$dir/$name" ] || ok=0 ;; esac ;;  # "x.h": its own folder
        esac
        if [ "$ok" = 0 ]; then
            echo "$root/$file:${line%%:*}: includes $inc, outside the SDK (plugins/include/troupe) and the plugin tree"
            echo x >> "${TMPDIR:-/tmp}/sdk_only_includes.$$"
        fi
    done
done
if [ -f "${TMPDIR:-/tmp}/sdk_only_includes.$$" ]; then
    rm -f "${TMPDIR:-/tmp}/sdk_only_includes.$$"
    exit 1
fi
exit 0
