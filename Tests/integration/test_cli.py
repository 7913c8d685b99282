"""`bgpolicy` as a demanding user drives it (Docs/CLI.md): the real binary against a real agent on
a private bus, for the corners test_agent.py's CLI tests leave out."""

import json
import os
import signal
import subprocess
import time

import pytest

import tasks_helpers as th
from tasks_helpers import later, world  # noqa: F401 - the fixture
from test_agent import BIN, Agent, agent, bus  # noqa: F401 - the fixtures


def test_an_empty_app_id_is_refused_by_timeline_as_by_the_other_commands(agent):
    """GetTimeline reads "" as every app; `bgpolicy timeline "$APP"` with APP unset must not
    draw every app with status 0, where `pending ""` and `explain "" ID` refuse it (no app id at
    all: InvalidArgument, saying that an app id may not be empty)."""
    pending = agent.cli("pending", "", check=False)
    assert pending.returncode == 1 and "(InvalidArgument)" in pending.stderr, pending
    assert "an app id may not be empty" in pending.stderr, pending
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


def test_a_session_bus_whose_backlog_is_full_is_given_up_on_in_10_seconds(tmp_path):
    """A listener that accepts nothing and whose backlog is full (a stopped dbus-daemon that
    many clients tried): libdbus's blocking connect(2) waits there, before any Hello, so
    connect's own timeout does not reach it; bgpolicy's timer does."""
    import socket as socket_module
    path = str(tmp_path / "bus")
    listener = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)
    waiting = []
    try:
        for _ in range(2):  # a backlog of 0 still takes one: two fill it
            client = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
            client.setblocking(False)
            try:
                client.connect(path)
            except BlockingIOError:
                pass
            waiting.append(client)
        address = f"unix:path={path}"
        env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=address)
        started = time.monotonic()
        r = subprocess.run([str(BIN / "bgpolicy"), "status"], env=env, capture_output=True, text=True, timeout=20)
        assert 9 < time.monotonic() - started < 15
        assert r.returncode == 69 and r.stdout == "", r
        assert r.stderr.startswith(f"bgpolicy: the session bus did not answer within 10 seconds ({address}).\n"), r.stderr
    finally:
        for client in waiting:
            client.close()
        listener.close()


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


def test_a_note_on_stderr_comes_after_what_it_is_about(agent):
    """To a pipe, stdout is block-buffered and stderr is not: `history 2>&1 | less` showed the
    note before the table, or in the middle of a table longer than the buffer. Standard output
    is flushed before anything goes to stderr (ExitStatus.writeStandardError)."""
    for switch in ["disable", "enable", "disable"]:
        agent.cli(switch, "--all")
    table = agent.cli("history", "--limit", "2").stdout
    r = subprocess.run([str(BIN / "bgpolicy"), "history", "--limit", "2"], env=agent.env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=20)
    assert r.returncode == 0, r
    note = "bgpolicy: note: only the newest 2 events are shown; older ones were left out (--limit shows up to 10000).\n"
    assert r.stdout == table + note, r.stdout


# A stand-in for bgpolicyd on the test's bus, for values the real agent gives only by chance:
# Admin1's GetStatus and Explain answer the dictionaries given as GVariant text.
STAND_IN = r'''
import sys
import gi
gi.require_version("Gio", "2.0")
from gi.repository import Gio, GLib
answers = {name: GLib.Variant.parse(GLib.VariantType("a{sv}"), text, None, None)
           for name, text in zip(["GetStatus", "Explain"], sys.argv[1:])}
XML = """<node><interface name="org.bgpolicy.Admin1">
<method name="GetStatus"><arg type="a{sv}" direction="out"/></method>
<method name="Explain"><arg type="s" direction="in"/><arg type="s" direction="in"/><arg type="a{sv}" direction="out"/></method>
</interface></node>"""
def call(connection, sender, path, interface, method, parameters, invocation):
    invocation.return_value(GLib.Variant.new_tuple(answers[method]))
def owned(connection, name):
    print("READY", flush=True)
bus = Gio.bus_get_sync(Gio.BusType.SESSION)
bus.register_object("/org/bgpolicy/Agent1", Gio.DBusNodeInfo.new_for_xml(XML).interfaces[0], call, None, None)
Gio.bus_own_name_on_connection(bus, "org.bgpolicy.Agent1", Gio.BusNameOwnerFlags.NONE, owned, None)
GLib.MainLoop().run()
'''


