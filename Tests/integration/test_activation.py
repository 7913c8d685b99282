"""Reaching an app that is not running: by D-Bus activation of the `bus_name` it registered,
on a private bus whose service directory the test writes; and failing clearly when it cannot.

The activated app is tasks_helpers.py run as `activated`: it registers with app_id and bus_name,
exports Client1, then takes its name, and completes what it is given; it logs its events as JSON
lines to a file the test reads."""

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import tasks_helpers as th
from tasks_helpers import PYTHON, expect_error, later, world  # noqa: F401

APP_ID = "org.example.Activated"
IDENTIFIER = "org.example.Activated.refresh"


@pytest.fixture
def activation_world(tmp_path):
    with th.open_world(tmp_path, activation=True) as world:
        yield world


def read_log(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def activated_command(world, log):
    return [PYTHON, th.__file__, "activated", "--app-id", APP_ID, "--bus-name", APP_ID, "--identifier", IDENTIFIER,
            "--log", log, "--proc-root", world.proc_root]


def make_activatable(world, app_id, command):
    """Writes the service file with which the bus starts `app_id` by running `command` (a list
    of strings)."""
    (world.service_dir / f"{app_id}.service").write_text(
        f"[D-BUS Service]\nName={app_id}\nExec={' '.join(command)}\n")


def activated_app_run_once(world, *exec_options):
    """The activated app made activatable (its service file runs it with `exec_options` added),
    an agent with 10-s refresh slices, and the app run once: it registers, asks for a refresh
    in an hour, and exits; the agent has seen it go. Returns the agent, the app's event log and
    that first run."""
    log = world.tmp / "activated.log"
    command = [str(part) for part in activated_command(world, log)]
    make_activatable(world, APP_ID, command + list(exec_options))
    agent = world.start_agent(config="[slices]\nrefresh = 10s\nexpiration_warning = 2s\n")
    first = th.ch.Proc([*command, "--submit"], dict(os.environ, DBUS_SESSION_BUS_ADDRESS=world.address),
                       name="first run")
    world.stack.push(first)
    assert first.popen.wait(timeout=20) == 0, f"{read_log(log)}\n{first.stderr()}"
    th.wait_until(lambda: (agent.app_record(APP_ID) or {}).get("connected") is False, 5, "the app is gone")
    return agent, log, first


def test_the_agent_starts_an_activatable_app_for_its_task(activation_world):
    world = activation_world
    # The app runs once: registers, asks for a refresh in an hour, and exits.
    agent, log, first = activated_app_run_once(world)
    record = agent.app_record(APP_ID)
    assert record["bus_name"] == APP_ID and record["pending"] == 1, record
    first_pid = first.pid

    agent.cli("simulate", "launch", APP_ID, IDENTIFIER, timeout=30)

    def completed():
        events = read_log(log)
        return [e for e in events if e["type"] == "Completed"] and events
    events = th.wait_until(completed, 15, "the activated app completes its task")
    started = [e for e in events if e["type"] == "Started" and e["pid"] != first_pid]
    assert len(started) == 1 and started[0]["starter"] == "session", events
    runs = [e for e in events if e["type"] == "RunTask"]
    assert len(runs) == 1 and runs[0]["identifier"] == IDENTIFIER and runs[0]["kind"] == "refresh", events
    done = [e for e in events if e["type"] == "Completed"][0]
    assert done["error"] is None and done["task_id"] == runs[0]["task_id"], done

    entry = agent.wait_history("completed", task_id=runs[0]["task_id"], timeout=5)
    assert (entry["app_id"], entry["identifier"], entry["result"]) == (APP_ID, IDENTIFIER, "new-data"), entry
    # The activated app exits after its task; nothing is delivered twice.
    th.wait_until(lambda: not world.session.has_owner(APP_ID), 10, "the activated app exits")
    time.sleep(0.5)
    assert len([e for e in read_log(log) if e["type"] == "RunTask"]) == 1
    assert [p for p in agent.list_pending() if p["app_id"] == APP_ID] == []


def test_an_app_that_is_gone_without_a_bus_name_is_unavailable(activation_world):
    world = activation_world
    agent = world.start_agent()
    app = world.registered_app("org.example.Closed", ["org.example.Closed.refresh"])
    app.submit("org.example.Closed.refresh", "refresh", earliest_begin=later(3600))
    app.quit()
    th.wait_until(lambda: agent.app_record("org.example.Closed")["connected"] is False, 5, "the app is gone")

    message = expect_error("Unavailable", agent.simulate_launch, "org.example.Closed", "org.example.Closed.refresh")
    assert "bus_name" in message or "not running" in message or "reach" in message, message
    cli = agent.cli("simulate", "launch", "org.example.Closed", "org.example.Closed.refresh", check=False)
    assert cli.returncode != 0 and cli.stderr.strip(), (cli.returncode, cli.stdout, cli.stderr)

    pending = [p for p in agent.list_pending() if p["app_id"] == "org.example.Closed"]
    assert [p["identifier"] for p in pending] == ["org.example.Closed.refresh"], pending
    agent.wait_history("delivery-failed", app_id="org.example.Closed", timeout=3)


def test_an_activatable_app_that_fails_to_start_stays_pending(activation_world):
    world = activation_world
    make_activatable(world, "org.example.Broken", ["/bin/false"])
    agent = world.start_agent()
    app = world.app("broken")
    app.register(["org.example.Broken.refresh"], app_id="org.example.Broken", bus_name="org.example.Broken")
    app.submit("org.example.Broken.refresh", "refresh", earliest_begin=later(3600))
    app.quit()
    th.wait_until(lambda: agent.app_record("org.example.Broken")["connected"] is False, 5, "the app is gone")

    message = expect_error("Unavailable", agent.simulate_launch, "org.example.Broken", "org.example.Broken.refresh")
    assert "org.example.Broken" in message, message
    pending = [p for p in agent.list_pending() if p["app_id"] == "org.example.Broken"]
    assert len(pending) == 1, pending
    assert pending[0]["delivery_attempts"] >= 1 and pending[0].get("last_attempt_error"), pending
    agent.wait_history("delivery-failed", app_id="org.example.Broken", timeout=3)


def test_failures_in_a_row_double_the_wait_and_registering_again_resets_it(activation_world):
    """An app that never starts: each failed delivery doubles the wait before the next try (5,
    then 10, then 20 minutes), so that it costs a few wake-ups a day, not one every 5 minutes
    for good; the app registering again starts the count afresh."""
    world = activation_world
    app_id, identifier = "org.example.Broken", "org.example.Broken.refresh"
    make_activatable(world, app_id, ["/bin/false"])
    agent = world.start_agent()
    app = world.app("broken")
    app.register([identifier], app_id=app_id, bus_name=app_id)
    app.submit(identifier, "refresh", earliest_begin=later(3600))
    app.quit()
    th.wait_until(lambda: agent.app_record(app_id)["connected"] is False, 5, "the app is gone")

    def retry_words():
        explanation = agent.explain(app_id, identifier)
        return [w for w in explanation["reasons"] if "last delivery to the app failed" in w]

    # Simulated launches ignore the wait, but each failure counts.
    for failures, minutes in [(1, 5), (2, 10), (3, 20)]:
        expect_error("Unavailable", agent.simulate_launch, app_id, identifier)
        words = retry_words()
        assert len(words) == 1 and f"retrying in {minutes} min" in words[0], (failures, words)
        assert (f"{failures} failures in a row" in words[0]) == (failures > 1), words

    again = world.app("broken again")
    again.register([identifier], app_id=app_id, bus_name=app_id)
    assert retry_words() == []
    again.quit()
    th.wait_until(lambda: agent.app_record(app_id)["connected"] is False, 5, "the app is gone again")
    expect_error("Unavailable", agent.simulate_launch, app_id, identifier)
    words = retry_words()
    assert len(words) == 1 and "retrying in 5 min" in words[0] and "in a row" not in words[0], words


def test_nothing_starts_at_the_agents_start_before_the_battery_is_known(tmp_path):
    """At 15 % and discharging, a refresh of an activatable app waits for the battery. The agent
    restarts: its first evaluation came before udev had said anything, and an unknown battery
    holds nothing back, so the bus started the app and the refresh ran. Now nothing launches
    until the battery and power profile are known (or a few seconds without them)."""
    with th.open_world(tmp_path, power="low-battery", activation=True) as world:
        log = world.tmp / "activated.log"
        command = [str(part) for part in activated_command(world, log)]
        make_activatable(world, APP_ID, command)
        # Windows every 10 s, open 2.5 s: the restarts below are timed to come as one opens.
        agent = world.start_agent(planner=True, config="[windows]\ngrid_on_battery = 10s\n[refresh]\nstrategy = every-window\n")
        app = world.app("first run")
        app.register([IDENTIFIER], app_id=APP_ID, bus_name=APP_ID)
        app.submit(IDENTIFIER, "refresh")
        app.quit()
        th.wait_until(lambda: agent.app_record(APP_ID)["connected"] is False, 5, "the app is gone")
        explanation = agent.explain(APP_ID, IDENTIFIER)
        assert "low-battery" in explanation["blocking"], explanation

        for _ in range(3):  # the race is the agent's first moments: try it a few times
            agent.stop()
            time.sleep(10 - time.time() % 10)  # a window opens
            agent.restart()
            time.sleep(2)
            assert agent.events("delivered", app_id=APP_ID) == [], agent.stderr_tail()
            assert read_log(log) == [], "the bus started the app"
            explanation = agent.explain(APP_ID, IDENTIFIER)
            assert explanation["state"] == "pending" and "low-battery" in explanation["blocking"], explanation


def test_apps_the_agent_starts_take_turns(activation_world):
    """Apps the bus must start for their slices start `[slices] concurrent_starts` at a time (2
    here), so that a window launching many does not start them all at once: four apps are
    launched together, and from each process's launch to its RunTask at most two are under way
    at any moment. The apps take their names only once the test has seen two launches wait
    their turn (the start gate), so the order holds however slow the machine. The two that
    waited say so in the history."""
    world = activation_world
    apps = [f"org.example.Slow{n}" for n in range(4)]
    logs = {app_id: world.tmp / f"{app_id}.log" for app_id in apps}
    gate = world.tmp / "start-gate"

    def command(app_id):
        return [str(part) for part in [
            PYTHON, th.__file__, "activated", "--app-id", app_id, "--bus-name", app_id,
            "--identifier", f"{app_id}.refresh", "--log", logs[app_id], "--proc-root", world.proc_root,
            "--start-gate", gate]]

    for app_id in apps:
        make_activatable(world, app_id, command(app_id))
    agent = world.start_agent(config="[slices]\nrefresh = 10s\nexpiration_warning = 2s\nconcurrent_starts = 2\n")
    for app_id in apps:
        first = th.ch.Proc([*command(app_id), "--submit"], dict(os.environ, DBUS_SESSION_BUS_ADDRESS=world.address),
                           name=f"first run of {app_id}")
        world.stack.push(first)
        assert first.popen.wait(timeout=20) == 0, f"{read_log(logs[app_id])}\n{first.stderr()}"
    for app_id in apps:
        th.wait_until(lambda: (agent.app_record(app_id) or {}).get("connected") is False, 5, f"{app_id} is gone")

    def waiting():
        return {app_id for app_id in apps for line in agent.stderr().splitlines()
                if "Launch waits for its turn" in line and f"app.id={app_id}" in line}

    with ThreadPoolExecutor(len(apps)) as pool:
        futures = [pool.submit(agent.cli, "simulate", "launch", app_id, f"{app_id}.refresh", timeout=60, check=False)
                   for app_id in apps]
        # Two starts under way, held at the gate; the other two launches wait their turn.
        th.wait_until(lambda: len(waiting()) == 2, 20, "two launches to wait their turn")
        waited_by_log = waiting()
        started = [a for a in apps if a not in waited_by_log]
        th.wait_until(lambda: all(e["type"] == "Launched" for a in started for e in read_log(logs[a])[-1:]), 20,
                      "the first two apps' processes to be up, at the gate")
        # Held a second more: the history names a wait for the turn of half a second or more.
        time.sleep(1.0)
        gate.touch()
        results = [f.result() for f in futures]
    assert [r.returncode for r in results] == [0] * len(apps), [(r.stdout, r.stderr) for r in results]

    spans = []
    for app_id in apps:
        events = read_log(logs[app_id])
        launched = [e["time"] for e in events if e["type"] == "Launched"]
        runs = [e["time"] for e in events if e["type"] == "RunTask"]
        assert len(launched) == 1 and len(runs) == 1, (app_id, events)
        spans.append((launched[0], runs[0]))
    # A start ends (-1) before one that begins at the same instant (+1).
    points = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    under_way, peak = 0, 0
    for _, step in points:
        under_way += step
        peak = max(peak, under_way)
    assert peak == 2, spans
    waited = [e for e in agent.events("delivered") if "waiting for other apps to start" in e.get("detail", "")]
    assert sorted(e["app_id"] for e in waited) == sorted(waited_by_log), (waited, spans)


def waits_its_turn(agent, app_id):
    """Waits until the agent says that its launch of `app_id` waits for its turn to start it."""
    th.wait_until(lambda: [line for line in agent.stderr().splitlines()
                           if "Launch waits for its turn" in line and f"app.id={app_id}" in line], 10,
                  f"{app_id}'s launch waits its turn")


def two_slow_apps_due_in_one_window(world):
    """Two D-Bus activatable apps that are slow to start, each run once to register and submit
    a refresh due at the same second (the tests' 1-s grid), then gone; an agent that starts
    one app at a time. Waits until the window starts one of them and the other's launch waits
    its turn. The app started first takes its name only when the test calls the returned
    `let_it_start`, so what the test changes before is changed during the other's wait, however
    slow the machine. Returns the agent, the two app ids, their event logs, what lists an app's
    launches, the app started first, the one waiting, and `let_it_start`."""
    apps = ["org.example.SlowMail", "org.example.SlowNotes"]
    logs = {app_id: world.tmp / f"{app_id}.log" for app_id in apps}
    gate = world.tmp / "start-gate"

    def command(app_id, *extra):
        return [str(part) for part in [
            PYTHON, th.__file__, "activated", "--app-id", app_id, "--bus-name", app_id,
            "--identifier", f"{app_id}.refresh", "--log", logs[app_id], "--proc-root", world.proc_root, *extra]]

    for app_id in apps:
        make_activatable(world, app_id, command(app_id, "--start-gate", gate))
    agent = world.start_agent(config="[slices]\nrefresh = 10s\nexpiration_warning = 2s\nconcurrent_starts = 1\n")
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=world.address)
    # Both requests lift at the same second, so one window takes both; time enough before it
    # for both first runs. The second is the test's: a first run that took over half a second
    # to reach its Submit put its request in the next second, and the next window.
    due = int(time.time()) + 15
    for app_id in apps:
        first = th.ch.Proc([*command(app_id, "--submit", "--due-at", due)], env, name=f"first run of {app_id}")
        world.stack.push(first)
        assert first.popen.wait(timeout=20) == 0, f"{read_log(logs[app_id])}\n{first.stderr()}"
        th.wait_until(lambda: (agent.app_record(app_id) or {}).get("connected") is False, 5, f"{app_id} is gone")
    assert time.time() < due - 1, "the first runs took too long for the test's window"

    def launched(app_id):
        return [e for e in read_log(logs[app_id]) if e["type"] == "Launched"]
    first_app = th.wait_until(lambda: next((a for a in apps if launched(a)), None), due - time.time() + 15,
                              "the window starts one of the apps")
    waiting_app = next(a for a in apps if a != first_app)
    waits_its_turn(agent, waiting_app)
    return agent, apps, logs, launched, first_app, waiting_app, gate.touch


