"""bgpolicyd and bgpolicy as a user meets them: real binaries on a private session bus,
queried by gdbus, busctl, Python GDBus and our own CLI."""
import contextlib
import json
import os
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import find_bin_dir, process_alive, remove_bus_sockets, stop_bus

ROOT = Path(__file__).resolve().parents[2]
AGENT_PATH = "/org/bgpolicy/Agent1"
BUS_NAME = "org.bgpolicy.Agent1"


BIN = find_bin_dir()


class Bus:
    """A private dbus-daemon; never the machine's own session bus. Its configuration is the
    scripts' (scripts/session-bus.conf): the stock session one reads the machine's service
    directories, so a name nobody owns, org.bgpolicy.Agent1 included, would start the
    bgpolicyd installed there, against the user's real state."""

    def __init__(self):
        out = subprocess.run(
            ["dbus-daemon", f"--config-file={ROOT / 'scripts' / 'session-bus.conf'}", "--fork",
             "--print-address=1", "--print-pid=1"],
            capture_output=True, text=True, check=True, timeout=10)
        lines = out.stdout.split()
        self.address, self.pid = lines[0], int(lines[1])
        self.killed = False

    def kill(self):
        """SIGKILL, as a crash: its socket file stays until `stop()`, as a crashed daemon's does."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.killed = True

    def stop(self):
        """SIGTERM, then SIGKILL; then its socket file, which a killed daemon leaves in /tmp.
        A daemon `kill()` ended is not signalled again (its pid may be another process's)."""
        if self.killed:
            deadline = time.monotonic() + 5
            while process_alive(self.pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            if not process_alive(self.pid):
                remove_bus_sockets(self.address)
        else:
            stop_bus(self.pid, self.address)


class Agent:
    def __init__(self, bus, tmp, *args, config=None, env_extra=None, cwd=None):
        self.tmp = Path(tmp)
        self.env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=bus.address,
                        XDG_STATE_HOME=str(self.tmp / "state"), XDG_CONFIG_HOME=str(self.tmp / "config"),
                        COLUMNS="80")
        if env_extra:
            self.env.update(env_extra)
        if config is not None:
            (self.tmp / "config" / "bgpolicy").mkdir(parents=True, exist_ok=True)
            (self.tmp / "config" / "bgpolicy" / "bgpolicy.conf").write_text(config)
        self.proc = subprocess.Popen([str(BIN / "bgpolicyd"), *args], env=self.env, cwd=cwd,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait_ready(self, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"agent exited {self.proc.returncode}: {self.proc.stderr.read()}")
            r = self.cli("status", "--json", check=False)
            if r.returncode == 0:
                return json.loads(r.stdout)
            time.sleep(0.05)
        raise AssertionError("agent did not become ready")

    def cli(self, *args, check=True):
        r = subprocess.run([str(BIN / "bgpolicy"), *args], env=self.env, capture_output=True, text=True, timeout=20)
        if check:
            assert r.returncode == 0, r.stderr
        return r

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def bus():
    b = Bus()
    yield b
    b.stop()


@pytest.fixture
def agent(bus, tmp_path):
    a = Agent(bus, tmp_path)
    a.wait_ready()
    yield a
    a.stop()


def gdbus(bus, *args, check=False):
    return subprocess.run(["gdbus", "call", "--address", bus.address, "--dest", BUS_NAME,
                           "--object-path", AGENT_PATH, *args], capture_output=True, text=True, timeout=20)


def busctl(bus, *args):
    return subprocess.run(["busctl", f"--address={bus.address}", *args], capture_output=True, text=True, timeout=20)


def test_the_test_bus_starts_nothing_installed_on_the_machine(bus):
    """The tests' bus reads no service directory: a call to a name nobody owns (the agent's,
    before a test starts it) must fail, not start what the machine has installed."""
    r = busctl(bus, "--json=short", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus",
               "org.freedesktop.DBus", "ListActivatableNames")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["data"] == [["org.freedesktop.DBus"]], r.stdout


# --- Status and the CLI ---------------------------------------------------------------

def test_status_reports_real_facts(agent):
    status = json.loads(agent.cli("status", "--json").stdout)
    assert status["pid"] == agent.proc.pid
    assert status["version"] == "0.1.0"
    assert status["state_dir"] == str(agent.tmp / "state" / "bgpolicy")
    assert status["config_source"] == "defaults"
    assert status["config_path"] == str(agent.tmp / "config" / "bgpolicy" / "bgpolicy.conf")
    assert abs(status["started_at"] - time.time()) < 60
    # Whole seconds, from a monotonic clock: a later call a second and a bit on is one more.
    first = status["uptime_seconds"]
    assert first == int(first), first
    time.sleep(1.2)
    later = json.loads(agent.cli("status", "--json").stdout)["uptime_seconds"]
    assert later == int(later) and later >= first + 1, (first, later)


def test_status_human_table(agent):
    out = agent.cli("status").stdout
    lines = out.splitlines()
    assert lines[0] == "bgpolicyd 0.1.0 is running"
    assert f"PID      {agent.proc.pid}" in out
    assert str(agent.tmp / "state" / "bgpolicy") in out
    assert "built-in defaults" in out
    # The default subcommand is status.
    assert agent.cli().stdout.splitlines()[0] == lines[0]


def test_status_names_the_config_file_in_use(bus, tmp_path):
    a = Agent(bus, tmp_path, config="[cpu]\nlimit = 50%\n")
    try:
        status = a.wait_ready()
        assert status["config_source"] == str(tmp_path / "config" / "bgpolicy" / "bgpolicy.conf")
    finally:
        a.stop()


def test_status_when_agent_is_not_running(bus, tmp_path):
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=bus.address)
    r = subprocess.run([str(BIN / "bgpolicy"), "status"], env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode != 0
    assert "bgpolicyd is not running on this session bus" in r.stderr
    assert "systemctl --user start bgpolicyd" in r.stderr and "make run" not in r.stderr, r.stderr


def test_cli_without_any_session_bus():
    env = {k: v for k, v in os.environ.items() if k != "DBUS_SESSION_BUS_ADDRESS"}
    env["XDG_RUNTIME_DIR"] = "/nonexistent"
    r = subprocess.run([str(BIN / "bgpolicy"), "status"], env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == 69 and r.stdout == "", r
    # One line: the message says what to do; a hint said it again, with 'make run', a target of
    # the source tree only.
    assert r.stderr.startswith("bgpolicy: bgpolicyd is not reachable: no session bus: "), r.stderr
    assert len(r.stderr.splitlines()) == 1 and "dbus-run-session" in r.stderr, r.stderr
    assert "make run" not in r.stderr, r.stderr


def test_gdbus_and_busctl_call_getstatus(agent, bus):
    r = gdbus(bus, "--method", "org.bgpolicy.Admin1.GetStatus")
    assert r.returncode == 0, r.stderr
    assert f"'pid': <uint32 {agent.proc.pid}>" in r.stdout
    r = busctl(bus, "--json=short", "call", BUS_NAME, AGENT_PATH, "org.bgpolicy.Admin1", "GetStatus")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)["data"][0]
    assert data["version"] == {"type": "s", "data": "0.1.0"}


HELP_COMMANDS = [
    ["--help"], ["status", "--help"], ["apps", "--help"], ["pending", "--help"], ["history", "--help"],
    ["explain", "--help"], ["timeline", "--help"], ["enable", "--help"], ["disable", "--help"],
    ["forget", "--help"], ["reload", "--help"], ["simulate", "--help"], ["simulate", "launch", "--help"],
    ["simulate", "expire", "--help"], ["replay", "--help"],
]


@pytest.mark.parametrize("command", HELP_COMMANDS, ids=lambda c: " ".join(c))
def test_help_text_is_exact(bus, tmp_path, command):
    env = dict(os.environ, COLUMNS="80")
    r = subprocess.run([str(BIN / "bgpolicy"), *command], env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == 0
    golden = ROOT / "Tests" / "integration" / "golden" / ("bgpolicy" + "".join("-" + c.strip("-") for c in command) + ".txt")
    if os.environ.get("BGPOLICY_UPDATE_GOLDEN"):
        golden.write_text(r.stdout)
        # Compared with what it just wrote, the test would pass whatever the output.
        pytest.fail(f"golden file {golden.name} updated: review the diff, then rerun without BGPOLICY_UPDATE_GOLDEN")
    assert r.stdout == golden.read_text()


# --- The CLI's commands against an agent with no apps ------------------------------------
# Docs/CLI.md: human output by default, the agent's dictionaries with --json; exit status 1
# when bgpolicyd refuses, 64 for a usage error, 69 when it cannot be reached.

@pytest.mark.parametrize("command,empty", [
    (["apps"], "No app has registered with bgpolicyd."),
    (["pending"], "Nothing is pending."),
    (["history", "--since", "10m"], "No events since "),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_list_commands_with_no_apps(agent, command, empty):
    r = agent.cli(*command)
    assert r.stdout.startswith(empty), r.stdout
    assert r.stderr == ""
    assert json.loads(agent.cli(*command, "--json").stdout) == []


@pytest.mark.parametrize("command,error", [
    (["pending", "org.example.Nobody"], "NotRegistered"), (["history", "org.example.Nobody", "--limit", "5"], "NotRegistered"),
    (["pending", "bad app"], "InvalidArgument"), (["history", "bad app"], "InvalidArgument"),
], ids=lambda c: " ".join(c) if isinstance(c, list) else c)
def test_pending_and_history_of_an_unknown_app_are_refused_as_explain_refuses_it(agent, command, error):
    """Not "Nothing is pending for …" (status 0), which reads as if the app were known: a typo
    in an app id is refused with explain's message and status, --json or not (text that is no
    app id at all, with the rule it breaks)."""
    explain = agent.cli("explain", command[1], "refresh", check=False)
    assert explain.returncode == 1 and f"({error})" in explain.stderr, explain
    for extra in [[], ["--json"]]:
        r = agent.cli(*command, *extra, check=False)
        assert (r.returncode, r.stdout, r.stderr) == (1, "", explain.stderr), r


def test_history_of_a_fresh_agent_is_an_empty_json_list_for_any_window(agent):
    for since in ["0", "24h", "1h30m", "2d", "1w", str(int(time.time()))]:
        assert json.loads(agent.cli("history", "--since", since, "--limit", "10000", "--json").stdout) == []


def test_status_shows_the_scheduler_lines(agent):
    status = json.loads(agent.cli("status", "--json").stdout)
    assert status["global_enabled"] is True and status["apps"] == 0 and status["pending"] == 0
    assert status["running"] == []
    out = agent.cli("status").stdout.splitlines()
    assert "Background work: on" in out
    assert "Apps: 0, pending: 0" in out
    assert not any(line.startswith("Running:") for line in out)


def test_explain_of_an_unknown_app(agent):
    r = agent.cli("explain", "org.example.Nobody", "refresh", check=False)
    assert r.returncode == 1
    assert r.stdout == ""
    first = r.stderr.splitlines()[0]
    assert first.startswith("bgpolicy: ") and first.endswith("(NotRegistered)"), r.stderr
    assert "org.example.Nobody" in first
    assert "'bgpolicy apps'" in r.stderr
    r = agent.cli("explain", "org.example.Nobody", "refresh", "--json", check=False)
    assert r.returncode == 1 and r.stdout == "" and "(NotRegistered)" in r.stderr


@pytest.mark.parametrize("command", [
    ["enable", "org.example.Nobody"], ["disable", "org.example.Nobody"], ["forget", "org.example.Nobody"],
    ["simulate", "launch", "org.example.Nobody", "refresh"], ["simulate", "expire", "org.example.Nobody", "refresh"],
], ids=lambda c: " ".join(c))
def test_commands_on_an_unknown_app_are_refused(agent, command):
    r = agent.cli(*command, check=False)
    assert r.returncode == 1, r
    assert r.stdout == ""
    assert r.stderr.startswith("bgpolicy: ") and "(NotRegistered)" in r.stderr, r.stderr
    assert "org.example.Nobody" in r.stderr


def status_line_appears(agent, line, timeout=5):
    """GetStatus answers from a snapshot the engine refreshes after a change: poll briefly."""
    deadline = time.monotonic() + timeout
    while line not in agent.cli("status").stdout.splitlines():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_global_switch_round_trips(agent):
    r = agent.cli("disable", "--all")
    assert r.stdout == "Background work is off for every app, until 'bgpolicy enable --all'.\n"
    assert status_line_appears(agent, "Background work: off")
    assert json.loads(agent.cli("status", "--json").stdout)["global_enabled"] is False
    assert json.loads(agent.cli("enable", "--all", "--json").stdout) == {"global_enabled": True, "apps_switched_off": []}
    assert status_line_appears(agent, "Background work: on")
    events = [e["event"] for e in json.loads(agent.cli("history", "--json").stdout)]
    assert events[-2:] == ["global-disabled", "global-enabled"], events
    rows = agent.cli("history").stdout.splitlines()
    assert rows[0].split() == ["TIME", "APP", "IDENTIFIER", "EVENT", "RESULT", "DETAIL"]
    assert "global-disabled" in rows[-2] and "global-enabled" in rows[-1]


@pytest.mark.parametrize("command,says", [
    (["enable"], "Name an app, or pass --all"),
    (["disable"], "Name an app, or pass --all"),
    (["enable", "org.example.Feeds", "--all"], "not both"),
    (["disable", "org.example.Feeds", "--all"], "not both"),
    (["history", "--limit", "0"], "--limit must be between 1 and 10000"),
    (["history", "--limit", "10001"], "--limit must be between 1 and 10000"),
    (["history", "--since", "yesterday"], "use a duration such as 90m"),
    (["history", "--limit", "-5"], "--limit must be between 1 and 10000, not -5"),
    (["history", "--since", "-5"], "use a duration such as 90m"),
    (["history", "--since", "99999999999999"], "--since 99999999999999 is a Unix time in the future"),
    (["history", "--since", str(int(time.time()) * 1000)], "in seconds (not milliseconds)"),
    (["bogus"], "'bogus' is not a bgpolicy command; the commands are: status, apps"),
    (["explain", "org.example.Feeds"], "Missing expected argument '<identifier>'"),
    (["simulate", "launch", "org.example.Feeds"], "Missing expected argument '<identifier>'"),
    (["forget"], "Missing expected argument '<app>'"),
    (["forget", "org.example.Feeds", "org.example.Maps"], "Unexpected argument 'org.example.Maps'"),
    (["reload", "bgpolicy.conf"], "Unexpected argument 'bgpolicy.conf'"),
    (["simulate", "stop", "org.example.Feeds", "x"], "unexpected arguments"),
    (["simulate"], "name what to simulate: 'launch APP ID' or 'expire APP ID'\nUsage: bgpolicy simulate <subcommand>"),
    (["help", "bogus"], "'bogus' is not a bgpolicy command; the commands are: status, apps"),
    (["help", "simulate", "bogus"], "'bogus' is not a bgpolicy simulate command; the commands are: launch, expire."),
    (["help", "status", "bogus"], "'bogus' is not a command: 'bgpolicy status' has none."),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_usage_errors_exit_64_without_calling_the_agent(command, says):
    # No bus at all: a usage error is found before bgpolicy connects.
    env = {k: v for k, v in os.environ.items() if k != "DBUS_SESSION_BUS_ADDRESS"}
    env.update(XDG_RUNTIME_DIR="/nonexistent", COLUMNS="80")
    r = subprocess.run([str(BIN / "bgpolicy"), *command], env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == 64, r
    assert says in r.stderr, r.stderr
    assert r.stdout == "", r.stdout


@pytest.mark.parametrize("command", [["help", "simulate", "launch"], ["help", "status"], ["help"]],
                         ids=lambda c: " ".join(c))
def test_help_for_a_command_names_it(command):
    r = subprocess.run([str(BIN / "bgpolicy"), *command], env=dict(os.environ, COLUMNS="80"),
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 0 and r.stderr == "", r
    assert f"USAGE: {' '.join(['bgpolicy', *command[1:]])}" in r.stdout, r.stdout


@pytest.mark.parametrize("command", [
    ["apps"], ["pending"], ["history"], ["explain", "a.b", "c"], ["enable", "--all"], ["disable", "a.b"],
    ["forget", "a.b"], ["reload"], ["simulate", "launch", "a.b", "c"], ["simulate", "expire", "a.b", "c"],
], ids=lambda c: " ".join(c))
def test_every_command_says_when_the_agent_is_not_running(bus, command):
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=bus.address)
    r = subprocess.run([str(BIN / "bgpolicy"), *command], env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == 69, r
    assert r.stderr.startswith("bgpolicy: bgpolicyd is not running on this session bus"), r.stderr
    assert "systemctl --user start bgpolicyd" in r.stderr


# The user manager, as dbus-daemon started with --systemd-activation talks to it: it owns
# org.freedesktop.systemd1, is sent ActivationRequest(unit) for an activation file with
# SystemdService=, and answers a unit it cannot start with ActivationFailure(unit, error,
# message) to the bus, which fails the call that asked for the name with that error.
FAKE_USER_MANAGER = """
import sys
import gi
gi.require_version("Gio", "2.0")
from gi.repository import Gio, GLib
error, message = sys.argv[1], sys.argv[2]
conn = Gio.bus_get_sync(Gio.BusType.SESSION, None)
def refuse(conn, sender, path, iface, member, params, _):
    (unit,) = params.unpack()
    conn.emit_signal("org.freedesktop.DBus", "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Activator",
                     "ActivationFailure", GLib.Variant("(sss)", (unit, error, message.replace("UNIT", unit))))
conn.signal_subscribe("org.freedesktop.DBus", "org.freedesktop.systemd1.Activator", "ActivationRequest",
                      None, None, Gio.DBusSignalFlags.NONE, refuse, None)
conn.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "RequestName",
               GLib.Variant("(su)", ("org.freedesktop.systemd1", 4)), None, Gio.DBusCallFlags.NONE, -1, None)
print("ready", flush=True)
GLib.MainLoop().run()
"""


# What the user manager refuses an activation with, what bgpolicy and the library then say,
# and the hint they give.
REFUSALS = pytest.mark.parametrize("error,message,says,hint", [
    ("org.freedesktop.systemd1.NoSuchUnit", "Unit UNIT not found.",
     "bgpolicyd is not running and is not enabled", "systemctl --user enable --now bgpolicyd"),
    ("org.freedesktop.systemd1.UnitMasked", "Unit UNIT is masked.",
     "bgpolicyd is not running and is masked", "systemctl --user unmask bgpolicyd"),
    ("org.freedesktop.systemd1.ShuttingDown", "Refusing activation, D-Bus is shutting down.",
     "the bus could not start bgpolicyd: Refusing activation", "journalctl --user -u bgpolicyd"),
], ids=["not enabled", "masked", "other"])


@contextlib.contextmanager
def user_manager_refusing(tmp_path, error, message):
    """A session bus with systemd activation on which bgpolicyd is installed (its activation
    file) and the user manager refuses to start it with `error`: yields the environment of a
    process on that bus."""
    services = tmp_path / "services"
    services.mkdir()
    activation = (ROOT / "dbus" / "org.bgpolicy.Agent1.service.in").read_text()
    (services / "org.bgpolicy.Agent1.service").write_text(activation.replace("@libexecdir@", "/nonexistent"))
    config = tmp_path / "bus.conf"
    config.write_text((ROOT / "scripts" / "session-bus.conf").read_text().replace(
        "<listen>", f"<servicedir>{services}</servicedir><listen>", 1))
    out = subprocess.run(["dbus-daemon", f"--config-file={config}", "--systemd-activation", "--fork",
                          "--print-address=1", "--print-pid=1"], capture_output=True, text=True, check=True, timeout=10)
    address, pid = out.stdout.split()[0], int(out.stdout.split()[1])
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=address)
    manager = subprocess.Popen(["/usr/bin/python3", "-c", FAKE_USER_MANAGER, error, message], env=env,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert manager.stdout.readline() == "ready\n"
        yield env
    finally:
        manager.kill()
        manager.wait()
        stop_bus(pid, address)


@REFUSALS
def test_an_installed_agent_the_user_manager_cannot_start(tmp_path, error, message, says, hint):
    """`make install` without `systemctl --user enable bgpolicyd`: the activation file names a
    unit alias that does not exist, and systemd's error (not the agent's refusal) says why."""
    with user_manager_refusing(tmp_path, error, message) as env:
        # The commands that only look do not start the agent: the bus asks no one, and the
        # agent is simply not running.
        for command in [["status"], ["apps", "--json"]]:
            r = subprocess.run([str(BIN / "bgpolicy"), *command], env=env, capture_output=True, text=True, timeout=20)
            assert r.returncode == 69, r
            assert r.stderr.startswith("bgpolicy: bgpolicyd is not running on this session bus"), r.stderr
        # Those that change something ask the bus to start it, and the user manager refuses.
        for command in [["disable", "--all"], ["simulate", "launch", "org.example.App", "org.example.App.refresh"]]:
            r = subprocess.run([str(BIN / "bgpolicy"), *command], env=env, capture_output=True, text=True, timeout=20)
            assert r.returncode == 69, r
            assert r.stderr.startswith("bgpolicy: " + says), r.stderr
            assert hint in r.stderr and "refused" not in r.stderr, r.stderr


@REFUSALS
def test_a_swift_app_is_told_when_the_user_manager_cannot_start_the_agent(tmp_path, error, message, says, hint):
    """The same refusal, as the BackgroundTasks library reports it to an app (feed-reader):
    the agent is not running (`.agentNotRunning`), with what to do, not `.other` with systemd's
    bare "Unit … not found."."""
    with user_manager_refusing(tmp_path, error, message) as env:
        feed = tmp_path / "feed.txt"
        feed.write_text("one item\n")
        r = subprocess.run([str(BIN / "feed-reader"), "--feed", str(feed), "--cache", str(tmp_path / "cache.txt"),
                            "--exit-after", "1"], env=env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 1, r
        failed = [line for line in r.stdout.splitlines() if line.startswith("register-failed ")]
        assert failed, r.stdout
        assert failed[0].startswith("register-failed error=agentNotRunning message=" + says), failed[0]
        assert hint in failed[0], failed[0]


@pytest.mark.parametrize("command", [["status", "--json"], ["status"], ["--help"], ["--version"]],
                         ids=lambda c: " ".join(c))
def test_a_failed_write_to_standard_output_exits_74(agent, command):
    """`bgpolicy status --json > /dev/full` must not look like success to a script."""
    with open("/dev/full", "w") as full:
        r = subprocess.run([str(BIN / "bgpolicy"), *command], env=agent.env, stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=20)
    assert r.returncode == 74, r
    assert r.stderr == "bgpolicy: cannot write to standard output: No space left on device\n", r.stderr


# --- Introspection ----------------------------------------------------------------------

def test_busctl_introspect_shows_documented_interfaces(agent, bus):
    r = busctl(bus, "introspect", BUS_NAME, AGENT_PATH)
    assert r.returncode == 0, r.stderr
    assert "org.bgpolicy.Admin1" in r.stdout
    assert ".GetStatus" in r.stdout and "a{sv}" in r.stdout
    for standard in ["org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Peer", "org.freedesktop.DBus.Properties"]:
        assert standard in r.stdout


def test_introspection_matches_the_shipped_xml(agent, bus):
    import xml.etree.ElementTree as ET
    r = subprocess.run(["gdbus", "introspect", "--address", bus.address, "--dest", BUS_NAME,
                        "--object-path", AGENT_PATH, "--xml"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    def text(interface):
        interface.tail = None  # the whitespace after the element depends on what follows it
        return ET.tostring(interface)

    live = {i.get("name"): text(i) for i in ET.fromstring(r.stdout).findall("interface")}
    checked = set()
    for xml in (ROOT / "dbus").glob("org.bgpolicy.*.xml"):
        for iface in ET.parse(xml).getroot().findall("interface"):
            if iface.get("name") == "org.bgpolicy.Client1":
                # Exported by apps, not by the agent; shipped so that apps can use it.
                assert iface.get("name") not in live
                continue
            assert live[iface.get("name")] == text(iface), xml.name
            checked.add(iface.get("name"))
    assert checked == {"org.bgpolicy.Admin1", "org.bgpolicy.Scheduler1"}
    # Intermediate nodes introspect too, pointing at the child.
    r = subprocess.run(["gdbus", "introspect", "--address", bus.address, "--dest", BUS_NAME,
                        "--object-path", "/org/bgpolicy", "--xml"], capture_output=True, text=True, timeout=20)
    assert '<node name="Agent1"/>' in r.stdout


def test_peer_interface(agent, bus):
    assert busctl(bus, "call", BUS_NAME, AGENT_PATH, "org.freedesktop.DBus.Peer", "Ping").returncode == 0
    r = busctl(bus, "call", BUS_NAME, AGENT_PATH, "org.freedesktop.DBus.Peer", "GetMachineId")
    assert r.returncode == 0 and r.stdout.startswith("s ")


# --- Hostile calls --------------------------------------------------------------------

HOSTILE = [
    (["--method", "org.bgpolicy.Admin1.NoSuchMethod"], "org.bgpolicy.Error.UnknownMethod", "NoSuchMethod"),
    (["--method", "org.bgpolicy.Admin1.GetStatus", "42"], "org.bgpolicy.Error.InvalidArgument", 'not "i"'),
    (["--method", "org.bgpolicy.Admin1.GetStatus", "hello", "true"], "org.bgpolicy.Error.InvalidArgument", 'not "sb"'),
    (["--method", "org.bgpolicy.Nope1.GetStatus"], "org.bgpolicy.Error.UnknownInterface", "org.bgpolicy.Nope1"),
    (["--method", "org.freedesktop.DBus.Properties.Get", "org.bgpolicy.Admin1", "Nope"],
     "org.bgpolicy.Error.UnknownProperty", "Nope"),
    (["--method", "org.freedesktop.DBus.Properties.Get", "42"], "org.bgpolicy.Error.InvalidArgument", '"ss"'),
    (["--method", "org.freedesktop.DBus.Properties.GetAll", "org.bgpolicy.Nope1"],
     "org.bgpolicy.Error.UnknownInterface", "org.bgpolicy.Nope1"),
    (["--method", "org.freedesktop.DBus.Introspectable.Introspect", "1"], "org.bgpolicy.Error.InvalidArgument", "no arguments"),
]


@pytest.mark.parametrize("args,error,detail", HOSTILE)
def test_hostile_calls_get_clear_errors_and_the_agent_keeps_serving(agent, bus, args, error, detail):
    r = gdbus(bus, *args)
    assert r.returncode != 0
    assert f"GDBus.Error:{error}:" in r.stderr, r.stderr
    assert detail in r.stderr
    assert agent.proc.poll() is None
    assert gdbus(bus, "--method", "org.bgpolicy.Admin1.GetStatus").returncode == 0


def test_unknown_object_path(agent, bus):
    r = subprocess.run(["gdbus", "call", "--address", bus.address, "--dest", BUS_NAME, "--object-path", "/org/nope",
                        "--method", "org.bgpolicy.Admin1.GetStatus"], capture_output=True, text=True, timeout=20)
    assert "GDBus.Error:org.bgpolicy.Error.UnknownObject:" in r.stderr and "/org/nope" in r.stderr


def test_wrong_types_from_busctl(agent, bus):
    # busctl lets us send any signature at all; the agent must say what it expected.
    r = busctl(bus, "call", BUS_NAME, AGENT_PATH, "org.bgpolicy.Admin1", "GetStatus", "a{sv}", "1", "k", "v", "i", "3")
    assert r.returncode != 0
    assert 'takes arguments of type "", not "a{sv}"' in r.stderr
    assert agent.proc.poll() is None


def test_vanishing_clients_and_a_flood_do_not_hurt(agent, bus):
    # 50 clients that send a call and disconnect before the reply.
    script = f"""
import gi
from gi.repository import Gio, GLib
for _ in range(50):
    c = Gio.DBusConnection.new_for_address_sync({bus.address!r},
        Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION, None, None)
    c.call({BUS_NAME!r}, {AGENT_PATH!r}, 'org.bgpolicy.Admin1', 'GetStatus', None, None, 0, -1, None, None, None)
    c.close_sync(None)
# One client with 2000 calls in flight at once.
c = Gio.DBusConnection.new_for_address_sync({bus.address!r},
    Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION, None, None)
loop = GLib.MainLoop()
results = {{'ok': 0, 'limited': 0, 'other': []}}
pending = [2000]
def done(conn, res, _):
    try:
        conn.call_finish(res)
        results['ok'] += 1
    except GLib.Error as e:
        if 'org.bgpolicy.Error.LimitsExceeded' in e.message:
            results['limited'] += 1
        else:
            results['other'].append(e.message)
    pending[0] -= 1
    if pending[0] == 0:
        loop.quit()
for _ in range(2000):
    c.call({BUS_NAME!r}, {AGENT_PATH!r}, 'org.bgpolicy.Admin1', 'GetStatus', None, None, 0, 20000, None, done, None)
loop.run()
print(results['ok'], results['limited'], results['other'][:3])
"""
    r = subprocess.run(["/usr/bin/python3", "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ok, limited, other = r.stdout.split(maxsplit=2)
    # Every call got an answer: a reply or a clear LimitsExceeded, nothing else.
    assert int(ok) + int(limited) == 2000 and other.strip() == "[]", r.stdout
    assert int(ok) >= 256
    assert agent.proc.poll() is None
    assert gdbus(bus, "--method", "org.bgpolicy.Admin1.GetStatus").returncode == 0


# --- Lifecycle --------------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_stop_signal_exits_cleanly_within_a_second(agent, sig):
    start = time.monotonic()
    agent.proc.send_signal(sig)
    rc = agent.proc.wait(timeout=5)
    assert rc == 0
    assert time.monotonic() - start < 1.0
    assert "Agent stopped" in agent.proc.stderr.read()


def test_name_already_taken(agent, bus, tmp_path):
    second = Agent(bus, tmp_path / "second")
    rc = second.proc.wait(timeout=10)
    err = second.proc.stderr.read()
    assert rc != 0
    assert f"org.bgpolicy.Agent1 is already owned by process {agent.proc.pid}" in err
    assert "systemctl --user stop bgpolicyd" in err
    assert agent.proc.poll() is None


def test_no_session_bus(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DBUS_SESSION_BUS_ADDRESS"}
    env.update(XDG_RUNTIME_DIR="/nonexistent", XDG_STATE_HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path))
    r = subprocess.run([str(BIN / "bgpolicyd")], env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode != 0
    assert "cannot reach the session bus" in r.stderr and "dbus-run-session" in r.stderr


@pytest.mark.parametrize("config,line,key", [
    ("[cpu]\nlimit = 180%\n", 2, "limit"),
    ("[slices]\nrefresh = 30s\nrefesh = 10s\n", 3, "refesh"),
    ("[battery]\nlow = 20%\ncritical = 30%\n", 3, "critical"),
    ("[nonsense]\n", 1, "nonsense"),
])
def test_bad_config_names_line_and_key(bus, tmp_path, config, line, key):
    a = Agent(bus, tmp_path, config=config)
    rc = a.proc.wait(timeout=10)
    err = a.proc.stderr.read()
    assert rc != 0
    assert f"bgpolicy.conf:{line}:" in err and key in err, err


def test_explicit_config_must_exist(bus, tmp_path):
    a = Agent(bus, tmp_path, "--config", str(tmp_path / "missing.conf"))
    assert a.proc.wait(timeout=10) != 0
    assert "missing.conf" in a.proc.stderr.read()


def test_print_config_round_trips_through_the_agent(bus, tmp_path):
    out = subprocess.run([str(BIN / "bgpolicyd"), "--print-config"], capture_output=True, text=True, timeout=20,
                         env=dict(os.environ, XDG_CONFIG_HOME=str(tmp_path))).stdout
    assert "[slices]" in out and "refresh = 30s" in out
    conf = tmp_path / "effective.conf"
    conf.write_text(out)
    a = Agent(bus, tmp_path, "--config", str(conf))
    try:
        assert a.wait_ready()["config_source"] == str(conf)
    finally:
        a.stop()


def test_state_directory_is_private(agent):
    st = os.stat(agent.tmp / "state" / "bgpolicy")
    assert stat.S_IMODE(st.st_mode) == 0o700


def test_losing_the_bus_exits_non_zero(bus, tmp_path):
    a = Agent(bus, tmp_path)
    a.wait_ready()
    bus.kill()
    rc = a.proc.wait(timeout=10)
    assert rc != 0
    assert "session bus connection was lost" in a.proc.stderr.read()


def test_the_bus_refuses_a_takeover_of_the_agents_name(bus, tmp_path):
    # The agent asks for the name without allowing replacement, so the bus refuses a
    # takeover. (Its exit on NameLost is not tested: dbus-daemon takes a name from its
    # owner only when the owner allowed replacement, and a NameLost from anyone but the bus
    # does not match the agent's subscription.)
    a = Agent(bus, tmp_path)
    a.wait_ready()
    try:
        r = busctl(bus, "call", "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                   "RequestName", "su", BUS_NAME, "6")
        assert r.stdout.strip() == "u 3"  # EXISTS: the agent keeps its name
        assert a.proc.poll() is None
    finally:
        a.stop()


def test_make_run_without_a_desktop_session_brings_its_own_bus(tmp_path):
    """`make run` on a console or in CI: scripts/run.sh says it starts a private bus,
    and the agent really comes up on it."""
    env = {k: v for k, v in os.environ.items() if k not in ("DBUS_SESSION_BUS_ADDRESS",)}
    env.update(XDG_RUNTIME_DIR=str(tmp_path / "run"), XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_CONFIG_HOME=str(tmp_path / "config"))
    (tmp_path / "run").mkdir(mode=0o700)
    proc = subprocess.Popen([str(ROOT / "scripts" / "run.sh")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        said = proc.stdout.readline() + proc.stdout.readline()
        assert "No session bus here" in said and "dbus-run-session" in said, said
        address = said.split('DBUS_SESSION_BUS_ADDRESS="', 1)[1].split('"', 1)[0]
        deadline = time.monotonic() + 30
        while True:
            r = subprocess.run([str(BIN / "bgpolicy"), "status", "--json"], capture_output=True, text=True,
                               env=dict(env, DBUS_SESSION_BUS_ADDRESS=address), timeout=20)
            if r.returncode == 0:
                break
            assert time.monotonic() < deadline, r.stderr
            time.sleep(0.1)
        assert json.loads(r.stdout)["state_dir"] == str(tmp_path / "state" / "bgpolicy")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def test_a_system_bus_that_appears_later_is_picked_up(bus, tmp_path):
    """With no system bus, the agent waits for its socket to appear (no timer) and uses the bus
    once it exists: here a NetworkManager mock on it becomes a live source."""
    socket = tmp_path / "system_bus_socket"
    a = Agent(bus, tmp_path, env_extra={"DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={socket}"})
    system = None
    nm = None
    try:
        status = a.wait_ready()
        assert "networkmanager" not in status["conditions"]["sources"]
        system = subprocess.Popen(["dbus-daemon", f"--config-file={ROOT / 'scripts' / 'session-bus.conf'}", "--nofork",
                                   f"--address=unix:path={socket}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 5
        while not socket.exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        nm = subprocess.Popen(["/usr/bin/python3", "-m", "dbusmock", "--system", "--template", "networkmanager"],
                              env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=f"unix:path={socket}"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # The socket's creation wakes the agent (SocketPathWatch); the mock takes its name later.
        deadline = time.monotonic() + 10
        while "networkmanager" not in json.loads(a.cli("status", "--json").stdout)["conditions"]["sources"]:
            assert time.monotonic() < deadline, a.proc.stderr.read() if a.proc.poll() is not None else "not picked up"
            time.sleep(0.1)
        assert "The system bus is not reachable" in open_log(a)
    finally:
        a.stop()
        for p in (nm, system):
            if p is not None:
                p.kill()
                p.wait()


def open_log(agent):
    agent.stop()
    return agent.proc.stderr.read()


def test_status_survives_an_agent_that_sends_numbers_out_of_range(tmp_path):
    """Whatever owns org.bgpolicy.Agent1 may send anything: a `uptime_seconds` that is NaN,
    infinite or beyond any Int is shown as unknown, not a crash of `bgpolicy status` (it
    converted it to an Int, which traps)."""
    import tasks_helpers as th
    bus = th.PrivateBus(tmp_path)
    mock = None
    try:
        env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=bus.address, COLUMNS="100")
        mock = subprocess.Popen(["/usr/bin/python3", "-m", "dbusmock", "org.bgpolicy.Agent1", "/org/bgpolicy/Agent1",
                                 "org.bgpolicy.Admin1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for value in ("float('nan')", "float('inf')", "1e300"):
            code = f"ret = {{'uptime_seconds': dbus.Double({value}), 'pid': dbus.UInt32(42), 'global_enabled': True}}"
            deadline = time.monotonic() + 10
            while True:
                add = subprocess.run(["gdbus", "call", "--session", "--dest", "org.bgpolicy.Agent1", "--object-path",
                                      "/org/bgpolicy/Agent1", "--method", "org.freedesktop.DBus.Mock.AddMethod",
                                      "", "GetStatus", "", "a{sv}", code], env=env, capture_output=True, text=True)
                if add.returncode == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert add.returncode == 0, add.stderr
            r = subprocess.run([str(BIN / "bgpolicy"), "status"], env=env, capture_output=True, text=True, timeout=20)
            assert r.returncode == 0, (value, r.returncode, r.stderr)
            assert "Uptime" in r.stdout and "unknown" in r.stdout, (value, r.stdout, r.stderr)
    finally:
        if mock is not None:
            mock.kill()
            mock.wait()
        bus.stop()
