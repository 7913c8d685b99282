"""The task cycle through org.bgpolicy.Scheduler1, Client1 and Admin1, driven by real app
processes (tasks_helpers.TestApp) on a private bus: register, submit, delivery, completion,
expiry, the limits and errors, the user's switches, Explain, and the two example apps.

Requests that must wait for `simulate launch` carry an `earliest_begin` an hour ahead (simulate
launch ignores every gate but reachability); everything else would run by itself on this
machine, which is on AC (a umockdev testbed) with no system bus."""

import json
import os
import sqlite3
import time

from gi.repository import GLib

import pytest

import conditions_helpers as ch
import tasks_helpers as th
from tasks_helpers import PYTHON, ROOT, expect_error, later, world  # noqa: F401 - the fixture

SHORT_REFRESH = "[slices]\nrefresh = 4s\nexpiration_warning = 2s\n"


def running_app(world, app_id="org.example.Cycle", identifier=None, config=None, kind="refresh"):
    """An agent, an app with one gated request, launched with SimulateLaunch: (agent, app, run)."""
    agent = world.agent or world.start_agent(config=config)
    identifier = identifier or f"{app_id}.{kind}"
    app = world.registered_app(app_id, [identifier])
    app.submit(identifier, kind, earliest_begin=later(3600))
    agent.simulate_launch(app_id, identifier)
    return agent, app, app.wait_run_task(identifier, timeout=5)


# MARK: The cycle


def test_refresh_cycle_simulate_launch_run_and_complete(world):
    agent = world.start_agent()
    app_id, identifier = "org.example.Cycle", "org.example.Cycle.refresh"
    app = world.registered_app(app_id, [identifier])
    app.submit(identifier, "refresh", earliest_begin=later(3600))
    assert [p["identifier"] for p in app.pending()] == [identifier]

    agent.cli("simulate", "launch", app_id, identifier)
    run = app.wait_run_task(identifier, timeout=5)
    assert run["kind"] == "refresh" and run["identifier"] == identifier, run
    assert run["seconds"] == 30, f"the default refresh slice is 30 s: {run}"
    assert run["task_id"], run
    assert run["info_types"] == {"slice_id": "s", "deadline": "x"}, run
    assert abs(run["info"]["deadline"] - (run["time"] + 30)) <= 2, run
    # The request left the pending list: it is running now.
    assert app.pending() == []
    slices = agent.status()["running"]
    assert [(s["app_id"], s["slice_id"], s["task_ids"], s["identifiers"], s["deadline"]) for s in slices] == \
        [(app_id, run["info"]["slice_id"], [run["task_id"]], [identifier], run["info"]["deadline"])], slices
    assert abs(slices[0]["started_at"] - run["time"]) <= 2, slices
    record = agent.app_record(app_id)
    assert (record["pending"], record["running"], record["connected"], record["enabled"]) == (0, 1, True, True), record
    assert app.explain(identifier)["state"] == "running"

    done = app.complete(run["task_id"], True, "new-data")
    assert done["error"] is None, done
    entry = agent.wait_history("completed", task_id=run["task_id"], timeout=5)
    assert (entry["app_id"], entry["identifier"], entry["kind"], entry["result"]) == \
        (app_id, identifier, "refresh", "new-data"), entry
    assert entry["detail"], entry
    assert agent.events("delivered", task_id=run["task_id"]), agent.history()
    assert agent.status()["running"] == []
    # Completing twice: the task is no longer running.
    expect_error("UnknownTask", app.set_task_completed, run["task_id"], True, "new-data")


def test_a_task_that_never_completes_is_warned_then_expired_as_a_violation(world):
    agent = world.start_agent(config=SHORT_REFRESH)
    _, app, run = running_app(world, "org.example.Sleepy")
    assert run["seconds"] == 4, run
    expire = app.wait_event("ExpireTask", timeout=6)
    assert expire["task_id"] == run["task_id"]
    warned_after = expire["mono"] - run["mono"]
    assert 1.4 <= warned_after <= 2.8, f"ExpireTask {warned_after:.2f}s into a 4 s slice, expected ~2 s (4 s - 2 s)"

    entry = agent.wait_history("expired", task_id=run["task_id"], timeout=6)
    assert 3.3 <= entry["time"] - run["time"] <= 5.5, (entry, run)
    assert agent.events("expiration-warned", task_id=run["task_id"]), agent.history()
    assert agent.app_record("org.example.Sleepy")["violations"] == 1
    assert agent.status()["running"] == []
    # Too late: the slice is over.
    expect_error("UnknownTask", app.set_task_completed, run["task_id"], True, "new-data")


def test_simulate_expiration_sends_expire_task_at_once(world):
    agent, app, run = running_app(world, "org.example.Expiring")
    sent = time.monotonic()
    agent.simulate_expiration("org.example.Expiring", "org.example.Expiring.refresh")
    expire = app.wait_event("ExpireTask", timeout=3)
    assert expire["task_id"] == run["task_id"]
    assert expire["mono"] - sent < 1.0, f"ExpireTask came {expire['mono'] - sent:.2f}s after SimulateExpiration"
    # The app may still finish in its slice.
    assert app.complete(run["task_id"], True, "no-data")["error"] is None
    assert agent.wait_history("completed", task_id=run["task_id"], timeout=5)["result"] == "no-data"
    expect_error("UnknownTask", agent.simulate_expiration, "org.example.Expiring", "org.example.Expiring.refresh")


def test_simulate_launch_errors(world):
    agent = world.start_agent()
    app = world.registered_app("org.example.Sim", ["org.example.Sim.refresh"])
    expect_error("NotRegistered", agent.simulate_launch, "org.example.Nobody", "org.example.Nobody.refresh")
    message = expect_error("UnknownTask", agent.simulate_launch, "org.example.Sim", "org.example.Sim.refresh")
    # The admin side's caller is a person at bgpolicy: the message names the command that lists
    # them (GetPending is the app's own), not ListPending, a D-Bus method.
    assert "'bgpolicy pending org.example.Sim' lists the pending ones" in message, message
    expect_error("UnknownTask", agent.simulate_expiration, "org.example.Sim", "org.example.Sim.refresh")
    cli = agent.cli("simulate", "launch", "org.example.Sim", "org.example.Sim.refresh", check=False)
    # One line: the CLI's own hint, which names the same command, is left out.
    assert (cli.returncode, cli.stderr) == (1, f"bgpolicy: {message} (UnknownTask)\n"), (cli.returncode, cli.stderr)
    assert app.events_of("RunTask") == []


# Each Admin1 method that names an app: its call with that app id as its first argument.
ADMIN_APP_CALLS = {
    "SetAppEnabled": ("sb", lambda app: (app, False)),
    "ForgetApp": ("s", lambda app: (app,)),
    "GetTimeline": ("s", lambda app: (app,)),
    "Explain": ("ss", lambda app: (app, "org.example.Sim.refresh")),
    "SimulateLaunch": ("ss", lambda app: (app, "org.example.Sim.refresh")),
    "SimulateExpiration": ("ss", lambda app: (app, "org.example.Sim.refresh")),
    "GetAppHistory": ("sxu", lambda app: (app, 0, 0)),
}


def test_admin1_refuses_what_is_no_app_id_as_invalid_argument_with_the_rule(world):
    """An app id that cannot be one (empty, a path, too long, a space, an option, not ASCII) is
    a mistake in the call: InvalidArgument naming the rule it breaks, as NotifyContentAvailable
    answers it. NotRegistered ("no app '../x' has registered") sent the user looking for an app
    that cannot exist. A well-formed id no app registered is still NotRegistered; nothing changes."""
    agent = world.start_agent()
    app = world.registered_app("org.example.Sim", ["org.example.Sim.refresh"])
    app.submit("org.example.Sim.refresh", "refresh", earliest_begin=later(3600))
    rules = {
        "": "may not be empty",
        "../x": "may not begin or end with a dot",
        "a" * 300: "at most 255 bytes",
        "org.example.Sim ": "only ASCII letters",
        "-org.example.Sim": "may not begin with '-'",
        "org.\u00e9xample.Sim": "only ASCII letters",
        "org.example.Sim\x1b[2J": "only ASCII letters",
    }
    for method, (signature, args) in ADMIN_APP_CALLS.items():
        for text, rule in rules.items():
            if method == "GetTimeline" and text == "":
                continue  # "" is every app's timeline
            message = expect_error("InvalidArgument", agent.admin, method, signature, args(text))
            assert "is not an app id: " in message and rule in message, (method, text[:20], message)
            assert len(message) < 300, message
        message = expect_error("NotRegistered", agent.admin, method, signature, args("org.example.Nobody"))
        assert "no app 'org.example.Nobody' has registered" in message, message
    assert agent.app_record("org.example.Sim")["enabled"] is True
    assert [p["identifier"] for p in agent.list_pending()] == ["org.example.Sim.refresh"]
    assert app.events_of("RunTask") == []


