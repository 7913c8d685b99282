"""Content-available wakes across a restart of the agent (SIGTERM, then started again on the
same state dir): an undelivered wake is stored and goes out, with its payload and the D-Bus
types in it unchanged, in the first wake window after the restart, once; a delivered one is not
delivered again; and a token bucket spent on battery is still spent. On a full disk the
notification is still accepted, and the wake stored on the store's reserve, or kept in memory
once that is spent. ContentAvailableQueueTests
and ContentWakeStoreTests cover the saving and restoring case by case.
"""

import time

import pytest
from gi.repository import GLib


import tasks_helpers as th
from tasks_helpers import expect_error, laptop, world  # noqa: F401 - the fixtures
from test_recovery import TmpfsDisk, reserve, simulated_full_disk

APP_ID = "org.example.Mail"
IDENTIFIERS = ["org.example.Mail.refresh"]

# As in test_planner.py: a fine grid, so that a window comes within seconds, and refresh in
# every window. A window stays open a quarter of the grid.
GRID = 6
FINE = f"[windows]\ngrid_on_battery = {GRID}s\ngrid_on_ac = {GRID}s\n[refresh]\nstrategy = every-window\n"


def in_window(t, grid=GRID):
    """Whether Unix time `t` falls in the open part of a grid window (0.4 s of slack for the
    delivery's own latency)."""
    return (t % grid) < grid / 4 + 0.4


def notify(agent, app_id, payload):
    return th.call(agent.world.session.conn, th.SCHEDULER, "NotifyContentAvailable", "sa{sv}", (app_id, payload),
                   None, 10.0)


def content_runs(app):
    return [e for e in app.events_of("RunTask") if e["kind"] == "content-available"]


def restart(agent):
    """SIGTERM, then the agent again on the same state dir."""
    agent.stop()
    agent.restart()


# Several D-Bus types, nested, so that the stored encoding must keep each one as it came.
PAYLOAD = {
    "mailbox": GLib.Variant("s", "INBOX"),
    "n": GLib.Variant("i", 2),
    "cursor": GLib.Variant("x", -(2**40)),
    "score": GLib.Variant("d", 0.25),
    "urgent": GLib.Variant("b", True),
    "folders": GLib.Variant("as", ["a", "b"]),
    "path": GLib.Variant("o", "/org/example/Mail/1"),
    "pair": GLib.Variant("(su)", ("x", 7)),
    "nested": GLib.Variant("a{sv}", {"k": GLib.Variant("u", 5)}),
}
EXPECTED_INFO = {
    "mailbox": "INBOX", "n": 2, "cursor": -(2**40), "score": 0.25, "urgent": True, "folders": ["a", "b"],
    "path": "/org/example/Mail/1", "pair": ["x", 7], "nested": {"k": 5},
}
EXPECTED_TYPES = {
    "mailbox": "s", "n": "i", "cursor": "x", "score": "d", "urgent": "b", "folders": "as", "path": "o",
    "pair": "(su)", "nested": "a{sv}", "slice_id": "s", "deadline": "x",
}


def test_an_undelivered_wake_survives_a_restart_and_goes_out_once(laptop):
    world = laptop
    agent = world.start_agent(config=FINE, planner=True)
    # The app registers and exits: its wake cannot be delivered before the restart.
    first = world.registered_app(APP_ID, IDENTIFIERS, name="mail-1")
    first.quit()
    th.wait_until(lambda: agent.app_record(APP_ID)["connected"] is False, 10, "the agent to see the app leave")
    notify(agent, APP_ID, {"n": GLib.Variant("i", 1)})
    notify(agent, APP_ID, PAYLOAD)  # replaces the first: only the newest is kept
    assert len(agent.events("content-queued", app_id=APP_ID)) == 1

    restart(agent)
    # Started again, the app registers under the same id; the stored wake goes out in the next window.
    second = world.registered_app(APP_ID, IDENTIFIERS, name="mail-2")
    run = second.wait_event("RunTask", lambda e: e["kind"] == "content-available", timeout=3 * GRID)
    assert run["identifier"] == "", run
    info = {k: v for k, v in run["info"].items() if k not in ("slice_id", "deadline")}
    assert info == EXPECTED_INFO, run
    assert run["info_types"] == EXPECTED_TYPES, run
    assert in_window(run["time"]), run["time"] % GRID
    second.set_task_completed(run["task_id"], True, "new-data")
    agent.wait_history("completed", app_id=APP_ID, task_id=run["task_id"])
    time.sleep(GRID)
    assert len(content_runs(second)) == 1, content_runs(second)

    # Delivered, it is gone from the store: after another restart, a window comes (the app's
    # refresh runs in it) and brings no wake.
    restart(agent)
    third = world.app(name="mail-3")
    third.configure(complete_after=0.1)  # so that a wake delivered again would not hold up the refresh
    assert third.register(IDENTIFIERS, app_id=APP_ID) == APP_ID
    third.submit(IDENTIFIERS[0])
    third.wait_run_task(IDENTIFIERS[0], timeout=3 * GRID)
    time.sleep(GRID)
    assert content_runs(third) == [], content_runs(third)
    assert len(content_runs(second)) == 1, content_runs(second)
    assert agent.alive()