@pytest.fixture
def stand_in(bus):
    """Starts the stand-in with the given GetStatus and Explain answers; returns bgpolicy's env."""
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=bus.address, COLUMNS="80")
    started = []

    def start(status="{}", explanation="{}"):
        proc = subprocess.Popen(["/usr/bin/python3", "-c", STAND_IN, status, explanation], env=env,
                                stdout=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stdout.readline() == "READY\n"
        return env

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_the_configuration_is_never_read_longer_ago_than_the_uptime(stand_in):
    """Both are whole seconds, of two clocks: the file read at the start showed "read 2 s ago"
    beside "Uptime 1 s". It cannot have been read before the agent started."""
    now = int(time.time())
    env = stand_in(f"{{'version': <'0.1.0'>, 'uptime_seconds': <1.0>, 'started_at': <int64 {now - 2}>, "
                   f"'config_source': <'defaults'>, 'config_loaded_at': <int64 {now - 2}>}}")
    r = subprocess.run([str(BIN / "bgpolicy"), "status"], env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r
    rows = {line.split()[0]: line for line in r.stdout.splitlines()[1:]}
    assert rows["Uptime"].split() == ["Uptime", "1", "s"], r.stdout
    assert rows["Config"].endswith("built-in defaults, read 1 s ago"), r.stdout


def test_explain_of_an_empty_identifier_has_no_trailing_space(stand_in):
    """The title joined the app and "" with a space at the end; "" is shown as the summary
    quotes it."""
    env = stand_in(explanation="{'app_id': <'org.example.Feeds'>, 'identifier': <''>, 'state': <'not-pending'>, "
                               "'summary': <'org.example.Feeds has no pending request \\'\\''>}")
    r = subprocess.run([str(BIN / "bgpolicy"), "explain", "org.example.Feeds", ""], env=env, capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 0, r
    assert r.stdout.splitlines()[0] == "org.example.Feeds ''", r.stdout
    assert all(line == line.rstrip() for line in r.stdout.splitlines()), r.stdout


ESC, RLO = "\\u001b", "\\u202e"  # as GVariant text escapes them: ESC, RIGHT-TO-LEFT OVERRIDE
UNSAFE_STATUS = (f"{{'version': <'0.1{ESC}[2J'>, 'state_dir': <'/tmp/st{RLO}ate'>, "
                 f"'conditions': <{{'summary': <'on AC{ESC}[31m'>, 'sources': <['up{ESC}]0;x', 'logind']>}}>, "
                 f"'zz{RLO}key': <'v{ESC}[1m'>, 'nested': <{{'b': <1>, 'a': <{{'d': <2>, 'c': <3>}}>}}>}}")


def test_status_makes_the_agent_s_text_safe(stand_in):
    """`status` printed the version, the state directory, the conditions' summary and sources,
    and unknown keys and their values as the agent sent them, where every other command passes
    the agent's text through TableText.cell (control characters, bidirectional overrides)."""
    r = subprocess.run([str(BIN / "bgpolicy"), "status"], env=stand_in(UNSAFE_STATUS), capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 0, r
    assert "\x1b" not in r.stdout and "\u202e" not in r.stdout, repr(r.stdout)
    lines = r.stdout.splitlines()
    assert lines[0] == "bgpolicyd 0.1?[2J is running", lines
    rows = {line.split()[0]: line.split(None, 1)[1] for line in lines[1:] if line.strip()}
    assert rows["State"] == "/tmp/st?ate", rows
    assert rows["Now"] == "on AC?[31m", rows
    assert rows["Sources"].startswith("logind, up?]0;x;"), rows
    assert rows["zz?key"] == "v?[1m", rows


def test_json_sorts_keys_at_every_depth(stand_in):
    """`--json` sorted the keys of the top level only, in the order the bus kept, while
    Docs/CLI.md says keys are sorted; the table's unknown keys are shown with the same JSON."""
    env = stand_in(UNSAFE_STATUS)
    r = subprocess.run([str(BIN / "bgpolicy"), "status", "--json"], env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r
    assert '"nested": {"a": {"c": 3, "d": 2}, "b": 1}' in r.stdout, r.stdout
    status = json.loads(r.stdout)
    assert list(status["conditions"]) == ["sources", "summary"], status
    # JSON is for scripts: the agent's text is kept exactly, as JSON escapes it.
    assert status["version"] == "0.1\x1b[2J" and status["conditions"]["summary"] == "on AC\x1b[31m", status
    r = subprocess.run([str(BIN / "bgpolicy"), "status"], env=env, capture_output=True, text=True, timeout=20)
    rows = {line.split()[0]: line.split(None, 1)[1] for line in r.stdout.splitlines()[1:] if line.strip()}
    assert rows["nested"] == '{"a": {"c": 3, "d": 2}, "b": 1}', r.stdout


def test_status_shows_the_next_planned_window_and_the_agent_s_timer_apart(world):
    """`status` printed GetStatus's `next_window`, the agent's timer, as "Next window": for a
    refresh held 50 minutes with no window planned after it, "Next window: tomorrow … (in 1 d)",
    a day after its earliest_begin and off the grid, where `pending` and `timeline` showed no
    window at all. `next_planned_window` is the earliest of ListPending's earliest windows
    (here none), and the timer is shown for what it is."""
    app_id = "org.example.Planned"
    agent = world.start_agent(planner=True)
    app = world.registered_app(app_id, [f"{app_id}.refresh"])
    app.submit(f"{app_id}.refresh", "refresh", earliest_begin=later(50 * 60))
    status = th.wait_until(lambda: (s := agent.status()) and "next_window" in s and s, 5, "the agent's timer")
    assert status["next_window"] > later(86_400 - 60), status
    # A second for the status to be worked out again after the Submit (at most once a second).
    time.sleep(1.2)
    status = agent.status()
    pending = agent.list_pending()
    assert [p["identifier"] for p in pending] == [f"{app_id}.refresh"] and "earliest_window" not in pending[0], pending
    assert "next_planned_window" not in status, status
    lines = agent.cli("status").stdout.splitlines()
    assert not any(line.startswith("Next window") for line in lines), lines
    assert any(line.startswith("Next look for work: ") and line.endswith("(in 1 d)") for line in lines), lines


@pytest.mark.parametrize("keys,shown", [
    ({"next_planned_window": 600, "next_window": 600}, ["Next window: {t600}"]),
    ({"next_planned_window": 600, "next_window": 7200}, ["Next window: {t600}", "Next look for work: {t7200}"]),
    ({"next_window": 7200}, ["Next look for work: {t7200}"]),
    ({"next_planned_window": 600}, ["Next window: {t600}"]),
], ids=["the same", "the timer later", "no window", "no timer"])
def test_status_labels_the_planned_window_and_the_timer(stand_in, keys, shown):
    """The timer is shown only when it is another time than the window, and never as one."""
    now = int(time.time())
    env = stand_in("{" + ", ".join(f"'{k}': <int64 {now + v}>" for k, v in keys.items()) + "}")
    r = subprocess.run([str(BIN / "bgpolicy"), "status"], env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r
    lines = [line for line in r.stdout.splitlines() if line.startswith("Next ")]

    def clock(t):  # TimeText.clock: the date too on another day
        same_day = time.strftime("%Y-%m-%d", time.localtime(t)) == time.strftime("%Y-%m-%d", time.localtime(now))
        return time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S", time.localtime(t))

    assert [line.split(" (")[0] for line in lines] == [
        s.format(t600=clock(now + 600), t7200=clock(now + 7200)) for s in shown], r.stdout


@pytest.mark.parametrize("command", [["timeline", "bad app"], ["pending", ""], ["history", ""], ["explain", "", "x"]],
                         ids=" ".join)
def test_text_that_is_no_app_id_is_answered_with_where_the_app_ids_are(agent, command):
    """The InvalidArgument hint said to check the arguments and that bgpolicy and bgpolicyd may
    be different versions: for an app id mistyped, it is the app ids that help."""
    r = agent.cli(*command, check=False)
    assert r.returncode == 1 and r.stdout == "", r
    message, hint = r.stderr.splitlines()
    assert "is not an app id" in message and message.endswith("(InvalidArgument)"), message
    assert hint == "'bgpolicy apps' lists the app ids.", r.stderr


@pytest.mark.parametrize("since", ["90", "1", "999999999"])
def test_history_refuses_a_bare_number_no_history_can_be_that_old(agent, since):
    """`history --since 90` read 90 as a Unix time and printed "No events since 1970-01-01
    00:01:30 (20790 d ago)"."""
    r = agent.cli("history", "--since", since, check=False)
    assert r.returncode == 64 and r.stdout == "", r
    assert f"did you mean {since}s?" in r.stderr, r.stderr


@pytest.mark.parametrize("since", ["999999999999d", "30000d", "-5m"])
def test_history_refuses_a_duration_it_cannot_go_back(agent, since):
    """`--since 999999999999d` asked for a negative Unix time and printed its date."""
    r = agent.cli("history", "--since", since, check=False)
    assert r.returncode == 64 and r.stdout == "", r
    assert "Error: " in r.stderr, r.stderr


@pytest.mark.parametrize("since", ["1.5h", "30sec", "2days", "1 h", "1h 30min", "1w", "24H", "90m", "1h30m", "2d"])
def test_history_reads_durations_as_the_configuration_file_does(agent, since):
    """`1w` was taken, and `1.5h`, `30sec`, `2days` and `1 h` refused, which the configuration
    and `replay --policy` take: one parser reads them all now, with weeks as before."""
    r = agent.cli("history", "--since", since, check=False)
    assert r.returncode == 0 and r.stdout.startswith("No events since "), r


def test_history_since_0_is_every_event_kept(agent):
    """GetHistory's 0, "all that are kept": not "since 1970"."""
    r = agent.cli("history", "--since", "0")
    assert r.stdout == "No events.\n", r


def test_the_user_s_own_control_characters_do_not_reach_the_terminal(agent, tmp_path):
    """A first word that is no command, and a configuration value, were printed back as typed,
    an escape sequence and all."""
    r = agent.cli("\x1b[31mred", check=False)
    assert r.returncode == 64 and "\x1b" not in r.stderr, repr(r.stderr)
    assert "'?[31mred' is not a bgpolicy command" in r.stderr, r.stderr
    r = agent.cli("help", "\x1b[31mred", check=False)
    assert r.returncode == 64 and "\x1b" not in r.stderr and "'?[31mred'" in r.stderr, repr(r.stderr)
    conf = tmp_path / "bad.conf"
    conf.write_text("[cpu]\nlimit = \x1b[31m70%\n")
    r = subprocess.run([str(BIN / "bgpolicyd"), "--config", str(conf), "--print-config"], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 78 and r.stdout == "", r
    assert "\x1b" not in r.stderr and 'got "?[31m70%"' in r.stderr, repr(r.stderr)


def test_the_configuration_path_is_absolute_and_an_empty_one_is_refused(bus, tmp_path):
    """`--config h.conf` showed "h.conf" in GetStatus and the log, of no use to whoever reads
    them elsewhere; `--config ""` said "invalid configuration: : No such file or directory"."""
    r = subprocess.run([str(BIN / "bgpolicyd"), "--config", ""], capture_output=True, text=True, timeout=20)
    assert r.returncode == 64 and "--config needs the path of a configuration file" in r.stderr, r
    (tmp_path / "h.conf").write_text("[cpu]\nlimit = 50%\n")
    a = Agent(bus, tmp_path, "--config", "h.conf", "--state-dir", "state", cwd=tmp_path)
    try:
        status = a.wait_ready()
        assert status["config_source"] == str(tmp_path / "h.conf"), status
        assert status["config_path"] == str(tmp_path / "h.conf"), status
        assert status["state_dir"] == str(tmp_path / "state"), status
    finally:
        a.stop()


def test_a_slice_just_begun_has_its_whole_length_left(stand_in):
    """The agent rounds the deadline up to a second, and bgpolicy rounded the time now down: a
    30-s slice begun in this second (its deadline this second + 31, rounded up) showed
    "deadline in 31 s"."""
    while time.time() % 1 > 0.5:
        time.sleep(0.05)
    now = int(time.time())
    env = stand_in(f"{{'running': <[{{'app_id': <'org.example.Feeds'>, 'identifiers': <['sync']>, "
                   f"'started_at': <int64 {now}>, 'deadline': <int64 {now + 31}>}}]>}}")
    r = subprocess.run([str(BIN / "bgpolicy"), "status"], env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r
    running = [line for line in r.stdout.splitlines() if line.startswith("Running: ")]
    assert running == ["Running: org.example.Feeds sync (started now, deadline in 30 s)"], r.stdout


def test_explain_says_just_now_of_an_open_this_second(stand_in):
    """"last now" read as a typo."""
    now = int(time.time())
    env = stand_in(explanation=f"{{'app_id': <'org.example.Feeds'>, 'identifier': <'sync'>, 'state': <'not-pending'>, "
                               f"'opens': <uint32 3>, 'opens_last_24h': <uint32 1>, 'last_open': <int64 {now}>}}")
    r = subprocess.run([str(BIN / "bgpolicy"), "explain", "org.example.Feeds", "sync"], env=env, capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 0, r
    assert "  Opened  3 times, 1 in the last 24 h; last just now" in r.stdout.splitlines(), r.stdout
