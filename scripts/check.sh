#!/usr/bin/env bash
# Everything `make check` does, stage by stage; stops at the first failure.
#
#   scripts/check.sh                  every stage
#   scripts/check.sh unit fuzz        only those (the debug build runs first when needed)
#
# Stages: build unit units integration fuzz leak. Docs/Testing.md explains each.
# Runs from any directory, without a terminal and without a session bus: every stage
# that talks D-Bus gets a private bus of its own.
# Knobs: PYTEST_ARGS, FUZZ_ITERATIONS, FUZZ_SEED, VALGRIND_ARGS, UNIT_TIMEOUT.
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

all_stages=(build unit units integration fuzz leak)

describe() {
    case $1 in
        build) echo "debug build of every target and test, with the import check" ;;
        unit) echo "unit tests (swift test; the umockdev suite under umockdev-wrapper)" ;;
        units) echo "install into a temporary prefix; systemd-analyze verify; D-Bus files" ;;
        integration) echo "integration tests (pytest, Tests/integration)" ;;
        fuzz) echo "seeded fuzzer, release build" ;;
        leak) echo "leak check (valgrind, D-Bus interop peer)" ;;
    esac
}

stage_build() {
    swift_build --build-tests
}

# Runs "$@" with a watchdog: should it run past UNIT_TIMEOUT seconds (default 1200; the unit
# tests take about a minute), every thread's stack of this checkout's test process goes to
# standard error (gdb, where installed) and the process is killed, so that a test that waits
# for good fails the stage with its stacks in the log rather than run into CI's limit silent.
with_unit_watchdog() {
    local limit=${UNIT_TIMEOUT:-1200} watchdog rc=0
    (
        trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
        sleep "$limit" &
        sleeper=$!
        wait "$sleeper"
        for dir in /proc/[0-9]*; do
            cmd=$(tr '\0' ' ' <"$dir/cmdline" 2>/dev/null) || continue
            [[ $cmd == *PackageTests.xctest\ --package-path\ "$ROOT"\ * ]] || continue
            pid=${dir#/proc/}
            echo "unit: the tests ran past ${limit}s (UNIT_TIMEOUT); the stacks of test process $pid, then SIGKILL:" >&2
            if command -v gdb >/dev/null; then
                timeout 120 gdb -p "$pid" -batch -ex 'set pagination off' -ex 'thread apply all bt 30' </dev/null >&2 2>&1 || true
            fi
            kill -KILL "$pid" 2>/dev/null || true
            touch "$log.timeout"
        done
    ) &
    watchdog=$!
    "$@" || rc=$?
    kill "$watchdog" 2>/dev/null || true
    wait "$watchdog" || true
    return "$rc"
}

stage_unit() {
    log=$(mktemp) # (global: the EXIT trap runs after the function returns)
    trap 'rm -f "$log" "$log.timeout"' EXIT
    local rc=0
    with_unit_watchdog with_toolchain_tmp private_bus "$SWIFT" test --package-path "$ROOT" --skip-build 2>&1 | tee "$log" || rc=$?
    if [[ -e $log.timeout ]]; then
        echo "the unit tests hung and were killed after ${UNIT_TIMEOUT:-1200}s: the stacks above show where" >&2
        return 1
    fi
    [[ $rc == 0 ]] || return "$rc"
    # swift test passes when it finds nothing to run (a filter, a target left out).
    grep -Eq 'Test run with [1-9][0-9]* tests? .*passed' "$log" || {
        echo "swift test ran no test; this stage must run some" >&2
        return 1
    }
    # In CI (BGPOLICY_NO_SKIPS=1, set by .ci/run) no suite may skip for want of what the machine
    # gives (CAP_SYS_TIME, a tmpfs), as in the integration stage; only the umockdev suite may,
    # which runs next.
    if [[ ${BGPOLICY_NO_SKIPS:-} == 1 ]] && grep -E '^➜ (Suite|Test) .* skipped' "$log" | grep -v 'needs umockdev-wrapper'; then
        echo "tests above were skipped, and BGPOLICY_NO_SKIPS=1 forbids skips: give them what they need (Docs/Testing.md)" >&2
        return 1
    fi
    # UdevUmockdevTests needs libumockdev-preload, so the run above skips it: again under
    # umockdev-wrapper, and the suite must have run and passed, not been skipped.
    with_unit_watchdog with_toolchain_tmp private_bus umockdev-wrapper "$SWIFT" test --package-path "$ROOT" --skip-build \
        --filter UdevUmockdevTests 2>&1 | tee "$log"
    grep -q 'Suite "UdevPowerSource under umockdev" passed' "$log" || {
        echo "the UdevUmockdevTests suite did not run under umockdev-wrapper" >&2
        return 1
    }
}

# `make install`/`uninstall` with only the variables given here, whatever the caller's
# environment or `make check VAR=...` command line would hand down.
# (pristine_env VAR=value... make ...: the same, with only the given variables in the environment.)
pristine_env=(env -u MAKEFLAGS -u MAKEOVERRIDES -u MFLAGS -u PREFIX -u EXEC_PREFIX -u BINDIR
    -u LIBEXECDIR -u DATAROOTDIR -u DOCDIR -u SYSTEMDUSERUNITDIR -u DBUSSERVICEDIR
    -u DBUSINTERFACEDIR -u MANDIR -u BASHCOMPLETIONDIR -u ZSHCOMPLETIONDIR -u FISHCOMPLETIONDIR
    -u DESTDIR -u prefix -u exec_prefix -u bindir -u libexecdir -u datarootdir -u docdir -u mandir)
pristine_make() {
    "${pristine_env[@]}" make -s -C "$ROOT" "$@"
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
    for command in "" .status .apps .pending .history .explain .timeline .enable .disable .forget .reload .simulate \
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
    # installed bgpolicy; zsh's and fish's are named and marked as those shells look for them,
    # and parse (scripts/deps.sh installs both shells).
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
    zsh -n "$share/zsh/site-functions/_bgpolicy" || { echo "zsh cannot parse its completion" >&2; return 1; }
    fish --no-execute "$share/fish/vendor_completions.d/bgpolicy.fish" || {
        echo "fish cannot parse its completion" >&2
        return 1
    }
    echo "units: the bash completion completes a command; zsh's and fish's parse and are where those shells look"

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
    grep -qx 'ExecReload=/opt/bg/bin/bgpolicy reload' "$tmp/lower/opt/bg/lib/systemd/user/bgpolicyd.service" || {
        echo "the unit installed with prefix=/opt/bg does not reload with /opt/bg/bin/bgpolicy reload" >&2
        return 1
    }
    pristine_make uninstall DESTDIR="$tmp/lower" prefix=/opt/bg libexecdir=/opt/bg/lib/bgpolicy
    out=$(find "$tmp/lower" -not -type d)
    [[ -z $out ]] || { printf 'make uninstall prefix=... left files behind:\n%s\n' "$out" >&2; return 1; }
    echo "units: make install prefix=... libexecdir=... (GNU's lower-case names) installs there, and uninstalls"

    # make install checks the packages it builds with (scripts/deps.sh build), as make run and
    # make check check theirs; make release, the build alone, too.
    for target in install release; do
        out=$(pristine_make -n "$target")
        [[ $out == *"scripts/deps.sh build"* ]] || {
            printf 'make %s does not check its build packages first:\n%s\n' "$target" "$out" >&2
            return 1
        }
    done
    out=$(scripts/deps.sh build 2>&1) || { printf 'scripts/deps.sh build fails:\n%s\n' "$out" >&2; return 1; }
    echo "units: make install and make release check the packages they build with first (deps.sh build)"

    # A directory on the command line wins over one from the environment, whichever case
    # each is in; of two given the same way, the upper-case one.
    local env_value cli expected
    while IFS='|' read -r env_value cli expected; do
        # shellcheck disable=SC2086 # $env_value and $cli are lists of assignments
        out=$("${pristine_env[@]}" $env_value make -s -n -C "$ROOT" install $cli | grep -o "PREFIX='[^']*' BINDIR='[^']*'")
        [[ $out == "$expected" ]] || {
            printf 'make install %s with %s in the environment passes %s, not %s\n' "$cli" "$env_value" "$out" "$expected" >&2
            return 1
        }
    done <<'CASES'
PREFIX=/env|prefix=/cli|PREFIX='/cli' BINDIR='/cli/bin'
prefix=/env|PREFIX=/cli|PREFIX='/cli' BINDIR='/cli/bin'
PREFIX=/env|prefix=/cli PREFIX=/upper|PREFIX='/upper' BINDIR='/upper/bin'
PREFIX=/env|bindir=/b|PREFIX='/env' BINDIR='/b'
PREFIX=/env BINDIR=/eb|bindir=/b|PREFIX='/env' BINDIR='/b'
PREFIX=/env prefix=/lower|exec_prefix=/x|PREFIX='/env' BINDIR='/x/bin'
CASES
    echo "units: a directory on make's command line wins over the environment's (PREFIX exported, prefix= given)"

    # As root under sudo: the toolchain the invoking user's login shell finds (sudo resets PATH),
    # or swiftly's; and make uninstall stops that user's agent through their user manager, as
    # them, with their runtime directory and bus. A stand-in systemctl answers (there is no user
    # manager here), and getent names a home of the test's for the user nobody.
    if ((EUID == 0)) && command -v runuser >/dev/null && getent passwd nobody >/dev/null; then
        local pub
        pub=$(mktemp -d)
        chmod 0755 "$pub"
        mkdir -p "$pub/home/tools" "$pub/swiftly/.local/share/swiftly/bin" "$pub/stub"
        printf '#!/bin/sh\n' >"$pub/home/tools/swift"
        cp "$pub/home/tools/swift" "$pub/swiftly/.local/share/swiftly/bin/swift"
        chmod 0755 "$pub/home/tools/swift" "$pub/swiftly/.local/share/swiftly/bin/swift"
        printf 'echo profile noise\nPATH="%s:$PATH"\n' "$pub/home/tools" >"$pub/home/.profile"
        chmod -R a+rX "$pub"
        out=$(SWIFT=$SWIFT SUDO_USER=nobody PUB=$pub bash -c '
            source "$1/scripts/lib.sh"   # (SWIFT is given: no lookup at source time)
            getent() { printf "nobody:x:65534:65534::%s:/bin/sh\n" "$PUB/home"; }
            sudo_user_swift
            getent() { printf "nobody:x:65534:65534::%s:/usr/sbin/nologin\n" "$PUB/swiftly"; }
            sudo_user_swift' bash "$ROOT" 2>&1) || true
        [[ $out == "$pub/home/tools/swift"$'\n'"$pub/swiftly/.local/share/swiftly/bin/swift" ]] || {
            printf 'as root under sudo, lib.sh finds these toolchains for the user:\n%s\n' "$out" >&2
            return 1
        }
        echo "units: under sudo, the toolchain is the one the user's login shell finds, else swiftly's"

        # The stand-in logs who ran it and how, and says the unit was loaded from the installed file
        # (installed at the top of this stage).
        touch "$pub/stub/log"
        chmod 0666 "$pub/stub/log"
        cat >"$pub/stub/systemctl" <<STUB
#!/bin/sh
echo "uid=\$(id -u) XDG_RUNTIME_DIR=\$XDG_RUNTIME_DIR DBUS_SESSION_BUS_ADDRESS=\$DBUS_SESSION_BUS_ADDRESS \$*" >>"$pub/stub/log"
case "\$*" in *FragmentPath*) echo "$unit" ;; esac
STUB
        chmod 0755 "$pub/stub/systemctl"
        out=$(SUDO_USER=nobody PATH="$pub/stub:$PATH" pristine_make uninstall PREFIX="$tmp/prefix")
        local bus="DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/65534/bus"
        expected="uid=65534 XDG_RUNTIME_DIR=/run/user/65534 $bus --user show -P FragmentPath bgpolicyd.service
uid=65534 XDG_RUNTIME_DIR=/run/user/65534 $bus --user stop bgpolicyd.service
uid=65534 XDG_RUNTIME_DIR=/run/user/65534 $bus --user daemon-reload"
        [[ $(<"$pub/stub/log") == "$expected" && $out == *"stopped nobody's bgpolicyd.service"* ]] || {
            printf 'sudo make uninstall asked the user manager:\n%s\nand said:\n%s\n' "$(<"$pub/stub/log")" "$out" >&2
            return 1
        }
        # No user manager at all (systemctl fails): the uninstall goes on and removes every file.
        pristine_make install PREFIX="$tmp/prefix" >/dev/null
        printf '#!/bin/sh\necho "Failed to connect to bus" >&2\nexit 1\n' >"$pub/stub/systemctl"
        SUDO_USER=nobody PATH="$pub/stub:$PATH" pristine_make uninstall PREFIX="$tmp/prefix" >/dev/null
        out=$(find "$tmp/prefix" -not -type d)
        [[ -z $out ]] || { printf 'sudo make uninstall with no user manager left:\n%s\n' "$out" >&2; return 1; }
        echo "units: sudo make uninstall stops and forgets the sudo user's agent as them, and goes on without a user manager"

        # Installed again over the user's running agent (this unit file, active): their manager
        # reloads it and restarts the agent, which `enable --now` would not.
        : >"$pub/stub/log"
        cat >"$pub/stub/systemctl" <<STUB
#!/bin/sh
echo "\$*" >>"$pub/stub/log"
case "\$*" in *FragmentPath*) echo "$unit" ;; *is-active*) echo active ;; esac
STUB
        out=$(SUDO_USER=nobody PATH="$pub/stub:$PATH" pristine_make install PREFIX="$tmp/prefix")
        expected="--user show -P FragmentPath bgpolicyd.service
