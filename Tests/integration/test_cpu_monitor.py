"""The CPU monitor (SPEC §2): an app that burns a core in its slice is warned with ExpireTask,
then throttled (or frozen) through the systemd user manager, and released after the slice; the
CPU the agent measured agrees with what the app measured itself; processing that requires
external power is left alone while on AC; an app in use (here by `ReportUsage`) is not watched,
what was done to it is lifted when it comes into use, and it is watched afresh once left.

The user manager is python-dbusmock's `systemd` template on the session bus, with the methods
the template lacks added (TESTBED.md). The burners' units come from their fake cgroups, so their
identities are verified and the units known. The limit is 20 % rather than 80 %, so that a
busy two-core machine cannot keep a burner (one thread spinning) under the limit by starving it."""

import os
import time

import pytest

import conditions_helpers as ch
import tasks_helpers as th
from tasks_helpers import UINT64_MAX, later, unit_cgroup, world  # noqa: F401 - the fixture

BURNER_UNIT = "app-gnome-org.example.Burner-42.scope"
EXEMPT_UNIT = "app-gnome-org.example.Exempt-43.scope"
EDITOR_UNIT = "app-gnome-org.example.Editor-44.scope"

# The end of the `cpu-released` entry of an enforcement lifted because the app came into use.
RELEASED_FOR_USE = ("the app is in use now: the user opened it, or it came to the foreground, "
                    "and the CPU limit is only for background work")


def cpu_config(action="throttle", processing="20s"):
    return (f"[slices]\nprocessing = {processing}\nexpiration_warning = 2s\n"
            f"[cpu]\nwindow = 4s\nsample_interval = 1s\nlimit = 20%\naction = {action}\n")


def start_burner(world, unit, app_id, usage="background", **options):
    """A verified app in `unit` that burns a core from RunTask on, launched with SimulateLaunch;
    it reports `usage` (`ReportUsage`) before it is launched. Started by the test after the
    agent, its registration counts as the user opening it, so a burner in the background (the
    default) says so; the monitor leaves an app in use alone."""
    app = world.app(app_id, cgroup=unit_cgroup(unit))
    identifier = f"{app_id}.work"
    assert app.register([identifier]) == app_id
    if usage is not None:
        app.scheduler("ReportUsage", "s", (usage,))
    app.configure(burn=True)  # and it ignores ExpireTask: it keeps burning until told to stop
    app.submit(identifier, "processing", earliest_begin=later(3600), **options)
    world.agent.simulate_launch(app_id, identifier)
    return app, app.wait_run_task(identifier, timeout=5)


def unit_properties(call):
    """(unit, runtime, [(name, type, value)]) of one recorded SetUnitProperties call."""
    unit, runtime, props = call[1]
    out = []
    for i in range(props.n_children()):
        entry = props.get_child_value(i)
        value = entry.get_child_value(1).get_variant()
        out.append((entry.get_child_value(0).get_string(), value.get_type_string(), value.unpack()))
    return unit.unpack(), runtime.unpack(), out


def assert_cpu_agrees(entry, completed):
    agent_cpu, own_cpu = entry.get("cpu_seconds"), completed["cpu_self"]
    assert agent_cpu is not None, f"no cpu_seconds in {entry}"
    assert own_cpu > 1, f"the burner measured only {own_cpu:.2f}s of CPU: {completed}"
    assert abs(agent_cpu - own_cpu) <= 0.10 * own_cpu, \
        f"the agent measured {agent_cpu:.3f}s of CPU in the slice, the app itself {own_cpu:.3f}s (more than 10 % apart)"


def test_a_burner_is_warned_then_throttled_and_released(world):
    systemd = world.start_systemd_mock(units=[BURNER_UNIT])
    agent = world.start_agent(config=cpu_config("throttle"))
    app, run = start_burner(world, BURNER_UNIT, "org.example.Burner")
    assert run["seconds"] == 20

    throttled = agent.wait_history("cpu-throttled", app_id="org.example.Burner", timeout=16)
    warned = agent.events("cpu-warned", app_id="org.example.Burner")
    assert warned and warned[0]["time"] <= throttled["time"], agent.history()
    expires = app.events_of("ExpireTask")
    assert expires and expires[0]["task_id"] == run["task_id"], expires
    assert expires[0]["time"] <= throttled["time"], "ExpireTask must warn before the throttle"

    calls = systemd.calls("SetUnitProperties")
    assert [unit_properties(c) for c in calls] == [(BURNER_UNIT, True, [("CPUQuotaPerSecUSec", "t", 100000)])], calls
    assert systemd.calls("FreezeUnit") == []

    completed = app.complete(run["task_id"], True, "no-data")
    assert completed["error"] is None, completed
    entry = agent.wait_history("completed", task_id=run["task_id"], timeout=5)
    # After the slice, the quota is lifted.
    th.wait_until(lambda: len(systemd.calls("SetUnitProperties")) >= 2, 5, "the throttle is released")
    released = [unit_properties(c) for c in systemd.calls("SetUnitProperties")][1:]
    assert released == [(BURNER_UNIT, True, [("CPUQuotaPerSecUSec", "t", UINT64_MAX)])], released
    agent.wait_history("cpu-released", app_id="org.example.Burner", timeout=3)
    assert agent.app_record("org.example.Burner")["violations"] >= 1
    assert_cpu_agrees(entry, completed)
    # Explain names what the app did: it used too much CPU. It completed its task: it did not
    # overrun (the words said it had).
    app.submit("org.example.Burner.work", "processing")
    reasons = agent.explain("org.example.Burner", "org.example.Burner.work")["reasons"]
    penalty = [words for words in reasons if "in the last 7 days" in words]
    assert penalty and "org.example.Burner used too much CPU" in penalty[0] and "overran" not in penalty[0], reasons


