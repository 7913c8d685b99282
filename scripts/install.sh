#!/usr/bin/env bash
# scripts/install.sh build|install|uninstall — what `make release`, `make install` and
# `make uninstall` do. `build` makes the release build that `install` installs (as the owner of
# the tree when root runs it); run it as yourself first, and `sudo make install` finds it up to
# date and only copies.
#
# Directories come from the environment (the Makefile passes them), GNU style:
#   PREFIX=/usr/local  BINDIR=$PREFIX/bin  LIBEXECDIR=$PREFIX/libexec
#   DOCDIR=$PREFIX/share/doc/bgpolicy  SYSTEMDUSERUNITDIR=$PREFIX/lib/systemd/user
#   DBUSSERVICEDIR=$PREFIX/share/dbus-1/services  DBUSINTERFACEDIR=$PREFIX/share/dbus-1/interfaces
#   MANDIR=$PREFIX/share/man  BASHCOMPLETIONDIR=$PREFIX/share/bash-completion/completions
#   ZSHCOMPLETIONDIR=$PREFIX/share/zsh/site-functions
#   FISHCOMPLETIONDIR=$PREFIX/share/fish/vendor_completions.d
#   DESTDIR= (staging root for packagers; never written into the installed files)
#   SOURCE_DATE_EPOCH (optional): the date the manual pages carry, for reproducible builds;
#   else the last commit's date, else today's.
#
# What goes where:
#   bgpolicy          BINDIR                 the command line, for people
#   bgpolicyd         LIBEXECDIR             the agent; started by systemd or D-Bus, not by hand
#   bgpolicyd.service SYSTEMDUSERUNITDIR     from systemd/bgpolicyd.service.in
#   org.bgpolicy.Agent1.service  DBUSSERVICEDIR     from dbus/org.bgpolicy.Agent1.service.in
#   dbus/org.bgpolicy.*.xml      DBUSINTERFACEDIR   the documented D-Bus interfaces
#   README.md, Docs/             DOCDIR
#   bgpolicy.1, bgpolicy.COMMAND.1, bgpolicyd.8  MANDIR/man1, MANDIR/man8  (generate-manual,
#                                from the same text as --help)
#   completions for bash, zsh and fish  BASHCOMPLETIONDIR, ZSHCOMPLETIONDIR, FISHCOMPLETIONDIR
#                                (bgpolicy --generate-completion-script; app ids and task
#                                identifiers come from the running agent)
# Uninstalling builds nothing, and must work with the toolchain gone (lib.sh: NO_TOOLCHAIN).
[[ ${1:-install} != uninstall ]] || NO_TOOLCHAIN=1
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
MANDIR=${MANDIR:-$PREFIX/share/man}
BASHCOMPLETIONDIR=${BASHCOMPLETIONDIR:-$PREFIX/share/bash-completion/completions}
ZSHCOMPLETIONDIR=${ZSHCOMPLETIONDIR:-$PREFIX/share/zsh/site-functions}
FISHCOMPLETIONDIR=${FISHCOMPLETIONDIR:-$PREFIX/share/fish/vendor_completions.d}
DESTDIR=${DESTDIR:-}