def test_a_launch_waiting_its_turn_is_held_when_background_work_is_switched_off(activation_world):
    """With one start at a time, two apps not running are due in the same window, and each is
    slow to start. The user switches background work off while the second waits for the first:
    the first start goes on, the second is held (logged), its request stays pending, and nothing
    starts it. Switched back on, it runs in the next window. The first app's slice, switched off
    while its RunTask waited at the bus for the app to take its name, is closed then; the app,
    once it has answered, is told to stop (ExpireTask): sent to its name before, which had no
    owner yet, it was lost, and the app ran its task with no slice."""
    world = activation_world
    agent, apps, logs, launched, first_app, held_app, let_it_start = two_slow_apps_due_in_one_window(world)
    agent.set_global_enabled(False)
    let_it_start()
    th.wait_until(lambda: [line for line in agent.stderr().splitlines()
                           if "Launch held" in line and f"app.id={held_app}" in line], 10,
                  f"{held_app}'s launch is held after its wait")
    runs = th.wait_until(lambda: [e for e in read_log(logs[first_app]) if e["type"] == "RunTask"], 10,
                         f"{first_app}'s start goes on")
    task_id = runs[0]["task_id"]
    agent.wait_history("switched-off", task_id=task_id, timeout=5)
    th.wait_until(lambda: [e for e in read_log(logs[first_app]) if e["type"] == "ExpireTask" and e["task_id"] == task_id],
                  5, f"{first_app} is told to stop the task its slice, switched off, no longer holds")
    time.sleep(1.5)
    assert launched(held_app) == [], read_log(logs[held_app])
    assert [p["identifier"] for p in agent.list_pending() if p["app_id"] == held_app] == [f"{held_app}.refresh"]

    agent.set_global_enabled(True)
    run = th.wait_until(lambda: [e for e in read_log(logs[held_app]) if e["type"] == "RunTask"], 20,
                        f"{held_app} runs once switched back on")
    assert run[0]["identifier"] == f"{held_app}.refresh", run


