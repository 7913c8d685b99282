"""Sleep (SPEC §2): on logind's PrepareForSleep(true) the agent expires running slices before it
releases its delay inhibitor, and starts nothing until PrepareForSleep(false)."""

import os
import signal
import time

from gi.repository import GLib

import conditions_helpers as ch
import tasks_helpers as th
from tasks_helpers import laptop, later, wait_until, world  # noqa: F401 - the fixtures


def conditions(agent):
    """The agent's org.bgpolicy.Admin1.Conditions."""
    return th.call(agent.world.session.conn, "org.freedesktop.DBus.Properties", "Get", "ss",
                   (th.ADMIN, "Conditions"), "(v)")[0]


def prepare_for_sleep(logind, start):
    logind.mock("EmitSignal", "sssav", (ch.LOGIND_MANAGER, "PrepareForSleep", "b", [GLib.Variant("b", start)]))


def test_running_slices_expire_before_sleep_and_nothing_starts_until_resume(world):
    logind = world.start_logind()
    agent = world.start_agent()
    app_id = "org.example.Sleeper"
    first, second = f"{app_id}.first", f"{app_id}.second"
    app = world.registered_app(app_id, [first, second])
    app.submit(first, "refresh", earliest_begin=later(3600))
    agent.simulate_launch(app_id, first)
    run = app.wait_run_task(first, timeout=5)

    prepare_for_sleep(logind, True)
    expire = app.wait_event("ExpireTask", lambda e: e["task_id"] == run["task_id"], timeout=5)
    # Queued before the inhibitor is released and flushed to the bus: a call that wants no
    # answer. (It went from a task that ran after the release, as the machine went down.)
    assert expire["no_reply"] is True, expire
    entry = agent.wait_history("sleep-expired", task_id=run["task_id"], timeout=5)
    assert entry["result"] == "failed" and "sleep" in entry["detail"], entry
    assert agent.status()["running"] == []
    # Going to sleep is not the app's fault.
    assert agent.app_record(app_id)["violations"] == 0

    # Work that becomes runnable while asleep waits for the resume, and says why.
    app.submit(second, "refresh")
    wait_until(lambda: "sleeping" in agent.explain(app_id, second)["blocking"], 5, "Explain names sleeping")
    time.sleep(0.5)
    assert not app.events_of("RunTask")[1:], "nothing may start while the machine sleeps"

    prepare_for_sleep(logind, False)
    resumed = app.wait_run_task(second, timeout=5)
    assert resumed["identifier"] == second


def refresh_waiting_through_sleep(world, agent, logind):
    """An app registers, the machine prepares for sleep, and the app submits a refresh, which
    Explain says waits for the resume. Returns (app_id, identifier, app)."""
    app_id = "org.example.Sleeper"
    identifier = f"{app_id}.refresh"
    app = world.registered_app(app_id, [identifier])
    prepare_for_sleep(logind, True)
    app.submit(identifier, "refresh")
    wait_until(lambda: "sleeping" in agent.explain(app_id, identifier)["blocking"], 5, "Explain names sleeping")
    return app_id, identifier, app


def sleep_interrupted(world, lose):
    """PrepareForSleep(true) with a refresh waiting, then `lose(logind)` takes away any word of
    the resume: the agent must stop waiting for it and run the refresh. Returns the agent."""
    logind = world.start_logind()
    agent = world.start_agent()
    app_id, identifier, app = refresh_waiting_through_sleep(world, agent, logind)

    lose(logind)
    wait_until(lambda: "sleeping" not in agent.explain(app_id, identifier)["blocking"], 5,
               "the agent to stop waiting for a resume nobody can announce")
    run = app.wait_run_task(identifier, timeout=5)
    app.complete(run["task_id"])
    return agent


def test_logind_gone_while_preparing_for_sleep_does_not_hold_work_for_good(world):
    """PrepareForSleep(true), and then logind leaves the bus (it crashed, or was restarted during
    the suspend) before it says PrepareForSleep(false): nothing could ever tell the agent it
    resumed, and it held every slice and refused every background task ("the machine is going
    to sleep") until the agent restarted. Running code means the machine is awake: with
    logind gone the agent takes it as resumed, and logind back without preparing for sleep
    says the same."""
    agent = sleep_interrupted(world, lambda logind: logind.proc.kill())
    assert "logind left the bus (or stopped answering) while the machine was preparing for sleep" in agent.stderr(), \
        agent.stderr_tail()


def test_system_bus_gone_while_preparing_for_sleep_does_not_hold_work_for_good(world):
    """PrepareForSleep(true), and then the system bus goes (with it, any word from logind):
    the agent takes the sleep as resumed, as when logind alone leaves, and runs the work."""
    agent = sleep_interrupted(world, lambda logind: world.system_daemon.stop())
    # Said by whichever sees it first: logind's follower (its daemon gone with the bus), or the
    # conditions service once the bus is lost and the sources are ended.
    assert "while the machine was preparing for sleep, before logind said the machine resumed; taken as resumed" \
        in agent.stderr(), agent.stderr_tail()


