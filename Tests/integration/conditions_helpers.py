"""Helpers for test_conditions.py: the agent's view of the machine, read from real and mocked
daemons on a private "system" bus (TESTBED.md).

- `DBusDaemon`: a private dbus-daemon (the scripts' configuration when it is there).
- `Proc`: a started process with its stdout/stderr in files, ended (SIGTERM, then SIGKILL) on
  `stop()`; every wait has a timeout.
- `GBus`: a Python GDBus connection to one bus address: calls with timeouts, and a
  `SignalRecorder` that timestamps signals on GDBus's worker thread as they arrive (not when a
  main loop gets round to them): latencies measured with it are arrival times at this client.
- `Mock`: a python-dbusmock server on the private system bus (a template, or a bare object).
- `start_upowerd`, `Agent`, `battery_testbed`, `new_testbed`, `set_charger`, and starters for the
  logind, NetworkManager and power-profiles mocks.

Processes started through a `Stack` are stopped in reverse order when the test ends.
Needs `umockdev-wrapper` (LD_PRELOAD of libumockdev) for the testbeds, as scripts/check.sh runs it.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import gi

gi.require_version("Gio", "2.0")
gi.require_version("GLib", "2.0")
from gi.repository import Gio, GLib  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BUS_CONFIG = ROOT / "scripts" / "session-bus.conf"
PYTHON = "/usr/bin/python3"
UPOWERD = "/usr/libexec/upowerd"

AGENT_NAME = "org.bgpolicy.Agent1"
AGENT_PATH = "/org/bgpolicy/Agent1"
ADMIN_IFACE = "org.bgpolicy.Admin1"
PROPS_IFACE = "org.freedesktop.DBus.Properties"
MOCK_IFACE = "org.freedesktop.DBus.Mock"

UPOWER_NAME = "org.freedesktop.UPower"
NM_NAME = "org.freedesktop.NetworkManager"
NM_PATH = "/org/freedesktop/NetworkManager"
LOGIND_NAME = "org.freedesktop.login1"
LOGIND_PATH = "/org/freedesktop/login1"
LOGIND_MANAGER = "org.freedesktop.login1.Manager"
PPD_NAME = "org.freedesktop.UPower.PowerProfiles"
PPD_PATH = "/org/freedesktop/UPower/PowerProfiles"
PPD_LEGACY_NAME = "net.hadess.PowerProfiles"
PPD_LEGACY_PATH = "/net/hadess/PowerProfiles"

TIMEOUT = 20  # seconds, for any one subprocess or wait unless a test says otherwise


# MARK: Buses


class DBusDaemon:
    """A dbus-daemon of the test's own, started with --fork (ended by its pid)."""

    def __init__(self, address=None):
        """`address`: where to listen (`unix:path=…`, say) instead of the configuration's."""
        config = [f"--config-file={BUS_CONFIG}"] if BUS_CONFIG.is_file() else ["--session"]
        listen = [f"--address={address}"] if address else []
        result = subprocess.run(
            ["dbus-daemon", *config, *listen, "--fork", "--print-address=1", "--print-pid=2"],
            capture_output=True, text=True, timeout=TIMEOUT, check=False)
        pids = [line for line in result.stderr.splitlines() if line.strip().isdigit()]
        if result.returncode != 0 or not result.stdout.strip() or not pids:
            raise RuntimeError(f"dbus-daemon failed ({result.returncode}): {result.stdout} {result.stderr}")
        self.address = result.stdout.strip().splitlines()[0]
        self.pid = int(pids[-1])

    def stop(self):
        """SIGTERM, then SIGKILL; then its socket file (conftest's stop_bus)."""
        from conftest import stop_bus
        stop_bus(self.pid, self.address, timeout=3)

    def alive(self):
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        try:  # not our child: a zombie that nobody reaps yet counts as gone
            with open(f"/proc/{self.pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
        except OSError:
            return False


class SignalRecorder:
    """Signals matching `rule`, each as a dict with its arrival time (time.monotonic())."""

    def __init__(self, gbus, rule):
        self.gbus = gbus
        self.rule = rule
        self.events = []
        self.lock = threading.Lock()
        self._filter = gbus.conn.add_filter(self._on_message)
        gbus.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "AddMatch",
                  GLib.Variant("(s)", (rule,)))
        self.parts = dict(p.split("=", 1) for p in rule.split(","))
        self.parts = {k: v.strip("'") for k, v in self.parts.items()}

    def _on_message(self, _conn, message, incoming):
        # Runs on GDBus's worker thread, as soon as the message is read from the socket.
        now = time.monotonic()
        if incoming and message.get_message_type() == Gio.DBusMessageType.SIGNAL:
            p = self.parts
            if (p.get("interface") in (None, message.get_interface())
                    and p.get("member") in (None, message.get_member())
                    and p.get("path") in (None, message.get_path())):
                body = message.get_body()
                with self.lock:
                    self.events.append({
                        "time": now, "sender": message.get_sender(), "path": message.get_path(),
                        "interface": message.get_interface(), "member": message.get_member(),
                        "args": body.unpack() if body is not None else ()})
        return message

    def snapshot(self):
        with self.lock:
            return list(self.events)

    def wait(self, predicate, timeout, since=None):
        """The first recorded event (after time `since`) for which predicate(event) holds, or None."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.snapshot():
                if (since is None or event["time"] >= since) and predicate(event):
                    return event
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.005)

    def close(self):
        try:
            self.gbus.conn.remove_filter(self._filter)
        except Exception:  # noqa: BLE001 - the connection may be gone already
            pass


class GBus:
    """A GDBus connection to a bus address (never the machine's own buses)."""

    def __init__(self, address):
        self.address = address
        self.conn = Gio.DBusConnection.new_for_address_sync(
            address,
            Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION,
            None, None)
        self.recorders = []

    def call(self, dest, path, iface, method, args=None, reply_type=None, timeout=5.0):
        result = self.conn.call_sync(dest, path, iface, method, args,
                                     GLib.VariantType(reply_type) if reply_type else None,
                                     Gio.DBusCallFlags.NO_AUTO_START, int(timeout * 1000), None)
        return result.unpack() if result is not None else ()

    def has_owner(self, name):
        return self.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "NameHasOwner",
                         GLib.Variant("(s)", (name,)), "(b)")[0]

    def owner(self, name):
        try:
            return self.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                             "GetNameOwner", GLib.Variant("(s)", (name,)), "(s)")[0]
        except GLib.Error:
            return None

    def wait_for_name(self, name, timeout=TIMEOUT, present=True, process=None):
        deadline = time.monotonic() + timeout
        while self.has_owner(name) != present:
            if process is not None and process.popen.poll() is not None:
                raise AssertionError(f"{process.name} exited {process.popen.returncode} before "
                                     f"{'owning' if present else 'releasing'} {name}; stderr:\n{process.stderr()}")
            if time.monotonic() >= deadline:
                raise AssertionError(f"{name} {'not owned' if present else 'still owned'} after {timeout}s")
            time.sleep(0.02)

    def get_all(self, dest, path, iface):
        return self.call(dest, path, PROPS_IFACE, "GetAll", GLib.Variant("(s)", (iface,)), "(a{sv})")[0]

    def record(self, rule):
        recorder = SignalRecorder(self, rule)
        self.recorders.append(recorder)
        return recorder

    def close(self):
        for recorder in self.recorders:
            recorder.close()
        try:
            self.conn.close_sync(None)
        except GLib.Error:
            pass