def test_freeze_action_freezes_then_thaws_the_unit(world):
    systemd = world.start_systemd_mock(units=[BURNER_UNIT])
    agent = world.start_agent(config=cpu_config("freeze"))
    app, run = start_burner(world, BURNER_UNIT, "org.example.Burner")
    agent.wait_history("cpu-frozen", app_id="org.example.Burner", timeout=16)
    assert agent.events("cpu-warned", app_id="org.example.Burner")
    freezes = systemd.calls("FreezeUnit")
    assert [[v.unpack() for v in c[1]] for c in freezes] == [[BURNER_UNIT]], freezes
    assert systemd.calls("SetUnitProperties") == []
    assert systemd.calls("ThawUnit") == []

    completed = app.complete(run["task_id"], True, "no-data")
    entry = agent.wait_history("completed", task_id=run["task_id"], timeout=5)
    th.wait_until(lambda: systemd.calls("ThawUnit"), 5, "the unit is thawed after the slice")
    thaws = systemd.calls("ThawUnit")
    assert [[v.unpack() for v in c[1]] for c in thaws] == [[BURNER_UNIT]], thaws
    assert_cpu_agrees(entry, completed)


@pytest.mark.parametrize("action", ["throttle", "freeze"])
def test_an_enforced_slice_that_runs_to_its_deadline_is_released(world, action):
    """A frozen app cannot call SetTaskCompleted, so its slice always runs to its deadline, and
    a throttled one may. The deadline's timer closes the slice, and the close cancelled that
    timer's task, in which the undo then ran: its systemd call failed at once (cancelled), the
    unit stayed frozen or throttled until the agent's next start."""
    systemd = world.start_systemd_mock(units=[BURNER_UNIT])
    agent = world.start_agent(config=cpu_config(action))
    app, run = start_burner(world, BURNER_UNIT, "org.example.Burner")
    agent.wait_history("cpu-throttled" if action == "throttle" else "cpu-frozen", app_id="org.example.Burner", timeout=16)
    agent.wait_history("expired", task_id=run["task_id"], timeout=25)
    if action == "throttle":
        th.wait_until(lambda: len(quotas(systemd)) >= 2, 5, "the quota is lifted at the deadline")
        assert quotas(systemd) == [(BURNER_UNIT, 100000), (BURNER_UNIT, UINT64_MAX)]
        undone = f"the CPU quota on {BURNER_UNIT} was lifted"
    else:
        th.wait_until(lambda: systemd.calls("ThawUnit"), 5, "the unit is thawed at the deadline")
        assert [[v.unpack() for v in c[1]] for c in systemd.calls("ThawUnit")] == [[BURNER_UNIT]]
        undone = f"{BURNER_UNIT} was thawed"
    released = agent.wait_history("cpu-released", app_id="org.example.Burner", timeout=3)
    assert released["detail"] == f"{undone} (slice ended)", released
    assert "Could not release CPU enforcement" not in agent.stderr(), agent.stderr_tail()


def test_a_freeze_systemd_has_not_answered_when_the_slice_ends_is_undone(world, tmp_path):
    """FreezeUnit answers only once the unit is frozen; this one takes 7 s, and the app completes
    its task meanwhile. The slice's close cut the wait short (the monitor's task cancelled), or,
    waited for, the agent's 5 s ran out first (`NoReply`): either way the freeze was taken as
    refused and its record forgotten, and nothing thawed the unit systemd froze all the same.
    Anything but a refusal is taken as done, and undone when the slice ends."""
    systemd = world.start_systemd_mock(units=[BURNER_UNIT])
    asked = tmp_path / "freeze-asked"
    systemd.mock("AddMethod", "sssss", ("org.freedesktop.systemd1.Manager", "FreezeUnit", "s", "",
                                        f"open({str(asked)!r}, 'w').close(); time.sleep(7)"))
    agent = world.start_agent(config=cpu_config("freeze"))
    app, run = start_burner(world, BURNER_UNIT, "org.example.Burner")
    th.wait_until(asked.exists, 16, "the agent asks the user manager for the freeze")
    completed = app.complete(run["task_id"], True, "no-data")
    assert completed["error"] is None, completed
    agent.wait_history("completed", task_id=run["task_id"], timeout=5)
    th.wait_until(lambda: systemd.calls("ThawUnit"), 15, "the unit is thawed once the freeze has come back")
    assert [[v.unpack() for v in c[1]] for c in systemd.calls("ThawUnit")] == [[BURNER_UNIT]]
    frozen = agent.wait_history("cpu-frozen", app_id="org.example.Burner", timeout=3)
    assert "the systemd user manager did not answer" in frozen["detail"], frozen
    released = agent.wait_history("cpu-released", app_id="org.example.Burner", timeout=3)
    assert released["detail"] == f"{BURNER_UNIT} was thawed (slice ended)", released


def test_a_freeze_on_its_way_when_the_agent_stops_is_undone_before_it_exits(world, tmp_path):
    """FreezeUnit takes 3 s, and the agent is stopped (SIGTERM) once it was asked. The stop ends
    the slice, and waits for the freeze to come back, then thaws the unit before the agent exits.
    (The stop did not wait: the slice had no freeze yet to undo, the agent exited, and the unit
    systemd froze stayed frozen until the agent's next start.)"""
    systemd = world.start_systemd_mock(units=[BURNER_UNIT])
    asked = tmp_path / "freeze-asked"
    systemd.mock("AddMethod", "sssss", ("org.freedesktop.systemd1.Manager", "FreezeUnit", "s", "",
                                        f"open({str(asked)!r}, 'w').close(); time.sleep(3)"))
    agent = world.start_agent(config=cpu_config("freeze"))
    start_burner(world, BURNER_UNIT, "org.example.Burner")
    th.wait_until(asked.exists, 16, "the agent asks the user manager for the freeze")
    agent.stop()
    assert agent.proc.popen.returncode == 0, agent.stderr_tail()
    thaws = systemd.calls("ThawUnit")
    assert [[v.unpack() for v in c[1]] for c in thaws] == [[BURNER_UNIT]], "the agent exited, and left the unit frozen"
    agent.restart()
    released = agent.wait_history("cpu-released", app_id="org.example.Burner", timeout=5)
    assert released["detail"] == f"{BURNER_UNIT} was thawed (slice ended)", released
    assert len(systemd.calls("ThawUnit")) == 1, "nothing left for the next start to undo"


