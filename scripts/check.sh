#!/usr/bin/env bash
# Everything `make check` does, stage by stage; stops at the first failure.
#
#   scripts/check.sh                  every stage
#   scripts/check.sh unit fuzz        only those (the debug build runs first when needed)
#
# Stages: build unit units integration fuzz leak. Docs/Testing.md explains each.
# Runs from any directory, without a terminal and without a session bus: every stage
# that talks D-Bus gets a private bus of its own.
# Knobs: PYTEST_ARGS, FUZZ_ITERATIONS, FUZZ_SEED, VALGRIND_ARGS.
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

all_stages=(build unit units integration fuzz leak)

describe() {
    case $1 in
        build) echo "debug build of every target and test, with the import check" ;;
        unit) echo "unit tests (swift test)" ;;
        units) echo "install into a temporary prefix; systemd-analyze verify; D-Bus files" ;;
        integration) echo "integration tests (pytest, Tests/integration)" ;;
        fuzz) echo "seeded fuzzer, release build" ;;
        leak) echo "leak check (valgrind, D-Bus interop peer)" ;;
    esac
}

stage_build() {
    swift_build --build-tests
}

stage_unit() {
    with_toolchain_tmp private_bus "$SWIFT" test --package-path "$ROOT" --skip-build
}

# `make install`/`uninstall` with only the variables given here, whatever the caller's
# environment or `make check VAR=...` command line would hand down.
pristine_make() {
    env -u MAKEFLAGS -u MAKEOVERRIDES -u MFLAGS -u PREFIX -u EXEC_PREFIX -u BINDIR \
        -u LIBEXECDIR -u DATAROOTDIR -u DOCDIR -u SYSTEMDUSERUNITDIR -u DBUSSERVICEDIR \
        -u DBUSINTERFACEDIR -u MANDIR -u BASHCOMPLETIONDIR -u ZSHCOMPLETIONDIR -u FISHCOMPLETIONDIR \
        -u DESTDIR -u prefix -u exec_prefix -u bindir -u libexecdir -u datarootdir -u docdir -u mandir \
        make -s -C "$ROOT" "$@"
}

