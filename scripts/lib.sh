# shellcheck shell=bash
# Shared by the scripts in this folder; source it, don't run it.
# Gives: ROOT (the repository), SWIFT, with_toolchain_tmp, swift_build, swift_build_release, debug_bin,
# release_bin, private_bus, BUS_CONFIG, say, die.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RELEASE_SCRATCH="$ROOT/.build-release"
BUS_CONFIG="$ROOT/scripts/session-bus.conf"

say() { printf '%s\n' "$*"; }
die() { printf '%s: %s\n' "${0##*/}" "$*" >&2; exit 1; }

# The toolchain: $SWIFT if given, else swift on PATH, else the one this project's
# machines carry at /opt/swift.
if [[ -z ${SWIFT:-} ]]; then
    if command -v swift >/dev/null 2>&1; then
        SWIFT=$(command -v swift)
    elif [[ -x /opt/swift/usr/bin/swift ]]; then
        SWIFT=/opt/swift/usr/bin/swift
    else
        die "no Swift toolchain: put swift on PATH or set SWIFT=/path/to/swift"
    fi
fi

# Runs "$@" (the toolchain) with a temporary folder of its own, removed afterwards: the
# Swift driver leaves a TemporaryDirectory.XXXXXX in $TMPDIR on every run and never removes
# it (swiftlang/swift-driver#1720, #2049), some fifty for each `make check` stage.
with_toolchain_tmp() {
    local tmp rc=0
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/bgpolicy-swift.XXXXXX")
    TMPDIR=$tmp "$@" || rc=$?
    rm -rf "$tmp"
    return "$rc"
}

# Every build checks that each target imports only what Package.swift says it
# depends on, so the module graph stays what it says.
swift_build() {
    with_toolchain_tmp "$SWIFT" build --package-path "$ROOT" --explicit-target-dependency-import-check error "$@"
}

# Release builds keep their own scratch folder so they never evict the debug one, and
# link the Swift runtime statically, so an installed bgpolicyd does not depend on where
# the toolchain is (the debug build's RUNPATH names the toolchain's folder).
swift_build_release() {
    swift_build -c release --static-swift-stdlib --scratch-path "$RELEASE_SCRATCH" "$@"
}

debug_bin() { swift_build --show-bin-path; }
release_bin() { swift_build_release --show-bin-path; }

# Runs "$@" on a private session bus of its own (dbus-run-session), never on the
# user's. scripts/session-bus.conf has no service directories, so nothing that is
# installed on this machine (an installed bgpolicyd among them) can be activated.
private_bus() {
    dbus-run-session --config-file="$BUS_CONFIG" -- "$@"
}