# MARK: Processes


class Proc:
    """A started process, in a session of its own, with stdout and stderr in temporary files."""

    def __init__(self, args, env, name=None):
        self.args = [str(a) for a in args]
        self.name = name or Path(self.args[0]).name
        self._out = tempfile.TemporaryFile()
        self._err = tempfile.TemporaryFile()
        self.popen = subprocess.Popen(self.args, env=env, stdin=subprocess.DEVNULL, stdout=self._out,
                                      stderr=self._err, start_new_session=True)

    @property
    def pid(self):
        return self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def _read(self, f):
        # pread, not seek and read: the child writes through the same open file description,
        # so moving its offset would make the child's next write land over what it wrote.
        fd = f.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", errors="replace")

    def stdout(self):
        return self._read(self._out)

    def stderr(self):
        return self._read(self._err)

    def kill(self, sig=signal.SIGKILL, timeout=5):
        """Sends `sig` to the process and waits for it to exit."""
        if self.alive():
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=timeout)
        return self.popen.returncode

    def stop(self, timeout=5):
        if self.alive():
            self.popen.terminate()
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.popen.wait(timeout=timeout)
        return self.popen.returncode


class Stack:
    """Everything a test started, stopped in reverse order at the end."""

    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)
        return item

    def close(self):
        errors = []
        for item in reversed(self.items):
            try:
                if isinstance(item, (Proc, DBusDaemon)):
                    item.stop()
                elif isinstance(item, GBus):
                    item.close()
                elif callable(item):
                    item()
            except Exception as e:  # noqa: BLE001 - clean up the rest all the same
                errors.append(e)
        self.items.clear()
        if errors:
            raise errors[0]


