#!/usr/bin/env bash
# Leak check: the D-Bus interop peer's self-test (it drives our D-Bus layer against a
# real dbus-daemon) under valgrind memcheck, on a private session bus.
# Fails on any definite leak or memory error. Extra valgrind options: VALGRIND_ARGS.
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

swift_build --product bgpolicy-testpeer
BIN=$(debug_bin)

# Works around a valgrind 3.19 crash on Swift's async main; see the file.
cc=${CC:-$(command -v cc || command -v gcc || echo "$(dirname "$SWIFT")/clang")}
shim_dir=$(mktemp -d)
trap 'rm -rf "$shim_dir"' EXIT
"$cc" -shared -fPIC -O2 -o "$shim_dir/sigsuspend.so" "$ROOT/scripts/valgrind-sigsuspend.c" -ldl

# shellcheck disable=SC2086 # VALGRIND_ARGS is a list of options
private_bus env LD_PRELOAD="$shim_dir/sigsuspend.so${LD_PRELOAD:+:$LD_PRELOAD}" \
    valgrind --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
    --error-exitcode=3 --num-callers=40 --suppressions="$ROOT/scripts/valgrind.supp" \
    ${VALGRIND_ARGS:-} "$BIN/bgpolicy-testpeer" --self-test