# Each stage runs in a subshell of its own (see the loop below), so globals and an
# EXIT trap are the stage's own.
stage_units() {
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT

    # A prefix of its own (not DESTDIR) so that ExecStart= names a file that exists.
    pristine_make install PREFIX="$tmp/prefix"
    local unit="$tmp/prefix/lib/systemd/user/bgpolicyd.service" out rc=0
    # systemd-analyze exits 0 even for settings it ignores: any output is a failure.
    # --user wants a runtime directory; a private one works without a running systemd.
    mkdir -m 0700 "$tmp/run"
    out=$(XDG_RUNTIME_DIR="$tmp/run" XDG_CONFIG_HOME="$tmp/config" \
        systemd-analyze --user verify --man=no "$unit" 2>&1) || rc=$?
    if ((rc != 0)) || [[ -n $out ]]; then
        printf 'systemd-analyze --user verify %s (exit %d):\n%s\n' "$unit" "$rc" "$out" >&2
        return 1
    fi
    echo "units: systemd-analyze --user verify accepts bgpolicyd.service"

    # dbus-daemon lists the activation file only if it parses and names the service.
    sed "s|<listen>|<servicedir>$tmp/prefix/share/dbus-1/services</servicedir><listen>|" \
        "$BUS_CONFIG" >"$tmp/bus.conf"
    out=$(dbus-run-session --config-file="$tmp/bus.conf" -- dbus-send --session --print-reply \
        --dest=org.freedesktop.DBus / org.freedesktop.DBus.ListActivatableNames 2>&1) || true
    [[ $out == *'"org.bgpolicy.Agent1"'* ]] || {
        printf 'dbus-daemon does not take the installed org.bgpolicy.Agent1.service:\n%s\n' "$out" >&2
        return 1
    }
    echo "units: dbus-daemon can activate org.bgpolicy.Agent1 from the installed file"

    local xml
    for xml in "$tmp"/prefix/share/dbus-1/interfaces/*.xml; do
        [[ -e $xml ]] || continue
        /usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' "$xml"
        echo "units: well-formed ${xml##*/}"
    done

    # Manual pages: one per command, each formatted without a warning (groff's mdoc macros
    # warn about what man would show wrong), and bgpolicyd's lists no subcommand.
    local man="$tmp/prefix/share/man" page command pages=0
    local expected=() installed=()
    for command in "" .status .apps .pending .history .explain .timeline .enable .disable .forget .simulate \
        .simulate.launch .simulate.expire .replay; do
        [[ -f $man/man1/bgpolicy$command.1 ]] || { echo "make install wrote no man1/bgpolicy$command.1" >&2; return 1; }
        expected+=("bgpolicy$command.1")
    done
    # And no other: a page for ArgumentParser's `help` says nothing.
    for page in "$man"/man1/*.1; do installed+=("${page##*/}"); done
    [[ $(printf '%s\n' "${installed[@]}" | sort) == $(printf '%s\n' "${expected[@]}" | sort) ]] || {
        printf 'make install wrote other pages than one per command:\n%s\n' "$(printf '%s\n' "${installed[@]}" | sort)" >&2
        return 1
    }
    for page in "$man"/man1/*.1 "$man"/man8/bgpolicyd.8; do
        out=$(groff -mandoc -ww -z "$page" 2>&1) || true
        [[ -z $out ]] || { printf 'groff warns about %s:\n%s\n' "$page" "$out" >&2; return 1; }
        pages=$((pages + 1))
    done
    out=$(MANWIDTH=100 man -l "$man/man8/bgpolicyd.8" 2>&1)
    [[ $out == *--state-dir* && $out == *SIGTERM* && $out != *subcommand* ]] || {
        printf 'man bgpolicyd reads wrong:\n%s\n' "$out" >&2
        return 1
    }
    echo "units: $pages manual pages, one per command, format without warnings"

    # Completions: bash's, sourced as bash-completion sources it, completes a command with the
    # installed bgpolicy; zsh's and fish's are named and marked as those shells look for them
    # (and parse, where the shell is installed).
    local share="$tmp/prefix/share"
    out=$(PATH="$tmp/prefix/bin:$PATH" bash -c 'source "$1"; COMP_WORDS=(bgpolicy st); COMP_CWORD=1
        COMP_LINE="bgpolicy st"; COMP_POINT=11; _bgpolicy bgpolicy st bgpolicy; printf "%s\n" "${COMPREPLY[@]}"' \
        bash "$share/bash-completion/completions/bgpolicy" 2>&1)
    [[ $out == status ]] || { printf 'bash completes "bgpolicy st" as:\n%s\n' "$out" >&2; return 1; }
    [[ $(head -1 "$share/zsh/site-functions/_bgpolicy") == "#compdef bgpolicy" ]] || {
        echo "the zsh completion does not start with '#compdef bgpolicy'" >&2
        return 1
    }
    grep -q "^complete -c 'bgpolicy'" "$share/fish/vendor_completions.d/bgpolicy.fish" || {
        echo "the fish completion has no 'complete -c bgpolicy'" >&2
        return 1
    }
    if command -v zsh >/dev/null; then zsh -n "$share/zsh/site-functions/_bgpolicy"; fi
    if command -v fish >/dev/null; then fish --no-execute "$share/fish/vendor_completions.d/bgpolicy.fish"; fi
    echo "units: the bash completion completes a command; zsh's and fish's are where those shells look"

    # The same install staged under DESTDIR, then uninstalled: nothing may be left.
    pristine_make install DESTDIR="$tmp/dest" PREFIX=/usr/local
    pristine_make uninstall DESTDIR="$tmp/dest" PREFIX=/usr/local
    out=$(find "$tmp/dest" -not -type d)
    [[ -z $out ]] || { printf 'make uninstall left files behind:\n%s\n' "$out" >&2; return 1; }
    echo "units: make install DESTDIR=... then make uninstall leaves no file behind"

    # GNU's lower-case names, as packaging tools pass them.
    pristine_make install DESTDIR="$tmp/lower" prefix=/opt/bg libexecdir=/opt/bg/lib/bgpolicy
    [[ -x $tmp/lower/opt/bg/bin/bgpolicy && -x $tmp/lower/opt/bg/lib/bgpolicy/bgpolicyd ]] || {
        printf 'make install prefix=/opt/bg libexecdir=... put files elsewhere:\n%s\n' "$(find "$tmp/lower" -type f)" >&2
        return 1
    }
    grep -qx 'ExecStart=/opt/bg/lib/bgpolicy/bgpolicyd' "$tmp/lower/opt/bg/lib/systemd/user/bgpolicyd.service" || {
        echo "the unit installed with prefix=/opt/bg does not start /opt/bg/lib/bgpolicy/bgpolicyd" >&2
        return 1
    }
    pristine_make uninstall DESTDIR="$tmp/lower" prefix=/opt/bg libexecdir=/opt/bg/lib/bgpolicy
    out=$(find "$tmp/lower" -not -type d)
    [[ -z $out ]] || { printf 'make uninstall prefix=... left files behind:\n%s\n' "$out" >&2; return 1; }
    echo "units: make install prefix=... libexecdir=... (GNU's lower-case names) installs there, and uninstalls"

    # Enabled by a user, then uninstalled: the links systemctl made to the unit go with it, and
    # a link to another unit stays. (No SUDO_USER: the links are the caller's.)
    XDG_RUNTIME_DIR="$tmp/run" XDG_CONFIG_HOME="$tmp/config" systemctl --user enable "$unit" >/dev/null 2>&1
    [[ -L $tmp/config/systemd/user/default.target.wants/bgpolicyd.service ]] || {
        echo "systemctl --user enable made no link to test make uninstall with" >&2
        return 1
    }
    ln -s "$tmp/elsewhere/other.service" "$tmp/config/systemd/user/default.target.wants/other.service"
    SUDO_USER='' XDG_CONFIG_HOME="$tmp/config" pristine_make uninstall PREFIX="$tmp/prefix" >/dev/null
    out=$(find "$tmp/config" -type l)
    [[ $out == "$tmp/config/systemd/user/default.target.wants/other.service" ]] || {
        printf 'make uninstall left these links (only other.service should stay):\n%s\n' "$out" >&2
        return 1
    }
    out=$(find "$tmp/prefix" -not -type d)
    [[ -z $out ]] || { printf 'make uninstall PREFIX=... left files behind:\n%s\n' "$out" >&2; return 1; }
    echo "units: make uninstall removes the user's enablement links to the unit, and every file"
}

stage_integration() {
    [[ -d $ROOT/Tests/integration ]] || { echo "no Tests/integration folder" >&2; return 1; }
    local bin rc=0
    bin=$(debug_bin)
    # umockdev-wrapper preloads libumockdev, so the tests can build fake sysfs testbeds
    # that the processes they start (upowerd, bgpolicyd) inherit (TESTBED.md).
    # shellcheck disable=SC2086 # PYTEST_ARGS is a list of options
    BGPOLICY_BUILD_DIR=$bin private_bus umockdev-wrapper /usr/bin/python3 -m pytest \
        -p no:cacheprovider -ra ${PYTEST_ARGS:-} "$ROOT/Tests/integration" || rc=$?
    ((rc != 5)) || echo "pytest collected no test in Tests/integration; this stage must run some" >&2
    return "$rc"
}

stage_fuzz() {
    swift_build_release --product bgpolicy-fuzz
    private_bus "$(release_bin)/bgpolicy-fuzz" \
        --iterations "${FUZZ_ITERATIONS:-1000000}" --seed "${FUZZ_SEED:-20261122}"
}

stage_leak() {
    "$ROOT/scripts/leakcheck.sh"
}

# Which stages, in the canonical order; the build goes first whenever a stage needs it.
if (($# == 0)); then
    stages=("${all_stages[@]}")
else
    for s in "$@"; do
        [[ " ${all_stages[*]} " == *" $s "* ]] || die "unknown stage '$s' (stages: ${all_stages[*]})"
    done
    wanted=" $* "
    [[ $wanted == *" unit "* || $wanted == *" integration "* ]] && wanted+="build "
    stages=()
    for s in "${all_stages[@]}"; do
        [[ $wanted == *" $s "* ]] && stages+=("$s")
    done
fi

started=$SECONDS
n=0
for s in "${stages[@]}"; do
    n=$((n + 1))
    printf '\n==> [%d/%d] %s: %s\n' "$n" "${#stages[@]}" "$s" "$(describe "$s")"
    t=$SECONDS
    # A subshell outside any `if`/`||`, so that `set -e` holds inside the stage.
    set +e
    (set -e; "stage_$s")
    rc=$?
    set -e
    if ((rc != 0)); then
        printf '\n==> check FAILED at stage %s (%d of %d, exit %d) after %ds; rerun it alone: scripts/check.sh %s\n' \
            "$s" "$n" "${#stages[@]}" "$rc" $((SECONDS - started)) "$s"
        exit "$rc"
    fi
    printf '==> %s ok (%ds)\n' "$s" $((SECONDS - t))
done
printf '\n==> check OK: %d of %d stages (%s) in %ds\n' "$n" "${#stages[@]}" "${stages[*]}" $((SECONDS - started))
