#!/usr/bin/python3
"""Helpers for the task tests (test_tasks, test_identity, test_persistence, test_activation,
test_cpu_monitor, test_flood): apps that really use org.bgpolicy.Scheduler1 from their own
processes, and an agent on a private bus whose view of /proc the test controls.

In the test process:
- `World` (fixture `world`): a private session bus (optionally with a service directory, for
  D-Bus activation), a fake proc root (`BGPOLICY_PROC_ROOT`) and an empty cgroup root
  (`BGPOLICY_CGROUP_ROOT`), a umockdev testbed on AC when the preload is there, and starters
  for the agent, test apps, a private "system" bus with logind, and the systemd user manager mock.
- `TaskAgent`: bgpolicyd on that bus with a config text and env extras; restart on the same
  state dir, SIGKILL, Admin1 calls, history waits, the `bgpolicy` CLI.
- `TestApp`: a handle on one app process (this file run as `app`): it connects to the bus,
  exports org.bgpolicy.Client1 at /org/bgpolicy/Client1, records every RunTask/ExpireTask with
  its arguments and times, completes tasks (by itself or when told), optionally burns one core in
  a thread during its slices and measures its own CPU (time.process_time) per task. The test
  drives it through a small control interface (org.bgpolicy.Test.App1) on the app's own
  connection: `Call` forwards any Scheduler1 call, asynchronously, so the app's main loop keeps
  answering RunTask while a call is in flight.
- `AgentError`: a D-Bus error as (name, message); `expect_error` asserts on org.bgpolicy.Error.*.

Run as a program (the apps must be processes of their own: the agent identifies callers by pid):
    tasks_helpers.py app --address ADDR [--no-client]
    tasks_helpers.py activated --app-id ID --bus-name NAME --identifier ID --log FILE [--exit-after-run-task S] [...]
    tasks_helpers.py flood --address ADDR --app-id ID [--count N] [--inflight N]

Every wait has a timeout; every process is ended when the test ends (conditions_helpers.Stack).
"""

import argparse
import json
import os
import random
import signal
import statistics
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import gi

gi.require_version("Gio", "2.0")
gi.require_version("GLib", "2.0")
from gi.repository import Gio, GLib  # noqa: E402

import conditions_helpers as ch  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PYTHON = "/usr/bin/python3"

AGENT_NAME = "org.bgpolicy.Agent1"
AGENT_PATH = "/org/bgpolicy/Agent1"
SCHEDULER = "org.bgpolicy.Scheduler1"
ADMIN = "org.bgpolicy.Admin1"
CLIENT = "org.bgpolicy.Client1"
CLIENT_PATH = "/org/bgpolicy/Client1"
CONTROL = "org.bgpolicy.Test.App1"
CONTROL_PATH = "/org/bgpolicy/Test/App1"
ERROR_PREFIX = "org.bgpolicy.Error."

TIMEOUT = 20  # seconds, for any one wait unless a test says otherwise
UINT64_MAX = 18446744073709551615

# A cgroup that names no app unit: the caller is a plain process of the login session.
SESSION_CGROUP = "0::/user.slice/user-1000.slice/session-2.scope\n"


def unit_cgroup(unit):
    """A cgroup v2 line for a process in the systemd user manager's app unit `unit`."""
    return f"0::/user.slice/user-1000.slice/user@1000.service/app.slice/{unit}\n"


# MARK: D-Bus calls and errors


class AgentError(Exception):
    """A D-Bus error reply: `name` (org.bgpolicy.Error.X) and the human `message`."""

    def __init__(self, name, message):
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message

    @classmethod
    def from_glib(cls, error):
        name = Gio.DBusError.get_remote_error(error) or f"{error.domain}:{error.code}"
        message = error.message
        prefix = f"GDBus.Error:{name}: "
        if message.startswith(prefix):
            message = message[len(prefix):]
        return cls(name, message)


def variant_args(signature, args):
    return GLib.Variant(f"({signature})", tuple(args)) if signature else None


def call(conn, iface, method, signature="", args=(), reply_type=None, timeout=10.0,
         dest=AGENT_NAME, path=AGENT_PATH):
    """A synchronous call from `conn`; the reply unpacked, or AgentError."""
    try:
        result = conn.call_sync(dest, path, iface, method, variant_args(signature, args),
                                GLib.VariantType(reply_type) if reply_type else None,
                                Gio.DBusCallFlags.NO_AUTO_START, int(timeout * 1000), None)
    except GLib.Error as error:
        raise AgentError.from_glib(error) from None
    return result.unpack() if result is not None else ()


def expect_error(short_name, fn, *args, **kwargs):
    """Calls fn(*args, **kwargs), which must fail with org.bgpolicy.Error.<short_name>;
    returns the error message (which must not be empty)."""
    try:
        result = fn(*args, **kwargs)
    except AgentError as error:
        assert error.name == ERROR_PREFIX + short_name, \
            f"expected {ERROR_PREFIX}{short_name}, got {error.name}: {error.message!r}"
        assert error.message.strip(), f"{error.name} came with an empty message"
        return error.message
    raise AssertionError(f"expected {ERROR_PREFIX}{short_name}, got success: {result!r}")


def submit_options(earliest_begin=None, requires_network=None, requires_external_power=None,
                   expected_duration=None):
    """Submit's a{sv} with the contract's types."""
    options = {}
    if earliest_begin is not None:
        options["earliest_begin"] = GLib.Variant("x", int(earliest_begin))
    if requires_network is not None:
        options["requires_network"] = GLib.Variant("b", requires_network)
    if requires_external_power is not None:
        options["requires_external_power"] = GLib.Variant("b", requires_external_power)
    if expected_duration is not None:
        options["expected_duration"] = GLib.Variant("u", expected_duration)
    return options


def register_options(app_id=None, bus_name=None, background_only=None):
    options = {}
    if app_id is not None:
        options["app_id"] = GLib.Variant("s", app_id)
    if bus_name is not None:
        options["bus_name"] = GLib.Variant("s", bus_name)
    if background_only is not None:
        options["background_only"] = GLib.Variant("b", background_only)
    return options


def later(seconds):
    """Unix seconds `seconds` from now, as earliest_begin wants them."""
    return int(time.time() + seconds)


