"""Forgetting an app (org.bgpolicy.Admin1.ForgetApp, `bgpolicy forget APP`), on a real agent on
a private bus, with apps that are processes of their own: everything the agent keeps about the
app goes (its registration, pending work, queued wake, history, usage log and what the refresh
planner learned, which stops counting toward the pool), the other apps' stay, a restart still
knows nothing of it, and registered again it is a new app. A running app, an unknown one and a
sandboxed caller are refused by name; a full disk forgets nothing."""

import json
import sqlite3
import subprocess
import time

import tasks_helpers as th
from tasks_helpers import AgentError, expect_error, later, unit_cgroup, world  # noqa: F401 - the fixture
from test_recovery import simulated_full_disk

FEEDS = "org.example.Feeds"
FEEDS_IDS = [f"{FEEDS}.refresh", f"{FEEDS}.cleanup"]
NOTES = "org.example.Notes"


def forget(agent, app_id):
    return agent.admin("ForgetApp", "s", (app_id,), "(a{sv})")[0]


def pending_of(agent, app_id):
    """`app_id`'s pending requests as ListPending gives them, without the words that name the
    time left (which change from one call to the next)."""
    keys = ("identifier", "kind", "earliest_begin", "submitted_at", "requires_network")
    return [{k: p.get(k) for k in keys} for p in agent.list_pending() if p["app_id"] == app_id]


def database_rows_naming(world, app_id):
    """Rows naming `app_id` in every table of the agent's database that has an app_id column
    (read while the agent is stopped: it is the only writer)."""
    db = sqlite3.connect(world.tmp / "state" / "bgpolicy" / "bgpolicy.sqlite")
    try:
        tables = [row[0] for row in db.execute(
            "SELECT m.name FROM sqlite_master AS m, pragma_table_info(m.name) AS c "
            "WHERE m.type = 'table' AND c.name = 'app_id'")]
        assert {"apps", "pending", "history", "usage", "usage_hourly", "content_wakes"} <= set(tables), tables
        return {table: db.execute(f"SELECT COUNT(*) FROM {table} WHERE app_id = ?", (app_id,)).fetchone()[0]
                for table in tables}
    finally:
        db.close()


def feeds_used_and_quit(world, agent):
    """Feeds registered (an open), submitted two requests for later, reported itself in the
    foreground and the background, and quit; then a sync service queued a wake for it, which
    waits (Feeds cannot be reached). Returns the running test app of Notes, which stays."""
    notes = world.registered_app(NOTES, [f"{NOTES}.refresh"])
    notes.submit(f"{NOTES}.refresh", "refresh", earliest_begin=later(3600))
    feeds = world.registered_app(FEEDS, FEEDS_IDS)
    feeds.submit(FEEDS_IDS[0], "refresh", earliest_begin=later(3600))
    feeds.submit(FEEDS_IDS[1], "processing", earliest_begin=later(7200))
    feeds.scheduler("ReportUsage", "s", ("foreground",))
    feeds.scheduler("ReportUsage", "s", ("background",))

    # Running: refused, with what to do.
    message = expect_error("NotPermitted", forget, agent, FEEDS)
    assert f"{FEEDS} is running" in message and "quit it first" in message, message
    assert agent.app_record(FEEDS) is not None

    feeds.quit()
    th.wait_until(lambda: agent.app_record(FEEDS)["connected"] is False, 5, "Feeds is gone from the bus")
    th.call(world.session.conn, th.SCHEDULER, "NotifyContentAvailable", "sa{sv}", (FEEDS, {}))
    assert agent.wait_history("content-queued", app_id=FEEDS)
    return notes


