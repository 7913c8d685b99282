"""`bgpolicy` as a demanding user drives it (Docs/CLI.md): the real binary against a real agent on
a private bus, for the corners test_agent.py's CLI tests leave out."""

import json
import os
import signal
import subprocess
import time

import pytest

from test_agent import BIN, agent, bus  # noqa: F401 - the fixtures


def test_an_empty_app_id_is_refused_by_timeline_as_by_the_other_commands(agent):
    """GetTimeline reads "" as every app; `bgpolicy timeline "$APP"` with APP unset must not
    draw every app with status 0, where `pending ""` and `explain "" ID` refuse it."""
    pending = agent.cli("pending", "", check=False)
    assert pending.returncode == 1 and "(NotRegistered)" in pending.stderr, pending
    for extra in [[], ["--json"]]:
        r = agent.cli("timeline", "", *extra, check=False)
        assert (r.returncode, r.stdout, r.stderr) == (1, "", pending.stderr), r


def stopped(bus):
    """`bus`'s dbus-daemon stopped (SIGSTOP): the kernel still takes connections on its socket,
    and nothing answers them; continued again after the test."""
    os.kill(bus.pid, signal.SIGSTOP)
    return bus


@pytest.mark.parametrize("command", [["status"], ["disable", "--all"]], ids=" ".join)
def test_a_session_bus_that_never_answers_is_given_up_on_in_10_seconds(bus, command):
    """libdbus sets no limit on the wait for the bus's Hello: bgpolicy waited for good."""
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=stopped(bus).address)
    started = time.monotonic()
    try:
        r = subprocess.run([str(BIN / "bgpolicy"), *command], env=env, capture_output=True, text=True, timeout=20)
    finally:
        os.kill(bus.pid, signal.SIGCONT)
    assert 9 < time.monotonic() - started < 15
    assert r.returncode == 69 and r.stdout == "", r
    assert r.stderr.startswith(f"bgpolicy: the session bus did not answer within 10 seconds ({bus.address}).\n"), r.stderr
    assert "DBUS_SESSION_BUS_ADDRESS" in r.stderr.splitlines()[1], r.stderr


@pytest.mark.parametrize("address,says", [
    ("garbage", "Address does not contain a colon"),
    ("unix:path=/nonexistent/bus", "Failed to connect to socket /nonexistent/bus"),
], ids=["no address", "no socket"])
def test_a_session_bus_address_that_leads_nowhere_is_named(address, says):
    """libdbus's words do not say which address they are about, and 'start a desktop session'
    is no help to someone in one whose variable is wrong (a typo, or left from an earlier login
    in tmux)."""
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=address)
    r = subprocess.run([str(BIN / "bgpolicy"), "status"], env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == 69 and r.stdout == "", r
    message, hint = r.stderr.splitlines()
    assert message.startswith("bgpolicy: bgpolicyd is not reachable: " + says), message
    assert message.endswith(f"(DBUS_SESSION_BUS_ADDRESS={address})"), message
    assert hint.startswith("Check DBUS_SESSION_BUS_ADDRESS"), hint


@pytest.mark.parametrize("columns", ["5", "0", "-1", "26"])
def test_help_and_usage_errors_in_a_narrow_terminal(columns):
    """ArgumentParser wraps to COLUMNS beside a 26-column label column: narrower, a debug build
    trapped (SIGILL) and a release one printed the help without its descriptions."""
    env = dict(os.environ, COLUMNS=columns)
    r = subprocess.run([str(BIN / "bgpolicy"), "--help"], env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == 0 and r.stderr == "", r
    words = " ".join(r.stdout.split())
    assert "Exit status: 0 on success" in words and "Show whether bgpolicyd runs, and what it knows." in words, words
    r = subprocess.run([str(BIN / "bgpolicy"), "explain", "org.example.Feeds"], env=env, capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 64 and "Missing expected argument '<identifier>'" in r.stderr, r


def test_the_timeline_still_draws_to_a_narrow_width(agent):
    """The help's floor of 40 columns is ArgumentParser's alone: the timeline draws to COLUMNS."""
    env = dict(agent.env, COLUMNS="20")
    r = subprocess.run([str(BIN / "bgpolicy"), "timeline"], env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r
    assert max(len(line) for line in r.stdout.splitlines()[:3]) <= 20, r.stdout
    assert "a column is 3 h" in " ".join(r.stdout.split()), r.stdout


@pytest.mark.parametrize("command", [["status"], ["status", "--json"], ["--help"]], ids=" ".join)
def test_a_closed_standard_output_exits_74_with_its_own_error(agent, command):
    """`bgpolicy status >&-`: the descriptor's number was free, libdispatch's eventfd took it,
    and the output went there, failing with "Invalid argument"."""
    r = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", str(BIN / "bgpolicy"), *command], env=agent.env,
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 74, r
    assert r.stderr == "bgpolicy: cannot write to standard output: Bad file descriptor\n", r.stderr


def test_history_says_when_the_limit_left_events_out(agent):
    """`history --limit N` showed the newest N events and nothing said there were more: a note
    on stderr says so, and only then; stdout, the table or the JSON, is as it was."""
    for switch in ["disable", "enable", "disable", "enable"]:
        agent.cli(switch, "--all")
    every = json.loads(agent.cli("history", "--limit", "10000", "--json").stdout)
    assert len(every) >= 4, every
    note = "bgpolicy: note: only the newest 2 events are shown; older ones were left out (--limit shows up to 10000).\n"
    r = agent.cli("history", "--limit", "2")
    assert len(r.stdout.splitlines()) == 3 and r.stderr == note, r
    r = agent.cli("history", "--limit", "2", "--json")
    assert json.loads(r.stdout) == every[-2:] and r.stderr == note, r
    for extra in [[], ["--json"]]:
        r = agent.cli("history", "--limit", str(len(every)), *extra)
        assert r.stderr == "", r