def wait_until(predicate, timeout, what, interval=0.02):
    """Polls predicate() until it returns a true value, which is returned; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(interval)


def wait_between_windows(grid, after, before, not_before=None):
    """Waits until the time is `after` to `before` seconds past a grid point: clear of the open
    part of a window (a quarter of the grid, at most 60 s) and of the next one; and, when
    given, no earlier than Unix time `not_before`."""
    if not_before is not None:
        time.sleep(max(0.0, not_before - time.time()))
    while not (after < time.time() % grid < before):
        time.sleep(0.1)


# MARK: The planner's history


def restart_with_usage(agent, rows):
    """Restarts `agent` with `rows` (app id, state, time) added to its usage log, which it reads
    back at start (the agent is the only writer, so only while it is stopped). The rows stand
    for weeks the agent ran: the refresh planner's state that the agent stored at stop (its
    budget, of an agent that knew no apps) is not of those weeks, and goes."""
    agent.stop()
    db = sqlite3.connect(agent.world.tmp / "state" / "bgpolicy" / "bgpolicy.sqlite")
    with db:
        db.executemany("INSERT INTO usage (app_id, state, time) VALUES (?, ?, ?)", rows)
        for table in ("planner_state", "planner_wakes", "planner_refreshes"):
            db.execute(f"DELETE FROM {table}")
    db.close()
    agent.restart()
    return agent


def every_hour_for_three_weeks(visit, spread):
    """The rows `visit(t)` gives for one visit an hour, at a random minute in the first `spread`
    seconds of every hour of the last three weeks (so that whenever a test runs, it is a time
    of use)."""
    rng = random.Random(5)
    now = time.time()
    return [row for day in range(1, 22) for hour in range(24)
            for row in visit(now - day * 86400 - (now % 86400) + hour * 3600 + rng.uniform(0, spread))]


def mail_refreshed_after_use(world):
    """An agent with the refresh planner and three weeks of use in its log (Notes, then Mail two
    minutes later, every hour; News glanced at every five minutes, so the user is seen coming
    back to apps left), in which Mail's refresh has just run in the window after the user left
    Mail, been completed, and been submitted again. Returns the agent, Mail's test app and the
    `RunTask` event."""
    def visit(t):
        return [("org.example.Notes", "foreground", t), ("org.example.Mail", "foreground", t + 120)] + [
            ("org.example.News", state, t + 300 * k + offset) for k in range(12)
            for state, offset in (("foreground", 30), ("background", 60))]
    agent = restart_with_usage(world.start_agent(planner=True), every_hour_for_three_weeks(visit, 3000))
    mail = world.registered_app("org.example.Mail", ["org.example.Mail.refresh"])
    # Clear of the 15-min grid's windows and of the window after the registration's open.
    wait_between_windows(900, 61, 800, not_before=time.time() + 61)
    submit_refresh_that_waits(agent, mail, "org.example.Mail")
    mail.scheduler("ReportUsage", "s", ("background",))
    wait_refresh_delivered(agent, mail, "org.example.Mail", "in a refresh window opened because the user left the app")
    run = mail.wait_run_task("org.example.Mail.refresh")
    mail.complete(run["task_id"])
    mail.submit("org.example.Mail.refresh")
    return agent, mail, run


def mail_quit_with_its_refresh_waiting(world, start_command):
    """An agent with the refresh planner and three weeks of use in its log (the user goes on to
    Mail after opening Notes), Notes registered, and Mail's refresh waiting for predicted use,
    after Mail quit: its `bus_name` starts `start_command` (a D-Bus service file in the world's
    activation directory), which must fail. Notes was left; its next open (`ReportUsage`
    `foreground`) opens a window whose refresh of Mail is not delivered. Returns the agent and Notes' test app."""
    (world.service_dir / "org.example.Mail.service").write_text(
        f"[D-BUS Service]\nName=org.example.Mail\nExec={start_command}\n")

    def visit(t):
        return [("org.example.Mail", "foreground", t - 70), ("org.example.Mail", "background", t - 60),
                ("org.example.Notes", "foreground", t)] + [
            (app_id, state, t + 120 + 300 * k + offset) for k in range(4)
            for app_id, state, offset in (("org.example.Mail", "foreground", 0), ("org.example.Mail", "background", 60))]
    agent = restart_with_usage(world.start_agent(planner=True), every_hour_for_three_weeks(visit, 3600))
    notes = world.registered_app("org.example.Notes", ["org.example.Notes.refresh"])
    # Its registration was an open; the user leaves it, so that its next `foreground` is one.
    notes.scheduler("ReportUsage", "s", ("background",))
    mail = world.app("mail")
    mail.register(["org.example.Mail.refresh"], app_id="org.example.Mail", bus_name="org.example.Mail")
    mail.scheduler("ReportUsage", "s", ("background",))
    wait_between_windows(900, 61, 860, not_before=time.time() + 61)
    submit_refresh_that_waits(agent, mail, "org.example.Mail")
    mail.quit()
    wait_until(lambda: agent.app_record("org.example.Mail")["connected"] is False, 5, "Mail is gone")
    return agent, notes


def feed_waiting_for_the_next_window(world, agent):
    """Feed registered, 20 s or more before the next window of a 1-min grid, with a refresh that
    waits for it."""
    app = world.registered_app("org.example.Feed", ["org.example.Feed.refresh"])
    wait_between_windows(60, 16, 40)
    app.submit("org.example.Feed.refresh")
    assert agent.explain("org.example.Feed", "org.example.Feed.refresh")["blocking"] == ["next-window"]
    return app


def submit_refresh_that_waits(agent, app, app_id):
    """`app` submits `{app_id}.refresh`, which waits for the planner's predicted use."""
    app.submit(f"{app_id}.refresh")
    explanation = agent.explain(app_id, f"{app_id}.refresh")
    assert explanation["state"] == "pending" and "predicted-use" in explanation["blocking"], explanation


def wait_refresh_delivered(agent, app, app_id, why):
    """`{app_id}.refresh` runs within 10 s, off the 15-min grid's windows, and its history says
    `why`."""
    run = app.wait_run_task(f"{app_id}.refresh", timeout=10)
    assert run["time"] % 900 >= 61, run
    delivered = agent.wait_history("delivered", app_id=app_id)
    assert why in delivered["detail"], delivered


# MARK: Buses


class PrivateBus(ch.DBusDaemon):
    """A private dbus-daemon with the scripts' configuration, plus `service_dir` when given
    (for D-Bus activation; as scripts/check.sh does for the units stage)."""

    def __init__(self, tmp, service_dir=None):
        if service_dir is None:
            super().__init__()
            return
        config = Path(tmp) / "session-bus.conf"
        text = ch.BUS_CONFIG.read_text()
        config.write_text(text.replace("<listen>", f"<servicedir>{service_dir}</servicedir><listen>", 1))
        result = subprocess.run(
            ["dbus-daemon", f"--config-file={config}", "--fork", "--print-address=1", "--print-pid=2"],
            capture_output=True, text=True, timeout=TIMEOUT, check=False)
        pids = [line for line in result.stderr.splitlines() if line.strip().isdigit()]
        if result.returncode != 0 or not result.stdout.strip() or not pids:
            raise RuntimeError(f"dbus-daemon failed ({result.returncode}): {result.stdout} {result.stderr}")
        self.address = result.stdout.strip().splitlines()[0]
        self.pid = int(pids[-1])


# MARK: The agent


IMMEDIATE_WINDOWS = "[windows]\ngrid_on_battery = 1s\ngrid_on_ac = 1s\n[refresh]\nstrategy = every-window\n"


