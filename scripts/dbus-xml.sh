#!/usr/bin/env bash
# Writes dbus/NAME.xml for every interface the agent describes (`make dbus-xml`).
# A unit test fails when the committed files differ from what the agent introspects.
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
BIN=$(debug_bin)
for name in $("$BIN/bgpolicyd" --print-interface list); do
    "$BIN/bgpolicyd" --print-interface "$name" >"dbus/$name.xml"
    echo "wrote dbus/$name.xml"
done