def test_a_failed_thaw_is_tried_again_while_the_agent_runs(world):
    """The user manager refuses the first two ThawUnit (UnitBusy, as while a job on the unit
    runs). The thaw is tried again after 5 s, then 10 s, and the third succeeds without a
    restart of the agent. (It was tried again only at the next start: the unit stayed frozen.)"""
    systemd = world.start_systemd_mock(units=[BURNER_UNIT])
    busy = ("self.thaws = getattr(self, 'thaws', 0) + 1\n"
            "if self.thaws <= 2: raise dbus.exceptions.DBusException("
            "'Unit is busy', name='org.freedesktop.systemd1.UnitBusy')")
    systemd.mock("AddMethod", "sssss", ("org.freedesktop.systemd1.Manager", "ThawUnit", "s", "", busy))
    agent = world.start_agent(config=cpu_config("freeze"))
    app, run = start_burner(world, BURNER_UNIT, "org.example.Burner")
    agent.wait_history("cpu-frozen", app_id="org.example.Burner", timeout=16)
    pid = agent.proc.popen.pid
    app.complete(run["task_id"], True, "no-data")
    agent.wait_history("completed", task_id=run["task_id"], timeout=5)
    th.wait_until(lambda: systemd.calls("ThawUnit"), 5, "the unit is thawed after the slice")
    failed = agent.wait_history("cpu-released", app_id="org.example.Burner", timeout=3)
    assert failed["detail"].startswith("could not undo the CPU enforcement"), failed
    assert "tries again within 5 s" in failed["detail"], failed
    th.wait_until(lambda: len(systemd.calls("ThawUnit")) >= 3, 25, "the thaw is tried until it succeeds")
    stamps = [stamp for stamp, _ in systemd.calls("ThawUnit")]
    assert 4 <= stamps[1] - stamps[0] <= 7 and 9 <= stamps[2] - stamps[1] <= 12, stamps
    th.wait_until(lambda: len(agent.events("cpu-released", app_id="org.example.Burner")) >= 2, 3, "the thaw is recorded")
    released = agent.events("cpu-released", app_id="org.example.Burner")
    assert len(released) == 2, "a retry that fails is not recorded again"
    assert released[1]["detail"] == f"{BURNER_UNIT} was thawed (slice ended)", released
    assert agent.proc.popen.pid == pid and agent.proc.popen.poll() is None, "no restart"
    # Nothing is left to try: no further ThawUnit.
    time.sleep(6)
    assert len(systemd.calls("ThawUnit")) == 3


def test_a_thaw_of_a_unit_no_longer_active_is_not_tried_again(world):
    """The frozen app's process is killed (SIGKILL, the OOM killer) and its unit stays loaded
    as failed: the user manager answers every ThawUnit with UnitInactive. Nothing is left to
    thaw, so it is not tried again, neither while the agent runs nor at its next start. (It was
    tried every 5 minutes for good, and again at every start.)"""
    systemd = world.start_systemd_mock(units=[BURNER_UNIT])
    inactive = ("raise dbus.exceptions.DBusException("
                "'Unit is not active', name='org.freedesktop.systemd1.UnitInactive')")
    systemd.mock("AddMethod", "sssss", ("org.freedesktop.systemd1.Manager", "ThawUnit", "s", "", inactive))
    agent = world.start_agent(config=cpu_config("freeze"))
    app, run = start_burner(world, BURNER_UNIT, "org.example.Burner")
    agent.wait_history("cpu-frozen", app_id="org.example.Burner", timeout=16)
    app.complete(run["task_id"], True, "no-data")
    agent.wait_history("completed", task_id=run["task_id"], timeout=5)
    th.wait_until(lambda: systemd.calls("ThawUnit"), 5, "the thaw is tried after the slice")
    released = agent.wait_history("cpu-released", app_id="org.example.Burner", timeout=3)
    assert released["detail"] == (
        f"{BURNER_UNIT} is no longer active (its processes have ended); nothing to thaw (slice ended)"), released
    time.sleep(6)
    assert len(systemd.calls("ThawUnit")) == 1, "not tried again after 5 s"

    agent.stop()
    agent.restart()
    time.sleep(2)
    assert len(systemd.calls("ThawUnit")) == 1, "nothing left for the next start to undo"
    assert len(agent.events("cpu-released", app_id="org.example.Burner")) == 1, agent.history()


def test_without_the_cpu_controller_a_throttle_is_not_pretended(world):
    """systemd before 252 delegates only pids and memory to user@.service: a CPUQuota on a user
    unit is accepted and does nothing. With the slice above the burner's unit lacking the cpu
    controller, the agent does not ask for the quota and records what happened: observed, and
    why, with what the user can do about it."""
    slice_dir = world.cgroup_root / "user.slice/user-1000.slice/user@1000.service/app.slice"
    slice_dir.mkdir(parents=True)
    (slice_dir / "cgroup.controllers").write_text("memory pids\n")
    systemd = world.start_systemd_mock(units=[BURNER_UNIT])
    agent = world.start_agent(config=cpu_config("throttle"))
    app, run = start_burner(world, BURNER_UNIT, "org.example.Burner")
    observed = agent.wait_history("cpu-observed", app_id="org.example.Burner", timeout=16)
    assert "the cpu controller is not delegated" in observed["detail"], observed
    assert "action = freeze" in observed["detail"], observed
    assert agent.events("cpu-warned", app_id="org.example.Burner")
    assert agent.events("cpu-throttled", app_id="org.example.Burner") == []
    assert systemd.calls("SetUnitProperties") == []
    app.complete(run["task_id"], True, "no-data")
    agent.wait_history("completed", task_id=run["task_id"], timeout=5)
    assert systemd.calls("SetUnitProperties") == [], "nothing to lift"
    assert agent.events("cpu-released", app_id="org.example.Burner") == []


