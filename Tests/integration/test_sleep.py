"""Sleep (SPEC §2): on logind's PrepareForSleep(true) the agent expires running slices before it
releases its delay inhibitor, and starts nothing until PrepareForSleep(false)."""

import time

from gi.repository import GLib

import conditions_helpers as ch
from tasks_helpers import later, wait_until, world  # noqa: F401 - the fixture


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
    expired = app.wait_event("ExpireTask", lambda e: e["task_id"] == run["task_id"], timeout=5)
    assert expired["time"] >= run["time"], expired
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


def sleep_interrupted(world, lose):
    """PrepareForSleep(true) with a refresh waiting, then `lose(logind)` takes away any word of
    the resume: the agent must stop waiting for it and run the refresh. Returns the agent."""
    logind = world.start_logind()
    agent = world.start_agent()
    app_id = "org.example.Sleeper"
    identifier = f"{app_id}.refresh"
    app = world.registered_app(app_id, [identifier])
    prepare_for_sleep(logind, True)
    app.submit(identifier, "refresh")
    wait_until(lambda: "sleeping" in agent.explain(app_id, identifier)["blocking"], 5, "Explain names sleeping")

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
