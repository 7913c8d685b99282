"""The usage log's systemd source: the agent follows the systemd user manager (python-dbusmock's
`systemd` template on the session bus) and turns its `UnitNew`/`UnitRemoved` for app units into
usage rows; an open of a registered app refreshes its `last_used_at` (ListApps) and lifts the
7-day inactivity rule (Explain), and a close opens a refresh window for the app left. Unit names are the ones GNOME Shell and KDE really create;
units that are not apps change nothing. The agent copes with the manager being absent at start,
follows it when it stops and starts again, and takes a reload (every unit removed and new again
between `Reloading(true)` and `Reloading(false)`) for what changed across it only.

Apps are made "unused for 30 days" by registering them, stopping the agent and moving their
times back in its database (the agent is the only writer, so only while it is stopped)."""

import os
import re
import sqlite3
import time

import gi
import pytest

gi.require_version("GLib", "2.0")
from gi.repository import GLib  # noqa: E402

import conditions_helpers as ch  # noqa: E402
import tasks_helpers as th  # noqa: E402
from tasks_helpers import PYTHON, laptop, later, world  # noqa: E402,F401 - the fixtures

MANAGER = "org.freedesktop.systemd1.Manager"
MANAGER_NAME = "org.freedesktop.systemd1"

MAPS, KONSOLE, DOLPHIN = "org.gnome.Maps", "org.kde.konsole", "org.kde.dolphin"
BYSTANDER = "org.example.Bystander"
UNITS = {
    MAPS: "app-gnome-org.gnome.Maps-12345.scope",
    KONSOLE: "app-org.kde.konsole-a1b2c3.scope",
    DOLPHIN: "app-org.kde.dolphin@12ab.service",
}
NOT_APPS = ["session-2.scope", "dbus.service", "user@1000.service", "app.slice"]
DAYS_30 = 30 * 86400
TEMPLATE = th.HERE / "systemd_user_template.py"


def start_manager(world):
    """The dbusmock systemd user manager, with `Subscribe` from the start: (proc, mock)."""
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=world.address)
    proc = world.stack.push(ch.Proc([PYTHON, "-m", "dbusmock", "--session", "--template", str(TEMPLATE)], env,
                                    name="dbusmock systemd"))
    world.session.wait_for_name(MANAGER_NAME, process=proc)
    return proc, th.SystemdMock(world.session)


def wait_subscribed(agent, mock, times=1):
    """Until the agent called Subscribe on this mock `times` times in all: its match rule is on
    the bus by then. The mock keeps the calls of an agent that was restarted, so after a
    restart pass how many Subscribe calls there are to be, counting the new agent's."""
    def subscribed():
        if not agent.alive():
            raise AssertionError(f"bgpolicyd exited:\n{agent.stderr_tail()}")
        return len(mock.calls("Subscribe")) >= times
    th.wait_until(subscribed, th.TIMEOUT, "the agent to call Subscribe on the systemd user manager")


def emit(mock, member, unit):
    path = f"/org/freedesktop/systemd1/unit/{unit.replace('.', '_').replace('-', '_').replace('@', '_')}"
    mock.mock("EmitSignal", "sssav", (MANAGER, member, "so", [GLib.Variant("s", unit), GLib.Variant("o", path)]))


def emit_reloading(mock, active):
    """The manager's `Reloading(active)`: true as `systemctl --user daemon-reload` begins, false once done."""
    mock.mock("EmitSignal", "sssav", (MANAGER, "Reloading", "b", [GLib.Variant("b", active)]))


def start_unit(world, mock, unit):
    """`unit` runs in the mock manager (ListUnitsByPatterns lists it), and its UnitNew is sent."""
    mock.mock("AddMockUnit", "s", (unit,))
    th.call(world.session.conn, MANAGER, "StartUnit", "ss", (unit, "replace"), reply_type="(o)",
            dest=MANAGER_NAME, path="/org/freedesktop/systemd1")
    emit(mock, "UnitNew", unit)


def database(world):
    return world.tmp / "state" / "bgpolicy" / "bgpolicy.sqlite"


def usage_rows(world):
    """(app_id, state) of every usage row, oldest first; read while the agent is stopped."""
    with sqlite3.connect(database(world)) as db:
        return db.execute("SELECT app_id, state FROM usage ORDER BY time, id").fetchall()


def last_used(agent, app_id):
    record = agent.app_record(app_id)
    assert record is not None, f"{app_id} is not registered: {agent.list_apps()}"
    return record.get("last_used_at")


def registered_long_ago(world, app_ids, pending_for=()):
    """An agent whose apps `app_ids` registered 30 days ago and were not used since; the apps in
    `pending_for` have a refresh pending (gated an hour ahead, so nothing runs). The agent is
    running again on return, the apps' processes gone."""
    agent = world.agent or world.start_agent()
    for app_id in app_ids:
        app = world.registered_app(app_id, [f"{app_id}.refresh"])
        if app_id in pending_for:
            app.submit(f"{app_id}.refresh", "refresh", earliest_begin=later(3600))
        app.quit()
    agent.stop()
    long_ago = time.time() - DAYS_30
    with sqlite3.connect(database(world)) as db:
        db.execute("UPDATE apps SET registered_at = ?, last_used_at = ?", (long_ago, long_ago))
        # The registrations' opens (and closes) in the usage log went with them.
        db.execute("UPDATE usage SET time = ?", (long_ago,))
    agent.restart()
    for app_id in app_ids:
        assert last_used(agent, app_id) <= long_ago + 1, agent.app_record(app_id)
    return agent, long_ago


def is_fresh(value):
    return value is not None and abs(value - time.time()) <= 60