def test_a_launch_waiting_its_turn_is_held_when_the_battery_falls_critical(tmp_path):
    """As above, on a laptop at 42 %: while the second app waits for the first to start, the
    battery falls to 3 % (critical: nothing new). The rules are asked again after the wait,
    so the second launch is held, its request pending. (Only the switches and sleep were
    checked again.)"""
    with th.open_world(tmp_path, power="battery", activation=True) as world:
        agent, apps, logs, launched, first_app, held_app, let_it_start = two_slow_apps_due_in_one_window(world)
        world.testbed.set_attribute(world.bat, "energy_now", "1800000")  # 3 % of 60 Wh
        world.testbed.uevent(world.bat, "change")
        # The agent knows before the wait ends (its Explain reads the facts its launches do).
        th.wait_until(lambda: "critical-battery" in agent.explain(held_app, f"{held_app}.refresh")["blocking"], 10,
                      "the agent sees the battery critical")
        let_it_start()
        th.wait_until(lambda: [line for line in agent.stderr().splitlines()
                               if "Launch held: critical-battery changed" in line and f"app.id={held_app}" in line], 10,
                      f"{held_app}'s launch is held after its wait")
        time.sleep(1.5)
        assert launched(held_app) == [], read_log(logs[held_app])
        assert [p["identifier"] for p in agent.list_pending() if p["app_id"] == held_app] == [f"{held_app}.refresh"]
        assert "critical-battery" in agent.explain(held_app, f"{held_app}.refresh")["blocking"]