# Unit and activation files name absolute paths.
for d in PREFIX BINDIR LIBEXECDIR DOCDIR SYSTEMDUSERUNITDIR DBUSSERVICEDIR DBUSINTERFACEDIR MANDIR \
    BASHCOMPLETIONDIR ZSHCOMPLETIONDIR FISHCOMPLETIONDIR; do
    [[ ${!d} == /* ]] || die "$d must be an absolute path, not '${!d}'"
done

unit=bgpolicyd.service
activation=org.bgpolicy.Agent1.service
shopt -s nullglob
interfaces=("$ROOT"/dbus/org.bgpolicy.*.xml)
shopt -u nullglob

# @bindir@, @libexecdir@ and @docdir@ in a template, replaced by the final (non-DESTDIR) paths.
generate() {
    local text
    text=$(<"$1")
    text=${text//@bindir@/$BINDIR}
    text=${text//@libexecdir@/$LIBEXECDIR}
    text=${text//@docdir@/$DOCDIR}
    printf '%s\n' "$text"
}

# The date the manual pages carry: SOURCE_DATE_EPOCH, else the last commit's, else today's.
manual_date() {
    if [[ -n ${SOURCE_DATE_EPOCH:-} ]]; then
        date -u -d "@$SOURCE_DATE_EPOCH" +%F
    else
        git -C "$ROOT" log -1 --format=%cs 2>/dev/null || date -u +%F
    fi
}

# generate-manual writes a discussion's blank lines as they are, where mdoc wants .Pp; and it
# gives a command without subcommands ArgumentParser's `help` as if it were one (in the
# synopsis and the list), which bgpolicyd refuses. `flat` drops those for such a command.
tidy_manual() { # tidy_manual FILE [flat]
    awk -v flat="${2:-}" '
        /^$/ { print ".Pp"; next }
        flat && /^\.Ar subcommand$/ { next }
        flat && /^\.It Em help$/ { skip = 1; next }
        skip { if (/^\.El$/) skip = 0; next }
        { print }
    ' "$1" >"$1.tidy" && mv "$1.tidy" "$1"
}

put() { # put MODE SOURCE TARGET
    install -D -m "$1" "$2" "$DESTDIR$3"
    say "installed $DESTDIR$3"
}

# Runs "$@" as the owner of the source tree when root runs this in a tree someone else owns
# (`make && sudo make install`): a build as root leaves root-owned files in .build-release and
# a root-owned Package.resolved, which the owner's next `make` cannot write. As the owner, or
# in a tree root owns (a build container), it runs as it is.
as_tree_owner() {
    local owner
    owner=$(stat -c %u "$ROOT")
    if [[ $EUID -ne 0 || $owner -eq 0 ]]; then
        "$@"
        return
    fi
    local name home
    name=$(getent passwd "$owner" | cut -d: -f1) || die "the owner of $ROOT (uid $owner) has no account here: build as them first"
    home=$(getent passwd "$owner" | cut -d: -f6)
    runuser -u "$name" -- env HOME="$home" PATH="$PATH" SWIFT="$SWIFT" "$@"
}

do_build() {
    [[ $EUID -ne 0 || $(stat -c %u "$ROOT") -eq 0 ]] || say "building as the owner of $ROOT, not as root"
    # (lib.sh anew in the owner's shell: it finds the toolchain and the build folders.)
    as_tree_owner bash -c 'source "$1/scripts/lib.sh"; for p in bgpolicyd bgpolicy generate-manual; do
        swift_build_release --product "$p"; done' bash "$ROOT"
}

do_install() {
    do_build
    local bin f day
    bin=$(as_tree_owner bash -c 'source "$1/scripts/lib.sh"; release_bin' bash "$ROOT")
    gen=$(mktemp -d) # global: the EXIT trap runs after this function has returned
    trap 'rm -rf "$gen"' EXIT
    generate "$ROOT/systemd/$unit.in" >"$gen/$unit"
    generate "$ROOT/dbus/$activation.in" >"$gen/$activation"
    day=$(manual_date)
    mkdir "$gen/man1" "$gen/man8"
    "$bin/generate-manual" "$bin/bgpolicy" --multi-page --section 1 --date "$day" --output-directory "$gen/man1" >/dev/null
    # ArgumentParser's `help` is given a page of its own, which says nothing: `man bgpolicy`
    # tells of it.
    rm -f "$gen/man1/bgpolicy.help.1"
    "$bin/generate-manual" "$bin/bgpolicyd" --section 8 --date "$day" --output-directory "$gen/man8" >/dev/null
    for f in "$gen"/man1/*.1; do tidy_manual "$f"; done
    tidy_manual "$gen/man8/bgpolicyd.8" flat
    "$bin/bgpolicy" --generate-completion-script bash >"$gen/bgpolicy.bash"
    "$bin/bgpolicy" --generate-completion-script zsh >"$gen/_bgpolicy"
    "$bin/bgpolicy" --generate-completion-script fish >"$gen/bgpolicy.fish"

    put 0755 "$bin/bgpolicy" "$BINDIR/bgpolicy"
    put 0755 "$bin/bgpolicyd" "$LIBEXECDIR/bgpolicyd"
    put 0644 "$gen/$unit" "$SYSTEMDUSERUNITDIR/$unit"
    put 0644 "$gen/$activation" "$DBUSSERVICEDIR/$activation"
    for f in "${interfaces[@]}"; do
        put 0644 "$f" "$DBUSINTERFACEDIR/${f##*/}"
    done
    for f in "$gen"/man1/*.1 "$gen"/man8/*.8; do
        put 0644 "$f" "$MANDIR/man${f##*.}/${f##*/}"
    done
    put 0644 "$gen/bgpolicy.bash" "$BASHCOMPLETIONDIR/bgpolicy"
    put 0644 "$gen/_bgpolicy" "$ZSHCOMPLETIONDIR/_bgpolicy"
    put 0644 "$gen/bgpolicy.fish" "$FISHCOMPLETIONDIR/bgpolicy.fish"
    put 0644 "$ROOT/README.md" "$DOCDIR/README.md"
    while IFS= read -r -d '' f; do
        put 0644 "$f" "$DOCDIR/${f#"$ROOT/"}"
    done < <(find "$ROOT/Docs" -type f -print0 | sort -z)

    if [[ -z $DESTDIR ]] && ! restart_agent; then
        say ""
        say "Switch the agent on for your user with:"
        say "  systemctl --user daemon-reload && systemctl --user enable --now bgpolicyd"
    fi
}