def test_app_unit_opens_refresh_last_used_and_lift_the_inactivity_rule(world):
    _, manager = start_manager(world)
    agent, long_ago = registered_long_ago(world, [MAPS, KONSOLE, DOLPHIN, BYSTANDER], pending_for=[MAPS])
    wait_subscribed(agent, manager)
    explanation = agent.explain(MAPS, f"{MAPS}.refresh")
    assert "app-inactive" in explanation["blocking"]
    # Explain says what the usage log holds of the app's opens: here its registration's.
    assert (explanation["opens"], explanation["opens_last_24h"]) == (1, 0), explanation
    assert abs(explanation["last_open"] - long_ago) <= 1, explanation

    # Units that are not apps first: signals are handled in order, so once KDE's konsole is
    # seen, they have been too, and they changed nothing.
    for unit in NOT_APPS:
        emit(manager, "UnitNew", unit)
        emit(manager, "UnitRemoved", unit)
    emit(manager, "UnitNew", UNITS[KONSOLE])
    th.wait_until(lambda: is_fresh(last_used(agent, KONSOLE)), th.TIMEOUT, "konsole's last_used_at after its UnitNew")
    for app_id in (MAPS, DOLPHIN, BYSTANDER):
        assert last_used(agent, app_id) <= long_ago + 1, agent.app_record(app_id)

    # GNOME's scope for Maps: fresh, and the inactivity rule no longer holds its refresh back.
    emit(manager, "UnitNew", UNITS[MAPS])
    th.wait_until(lambda: is_fresh(last_used(agent, MAPS)), th.TIMEOUT, "Maps' last_used_at after its UnitNew")
    explanation = agent.explain(MAPS, f"{MAPS}.refresh")
    assert "app-inactive" not in explanation["blocking"], explanation
    assert (explanation["opens"], explanation["opens_last_24h"]) == (2, 1), explanation
    assert is_fresh(explanation["last_open"]), explanation
    shown = agent.cli("explain", MAPS, f"{MAPS}.refresh").stdout
    assert re.search(r"\n  Opened +2 times, 1 in the last 24 h; last (just now|\d+ s ago)\n", shown + "\n"), shown

    # KDE's service for Dolphin.
    emit(manager, "UnitNew", UNITS[DOLPHIN])
    th.wait_until(lambda: is_fresh(last_used(agent, DOLPHIN)), th.TIMEOUT, "Dolphin's last_used_at after its UnitNew")

    # A close is logged but is not a use; an app that never registered is logged too.
    maps_opened = last_used(agent, MAPS)
    emit(manager, "UnitRemoved", UNITS[MAPS])
    emit(manager, "UnitNew", "app-gnome-org.gnome.Weather-777.scope")
    emit(manager, "UnitNew", UNITS[KONSOLE])  # loaded again while live: not a second open
    emit(manager, "UnitRemoved", UNITS[KONSOLE])
    th.wait_until(lambda: "org.gnome.Weather" in agent.stderr() and agent.stderr().count("App unit changed") >= 6,
                  th.TIMEOUT, "the agent to log the last unit changes")
    assert last_used(agent, MAPS) == maps_opened
    assert last_used(agent, BYSTANDER) <= long_ago + 1
    assert agent.app_record("org.gnome.Weather") is None, "an unregistered app is not registered by its unit"
    assert agent.alive()

    agent.stop()
    # The set-up's registrations 30 days ago come first: each an open, and a leave as its
    # process quit (use is tracked without the refresh planner too), in whatever order the
    # quits were seen.
    rows = usage_rows(world)
    setup = [(app_id, state) for app_id in (MAPS, KONSOLE, DOLPHIN, BYSTANDER) for state in ("foreground", "background")]
    assert sorted(rows[:len(setup)]) == sorted(setup), rows
    assert rows[len(setup):] == [
        (KONSOLE, "foreground"), (MAPS, "foreground"), (DOLPHIN, "foreground"),
        (MAPS, "background"), ("org.gnome.Weather", "foreground"), (KONSOLE, "background"),
    ]


def test_apps_in_use_are_those_whose_units_run_when_the_agent_connects(world):
    """The usage log says Maps and Konsole were left open (at the end of a session the agent
    may stop before the apps do); when the agent starts, the user manager runs Konsole's and
    Weather's units, and the autostart unit of GNOME's disk utility notifier. The agent asks it:
    Konsole and Weather are in use, Maps and the autostarted notifier are not (GetStatus's
    `in_use`, `bgpolicy status`), and a UnitNew for Weather's running unit is no new open."""
    weather = ("org.gnome.Weather", "app-gnome-org.gnome.Weather-777.scope")
    _, manager = start_manager(world)
    # An autostart unit runs too (the form before systemd 248: the stock mock takes no '@'): the
    # session started it, so its app is not in use.
    for unit in (UNITS[KONSOLE], weather[1], "app-gnome-org.gnome.SettingsDaemon.DiskUtilityNotify-autostart.service"):
        manager.mock("AddMockUnit", "s", (unit,))
        th.call(world.session.conn, MANAGER, "StartUnit", "ss", (unit, "replace"), reply_type="(o)",
                dest=MANAGER_NAME, path="/org/freedesktop/systemd1")
    agent = world.start_agent(planner=True)
    wait_subscribed(agent, manager)
    now = time.time()
    th.restart_with_usage(agent, [(MAPS, "foreground", now - 3600), (KONSOLE, "foreground", now - 3000)])
    th.wait_until(lambda: agent.status().get("in_use") == [weather[0], KONSOLE], th.TIMEOUT,
                  "the agent to take the running units for the apps in use")
    assert f"In use: {weather[0]}, {KONSOLE}" in agent.cli("status").stdout
    assert f'apps.closed_unseen=["{MAPS}"]' in agent.stderr(), agent.stderr_tail()

    # Weather's running unit announced again is not an open; Maps' new unit is.
    emit(manager, "UnitNew", weather[1])
    emit(manager, "UnitNew", UNITS[MAPS])
    th.wait_until(lambda: agent.status().get("in_use") == [MAPS, weather[0], KONSOLE], th.TIMEOUT, "Maps to be in use")
    agent.stop()
    assert usage_rows(world)[2:] == [(MAPS, "foreground")]