def test_a_content_wake_waiting_its_turn_is_held_when_background_work_is_switched_off(activation_world):
    """With one start at a time, SlowMail's refresh starts it (slow to start: held until the
    test lets it). Meanwhile a content-available wake for SlowNotes, which is not running
    either, is notified: the next window's launch for it waits for SlowMail's turn. The user
    switches background work off during the wait: the wake is held (logged) and stays queued,
    and nothing starts SlowNotes. (Only requests were asked about again: the wake went out.)
    Switched back on, it is delivered."""
    world = activation_world
    mail, notes = "org.example.SlowMail", "org.example.SlowNotes"
    logs = {app_id: world.tmp / f"{app_id}.log" for app_id in (mail, notes)}
    gate = world.tmp / "start-gate"

    def command(app_id, *extra):
        return [str(part) for part in [
            PYTHON, th.__file__, "activated", "--app-id", app_id, "--bus-name", app_id,
            "--identifier", f"{app_id}.refresh", "--log", logs[app_id], "--proc-root", world.proc_root, *extra]]

    for app_id in (mail, notes):
        make_activatable(world, app_id, command(app_id, "--start-gate", gate))
    agent = world.start_agent(config="[slices]\nrefresh = 10s\nexpiration_warning = 2s\nconcurrent_starts = 1\n")
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=world.address)
    for app_id, extra in ((mail, ["--submit", "--due-in", 6]), (notes, ["--register-only"])):
        first = th.ch.Proc([*command(app_id, *extra)], env, name=f"first run of {app_id}")
        world.stack.push(first)
        assert first.popen.wait(timeout=20) == 0, f"{read_log(logs[app_id])}\n{first.stderr()}"
        th.wait_until(lambda: (agent.app_record(app_id) or {}).get("connected") is False, 5, f"{app_id} is gone")

    def events(app_id, kind):
        return [e for e in read_log(logs[app_id]) if e["type"] == kind]
    th.wait_until(lambda: events(mail, "Launched"), 20, "the window starts SlowMail")
    th.call(world.session.conn, th.SCHEDULER, "NotifyContentAvailable", "sa{sv}", (notes, {}), None, 10.0)
    # The next window (the tests' 1-s grid) decides the wake's launch, which waits for the turn
    # SlowMail holds until the test lets it start.
    waits_its_turn(agent, notes)
    agent.set_global_enabled(False)
    gate.touch()
    th.wait_until(lambda: [line for line in agent.stderr().splitlines()
                           if "Launch held" in line and f"app.id={notes}" in line and "content_available=held" in line],
                  10, "SlowNotes' wake to be held after its wait")
    th.wait_until(lambda: events(mail, "RunTask"), 10, "SlowMail's start goes on")
    time.sleep(1.5)
    assert events(notes, "Launched") == [], read_log(logs[notes])

    agent.set_global_enabled(True)
    run = th.wait_until(lambda: events(notes, "RunTask"), 20, "SlowNotes' wake delivered once switched back on")
    assert run[0]["kind"] == "content-available", run