def test_simulate_launch_quotes_an_apps_error_without_its_control_characters(world):
    """An app that answers RunTask with an error whose message carries escape sequences (a
    window title, a screen clear), a bell and a right-to-left override: the agent's refusal
    quotes the app's words, and bgpolicy prints them on stderr with those replaced, as its
    tables do, so that an app cannot write to the terminal through bgpolicy's errors."""
    agent = world.start_agent()
    app_id, identifier = "org.example.Rude", "org.example.Rude.refresh"
    app = world.registered_app(app_id, [identifier])
    app.configure(run_task_error="org.example.Rude.Error",
                  run_task_error_message="no\x1b]0;owned\x07\x1b[2Jthanks\u202eRLO\nbgpolicy: forged")
    app.submit(identifier, "refresh", earliest_begin=later(3600))
    cli = agent.cli("simulate", "launch", app_id, identifier, check=False)
    assert cli.returncode == 1, (cli.returncode, cli.stdout, cli.stderr)
    assert "org.example.Rude.Error" in cli.stderr and "thanks" in cli.stderr, ascii(cli.stderr)
    assert not set(cli.stderr) & {"\x1b", "\x07", "\u202e"}, ascii(cli.stderr)
    # The app's newline does not start a line of bgpolicy's own.
    assert [line for line in cli.stderr.splitlines() if line.startswith("bgpolicy: ")] == \
        cli.stderr.splitlines()[:1], ascii(cli.stderr)


def test_a_request_submitted_again_during_a_failed_delivery_stands(world):
    """The app submits its refresh again (an hour ahead) while the agent's RunTask for it is on
    its way, then answers RunTask with an error. The newer request stands, in memory and on
    disk: before, the failed delivery put the old request back over it, and it was tried
    again after the wait, the app's new earliest_begin lost."""
    agent = world.start_agent()
    app_id, identifier = "org.example.Again", "org.example.Again.refresh"
    app = world.registered_app(app_id, [identifier])
    ahead = later(3600)
    app.configure(run_task_error="org.example.Again.Error",
                  resubmit_on_run_task={"identifier": identifier, "kind": "refresh", "earliest_begin": ahead})
    app.submit(identifier, "refresh", earliest_begin=later(1800))
    expect_error("Unavailable", agent.simulate_launch, app_id, identifier)
    assert app.events_of("Resubmitted"), app.app_events()

    def check():
        (pending,) = agent.list_pending()
        assert pending["identifier"] == identifier and pending["earliest_begin"] == ahead, pending
    check()
    (failed,) = agent.events("delivery-failed", app_id=app_id)
    assert "submitted it again meanwhile" in failed["detail"], failed
    agent.stop()
    agent.restart()
    check()


def test_an_apps_run_task_error_of_megabytes_is_quoted_briefly_everywhere(world):
    """An app that answers RunTask with a 4 MB error message: the agent keeps its start and its
    length, in SimulateLaunch's refusal, the request's last error (ListPending, GetPending,
    Explain) and the history. Whole, each delivery stored 4 MB more, ListPending and Explain
    answered 8 MB, and `bgpolicy history` printed 12 MB after three attempts (with 70 MB, ListPending
    could not be answered at all: an array over D-Bus's 64 MiB)."""
    agent = world.start_agent()
    app_id, identifier = "org.example.Verbose", "org.example.Verbose.refresh"
    app = world.registered_app(app_id, [identifier])
    app.configure(run_task_error="org.example.Verbose.Error", run_task_error_message="why " * 1_000_000)
    app.submit(identifier, "refresh", earliest_begin=later(3600))
    for _ in range(3):
        message = expect_error("Unavailable", agent.simulate_launch, app_id, identifier)
        assert "org.example.Verbose.Error: why why" in message and "… (4000000 bytes)" in message, message[:2000]
        assert len(message) < 2000, len(message)
    for replies in (agent.list_pending(), app.pending(), [agent.explain(app_id, identifier)]):
        assert len(json.dumps(replies)) < 4000, len(json.dumps(replies))
    (pending,) = agent.list_pending()
    assert pending["last_attempt_error"].endswith("… (4000000 bytes)"), pending["last_attempt_error"][:2000]
    failures = agent.events("delivery-failed", app_id=app_id)
    assert len(failures) == 3 and all(len(f["detail"]) < 2000 for f in failures), [len(f["detail"]) for f in failures]
    assert len(agent.cli("history", app_id).stdout) < 10_000


def test_a_registration_of_many_long_identifiers_is_recorded_briefly(world):
    """Register takes up to 64 identifiers of up to 255 bytes; its history entry listed them all
    (16 KB), so an app registering again and again with a changed list (4,400 times, 44 s here)
    made `bgpolicy history --limit 10000` fail ('the reply could not be encoded': over D-Bus's
    64 MiB) and the database 81 MB. The entry names those that fit in 512 bytes, then how many
    more."""
    agent = world.start_agent()
    app_id = "org.example.Many"
    identifiers = sorted(f"{app_id}.t{i:02d}" + "x" * (255 - len(app_id) - 4) for i in range(64))
    assert {len(i) for i in identifiers} == {255}
    app = world.app("many")
    for listed in (identifiers, identifiers[:-1]):
        assert app.register(listed, app_id=app_id) == app_id
    entries = agent.events("registered", app_id=app_id)
    assert len(entries) == 2, entries
    for entry, count in zip(entries, (64, 63)):
        assert entry["detail"] == f"registered {identifiers[0]}, {identifiers[1]} and {count - 2} more as unverified", entry
    # A short list is named whole.
    short = world.app("short")
    assert short.register([f"{app_id}2.a", f"{app_id}2.b"], app_id=f"{app_id}2") == f"{app_id}2"
    (entry,) = agent.events("registered", app_id=f"{app_id}2")
    assert entry["detail"] == f"registered {app_id}2.a, {app_id}2.b as unverified", entry


def test_pending_and_history_of_a_known_app_with_nothing_to_show(world):
    """A registered app with nothing pending, or no events in the window, is no error: only
    an app the agent does not know is refused (test_agent)."""
    agent = world.start_agent()
    world.registered_app("org.example.Idle", ["org.example.Idle.refresh"])
    r = agent.cli("pending", "org.example.Idle")
    assert (r.stdout, r.stderr) == ("Nothing is pending for org.example.Idle.\n", ""), r
    assert json.loads(agent.cli("pending", "org.example.Idle", "--json").stdout) == []
    since = str(int(time.time()) + 30)
    r = agent.cli("history", "org.example.Idle", "--since", since)
    assert r.stdout.startswith("No events for org.example.Idle since ") and r.stderr == "", r
    assert json.loads(agent.cli("history", "org.example.Idle", "--since", since, "--json").stdout) == []
    assert [e["event"] for e in json.loads(agent.cli("history", "org.example.Idle", "--json").stdout)] == ["registered"]


def test_history_is_the_newest_entries_oldest_first(world):
    agent = world.start_agent()
    app_id, identifier = "org.example.Log", "org.example.Log.refresh"
    app = world.registered_app(app_id, [identifier])
    for _ in range(60):  # 120 entries: submitted, cancelled
        app.submit(identifier, "refresh", earliest_begin=later(3600))
        app.cancel(identifier)
    mine = [e for e in agent.history() if e.get("app_id") == app_id]
    assert len(mine) == 121 and mine[0]["event"] == "registered", [e["event"] for e in mine[:3]]
    default = agent.admin("GetHistory", "xu", (0, 0), "(aa{sv})")[0]
    assert len(default) == 100, len(default)
    assert [e["id"] for e in default] == sorted(e["id"] for e in default), "oldest first"
    assert default[-1]["event"] == "cancelled" and default[-1]["id"] == mine[-1]["id"], default[-1]
    three = agent.admin("GetHistory", "xu", (0, 3), "(aa{sv})")[0]
    assert [e["id"] for e in three] == [e["id"] for e in mine[-3:]]
    middle = mine[60]["time"]
    since = agent.admin("GetHistory", "xu", (int(middle) + 1, 10000), "(aa{sv})")[0]
    assert all(e["time"] >= int(middle) + 1 for e in since), since[:2]
    # The CLI keeps the app's newest --limit, and says when that left some out (test_cli).
    r = agent.cli("history", app_id, "--limit", "3", "--json")
    assert [e["id"] for e in json.loads(r.stdout)] == [e["id"] for e in mine[-3:]]
    assert r.stderr.startswith("bgpolicy: note: only the newest 3 events are shown;"), r.stderr
    assert agent.cli("history", app_id, "--limit", "121").stderr == ""