class TaskAgent:
    """bgpolicyd on the world's bus; the state dir survives `restart()` and `sigkill()`."""

    def __init__(self, world, config=None, env_extra=None, log_level="debug", planner=False, wrapper=()):
        self.world = world
        # A command the agent runs under (`wrapper + [bgpolicyd, ...]`), which must exec it.
        self.wrapper = list(wrapper)
        self.bin_dir = world.bin_dir
        self.log_level = log_level
        tmp = world.tmp
        config_dir = tmp / "config" / "bgpolicy"
        config_dir.mkdir(parents=True, exist_ok=True)
        if not planner:
            # Tests of the task cycle want work to run as soon as it is eligible: a window that
            # is always open and refresh in every window. Planner tests pass planner=True and
            # get the published defaults (15-min grid, predicted refresh).
            config = IMMEDIATE_WINDOWS + (config or "")
        if config is not None:
            (config_dir / "bgpolicy.conf").write_text(config)
        env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=world.address,
                   XDG_STATE_HOME=str(tmp / "state"), XDG_CONFIG_HOME=str(tmp / "config"),
                   BGPOLICY_PROC_ROOT=str(world.proc_root), BGPOLICY_CGROUP_ROOT=str(world.cgroup_root),
                   COLUMNS="100")
        env["DBUS_SYSTEM_BUS_ADDRESS"] = world.system_address or "unix:path=/nonexistent"
        if world.testbed is not None:
            env["UMOCKDEV_DIR"] = world.testbed.get_root_dir()
        else:
            env.pop("UMOCKDEV_DIR", None)
        if env_extra:
            env.update(env_extra)
        self.env = env
        self.proc = None
        self.previous = []  # earlier processes (restarts), for their logs
        self.start()

    def start(self):
        self.proc = self.world.stack.push(ch.Proc(
            self.wrapper + [self.bin_dir / "bgpolicyd", "--log-level", self.log_level], self.env, name="bgpolicyd"))
        self.world.session.wait_for_name(AGENT_NAME, process=self.proc)
        return self

    @property
    def pid(self):
        return self.proc.pid

    def sigkill(self):
        """Kills the agent with SIGKILL (no chance to save anything) and waits until its name is free."""
        self.proc.kill(signal.SIGKILL)
        self.previous.append(self.proc)
        self.world.session.wait_for_name(AGENT_NAME, present=False, timeout=10)

    def stop(self):
        self.proc.stop()
        self.previous.append(self.proc)
        self.world.session.wait_for_name(AGENT_NAME, present=False, timeout=10)

    def restart(self):
        return self.start()

    def alive(self):
        return self.proc.alive()

    def stderr(self):
        return "".join(p.stderr() for p in [*self.previous, self.proc])

    def stderr_tail(self, lines=60):
        return "\n".join(self.stderr().splitlines()[-lines:])

    # Admin1, from the test's own connection (not an app).

    def admin(self, method, signature="", args=(), reply_type=None, timeout=10.0):
        return call(self.world.session.conn, ADMIN, method, signature, args, reply_type, timeout)

    def status(self):
        return self.admin("GetStatus", reply_type="(a{sv})")[0]

    def list_apps(self):
        return self.admin("ListApps", reply_type="(aa{sv})")[0]

    def app_record(self, app_id):
        for app in self.list_apps():
            if app.get("app_id") == app_id:
                return app
        return None

    def list_pending(self):
        return self.admin("ListPending", reply_type="(aa{sv})")[0]

    def history(self, since=0, limit=10000):
        return self.admin("GetHistory", "xu", (int(since), limit), "(aa{sv})")[0]

    def events(self, event=None, app_id=None, task_id=None, identifier=None):
        """History entries, filtered."""
        return [e for e in self.history()
                if (event is None or e.get("event") == event) and (app_id is None or e.get("app_id") == app_id)
                and (task_id is None or e.get("task_id") == task_id)
                and (identifier is None or e.get("identifier") == identifier)]

    def wait_history(self, event, timeout=TIMEOUT, **filters):
        """The first history entry with `event` (and the filters); fails with the history seen."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.events(event, **filters)
            if found:
                return found[0]
            if not self.alive():
                raise AssertionError(f"bgpolicyd exited {self.proc.popen.returncode}:\n{self.stderr_tail()}")
            if time.monotonic() >= deadline:
                seen = [(e.get("event"), e.get("app_id"), e.get("identifier"), e.get("detail")) for e in self.history()]
                raise AssertionError(f"no history entry {event!r} {filters} within {timeout}s; history: {seen}\n"
                                     f"agent stderr (tail):\n{self.stderr_tail()}")
            time.sleep(0.05)

    def explain(self, app_id, identifier):
        return self.admin("Explain", "ss", (app_id, identifier), "(a{sv})")[0]

    def simulate_launch(self, app_id, identifier):
        return self.admin("SimulateLaunch", "ss", (app_id, identifier))

    def simulate_expiration(self, app_id, identifier):
        return self.admin("SimulateExpiration", "ss", (app_id, identifier))

    def set_app_enabled(self, app_id, enabled):
        return self.admin("SetAppEnabled", "sb", (app_id, enabled))

    def set_global_enabled(self, enabled):
        return self.admin("SetGlobalEnabled", "b", (enabled,))

    def cli(self, *args, timeout=TIMEOUT, check=True):
        """`bgpolicy ARGS...` against this agent; with `check`, a non-zero exit fails the test."""
        result = subprocess.run([str(self.bin_dir / "bgpolicy"), *map(str, args)], env=self.env,
                                capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check:
            assert result.returncode == 0, (f"bgpolicy {' '.join(map(str, args))} exited {result.returncode}\n"
                                            f"stdout: {result.stdout}\nstderr: {result.stderr}")
        return result

    def vm_rss_kib(self):
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS line")


# MARK: Test apps (the handle in the test process)


class TestApp:
    """An app process (this file run as `app`) and the test's handle on it."""

    __test__ = False  # not a pytest test class

    def __init__(self, world, name="app", client=True, extra_args=(), env_extra=None):
        self.world = world
        self.name = name
        args = [PYTHON, __file__, "app", "--address", world.address, *extra_args]
        if not client:
            args.append("--no-client")
        # PYTHONFAULTHANDLER: a hung app shows where it hangs when sent SIGABRT.
        env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=world.address, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
        env.pop("UMOCKDEV_DIR", None)
        if env_extra:
            env.update(env_extra)
        started = time.monotonic()
        self.proc = world.stack.push(ch.Proc(args, env, name=f"test app {name}"))
        try:
            line = wait_until(lambda: self._ready_line(), 15, f"test app {name} to print READY")
        except AssertionError as error:
            self.proc.kill(signal.SIGABRT)
            raise AssertionError(f"{error} (started {time.monotonic() - started:.1f}s ago); its stdout: "
                                 f"{self.proc.stdout()!r}; stderr:\n{self.proc.stderr()}") from None
        _, self.unique_name, pid = line.split()
        assert int(pid) == self.proc.pid
        self.pid = self.proc.pid
        self.app_id = None

    def _ready_line(self):
        if not self.proc.alive():
            raise AssertionError(f"test app {self.name} exited {self.proc.popen.returncode}: {self.proc.stderr()}")
        for line in self.proc.stdout().splitlines():
            if line.startswith("READY "):
                return line
        return None

    # The app's place in the fake proc tree: written before it registers.

    def fake_proc(self, cgroup=SESSION_CGROUP, flatpak_app=None):
        self.world.fake_proc(self.pid, cgroup=cgroup, flatpak_app=flatpak_app)
        return self

    # Control.

    def control(self, method, signature="", args=(), reply_type=None, timeout=15.0):
        return call(self.world.session.conn, CONTROL, method, signature, args, reply_type, timeout,
                    dest=self.unique_name, path=CONTROL_PATH)

    def call(self, iface, method, signature="", args=(), timeout=10.0):
        """`iface.method(args)` on the agent, sent from the app's own connection; the reply
        unpacked, or AgentError."""
        # The arguments travel as `av` (D-Bus has no empty tuple), one variant per argument.
        packed = GLib.Variant(f"({signature})", tuple(args))
        inner = [packed.get_child_value(i) for i in range(packed.n_children())]
        ok, result, name, message = self.control(
            "Call", "ssavu", (iface, method, inner, int(timeout * 1000)), "(bavss)", timeout=timeout + 5)
        if not ok:
            raise AgentError(name, message)
        return tuple(result)

    def scheduler(self, method, signature="", args=(), timeout=10.0):
        return self.call(SCHEDULER, method, signature, args, timeout)

    def register(self, identifiers, app_id=None, bus_name=None, background_only=None, options=None):
        opts = register_options(app_id, bus_name, background_only) if options is None else options
        (self.app_id,) = self.scheduler("Register", "asa{sv}", (list(identifiers), opts))
        return self.app_id

    def submit(self, identifier, kind="refresh", options=None, **kwargs):
        opts = submit_options(**kwargs) if options is None else options
        return self.scheduler("Submit", "ssa{sv}", (identifier, kind, opts))

    def cancel(self, identifier):
        return self.scheduler("Cancel", "s", (identifier,))

    def pending(self):
        return self.scheduler("GetPending")[0]

    def explain(self, identifier):
        return self.scheduler("Explain", "s", (identifier,))[0]

    def refresh_status(self):
        return self.scheduler("GetRefreshStatus")[0]

    def set_task_completed(self, task_id, success=True, result="new-data"):
        return self.scheduler("SetTaskCompleted", "sbs", (task_id, success, result))

    def begin_background_task(self, name):
        return self.scheduler("BeginBackgroundTask", "s", (name,))

    def end_background_task(self, token):
        return self.scheduler("EndBackgroundTask", "s", (token,))

    def configure(self, **behavior):
        """complete_after (s or None), result, success, burn (bool), complete_on_expire (bool),
        run_task_error (a D-Bus error name or None), run_task_error_message (its message),
        run_task_error_kinds (the kinds it answers with it, or None: every kind)."""
        self.control("Configure", "s", (json.dumps(behavior),))

    def complete(self, task_id, success=True, result="new-data"):
        """Completes a task as the app's own code does: stops burning, measures its CPU, then
        calls SetTaskCompleted. Returns the Completed event (with `cpu_self` and `error`)."""
        self.control("Complete", "sbs", (task_id, success, result))
        return self.wait_event("Completed", lambda e: e["task_id"] == task_id, timeout=10)

    def app_events(self):
        return json.loads(self.control("Events", reply_type="(s)")[0])

    def events_of(self, kind):
        return [e for e in self.app_events() if e["type"] == kind]

    def wait_event(self, kind, predicate=None, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        while True:
            for event in self.app_events():
                if event["type"] == kind and (predicate is None or predicate(event)):
                    return event
            if time.monotonic() >= deadline:
                raise AssertionError(f"test app {self.name}: no {kind} event within {timeout}s; "
                                     f"events: {self.app_events()}\nagent stderr (tail):\n"
                                     f"{self.world.agent.stderr_tail() if self.world.agent else ''}")
            time.sleep(0.02)

    def wait_run_task(self, identifier=None, timeout=TIMEOUT):
        return self.wait_event("RunTask", lambda e: identifier is None or e["identifier"] == identifier, timeout)

    def kill(self):
        """SIGKILL: the app vanishes from the bus mid-whatever."""
        self.proc.kill(signal.SIGKILL)

    def quit(self):
        try:
            self.control("Quit", timeout=5)
        except AgentError:
            pass
        self.proc.popen.wait(timeout=10)


# MARK: The world


class World:
    """One test's private bus, fake proc tree, testbed and processes."""

    def __init__(self, bin_dir, tmp, stack):
        self.bin_dir = Path(bin_dir)
        self.tmp = Path(tmp)
        self.stack = stack
        self.service_dir = None
        self.daemon = None
        self.session = None
        self.system_daemon = None
        self.system = None
        self.testbed = None
        self.agent = None
        self.proc_root = self.tmp / "proc"
        self.cgroup_root = self.tmp / "cgroup"
        self.proc_root.mkdir()
        self.cgroup_root.mkdir()

    def start_bus(self, activation=False):
        """The private session bus; with `activation`, it activates services from `service_dir`."""
        if activation:
            self.service_dir = self.tmp / "services"
            self.service_dir.mkdir(exist_ok=True)
        self.daemon = self.stack.push(PrivateBus(self.tmp, self.service_dir))
        self.session = self.stack.push(ch.GBus(self.daemon.address))
        # The test's own connections are plain session processes too.
        self.fake_proc(os.getpid())
        return self

    @property
    def address(self):
        return self.daemon.address

    @property
    def system_address(self):
        return self.system_daemon.address if self.system_daemon else None

    # Machine facts.

    def use_power(self, power):
        """`ac`: a desktop on AC (the charger online, no battery); `battery`: a laptop at 42 % and
        discharging; `low-battery`: 15 % and discharging; None: no testbed (udev sees the real
        machine)."""
        if power is None:
            return
        if not ch.umockdev_available():
            raise AssertionError("the umockdev testbeds need the preload: run under "
                                 "`umockdev-wrapper /usr/bin/python3 -m pytest` (as scripts/check.sh does)")
        tb = ch.new_testbed()
        if power == "ac":
            self.ac = tb.add_device("power_supply", "AC", None, ["type", "Mains", "online", "1"], [])
        elif power == "battery":
            self.ac = tb.add_device("power_supply", "AC", None, ["type", "Mains", "online", "0"], [])
            self.bat = tb.add_device("power_supply", "BAT0", None, ch.BATTERY_42, [])
        elif power == "low-battery":
            self.ac = tb.add_device("power_supply", "AC", None, ["type", "Mains", "online", "0"], [])
            self.bat = tb.add_device("power_supply", "BAT0", None, [
                "type", "Battery", "present", "1", "status", "Discharging", "energy_full", "60000000",
                "energy_full_design", "80000000", "energy_now", "9000000", "voltage_now", "12000000"], [])
        else:
            raise ValueError(power)
        self.testbed = tb

    def start_system_bus(self):
        self.system_daemon = self.stack.push(PrivateBus(self.tmp))
        self.system = self.stack.push(ch.GBus(self.system_daemon.address))
        return self.system

    def start_logind(self, locked=False):
        """The dbusmock logind on the private system bus, with the user's session (locked or not)."""
        if self.system is None:
            self.start_system_bus()
        env = ch.system_env(self.system_address, self.testbed, self.tmp / "upower")
        logind = ch.start_logind(self.stack, self.system, env)
        if locked:
            logind.call("org.freedesktop.login1.Session", "SetLockedHint", "b", (True,), path=logind.session_path)
        return logind

    def start_upowerd(self):
        """The real upowerd on the private system bus, reading the world's testbed."""
        if self.system is None:
            self.start_system_bus()
        env = ch.system_env(self.system_address, self.testbed, self.tmp / "upower")
        return ch.start_upowerd(self.stack, self.system, env)

    def start_systemd_mock(self, units=(), quotas=None):
        """python-dbusmock's systemd template on the *session* bus, as the user manager, with the
        methods the CPU monitor uses (TESTBED.md: the template lacks them). Each unit has its
        `CPUQuotaPerSecUSec` where systemd has it, on the interface of its type (`…Scope`): from
        `quotas` (unit → µs), UINT64_MAX (no quota) by default, and None for none (a unit whose
        quota cannot be read). SetUnitProperties sets it, as systemd does."""
        env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=self.address)
        proc = self.stack.push(ch.Proc([PYTHON, "-m", "dbusmock", "--session", "--template", "systemd"], env,
                                       name="dbusmock systemd"))
        self.session.wait_for_name("org.freedesktop.systemd1", process=proc)
        mock = SystemdMock(self.session)
        manager = "org.freedesktop.systemd1.Manager"
        mock.mock("AddMethod", "sssss", (manager, "SetUnitProperties", "sba(sv)", "", SystemdMock.SET_QUOTA))
        mock.mock("AddMethod", "sssss", (manager, "FreezeUnit", "s", "", ""))
        mock.mock("AddMethod", "sssss", (manager, "ThawUnit", "s", "", ""))
        for unit in units:
            mock.mock("AddMockUnit", "s", (unit,))
            quota = (quotas or {}).get(unit, UINT64_MAX)
            if quota is not None:
                mock.mock("AddProperty", "ssv", (SystemdMock.type_interface(unit), "CPUQuotaPerSecUSec",
                                                 GLib.Variant("t", quota)), path=SystemdMock.unit_path(unit))
        return mock

    # The fake proc tree (BGPOLICY_PROC_ROOT).

    def fake_proc(self, pid, cgroup=SESSION_CGROUP, flatpak_app=None):
        """`<root>/<pid>/cgroup` (and `root/.flatpak-info` for a Flatpak app); `stat` is a link to
        the real /proc/<pid>/stat so the agent measures the real process's CPU."""
        d = self.proc_root / str(pid)
        d.mkdir(exist_ok=True)
        if cgroup is not None:
            (d / "cgroup").write_text(cgroup)
        stat = d / "stat"
        if not stat.is_symlink():
            stat.symlink_to(f"/proc/{pid}/stat")
        if flatpak_app is not None:
            (d / "root").mkdir(exist_ok=True)
            (d / "root" / ".flatpak-info").write_text(
                f"[Application]\nname={flatpak_app}\nruntime=runtime/org.freedesktop.Platform/x86_64/23.08\n\n"
                f"[Instance]\ninstance-id=1234567890\nflatpak-version=1.14.4\n")

    # Processes.

    def start_agent(self, config=None, env_extra=None, planner=False, wrapper=()):
        self.agent = TaskAgent(self, config=config, env_extra=env_extra, planner=planner, wrapper=wrapper)
        return self.agent

    def app(self, name="app", client=True, cgroup=SESSION_CGROUP, flatpak_app=None, extra_args=()):
        """A test app, placed in the fake proc tree (as a plain session process by default)."""
        app = TestApp(self, name=name, client=client, extra_args=extra_args)
        if cgroup is not None or flatpak_app is not None:
            app.fake_proc(cgroup=cgroup, flatpak_app=flatpak_app)
        return app

    def registered_app(self, app_id, identifiers, name=None, **kwargs):
        """An unverified app that registered `identifiers` under `app_id`."""
        app = self.app(name=name or app_id, **kwargs)
        assert app.register(identifiers, app_id=app_id) == app_id
        return app