def slow_notes_and_mail_each_with_a_refresh(world):
    """Notes and Mail, D-Bus activatable apps that are slow to start when the agent starts them:
    they take their names only when the test calls the returned `let_them_start`; each run once
    to register and submit a refresh, then gone; an agent that starts one app at a time
    (`concurrent_starts = 1`). Returns the agent, the two app ids (by "notes" and "mail"),
    their event logs, the command that runs an app (app id, start delay), the environment to
    run it in, and `let_them_start`."""
    apps = {"notes": "org.example.SlowNotes", "mail": "org.example.SlowMail"}
    logs = {app_id: world.tmp / f"{app_id}.log" for app_id in apps.values()}
    gate = world.tmp / "start-gate"

    def command(app_id, delay):
        return [str(part) for part in [
            PYTHON, th.__file__, "activated", "--app-id", app_id, "--bus-name", app_id,
            "--identifier", f"{app_id}.refresh", "--log", logs[app_id], "--proc-root", world.proc_root,
            "--start-delay", delay]]

    for app_id in apps.values():
        make_activatable(world, app_id, command(app_id, 0) + ["--start-gate", str(gate)])
    agent = world.start_agent(config="[slices]\nrefresh = 10s\nexpiration_warning = 2s\nconcurrent_starts = 1\n")
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=world.address)
    for app_id in apps.values():
        first = th.ch.Proc([*command(app_id, 0), "--submit"], env, name=f"first run of {app_id}")
        world.stack.push(first)
        assert first.popen.wait(timeout=20) == 0, f"{read_log(logs[app_id])}\n{first.stderr()}"
        th.wait_until(lambda: (agent.app_record(app_id) or {}).get("connected") is False, 5, f"{app_id} is gone")
    return agent, apps, logs, command, env, gate.touch