def test_processing_on_external_power_is_exempt_while_on_ac(world):
    systemd = world.start_systemd_mock(units=[BURNER_UNIT, EXEMPT_UNIT])
    agent = world.start_agent(config=cpu_config("throttle"))
    # The udev source reports soon after the agent takes its name, not necessarily before.
    th.wait_until(lambda: agent.status()["conditions"].get("on_battery") is False, 5, "the agent to see AC power")
    # Both burn at the same time; only the one without the exemption is warned.
    exempt, exempt_run = start_burner(world, EXEMPT_UNIT, "org.example.Exempt", requires_external_power=True)
    burner, burner_run = start_burner(world, BURNER_UNIT, "org.example.Burner")

    agent.wait_history("cpu-warned", app_id="org.example.Burner", timeout=12)
    agent.wait_history("cpu-throttled", app_id="org.example.Burner", timeout=12)
    monitored = {"cpu-warned", "cpu-throttled", "cpu-frozen", "cpu-stopped", "cpu-observed"}
    assert [e for e in agent.events(app_id="org.example.Exempt") if e["event"] in monitored] == []
    assert exempt.events_of("ExpireTask") == []
    units = [unit_properties(c)[0] for c in systemd.calls("SetUnitProperties")]
    assert EXEMPT_UNIT not in units and BURNER_UNIT in units, units

    exempt_done = exempt.complete(exempt_run["task_id"], True, "no-data")
    burner.complete(burner_run["task_id"], True, "no-data")
    agent.wait_history("completed", task_id=exempt_run["task_id"], timeout=5)
    assert agent.app_record("org.example.Exempt")["violations"] == 0
    assert exempt_done["cpu_self"] > 1, exempt_done


def test_an_exempt_slice_is_watched_once_the_charger_goes(tmp_path):
    """External-power processing is exempt from the CPU monitor only while on AC (SPEC §2). The
    charger unplugged during such a slice that `SimulateLaunch` started (which ignores the rules;
    one the rules started ends then, `conditions-lost`): from then on the app is watched, warned
    and throttled like any other. (The exemption was decided once, at the slice's start.)"""
    with th.open_world(tmp_path, power="battery") as world:
        systemd = world.start_systemd_mock(units=[EXEMPT_UNIT])
        ch.set_charger(world.testbed, world.ac, world.bat, plugged=True)
        agent = world.start_agent(config=cpu_config("throttle"))
        th.wait_until(lambda: agent.status()["conditions"].get("on_battery") is False, 5, "the agent to see AC power")
        exempt, run = start_burner(world, EXEMPT_UNIT, "org.example.Exempt", requires_external_power=True)
        time.sleep(3)  # a window of the monitor and more: nothing, while on AC
        assert [e for e in agent.events(app_id="org.example.Exempt") if e["event"].startswith("cpu-")] == []

        ch.set_charger(world.testbed, world.ac, world.bat, plugged=False)
        th.wait_until(lambda: agent.status()["conditions"].get("on_battery") is True, 5, "the agent to see battery power")
        agent.wait_history("cpu-warned", app_id="org.example.Exempt", timeout=12)
        agent.wait_history("cpu-throttled", app_id="org.example.Exempt", timeout=12)
        units = [unit_properties(c)[0] for c in systemd.calls("SetUnitProperties")]
        assert EXEMPT_UNIT in units, units
        assert "CPU monitor on: the charger went" in agent.stderr()
        exempt.complete(run["task_id"], True, "no-data")


def test_an_exempt_slice_is_exempt_again_when_the_charger_comes_back(tmp_path):
    """The charger goes during external-power processing `SimulateLaunch` started, which runs on
    without it: it is watched, warned and throttled.
    The charger comes back during the same slice: the CPU monitor is off for it again (SPEC §2:
    off for it while on AC), and the throttle it applied on battery is lifted at once, with a
    `cpu-released` entry saying why; the slice burns on, on AC, with no further warning or
    throttle. The violation counted on battery stays counted. (The exemption, once ended, was
    never restored: the burn on AC was warned and throttled again.)"""
    with th.open_world(tmp_path, power="battery") as world:
        systemd = world.start_systemd_mock(units=[EXEMPT_UNIT])
        ch.set_charger(world.testbed, world.ac, world.bat, plugged=True)
        agent = world.start_agent(config=cpu_config("throttle", processing="60s"))
        th.wait_until(lambda: agent.status()["conditions"].get("on_battery") is False, 5, "the agent to see AC power")
        exempt, run = start_burner(world, EXEMPT_UNIT, "org.example.Exempt", requires_external_power=True)

        ch.set_charger(world.testbed, world.ac, world.bat, plugged=False)
        th.wait_until(lambda: agent.status()["conditions"].get("on_battery") is True, 5, "the agent to see battery power")
        agent.wait_history("cpu-throttled", app_id="org.example.Exempt", timeout=12)
        assert quotas(systemd) == [(EXEMPT_UNIT, 100000)]
        assert len(exempt.events_of("ExpireTask")) == 1

        ch.set_charger(world.testbed, world.ac, world.bat, plugged=True)
        th.wait_until(lambda: agent.status()["conditions"].get("on_battery") is False, 5, "the agent to see AC power again")
        th.wait_until(lambda: len(quotas(systemd)) >= 2, 5, "the throttle is lifted when the charger comes back")
        assert quotas(systemd) == [(EXEMPT_UNIT, 100000), (EXEMPT_UNIT, UINT64_MAX)]
        released = agent.wait_history("cpu-released", app_id="org.example.Exempt", timeout=3)
        assert released["detail"] == (
            f"the CPU quota on {EXEMPT_UNIT} was lifted (the charger is back: processing that requires external "
            "power is not held to the CPU limit while on AC)"), released
        time.sleep(6)  # a window of the monitor and its warning's grace, burning on AC
        assert [e["event"] for e in agent.events(task_id=run["task_id"])] == [
            "delivered", "cpu-warned", "cpu-throttled"], agent.events(task_id=run["task_id"])
        assert len(exempt.events_of("ExpireTask")) == 1
        assert len(quotas(systemd)) == 2
        assert "CPU monitor off: the charger is back" in agent.stderr()
        assert agent.app_record("org.example.Exempt")["violations"] == 1
        exempt.complete(run["task_id"], True, "no-data")
        agent.wait_history("completed", task_id=run["task_id"], timeout=5)
        assert len(quotas(systemd)) == 2, "nothing left to lift at the slice's end"


def quotas(systemd):
    """The CPU quotas the agent set, in order, as (unit, CPUQuotaPerSecUSec)."""
    out = []
    for call in systemd.calls("SetUnitProperties"):
        unit, runtime, props = unit_properties(call)
        assert runtime and [(name, kind) for name, kind, _ in props] == [("CPUQuotaPerSecUSec", "t")], props
        out.append((unit, props[0][2]))
    return out