def test_an_app_kept_open_for_weeks_is_not_held_as_unused(world):
    """Konsole was opened 30 days ago and its unit still runs (a terminal left open through
    weeks of suspends): it is in use, so the 7-day rule does not hold its refresh, and the
    timeline does not show it inactive. Its record's last use is its last open, by which it
    was held back as unused before. Maps, opened as long ago and not running, is held, and the
    timeline says for how long unused, as configured."""
    _, manager = start_manager(world)
    world.start_agent(planner=True, config="[limits]\ninactive_after = 20d\n")
    agent, _ = registered_long_ago(world, [KONSOLE, MAPS], pending_for=[KONSOLE, MAPS])
    wait_subscribed(agent, manager)
    assert "app-inactive" in agent.explain(KONSOLE, f"{KONSOLE}.refresh")["blocking"]
    manager.mock("AddMockUnit", "s", (UNITS[KONSOLE],))
    th.call(world.session.conn, MANAGER, "StartUnit", "ss", (UNITS[KONSOLE], "replace"), reply_type="(o)",
            dest=MANAGER_NAME, path="/org/freedesktop/systemd1")
    agent.stop()
    agent.restart()
    th.wait_until(lambda: agent.status().get("in_use") == [KONSOLE], th.TIMEOUT, "Konsole's running unit to put it in use")
    assert "app-inactive" not in agent.explain(KONSOLE, f"{KONSOLE}.refresh")["blocking"]
    assert "app-inactive" in agent.explain(MAPS, f"{MAPS}.refresh")["blocking"]
    (timeline,) = agent.admin("GetTimeline", "s", ("",), reply_type="(a{sv})")
    rows = {row["app_id"]: row for row in timeline["apps"]}
    assert (rows[KONSOLE]["inactive"], rows[MAPS]["inactive"]) == (False, True), rows
    assert timeline["inactive_after_seconds"] == 20 * 86400
    strips = agent.cli("timeline").stdout.splitlines()
    assert any(line.startswith(MAPS) and "inactive: unused for 20 days, nothing planned" in line for line in strips), strips
    assert not any(line.startswith(KONSOLE) and "inactive" in line for line in strips), strips


def test_an_app_left_after_a_use_longer_than_inactive_after_is_not_held_as_unused(world):
    """With `inactive_after = 15s`, Maps is opened (its registration), kept open 17 s, and left
    (`ReportUsage` background): it was used until it was left, so neither `app-inactive` nor the
    refresh planner (the default `predicted` strategy) holds its refresh as unused, the timeline
    does not show it inactive, and its record's last use is the leave, kept across a restart.
    The leave was never taken for a use: the record kept the open, and the planner its last
    open, so the app became unused the moment it was closed. 15 s after the leave it is unused.
    (Its refresh may run in the window after use; Explain then has nothing pending to hold.)"""
    agent = world.start_agent(planner=True, config="[windows]\ngrid_on_battery = 1h\ngrid_on_ac = 1h\n"
                                                   "[limits]\ninactive_after = 15s\n")
    maps = world.registered_app(MAPS, [f"{MAPS}.refresh"])
    maps.submit(f"{MAPS}.refresh", "refresh")

    def unused(explanation):
        # The planner's words for an app it takes as unused: never seen opened, not used for the
        # limit, or last seen used that long ago.
        return "app-inactive" in explanation["blocking"] or any(
            "not been used" in words or "no use is predicted" in words or "no use can be predicted" in words
            for words in explanation["reasons"])

    def inactive_in_timeline():
        (timeline,) = agent.admin("GetTimeline", "s", (MAPS,), reply_type="(a{sv})")
        return timeline["apps"][0]["inactive"]

    time.sleep(17)
    assert agent.status().get("in_use") == [MAPS]
    explanation = agent.explain(MAPS, f"{MAPS}.refresh")
    assert explanation["state"] != "not-pending" and not unused(explanation), explanation
    maps.scheduler("ReportUsage", "s", ("background",))
    th.wait_until(lambda: abs((last_used(agent, MAPS) or 0) - time.time()) < 5, th.TIMEOUT, "Maps' last_used_at to be its leave")
    left = last_used(agent, MAPS)
    assert agent.status().get("in_use", []) == []
    explanation = agent.explain(MAPS, f"{MAPS}.refresh")
    assert not unused(explanation), explanation
    assert inactive_in_timeline() is False
    agent.stop()
    agent.restart()
    assert abs(last_used(agent, MAPS) - left) < 1, agent.app_record(MAPS)
    assert inactive_in_timeline() is False
    time.sleep(max(0, left + 16 - time.time()))
    assert inactive_in_timeline() is True


def test_an_app_known_by_its_own_word_is_left_when_its_last_connection_closes(world):
    """Notes has no app unit: it registered, which counts as an open, so when its last bus
    connection closes the user left it. `in_use` drops it, the usage log gets the close, and a
    restart does not take it for one still open. Konsole, whose unit runs, also registered: it
    is left when its unit goes, not when its connection closes."""
    notes = "org.example.Notes"
    _, manager = start_manager(world)
    manager.mock("AddMockUnit", "s", (UNITS[KONSOLE],))
    th.call(world.session.conn, MANAGER, "StartUnit", "ss", (UNITS[KONSOLE], "replace"), reply_type="(o)",
            dest=MANAGER_NAME, path="/org/freedesktop/systemd1")
    agent = world.start_agent(planner=True)
    wait_subscribed(agent, manager)
    th.wait_until(lambda: agent.status().get("in_use") == [KONSOLE], th.TIMEOUT, "Konsole's unit to put it in use")
    apps = [world.registered_app(app_id, [f"{app_id}.refresh"]) for app_id in (notes, KONSOLE)]
    th.wait_until(lambda: agent.status().get("in_use") == [notes, KONSOLE], th.TIMEOUT, "Notes' registration to put it in use")
    for app in apps:
        app.quit()
    th.wait_until(lambda: agent.status().get("in_use") == [KONSOLE], th.TIMEOUT, "Notes to be left as it exits")
    assert f"app.id={notes} [BGPolicyAgent] App left: its last bus connection closed" in agent.stderr(), \
        agent.stderr_tail()
    th.call(world.session.conn, MANAGER, "StopUnit", "ss", (UNITS[KONSOLE], "replace"), reply_type="(o)",
            dest=MANAGER_NAME, path="/org/freedesktop/systemd1")
    emit(manager, "UnitRemoved", UNITS[KONSOLE])
    th.wait_until(lambda: "in_use" not in agent.status(), th.TIMEOUT, "Konsole to be left as its unit goes")
    agent.stop()
    # Notes' registration is its open; Konsole's, while its unit runs, is part of that use.
    assert usage_rows(world) == [(notes, "foreground"), (notes, "background"), (KONSOLE, "background")]
    agent.restart()
    wait_subscribed(agent, manager, times=2)
    assert "Usage learned from the log" in agent.stderr(), agent.stderr_tail()
    assert "in_use" not in agent.status(), agent.status().get("in_use")


