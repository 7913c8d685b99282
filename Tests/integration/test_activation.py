"""Reaching an app that is not running: by D-Bus activation of the `bus_name` it registered,
on a private bus whose service directory the test writes; and failing clearly when it cannot.

The activated app is tasks_helpers.py run as `activated`: it registers with app_id and bus_name,
exports Client1, then takes its name, and completes what it is given; it logs its events as JSON
lines to a file the test reads."""

import json
import os
import time

import pytest

import tasks_helpers as th
from tasks_helpers import PYTHON, expect_error, later

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


def test_the_agent_starts_an_activatable_app_for_its_task(activation_world):
    world = activation_world
    log = world.tmp / "activated.log"
    command = [str(part) for part in activated_command(world, log)]
    (world.service_dir / f"{APP_ID}.service").write_text(
        f"[D-BUS Service]\nName={APP_ID}\nExec={' '.join(command)}\n")
    agent = world.start_agent(config="[slices]\nrefresh = 10s\nexpiration_warning = 2s\n")

    # The app runs once: registers, asks for a refresh in an hour, and exits.
    first = th.ch.Proc([*command, "--submit"], dict(os.environ, DBUS_SESSION_BUS_ADDRESS=world.address),
                       name="first run")
    world.stack.push(first)
    assert first.popen.wait(timeout=20) == 0, f"{read_log(log)}\n{first.stderr()}"
    th.wait_until(lambda: (agent.app_record(APP_ID) or {}).get("connected") is False, 5, "the app is gone")
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
    (world.service_dir / "org.example.Broken.service").write_text(
        "[D-BUS Service]\nName=org.example.Broken\nExec=/bin/false\n")
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