class SystemdMock:
    # SetUnitProperties: a CPUQuotaPerSecUSec set on a unit that has one (`start_systemd_mock`).
    SET_QUOTA = ("unit = objects.get(self.units.get(str(args[0]), ''))\n"
                 "for name, value in args[2]:\n"
                 "    for props in (unit.props.values() if unit else ()):\n"
                 "        if name == 'CPUQuotaPerSecUSec' and name in props: props[name] = dbus.UInt64(value)\n")

    def __init__(self, gbus):
        self.gbus = gbus

    def mock(self, method, signature="", args=(), reply_type=None, path="/org/freedesktop/systemd1"):
        return call(self.gbus.conn, ch.MOCK_IFACE, method, signature, args, reply_type,
                    dest="org.freedesktop.systemd1", path=path)

    @staticmethod
    def unit_path(unit):
        """The template's object path of `unit` (AddMockUnit)."""
        return "/org/freedesktop/systemd1/unit/" + unit.replace(".", "_").replace("-", "_")

    @staticmethod
    def type_interface(unit):
        """The interface of `unit`'s type, where systemd has its cgroup properties."""
        return "org.freedesktop.systemd1." + {"scope": "Scope", "service": "Service"}[unit.rsplit(".", 1)[1]]

    def quota(self, unit):
        """`unit`'s CPUQuotaPerSecUSec now."""
        return call(self.gbus.conn, "org.freedesktop.DBus.Properties", "Get", "ss",
                    (self.type_interface(unit), "CPUQuotaPerSecUSec"), "(v)",
                    dest="org.freedesktop.systemd1", path=self.unit_path(unit))[0]

    def calls(self, method):
        """[(timestamp, args)] of the Manager's `method`, args as raw GLib.Variants (their D-Bus types kept)."""
        reply = self.gbus.conn.call_sync("org.freedesktop.systemd1", "/org/freedesktop/systemd1", ch.MOCK_IFACE,
                                         "GetMethodCalls", GLib.Variant("(s)", (method,)), GLib.VariantType("(a(tav))"),
                                         Gio.DBusCallFlags.NO_AUTO_START, 10000, None)
        entries = reply.get_child_value(0)
        out = []
        for i in range(entries.n_children()):
            entry = entries.get_child_value(i)
            stamp = entry.get_child_value(0).get_uint64()
            raw = entry.get_child_value(1)
            out.append((stamp, [raw.get_child_value(j).get_variant() for j in range(raw.n_children())]))
        return out


