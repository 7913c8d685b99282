"""What the agent keeps across a crash (SIGKILL) and a restart on the same state dir: pending
requests with their options, the trace of a slice that was running, and the user's switches."""

import shutil
import sqlite3
import time

import tasks_helpers as th
from tasks_helpers import later, world  # noqa: F401 - the fixture

KEYS = ("identifier", "kind", "earliest_begin", "requires_network", "requires_external_power",
        "expected_duration", "submitted_at")


def pending_of(agent, app_id):
    return sorted(({k: p.get(k) for k in KEYS} for p in agent.list_pending() if p["app_id"] == app_id),
                  key=lambda p: p["identifier"])


def test_eleven_pending_requests_survive_sigkill(world):
    agent = world.start_agent()
    app_id = "org.example.Keeper"
    refresh = f"{app_id}.refresh"
    processing = [f"{app_id}.p{i}" for i in range(10)]
    app = world.registered_app(app_id, [refresh, *processing])
    tomorrow = later(86400)
    app.submit(refresh, "refresh", earliest_begin=tomorrow, requires_network=True, expected_duration=20)
    for i, identifier in enumerate(processing):
        app.submit(identifier, "processing", earliest_begin=tomorrow + 60 * i, requires_network=i % 3 == 0,
                   requires_external_power=i % 2 == 0, expected_duration=60 + i)
    before = pending_of(agent, app_id)
    assert len(before) == 11, before

    agent.sigkill()
    agent.restart()
    after = pending_of(agent, app_id)
    assert after == before
    record = agent.app_record(app_id)
    assert record is not None and sorted(record["identifiers"]) == sorted([refresh, *processing]), record
    assert record["pending"] == 11 and record["connected"] is False, record

    # The app's connection outlived the agent; registering again binds it, and it sees its own.
    assert app.register([refresh, *processing], app_id=app_id) == app_id
    mine = sorted(({k: p.get(k) for k in KEYS} for p in app.pending()), key=lambda p: p["identifier"])
    assert mine == before


def test_a_slice_running_at_sigkill_is_interrupted_and_not_delivered_again(world):
    agent = world.start_agent()
    app_id, identifier = "org.example.Crash", "org.example.Crash.refresh"
    app = world.registered_app(app_id, [identifier])
    # No gates: if the agent put the request back, it would run again by itself at once.
    app.submit(identifier, "refresh")
    run = app.wait_run_task(identifier, timeout=15)

    agent.sigkill()
    agent.restart()
    entry = agent.wait_history("interrupted", task_id=run["task_id"], timeout=5)
    assert (entry["app_id"], entry["identifier"]) == (app_id, identifier), entry
    assert agent.status()["running"] == []
    assert [p for p in agent.list_pending() if p["app_id"] == app_id] == []

    # Reachable again and runnable: still nothing comes.
    assert app.register([identifier], app_id=app_id) == app_id
    time.sleep(3)
    assert len(app.events_of("RunTask")) == 1, app.events_of("RunTask")
    th.expect_error("UnknownTask", app.set_task_completed, run["task_id"], True, "new-data")



def test_a_second_agent_on_the_same_state_refuses_before_touching_it(world):
    """A second bgpolicyd started on the state directory of one that runs, on the same session
    bus or on another, refuses at once and names the first. It reads and writes nothing: its
    start-up clean-up would have recorded the first one's running task as interrupted."""
    agent = world.start_agent()
    app_id, identifier = "org.example.Busy", "org.example.Busy.refresh"
    app = world.registered_app(app_id, [identifier])
    app.submit(identifier, "refresh")
    run = app.wait_run_task(identifier, timeout=15)

    other_bus = world.stack.push(th.PrivateBus(world.tmp))
    for address in (world.address, other_bus.address):
        second = world.stack.push(th.ch.Proc([world.bin_dir / "bgpolicyd"], dict(agent.env, DBUS_SESSION_BUS_ADDRESS=address),
                                             name="second bgpolicyd"))
        assert second.popen.wait(timeout=10) != 0
        message = f"the state directory {world.tmp / 'state' / 'bgpolicy'} is in use by bgpolicyd process {agent.pid}"
        assert message in second.stderr(), second.stderr()
        assert "Tasks loaded" not in second.stderr(), second.stderr()

    assert [r["task_ids"] for r in agent.status()["running"]] == [[run["task_id"]]], agent.status()
    assert agent.events("interrupted") == []
    app.set_task_completed(run["task_id"], True, "new-data")
    assert agent.wait_history("completed", task_id=run["task_id"])["result"] == "new-data"
    # The lock goes with the first agent: after it, an agent starts on the directory again.
    agent.stop()
    agent.restart()
    assert agent.events("interrupted") == []



def test_a_clean_stop_leaves_everything_in_the_database_file(world, tmp_path):
    """At a clean stop the WAL is folded into the database file: a copy of the file alone (a
    backup, or a `-wal` lost beside it) holds the pending request and the app's switch."""
    agent = world.start_agent()
    app_id = "org.example.Kept"
    app = world.registered_app(app_id, [f"{app_id}.refresh"])
    app.submit(f"{app_id}.refresh", "refresh", earliest_begin=later(3600))
    agent.cli("disable", app_id)
    agent.stop()
    state = world.tmp / "state" / "bgpolicy"
    wal = state / "bgpolicy.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0, wal.stat().st_size
    copy = tmp_path / "copy.sqlite"
    shutil.copy(state / "bgpolicy.sqlite", copy)
    db = sqlite3.connect(copy)
    assert db.execute("SELECT identifier FROM pending WHERE app_id = ?", (app_id,)).fetchall() == [(f"{app_id}.refresh",)]
    assert db.execute("SELECT enabled FROM apps WHERE app_id = ?", (app_id,)).fetchall() == [(0,)]
    db.close()


def test_switches_survive_restart(world):
    agent = world.start_agent()
    off = world.registered_app("org.example.Off", ["org.example.Off.refresh"])
    on = world.registered_app("org.example.On", ["org.example.On.refresh"])
    agent.cli("disable", "org.example.Off")

    agent.sigkill()
    agent.restart()
    assert agent.app_record("org.example.Off")["enabled"] is False
    assert agent.app_record("org.example.On")["enabled"] is True
    assert agent.status()["global_enabled"] is True

    agent.cli("disable", "--all")
    agent.stop()
    agent.restart()
    assert agent.status()["global_enabled"] is False
    assert agent.app_record("org.example.Off")["enabled"] is False

    assert on.register(["org.example.On.refresh"], app_id="org.example.On") == "org.example.On"
    assert on.refresh_status() == "restricted"
    agent.set_global_enabled(True)
    assert on.refresh_status() == "available"
    assert off.register(["org.example.Off.refresh"], app_id="org.example.Off") == "org.example.Off"
    assert off.refresh_status() == "denied"