def test_forget_removes_everything_of_the_app_and_a_restart_keeps_it_forgotten(world):
    agent = world.start_agent(planner=True)
    feeds_used_and_quit(world, agent)
    before = agent.status()
    assert before["apps"] == 2 and before["pending"] == 3, before
    assert abs(before["refresh"]["budget_per_day"] - 4.4) < 1e-9, before["refresh"]
    assert agent.events(app_id=FEEDS), "Feeds has history"
    notes_before = (agent.app_record(NOTES), pending_of(agent, NOTES), [e for e in agent.history() if e.get("app_id") == NOTES])

    # A sandboxed caller may not; an unknown app is no app.
    flat = world.app("flat", cgroup=unit_cgroup("app-flatpak-org.example.Flat-99.scope"), flatpak_app="org.example.Flat")
    message = expect_error("AccessDenied", flat.call, th.ADMIN, "ForgetApp", "s", (FEEDS,))
    assert "Flatpak sandbox" in message, message
    message = expect_error("NotRegistered", forget, agent, "org.example.Nobody")
    assert "'bgpolicy apps'" in message, message
    assert agent.app_record(FEEDS) is not None

    # gdbus, as a settings panel would call it.
    r = subprocess.run(["gdbus", "call", "--address", world.address, "--dest", th.AGENT_NAME, "--object-path",
                        th.AGENT_PATH, "--method", "org.bgpolicy.Admin1.ForgetApp", FEEDS],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    for words in (f"'app_id': <'{FEEDS}'>", "'pending': <uint32 2>", "'content_wakes': <uint32 1>",
                  "'learned_model': <true>", f"'identifiers': <['{FEEDS_IDS[1]}', '{FEEDS_IDS[0]}']>"):
        assert words in r.stdout, r.stdout
    assert "App forgotten" in agent.stderr() and f"app.id={FEEDS}" in agent.stderr()

    def nothing_of_feeds():
        assert agent.app_record(FEEDS) is None
        assert [p for p in agent.list_pending() if p["app_id"] == FEEDS] == []
        assert agent.events(app_id=FEEDS) == []
        expect_error("NotRegistered", agent.explain, FEEDS, FEEDS_IDS[0])
        expect_error("NotRegistered", agent.admin, "GetTimeline", "s", (FEEDS,), "(a{sv})")
        expect_error("NotRegistered", forget, agent, FEEDS)
        message = expect_error("NotRegistered", th.call, world.session.conn, th.SCHEDULER, "NotifyContentAvailable",
                               "sa{sv}", (FEEDS, {}))
        assert FEEDS in message, message
        status = agent.status()
        assert status["apps"] == 1 and status["pending"] == 1, status
        assert abs(status["refresh"]["budget_per_day"] - 2.2) < 1e-9, status["refresh"]
        assert FEEDS not in status.get("in_use", [])
        # Notes is as it was.
        assert agent.app_record(NOTES)["identifiers"] == notes_before[0]["identifiers"]
        assert pending_of(agent, NOTES) == notes_before[1]
        assert [e for e in agent.history() if e.get("app_id") == NOTES] == notes_before[2]

    th.wait_until(lambda: agent.status()["apps"] == 1, 5, "GetStatus counts one app")
    nothing_of_feeds()

    # On disk too, and after a restart.
    agent.stop()
    rows = database_rows_naming(world, FEEDS)
    assert all(count == 0 for count in rows.values()), rows
    assert database_rows_naming(world, NOTES)["usage"] > 0, "Notes' usage is kept"
    agent.restart()
    nothing_of_feeds()

    # Registered again, it is a new app: nothing of before comes back.
    registered = time.time()
    again = world.registered_app(FEEDS, [FEEDS_IDS[0]], name="feeds again")
    record = agent.app_record(FEEDS)
    assert record["registered_at"] >= int(registered) - 1 and record["pending"] == 0, record
    assert again.pending() == []
    assert [e["event"] for e in agent.events(app_id=FEEDS)] == ["registered"]
    assert abs(agent.status()["refresh"]["budget_per_day"] - 4.4) < 1e-9


def test_bgpolicy_forget(world):
    agent = world.start_agent(planner=True)
    feeds_used_and_quit(world, agent)

    r = agent.cli("forget", FEEDS)
    assert r.stdout.startswith(f"Forgot {FEEDS}: its registration ({', '.join(sorted(FEEDS_IDS))}), "
                               "2 pending requests, 1 queued content-available wake, "), r.stdout
    assert "usage events" in r.stdout and "what the refresh planner learned of it." in r.stdout, r.stdout
    assert r.stdout.endswith("If it registers again, it starts as a new app.\n"), r.stdout
    assert r.stderr == ""
    assert agent.app_record(FEEDS) is None

    # Unknown now: refused as the other commands refuse an unknown app.
    r = agent.cli("forget", FEEDS, check=False)
    assert (r.returncode, r.stdout) == (1, ""), r
    assert r.stderr.startswith(f"bgpolicy: no app '{FEEDS}' has registered") and "(NotRegistered)" in r.stderr, r.stderr

    # A running app: status 1, the agent's words and what to do.
    notes_record = agent.app_record(NOTES)
    r = agent.cli("forget", NOTES, check=False)
    assert (r.returncode, r.stdout) == (1, ""), r
    lines = r.stderr.splitlines()
    assert lines[0].startswith(f"bgpolicy: {NOTES} is running (connected to the bus as ") and \
        lines[0].endswith("(NotPermitted)"), r.stderr
    assert lines[1] == f"Quit the app, then run 'bgpolicy forget {NOTES}' again.", r.stderr
    assert agent.app_record(NOTES) == notes_record

    # --json: the agent's dictionary.
    agent.stop()
    agent.restart()
    forgotten = json.loads(agent.cli("forget", NOTES, "--json").stdout)
    assert forgotten["app_id"] == NOTES and forgotten["identifiers"] == [f"{NOTES}.refresh"], forgotten
    assert forgotten["pending"] == 1 and forgotten["history"] >= 2 and forgotten["rows"] > 4, forgotten
    assert json.loads(agent.cli("apps", "--json").stdout) == []


def test_a_full_disk_forgets_nothing(world):
    disk = simulated_full_disk(world)
    agent = disk.start_agent(world)
    app = world.registered_app(FEEDS, FEEDS_IDS)
    app.submit(FEEDS_IDS[0], "refresh", earliest_begin=later(3600))
    app.quit()
    th.wait_until(lambda: agent.app_record(FEEDS)["connected"] is False, 5, "Feeds is gone from the bus")
    history = agent.events(app_id=FEEDS)

    disk.fill(agent)
    message = expect_error("Failed", forget, agent, FEEDS)
    assert "nothing was changed" in message, message
    assert agent.app_record(FEEDS)["pending"] == 1
    assert [p["identifier"] for p in agent.list_pending()] == [FEEDS_IDS[0]]
    assert agent.events(app_id=FEEDS) == history

    disk.free(agent)
    assert forget(agent, FEEDS)["pending"] == 1
    assert agent.app_record(FEEDS) is None and agent.list_pending() == []