def cpu_events(agent, app_id):
    return [e for e in agent.events(app_id=app_id) if e["event"].startswith("cpu-")]


# The agent tracks which apps are in use with either refresh strategy (the refresh planner's,
# planner=True, and `[refresh] strategy = every-window`, the tests' default).

@pytest.mark.parametrize("planner", [True, False], ids=["predicted", "every-window"])
def test_an_app_in_the_foreground_is_not_held_to_the_cpu_limit(world, planner):
    """The CPU limit is for background work: an app that burns a core in its slice while it says
    it is in the foreground is neither warned nor throttled, while a burner in the background,
    launched after it, is both. Left (`ReportUsage` background), it is watched from then on:
    warned, and throttled, from a new window, since the CPU it used in the foreground does not
    count. The same without the refresh planner: use is tracked for the monitor all the same."""
    systemd = world.start_systemd_mock(units=[EDITOR_UNIT, BURNER_UNIT])
    agent = world.start_agent(config=cpu_config("throttle", processing="60s"), planner=planner)
    editor, editor_run = start_burner(world, EDITOR_UNIT, "org.example.Editor", usage="foreground")
    assert "org.example.Editor" in agent.status().get("in_use", []), agent.status()
    burner, burner_run = start_burner(world, BURNER_UNIT, "org.example.Burner")

    # The background burner, launched second, is warned and throttled: the editor burned at
    # least as long, in the foreground, and the monitor left it alone.
    agent.wait_history("cpu-throttled", app_id="org.example.Burner", timeout=16)
    assert cpu_events(agent, "org.example.Editor") == [], agent.history()
    assert editor.events_of("ExpireTask") == []
    assert [unit for unit, _ in quotas(systemd)] == [BURNER_UNIT], quotas(systemd)
    assert agent.app_record("org.example.Editor")["violations"] == 0

    left = time.time()
    editor.scheduler("ReportUsage", "s", ("background",))
    warned = agent.wait_history("cpu-warned", app_id="org.example.Editor", timeout=16)
    # A new window from the leave, judged once half of it (2 s) is covered: the foreground
    # burn before it would have had the editor warned at the first sample.
    assert warned["time"] >= left + 1.9, (left, warned)
    agent.wait_history("cpu-throttled", app_id="org.example.Editor", timeout=16)
    assert (EDITOR_UNIT, 100000) in quotas(systemd), quotas(systemd)
    assert "CPU monitor on afresh: the user left the app during its slice" in agent.stderr()

    for app, run in ((editor, editor_run), (burner, burner_run)):
        app.complete(run["task_id"], True, "no-data")
        agent.wait_history("completed", task_id=run["task_id"], timeout=5)


def test_a_throttled_app_is_released_at_once_when_it_comes_to_the_foreground(world):
    """A burner throttled in its slice comes to the foreground: the user is at it now, and the
    quota is lifted at once, not at the slice's end, with a `cpu-released` entry saying why. The
    slice goes on; back in the background, the app is watched from a new window, warned and
    throttled again, and released at the slice's end. The second throttle of the same slice is
    no second violation, and the lift none at all."""
    systemd = world.start_systemd_mock(units=[BURNER_UNIT])
    agent = world.start_agent(config=cpu_config("throttle", processing="60s"), planner=True)
    app, run = start_burner(world, BURNER_UNIT, "org.example.Burner")
    agent.wait_history("cpu-throttled", app_id="org.example.Burner", timeout=16)
    assert quotas(systemd) == [(BURNER_UNIT, 100000)]

    app.scheduler("ReportUsage", "s", ("foreground",))
    th.wait_until(lambda: len(quotas(systemd)) >= 2, 5, "the quota is lifted when the app comes to the foreground")
    assert quotas(systemd) == [(BURNER_UNIT, 100000), (BURNER_UNIT, UINT64_MAX)]
    released = agent.wait_history("cpu-released", app_id="org.example.Burner", timeout=3)
    assert released["detail"] == f"the CPU quota on {BURNER_UNIT} was lifted ({RELEASED_FOR_USE})", released
    assert [e["event"] for e in agent.events(task_id=run["task_id"])] == ["delivered", "cpu-warned", "cpu-throttled"], \
        "the slice goes on"
    assert agent.app_record("org.example.Burner")["violations"] == 1

    left = time.time()
    app.scheduler("ReportUsage", "s", ("background",))
    th.wait_until(lambda: len(quotas(systemd)) >= 3, 16, "the app is throttled again in the background")
    assert quotas(systemd)[2] == (BURNER_UNIT, 100000), quotas(systemd)
    warned = agent.events("cpu-warned", app_id="org.example.Burner")
    assert len(warned) == 2 and warned[1]["time"] >= left + 1.9, (left, warned)
    assert len(app.events_of("ExpireTask")) == 2, "warned again before the second throttle"

    app.complete(run["task_id"], True, "no-data")
    agent.wait_history("completed", task_id=run["task_id"], timeout=5)
    th.wait_until(lambda: len(quotas(systemd)) >= 4, 5, "the second throttle is lifted at the slice's end")
    assert quotas(systemd)[3] == (BURNER_UNIT, UINT64_MAX), quotas(systemd)
    th.wait_until(lambda: len(agent.events("cpu-released", app_id="org.example.Burner")) >= 2, 3,
                  "the slice's end is recorded")
    assert agent.events("cpu-released", app_id="org.example.Burner")[1]["detail"] == (
        f"the CPU quota on {BURNER_UNIT} was lifted (slice ended)")
    assert agent.app_record("org.example.Burner")["violations"] == 1


# A CPUQuota=50% of the user's own on the burner's unit (a drop-in): CPUQuotaPerSecUSec 500000.
OWN_QUOTA = 500000
PUT_BACK = "set back to the 50 % it had before the throttle"