def test_a_bucket_spent_on_battery_stays_spent_after_a_restart(laptop):
    world = laptop
    agent = world.start_agent(config=FINE.replace(f"{GRID}s", "2s"), planner=True)
    mail = world.registered_app(APP_ID, IDENTIFIERS)
    mail.configure(complete_after=0.1)
    # Three wakes, each delivered (and so spent) before the next notification.
    for n in range(3):
        notify(agent, APP_ID, {"n": GLib.Variant("i", n)})
        mail.wait_event("RunTask", lambda e, n=n: e["kind"] == "content-available" and e["info"]["n"] == n, timeout=10)
        th.wait_until(lambda n=n: len(agent.events("completed", app_id=APP_ID, identifier="")) == n + 1, 10,
                      f"wake {n} to complete")

    restart(agent)
    message = expect_error("LimitsExceeded", notify, agent, APP_ID, {"n": GLib.Variant("i", 3)})
    assert "3 content-available wakes per hour on battery" in message, message
    assert len(agent.events("content-queued", app_id=APP_ID)) == 3
    assert content_runs(mail) and len(content_runs(mail)) == 3, content_runs(mail)
    assert agent.alive()


def test_on_a_full_disk_the_wake_is_accepted_and_kept_in_memory(world):
    """With the store's reserve spent (an earlier write took it), a wake the full disk refuses
    is kept in memory, and goes to the app once it is back."""
    disk = simulated_full_disk(world)
    agent = disk.start_agent(world)
    first = world.registered_app(APP_ID, IDENTIFIERS, name="mail-1")
    first.quit()
    th.wait_until(lambda: agent.app_record(APP_ID)["connected"] is False, 10, "the agent to see the app leave")

    reserve(world).unlink(missing_ok=True)
    disk.fill(agent)
    notify(agent, APP_ID, {"n": GLib.Variant("i", 7)})  # accepted: refusing it would lose the wake
    assert agent.alive()
    th.wait_until(lambda: "Could not store a content-available wake" in agent.stderr(), 10, "the failed write to be logged")

    # Room again: the wake, kept in memory, goes to the app when it is back.
    disk.free(agent)
    second = world.registered_app(APP_ID, IDENTIFIERS, name="mail-2")
    run = second.wait_event("RunTask", lambda e: e["kind"] == "content-available", timeout=10)
    assert run["info"]["n"] == 7, run


def test_on_a_full_disk_the_wake_is_stored_on_the_reserve_and_survives_a_stop(world):
    """The sender was told the wake was accepted: on a full disk the store's reserve is given
    back for its write, so that it is on disk and a stop, the disk full again, does not lose it.
    (Before the reserve, it was kept in memory only, and the stop lost it.)"""
    disk = simulated_full_disk(world)
    if not isinstance(disk, TmpfsDisk):
        pytest.skip("needs a tmpfs: the reserve frees room on a disk, not under a file size limit")
    agent = disk.start_agent(world)
    first = world.registered_app(APP_ID, IDENTIFIERS, name="mail-1")
    first.quit()
    th.wait_until(lambda: agent.app_record(APP_ID)["connected"] is False, 10, "the agent to see the app leave")

    disk.fill(agent)
    notify(agent, APP_ID, {"n": GLib.Variant("i", 7)})
    th.wait_until(lambda: "given back to keep a content-available wake" in agent.stderr(), 10, "the reserve spent")
    assert "Could not store a content-available wake" not in agent.stderr()
    assert not reserve(world).exists()
    disk.fill(agent)  # others take the room the reserve gave back
    agent.stop()
    disk.free(agent)
    agent.restart()
    second = world.registered_app(APP_ID, IDENTIFIERS, name="mail-2")
    run = second.wait_event("RunTask", lambda e: e["kind"] == "content-available", timeout=10)
    assert run["info"]["n"] == 7, run


def test_a_waiting_wake_is_listed_with_what_holds_it(world):
    """ListPending (and `bgpolicy pending`) list an app's undelivered wake beside its requests
    (and GetStatus counts it, `bgpolicy status` too),
    with the rules that hold it and when it can go, so that a wake held for days says why: here
    the app has quit and cannot be started, then it registers again and the wake waits only for
    the next window, then it is delivered and no longer listed."""
    agent = world.start_agent(config=FINE, planner=True)
    first = world.registered_app(APP_ID, IDENTIFIERS, name="mail-1")
    first.quit()
    th.wait_until(lambda: agent.app_record(APP_ID)["connected"] is False, 10, "the agent to see the app leave")
    notify(agent, APP_ID, {"n": GLib.Variant("i", 1)})
    notify(agent, APP_ID, {"n": GLib.Variant("i", 2)})

    (wake,) = agent.list_pending()
    assert wake["app_id"] == APP_ID and wake["identifier"] == "" and wake["kind"] == "content-available", wake
    assert wake["notifications"] == 2 and wake["submitted_at"] <= time.time(), wake
    assert wake["blocking"] == ["unreachable"] and "earliest_window" not in wake, wake
    assert "registers again" in wake["reasons"][0], wake
    listed = agent.cli("pending").stdout
    assert "content-available" in listed and "unreachable" in listed, listed
    th.wait_until(lambda: agent.status().get("content_wakes") == 1, 5, "GetStatus to count the wake")
    assert "content-available wakes: 1" in agent.cli("status").stdout

    # Back on the bus, between two windows: it waits for the next one.
    th.wait_between_windows(GRID, GRID / 4 + 0.5, GRID - 1.5)
    second = world.registered_app(APP_ID, IDENTIFIERS, name="mail-2")
    (wake,) = agent.list_pending()
    assert wake["blocking"] == ["next-window"] and wake["earliest_window"] % GRID == 0, wake
    assert wake["earliest_window"] - time.time() < GRID, wake
    run = second.wait_event("RunTask", lambda e: e["kind"] == "content-available", timeout=3 * GRID)
    th.wait_until(lambda: agent.list_pending() == [], 5, "the delivered wake to leave the list")
    th.wait_until(lambda: "content_wakes" not in agent.status(), 5, "GetStatus to count no wake")
    assert run["info"]["n"] == 2, run
