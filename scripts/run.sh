#!/usr/bin/env bash
# Runs the freshly built agent in the foreground (`make run` builds it first).
# Arguments go to bgpolicyd. On a desktop it joins your session bus, so `bgpolicy`
# in any terminal reaches it; with no session bus it brings its own.
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BIN=$(debug_bin)
[[ -x $BIN/bgpolicyd ]] || die "$BIN/bgpolicyd is not built: run 'make run' (or scripts/build.sh) first"

# libdbus, sd-bus and GDBus all fall back to $XDG_RUNTIME_DIR/bus when the address is
# unset; say it explicitly so that every tool below agrees on the bus.
if [[ -z ${DBUS_SESSION_BUS_ADDRESS:-} && -n ${XDG_RUNTIME_DIR:-} && -S $XDG_RUNTIME_DIR/bus ]]; then
    export DBUS_SESSION_BUS_ADDRESS="unix:path=$XDG_RUNTIME_DIR/bus"
fi

session_bus_reachable() {
    [[ -n ${DBUS_SESSION_BUS_ADDRESS:-} ]] || return 1
    timeout 5 busctl --user status >/dev/null 2>&1 ||
        timeout 5 dbus-send --session --dest=org.freedesktop.DBus --print-reply \
            / org.freedesktop.DBus.GetId >/dev/null 2>&1
}

if session_bus_reachable; then
    say "Starting bgpolicyd on your session bus. Query it from any terminal with: $BIN/bgpolicy status"
    exec "$BIN/bgpolicyd" "$@"
fi

say "No session bus here (no desktop session): starting bgpolicyd under its own bus with dbus-run-session. Other terminals reach it only through the address printed below; inside a desktop session 'make run' uses your session bus."
# The address exists only once the private bus is up, so the hint is printed inside.
# shellcheck disable=SC2016 # expanded by the inner shell
exec dbus-run-session --config-file="$BUS_CONFIG" -- sh -c '
    bin=$1; shift
    echo "To query it anyway, point bgpolicy at this private bus: DBUS_SESSION_BUS_ADDRESS=\"$DBUS_SESSION_BUS_ADDRESS\" $bin/bgpolicy status"
    exec "$bin/bgpolicyd" "$@"
' run.sh "$BIN" "$@"