def test_an_apps_history_is_its_own_newest_entries_however_many_other_apps_have(world):
    """`GetAppHistory` and `bgpolicy history APP` give the app's newest entries even when other
    apps have more than 10,000 (the most GetHistory gives) newer ones: the CLI took the newest
    10,000 of every app and kept the app's, so a quiet app beside a busy one had no history."""
    agent = world.start_agent()
    app_id, identifier = "org.example.Quiet", "org.example.Quiet.refresh"
    app = world.registered_app(app_id, [identifier])
    app.submit(identifier, "refresh", earliest_begin=later(3600))
    app.cancel(identifier)
    mine = [e for e in agent.history() if e.get("app_id") == app_id]
    assert [e["event"] for e in mine] == ["registered", "submitted", "cancelled"], mine
    # A busy app's 10,001 newer entries, written while the agent is stopped (its only writer).
    agent.stop()
    db = sqlite3.connect(agent.world.tmp / "state" / "bgpolicy" / "bgpolicy.sqlite")
    with db:
        newer = mine[-1]["time"] + 1
        db.executemany(
            "INSERT INTO history (time, app_id, event, detail) VALUES (?, 'org.example.Busy', 'cancelled', 'x')",
            [(newer + i / 1000,) for i in range(10_001)])
    db.close()
    agent.restart()
    assert all(e.get("app_id") == "org.example.Busy" for e in agent.history()), "GetHistory: the busy app's"

    got = agent.admin("GetAppHistory", "sxu", (app_id, 0, 0), "(aa{sv})")[0]
    assert [e["id"] for e in got] == [e["id"] for e in mine], got
    two = agent.admin("GetAppHistory", "sxu", (app_id, 0, 2), "(aa{sv})")[0]
    assert [e["id"] for e in two] == [e["id"] for e in mine[-2:]], two
    since = agent.admin("GetAppHistory", "sxu", (app_id, int(mine[-1]["time"]) + 1, 0), "(aa{sv})")[0]
    assert since == [], since
    r = agent.cli("history", app_id, "--json")
    assert [e["id"] for e in json.loads(r.stdout)] == [e["id"] for e in mine], r.stdout[:300]
    assert r.stderr == "", r.stderr
    r = agent.cli("history", app_id, "--limit", "2", "--json")
    assert [e["id"] for e in json.loads(r.stdout)] == [e["id"] for e in mine[-2:]]
    assert r.stderr.startswith("bgpolicy: note: only the newest 2 events are shown;"), r.stderr
    # An app that is not registered but has entries (the busy one's came with no registration)
    # has its entries, and none after them; only one with neither is NotRegistered, as Explain
    # refuses it. (Asked after its entries, the busy app was NotRegistered.)
    assert len(agent.admin("GetAppHistory", "sxu", ("org.example.Busy", 0, 3), "(aa{sv})")[0]) == 3
    assert agent.admin("GetAppHistory", "sxu", ("org.example.Busy", int(newer) + 100, 0), "(aa{sv})")[0] == []
    message = expect_error("NotRegistered", agent.admin, "GetAppHistory", "sxu", ("org.example.Nobody", 0, 0), "(aa{sv})")
    assert "org.example.Nobody" in message and "bgpolicy apps" in message, message


def test_history_prints_an_apps_text_without_control_or_reordering_characters(world):
    """An app's text reaches `bgpolicy history` with its control characters (an escape sequence,
    a newline, a bell) and the invisible ones that reorder what follows (a right-to-left
    override, an isolate) replaced, so that it cannot restyle the terminal or make the rest of
    the line read as something else."""
    agent = world.start_agent()
    app = world.registered_app("org.example.Evil", ["org.example.Evil.refresh"])
    app.begin_background_task("evil\x1b[31mRED\nline2\u202eRLO\u2066x\u2069\x07")
    out = agent.cli("history", "org.example.Evil").stdout
    assert "background task 'evil?[31mRED line2?RLO?x??' began" in out, out
    assert not set(out) & {"\x1b", "\x07", "\u202e", "\u2066", "\u2069"}, ascii(out)


def test_errors_quote_long_input_briefly(world):
    """An error quotes what the caller sent, but a 60,000-byte identifier or app id is quoted
    by its start and its length: the message stays a line a person can read. (60,000: the
    agent reads no call's arguments past 64 KiB, test_dbus_limits.py.)"""
    agent = world.start_agent()
    app = world.registered_app("org.example.Long", ["org.example.Long.refresh"])
    long = "x" * 60_000
    messages = [
        expect_error("NotPermitted", app.submit, long, "refresh"),
        expect_error("UnknownTask", app.cancel, long),
        expect_error("InvalidArgument", agent.explain, long, "org.example.Long.refresh"),
        expect_error("InvalidArgument", world.app("another").register, [long + "/"], app_id="org.example.Other"),
    ]
    for message in messages:
        assert len(message) < 400 and " bytes)" in message and message.count("x") < 100, message[:500]


def test_earliest_begin_past_the_limit_says_by_how_much(world):
    """A Submit one second past the 7-day limit on `earliest_begin` says so, and gives the
    latest time allowed."""
    agent = world.start_agent()
    app = world.registered_app("org.example.Late", ["org.example.Late.refresh"])
    begin = later(7 * 86400 + 2)
    message = expect_error("InvalidArgument", app.submit, "org.example.Late.refresh", "refresh", earliest_begin=begin)
    assert f"earliest_begin {begin} is " in message and "past the limit of 7 days ahead" in message, message
    latest = int(message.split("the latest allowed now is ")[1].split(")")[0])
    assert begin - 5 <= latest < begin, (begin, latest)


def test_simulate_launch_waits_as_long_as_the_agent_waits_for_the_app(world):
    """`bgpolicy simulate launch` of an app that does not answer RunTask (stopped here) waits
    for the agent, which gives up on the app after 10 s: the person sees the agent's answer
    (Unavailable, status 1), not "bgpolicyd did not answer" (status 69)."""
    import signal
    agent = world.start_agent()
    app = world.registered_app("org.example.Slow", ["org.example.Slow.refresh"])
    app.submit("org.example.Slow.refresh", "refresh", earliest_begin=later(3600))
    os.kill(app.pid, signal.SIGSTOP)
    try:
        cli = agent.cli("simulate", "launch", "org.example.Slow", "org.example.Slow.refresh", check=False, timeout=60)
    finally:
        os.kill(app.pid, signal.SIGCONT)
    assert cli.returncode == 1, (cli.returncode, cli.stdout, cli.stderr)
    assert "(Unavailable)" in cli.stderr and "did not answer RunTask in time" in cli.stderr, cli.stderr


def test_an_app_that_answers_run_task_too_late_is_told_to_stop(world):
    """An app whose main loop is busy past the agent's 10 s for RunTask (stopped here) reads the
    call late and starts the task. The agent, which put the request back pending with the
    failure counted, tells it to stop then (ExpireTask, a call that wants no answer): before,
    nothing did, the app's SetTaskCompleted was refused (UnknownTask), and the work ran again
    in the next window."""
    import signal
    agent = world.start_agent()
    app_id, identifier = "org.example.Late", "org.example.Late.refresh"
    app = world.registered_app(app_id, [identifier])
    app.submit(identifier, "refresh", earliest_begin=later(3600))
    os.kill(app.pid, signal.SIGSTOP)
    try:
        message = expect_error("Unavailable", agent.admin, "SimulateLaunch", "ss", (app_id, identifier), timeout=30)
    finally:
        os.kill(app.pid, signal.SIGCONT)
    assert "did not answer RunTask in time" in message, message
    run = app.wait_run_task(identifier, timeout=5)
    expire = app.wait_event("ExpireTask", lambda e: e["task_id"] == run["task_id"], timeout=5)
    assert expire["no_reply"] is True, expire
    (pending,) = agent.list_pending()
    assert pending["identifier"] == identifier and pending["delivery_attempts"] == 1, pending
    (failed,) = agent.events("delivery-failed", app_id=app_id)
    assert failed["task_id"] == run["task_id"] and "ExpireTask sent" in failed["detail"], failed