--user is-active bgpolicyd.service
--user daemon-reload
--user try-restart bgpolicyd.service"
        [[ $(<"$pub/stub/log") == "$expected" && $out == *"restarted nobody's bgpolicyd.service"* ]] || {
            printf 'sudo make install over a running agent asked the user manager:\n%s\nand said:\n%s\n' "$(<"$pub/stub/log")" "$out" >&2
            return 1
        }
        echo "units: sudo make install over the sudo user's running agent restarts it"
        rm -rf "$pub"
    else
        echo "units: (not root: the sudo toolchain lookup and sudo make uninstall are not checked)"
    fi

    # Enabled by a user, then uninstalled: the links systemctl made to the unit go with it, and
    # a link to another unit stays. (No SUDO_USER: the links are the caller's.)
    # Offline, on the files alone: on a machine booted with systemd, systemctl would ask the
    # user manager instead (and, reaching the real one, link the real ~/.config to this prefix).
    env -u DBUS_SESSION_BUS_ADDRESS SYSTEMD_OFFLINE=1 XDG_RUNTIME_DIR="$tmp/run" XDG_CONFIG_HOME="$tmp/config" \
        systemctl --user enable "$unit" >/dev/null 2>&1
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
    # --durations lists the slowest tests after the summary, so that a stage that grows
    # longer says where the time went.
    # shellcheck disable=SC2086 # PYTEST_ARGS is a list of options
    BGPOLICY_BUILD_DIR=$bin private_bus umockdev-wrapper /usr/bin/python3 -m pytest \
        -p no:cacheprovider -ra --durations=30 --durations-min=5 ${PYTEST_ARGS:-} "$ROOT/Tests/integration" || rc=$?
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
