#!/usr/bin/python3
""""No input for [idle] no_input_after" counts as idle: the agent follows GNOME's idle monitor
(org.gnome.Mutter.IdleMonitor on the session bus) with an idle watch and user-active watches.

python-dbusmock has no Mutter template, so the monitor is a plain dbusmock object whose methods
are added with AddMethod before it takes the bus name (this file run as a program, `mock`), so
that the agent never sees the name owned by an object without its methods. The mock records
every watch it hands out (`Watches`) and fires one on request (`Fire`, which removes a
user-active watch as mutter does), on a test interface of its own.

Run under `umockdev-wrapper /usr/bin/python3 -m pytest` like the other task tests.
"""

import argparse
import os
import signal
import time

import conditions_helpers as ch
import tasks_helpers as th
from tasks_helpers import PYTHON, world  # noqa: F401 - the fixture

MUTTER_NAME = "org.gnome.Mutter.IdleMonitor"
MUTTER_PATH = "/org/gnome/Mutter/IdleMonitor/Core"
MUTTER_IFACE = "org.gnome.Mutter.IdleMonitor"
TEST_IFACE = "org.bgpolicy.Test.IdleMonitor"

# no_input_after = 2s: the idle watch's interval must be 2000 ms.
CONFIG = "[idle]\nno_input_after = 2s\n"
INTERVAL_MS = 2000


class MutterMock:
    """The mock idle monitor, in its own process on the world's session bus."""

    def __init__(self, world, idletime=0):
        self.world = world
        self.proc = world.stack.push(ch.Proc(
            [PYTHON, __file__, "mock", "--address", world.address, "--idletime", str(idletime)],
            dict(os.environ), name="dbusmock mutter"))
        world.session.wait_for_name(MUTTER_NAME, process=self.proc)

    def watches(self):
        """{id: (kind, interval_ms)} of the watches the agent holds; kind is "idle" or "active"."""
        (entries,) = th.call(self.world.session.conn, TEST_IFACE, "Watches", reply_type="(a(ust))",
                             dest=MUTTER_NAME, path=MUTTER_PATH)
        return {i: (kind, interval) for i, kind, interval in entries}

    def of_kind(self, kind):
        return {i: interval for i, (k, interval) in self.watches().items() if k == kind}

    def wait_watch(self, kind, other_than=(), timeout=10):
        """The id of a watch of `kind` (not one of `other_than`), once the agent has added it."""
        found = {}

        def added():
            found.update({i: v for i, v in self.of_kind(kind).items() if i not in other_than})
            return bool(found)
        th.wait_until(added, timeout, f"the agent adds a {kind} watch; watches: {self.watches()}")
        return min(found)

    def fire(self, watch_id):
        th.call(self.world.session.conn, TEST_IFACE, "Fire", "u", (watch_id,), dest=MUTTER_NAME, path=MUTTER_PATH)

    def kill(self):
        self.proc.kill(signal.SIGKILL)
        self.world.session.wait_for_name(MUTTER_NAME, present=False, timeout=10)


def conditions(agent):
    return agent.status()["conditions"]


def wait_conditions(agent, predicate, what, timeout=10):
    th.wait_until(lambda: agent.alive() and predicate(conditions(agent)), timeout,
                  f"{what}; conditions: {conditions(agent) if agent.alive() else 'agent exited'}")
    return conditions(agent)


# MARK: Tests


def test_idle_watch_then_user_active_watch_drive_idle(world):
    mutter = MutterMock(world, idletime=0)
    agent = world.start_agent(config=CONFIG)

    idle_watch = mutter.wait_watch("idle")
    assert mutter.of_kind("idle") == {idle_watch: INTERVAL_MS}, mutter.watches()
    # Input 0 ms ago: active, so no user-active watch yet.
    c = wait_conditions(agent, lambda c: "mutter" in c["sources"] and c.get("idle") is False, "in use, from mutter")
    assert mutter.of_kind("active") == {}, mutter.watches()
    assert "locked" not in c, c  # no logind here: idle rests on the monitor alone

    seen_active = set()
    for _ in range(2):  # every idle period, the same idle watch; a new user-active watch each time
        mutter.fire(idle_watch)
        wait_conditions(agent, lambda c: c.get("idle") is True, "idle once the idle watch fired")
        active = mutter.wait_watch("active", other_than=seen_active)
        seen_active.add(active)
        assert "mutter" in conditions(agent)["sources"]
        mutter.fire(active)
        wait_conditions(agent, lambda c: c.get("idle") is False, "in use once the user-active watch fired")
    assert len(seen_active) == 2
    assert mutter.of_kind("idle") == {idle_watch: INTERVAL_MS}, mutter.watches()
    assert agent.alive()