# An upgrade over a running agent: `enable --now` does not restart an active unit, so the old
# agent would serve on (to a new bgpolicy) until logout. If the user who runs this (or who ran
# sudo) has this very unit file running, their manager reloads it and restarts the agent.
# Fails when there is no such agent, so that the caller says how to switch one on.
restart_agent() {
    local installed="$SYSTEMDUSERUNITDIR/$unit"
    [[ $(user_systemctl show -P FragmentPath "$unit" 2>/dev/null) == "$installed" ]] || return 1
    [[ $(user_systemctl is-active "$unit" 2>/dev/null) == active ]] || return 1
    user_systemctl daemon-reload 2>/dev/null || true
    if user_systemctl try-restart "$unit" 2>/dev/null; then
        say "restarted $(whose) $unit with the new agent"
    else
        say "could not restart $(whose) $unit: restart it with systemctl --user restart $unit"
    fi
}

# The links `systemctl --user enable bgpolicyd` made to the installed unit (its WantedBy= and
# Alias=, and the unit itself when enabled by path): for the user who runs this, or who ran
# sudo, in their configuration ($XDG_CONFIG_HOME/systemd/user), and for every user in
# /etc/systemd/user (`systemctl --global enable`). Left behind they dangle, and systemctl
# warns of them at every daemon-reload. Only links that name this unit file are touched.
remove_enablement() {
    local installed="$SYSTEMDUSERUNITDIR/$unit" config home dir link
    config=${XDG_CONFIG_HOME:-${HOME:-}/.config}
    if [[ $EUID -eq 0 && -n ${SUDO_USER:-} && $SUDO_USER != root ]]; then
        home=$(getent passwd "$SUDO_USER" | cut -d: -f6) && config="$home/.config"
    fi
    for dir in "$config/systemd/user" /etc/systemd/user; do
        [[ -d $dir ]] || continue
        while IFS= read -r -d '' link; do
            [[ $(readlink "$link") == "$installed" ]] || continue
            if rm -f "$link" 2>/dev/null; then say "removed $link"; else say "could not remove $link"; fi
        done < <(find "$dir" -maxdepth 2 -type l -print0 2>/dev/null)
    done
}

