#!/usr/bin/env bash
# scripts/install.sh install|uninstall — what `make install` and `make uninstall` do.
#
# Directories come from the environment (the Makefile passes them), GNU style:
#   PREFIX=/usr/local  BINDIR=$PREFIX/bin  LIBEXECDIR=$PREFIX/libexec
#   DOCDIR=$PREFIX/share/doc/bgpolicy  SYSTEMDUSERUNITDIR=$PREFIX/lib/systemd/user
#   DBUSSERVICEDIR=$PREFIX/share/dbus-1/services  DBUSINTERFACEDIR=$PREFIX/share/dbus-1/interfaces
#   DESTDIR= (staging root for packagers; never written into the installed files)
#
# What goes where:
#   bgpolicy          BINDIR                 the command line, for people
#   bgpolicyd         LIBEXECDIR             the agent; started by systemd or D-Bus, not by hand
#   bgpolicyd.service SYSTEMDUSERUNITDIR     from systemd/bgpolicyd.service.in
#   org.bgpolicy.Agent1.service  DBUSSERVICEDIR     from dbus/org.bgpolicy.Agent1.service.in
#   dbus/org.bgpolicy.*.xml      DBUSINTERFACEDIR   the documented D-Bus interfaces
#   README.md, Docs/             DOCDIR
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

mode=${1:-install}
PREFIX=${PREFIX:-/usr/local}
BINDIR=${BINDIR:-$PREFIX/bin}
LIBEXECDIR=${LIBEXECDIR:-$PREFIX/libexec}
DOCDIR=${DOCDIR:-$PREFIX/share/doc/bgpolicy}
SYSTEMDUSERUNITDIR=${SYSTEMDUSERUNITDIR:-$PREFIX/lib/systemd/user}
DBUSSERVICEDIR=${DBUSSERVICEDIR:-$PREFIX/share/dbus-1/services}
DBUSINTERFACEDIR=${DBUSINTERFACEDIR:-$PREFIX/share/dbus-1/interfaces}
DESTDIR=${DESTDIR:-}

# Unit and activation files name absolute paths.
for d in PREFIX BINDIR LIBEXECDIR DOCDIR SYSTEMDUSERUNITDIR DBUSSERVICEDIR DBUSINTERFACEDIR; do
    [[ ${!d} == /* ]] || die "$d must be an absolute path, not '${!d}'"
done

unit=bgpolicyd.service
activation=org.bgpolicy.Agent1.service
shopt -s nullglob
interfaces=("$ROOT"/dbus/org.bgpolicy.*.xml)
shopt -u nullglob

# @libexecdir@ and @docdir@ in a template, replaced by the final (non-DESTDIR) paths.
generate() {
    local text
    text=$(<"$1")
    text=${text//@libexecdir@/$LIBEXECDIR}
    text=${text//@docdir@/$DOCDIR}
    printf '%s\n' "$text"
}

put() { # put MODE SOURCE TARGET
    install -D -m "$1" "$2" "$DESTDIR$3"
    say "installed $DESTDIR$3"
}

do_install() {
    swift_build_release --product bgpolicyd
    swift_build_release --product bgpolicy
    local bin f
    bin=$(release_bin)
    gen=$(mktemp -d) # global: the EXIT trap runs after this function has returned
    trap 'rm -rf "$gen"' EXIT
    generate "$ROOT/systemd/$unit.in" >"$gen/$unit"
    generate "$ROOT/dbus/$activation.in" >"$gen/$activation"

    put 0755 "$bin/bgpolicy" "$BINDIR/bgpolicy"
    put 0755 "$bin/bgpolicyd" "$LIBEXECDIR/bgpolicyd"
    put 0644 "$gen/$unit" "$SYSTEMDUSERUNITDIR/$unit"
    put 0644 "$gen/$activation" "$DBUSSERVICEDIR/$activation"
    for f in "${interfaces[@]}"; do
        put 0644 "$f" "$DBUSINTERFACEDIR/${f##*/}"
    done
    put 0644 "$ROOT/README.md" "$DOCDIR/README.md"
    while IFS= read -r -d '' f; do
        put 0644 "$f" "$DOCDIR/${f#"$ROOT/"}"
    done < <(find "$ROOT/Docs" -type f -print0 | sort -z)

    if [[ -z $DESTDIR ]]; then
        say ""
        say "Switch the agent on for your user with:"
        say "  systemctl --user daemon-reload && systemctl --user enable --now bgpolicyd"
    fi
}

do_uninstall() {
    local f targets=(
        "$DESTDIR$BINDIR/bgpolicy" "$DESTDIR$LIBEXECDIR/bgpolicyd"
        "$DESTDIR$SYSTEMDUSERUNITDIR/$unit" "$DESTDIR$DBUSSERVICEDIR/$activation"
        "$DESTDIR$DOCDIR/README.md"
    )
    # Interface files are named for bgpolicy alone: all of them go, including ones
    # that an older version installed and this one no longer has.
    shopt -s nullglob
    targets+=("$DESTDIR$DBUSINTERFACEDIR"/org.bgpolicy.*.xml)
    shopt -u nullglob
    for f in "${targets[@]}"; do
        if [[ -e $f || -L $f ]]; then
            rm -f "$f"
            say "removed $f"
        fi
    done
    if [[ -d $DESTDIR$DOCDIR/Docs ]]; then
        rm -rf "$DESTDIR$DOCDIR/Docs"
        say "removed $DESTDIR$DOCDIR/Docs"
    fi
    [[ ! -d $DESTDIR$DOCDIR ]] || rmdir --ignore-fail-on-non-empty "$DESTDIR$DOCDIR"
}

case $mode in
    install) do_install ;;
    uninstall) do_uninstall ;;
    *) die "usage: $0 install|uninstall" ;;
esac