def test_a_quota_of_the_users_own_is_put_back_after_the_throttle(world):
    """The burner's unit has a CPU quota of the user's own (50 %). The throttle sets the agent's
    10 %, and the slice's end puts the 50 % back, saying so in `cpu-released`. (The undo set
    no quota at all, UINT64_MAX: the user's limit was gone until they set it again.)"""
    systemd = world.start_systemd_mock(units=[BURNER_UNIT], quotas={BURNER_UNIT: OWN_QUOTA})
    agent = world.start_agent(config=cpu_config("throttle"))
    app, run = start_burner(world, BURNER_UNIT, "org.example.Burner")
    agent.wait_history("cpu-throttled", app_id="org.example.Burner", timeout=16)
    assert systemd.quota(BURNER_UNIT) == 100000

    app.complete(run["task_id"], True, "no-data")
    agent.wait_history("completed", task_id=run["task_id"], timeout=5)
    th.wait_until(lambda: len(quotas(systemd)) >= 2, 5, "the quota is put back after the slice")
    assert quotas(systemd) == [(BURNER_UNIT, 100000), (BURNER_UNIT, OWN_QUOTA)]
    assert systemd.quota(BURNER_UNIT) == OWN_QUOTA
    released = agent.wait_history("cpu-released", app_id="org.example.Burner", timeout=3)
    assert released["detail"] == f"the CPU quota on {BURNER_UNIT} was {PUT_BACK} (slice ended)", released


@pytest.mark.parametrize("lift_fails", [False, True], ids=["lifted", "lift-failed"])
def test_a_quota_of_the_users_own_outlives_two_throttles_in_a_slice(world, tmp_path, lift_fails):
    """A burner whose unit has a 50 % quota of the user's own is throttled, comes to the
    foreground (the throttle lifted: the 50 % put back), and back in the background is
    throttled again: the slice's end puts the 50 % back again. When the lift in between fails
    (`UnitBusy` until the second throttle), the quota the second throttle finds is the agent's
    own 10 %; it must not be taken for the user's, or the unit would keep 10 % for good."""
    systemd = world.start_systemd_mock(units=[BURNER_UNIT], quotas={BURNER_UNIT: OWN_QUOTA})
    busy = tmp_path / "busy"
    if lift_fails:
        busy.touch()
        # Every quota but the throttle's is refused while `busy` exists.
        refuse = (f"if os.path.exists({str(busy)!r}) and args[2][0][1] != 100000: raise dbus.exceptions.DBusException("
                  "'Unit is busy', name='org.freedesktop.systemd1.UnitBusy')\n")
        systemd.mock("AddMethod", "sssss", ("org.freedesktop.systemd1.Manager", "SetUnitProperties", "sba(sv)", "",
                                            "import os\n" + refuse + th.SystemdMock.SET_QUOTA))
    agent = world.start_agent(config=cpu_config("throttle", processing="60s"), planner=True)
    app, run = start_burner(world, BURNER_UNIT, "org.example.Burner")
    agent.wait_history("cpu-throttled", app_id="org.example.Burner", timeout=16)

    app.scheduler("ReportUsage", "s", ("foreground",))
    released = agent.wait_history("cpu-released", app_id="org.example.Burner", timeout=5)
    if lift_fails:
        assert released["detail"].startswith("could not undo the CPU enforcement"), released
        assert systemd.quota(BURNER_UNIT) == 100000
    else:
        assert released["detail"] == f"the CPU quota on {BURNER_UNIT} was {PUT_BACK} ({RELEASED_FOR_USE})", released
        assert systemd.quota(BURNER_UNIT) == OWN_QUOTA

    app.scheduler("ReportUsage", "s", ("background",))
    th.wait_until(lambda: len(agent.events("cpu-throttled", app_id="org.example.Burner")) >= 2, 16,
                  "the app is throttled again in the background")
    assert systemd.quota(BURNER_UNIT) == 100000
    busy.unlink(missing_ok=True)

    app.complete(run["task_id"], True, "no-data")
    agent.wait_history("completed", task_id=run["task_id"], timeout=5)
    th.wait_until(lambda: systemd.quota(BURNER_UNIT) != 100000, 5, "the second throttle is undone at the slice's end")
    assert systemd.quota(BURNER_UNIT) == OWN_QUOTA, quotas(systemd)
    assert quotas(systemd)[-1] == (BURNER_UNIT, OWN_QUOTA), quotas(systemd)


def test_a_throttle_whose_quota_before_cannot_be_read_is_done_and_lifted(world):
    """The unit's quota cannot be read (here: the mock unit has none on its type's interface).
    The burner is throttled all the same, the agent logs that the user's own quota, if any,
    will not be put back, and the slice's end sets no quota, as before the quota was read."""
    systemd = world.start_systemd_mock(units=[BURNER_UNIT], quotas={BURNER_UNIT: None})
    agent = world.start_agent(config=cpu_config("throttle"))
    app, run = start_burner(world, BURNER_UNIT, "org.example.Burner")
    agent.wait_history("cpu-throttled", app_id="org.example.Burner", timeout=16)
    assert "Could not read the unit's CPU quota before throttling it" in agent.stderr(), agent.stderr_tail()
    app.complete(run["task_id"], True, "no-data")
    agent.wait_history("completed", task_id=run["task_id"], timeout=5)
    th.wait_until(lambda: len(quotas(systemd)) >= 2, 5, "the quota is lifted after the slice")
    assert quotas(systemd) == [(BURNER_UNIT, 100000), (BURNER_UNIT, UINT64_MAX)]
    released = agent.wait_history("cpu-released", app_id="org.example.Burner", timeout=3)
    assert released["detail"] == f"the CPU quota on {BURNER_UNIT} was lifted (slice ended)", released


SNAP_CGROUP = unit_cgroup("snap.sneaky.sneaky-2f8a6c1e-4b1d-4f7a-9c0e-1a2b3c4d5e6f.scope")