def launch_notes_then_mail(pool, agent, apps, logs):
    """For `slow_notes_and_mail_each_with_a_refresh`: `bgpolicy simulate launch` of Notes' refresh
    in `pool`, then, once Notes is being started, of Mail's, which waits its turn. Returns the
    two launches (futures of their CLI runs)."""
    mail = apps["mail"]
    notes_launch = pool.submit(agent.cli, "simulate", "launch", apps["notes"], f"{apps['notes']}.refresh",
                               timeout=60, check=False)
    th.wait_until(lambda: [e for e in read_log(logs[apps["notes"]]) if e["type"] == "Launched"], 10,
                  "Notes is being started")
    mail_launch = pool.submit(agent.cli, "simulate", "launch", mail, f"{mail}.refresh", timeout=60, check=False)
    waits_its_turn(agent, mail)
    return notes_launch, mail_launch


def test_an_app_the_user_opens_while_it_waits_its_turn_is_not_started_again(activation_world):
    """With one start at a time, Mail waits while Notes is slow to start. The user opens Mail
    meanwhile: its slice goes to that process (no second one is started), and the open is the
    user's, learned as use, not taken for the agent's own launch."""
    world = activation_world
    agent, apps, logs, command, env, let_them_start = slow_notes_and_mail_each_with_a_refresh(world)
    mail = apps["mail"]

    with ThreadPoolExecutor(2) as pool:
        notes_launch, mail_launch = launch_notes_then_mail(pool, agent, apps, logs)
        # The user opens Mail while it waits for Notes to finish starting.
        opened = th.ch.Proc(command(mail, 0), env, name="Mail opened by the user")
        world.stack.push(opened)
        th.wait_until(lambda: (agent.app_record(mail) or {}).get("connected") is True, 10, "Mail registers")
        let_them_start()
        assert notes_launch.result().returncode == 0, notes_launch.result().stderr
        assert mail_launch.result().returncode == 0, mail_launch.result().stderr

    events = read_log(logs[mail])
    started = [e for e in events if e["type"] == "Started"]
    assert [e["type"] for e in events if e["type"] == "Launched"] == [], events
    assert len(started) == 2 and started[-1]["starter"] is None, events  # the first run, then the user's
    runs = [e for e in events if e["type"] == "RunTask"]
    assert len(runs) == 1 and runs[0]["identifier"] == f"{mail}.refresh", events
    delivered = agent.wait_history("delivered", app_id=mail, timeout=5)
    assert "D-Bus activation" not in delivered["detail"], delivered
    registered = [line for line in agent.stderr().splitlines()
                  if "App registered" in line and f"bus.unique={started[-1]['unique_name']}" in line]
    assert len(registered) == 1 and "usage=opened" in registered[0], registered
    assert agent.app_record(mail).get("last_used_at") is not None