def test_a_usage_report_of_the_state_reported_last_records_nothing(world):
    """An app that reports the same state again and again (a loop, a bug) changed nothing: no
    row each time, and no second open for the predictor. A change is recorded, and once the
    app is left (its last connection went), its next process's foreground is an open again.
    The registration was the open, so the app's own first `foreground` after it is part of
    the same use: it was a second row and a second open (Explain's `opens` 2)."""
    app_id = "org.example.Loop"
    agent = world.start_agent(planner=True)
    app = world.registered_app(app_id, [f"{app_id}.refresh"])

    def opens():
        return agent.explain(app_id, f"{app_id}.refresh")["opens"]

    app.scheduler("ReportUsage", "s", ("foreground",))
    assert opens() == 1
    assert agent.status().get("in_use") == [app_id], agent.status()
    for state in ["foreground"] * 49 + ["background"] * 50 + ["foreground"] * 50:
        app.scheduler("ReportUsage", "s", (state,))
    assert opens() == 2
    app.quit()
    th.wait_until(lambda: not agent.app_record(app_id)["connected"], th.TIMEOUT, "the app to leave")
    again = world.registered_app(app_id, [f"{app_id}.refresh"])
    again.scheduler("ReportUsage", "s", ("foreground",))
    again.scheduler("ReportUsage", "s", ("foreground",))
    assert opens() == 3
    agent.stop()
    # The registration is the open; then one row per change, the close as the connection
    # went, and the next process's registration, once.
    assert usage_rows(world) == [(app_id, state) for state in (
        "foreground", "background", "foreground", "background", "foreground")], usage_rows(world)


def test_an_app_whose_unit_runs_is_not_opened_again_by_its_own_usage_reports(world):
    """GNOME's launcher makes a scope for the app, which registers and reports itself in the
    foreground as it starts. The scope's appearance was the open: the report is part of the
    same use, so no second row and no second open (Explain's `opens` stays 1; it was 2). Its
    `background` while the scope runs is the user leaving it (a window closed to the tray):
    a leave, and its next `foreground` an open. The scope's end after that leaves nothing
    more: each open pairs with one close in the log."""
    app_id, unit = "org.example.App", "app-gnome-org.example.App-1234.scope"
    _, manager = start_manager(world)
    agent = world.start_agent(planner=True)
    wait_subscribed(agent, manager)
    emit(manager, "UnitNew", unit)
    th.wait_until(lambda: agent.status().get("in_use") == [app_id], th.TIMEOUT, "the app's scope to put it in use")
    app = world.registered_app(app_id, [f"{app_id}.refresh"])

    def report(state):
        app.scheduler("ReportUsage", "s", (state,))

    def opens():
        explanation = agent.explain(app_id, f"{app_id}.refresh")
        return explanation["opens"], explanation["opens_last_24h"]

    report("foreground")
    assert opens() == (1, 1)
    assert agent.status().get("in_use") == [app_id], agent.status()
    report("background")
    assert "in_use" not in agent.status(), agent.status()
    report("foreground")
    assert agent.status().get("in_use") == [app_id], agent.status()
    assert opens() == (2, 2)
    report("background")
    emit(manager, "UnitRemoved", unit)
    th.wait_until(lambda: "scope" in agent.stderr() and "left already" in agent.stderr(), th.TIMEOUT,
                  "the agent to see the scope go")
    assert "in_use" not in agent.status(), agent.status()
    app.quit()
    agent.stop()
    assert usage_rows(world) == [(app_id, "foreground"), (app_id, "background")] * 2


def test_an_app_alternating_its_usage_state_in_a_loop_is_refused_past_a_persons_pace(world):
    """Each change of state is a row of the usage log, kept for 8 weeks: an app alternating
    foreground and background in a loop wrote about 600 a second, gigabytes a day, from one
    client. 60 changes are recorded at once, then one a second; those past it are refused with
    LimitsExceeded saying so and are not recorded, and one sent again a second later is."""
    agent = world.start_agent()
    app = world.registered_app("org.example.Flip", ["org.example.Flip.refresh"])
    started = time.monotonic()
    accepted, refusals = [], []
    for n in range(200):
        state = "background" if n % 2 == 0 else "foreground"
        try:
            app.scheduler("ReportUsage", "s", (state,))
            # After a refusal, the next report is of the state recorded last: no change.
            if state != (accepted[-1] if accepted else "foreground"):
                accepted.append(state)
        except th.AgentError as error:
            assert error.name == "org.bgpolicy.Error.LimitsExceeded", error
            refusals.append(error.message)
    elapsed = time.monotonic() - started
    assert 60 <= len(accepted) <= 60 + elapsed + 1, (len(accepted), elapsed)
    assert refusals and "this one was not recorded. Send it again in a second" in refusals[0], refusals[:1]
    # The refused change is recorded when sent again once the budget allows it.
    refused = "foreground" if accepted[-1] == "background" else "background"
    time.sleep(1.1)
    app.scheduler("ReportUsage", "s", (refused,))
    agent.stop()
    # The registration's open, then each change recorded, and nothing refused.
    assert usage_rows(world) == [("org.example.Flip", "foreground")] + \
        [("org.example.Flip", state) for state in accepted + [refused]], len(usage_rows(world))


