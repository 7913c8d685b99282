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

# The toolchain: $SWIFT if given (also as `make ... SWIFT=/path/to/swift`), else swift on PATH,
# else, as root under sudo (which resets PATH to its secure_path), the invoking user's: the
# swift their login shell finds, or swiftly's (~/.local/share/swiftly/bin, or ~/.local/bin
# for swiftly before 1.0); else the one this project's machines carry at /opt/swift.
sudo_user_swift() {
    [[ $EUID -eq 0 && -n ${SUDO_USER:-} && $SUDO_USER != root ]] || return 1
    local entry home shell found
    entry=$(getent passwd "$SUDO_USER") || return 1
    home=$(cut -d: -f6 <<<"$entry")
    shell=$(cut -d: -f7 <<<"$entry")
    # Their login shell, as them (never as root), with nothing to read from and 10 s to answer:
    # it reads their profile, which is where toolchain installers add to PATH.
    if [[ -x $shell && $shell != */nologin && $shell != */false ]] && command -v runuser >/dev/null; then
        found=$(cd / && timeout 10 runuser -u "$SUDO_USER" -- env -i HOME="$home" USER="$SUDO_USER" \
            LOGNAME="$SUDO_USER" SHELL="$shell" PATH=/usr/local/bin:/usr/bin:/bin \
            "$shell" -lc 'command -v swift' </dev/null 2>/dev/null | tail -n 1) || found=
        [[ $found == /* && -x $found ]] && { printf '%s\n' "$found"; return 0; }
    fi
    for found in "$home/.local/share/swiftly/bin/swift" "$home/.local/bin/swift"; do
        [[ -x $found ]] && { printf '%s\n' "$found"; return 0; }
    done
    return 1
}

# A script that builds nothing (`install.sh uninstall`) sets NO_TOOLCHAIN=1 before sourcing
# this: removing the agent must not need the toolchain that built it.
if [[ -z ${SWIFT:-} && ${NO_TOOLCHAIN:-} != 1 ]]; then
    if command -v swift >/dev/null 2>&1; then
        SWIFT=$(command -v swift)
    elif SWIFT=$(sudo_user_swift); then
        :
    elif [[ -x /opt/swift/usr/bin/swift ]]; then
        SWIFT=/opt/swift/usr/bin/swift
    elif [[ $EUID -eq 0 && -n ${SUDO_USER:-} ]]; then
        die "no Swift toolchain: sudo resets PATH, and neither $SUDO_USER's login shell nor swiftly's folder has swift; name it: sudo make install SWIFT=\"\$(command -v swift)\""
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