def test_after_a_resume_work_waits_for_the_facts_read_again(laptop):
    """Suspended on AC, the laptop wakes on battery at 3 %: the kernel changed the supplies'
    attributes while it slept, with no uevent, and upowerd is slow to answer after the resume
    (stopped here). No work starts on the facts from before the sleep: the agent waits for its
    sources to read again (a few seconds at most), takes power from udev, which read the
    kernel's files again at once, while UPower has not answered, and so the refresh that
    waited through the sleep is held by the critical-battery rule. (Before, it ran within
    milliseconds of the resume, on AC by UPower's word from before the sleep.)"""
    world = laptop
    logind = world.start_logind()
    ch.set_charger(world.testbed, world.ac, world.bat, True)
    upowerd = world.start_upowerd()
    agent = world.start_agent()
    wait_until(lambda: "upower" in conditions(agent).get("sources", []) and conditions(agent).get("on_battery") is False,
               10, "the agent to hear from UPower that the charger is in")
    app_id, identifier, app = refresh_waiting_through_sleep(world, agent, logind)

    os.kill(upowerd.pid, signal.SIGSTOP)
    try:
        world.testbed.set_attribute(world.ac, "online", "0")
        world.testbed.set_attribute(world.bat, "status", "Discharging")
        world.testbed.set_attribute(world.bat, "energy_now", "1800000")  # 1.8 Wh of 60 Wh: 3 %
        prepare_for_sleep(logind, False)
        wait_until(lambda: conditions(agent).get("on_battery") is True, 5, "the agent to read the battery again")
        assert conditions(agent)["percentage"] < 4, conditions(agent)
        time.sleep(4)  # past the longest wait for UPower
        assert app.events_of("RunTask") == [], app.events_of("RunTask")
        assert "before the battery and power profile were read again" in agent.stderr(), agent.stderr_tail()
        blocking = agent.explain(app_id, identifier)["blocking"]
        assert blocking == ["critical-battery"], blocking
    finally:
        os.kill(upowerd.pid, signal.SIGCONT)


def test_after_a_resume_with_nothing_changed_work_starts_at_once(world):
    """The common resume: asleep on AC and awake on AC, the same power profile. Every battery
    and power-profile source answers its re-read though it finds what it knew, and the refresh
    that waited through the sleep starts as soon as they have. (Before, udev and
    power-profiles-daemon said nothing of facts that had not changed, so every resume held all
    work for the whole 3 s and logged that the sources had not read again.)"""
    logind = world.start_logind()
    world.start_upowerd()
    ch.start_power_profiles(world.stack, world.system, ch.system_env(world.system_address, world.testbed, world.tmp / "upower"),
                            legacy=False, active="balanced")
    agent = world.start_agent()
    wanted = {"udev", "upower", "power-profiles"}
    wait_until(lambda: wanted <= set(conditions(agent).get("sources", [])), 10,
               "the agent to hear from udev, UPower and power-profiles-daemon")
    _, identifier, app = refresh_waiting_through_sleep(world, agent, logind)

    resumed = time.monotonic()
    prepare_for_sleep(logind, False)
    app.wait_run_task(identifier, timeout=5)
    elapsed = time.monotonic() - resumed
    assert elapsed < 2, f"the refresh started {elapsed:.1f} s after the resume"
    assert "before the battery and power profile were read again" not in agent.stderr(), agent.stderr_tail()
    assert wanted <= set(conditions(agent)["sources"]), conditions(agent)


def test_background_tasks_under_way_expire_before_sleep(world):
    """A background task (BeginBackgroundTask, 30 s for work the user started) under way as the
    machine goes to sleep is told to wrap up, as a slice is, and closed as `sleep-expired`, no
    violation. It ran on after the resume with what was left of its time, the app never told
    that its work was cut off mid-way."""
    logind = world.start_logind()
    agent = world.start_agent()
    app_id = "org.example.Saver"
    app = world.registered_app(app_id, [f"{app_id}.refresh"])
    token, seconds = app.begin_background_task("save document")
    assert seconds == 30

    prepare_for_sleep(logind, True)
    expire = app.wait_event("ExpireTask", lambda e: e["task_id"] == token, timeout=5)
    assert expire["no_reply"] is True, expire
    entry = agent.wait_history("sleep-expired", task_id=token, timeout=5)
    assert entry["result"] == "failed" and "background task 'save document'" in entry["detail"], entry
    assert "not a violation" in entry["detail"], entry
    assert agent.app_record(app_id)["violations"] == 0
    # It is over: ending it now says so.
    message = th.expect_error("UnknownTask", app.end_background_task, token)
    assert "may have expired already" in message, message
    # Refused while the machine sleeps, and granted again after the resume.
    th.expect_error("Unavailable", app.begin_background_task, "save again")
    prepare_for_sleep(logind, False)
    wait_until(lambda: try_begin(app), 5, "BeginBackgroundTask granted after the resume")


def try_begin(app):
    try:
        app.begin_background_task("save again")
        return True
    except th.AgentError:
        return False