def test_usage_reports_of_all_apps_together_are_bounded(world):
    """A process that registers app id after app id (unverified ids, up to `[limits] apps`),
    each reporting within its own budget, wrote thousands of rows a second between them. All
    apps together may record 3,600 changes at once, then two a second: the next is refused
    with LimitsExceeded saying so, and one sent again a second later is recorded."""
    agent = world.start_agent()
    refusal = None
    recorded = 0
    for n in range(70):
        conn = world.stack.push(th.ch.GBus(world.address)).conn
        app_id = f"org.example.Many{n}"
        th.call(conn, th.SCHEDULER, "Register", "asa{sv}", ([f"{app_id}.refresh"], th.register_options(app_id=app_id)), "(s)")
        for i in range(60):
            try:
                th.call(conn, th.SCHEDULER, "ReportUsage", "s", ("background" if i % 2 == 0 else "foreground",))
                recorded += 1
            except th.AgentError as error:
                assert error.name == "org.bgpolicy.Error.LimitsExceeded", error
                refusal = error.message
                break
        if refusal:
            break
    assert refusal and "the apps together reported more changes" in refusal, refusal
    assert 3600 <= recorded <= 3700, recorded
    time.sleep(1.1)
    th.call(conn, th.SCHEDULER, "ReportUsage", "s", ("background" if i % 2 == 0 else "foreground",))  # the one refused
    assert agent.alive()


def test_opens_known_only_from_registrations_are_learned_again_after_a_restart(world):
    """An app the user manager does not see (no app unit: a session without app scopes, or an
    unverified app id) is opened only by its registrations. Each is in the usage log, as its
    close is, so a restart learns every one: it used to learn the closes and only the last open
    (from the app's record), and forget the app's habits. The first use is moved an hour back
    while the agent is stopped, so that the second is no repeat of it (opens within a minute
    count once)."""
    notes = "org.example.Notes"
    agent = world.start_agent(planner=True)
    world.registered_app(notes, [f"{notes}.refresh"]).quit()
    th.wait_until(lambda: "in_use" not in agent.status(), th.TIMEOUT, "Notes to be left as it exits")
    agent.stop()
    with sqlite3.connect(database(world)) as db:
        db.execute("UPDATE usage SET time = time - 3600")
        db.execute("UPDATE apps SET last_used_at = last_used_at - 3600")
    agent.restart()
    world.registered_app(notes, [f"{notes}.refresh"]).quit()
    th.wait_until(lambda: "in_use" not in agent.status(), th.TIMEOUT, "Notes to be left as it exits again")
    agent.stop()
    assert usage_rows(world) == [(notes, "foreground"), (notes, "background")] * 2
    agent.restart()
    learned = re.findall(r"events=(\d+).*Usage learned from the log|Usage learned from the log.*events=(\d+)",
                         agent.stderr())
    assert learned and int(learned[-1][0] or learned[-1][1]) == 4, agent.stderr_tail()
    assert "in_use" not in agent.status(), agent.status()


@pytest.mark.parametrize("listed", [False, True])
def test_an_app_with_two_units_is_left_when_the_last_goes(world, listed):
    """Konsole is launched twice: KDE makes a scope for each launch, and the second hands its
    window to the running Konsole and ends at once (or keeps its window for a while). The app is
    in use until its last unit goes: the second scope going is no leave (Konsole is still in
    use, the usage log gets no close), nor is its coming a second open (no row); the first going
    is the leave, with its one close. The same when both scopes already run as the agent starts
    (`listed`: the user manager lists them, and the listing writes no row)."""
    second = "app-org.kde.konsole-d4e5f6.scope"
    _, manager = start_manager(world)
    if listed:
        for unit in (UNITS[KONSOLE], second):
            manager.mock("AddMockUnit", "s", (unit,))
            th.call(world.session.conn, MANAGER, "StartUnit", "ss", (unit, "replace"), reply_type="(o)",
                    dest=MANAGER_NAME, path="/org/freedesktop/systemd1")
    agent = world.start_agent(planner=True)
    wait_subscribed(agent, manager)
    if not listed:
        emit(manager, "UnitNew", UNITS[KONSOLE])
        emit(manager, "UnitNew", second)
    th.wait_until(lambda: agent.status().get("in_use") == [KONSOLE], th.TIMEOUT, "Konsole's units to put it in use")

    # Maps opens after the second scope goes: signals are handled in order, so once Maps is in
    # use, the second scope's end has been seen too.
    emit(manager, "UnitRemoved", second)
    emit(manager, "UnitNew", UNITS[MAPS])
    th.wait_until(lambda: MAPS in agent.status().get("in_use", []), th.TIMEOUT, "Maps' unit to put it in use")
    assert agent.status().get("in_use") == [MAPS, KONSOLE], agent.status()
    emit(manager, "UnitRemoved", UNITS[KONSOLE])
    th.wait_until(lambda: agent.status().get("in_use") == [MAPS], th.TIMEOUT, "Konsole to be left as its last unit goes")
    agent.stop()
    opened = [] if listed else [(KONSOLE, "foreground")]
    assert usage_rows(world) == opened + [(MAPS, "foreground"), (KONSOLE, "background")]


def test_agent_follows_the_manager_when_absent_at_start_and_when_it_restarts(world):
    agent, long_ago = registered_long_ago(world, [MAPS, KONSOLE])
    # No manager yet: the agent serves all the same.
    assert agent.status() is not None
    assert not world.session.has_owner(MANAGER_NAME)

    # It appears: the agent subscribes and hears it.
    proc, manager = start_manager(world)
    wait_subscribed(agent, manager)
    emit(manager, "UnitNew", UNITS[MAPS])
    th.wait_until(lambda: is_fresh(last_used(agent, MAPS)), th.TIMEOUT, "Maps' last_used_at after its UnitNew")

    # It goes away: the agent keeps serving, apps register and submit.
    proc.stop()
    world.session.wait_for_name(MANAGER_NAME, present=False)
    app = world.registered_app("org.example.Meanwhile", ["org.example.Meanwhile.refresh"])
    app.submit("org.example.Meanwhile.refresh", "refresh", earliest_begin=later(3600))
    assert agent.alive() and agent.status() is not None

    # It comes back (a new owner): the agent subscribes again and hears the new one.
    _, manager = start_manager(world)
    wait_subscribed(agent, manager)
    emit(manager, "UnitNew", UNITS[KONSOLE])
    th.wait_until(lambda: is_fresh(last_used(agent, KONSOLE)), th.TIMEOUT, "konsole's last_used_at after its UnitNew")
    assert agent.alive()
    assert [p["identifier"] for p in agent.list_pending() if p["app_id"] == "org.example.Meanwhile"] == \
        ["org.example.Meanwhile.refresh"]