# MARK: Mocks


class Mock:
    """A python-dbusmock server on the private system bus, driven through GDBus."""

    def __init__(self, stack, system, env, name, path, *, template=None, parameters=None, iface=None):
        self.system = system
        self.name = name
        self.path = path
        args = [PYTHON, "-m", "dbusmock", "--system"]
        if template:
            args += ["--template", template]
            if parameters:
                args += ["--parameters", json.dumps(parameters)]
        else:
            args += [name, path, iface]
        self.proc = stack.push(Proc(args, env, name=f"dbusmock {template or name}"))
        system.wait_for_name(name, process=self.proc)

    def mock(self, method, signature="", args=(), path=None, reply_type=None):
        return self.system.call(self.name, path or self.path, MOCK_IFACE, method,
                                GLib.Variant(f"({signature})", tuple(args)) if signature else None, reply_type)

    def call(self, iface, method, signature="", args=(), path=None, reply_type=None):
        return self.system.call(self.name, path or self.path, iface, method,
                                GLib.Variant(f"({signature})", tuple(args)) if signature else None, reply_type)

    def set_property(self, iface, prop, value, path=None):
        """org.freedesktop.DBus.Properties.Set on the mock: it stores and emits PropertiesChanged."""
        self.system.call(self.name, path or self.path, PROPS_IFACE, "Set",
                         GLib.Variant("(ssv)", (iface, prop, value)))


def start_logind(stack, system, env, session=True):
    """The dbusmock logind template, with the user's graphical session c1 when `session`."""
    logind = Mock(stack, system, env, LOGIND_NAME, LOGIND_PATH, template="logind")
    # python-dbusmock 0.28.7's GetUser adds a str and a dbus.UInt32 and so always fails with a
    # Python TypeError; replace it with one that works (later releases fixed it the same way).
    logind.mock("AddMethod", "sssss", (LOGIND_MANAGER, "GetUser", "u", "o",
                                       'ret = dbus.ObjectPath("/org/freedesktop/login1/user/%d" % args[0])'))
    if session:
        logind.session_path = logind.mock("AddSession", "ssusb", ("c1", "seat0", os.getuid(), "user", True),
                                          reply_type="(s)")[0]
    return logind


def start_networkmanager(stack, system, env, parameters=None, metered=None, primary_type=None):
    """The dbusmock networkmanager template, with the properties it lacks added (TESTBED.md)."""
    nm = Mock(stack, system, env, NM_NAME, "/org/freedesktop", template="networkmanager", parameters=parameters)
    nm.path = NM_PATH
    if metered is not None:
        nm.mock("AddProperty", "ssv", (NM_NAME, "Metered", metered))
    if primary_type is not None:
        nm.mock("AddProperty", "ssv", (NM_NAME, "PrimaryConnection", GLib.Variant("o", "/")))
        nm.mock("AddProperty", "ssv", (NM_NAME, "PrimaryConnectionType", GLib.Variant("s", primary_type)))
    return nm


def nm_set(nm, prop, value):
    """The networkmanager template's SetProperty: Set (standard PropertiesChanged) plus NM's own signal."""
    nm.mock("SetProperty", "sssv", (NM_PATH, NM_NAME, prop, value), path="/org/freedesktop")


def start_power_profiles(stack, system, env, legacy, active="balanced"):
    """power-profiles-daemon under its legacy name (the `power_profiles_daemon` template), or under
    the current name. Debian 12's python-dbusmock 0.28.7 has no `upower_power_profiles_daemon`
    template, so for the current name the same object is built by hand (as that template does in
    later dbusmock releases) when the template is missing."""
    if legacy:
        return Mock(stack, system, env, PPD_LEGACY_NAME, PPD_LEGACY_PATH, template="power_profiles_daemon",
                    parameters={"ActiveProfile": active})
    if has_template("upower_power_profiles_daemon"):
        return Mock(stack, system, env, PPD_NAME, PPD_PATH, template="upower_power_profiles_daemon",
                    parameters={"ActiveProfile": active})
    ppd = Mock(stack, system, env, PPD_NAME, PPD_PATH, iface=PPD_NAME)
    profiles = [{"Profile": GLib.Variant("s", p), "Driver": GLib.Variant("s", "dbusmock")}
                for p in ("power-saver", "balanced", "performance")]
    ppd.mock("AddProperties", "sa{sv}", (PPD_NAME, {
        "ActiveProfile": GLib.Variant("s", active),
        "PerformanceDegraded": GLib.Variant("s", ""),
        "Profiles": GLib.Variant("aa{sv}", profiles),
        "Actions": GLib.Variant("as", []),
        "ActiveProfileHolds": GLib.Variant("aa{sv}", []),
    }))
    return ppd