def test_processing_waits_for_no_input(world):
    mutter = MutterMock(world, idletime=0)
    agent = world.start_agent(config=CONFIG)
    idle_watch = mutter.wait_watch("idle")
    wait_conditions(agent, lambda c: c.get("idle") is False, "in use, from mutter")

    app_id = "org.example.IdleWork"
    identifier = f"{app_id}.cleanup"
    app = world.registered_app(app_id, [identifier])
    app.configure(complete_after=0.5, result="no-data")
    app.submit(identifier, "processing")
    time.sleep(3)  # windows open every second here: three chances to run it while in use
    assert app.events_of("RunTask") == [], "processing ran while the user was active"
    explained = app.explain(identifier)
    assert "not-idle" in explained["blocking"], explained

    mutter.fire(idle_watch)
    run = app.wait_run_task(identifier, timeout=15)
    assert run["kind"] == "processing", run
    assert agent.wait_history("completed", task_id=run["task_id"], timeout=10)["result"] == "no-data"


def test_the_user_coming_back_opens_an_opportunistic_window(world):
    """Input after an idle spell: the user is active again, the machine is in use anyway, and a
    window opens at once for what waits, between two windows of a 1-min grid."""
    mutter = MutterMock(world, idletime=0)
    agent = world.start_agent(
        config=CONFIG + "[windows]\ngrid_on_battery = 1min\ngrid_on_ac = 1min\n[refresh]\nstrategy = every-window\n",
        planner=True)
    idle_watch = mutter.wait_watch("idle")
    wait_conditions(agent, lambda c: c.get("idle") is False, "in use, from mutter")
    mutter.fire(idle_watch)
    wait_conditions(agent, lambda c: c.get("idle") is True, "idle once the idle watch fired")
    active = mutter.wait_watch("active")

    app = th.feed_waiting_for_the_next_window(world, agent)
    back = time.time()
    mutter.fire(active)
    run = app.wait_run_task("org.example.Feed.refresh", timeout=10)
    assert run["time"] - back < 5, run
    delivered = agent.wait_history("delivered", app_id="org.example.Feed")
    assert "wake window opened because the user became active" in delivered["detail"], delivered


def test_monitor_that_goes_away_falls_back_and_is_rearmed_when_it_returns(world):
    world.start_logind(locked=False)
    mutter = MutterMock(world, idletime=0)
    agent = world.start_agent(config=CONFIG)
    idle_watch = mutter.wait_watch("idle")
    wait_conditions(agent, lambda c: {"logind", "mutter"} <= set(c["sources"]) and c.get("idle") is False,
                    "logind and mutter live, in use")
    # logind's IdleHint stays false (as on GNOME); no input for 2 s makes the session idle.
    mutter.fire(idle_watch)
    wait_conditions(agent, lambda c: c.get("idle") is True and c.get("locked") is False, "idle from mutter alone")

    # mutter goes: its fact goes with it, idle falls back to logind's IdleHint, the agent stays.
    mutter.kill()
    c = wait_conditions(agent, lambda c: "mutter" not in c["sources"], "mutter no longer live")
    assert c.get("idle") is False and "logind" in c["sources"], c
    time.sleep(0.5)
    assert agent.alive(), agent.stderr_tail()

    # mutter returns with no input for 10 s already: new watches, idle at once, then active on input.
    mutter = MutterMock(world, idletime=10_000)
    new_idle = mutter.wait_watch("idle")
    assert mutter.of_kind("idle") == {new_idle: INTERVAL_MS}, mutter.watches()
    wait_conditions(agent, lambda c: "mutter" in c["sources"] and c.get("idle") is True, "idle after mutter returned")
    active = mutter.wait_watch("active")
    mutter.fire(active)
    wait_conditions(agent, lambda c: c.get("idle") is False, "in use after input")
    assert agent.alive()


def start_session_manager(world, inhibited_actions):
    """A dbusmock org.gnome.SessionManager on the session bus with `InhibitedActions`."""
    name, path = "org.gnome.SessionManager", "/org/gnome/SessionManager"
    proc = world.stack.push(ch.Proc([PYTHON, "-m", "dbusmock", "--session", name, path, name],
                                    dict(os.environ, DBUS_SESSION_BUS_ADDRESS=world.address),
                                    name="dbusmock gnome-session"))
    world.session.wait_for_name(name, process=proc)
    th.call(world.session.conn, "org.freedesktop.DBus.Mock", "AddProperty", "ssv",
            (name, "InhibitedActions", th.GLib.Variant("u", inhibited_actions)), dest=name, path=path)


def test_a_film_watched_without_input_is_not_idle(world):
    """No input for 10 s, as the agent starts, while gnome-session holds an idle inhibitor (a
    video playing): mutter's idle watches do not fire then, but GetIdletime counts on, and the
    agent took it for the user away, so processing could start over the film. Not idle until
    the idle watch fires (mutter fires it when the inhibitor goes, if still no input)."""
    start_session_manager(world, inhibited_actions=4 | 8)  # suspend and idle
    mutter = MutterMock(world, idletime=10_000)
    agent = world.start_agent(config=CONFIG)
    idle_watch = mutter.wait_watch("idle")
    wait_conditions(agent, lambda c: "mutter" in c["sources"] and c.get("idle") is False, "not idle under the inhibitor")
    time.sleep(0.3)
    assert conditions(agent).get("idle") is False, conditions(agent)
    assert mutter.of_kind("active") == {}, mutter.watches()
    assert "gnome-session inhibits idle" in agent.stderr(), agent.stderr_tail()
    mutter.fire(idle_watch)
    wait_conditions(agent, lambda c: c.get("idle") is True, "idle once the idle watch fired")