def test_signals_from_another_sender_are_ignored(world):
    """Only the owner of org.freedesktop.systemd1 speaks for the user manager: the same signal
    from any other connection is not an open."""
    _, manager = start_manager(world)
    agent, long_ago = registered_long_ago(world, [MAPS, KONSOLE])
    wait_subscribed(agent, manager)
    # A plain connection emits a look-alike UnitNew on the manager's path and interface.
    world.session.conn.emit_signal(None, "/org/freedesktop/systemd1", MANAGER, "UnitNew",
                                   GLib.Variant("(so)", (UNITS[MAPS], "/org/freedesktop/systemd1/unit/x")))
    emit(manager, "UnitNew", UNITS[KONSOLE])
    th.wait_until(lambda: is_fresh(last_used(agent, KONSOLE)), th.TIMEOUT, "konsole's last_used_at after its UnitNew")
    assert last_used(agent, MAPS) <= long_ago + 1, agent.app_record(MAPS)


@pytest.mark.parametrize("comes_back_soon", [True, False])
def test_closing_an_app_unit_refreshes_the_app_left_if_the_user_comes_back_soon(laptop, comes_back_soon):
    """The user leaves GNOME Maps (its scope goes away): a window opens for Maps' own refresh,
    which the planner chooses if it learned, from the closes in the usage log read back at
    start, that the user tends to come back to Maps within 15 minutes, and not if they do not.
    On battery, so that the waits below keep clear of the grid's windows (every 15 min)."""
    world = laptop
    _, manager = start_manager(world)
    agent = world.start_agent(planner=True)
    wait_subscribed(agent, manager)
    # Three weeks of hourly use of ten apps in the usage log: the budget (refreshes and
    # wake-ups grow with the apps in use) fills up. Every app is left after two minutes; the
    # user comes back within three minutes, twice an hour, or not until the next hour.
    now = time.time()
    apps = [MAPS] + [f"org.example.App{k}" for k in range(9)]
    visits = [0, 300, 600] if comes_back_soon else [0]
    rows = []
    for day in range(1, 22):
        for hour in range(24):
            for k, app in enumerate(apps):
                t = now - day * 86400 - (now % 86400) + hour * 3600 + 20 * k
                for visit in visits:
                    rows += [(app, "foreground", t + visit), (app, "background", t + visit + 120)]
    th.restart_with_usage(agent, rows)
    wait_subscribed(agent, manager, times=2)
    # The launcher makes Maps' scope, then Maps starts in it and registers.
    emit(manager, "UnitNew", UNITS[MAPS])
    th.wait_until(lambda: agent.stderr().count("App unit changed") >= 1, th.TIMEOUT, "the agent to see Maps' unit")
    maps = world.registered_app(MAPS, [f"{MAPS}.refresh"])
    # Opening Maps opened a window for a minute (for apps not in use, which Maps is not then):
    # wait it out, and keep clear of the 15-min grid's windows, with time for the steps below.
    th.wait_between_windows(900, 61, 860, not_before=time.time() + 61)
    th.submit_refresh_that_waits(agent, maps, MAPS)
    time.sleep(1.5)
    assert maps.events_of("RunTask") == []
    emit(manager, "UnitRemoved", UNITS[MAPS])
    if comes_back_soon:
        th.wait_refresh_delivered(agent, maps, MAPS, "in a refresh window opened because the user left the app")
    else:
        th.wait_until(lambda: agent.stderr().count("App unit changed") >= 2, th.TIMEOUT, "the agent to see Maps' unit go")
        time.sleep(3)
        assert maps.events_of("RunTask") == []
        explanation = agent.explain(MAPS, f"{MAPS}.refresh")
        assert "predicted-use" in explanation["blocking"], explanation


def test_the_session_starting_an_app_is_no_open(world):
    """Only the user opens apps. The units systemd's xdg-autostart-generator makes for XDG
    autostart entries (`app-<id>@autostart.service`) start at login: neither their `UnitNew`
    nor their `UnitRemoved` is use, nor is the Flatpak scope the app moves into a moment later
    (`flatpak run` always makes its own), and a process in either registers without opening its
    app. Nor does a process that registers `background_only` (it shows no window). Each would
    otherwise teach the predictor an open at every login, or whenever a helper starts, and keep
    the app "in use" all day, so that no window after an open would ever refresh it."""
    sync, alarm, tray = "org.example.Sync", "org.gnome.Evolution-alarm-notify", "org.example.Tray"
    alarm_unit = r"app-gnome-org.gnome.Evolution\x2dalarm\x2dnotify@autostart.service"
    maps_autostart, maps_scope = "app-org.gnome.Maps@autostart.service", "app-flatpak-org.gnome.Maps-4242.scope"
    tray_autostart, tray_scope = f"app-{tray}@autostart.service", f"app-flatpak-{tray}-5151.scope"
    _, manager = start_manager(world)
    world.start_agent(planner=True)
    agent, long_ago = registered_long_ago(world, [MAPS, KONSOLE])
    wait_subscribed(agent, manager)

    for unit in (maps_autostart, maps_scope, tray_autostart, tray_scope):
        emit(manager, "UnitNew", unit)
    emit(manager, "UnitNew", UNITS[KONSOLE])  # in order after them: once Konsole is in use, they were seen
    th.wait_until(lambda: agent.status().get("in_use") == [KONSOLE], th.TIMEOUT, "Konsole's unit to put it in use")
    assert last_used(agent, MAPS) <= long_ago + 1, agent.app_record(MAPS)
    assert is_fresh(last_used(agent, KONSOLE))
    emit(manager, "UnitRemoved", maps_autostart)
    emit(manager, "UnitRemoved", tray_autostart)

    # Processes in an autostart unit and in a Flatpak scope an autostart started, and one that
    # shows no window, register: none of them opened its app.
    autostarted = world.app(name="alarm notify", cgroup=th.unit_cgroup(alarm_unit))
    assert autostarted.register([f"{alarm}.refresh"]) == alarm
    flatpak = world.app(name="tray", cgroup=th.unit_cgroup(tray_scope), flatpak_app=tray)
    assert flatpak.register([f"{tray}.refresh"]) == tray
    helper = world.app(name="sync helper")
    assert helper.register([f"{sync}.refresh"], app_id=sync, background_only=True) == sync
    for app_id in (alarm, tray, sync):
        assert last_used(agent, app_id) is None, agent.app_record(app_id)
        explanation = agent.explain(app_id, f"{app_id}.refresh")
        assert (explanation["opens"], explanation["opens_last_24h"]) == (0, 0), explanation
        assert "last_open" not in explanation, explanation
    shown = agent.cli("explain", sync, f"{sync}.refresh").stdout
    assert re.search(r"\n  Opened +never, as far as bgpolicyd has seen \(it learns opens from", shown), shown
    assert agent.status().get("in_use") == [KONSOLE]
    for line in (f"unit={alarm_unit} usage=started by the session's autostart",
                 f"unit={tray_scope} usage=started by the session's autostart",
                 f"app.id={sync} bus.unique={helper.unique_name} identity=unverified unit=- usage=background only"):
        assert line in agent.stderr(), agent.stderr_tail()

    # The units going are no leave; the processes exiting leave nothing either.
    emit(manager, "UnitRemoved", maps_scope)
    for app in (autostarted, flatpak, helper):
        app.quit()
    emit(manager, "UnitRemoved", tray_scope)
    emit(manager, "UnitRemoved", UNITS[KONSOLE])
    th.wait_until(lambda: "in_use" not in agent.status(), th.TIMEOUT, "Konsole to be left as its unit goes")
    agent.stop()
    # The first four rows are the set-up's: Maps and Konsole registered, then exited.
    assert usage_rows(world) == [(MAPS, "foreground"), (MAPS, "background"), (KONSOLE, "foreground"),
                                 (KONSOLE, "background"), (KONSOLE, "foreground"), (KONSOLE, "background")]