def test_a_simulated_launch_whose_request_went_while_it_waited_its_turn_says_so(activation_world):
    """With one start at a time, `bgpolicy simulate launch` of Mail waits while Notes is slow
    to start. Meanwhile the user opens Mail, which cancels its refresh: when Mail's turn comes
    there is nothing left to launch. The simulation fails with UnknownTask's words (the request
    is no longer pending) rather than succeeding with nothing run; Mail is not started and gets
    no RunTask."""
    world = activation_world
    agent, apps, logs, _, _, let_them_start = slow_notes_and_mail_each_with_a_refresh(world)
    mail = apps["mail"]

    with ThreadPoolExecutor(2) as pool:
        notes_launch, mail_launch = launch_notes_then_mail(pool, agent, apps, logs)
        # The user opens Mail, which has no refresh to wait for any more.
        opened = world.registered_app(mail, [f"{mail}.refresh"], name="Mail opened by the user")
        opened.cancel(f"{mail}.refresh")
        let_them_start()
        assert notes_launch.result().returncode == 0, notes_launch.result().stderr
        result = mail_launch.result()

    assert result.returncode != 0, (result.stdout, result.stderr)
    assert f"{mail} has no pending request '{mail}.refresh'" in result.stderr, result.stderr
    assert [e for e in read_log(logs[mail]) if e["type"] == "Launched"] == []
    assert opened.events_of("RunTask") == []
    assert [e for e in agent.history() if e.get("app_id") == mail and e.get("event") == "delivered"] == []