def test_the_timer_goes_with_the_only_work_it_was_for(world):
    """The agent keeps one timer, for the next time something can start (GetStatus's
    `next_window`), and none when nothing can. Work due in ten minutes sets it; cancelled, or
    switched off, the timer goes with it rather than waking the agent for nothing."""
    agent = world.start_agent()
    app = world.registered_app("org.example.Sync", ["org.example.Sync.refresh"])

    def submit():
        app.submit("org.example.Sync.refresh", "refresh", earliest_begin=later(600))
        th.wait_until(lambda: "next_window" in agent.status(), 5, "the timer is set")

    submit()
    app.cancel("org.example.Sync.refresh")
    th.wait_until(lambda: "next_window" not in agent.status(), 5, "the timer goes with the cancelled work")
    submit()
    app.scheduler("CancelAll")
    th.wait_until(lambda: "next_window" not in agent.status(), 5, "the timer goes with CancelAll")
    submit()
    agent.set_app_enabled("org.example.Sync", False)
    th.wait_until(lambda: "next_window" not in agent.status(), 5, "the timer goes when the app is switched off")
    agent.set_app_enabled("org.example.Sync", True)
    th.wait_until(lambda: "next_window" in agent.status(), 5, "the timer comes back with the switch")


def test_the_timer_follows_work_replaced_run_or_left_unreachable(world):
    """The timer is set for the work as it is now: a request resubmitted for later moves it
    later, one run by SimulateLaunch takes it away, and so does an app without a bus_name
    leaving the bus (its work waits for it to register again). Each left the old timer, which
    woke the agent once for nothing (an evaluation of the one app can only bring it forward)."""
    agent = world.start_agent()
    app = world.registered_app("org.example.Sync", ["org.example.Sync.refresh"])

    def next_window():
        return agent.status().get("next_window")

    soon = later(600)
    app.submit("org.example.Sync.refresh", "refresh", earliest_begin=soon)
    th.wait_until(lambda: next_window() is not None and abs(next_window() - soon) <= 2, 5, "the timer for 10 min")
    hour = later(3600)
    app.submit("org.example.Sync.refresh", "refresh", earliest_begin=hour)
    th.wait_until(lambda: next_window() is not None and abs(next_window() - hour) <= 2, 5,
                  f"the timer moved to the resubmitted time (it is {next_window()}, {hour} wanted)")

    agent.simulate_launch("org.example.Sync", "org.example.Sync.refresh")
    app.wait_run_task("org.example.Sync.refresh", timeout=10)
    th.wait_until(lambda: next_window() is None, 5, f"the timer gone with the work run (it is {next_window()})")

    later_app = world.registered_app("org.example.Away", ["org.example.Away.refresh"])
    later_app.submit("org.example.Away.refresh", "refresh", earliest_begin=soon)
    th.wait_until(lambda: next_window() is not None, 5, "the timer for the app's work")
    later_app.quit()
    th.wait_until(lambda: next_window() is None, 5, f"the timer gone with the app's reach (it is {next_window()})")
    assert [p["identifier"] for p in agent.list_pending()] == ["org.example.Away.refresh"]


def test_report_usage(world):
    agent = world.start_agent()
    app = world.registered_app("org.example.Used", ["org.example.Used.refresh"])
    message = expect_error("InvalidArgument", app.scheduler, "ReportUsage", "s", ("sideways",))
    assert "foreground" in message and "background" in message, message
    before = agent.app_record("org.example.Used").get("last_used_at", 0)
    time.sleep(1.1)
    app.scheduler("ReportUsage", "s", ("foreground",))
    app.scheduler("ReportUsage", "s", ("background",))
    after = agent.app_record("org.example.Used")["last_used_at"]
    assert after > before and abs(after - time.time()) < 5, (before, after)


# MARK: Limits and errors


def test_pending_limits_one_refresh_ten_processing(world):
    world.start_agent()
    app_id = "org.example.Busy"
    processing = [f"{app_id}.p{i}" for i in range(11)]
    refreshes = [f"{app_id}.r1", f"{app_id}.r2"]
    app = world.registered_app(app_id, processing + refreshes)
    tomorrow = later(86400)
    for identifier in processing[:10]:
        app.submit(identifier, "processing", earliest_begin=tomorrow)
    message = expect_error("TooManyPendingRequests", app.submit, processing[10], "processing", earliest_begin=tomorrow)
    assert "10" in message and "processing" in message, message
    app.submit(refreshes[0], "refresh", earliest_begin=tomorrow)
    message = expect_error("TooManyPendingRequests", app.submit, refreshes[1], "refresh", earliest_begin=tomorrow)
    assert "refresh" in message, message
    assert sorted(p["identifier"] for p in app.pending()) == sorted(processing[:10] + refreshes[:1])
    # At the limit, resubmitting a pending identifier replaces it: no new slot is needed.
    app.submit(processing[3], "processing", earliest_begin=tomorrow, expected_duration=90)
    app.submit(refreshes[0], "refresh", earliest_begin=tomorrow + 60)
    assert len(app.pending()) == 11
    # Cancelling one frees its slot.
    app.cancel(processing[0])
    app.submit(processing[10], "processing", earliest_begin=tomorrow)
    assert len(app.pending()) == 11


def test_resubmitting_an_identifier_replaces_its_request(world):
    agent = world.start_agent()
    app_id, identifier = "org.example.Replace", "org.example.Replace.clean"
    app = world.registered_app(app_id, [identifier])
    first, second = later(3600), later(7200)
    app.submit(identifier, "processing", earliest_begin=first, expected_duration=60)
    app.submit(identifier, "processing", earliest_begin=second, requires_network=True,
               requires_external_power=True, expected_duration=120)
    pending = app.pending()
    assert len(pending) == 1, pending
    p = pending[0]
    assert (p["identifier"], p["kind"], p["earliest_begin"], p["requires_network"], p["requires_external_power"],
            p["expected_duration"]) == (identifier, "processing", second, True, True, 120), p
    listed = [q for q in agent.list_pending() if q["app_id"] == app_id]
    assert len(listed) == 1 and listed[0]["earliest_begin"] == second and listed[0]["expected_duration"] == 120, listed
    agent.wait_history("replaced", identifier=identifier, timeout=3)


def test_not_registered_before_register_and_not_permitted_for_undeclared_identifiers(world):
    world.start_agent()
    app = world.app("newcomer")
    calls = [
        ("Submit", "ssa{sv}", ("org.example.New.refresh", "refresh", {})),
        ("Cancel", "s", ("org.example.New.refresh",)),
        ("CancelAll", "", ()),
        ("GetPending", "", ()),
        ("Explain", "s", ("org.example.New.refresh",)),
        ("SetTaskCompleted", "sbs", ("t1", True, "")),
        ("BeginBackgroundTask", "s", ("save",)),
        ("EndBackgroundTask", "s", ("token",)),
        ("ReportUsage", "s", ("foreground",)),
        ("GetRefreshStatus", "", ()),
    ]
    for method, signature, args in calls:
        message = expect_error("NotRegistered", app.scheduler, method, signature, args)
        assert "Register" in message, f"{method}: the message should say to call Register first: {message!r}"

    app.register(["org.example.New.refresh"], app_id="org.example.New")
    message = expect_error("NotPermitted", app.submit, "org.example.New.other", "refresh")
    assert "org.example.New.other" in message and "Register" in message, message
    assert app.pending() == []


def type_words(code, *words):
    """Ways a message can name the D-Bus type `code` it wanted."""
    return (f"'{code}'", f'"{code}"', f"({code})", f" {code} ", f"type {code}", *words)