def test_a_scope_the_session_started_is_still_the_sessions_after_a_restart(world):
    """At login the session starts Tray: its autostart unit, then the Flatpak scope `flatpak run`
    moves into, then the autostart unit goes. The agent restarts while the scope runs (an
    upgrade, a crash), when the scope alone looks like an app the user opened. The agent keeps
    the scopes the session started in its database: after the restart Tray is still not in use,
    and its scope going is no leave. Konsole, which the user opened, is in use as ever."""
    tray = "org.example.Tray"
    tray_autostart, tray_scope = f"app-{tray}-autostart.service", f"app-flatpak-{tray}-5151.scope"
    _, manager = start_manager(world)
    agent = world.start_agent(planner=True)
    wait_subscribed(agent, manager)

    emit(manager, "UnitNew", tray_autostart)
    start_unit(world, manager, tray_scope)
    emit(manager, "UnitRemoved", tray_autostart)
    start_unit(world, manager, UNITS[KONSOLE])
    th.wait_until(lambda: agent.status().get("in_use") == [KONSOLE], th.TIMEOUT, "Konsole's unit to put it in use")
    agent.stop()
    with sqlite3.connect(database(world)) as db:
        assert db.execute("SELECT unit FROM session_started_units").fetchall() == [(tray_scope,)]

    agent.restart()
    th.wait_until(lambda: len(manager.calls("ListUnitsByPatterns")) >= 2, th.TIMEOUT,
                  "the restarted agent to list the running units")
    # A unit opened after the listing is handled after it: by then the listing is the agent's view.
    emit(manager, "UnitNew", UNITS[MAPS])
    th.wait_until(lambda: agent.status().get("in_use") == [MAPS, KONSOLE], th.TIMEOUT,
                  "Maps and Konsole to be in use, and not Tray")
    emit(manager, "UnitRemoved", tray_scope)
    emit(manager, "UnitRemoved", UNITS[MAPS])
    th.wait_until(lambda: agent.status().get("in_use") == [KONSOLE], th.TIMEOUT, "Maps to be left")
    agent.stop()
    assert usage_rows(world) == [(KONSOLE, "foreground"), (MAPS, "foreground"), (MAPS, "background")]
    with sqlite3.connect(database(world)) as db:
        assert db.execute("SELECT unit FROM session_started_units").fetchall() == []


def test_a_reload_of_the_user_manager_opens_and_closes_nothing(world):
    """`systemctl --user daemon-reload` (package updates run it, as does enabling a unit) frees
    every unit and builds it again: between `Reloading(true)` and `Reloading(false)` the manager
    sends a `UnitRemoved` and a `UnitNew` for each. Nautilus, which the user opened, is still in
    use, with no close and no second open in the usage log; the Flatpak scope the session's
    autostart started for Tray, known from the database after a restart, is still the
    session's, not an app the user opened. The agent asks the manager again which app units
    run once the reload is done."""
    nautilus = ("org.gnome.Nautilus", "app-gnome-org.gnome.Nautilus-12345.scope")
    tray = "org.example.Tray"
    tray_autostart, tray_scope = f"app-{tray}-autostart.service", f"app-flatpak-{tray}-5151.scope"
    _, manager = start_manager(world)
    agent = world.start_agent(planner=True)
    wait_subscribed(agent, manager)
    emit(manager, "UnitNew", tray_autostart)
    start_unit(world, manager, tray_scope)
    emit(manager, "UnitRemoved", tray_autostart)
    start_unit(world, manager, nautilus[1])
    th.wait_until(lambda: agent.status().get("in_use") == [nautilus[0]], th.TIMEOUT, "Nautilus' unit to put it in use")
    # A restart forgets when Tray's autostart unit appeared: its scope is the session's by the
    # database alone, as on the day a package update reloads the manager.
    agent.stop()
    agent.restart()
    th.wait_until(lambda: len(manager.calls("ListUnitsByPatterns")) >= 2, th.TIMEOUT,
                  "the restarted agent to list the running units")

    emit_reloading(manager, True)
    for unit in (tray_scope, "dbus.service", nautilus[1]):
        emit(manager, "UnitRemoved", unit)
    for unit in (tray_scope, "dbus.service", nautilus[1]):
        emit(manager, "UnitNew", unit)
    emit_reloading(manager, False)
    # Maps opens after the reload: signals are handled in order, so once it is in use, the
    # reload has been handled too.
    emit(manager, "UnitNew", UNITS[MAPS])
    th.wait_until(lambda: agent.status().get("in_use") == [MAPS, nautilus[0]], th.TIMEOUT,
                  "Maps and Nautilus to be in use, and not Tray")
    assert len(manager.calls("ListUnitsByPatterns")) == 3, "the agent lists the running units after the reload"
    agent.stop()
    assert usage_rows(world) == [(nautilus[0], "foreground"), (MAPS, "foreground")]
    with sqlite3.connect(database(world)) as db:
        assert db.execute("SELECT unit FROM session_started_units").fetchall() == [(tray_scope,)]


