#!/usr/bin/env bash
# Makes sure the Debian packages that build and test bgpolicy are installed.
# Root: installs what is missing. Anyone else: prints the one command to run, exits 1.
# Quiet (one line) when everything is there; safe to run again and again.
#
#   scripts/deps.sh          everything `make check` and `make bench` need
#   scripts/deps.sh build    only what building and running the agent need
#                            (`make run`, `make release`, `make install`): no test tools
set -euo pipefail

# What the build links against and what the installed agent needs to run: libdbus, libudev
# and libsqlite3 come with their -dev packages; dbus-user-session gives the user manager its
# dbus.socket, without which the unit (Type=dbus) and D-Bus activation cannot work.
build_packages=(
    libdbus-1-dev libudev-dev libsqlite3-dev pkg-config  # build
    git                                                 # SwiftPM fetches the dependencies with it
    dbus dbus-user-session                              # dbus-daemon, dbus-run-session, the user bus units
)
packages=(
    "${build_packages[@]}"
    upower umockdev gir1.2-umockdev-1.0                 # the real upowerd on a fake sysfs
    python3-dbusmock python3-gi python3-pytest          # mocks and the integration test driver
    libglib2.0-bin                                      # gdbus, one of the real clients in the tests
    valgrind gcc                                        # scripts/leakcheck.sh (gcc: its preload shim)
    systemd                                             # systemd-analyze, busctl
    groff-base man-db                                   # the manual pages' lint (check.sh units)
    zsh fish                                            # parse the completions (check.sh units)
    gdb                                                 # the stacks of a unit run that hangs (check.sh unit)
)

case ${1:-all} in
    all) ;;
    build) packages=("${build_packages[@]}") ;;
    *) echo "usage: $0 [all|build]" >&2; exit 2 ;;
esac

missing() {
    local p
    for p in "${packages[@]}"; do
        if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) != "install ok installed" ]]; then
            printf '%s\n' "$p"
        fi
    done
}

command -v dpkg-query >/dev/null 2>&1 || {
    echo "deps: this is not a Debian-like system (no dpkg-query); install the equivalents of: ${packages[*]}" >&2
    exit 1
}

mapfile -t todo < <(missing)

if ((${#todo[@]} == 0)); then
    echo "deps: all ${#packages[@]} Debian packages are installed"
else
    if ((EUID != 0)); then
        echo "deps: missing Debian packages: ${todo[*]}" >&2
        echo "deps: install them with:" >&2
        echo "  sudo apt-get install --no-install-recommends ${todo[*]}" >&2
        exit 1
    fi
    echo "deps: installing ${todo[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # One update per run; a failing mirror is reported, and the install below says
    # whether it mattered.
    apt-get update -qq || echo "deps: apt-get update failed; trying the install anyway" >&2
    apt-get install -y -qq --no-install-recommends "${todo[@]}"
    mapfile -t todo < <(missing)
    ((${#todo[@]} == 0)) || { echo "deps: still missing after apt-get install: ${todo[*]}" >&2; exit 1; }
    echo "deps: installed; all ${#packages[@]} Debian packages are installed"
fi

# Swift does not come from Debian; say so plainly rather than fail in the build.
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ -x $SWIFT ]] || die "no Swift toolchain at $SWIFT"