def bin_dir_checked():
    path = ch.find_bin_dir()
    for name in ("bgpolicyd", "bgpolicy"):
        if not os.access(path / name, os.X_OK):
            raise AssertionError(f"{path / name} is missing: build it first (swift build), or set BGPOLICY_BUILD_DIR")
    return path


def make_world(tmp_path, power="ac", activation=False):
    """A World with its bus started; the caller closes its stack."""
    stack = ch.Stack()
    world = World(bin_dir_checked(), tmp_path, stack)
    try:
        world.use_power(power)
        world.start_bus(activation=activation)
    except BaseException:
        stack.close()
        raise
    return world


@contextmanager
def open_world(tmp_path, power="ac", activation=False):
    """A World for a `with` block; everything it started is ended at the end of the block."""
    w = make_world(tmp_path, power=power, activation=activation)
    try:
        yield w
    finally:
        w.stack.close()
        w.testbed = None


try:
    import pytest

    @pytest.fixture
    def world(tmp_path):
        """A private bus, a fake proc tree and an AC testbed; start the agent with
        `world.start_agent(config=..., env_extra=...)`. Everything is ended after the test."""
        with open_world(tmp_path) as w:
            yield w

    @pytest.fixture
    def laptop(tmp_path):
        """A world on battery (a laptop at 42 %, discharging): the 15-min grid, and
        content-available wakes counted. (`world` is on AC: its grid is 5 min.)"""
        with open_world(tmp_path, power="battery") as w:
            yield w