# Each needle is a word the message must hold, or a tuple of which it must hold one: what was
# wrong, and what to send instead.
@pytest.mark.parametrize("label,kind,options,needles", [
    ("earliest_begin 8 days ahead", "refresh", lambda: th.submit_options(earliest_begin=later(8 * 86400)),
     ["earliest_begin", ("7 days", "7d", "seven days", "a week", "one week")]),
    ("unknown kind", "nonsense", lambda: {}, ["nonsense", "refresh", "processing"]),
    ("requires_network as a string", "processing", lambda: {"requires_network": th.GLib.Variant("s", "yes")},
     ["requires_network", type_words("b", "boolean")]),
    ("earliest_begin as a string", "refresh", lambda: {"earliest_begin": th.GLib.Variant("s", "tomorrow")},
     ["earliest_begin", type_words("x", "int64", "Unix seconds", "integer")]),
    ("expected_duration as a signed int", "processing", lambda: {"expected_duration": th.GLib.Variant("i", -5)},
     ["expected_duration", type_words("u", "uint32", "unsigned")]),
    ("unknown option", "refresh", lambda: {"priority": th.GLib.Variant("u", 9)},
     ["priority", ("earliest_begin", "requires_network")]),
])
def test_invalid_submit_arguments_say_what_to_do(world, label, kind, options, needles):
    world.start_agent()
    app = world.registered_app("org.example.Picky", ["org.example.Picky.task"])
    message = expect_error("InvalidArgument", app.submit, "org.example.Picky.task", kind, options())
    for needle in needles:
        choices = needle if isinstance(needle, tuple) else (needle,)
        assert any(c in message for c in choices), \
            f"{label}: the message should mention {' or '.join(map(repr, choices))}: {message!r}"
    assert app.pending() == []


def test_invalid_register_arguments(world):
    world.start_agent()
    app = world.app("badreg")
    expect_error("InvalidArgument", app.register, [], app_id="org.example.Bad")
    expect_error("InvalidArgument", app.register, ["has space"], app_id="org.example.Bad")
    expect_error("InvalidArgument", app.register, [f"org.example.Bad.t{i}" for i in range(65)], app_id="org.example.Bad")
    expect_error("InvalidArgument", app.register, ["org.example.Bad.t"], app_id="not an id!")
    # A leading '-' would be an option to `bgpolicy explain APP ID`: refused, saying why.
    message = expect_error("InvalidArgument", app.register, ["org.example.Bad.t"], app_id="-org.example.Bad")
    assert "may not begin with '-'" in message, message
    message = expect_error("InvalidArgument", app.register, ["-refresh"], app_id="org.example.Bad")
    assert "may not begin with '-'" in message, message
    expect_error("InvalidArgument", app.register, ["org.example.Bad.t"],
                 options={"app_id": th.GLib.Variant("s", "org.example.Bad"), "colour": th.GLib.Variant("s", "red")})
    expect_error("InvalidArgument", app.register, ["org.example.Bad.t"],
                 options={"app_id": th.GLib.Variant("u", 7)})
    # 64 identifiers is the limit, not past it.
    assert app.register([f"org.example.Bad.t{i}" for i in range(64)], app_id="org.example.Bad") == "org.example.Bad"


# MARK: Running by itself


def conditions_on_ac(agent):
    """What `bgpolicy status` says once udev has been read: on AC (the testbed's charger)."""
    def read():
        conditions = json.loads(agent.cli("status", "--json").stdout)["conditions"]
        return conditions if "udev" in conditions["sources"] else None
    conditions = th.wait_until(read, 5, "udev is a live source in `bgpolicy status --json`")
    assert conditions.get("on_battery") is False, conditions
    return conditions


@pytest.mark.parametrize("options", [{}, {"requires_external_power": True}], ids=["no-gates", "external-power"])
def test_a_runnable_refresh_runs_by_itself(world, options):
    agent = world.start_agent(config="[slices]\nrefresh = 5s\nexpiration_warning = 1s\n")
    conditions_on_ac(agent)
    app_id, identifier = "org.example.Auto", "org.example.Auto.refresh"
    app = world.registered_app(app_id, [identifier])
    app.configure(complete_after=0.2, result="new-data")
    app.submit(identifier, "refresh", **options)
    run = app.wait_run_task(identifier, timeout=15)
    assert run["kind"] == "refresh" and run["seconds"] == 5, run
    entry = agent.wait_history("completed", task_id=run["task_id"], timeout=5)
    assert entry["result"] == "new-data"
    assert app.pending() == []


def test_on_battery_a_request_for_external_power_waits_and_says_why(tmp_path):
    with th.open_world(tmp_path, power="battery") as world:
        agent = world.start_agent(config="[slices]\nrefresh = 5s\nexpiration_warning = 1s\n")
        th.wait_until(lambda: agent.status()["conditions"].get("on_battery") is True, 5, "on battery")
        app_id = "org.example.Plugged"
        app = world.registered_app(app_id, [f"{app_id}.refresh"])
        app.submit(f"{app_id}.refresh", "refresh", requires_external_power=True)
        time.sleep(2)
        assert app.events_of("RunTask") == []
        explained = app.explain(f"{app_id}.refresh")
        assert explained["state"] == "pending" and explained["runnable"] is False, explained
        assert "no-external-power" in explained["blocking"], explained


def test_two_tasks_due_together_share_one_slice(world):
    # Processing runs only while idle: the session is locked (logind mock on a private system bus).
    world.start_logind(locked=True)
    agent = world.start_agent(config="[slices]\nprocessing = 6s\nexpiration_warning = 1s\n")
    th.wait_until(lambda: agent.status()["conditions"].get("locked") is True, 5, "the agent sees the locked session")
    app_id = "org.example.Pair"
    a, b = f"{app_id}.a", f"{app_id}.b"
    app = world.registered_app(app_id, [a, b])
    app.configure(complete_after=0.5, result="no-data")
    due = later(3)
    app.submit(a, "processing", earliest_begin=due)
    app.submit(b, "processing", earliest_begin=due)
    run_a = app.wait_run_task(a, timeout=15)
    run_b = app.wait_run_task(b, timeout=3)
    assert run_a["task_id"] != run_b["task_id"]
    assert run_a["info"]["slice_id"] == run_b["info"]["slice_id"], (run_a, run_b)
    assert run_a["info"]["deadline"] == run_b["info"]["deadline"], (run_a, run_b)
    assert run_a["seconds"] == run_b["seconds"] == 6
    assert run_a["time"] >= due - 1, f"ran before its earliest_begin: {run_a['time']} < {due}"
    for run in (run_a, run_b):
        assert agent.wait_history("completed", task_id=run["task_id"], timeout=5)["result"] == "no-data"


def test_a_shared_slice_that_overruns_is_one_violation(world):
    """Two tasks the agent put in one slice both overrun it: one violation, not two (sharing a
    slice is the agent's choice), in the running agent and after a restart. Seven days on it no
    longer counts, and the agent lets it go while it runs, not only at its next start: its rows
    are moved back to 7 days less half a minute ago while the agent is stopped (the agent is the
    only writer), so that it still counts at the start and stops counting half a minute later."""
    world.start_logind(locked=True)
    agent = world.start_agent(config="[slices]\nprocessing = 3s\nexpiration_warning = 1s\n")
    th.wait_until(lambda: agent.status()["conditions"].get("locked") is True, 5, "the agent sees the locked session")
    app_id = "org.example.Overrun"
    a, b = f"{app_id}.a", f"{app_id}.b"
    app = world.registered_app(app_id, [a, b])
    due = later(2)
    app.submit(a, "processing", earliest_begin=due)
    app.submit(b, "processing", earliest_begin=due)
    run_a = app.wait_run_task(a, timeout=15)
    run_b = app.wait_run_task(b, timeout=3)
    assert run_a["info"]["slice_id"] == run_b["info"]["slice_id"], (run_a, run_b)
    for run in (run_a, run_b):
        agent.wait_history("expired", task_id=run["task_id"], timeout=8)
    assert agent.app_record(app_id)["violations"] == 1
    agent.stop()
    agent.restart()
    assert agent.app_record(app_id)["violations"] == 1

    agent.stop()
    db = sqlite3.connect(world.tmp / "state" / "bgpolicy" / "bgpolicy.sqlite")
    with db:
        moved = db.execute("UPDATE history SET time = ? WHERE app_id = ? AND event = 'expired'",
                           (time.time() - 7 * 86400 + 30, app_id)).rowcount
    db.close()
    assert moved == 2
    agent.restart()
    assert agent.app_record(app_id)["violations"] == 1
    th.wait_until(lambda: agent.app_record(app_id)["violations"] == 0, 45,
                  "the violation to stop counting 7 days after it, while the agent runs")