def has_template(name):
    try:
        import dbusmock.templates  # noqa: PLC0415
    except ImportError:
        return False
    return (Path(dbusmock.templates.__file__).parent / f"{name}.py").is_file()


# MARK: Testbeds


def umockdev_available():
    """Whether libumockdev is preloaded (the tests run under umockdev-wrapper)."""
    return "libumockdev-preload" in os.environ.get("LD_PRELOAD", "")


def new_testbed():
    gi.require_version("UMockdev", "1.0")
    from gi.repository import UMockdev  # noqa: PLC0415
    return UMockdev.Testbed.new()


# 25.2 Wh of 60 Wh: 42 %.
BATTERY_42 = ["type", "Battery", "present", "1", "status", "Discharging", "energy_full", "60000000",
              "energy_full_design", "80000000", "energy_now", "25200000", "voltage_now", "12000000"]


def battery_testbed():
    """A laptop on battery at 42 %: (testbed, ac, bat)."""
    tb = new_testbed()
    ac = tb.add_device("power_supply", "AC", None, ["type", "Mains", "online", "0"], [])
    bat = tb.add_device("power_supply", "BAT0", None, BATTERY_42, [])
    return tb, ac, bat


def set_charger(tb, ac, bat, plugged):
    """The charger plugged in or out, as the kernel says it: attributes, then uevents.
    Returns time.monotonic() just before the first uevent."""
    tb.set_attribute(ac, "online", "1" if plugged else "0")
    tb.set_attribute(bat, "status", "Charging" if plugged else "Discharging")
    t = time.monotonic()
    tb.uevent(ac, "change")
    tb.uevent(bat, "change")
    return t


# MARK: upowerd and the agent


def system_env(system_address, testbed, tmp):
    """The environment of processes on the private system bus, under the umockdev testbed."""
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=system_address, SYSTEMD_DEVICE_VERIFY_SYSFS="0",
               UPOWER_HISTORY_DIR=str(tmp), UPOWER_STATE_DIR=str(tmp))
    if testbed is not None:
        env["UMOCKDEV_DIR"] = testbed.get_root_dir()
    return env


def start_upowerd(stack, system, env):
    """The real upowerd (-r: replace, -v: verbose) on the private system bus; waits until it owns
    its name (it claims it after its first enumeration of the testbed)."""
    (Path(env["UPOWER_HISTORY_DIR"])).mkdir(parents=True, exist_ok=True)
    upowerd = stack.push(Proc([UPOWERD, "-r", "-v"], env, name="upowerd"))
    system.wait_for_name(UPOWER_NAME, process=upowerd)
    return upowerd


def agent_env(session_address, system_address, testbed, tmp):
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=session_address,
               XDG_STATE_HOME=str(Path(tmp) / "state"), XDG_CONFIG_HOME=str(Path(tmp) / "config"))
    # Never the machine's own system bus: without a private one, an address where none listens.
    env["DBUS_SYSTEM_BUS_ADDRESS"] = system_address or "unix:path=/nonexistent"
    if testbed is not None:
        env["UMOCKDEV_DIR"] = testbed.get_root_dir()
    else:
        env.pop("UMOCKDEV_DIR", None)
    return env