except ImportError:  # run as a program: no pytest needed
    pass


# MARK: The app program (runs in its own process)

CLIENT_XML = f"""<node><interface name="{CLIENT}">
  <method name="RunTask">
    <arg name="task_id" type="s" direction="in"/><arg name="identifier" type="s" direction="in"/>
    <arg name="kind" type="s" direction="in"/><arg name="seconds" type="u" direction="in"/>
    <arg name="info" type="a{{sv}}" direction="in"/>
  </method>
  <method name="ExpireTask"><arg name="task_id" type="s" direction="in"/></method>
</interface></node>"""

CONTROL_XML = f"""<node><interface name="{CONTROL}">
  <method name="Call">
    <arg name="iface" type="s" direction="in"/><arg name="method" type="s" direction="in"/>
    <arg name="args" type="av" direction="in"/><arg name="timeout_ms" type="u" direction="in"/>
    <arg name="ok" type="b" direction="out"/><arg name="result" type="av" direction="out"/>
    <arg name="error_name" type="s" direction="out"/><arg name="error_message" type="s" direction="out"/>
  </method>
  <method name="Events"><arg name="json" type="s" direction="out"/></method>
  <method name="Configure"><arg name="json" type="s" direction="in"/></method>
  <method name="Complete">
    <arg name="task_id" type="s" direction="in"/><arg name="success" type="b" direction="in"/>
    <arg name="result" type="s" direction="in"/>
  </method>
  <method name="RequestName"><arg name="name" type="s" direction="in"/></method>
  <method name="Quit"/>
</interface></node>"""

DEFAULT_BEHAVIOR = {
    "complete_after": None,  # seconds after RunTask, or None: only when told (Complete)
    "result": "new-data",
    "success": True,
    "burn": False,  # burn one core in a thread while a task runs
    "complete_on_expire": False,
    "run_task_error": None,  # answer RunTask with this D-Bus error instead
    "run_task_error_message": "the test app refuses this task",  # and this message
    "run_task_error_kinds": None,  # only for RunTask of these kinds ("refresh", …), or None: all
    "exit_after_completions": None,
    "exit_after_run_task": None,  # seconds after answering RunTask to exit without completing (0: at once)
    "stop_agent_on_run_task": False,  # SIGSTOP the caller of RunTask before answering (the test goes on with it)
    # {"identifier", "kind", "earliest_begin"}: Submit that before answering RunTask, as an app
    # started for its work submits at start
    "resubmit_on_run_task": None,
}


def jsonable(value):
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


class Burner:
    """Burns one core in a thread until stopped."""

    def __init__(self):
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        x = 0
        while not self.stop_event.is_set():
            for i in range(20000):
                x += i * i
        return x

    def stop(self):
        self.stop_event.set()
        self.thread.join(timeout=5)