def test_a_bus_name_owned_by_another_app_does_not_bring_that_app_under_the_snaps_slice(world):
    """A snap's bus_name is taken as given (snapd decides which names it owns), so a snap may
    name one that another app owns: here org.example.Victim, owned by org.example.Burner,
    verified by its unit, which answers any RunTask and burns a core. The snap's slice, sent
    to that name, is tied to its owner, but the owner is attached to the slice (its pid
    measured, its unit throttled or frozen) only if it is the slice's app: verified as it, or
    unverified and owning a name under the app's id. (The owner was attached whoever it was:
    the other app's CPU was judged for the snap's work, and its unit throttled.)"""
    systemd = world.start_systemd_mock(units=[BURNER_UNIT])
    agent = world.start_agent(config=cpu_config("throttle"))
    victim = world.app("victim", cgroup=unit_cgroup(BURNER_UNIT))
    victim.configure(burn=True)
    victim.control("RequestName", "s", ("org.example.Victim",))
    snap = world.app("snap", cgroup=SNAP_CGROUP)
    identifier = "snap.sneaky.work"
    assert snap.register([identifier], bus_name="org.example.Victim", background_only=True) == "snap.sneaky"
    snap.submit(identifier, "processing", earliest_begin=later(3600))
    snap.quit()
    th.wait_until(lambda: agent.app_record("snap.sneaky")["connected"] is False, 5, "the snap is gone")
    agent.simulate_launch("snap.sneaky", identifier)
    run = victim.wait_run_task(identifier, timeout=5)
    delivered = agent.wait_history("delivered", task_id=run["task_id"], timeout=5)
    assert "started by D-Bus activation" in delivered["detail"], delivered
    time.sleep(9)  # a sample, the 4-s window, the 2-s warning and a sample: a watched burner is throttled by now
    assert cpu_events(agent, "snap.sneaky") == [], agent.history()
    assert systemd.calls("SetUnitProperties") == [] and systemd.calls("FreezeUnit") == []
    assert "is not the app's; the slice's CPU is not watched" in agent.stderr(), agent.stderr_tail()


def start_background_burner(world, app_id):
    """An unverified, background-only app with no systemd unit (a plain session process) that
    burns a core from RunTask on: the monitor's only way to hold it is SIGSTOP."""
    app = world.app(app_id)
    identifier = f"{app_id}.work"
    assert app.register([identifier], app_id=app_id, background_only=True) == app_id
    app.configure(burn=True)
    app.submit(identifier, "processing", earliest_begin=later(3600))
    world.agent.simulate_launch(app_id, identifier)
    return app, app.wait_run_task(identifier, timeout=5)