class Agent:
    """bgpolicyd on a private session bus, watched from a Python GDBus client."""

    def __init__(self, stack, bin_dir, session, env, log_level="debug"):
        self.bin_dir = Path(bin_dir)
        self.session = session
        self.env = env
        self.proc = stack.push(Proc([self.bin_dir / "bgpolicyd", "--log-level", log_level], env, name="bgpolicyd"))
        self.changes = session.record(
            f"type='signal',interface='{PROPS_IFACE}',member='PropertiesChanged',path='{AGENT_PATH}'")
        session.wait_for_name(AGENT_NAME, process=self.proc)

    def status(self):
        return self.session.call(AGENT_NAME, AGENT_PATH, ADMIN_IFACE, "GetStatus", None, "(a{sv})")[0]

    def conditions(self):
        """The Conditions property, through org.freedesktop.DBus.Properties.Get."""
        return self.session.call(AGENT_NAME, AGENT_PATH, PROPS_IFACE, "Get",
                                 GLib.Variant("(ss)", (ADMIN_IFACE, "Conditions")), "(v)")[0]

    def wait_conditions(self, predicate, timeout=5.0, what="conditions"):
        """Polls Conditions every 20 ms until predicate holds; fails with what it saw."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.proc.alive():
                raise AssertionError(f"bgpolicyd exited {self.proc.popen.returncode}; stderr:\n{self.stderr_tail()}")
            current = self.conditions()
            if predicate(current):
                return current
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what}: not reached within {timeout}s; last Conditions: {current!r}\n"
                                     f"agent stderr (tail):\n{self.stderr_tail()}")
            time.sleep(0.02)

    def wait_changed(self, predicate, since, timeout):
        """The first Conditions PropertiesChanged after `since` whose new value satisfies predicate."""
        def matches(event):
            iface, changed, _ = event["args"]
            return iface == ADMIN_IFACE and "Conditions" in changed and predicate(changed["Conditions"])
        return self.changes.wait(matches, timeout, since=since)

    def cli(self, *args, timeout=TIMEOUT):
        return subprocess.run([str(self.bin_dir / "bgpolicy"), *args], env=dict(self.env, COLUMNS="100"),
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def stderr(self):
        return self.proc.stderr()

    def stderr_tail(self, lines=40):
        return "\n".join(self.proc.stderr().splitlines()[-lines:])


def thread_switches(pid):
    """{thread name (with its id): voluntary + involuntary context switches} of process `pid`,
    one entry per thread: how often each has woken."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except FileNotFoundError:  # the thread ended
            continue
        name = f"{fields['Name'].strip()} ({tid})"
        out[name] = int(fields["voluntary_ctxt_switches"]) + int(fields["nonvoluntary_ctxt_switches"])
    return out


def wakes_over(pid, seconds):
    """The context switches of each thread of `pid` in the next `seconds` (threads that woke)."""
    before = thread_switches(pid)
    time.sleep(seconds)
    after = thread_switches(pid)
    return {name: n - before.get(name, 0) for name, n in after.items() if n - before.get(name, 0) > 0}


def thread_names(pid):
    """The names of the threads of process `pid` (/proc/PID/task/TID/comm), one per thread."""
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            names.append(Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip())
        except FileNotFoundError:  # the thread ended
            continue
    return names


def wake_report(agent, seconds=2):
    """For a failed check of wake-ups, what the agent's threads were doing: each thread's name,
    where it sleeps (wchan) and the system call it is in; what strace saw over `seconds`
    (when strace is installed: the calls, signals and their threads); the agent's log tail.
    Only the report of a failure: it attaches to the agent, and so wakes it."""
    pid = agent.proc.pid
    lines = ["threads (name, tid, wchan, syscall):"]
    for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
        base = f"/proc/{pid}/task/{tid}"
        try:
            name = Path(f"{base}/comm").read_text().strip()
            wchan = Path(f"{base}/wchan").read_text().strip()
            call = Path(f"{base}/syscall").read_text().split()[0]
        except (FileNotFoundError, IndexError, PermissionError):
            continue
        lines.append(f"  {name} {tid} {wchan} {call}")
    strace = shutil.which("strace")
    if strace:
        # Ended by SIGINT, on which strace detaches cleanly (a SIGKILL could leave it stopped).
        tracer = subprocess.Popen([strace, "-f", "-tt", "-qq", "-p", str(pid)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        time.sleep(seconds)
        tracer.send_signal(signal.SIGINT)
        try:
            traced = tracer.communicate(timeout=5)[1]
        except subprocess.TimeoutExpired:
            tracer.kill()
            traced = tracer.communicate()[1]
        traced_lines = traced.splitlines()
        lines.append(f"strace over {seconds} s ({len(traced_lines)} lines, the first 60):")
        lines.extend("  " + line for line in traced_lines[:60])
    else:
        lines.append("(strace is not installed: no trace)")
    lines.append("the agent's log, last lines:")
    lines.extend(line[:300] for line in agent.stderr_tail(20).splitlines())
    return "\n".join(lines)


def find_bin_dir():
    """conftest's: $BGPOLICY_BUILD_DIR, else where `$SWIFT build` puts its binaries."""
    from conftest import find_bin_dir as conftest_find_bin_dir
    return conftest_find_bin_dir()


def log(*args):
    """Printed measurements (pytest -s shows them; -rA shows them in the summary too)."""
    print(*args, file=sys.stdout, flush=True)