class AppProgram:
    """The app side: Client1, the control interface, the recorded events."""

    def __init__(self, conn, loop, log_path=None, client=True):
        self.conn = conn
        self.loop = loop
        self.log_path = log_path
        self.events = []
        self.behavior = dict(DEFAULT_BEHAVIOR)
        self.tasks = {}  # task_id -> {"cpu0", "mono0", "identifier"}
        self.burner = None
        self.completions = 0
        self.registrations = []
        if client:
            info = Gio.DBusNodeInfo.new_for_xml(CLIENT_XML).interfaces[0]
            self.registrations.append(conn.register_object(CLIENT_PATH, info, self.client_call, None, None))
        info = Gio.DBusNodeInfo.new_for_xml(CONTROL_XML).interfaces[0]
        self.registrations.append(conn.register_object(CONTROL_PATH, info, self.control_call, None, None))

    def record(self, event_type, **fields):
        event = self.record_to(self.log_path, event_type, **fields)
        self.events.append(event)
        return event

    @staticmethod
    def record_to(log_path, event_type, **fields):
        """Appends one event to the log at `log_path` (if any) and returns it."""
        event = {"type": event_type, "time": time.time(), "mono": time.monotonic(), **jsonable(fields)}
        if log_path:
            with open(log_path, "a") as log:
                log.write(json.dumps(event) + "\n")
        return event

    # org.bgpolicy.Client1

    def client_call(self, conn, sender, path, iface, method, parameters, invocation):
        try:
            self._client_call(sender, method, parameters, invocation)
        except Exception as error:  # noqa: BLE001 - a bug here must show, not hang the agent's call
            self.record("AppError", method=method, error=f"{type(error).__name__}: {error}")
            invocation.return_dbus_error("org.bgpolicy.Test.Error", f"{type(error).__name__}: {error}")

    def _client_call(self, sender, method, parameters, invocation):
        if method == "RunTask":
            task_id, identifier, kind, seconds, info = parameters.unpack()
            self.record("RunTask", sender=sender, task_id=task_id, identifier=identifier, kind=kind,
                        seconds=seconds, info=info, info_types=self._info_types(parameters))
            resubmit = self.behavior["resubmit_on_run_task"]
            if resubmit:
                options = {"earliest_begin": GLib.Variant("x", int(resubmit["earliest_begin"]))}
                call(self.conn, SCHEDULER, "Submit", "ssa{sv}", (resubmit["identifier"], resubmit["kind"], options))
                self.record("Resubmitted", identifier=resubmit["identifier"])
            error = self.behavior["run_task_error"]
            kinds = self.behavior["run_task_error_kinds"]
            if error and (kinds is None or kind in kinds):
                invocation.return_dbus_error(error, self.behavior["run_task_error_message"])
                return
            if self.behavior["stop_agent_on_run_task"]:
                # The agent held still from before the answer until the test lets it go on:
                # whatever it does after the reply, it does with the app gone.
                (pid,) = call(self.conn, "org.freedesktop.DBus", "GetConnectionUnixProcessID", "s", (sender,),
                              "(u)", dest="org.freedesktop.DBus", path="/org/freedesktop/DBus")
                os.kill(pid, signal.SIGSTOP)
                self.record("AgentStopped", pid=pid)
            invocation.return_value(None)
            exit_after = self.behavior["exit_after_run_task"]
            if exit_after is not None:
                # A crash right after the answer (or a while later): the reply is on the wire,
                # then the process is gone with its task never completed.
                def leave():
                    self.record("Exiting", task_id=task_id)
                    self.conn.flush_sync(None)
                    os._exit(0)
                if exit_after == 0:
                    leave()
                GLib.timeout_add(int(exit_after * 1000), leave)
                return
            self.tasks[task_id] = {"cpu0": time.process_time(), "mono0": time.monotonic(), "identifier": identifier}
            if self.behavior["burn"] and self.burner is None:
                self.burner = Burner()
            after = self.behavior["complete_after"]
            if after is not None:
                GLib.timeout_add(int(after * 1000), self._complete_later, task_id)
        elif method == "ExpireTask":
            (task_id,) = parameters.unpack()
            # A call that wants no answer (the agent's stop, sleep) is queued at once by the agent.
            no_reply = bool(invocation.get_message().get_flags() & Gio.DBusMessageFlags.NO_REPLY_EXPECTED)
            self.record("ExpireTask", sender=sender, task_id=task_id, no_reply=no_reply)
            invocation.return_value(None)
            if self.behavior["complete_on_expire"] and task_id in self.tasks:
                self.complete(task_id, self.behavior["success"], self.behavior["result"])
        else:
            invocation.return_dbus_error("org.freedesktop.DBus.Error.UnknownMethod", method)

    @staticmethod
    def _info_types(parameters):
        info = parameters.get_child_value(4)
        types = {}
        for i in range(info.n_children()):
            entry = info.get_child_value(i)
            types[entry.get_child_value(0).get_string()] = entry.get_child_value(1).get_variant().get_type_string()
        return types

    def _complete_later(self, task_id):
        if task_id in self.tasks:
            self.complete(task_id, self.behavior["success"], self.behavior["result"])
        return GLib.SOURCE_REMOVE

    def complete(self, task_id, success, result):
        state = self.tasks.pop(task_id, None)
        cpu_self = time.process_time() - state["cpu0"] if state else None
        wall = time.monotonic() - state["mono0"] if state else None
        if not self.tasks and self.burner is not None:
            self.burner.stop()
            self.burner = None

        def done(conn, res, _data):
            error = None
            try:
                conn.call_finish(res)
            except GLib.Error as e:
                err = AgentError.from_glib(e)
                error = {"name": err.name, "message": err.message}
            self.record("Completed", task_id=task_id, success=success, result=result, cpu_self=cpu_self,
                        wall=wall, error=error)
            self.completions += 1
            limit = self.behavior["exit_after_completions"]
            if limit is not None and self.completions >= limit:
                GLib.timeout_add(200, self._quit)

        self.conn.call(AGENT_NAME, AGENT_PATH, SCHEDULER, "SetTaskCompleted",
                       GLib.Variant("(sbs)", (task_id, success, result)), None, Gio.DBusCallFlags.NO_AUTO_START,
                       10000, None, done, None)

    def _quit(self):
        self.loop.quit()
        return GLib.SOURCE_REMOVE

    # org.bgpolicy.Test.App1

    def control_call(self, _conn, _sender, _path, _iface, method, parameters, invocation):
        try:
            if method == "Call":
                iface, name, _args, timeout_ms = parameters.unpack()
                packed = parameters.get_child_value(2)
                values = [packed.get_child_value(i).get_variant() for i in range(packed.n_children())]
                inner = GLib.Variant.new_tuple(*values) if values else None

                def done(conn, res, _data):
                    try:
                        reply = conn.call_finish(res)
                        results = [reply.get_child_value(i) for i in range(reply.n_children())] if reply else []
                        invocation.return_value(GLib.Variant("(bavss)", (True, results, "", "")))
                    except GLib.Error as e:
                        err = AgentError.from_glib(e)
                        invocation.return_value(GLib.Variant("(bavss)", (False, [], err.name, err.message)))

                self.conn.call(AGENT_NAME, AGENT_PATH, iface, name, inner, None,
                               Gio.DBusCallFlags.NO_AUTO_START, timeout_ms, None, done, None)
            elif method == "Events":
                invocation.return_value(GLib.Variant("(s)", (json.dumps(self.events),)))
            elif method == "Configure":
                (text,) = parameters.unpack()
                changes = json.loads(text)
                unknown = set(changes) - set(DEFAULT_BEHAVIOR)
                if unknown:
                    raise ValueError(f"unknown behavior {sorted(unknown)}")
                self.behavior.update(changes)
                invocation.return_value(None)
            elif method == "Complete":
                task_id, success, result = parameters.unpack()
                if task_id not in self.tasks:
                    raise ValueError(f"no running task {task_id}")
                self.complete(task_id, success, result)
                invocation.return_value(None)
            elif method == "RequestName":
                # The app takes a well-known name on its own connection (DO_NOT_QUEUE), as a
                # program the bus started for that name does.
                (name,) = parameters.unpack()
                (reply,) = call(self.conn, "org.freedesktop.DBus", "RequestName", "su", (name, 4), "(u)",
                                dest="org.freedesktop.DBus", path="/org/freedesktop/DBus")
                if reply != 1:
                    raise ValueError(f"RequestName({name}) answered {reply}, not 1 (primary owner)")
                invocation.return_value(None)
            elif method == "Quit":
                invocation.return_value(None)
                GLib.idle_add(self._quit)
        except Exception as error:  # noqa: BLE001 - never leave the test without a reply
            invocation.return_dbus_error("org.bgpolicy.Test.Error", f"{type(error).__name__}: {error}")


def connect(address):
    flags = Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION
    conn = Gio.DBusConnection.new_for_address_sync(address, flags, None, None)
    conn.set_exit_on_close(False)
    return conn


def run_loop(conn, loop, limit_seconds):
    status = {"code": 0}

    def on_closed(*_args):
        status["code"] = 1
        loop.quit()

    def on_signal():
        loop.quit()
        return GLib.SOURCE_REMOVE

    def on_limit():
        status["code"] = 3
        loop.quit()
        return GLib.SOURCE_REMOVE

    conn.connect("closed", on_closed)
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGTERM, on_signal)
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGINT, on_signal)
    GLib.timeout_add_seconds(limit_seconds, on_limit)  # a stray app never outlives its test for long
    loop.run()
    return status["code"]


def main_app(args):
    conn = connect(args.address)
    loop = GLib.MainLoop()
    AppProgram(conn, loop, client=not args.no_client)
    print(f"READY {conn.get_unique_name()} {os.getpid()}", flush=True)
    return run_loop(conn, loop, args.limit)