def process_state(pid):
    """The state letter of /proc/PID/status ("T" when stopped)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("State:"):
                return line.split()[1]
    raise AssertionError(f"no State in /proc/{pid}/status")


def test_a_process_stopped_by_the_monitor_is_continued_when_the_agent_stops(world):
    """A background-only burner without a unit is stopped with SIGSTOP until its slice ends.
    The agent is stopped (SIGTERM) during the slice: the slice ends then, so the process is
    continued, the task ends as interrupted, and the app is told to wrap up (ExpireTask)."""
    agent = world.start_agent(config=cpu_config("throttle"))
    app, run = start_background_burner(world, "org.example.Burner")
    stopped = agent.wait_history("cpu-stopped", app_id="org.example.Burner", timeout=16)
    assert "SIGSTOP" in stopped["detail"], stopped
    assert process_state(app.pid) == "T"  # (so it cannot be asked anything now)

    began = time.monotonic()
    agent.stop()
    code = agent.proc.popen.returncode
    stopped_in = time.monotonic() - began
    assert process_state(app.pid) != "T", "the agent stopped, and left its app stopped"
    # One ExpireTask came with the warning before the stop; the second says the agent stops.
    try:
        th.wait_until(lambda: len(app.events_of("ExpireTask")) >= 2, 5, "the app is told to wrap up")
    except AssertionError as error:
        raise AssertionError(f"{error}; the agent exited with {code} after {stopped_in:.2f} s; "
                             f"the app's events: {app.app_events()}\nagent stderr (tail):\n"
                             f"{agent.stderr_tail()}") from None
    assert [e["task_id"] for e in app.events_of("ExpireTask")] == [run["task_id"]] * 2
    agent.restart()
    released = agent.wait_history("cpu-released", app_id="org.example.Burner", timeout=5)
    assert f"process {app.pid} was continued with SIGCONT (slice ended)" == released["detail"], released
    ended = agent.wait_history("interrupted", task_id=run["task_id"], timeout=5)
    assert "the agent stopped during the slice" in ended["detail"], ended


def test_a_pid_gone_to_another_process_is_neither_watched_nor_stopped(world):
    """The bus names an app's process by the pid it had when it connected. If that process
    exits (its connection kept by a child it handed it to) and the number goes to another
    process of the user, the slice must not measure that stranger's CPU, nor SIGSTOP it. Here
    the app's fake /proc entry is pointed at a burner that is not the app, after the app
    registered, as a reused pid would be. (The monitor measured the burner, warned the app
    and stopped the burner.)"""
    agent = world.start_agent(config=cpu_config("throttle"))
    app_id = "org.example.Quiet"
    identifier = f"{app_id}.work"
    app = world.app(app_id)
    assert app.register([identifier], app_id=app_id, background_only=True) == app_id
    stranger = world.stack.push(ch.Proc([th.PYTHON, "-c", "while True: pass"], dict(os.environ), name="stranger"))
    stat = world.proc_root / str(app.pid) / "stat"
    stat.unlink()
    stat.symlink_to(f"/proc/{stranger.popen.pid}/stat")
    app.submit(identifier, "processing", earliest_begin=later(3600))
    agent.simulate_launch(app_id, identifier)
    app.wait_run_task(identifier, timeout=5)
    th.wait_until(lambda: "its slice's CPU is not watched" in agent.stderr(), 5, "the agent says why")
    time.sleep(8)  # the 4-s window, the 2-s warning and a sample: a watched burner is stopped by now
    assert agent.events("cpu-warned", app_id=app_id) == [], agent.history()
    assert agent.events("cpu-stopped", app_id=app_id) == [], agent.history()
    assert process_state(stranger.popen.pid) != "T"


def test_a_pid_that_goes_to_another_process_during_the_slice_is_not_stopped(world):
    """The same, but the app's pid goes to the stranger only once the slice is watched: the
    app's process exits, its connection kept by a child, and the number is reused. The start of
    the process attached to the slice is checked at every sample and before any signal, and a
    process that is no longer it is taken for the app's process gone. (The check was made only
    when the slice started: the monitor measured the stranger from then on, warned the app,
    and stopped with SIGSTOP whatever had the pid.)"""
    agent = world.start_agent(config=cpu_config("throttle"))
    app_id = "org.example.Quiet"
    identifier = f"{app_id}.work"
    app = world.app(app_id)
    assert app.register([identifier], app_id=app_id, background_only=True) == app_id
    app.submit(identifier, "processing", earliest_begin=later(3600))
    agent.simulate_launch(app_id, identifier)
    app.wait_run_task(identifier, timeout=5)
    stranger = world.stack.push(ch.Proc([th.PYTHON, "-c", "while True: pass"], dict(os.environ), name="stranger"))
    stat = world.proc_root / str(app.pid) / "stat"
    stat.unlink()
    stat.symlink_to(f"/proc/{stranger.popen.pid}/stat")
    time.sleep(9)  # a sample, the 4-s window, the 2-s warning and a sample: a watched burner is stopped by now
    assert agent.events("cpu-warned", app_id=app_id) == [], agent.history()
    assert agent.events("cpu-stopped", app_id=app_id) == [], agent.history()
    assert process_state(app.pid) != "T" and process_state(stranger.popen.pid) != "T"
    assert "its pid is another process's now; its CPU is no longer watched" in agent.stderr(), agent.stderr_tail()


def test_a_process_stopped_by_the_monitor_is_continued_after_the_agent_crashed(world):
    """The same, but the agent is killed (SIGKILL): nothing can be undone on the way out. The
    stop is stored when it is done, and the next start continues the process."""
    agent = world.start_agent(config=cpu_config("throttle"))
    app, run = start_background_burner(world, "org.example.Burner")
    agent.wait_history("cpu-stopped", app_id="org.example.Burner", timeout=16)
    agent.sigkill()
    assert process_state(app.pid) == "T"

    agent.restart()
    th.wait_until(lambda: process_state(app.pid) != "T", 5, "the new agent continues the process")
    released = agent.wait_history("cpu-released", app_id="org.example.Burner", timeout=5)
    assert released["detail"] == (
        f"process {app.pid} was continued with SIGCONT (left in place when the agent last stopped)"), released
    assert "Undoing CPU enforcement left in place" in agent.stderr()
    agent.wait_history("interrupted", task_id=run["task_id"], timeout=5)
    # Undone once: a second restart finds nothing left.
    agent.stop()
    agent.restart()
    assert len(agent.events("cpu-released", app_id="org.example.Burner")) == 1, agent.history()


def test_a_throttle_left_by_a_crashed_agent_is_lifted_at_the_next_start(world):
    """A unit throttled through the user manager when the agent is killed: the next start lifts
    the quota (SetUnitProperties with the quota unset)."""
    systemd = world.start_systemd_mock(units=[BURNER_UNIT])
    agent = world.start_agent(config=cpu_config("throttle"))
    start_burner(world, BURNER_UNIT, "org.example.Burner")
    agent.wait_history("cpu-throttled", app_id="org.example.Burner", timeout=16)
    agent.sigkill()
    assert len(systemd.calls("SetUnitProperties")) == 1

    agent.restart()
    th.wait_until(lambda: len(systemd.calls("SetUnitProperties")) >= 2, 5, "the quota is lifted")
    lifted = [unit_properties(c) for c in systemd.calls("SetUnitProperties")][1:]
    assert lifted == [(BURNER_UNIT, True, [("CPUQuotaPerSecUSec", "t", UINT64_MAX)])], lifted
    released = agent.wait_history("cpu-released", app_id="org.example.Burner", timeout=5)
    assert released["detail"] == (
        f"the CPU quota on {BURNER_UNIT} was lifted (left in place when the agent last stopped)"), released


def test_a_quota_of_the_users_own_is_put_back_by_the_start_after_a_crash(world):
    """A unit with a 50 % quota of the user's own, throttled when the agent is killed: the next
    start puts the 50 % back, from the stored record, rather than set no quota."""
    systemd = world.start_systemd_mock(units=[BURNER_UNIT], quotas={BURNER_UNIT: OWN_QUOTA})
    agent = world.start_agent(config=cpu_config("throttle"))
    start_burner(world, BURNER_UNIT, "org.example.Burner")
    agent.wait_history("cpu-throttled", app_id="org.example.Burner", timeout=16)
    agent.sigkill()
    assert quotas(systemd) == [(BURNER_UNIT, 100000)]

    agent.restart()
    th.wait_until(lambda: len(quotas(systemd)) >= 2, 5, "the quota is put back")
    assert quotas(systemd) == [(BURNER_UNIT, 100000), (BURNER_UNIT, OWN_QUOTA)]
    assert systemd.quota(BURNER_UNIT) == OWN_QUOTA
    released = agent.wait_history("cpu-released", app_id="org.example.Burner", timeout=5)
    assert released["detail"] == (
        f"the CPU quota on {BURNER_UNIT} was {PUT_BACK} (left in place when the agent last stopped)"), released


def test_a_stop_the_agent_cannot_record_is_not_done(world):
    """Enforcement is stored before it is done, so that the next agent can undo it. On a full
    disk it cannot be stored, and then it is not done: a process stopped with SIGSTOP by an
    agent that then crashed would stay stopped for good. (It was stopped first, and a failed
    write only logged.)"""
    from test_recovery import TmpfsDisk, simulated_full_disk
    disk = simulated_full_disk(world)
    if not isinstance(disk, TmpfsDisk):
        pytest.skip("needs a tmpfs to fill")
    agent = world.start_agent(config=cpu_config("throttle"))
    app, run = start_background_burner(world, "org.example.Burner")
    disk.fill(agent)
    th.wait_until(lambda: "CPU limit enforced" in agent.stderr(), 16, "the monitor acts")
    for _ in range(10):
        assert process_state(app.pid) != "T", "stopped, with nothing stored to undo it"
        time.sleep(0.1)
    assert "Could not store the CPU enforcement, so it is not done" in agent.stderr(), agent.stderr_tail()
    disk.free(agent)
    app.complete(run["task_id"], True, "no-data")
    agent.wait_history("completed", task_id=run["task_id"], timeout=5)
    assert agent.events("cpu-stopped") == []