def test_an_app_that_vanishes_mid_slice_is_recorded_vanished(world):
    agent, app, run = running_app(world, "org.example.Gone")
    app.kill()
    entry = agent.wait_history("vanished", task_id=run["task_id"], timeout=5)
    assert entry["app_id"] == "org.example.Gone"
    assert agent.status()["running"] == []
    th.wait_until(lambda: agent.app_record("org.example.Gone")["connected"] is False, 5, "ListApps connected false")


def test_set_task_completed_with_another_apps_task_is_unknown(world):
    agent, app, run = running_app(world, "org.example.Owner")
    other = world.registered_app("org.example.Thief", ["org.example.Thief.refresh"])
    expect_error("UnknownTask", other.set_task_completed, run["task_id"], True, "new-data")
    expect_error("UnknownTask", other.set_task_completed, "no-such-task", True, "new-data")
    assert len(agent.status()["running"]) == 1
    assert app.complete(run["task_id"], True, "failed")["error"] is None
    assert agent.wait_history("completed", task_id=run["task_id"], timeout=5)["app_id"] == "org.example.Owner"


def test_set_task_completed_rejects_an_unknown_result(world):
    agent, app, run = running_app(world, "org.example.Result")
    message = expect_error("InvalidArgument", app.set_task_completed, run["task_id"], True, "great")
    assert "great" in message and "new-data" in message, message
    app.set_task_completed(run["task_id"], True, "")
    agent.wait_history("completed", task_id=run["task_id"], timeout=5)


# MARK: Background tasks (beginBackgroundTask)


def test_begin_background_task_grants_thirty_seconds(world):
    agent = world.start_agent()
    app = world.registered_app("org.example.Saver", ["org.example.Saver.refresh"])
    token, seconds = app.begin_background_task("save document")
    assert token and seconds == 30, (token, seconds)
    app.end_background_task(token)
    agent.wait_history("background-task-began", app_id="org.example.Saver", timeout=3)
    agent.wait_history("background-task-ended", app_id="org.example.Saver", timeout=3)
    expect_error("UnknownTask", app.end_background_task, token)
    expect_error("UnknownTask", app.end_background_task, "not-a-token")


def test_an_app_has_at_most_sixteen_background_tasks_under_way(world):
    agent = world.start_agent()
    app = world.registered_app("org.example.Saver", ["org.example.Saver.refresh"])
    other = world.registered_app("org.example.Mailer", ["org.example.Mailer.refresh"])
    tokens = [app.begin_background_task(f"save {i}")[0] for i in range(16)]
    message = expect_error("LimitsExceeded", app.begin_background_task, "one more")
    assert "16" in message and "EndBackgroundTask" in message, message
    # Another app is not held by this one's.
    other.end_background_task(other.begin_background_task("send")[0])
    # Ending one makes room for one.
    app.end_background_task(tokens.pop())
    tokens.append(app.begin_background_task("one more")[0])
    expect_error("LimitsExceeded", app.begin_background_task, "and another")
    for token in tokens:
        app.end_background_task(token)
    assert len(agent.events("background-task-began", app_id="org.example.Saver")) == 17


def test_background_task_is_warned_then_expires_if_not_ended(world):
    agent = world.start_agent(config="[slices]\ncompletion = 3s\nexpiration_warning = 1s\n")
    app = world.registered_app("org.example.Saver", ["org.example.Saver.refresh"])
    begun = time.monotonic()
    token, seconds = app.begin_background_task("upload")
    assert seconds == 3
    expire = app.wait_event("ExpireTask", lambda e: e["task_id"] == token, timeout=5)
    assert 1.4 <= expire["mono"] - begun <= 2.8, expire["mono"] - begun
    app.end_background_task(token)  # in time: after the warning, before the end
    agent.wait_history("background-task-ended", app_id="org.example.Saver", timeout=3)
    assert agent.app_record("org.example.Saver")["violations"] == 0

    forgotten, _ = app.begin_background_task("forgotten")
    app.wait_event("ExpireTask", lambda e: e["task_id"] == forgotten, timeout=5)
    agent.wait_history("background-task-expired", app_id="org.example.Saver", timeout=5)
    assert agent.app_record("org.example.Saver")["violations"] == 1
    expect_error("UnknownTask", app.end_background_task, forgotten)


# MARK: The user's switches and Explain


def test_switching_an_app_or_everything_off(world):
    agent = world.start_agent()
    app_id, identifier = "org.example.Switch", "org.example.Switch.refresh"
    app = world.registered_app(app_id, [identifier])
    assert app.refresh_status() == "available"

    agent.cli("disable", app_id)
    assert app.refresh_status() == "denied"
    record = agent.app_record(app_id)
    assert record["enabled"] is False and record["refresh_status"] == "denied", record
    message = expect_error("Unavailable", app.submit, identifier, "refresh")
    assert app_id in message or "switched" in message or "disabled" in message, message
    agent.set_app_enabled(app_id, True)
    assert app.refresh_status() == "available"

    agent.cli("disable", "--all")
    assert app.refresh_status() == "restricted"
    assert agent.status()["global_enabled"] is False
    expect_error("Unavailable", app.submit, identifier, "refresh")
    # The app's switch acts under the global one: `enable APP` says the app still gets nothing
    # (it said "on" alone, and nothing ran).
    said = agent.cli("enable", app_id).stdout
    assert said == f"Background work is on for {app_id}, but off for every app until 'bgpolicy enable --all'.\n", said
    assert json.loads(agent.cli("enable", app_id, "--json").stdout) == {
        "app_id": app_id, "enabled": True, "global_enabled": False}
    assert app.refresh_status() == "restricted"
    agent.set_global_enabled(True)
    assert agent.cli("enable", app_id).stdout == f"Background work is on for {app_id}.\n"
    # And the other way: everything switched on again names the app still switched off alone.
    agent.cli("disable", app_id)
    agent.cli("disable", "--all")
    said = agent.cli("enable", "--all").stdout
    assert said == f"Background work is on, except for {app_id}, switched off by itself ('bgpolicy enable {app_id}').\n", said
    assert json.loads(agent.cli("enable", "--all", "--json").stdout) == {
        "global_enabled": True, "apps_switched_off": [app_id]}
    assert app.refresh_status() == "denied"
    agent.cli("enable", app_id)
    assert agent.cli("enable", "--all").stdout == "Background work is on.\n"
    assert app.refresh_status() == "available"
    app.submit(identifier, "refresh", earliest_begin=later(3600))
    expect_error("NotRegistered", agent.set_app_enabled, "org.example.Nobody", False)