# Runs `systemctl --user "$@"` against the user manager of the user who runs this, or, as root
# under sudo, of the user who ran sudo (as them, with their runtime directory and bus; root has no
# user manager of its own to ask). Fails when there is no such manager, or no such user.
user_systemctl() {
    command -v systemctl >/dev/null || return 1
    if [[ $EUID -ne 0 ]]; then
        systemctl --user "$@"
    elif [[ -n ${SUDO_USER:-} && $SUDO_USER != root ]] && command -v runuser >/dev/null; then
        local uid
        uid=$(id -u "$SUDO_USER" 2>/dev/null) || return 1
        runuser -u "$SUDO_USER" -- env PATH="$PATH" XDG_RUNTIME_DIR="/run/user/$uid" \
            DBUS_SESSION_BUS_ADDRESS="unix:path=/run/user/$uid/bus" systemctl --user "$@"
    else
        return 1
    fi
}

# Stops the agent this unit runs for the user who runs this (or who ran sudo), if their manager
# has it loaded from this very file (never another install's, nor a test's); says whether the
# manager must forget the removed unit (reload_user_manager, after the files are gone). No
# manager, or one that cannot be reached, is no error: there is nothing to stop.
stopped_agent=
whose() { if [[ $EUID -ne 0 ]]; then printf 'your'; else printf "%s's" "$SUDO_USER"; fi; }
stop_agent() {
    local installed="$SYSTEMDUSERUNITDIR/$unit"
    [[ $(user_systemctl show -P FragmentPath "$unit" 2>/dev/null) == "$installed" ]] || return 0
    stopped_agent=yes
    # (Not `stop && say`: a stop that fails would end the uninstall under `set -e`.)
    if user_systemctl stop "$unit" 2>/dev/null; then
        say "stopped $(whose) $unit"
    else
        say "could not stop $(whose) $unit: stop it with systemctl --user stop $unit"
    fi
}

reload_user_manager() {
    [[ -n $stopped_agent ]] || return 0
    if user_systemctl daemon-reload 2>/dev/null; then say "reloaded $(whose) user manager"; fi
}

do_uninstall() {
    if [[ -z $DESTDIR ]]; then
        stop_agent
        remove_enablement
    fi
    local f targets=(
        "$DESTDIR$BINDIR/bgpolicy" "$DESTDIR$LIBEXECDIR/bgpolicyd"
        "$DESTDIR$SYSTEMDUSERUNITDIR/$unit" "$DESTDIR$DBUSSERVICEDIR/$activation"
        "$DESTDIR$DOCDIR/README.md" "$DESTDIR$MANDIR/man1/bgpolicy.1" "$DESTDIR$MANDIR/man8/bgpolicyd.8"
        "$DESTDIR$BASHCOMPLETIONDIR/bgpolicy" "$DESTDIR$ZSHCOMPLETIONDIR/_bgpolicy"
        "$DESTDIR$FISHCOMPLETIONDIR/bgpolicy.fish"
    )
    # Interface files and the commands' manual pages are named for bgpolicy alone: all of
    # them go, including ones that an older version installed and this one no longer has.
    shopt -s nullglob
    targets+=("$DESTDIR$DBUSINTERFACEDIR"/org.bgpolicy.*.xml "$DESTDIR$MANDIR"/man1/bgpolicy.*.1)
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
    if [[ -z $DESTDIR ]]; then
        reload_user_manager
        say ""
        say "Other users who enabled the agent keep links to the removed unit, which systemd ignores;"
        say "each can remove theirs with:"
        say "  find ~/.config/systemd/user -lname '$SYSTEMDUSERUNITDIR/$unit' -delete; systemctl --user daemon-reload"
    fi
}

case $mode in
    build) do_build ;;
    install) do_install ;;
    uninstall) do_uninstall ;;
    *) die "usage: $0 build|install|uninstall" ;;
esac