def test_a_bus_name_is_the_apps_own_and_can_be_withdrawn(world):
    """An app may name only its app id, or a name under it, as the one the agent starts it by:
    any other would have the agent start another app for this one's work. Registering with ""
    withdraws it; leaving the option out keeps the one given before."""
    agent = world.start_agent()
    app = world.app("mail")
    message = expect_error("AccessDenied", app.register, ["org.example.Mail.refresh"],
                           app_id="org.example.Mail", bus_name="org.example.Maps")
    assert "org.example.Maps" in message and "org.example.Mail" in message, message
    # Nor a name that only starts with the same letters.
    expect_error("AccessDenied", app.register, ["org.example.Mail.refresh"],
                 app_id="org.example.Mail", bus_name="org.example.MailX")
    assert agent.app_record("org.example.Mail") is None

    app.register(["org.example.Mail.refresh"], app_id="org.example.Mail", bus_name="org.example.Mail.Background")
    assert agent.app_record("org.example.Mail")["bus_name"] == "org.example.Mail.Background"
    app.register(["org.example.Mail.refresh"], app_id="org.example.Mail")
    assert agent.app_record("org.example.Mail")["bus_name"] == "org.example.Mail.Background"
    app.register(["org.example.Mail.refresh"], app_id="org.example.Mail", bus_name="")
    assert "bus_name" not in agent.app_record("org.example.Mail"), agent.app_record("org.example.Mail")
    message = expect_error("InvalidArgument", app.register, ["org.example.Mail.refresh"],
                           app_id="org.example.Mail", bus_name=":1.5")
    assert "well-known" in message, message



@pytest.mark.parametrize("app_options", [
    ["--exit-after-run-task", "0", "--stop-agent-on-run-task"],
    ["--exit-after-run-task", "0"],
    ["--exit-after-run-task", "1.5"],
], ids=["gone-before-the-agent-reads-the-answer", "right-after-answering", "during-the-slice"])
def test_an_activated_app_that_exits_without_completing_has_its_slice_closed_as_vanished(activation_world, app_options):
    """An app the bus started that crashes once it has answered RunTask: its slice closes as
    `vanished` (failed, no violation) when it goes, not at its deadline as `expired`. The first
    case holds the agent still (SIGSTOP) from before the answer until the app is gone, as a busy
    agent would be: the slice is still tied to the bus name it was started by (the agent asks
    who owns it only after the reply), so the app's unique name leaving matched no slice, the
    name had no owner any more, and the slice ran to its deadline as a violation."""
    world = activation_world
    agent, log, _ = activated_app_run_once(world, *app_options)

    launched = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        launch = pool.submit(agent.cli, "simulate", "launch", APP_ID, IDENTIFIER, timeout=30)
        try:
            events = th.wait_until(lambda: [e for e in read_log(log) if e["type"] == "Exiting"] and read_log(log),
                                   15, "the activated app answers RunTask and exits")
            th.wait_until(lambda: not world.session.has_owner(APP_ID), 5, "the activated app is gone from the bus")
        finally:
            for stopped in [e for e in read_log(log) if e["type"] == "AgentStopped"]:
                os.kill(stopped["pid"], signal.SIGCONT)
        launch.result()
    (run,) = [e for e in events if e["type"] == "RunTask"]
    # The app held the agent still exactly when asked to, and only then.
    stopped = [agent.pid] if "--stop-agent-on-run-task" in app_options else []
    assert [e["pid"] for e in events if e["type"] == "AgentStopped"] == stopped, events
    # Well before the 10 s deadline: the app's leaving closes the slice.
    entry = agent.wait_history("vanished", task_id=run["task_id"], timeout=6)
    assert time.monotonic() - launched < 9, "closed only at the deadline"
    assert (entry["app_id"], entry["identifier"], entry["result"]) == (APP_ID, IDENTIFIER, "failed"), entry
    assert "left the bus" in entry["detail"], entry
    # Past the deadline: nothing more for the task, and no violation.
    time.sleep(max(0, launched + 11 - time.monotonic()))
    ends = [e["event"] for e in agent.events(task_id=run["task_id"]) if e["event"] != "delivered"]
    assert ends == ["vanished"], agent.events(task_id=run["task_id"])
    assert agent.app_record(APP_ID)["violations"] == 0, agent.app_record(APP_ID)