def test_switching_off_ends_running_slices_at_once_without_a_violation(world):
    """The user switches an app off (`bgpolicy disable APP`) while a slice of it runs: the task
    is sent `ExpireTask` at once and its slice closed as `switched-off`, no violation. So with
    `bgpolicy disable --all` for another app's. (Nothing was sent: the task ran to its deadline
    and ended `expired`, a violation against the app the user had just switched off.) A slice
    of an app left on, when one other app is switched off, runs on. Slices of 6 s, warned 1 s
    before their end: the switch's `ExpireTask` comes well before the warning would, and the
    test waits past both deadlines to see that no timer of the closed slices was left armed."""
    agent = world.start_agent(config="[slices]\nrefresh = 6s\nexpiration_warning = 1s\n")
    apps = {}
    for app_id in ("org.example.Sync", "org.example.Other"):
        app = world.registered_app(app_id, [f"{app_id}.refresh"])
        app.submit(f"{app_id}.refresh", "refresh", earliest_begin=later(3600))
        apps[app_id] = app
    sync, other = apps["org.example.Sync"], apps["org.example.Other"]
    agent.simulate_launch("org.example.Sync", "org.example.Sync.refresh")
    run = sync.wait_run_task("org.example.Sync.refresh", timeout=5)
    agent.simulate_launch("org.example.Other", "org.example.Other.refresh")
    other_run = other.wait_run_task("org.example.Other.refresh", timeout=5)
    assert run["seconds"] == other_run["seconds"] == 6, (run, other_run)
    sent = time.monotonic()
    agent.cli("disable", "org.example.Sync")
    expire = sync.wait_event("ExpireTask", timeout=3)
    # At once: not the deadline's warning, due 5 s into the slice.
    assert expire["task_id"] == run["task_id"] and expire["mono"] - sent < 1.5, (expire, sent)
    assert expire["mono"] - run["mono"] < 3.5, ("ExpireTask came as late as the deadline's warning", expire, run)
    entry = agent.wait_history("switched-off", task_id=run["task_id"], timeout=3)
    assert entry["detail"] == "expired because the user switched the app's background work off; not a violation", entry
    assert [e["event"] for e in agent.events(task_id=run["task_id"])] == ["delivered", "expiration-warned", "switched-off"]
    assert agent.app_record("org.example.Sync")["violations"] == 0
    assert [r["app_id"] for r in agent.status()["running"]] == ["org.example.Other"]
    assert other.events_of("ExpireTask") == []
    expect_error("UnknownTask", sync.set_task_completed, run["task_id"], True, "new-data")

    agent.cli("disable", "--all")
    other.wait_event("ExpireTask", lambda e: e["task_id"] == other_run["task_id"], timeout=3)
    entry = agent.wait_history("switched-off", task_id=other_run["task_id"], timeout=3)
    assert entry["detail"] == "expired because the user switched background work off for all apps; not a violation", entry
    assert agent.app_record("org.example.Other")["violations"] == 0
    assert agent.status()["running"] == []

    # Past both deadlines (and their warnings): the closed slices' timers were cancelled, so
    # neither app is warned again, no slice ends `expired`, and no violation is counted.
    time.sleep(max(0, max(run["mono"], other_run["mono"]) + 6 + 1.5 - time.monotonic()))
    assert agent.events("expired") == [], "a switched-off slice also expired at its deadline"
    assert [e["task_id"] for e in sync.events_of("ExpireTask")] == [run["task_id"]]
    assert [e["task_id"] for e in other.events_of("ExpireTask")] == [other_run["task_id"]]
    for app_id in apps:
        assert agent.app_record(app_id)["violations"] == 0, agent.app_record(app_id)
    assert [e["event"] for e in agent.events(task_id=run["task_id"])] == ["delivered", "expiration-warned", "switched-off"]
    assert [e["event"] for e in agent.events(task_id=other_run["task_id"])] == \
        ["delivered", "expiration-warned", "switched-off"]


def test_processing_ends_when_the_user_comes_back(world):
    """Processing runs only while the session is idle. A processing task running when the user
    unlocks the session is sent `ExpireTask` at once and closed as `user-returned`, no violation
    (it ran on under the user to its deadline before). A processing task `SimulateLaunch` started,
    which ignores the rules, runs on."""
    logind = world.start_logind(locked=True)
    agent = world.start_agent(config="[slices]\nprocessing = 30s\nexpiration_warning = 2s\n")
    th.wait_until(lambda: agent.status()["conditions"].get("locked") is True, 5, "the agent sees the locked session")
    app_id = "org.example.Tidy"
    app = world.registered_app(app_id, [f"{app_id}.processing"])
    app.submit(f"{app_id}.processing", "processing", earliest_begin=later(1))
    run = app.wait_run_task(f"{app_id}.processing", timeout=15)
    _, forced, forced_run = running_app(world, "org.example.Forced", kind="processing")
    assert len(agent.status()["running"]) == 2

    sent = time.monotonic()
    logind.call("org.freedesktop.login1.Session", "SetLockedHint", "b", (False,), path=logind.session_path)
    expire = app.wait_event("ExpireTask", timeout=3)
    assert expire["task_id"] == run["task_id"] and expire["mono"] - sent < 1.5, (expire, sent)
    entry = agent.wait_history("user-returned", task_id=run["task_id"], timeout=3)
    assert entry["detail"].startswith("expired because the user came back"), entry
    assert entry["result"] == "failed", entry
    assert [e["event"] for e in agent.events(task_id=run["task_id"])] == ["delivered", "expiration-warned", "user-returned"]
    assert agent.app_record(app_id)["violations"] == 0
    expect_error("UnknownTask", app.set_task_completed, run["task_id"], True, "no-data")
    # The forced one runs on, and the unlocked session starts no new processing.
    assert [r["app_id"] for r in agent.status()["running"]] == ["org.example.Forced"]
    assert forced.events_of("ExpireTask") == []
    app.submit(f"{app_id}.processing", "processing")
    time.sleep(1.5)
    assert len(app.events_of("RunTask")) == 1
    assert "not-idle" in app.explain(f"{app_id}.processing")["blocking"]
    assert forced.complete(forced_run["task_id"], True, "no-data")["error"] is None
    assert agent.wait_history("completed", task_id=forced_run["task_id"], timeout=5)["app_id"] == "org.example.Forced"



def test_processing_that_requires_external_power_ends_when_the_charger_goes(tmp_path):
    """A laptop on AC (the real upowerd under umockdev), the session locked: a backup that asked
    for external power runs in a slice with the app's refresh, which asked for nothing. The
    charger is unplugged: the backup is sent `ExpireTask` at once and closed as `conditions-lost`,
    no violation; the refresh runs on and completes. A processing task `SimulateLaunch` started,
    which ignores the rules, runs on. (Before, the backup ran on, on battery, to its deadline:
    its conditions were checked only when it started.)"""
    with th.open_world(tmp_path, power="battery") as world:
        world.start_logind(locked=True)
        ch.set_charger(world.testbed, world.ac, world.bat, plugged=True)
        world.start_upowerd()
        agent = world.start_agent(config="[slices]\nprocessing = 30s\nrefresh = 30s\nexpiration_warning = 2s\n")
        th.wait_until(lambda: "upower" in agent.status()["conditions"].get("sources", [])
                      and agent.status()["conditions"].get("on_battery") is False
                      and agent.status()["conditions"].get("locked") is True, 10, "UPower's AC and the locked session")
        app_id = "org.example.Backup"
        backup, refresh = f"{app_id}.backup", f"{app_id}.refresh"
        app = world.registered_app(app_id, [backup, refresh])
        due = later(2)
        app.submit(backup, "processing", earliest_begin=due, requires_external_power=True)
        app.submit(refresh, "refresh", earliest_begin=due)
        run = app.wait_run_task(backup, timeout=15)
        refresh_run = app.wait_run_task(refresh, timeout=3)
        assert run["info"]["slice_id"] == refresh_run["info"]["slice_id"], (run, refresh_run)
        _, forced, forced_run = running_app(world, "org.example.Forced", kind="processing")

        sent = ch.set_charger(world.testbed, world.ac, world.bat, plugged=False)
        expire = app.wait_event("ExpireTask", timeout=5)
        assert expire["task_id"] == run["task_id"] and expire["mono"] - sent < 3, (expire, sent)
        entry = agent.wait_history("conditions-lost", task_id=run["task_id"], timeout=3)
        assert entry["detail"] == "expired because the charger was unplugged (it requires external power); not a violation", entry
        assert entry["result"] == "failed", entry
        assert [e["event"] for e in agent.events(task_id=run["task_id"])] == ["delivered", "expiration-warned", "conditions-lost"]
        assert agent.app_record(app_id)["violations"] == 0
        expect_error("UnknownTask", app.set_task_completed, run["task_id"], True, "no-data")
        # Closed, not watched: the CPU monitor's exemption did not turn into a watch first.
        assert "CPU monitor on: the charger went" not in agent.stderr()
        # The refresh and the forced processing run on; the backup waits for the charger.
        assert sorted(r["app_id"] for r in agent.status()["running"]) == [app_id, "org.example.Forced"]
        assert [e["task_id"] for e in app.events_of("ExpireTask")] == [run["task_id"]]
        assert forced.events_of("ExpireTask") == []
        assert app.complete(refresh_run["task_id"], True, "new-data")["error"] is None
        assert agent.wait_history("completed", task_id=refresh_run["task_id"], timeout=5)["result"] == "new-data"
        assert forced.complete(forced_run["task_id"], True, "no-data")["error"] is None
        app.submit(backup, "processing", requires_external_power=True)
        time.sleep(1.5)
        assert len(app.events_of("RunTask")) == 2
        assert "no-external-power" in app.explain(backup)["blocking"]