def test_an_app_unit_that_goes_during_a_reload_is_closed_once_it_is_done(world):
    """Konsole exits while the user manager reloads: its unit is removed and not built again.
    Its `UnitRemoved` is one of the reload's, held like the rest, so Konsole is still in use
    until `Reloading(false)`; then the manager no longer lists its unit, and it is left, with
    one close in the usage log. Nautilus, built again, stays in use."""
    nautilus = ("org.gnome.Nautilus", "app-gnome-org.gnome.Nautilus-12345.scope")
    _, manager = start_manager(world)
    agent = world.start_agent(planner=True)
    wait_subscribed(agent, manager)
    for unit in (UNITS[KONSOLE], nautilus[1]):
        start_unit(world, manager, unit)
    th.wait_until(lambda: agent.status().get("in_use") == [nautilus[0], KONSOLE], th.TIMEOUT,
                  "Konsole's and Nautilus' units to put them in use")

    emit_reloading(manager, True)
    for unit in (UNITS[KONSOLE], nautilus[1]):
        emit(manager, "UnitRemoved", unit)
    emit(manager, "UnitNew", nautilus[1])
    th.call(world.session.conn, MANAGER, "StopUnit", "ss", (UNITS[KONSOLE], "replace"), reply_type="(o)",
            dest=MANAGER_NAME, path="/org/freedesktop/systemd1")
    time.sleep(1)
    assert agent.status().get("in_use") == [nautilus[0], KONSOLE], "nothing is left while the manager reloads"
    emit_reloading(manager, False)
    th.wait_until(lambda: agent.status().get("in_use") == [nautilus[0]], th.TIMEOUT,
                  "Konsole to be left once the reload is done")
    agent.stop()
    assert usage_rows(world) == [(KONSOLE, "foreground"), (nautilus[0], "foreground"), (KONSOLE, "background")]


def test_an_app_running_before_the_agent_restarted_is_not_opened_again(world):
    """After the agent restarts, apps that were running register again. Such a registration is
    no open (the user opened the app before, when the old agent counted it): its `last_used_at`
    stays, and the app is as the usage log left it: Notes, opened and not left, is in use and
    its exit is a leave; Maps, which the user had left (`ReportUsage` `background`), is not in
    use. An app started after the agent opens as ever."""
    notes, news = "org.example.Notes", "org.example.News"
    agent = world.start_agent(planner=True)
    app = world.registered_app(notes, [f"{notes}.refresh"])
    left = world.registered_app(MAPS, [f"{MAPS}.refresh"])
    left.scheduler("ReportUsage", "s", ("background",))
    th.wait_until(lambda: agent.status().get("in_use") == [notes], th.TIMEOUT, "Maps to be left")
    opened_at = {app_id: last_used(agent, app_id) for app_id in (notes, MAPS)}
    assert all(is_fresh(t) for t in opened_at.values()), opened_at
    # The processes must be older than the next agent by more than the activation margin (5 s).
    time.sleep(max(0.0, 7 - (time.time() - min(opened_at.values()))))
    agent.stop()
    agent.restart()
    assert app.register([f"{notes}.refresh"], app_id=notes) == notes
    assert left.register([f"{MAPS}.refresh"], app_id=MAPS) == MAPS
    assert {app_id: last_used(agent, app_id) for app_id in (notes, MAPS)} == opened_at, agent.stderr_tail()
    assert agent.status().get("in_use") == [notes]
    for a, app_id in ((app, notes), (left, MAPS)):
        line = f"app.id={app_id} bus.unique={a.unique_name} identity=unverified unit=- usage=running before the agent started"
        assert line in agent.stderr(), agent.stderr_tail()

    newcomer = world.registered_app(news, [f"{news}.refresh"])
    assert is_fresh(last_used(agent, news))
    assert agent.status().get("in_use") == [news, notes]
    assert f"app.id={news} bus.unique={newcomer.unique_name} identity=unverified unit=- usage=opened" in agent.stderr()

    left.quit()
    app.quit()
    th.wait_until(lambda: agent.status().get("in_use") == [news], th.TIMEOUT, "Notes to be left as it exits")
    newcomer.quit()
    th.wait_until(lambda: "in_use" not in agent.status(), th.TIMEOUT, "News to be left as it exits")
    agent.stop()
    # The two registrations and Maps' ReportUsage before the restart; News' registration after
    # it (the others' were no opens); the two exits, Maps' none (it was not in use).
    assert usage_rows(world) == [(notes, "foreground"), (MAPS, "foreground"), (MAPS, "background"),
                                 (news, "foreground"), (notes, "background"), (news, "background")]


def test_retention_counts_back_from_the_newest_event_when_the_clock_says_later(world):
    """Raw usage is kept 8 weeks. A start whose clock says 10 weeks after the newest event (a
    clock set far ahead at boot; or weeks away) counts the 8 weeks back from that event, not
    from the clock: the log is not folded away whole. Counted from the clock, every row went."""
    agent = world.start_agent()
    week = 7 * 86400
    newest = time.time() - 10 * week
    rows = [("org.example.Mail", state, newest - day * 86400 - (60 if state == "foreground" else 0))
            for day in range(28) for state in ("foreground", "background")]
    rows += [("org.example.Mail", "foreground", newest - 9 * week)]  # over 8 weeks before the newest
    th.restart_with_usage(agent, rows)

    with sqlite3.connect(f"file:{world.tmp / 'state' / 'bgpolicy' / 'bgpolicy.sqlite'}?mode=ro", uri=True) as db:
        kept = db.execute("SELECT count(*) FROM usage WHERE time <= ?", (newest,)).fetchone()[0]
        folded = db.execute("SELECT coalesce(sum(opens), 0) FROM usage_hourly").fetchone()[0]
    assert (kept, folded) == (56, 1), (kept, folded)