def test_a_reload_that_changes_no_input_after_replaces_the_idle_watch(world):
    mutter = MutterMock(world, idletime=0)
    agent = world.start_agent(config=CONFIG)
    idle_watch = mutter.wait_watch("idle")
    assert mutter.of_kind("idle") == {idle_watch: INTERVAL_MS}, mutter.watches()

    # SIGHUP with [idle] no_input_after = 7s: the old watch goes, one of 7000 ms replaces it.
    (world.tmp / "config" / "bgpolicy" / "bgpolicy.conf").write_text(
        th.IMMEDIATE_WINDOWS + "[idle]\nno_input_after = 7s\n")
    agent.proc.popen.send_signal(signal.SIGHUP)
    th.wait_until(lambda: list(mutter.of_kind("idle").values()) == [7000], 10,
                  f"the 2-s idle watch replaced by a 7-s one; watches: {mutter.watches()}")
    new_watch = mutter.wait_watch("idle")
    assert new_watch != idle_watch
    # The new watch drives idle as the old one did.
    mutter.fire(new_watch)
    wait_conditions(agent, lambda c: c.get("idle") is True, "idle once the new watch fired")
    assert "[idle] no_input_after: 2s → 7s" in agent.stderr(), agent.stderr_tail()

    # A reload that leaves the interval alone keeps the watch (and the idle state it gave).
    (world.tmp / "config" / "bgpolicy" / "bgpolicy.conf").write_text(
        th.IMMEDIATE_WINDOWS + "[idle]\nno_input_after = 7s\n[slices]\nrefresh = 20s\n")
    agent.proc.popen.send_signal(signal.SIGHUP)
    th.wait_until(lambda: "[slices] refresh: 30s → 20s" in agent.stderr(), 10, "the second reload")
    time.sleep(0.3)
    assert mutter.of_kind("idle") == {new_watch: 7000}, mutter.watches()
    assert conditions(agent).get("idle") is True
    assert agent.alive()


# MARK: The mock (runs in its own process)

MOCK_METHODS = [
    (MUTTER_IFACE, "GetIdletime", "", "t", "ret = dbus.UInt64(self.idletime)"),
    (MUTTER_IFACE, "AddIdleWatch", "t", "u",
     "self.next_id += 1\nself.watches[self.next_id] = ('idle', int(args[0]))\nret = dbus.UInt32(self.next_id)"),
    (MUTTER_IFACE, "AddUserActiveWatch", "", "u",
     "self.next_id += 1\nself.watches[self.next_id] = ('active', 0)\nret = dbus.UInt32(self.next_id)"),
    (MUTTER_IFACE, "RemoveWatch", "u", "", "self.watches.pop(int(args[0]), None)"),
    (TEST_IFACE, "Watches", "", "a(ust)",
     "ret = [(dbus.UInt32(i), k, dbus.UInt64(t)) for i, (k, t) in sorted(self.watches.items())]"),
    (TEST_IFACE, "Fire", "u", "",
     "w = self.watches.get(int(args[0]))\n"
     "if w is not None and w[0] == 'active':\n    del self.watches[int(args[0])]\n"
     f"self.EmitSignal('{MUTTER_IFACE}', 'WatchFired', 'u', [args[0]])"),
]


def run_mock(address, idletime):
    import dbus  # noqa: PLC0415
    import dbus.mainloop.glib  # noqa: PLC0415
    import dbusmock.mockobject  # noqa: PLC0415
    from gi.repository import GLib  # noqa: PLC0415

    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(address)
    mock = dbusmock.mockobject.DBusMockObject(bus, MUTTER_PATH, MUTTER_IFACE, {})
    mock.idletime = idletime
    mock.next_id = 0
    mock.watches = {}
    for method in MOCK_METHODS:
        mock.AddMethod(*method)
    # The name last: whoever sees it owned finds every method there.
    if bus.request_name(MUTTER_NAME, dbus.bus.NAME_FLAG_DO_NOT_QUEUE) != dbus.bus.REQUEST_NAME_REPLY_PRIMARY_OWNER:
        raise SystemExit(f"{MUTTER_NAME} is taken")
    loop = GLib.MainLoop()
    bus.call_on_disconnection(lambda _conn: loop.quit())
    loop.run()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["mock"])
    parser.add_argument("--address", required=True)
    parser.add_argument("--idletime", type=int, default=0)
    options = parser.parse_args()
    run_mock(options.address, options.idletime)