def test_a_task_that_requires_the_network_ends_when_connectivity_drops(world):
    """NetworkManager (dbusmock) says the machine is fully online, the session is locked: a
    sync that asked for the network runs. Connectivity drops to limited: it is sent `ExpireTask`
    at once and closed as `conditions-lost`, no violation. (It ran on to its deadline.)"""
    world.start_logind(locked=True)
    env = ch.system_env(world.system_address, world.testbed, world.tmp / "upower")
    nm = ch.start_networkmanager(world.stack, world.system, env, metered=GLib.Variant("u", 2),
                                 primary_type="802-11-wireless")
    agent = world.start_agent(config="[slices]\nprocessing = 30s\nexpiration_warning = 2s\n")
    th.wait_until(lambda: agent.status()["conditions"].get("connectivity") == "full"
                  and agent.status()["conditions"].get("locked") is True, 10, "full connectivity and the locked session")
    app_id = "org.example.Sync"
    app = world.registered_app(app_id, [f"{app_id}.sync"])
    app.submit(f"{app_id}.sync", "processing", earliest_begin=later(1), requires_network=True)
    run = app.wait_run_task(f"{app_id}.sync", timeout=15)

    sent = time.monotonic()
    ch.nm_set(nm, "Connectivity", GLib.Variant("u", 3))  # NM_CONNECTIVITY_LIMITED
    expire = app.wait_event("ExpireTask", timeout=5)
    assert expire["task_id"] == run["task_id"] and expire["mono"] - sent < 3, (expire, sent)
    entry = agent.wait_history("conditions-lost", task_id=run["task_id"], timeout=3)
    assert entry["detail"] == \
        "expired because the network's connectivity became limited (it requires the network); not a violation", entry
    assert [e["event"] for e in agent.events(task_id=run["task_id"])] == ["delivered", "expiration-warned", "conditions-lost"]
    assert agent.app_record(app_id)["violations"] == 0
    assert agent.status()["running"] == []


def test_explain_names_the_blocking_rules_in_words(world):
    agent = world.start_agent()
    app_id, identifier = "org.example.Why", "org.example.Why.refresh"
    app = world.registered_app(app_id, [identifier])
    due = later(3600)
    app.submit(identifier, "refresh", earliest_begin=due)

    e = app.explain(identifier)
    assert (e["app_id"], e["identifier"], e["state"], e["kind"], e["runnable"]) == \
        (app_id, identifier, "pending", "refresh", False), e
    assert e["blocking"] == ["earliest-begin"], e
    assert len(e["reasons"]) == 1 and " " in e["reasons"][0] and e["reasons"][0] != "earliest-begin", e
    assert e["summary"].strip() and " " in e["summary"], e
    assert due <= e["earliest_window"] <= due + 15 * 60, e

    agent.cli("disable", app_id)
    e = agent.explain(app_id, identifier)
    assert set(e["blocking"]) == {"app-disabled", "earliest-begin"}, e
    assert len(e["reasons"]) == 2 and all(" " in r and r not in e["blocking"] for r in e["reasons"]), e
    assert "earliest_window" not in e, f"a switch lifts by no clock, so no window is known: {e}"
    listed = [p for p in agent.list_pending() if p["app_id"] == app_id]
    assert len(listed) == 1 and set(listed[0]["blocking"]) == {"app-disabled", "earliest-begin"}, listed
    assert len(listed[0]["reasons"]) == 2, listed

    not_pending = agent.explain(app_id, "org.example.Why.other")
    assert not_pending["state"] == "not-pending", not_pending


def test_explain_of_an_identifier_the_app_did_not_register_says_so(world):
    """Not "submit it first", which sent the app to a Submit refused with NotPermitted: the
    summary names the identifiers it registered. One registered and not pending still says to
    submit it."""
    agent = world.start_agent()
    app_id = "org.example.Why"
    app = world.registered_app(app_id, [f"{app_id}.refresh", f"{app_id}.cleanup"])
    for e in (app.explain(f"{app_id}.other"), agent.explain(app_id, f"{app_id}.other")):
        assert (e["state"], e["runnable"], e["blocking"]) == ("not-pending", False, []), e
        assert e["summary"] == (f"{app_id} did not register the task identifier '{app_id}.other', so it cannot be "
                                f"submitted; registered: {app_id}.cleanup, {app_id}.refresh."), e
    expect_error("NotPermitted", app.submit, f"{app_id}.other", "refresh")
    for e in (app.explain(f"{app_id}.cleanup"), agent.explain(app_id, f"{app_id}.cleanup")):
        assert e["state"] == "not-pending" and "submit it first" in e["summary"], e
    # `bgpolicy pending APP` asks Explain with no identifier to tell a known app: still answered.
    assert agent.explain(app_id, "")["state"] == "not-pending"
    assert agent.cli("explain", app_id, f"{app_id}.other").returncode == 0


# MARK: The examples


def wait_pending(agent, app_id, identifier, timeout=15, process=None):
    def found():
        if process is not None and process.popen.poll() is not None:
            raise AssertionError(f"{process.name} exited {process.popen.returncode} before submitting:\n"
                                 f"{process.stdout()}\n{process.stderr()}")
        return any(p["app_id"] == app_id and p["identifier"] == identifier for p in agent.list_pending())
    th.wait_until(found, timeout, f"{app_id} submits {identifier}")


def test_python_example_runs_its_refresh_after_simulate_launch(world):
    example = ROOT / "Docs" / "examples" / "python_app.py"
    assert example.is_file(), f"{example} is missing"
    agent = world.start_agent()
    app_id, identifier = "org.example.PyApp", "org.example.PyApp.refresh"
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=world.address)
    proc = world.stack.push(th.ch.Proc([PYTHON, example, "--app-id", app_id, "--identifier", identifier,
                                        "--exit-after", "1", "--work-seconds", "0.3"], env, name="python_app.py"))
    wait_pending(agent, app_id, identifier, process=proc)
    # It asks for its refresh 15 minutes ahead: only simulate launch runs it now.
    assert not agent.events("delivered", app_id=app_id), agent.history()
    agent.cli("simulate", "launch", app_id, identifier)
    code = proc.popen.wait(timeout=20)
    out = proc.stdout()
    assert code == 0, f"python_app.py exited {code}:\n{out}\n{proc.stderr()}"
    assert "run task_id=" in out and "completed task_id=" in out and "result=new-data" in out, out
    entry = agent.wait_history("completed", app_id=app_id, timeout=5)
    assert (entry["identifier"], entry["kind"], entry["result"]) == (identifier, "refresh", "new-data"), entry


def test_feed_reader_refreshes_from_a_local_feed_after_simulate_launch(world, tmp_path):
    feed_reader = world.bin_dir / "feed-reader"
    assert os.access(feed_reader, os.X_OK), f"{feed_reader} is missing: swift build --product feed-reader"
    items = ["Swift 6.3 released", "bgpolicy reaches beta", "Refresh in the background"]
    feed = tmp_path / "feed.txt"
    feed.write_text("# a local feed: one item per line\n" + "\n".join(items) + "\n")
    cache = tmp_path / "cache.txt"
    agent = world.start_agent()
    app_id = "org.example.FeedReader"
    identifier = "org.bgpolicy.examples.FeedReader.refresh"
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=world.address)
    proc = world.stack.push(th.ch.Proc([feed_reader, "--feed", feed, "--cache", cache, "--app-id", app_id,
                                        "--exit-after", "1"], env, name="feed-reader"))
    wait_pending(agent, app_id, identifier, process=proc)
    # It asks why its refresh waits (BGTaskScheduler.explain): for its begin, 15 minutes ahead.
    explained = f"explained identifier={identifier} "
    th.wait_until(lambda: explained in proc.stdout(), 10, "feed-reader explains its refresh")
    line = next(l for l in proc.stdout().splitlines() if l.startswith(explained))
    assert " state=pending " in line and "earliest-begin" in line.split(" blocking=")[1].split(" ")[0].split(","), line
    assert not cache.exists(), "refreshed before the launch"
    agent.cli("simulate", "launch", app_id, identifier)
    code = proc.popen.wait(timeout=20)
    assert code == 0, f"feed-reader exited {code}:\n{proc.stdout()}\n{proc.stderr()}"
    entry = agent.wait_history("completed", app_id=app_id, identifier=identifier, timeout=5)
    assert entry["result"] == "new-data", entry
    lines = cache.read_text().splitlines()
    assert lines[:-1] == items and lines[-1].startswith("refreshed_at: "), lines