def main_activated(args):
    """An app that the bus starts: it writes its own place in the fake proc tree, registers with
    app_id and bus_name, exports Client1, then takes the name; it completes what it is given."""
    address = args.address or os.environ.get("DBUS_STARTER_ADDRESS") or os.environ["DBUS_SESSION_BUS_ADDRESS"]
    if (args.start_delay or args.start_gate) and not (args.submit or args.register_only):
        # A slow start: the process is up, but takes its name only after a while, or, held by
        # the test, once the file `--start-gate` names exists (at most `--limit` seconds).
        AppProgram.record_to(args.log, "Launched", pid=os.getpid())
        time.sleep(args.start_delay)
        if args.start_gate:
            deadline = time.monotonic() + args.limit
            while not os.path.exists(args.start_gate) and time.monotonic() < deadline:
                time.sleep(0.02)
    if args.proc_root:
        d = Path(args.proc_root) / str(os.getpid())
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup").write_text(SESSION_CGROUP)
        if not (d / "stat").is_symlink():
            (d / "stat").symlink_to(f"/proc/{os.getpid()}/stat")
    conn = connect(address)
    loop = GLib.MainLoop()
    program = AppProgram(conn, loop, log_path=args.log, client=False)
    program.record("Started", pid=os.getpid(), unique_name=conn.get_unique_name(),
                   starter=os.environ.get("DBUS_STARTER_BUS_TYPE"))
    program.behavior.update(complete_after=args.work_seconds, result="new-data",
                            exit_after_completions=None if args.submit else 1,
                            exit_after_run_task=args.exit_after_run_task,
                            stop_agent_on_run_task=args.stop_agent_on_run_task)
    try:
        (app_id,) = call(conn, SCHEDULER, "Register", "asa{sv}",
                         ([args.identifier], register_options(args.app_id, args.bus_name)), "(s)")
        program.record("Registered", app_id=app_id)
    except AgentError as error:
        program.record("RegisterFailed", name=error.name, message=error.message)
        return 4
    info = Gio.DBusNodeInfo.new_for_xml(CLIENT_XML).interfaces[0]
    program.registrations.append(conn.register_object(CLIENT_PATH, info, program.client_call, None, None))
    reply = call(conn, "org.freedesktop.DBus", "RequestName", "su", (args.bus_name, 4), "(u)",
                 dest="org.freedesktop.DBus", path="/org/freedesktop/DBus")[0]
    program.record("NameRequested", reply=reply)
    if args.register_only:
        return 0  # registered: the app is closed now
    if args.submit:
        try:
            call(conn, SCHEDULER, "Submit", "ssa{sv}",
                 (args.identifier, "refresh",
                  submit_options(earliest_begin=args.due_at if args.due_at is not None else later(args.due_in))))
            program.record("Submitted", identifier=args.identifier)
        except AgentError as error:
            program.record("SubmitFailed", name=error.name, message=error.message)
            return 5
        return 0  # registered and submitted: the app is closed now
    return run_loop(conn, loop, args.limit)


def main_flood(args):
    """Submit then Cancel, `count` times, pipelined with `inflight` calls outstanding; prints a
    JSON summary. A Cancel may only fail (UnknownTask) when its Submit was refused."""
    conn = connect(args.address)
    identifiers = [f"{args.app_id}.p{i}" for i in range(10)]
    call(conn, SCHEDULER, "Register", "asa{sv}", (identifiers, register_options(app_id=args.app_id)), "(s)")
    print("FLOODING", flush=True)
    loop = GLib.MainLoop()
    tomorrow = later(86400)
    calls = []
    for n in range(args.count):
        identifier = identifiers[n % len(identifiers)]
        calls.append(("Submit", GLib.Variant("(ssa{sv})", (identifier, "processing",
                                                              submit_options(earliest_begin=tomorrow))), n))
        calls.append(("Cancel", GLib.Variant("(s)", (identifier,)), n))
    summary = {"ok": 0, "limited": 0, "cancel_after_refused_submit": 0, "other": [], "calls": len(calls)}
    refused = set()
    # Per identifier, the position in `calls` of its last call that succeeded: calls from one
    # connection are served in order, so an identifier is left pending exactly when that call
    # is a Submit (a refused Cancel leaves its Submit, a refused Submit changes nothing).
    last_ok = {}
    state = {"next": 0, "outstanding": 0}
    started = time.monotonic()

    def send_more():
        while state["outstanding"] < args.inflight and state["next"] < len(calls):
            method, params, n = calls[state["next"]]
            state["next"] += 1
            state["outstanding"] += 1
            conn.call(AGENT_NAME, AGENT_PATH, SCHEDULER, method, params, None, Gio.DBusCallFlags.NO_AUTO_START,
                      60000, None, done, (method, n, time.monotonic()))
        if state["outstanding"] == 0 and state["next"] >= len(calls):
            loop.quit()

    latencies = []

    def done(c, res, data):
        method, n, sent = data
        latencies.append(time.monotonic() - sent)
        state["outstanding"] -= 1
        try:
            c.call_finish(res)
            summary["ok"] += 1
            identifier, position = identifiers[n % len(identifiers)], 2 * n + (method == "Cancel")
            last_ok[identifier] = max(last_ok.get(identifier, -1), position)
        except GLib.Error as e:
            err = AgentError.from_glib(e)
            if err.name == ERROR_PREFIX + "LimitsExceeded":
                summary["limited"] += 1
                if method == "Submit":
                    refused.add(n)
            elif method == "Cancel" and n in refused and err.name == ERROR_PREFIX + "UnknownTask":
                summary["cancel_after_refused_submit"] += 1
            elif len(summary["other"]) < 20:
                summary["other"].append(f"{method} #{n}: {err.name}: {err.message}")
            else:
                summary.setdefault("more_other", 0)
                summary["more_other"] = summary.get("more_other", 0) + 1
        send_more()

    GLib.idle_add(lambda: (send_more(), GLib.SOURCE_REMOVE)[1])
    GLib.timeout_add_seconds(args.limit, loop.quit)
    loop.run()
    summary["seconds"] = time.monotonic() - started
    # From send to the reply's callback: the wait in the agent's queue, and in this client's.
    # Its median, since the calls in flight while the test stops this process wait that long.
    summary["latency_median"] = statistics.median(latencies) if latencies else None
    summary["unanswered"] = state["outstanding"] + (len(calls) - state["next"])
    summary["left_pending"] = sorted(i for i, position in last_ok.items() if position % 2 == 0)
    print("SUMMARY " + json.dumps(summary), flush=True)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("app")
    p.add_argument("--address", required=True)
    p.add_argument("--no-client", action="store_true", help="do not export org.bgpolicy.Client1")
    p.add_argument("--limit", type=int, default=300, help="exit after this many seconds whatever happens")
    p = sub.add_parser("activated")
    p.add_argument("--address")
    p.add_argument("--app-id", required=True)
    p.add_argument("--bus-name", required=True)
    p.add_argument("--identifier", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--proc-root")
    p.add_argument("--submit", action="store_true", help="submit a refresh (due in --due-in seconds), then exit")
    p.add_argument("--register-only", action="store_true", help="register, take the bus name, then exit")
    p.add_argument("--due-in", type=float, default=3600, help="the submitted refresh's earliest_begin, from now")
    p.add_argument("--due-at", type=int,
                   help="the submitted refresh's earliest_begin in Unix seconds, instead of --due-in: what the "
                        "test computed, whenever this process gets to submit")
    p.add_argument("--work-seconds", type=float, default=0.2)
    p.add_argument("--start-delay", type=float, default=0, help="seconds to wait before connecting, when started")
    p.add_argument("--start-gate", metavar="FILE",
                   help="when started, wait (after --start-delay) until FILE exists before connecting")
    p.add_argument("--exit-after-run-task", type=float, metavar="SECONDS",
                   help="exit this many seconds after answering RunTask (0: at once), never completing it")
    p.add_argument("--stop-agent-on-run-task", action="store_true",
                   help="SIGSTOP the agent before answering RunTask (the test sends SIGCONT)")
    p.add_argument("--limit", type=int, default=60)
    p = sub.add_parser("flood")
    p.add_argument("--address", required=True)
    p.add_argument("--app-id", required=True)
    p.add_argument("--count", type=int, default=10000)
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--limit", type=int, default=240)
    args = parser.parse_args(argv)
    return {"app": main_app, "activated": main_activated, "flood": main_flood}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
