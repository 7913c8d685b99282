"""The wall clock being set while the agent runs (an NTP client stepping it, the user changing
the time). The agent's timers run on the monotonic clock; a timerfd with TFD_TIMER_CANCEL_ON_SET
tells it of a step (WallClockWatch), and it plans again at the new time.

Setting the clock needs CAP_SYS_TIME: the test is skipped without it. It steps the clock of the
machine it runs on, by 11 minutes and back within seconds; the way back is worked out from the
boot-time clock, so that nothing is lost or gained."""

import contextlib
import sqlite3
import re
import time

import pytest
from gi.repository import GLib

import tasks_helpers as th
from tasks_helpers import laptop, later, mail_refreshed_after_use, world  # noqa: F401 - the fixtures

STEP = 11 * 60


def may_set_the_clock():
    try:
        time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_REALTIME))
        return True
    except PermissionError:
        return False


@contextlib.contextmanager
def clock_stepped(seconds):
    """The wall clock `seconds` ahead for the duration, then as if it had never moved."""
    offset = time.clock_gettime(time.CLOCK_REALTIME) - time.clock_gettime(time.CLOCK_BOOTTIME)
    time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_BOOTTIME) + offset + seconds)
    try:
        yield
    finally:
        time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_BOOTTIME) + offset)


@pytest.mark.skipif(not may_set_the_clock(), reason="setting the wall clock needs CAP_SYS_TIME")
def test_work_due_by_a_clock_stepped_forward_starts_at_once(world):
    """A refresh may begin in 10 minutes. The clock steps 11 minutes forward: the agent hears
    it, plans again and delivers the refresh within seconds, rather than 10 minutes later when
    its monotonic timer would have fired. Its log gives the step."""
    agent = world.start_agent()
    app = world.registered_app("org.example.Mail", ["org.example.Mail.refresh"])
    app.submit("org.example.Mail.refresh", "refresh", earliest_begin=later(600))
    explanation = agent.explain("org.example.Mail", "org.example.Mail.refresh")
    assert "earliest-begin" in explanation["blocking"], explanation
    time.sleep(1)
    assert not app.events_of("RunTask")
    with clock_stepped(STEP):
        run = app.wait_run_task(timeout=5)
        assert run["identifier"] == "org.example.Mail.refresh", run
        logged = [line for line in agent.stderr().splitlines() if "The wall clock was set" in line]
        assert logged, agent.stderr_tail()
        step = int(logged[-1].split("step.seconds=")[1].split()[0])
        assert abs(step - STEP) <= 2, logged


@pytest.mark.skipif(not may_set_the_clock(), reason="setting the wall clock needs CAP_SYS_TIME")
def test_sets_of_the_clock_by_less_than_a_second_are_not_acted_on_until_they_add_up(world):
    """The clock set to what it reads (a step of microseconds), as NTP clients and `date -s`
    can: the agent hears each set, but plans nothing again and logs it at debug level only,
    with no line at info. Steps add up: a set 0.6 s forward twice is acted on, at the second,
    as one step of about a second."""
    agent = world.start_agent()
    for _ in range(20):
        time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_REALTIME))
    th.wait_until(lambda: agent.stderr().count("moved it by less than a second") >= 1, 5, "the agent hears the sets")
    assert "The wall clock was set; planning again" not in agent.stderr(), agent.stderr_tail()
    for line in agent.stderr().splitlines():
        if "moved it by less than a second" in line:
            assert " debug " in line, line

    offset = time.clock_gettime(time.CLOCK_REALTIME) - time.clock_gettime(time.CLOCK_BOOTTIME)
    try:
        time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_BOOTTIME) + offset + 0.6)
        heard = agent.stderr().count("moved it by less than a second")
        th.wait_until(lambda: agent.stderr().count("moved it by less than a second") > heard, 5,
                      "the agent hears the first 0.6 s")
        assert "The wall clock was set; planning again" not in agent.stderr(), agent.stderr_tail()
        time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_BOOTTIME) + offset + 1.2)
        th.wait_until(lambda: "The wall clock was set; planning again" in agent.stderr(), 5,
                      "the agent acts on the steps, 1.2 s in all")
        logged = [line for line in agent.stderr().splitlines() if "The wall clock was set; planning again" in line]
        assert len(logged) == 1 and "step.seconds=1 " in logged[0], logged
    finally:
        time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_BOOTTIME) + offset)
    # The way back, 1.2 s, is a step too.
    th.wait_until(lambda: agent.stderr().count("The wall clock was set; planning again") == 2, 5,
                  "the agent acts on the way back")
    assert agent.alive()


def seconds_in(words):
    """The duration in an Explain reason's words ("… may come in 1 h 4 min", "14 min 50 s")."""
    found = re.search(r"may come in ((?:\d+ (?:days|day|h|min|s) ?)+)", words)
    assert found, words
    size = {"days": 86400, "day": 86400, "h": 3600, "min": 60, "s": 1}
    return sum(int(n) * size[unit] for n, unit in re.findall(r"(\d+) (days|day|h|min|s)", found.group(1)))


@pytest.mark.skipif(not may_set_the_clock(), reason="setting the wall clock needs CAP_SYS_TIME")
def test_a_refresh_interval_stays_as_long_when_the_clock_is_set_back(laptop):
    """Mail's refresh has just run; the clock is set back 11 minutes. The planner's last
    refreshes move with the clock (`RefreshPlanner.wallClockStepped`), so Mail's next refresh
    is held by `refresh-interval` for what is left of its 15 minutes, not 11 minutes more."""
    agent, mail, run = mail_refreshed_after_use(laptop)

    def left():
        explanation = agent.explain("org.example.Mail", "org.example.Mail.refresh")
        assert "refresh-interval" in explanation["blocking"], explanation
        return seconds_in(explanation["reasons"][explanation["blocking"].index("refresh-interval")])

    before = left()
    assert before <= 900, before
    with clock_stepped(-STEP):
        th.wait_until(lambda: "The wall clock was set" in agent.stderr(), 5, "the agent hears the step")
        after = left()
        # A second or two passed; the 11 minutes did not come back.
        assert before - 30 <= after <= before + 1, (before, after)


@pytest.mark.skipif(not may_set_the_clock(), reason="setting the wall clock needs CAP_SYS_TIME")
def test_a_refresh_that_did_not_run_is_taken_back_when_the_clock_was_set_meanwhile(tmp_path):
    """As `test_planner`'s `test_a_refresh_that_did_not_run_is_taken_back`, but Mail's service
    takes three seconds to fail, and the clock is set back 11 minutes while it starts. The
    planner moved its record of the refresh with the clock; the agent names the refresh in the
    clock's new scale (`PlannedRefresh`), so it is still taken back: when Mail registers again,
    its refresh is not held by `refresh-interval`. The way back (11 minutes forward) does not
    lift the 5-min retry after the failed delivery either (`wallClockSet` moves it): the window
    after the open of Notes, still in its minute, would otherwise try Mail again, and its
    refresh would be running, not pending."""
    with th.open_world(tmp_path, power="battery", activation=True) as world:
        agent, notes = th.mail_quit_with_its_refresh_waiting(world, '/bin/sh -c "sleep 3; exit 1"')
        notes.scheduler("ReportUsage", "s", ("foreground",))

        def state():
            return agent.explain("org.example.Mail", "org.example.Mail.refresh")["state"]
        th.wait_until(lambda: state() == "running", 5, "the window delivers Mail's refresh, starting Mail")
        with clock_stepped(-STEP):
            th.wait_until(lambda: "The wall clock was set" in agent.stderr(), 5, "the agent hears the step")
            failed = agent.wait_history("delivery-failed", app_id="org.example.Mail", timeout=30)
            assert "org.example.Mail" in failed["detail"], failed
        th.wait_until(lambda: agent.stderr().count("The wall clock was set") >= 2, 5, "the agent hears the way back")

        again = world.app("mail again")
        again.register(["org.example.Mail.refresh"], app_id="org.example.Mail", bus_name="org.example.Mail")
        explanation = agent.explain("org.example.Mail", "org.example.Mail.refresh")
        assert explanation["state"] == "pending", explanation
        assert "refresh-interval" not in explanation["blocking"], explanation


def write_usage_rows(world, count, prefix):
    """At least `count` rows of the usage log written now, as apps write them: `ReportUsage`
    changes from apps `<prefix>0`, `<prefix>1` … (connections of this process), each within
    the 60 changes at once an app may make (`UsageReportBudget`). Returns how many."""
    written = 0
    while written < count:
        conn = world.stack.push(th.ch.GBus(world.address)).conn
        app_id = f"{prefix}{written // 60}"
        th.call(conn, th.SCHEDULER, "Register", "asa{sv}",
                ([f"{app_id}.refresh"], th.register_options(app_id=app_id)), "(s)")
        for i in range(60):
            th.call(conn, th.SCHEDULER, "ReportUsage", "s", ("background" if i % 2 == 0 else "foreground",))
        written += 60
    return written


@pytest.mark.skipif(not may_set_the_clock(), reason="setting the wall clock needs CAP_SYS_TIME")
def test_a_clock_set_weeks_ahead_while_the_agent_runs_prunes_nothing_early(world):
    """Three weeks of usage in the log and an hour of history; the clock is set 9 weeks ahead
    (past the 8 weeks both keep) while the agent runs. The prunes after the next 1,000 usage
    rows and 1,000 history entries count only the time that really passed (`RetentionClock`):
    every row stays. Without it, both prunes deleted everything written before the step. So
    does a restart with the clock still ahead, and 1,000 usage rows more."""
    agent = world.start_agent()
    app = world.registered_app("org.example.Mail", ["org.example.Mail.refresh"])
    now = time.time()
    old = [("org.example.Mail", state, now - day * 86400 - 3600 + (60 if state == "background" else 0))
           for day in range(1, 22) for state in ("foreground", "background")]
    th.restart_with_usage(agent, old)
    app = world.registered_app("org.example.Mail", ["org.example.Mail.refresh"], name="mail again")
    db_path = world.tmp / "state" / "bgpolicy" / "bgpolicy.sqlite"

    def counts(before):
        db = sqlite3.connect(db_path)
        try:
            return (db.execute("SELECT count(*) FROM usage WHERE time < ?", (before,)).fetchone()[0],
                    db.execute("SELECT count(*) FROM history WHERE time < ?", (before,)).fetchone()[0])
        finally:
            db.close()

    stepped_at = time.time()
    usage_before, history_before = counts(stepped_at)
    # The old rows, and the registrations' opens.
    assert usage_before >= len(old) and history_before > 0, (usage_before, history_before)
    with clock_stepped(9 * 7 * 86400):
        write_usage_rows(world, 1000, "org.example.Busy")
        for i in range(1000):
            agent.set_app_enabled("org.example.Mail", i % 2 == 1)
        assert agent.alive()
        # A restart with the clock still ahead (a re-login, a crash): the newest rows are
        # those written at the wrong time, so the start carries on the clock the first start
        # kept for this boot rather than count from them. Without that, it pruned everything.
        agent.stop()
        agent.restart()
        write_usage_rows(world, 1000, "org.example.Later")
        assert agent.alive()
    agent.stop()
    assert counts(stepped_at) == (usage_before, history_before), agent.stderr_tail()
    assert "Old usage folded" not in agent.stderr(), agent.stderr_tail()


@pytest.mark.skipif(not may_set_the_clock(), reason="setting the wall clock needs CAP_SYS_TIME")
def test_content_available_buckets_move_with_the_clock(laptop):
    """On battery at 6 wakes an hour, Mail has used all 6 within seconds; each comes back an
    hour after it was spent. The clock is set 11 minutes ahead: the spent times move with it,
    so the next wake is still refused, with about an hour to wait; after a restart too, since
    the stored bucket moved with the clock. (Unmoved, the step took 11 minutes off the wait.)
    Chat, which quit, has a wake waiting: it was received seconds ago before the step, and so
    it is after it, and after the restart (its stored times moved too; unmoved, 11 min ago)."""
    agent = laptop.start_agent(config="[limits]\ncontent_available_per_hour = 6\n")
    chat = laptop.registered_app("org.example.Chat", ["org.example.Chat.refresh"], name="chat")
    chat.quit()
    th.wait_until(lambda: agent.app_record("org.example.Chat")["connected"] is False, 10, "the agent to see Chat leave")
    th.call(laptop.session.conn, th.SCHEDULER, "NotifyContentAvailable", "sa{sv}",
            ("org.example.Chat", {"n": GLib.Variant("i", 1)}), None, 10.0)
    mail = laptop.registered_app("org.example.Mail", ["org.example.Mail.refresh"])
    mail.configure(complete_after=0.1)

    def chat_waited():
        (wake,) = agent.list_pending()
        assert wake["app_id"] == "org.example.Chat" and wake["kind"] == "content-available", wake
        return time.time() - wake["submitted_at"]

    assert 0 <= chat_waited() < 60

    def notify(n):
        th.call(laptop.session.conn, th.SCHEDULER, "NotifyContentAvailable", "sa{sv}",
                ("org.example.Mail", {"n": GLib.Variant("i", n)}), None, 10.0)

    for n in range(6):
        notify(n)
        mail.wait_event("RunTask", lambda e, n=n: e["kind"] == "content-available" and e["info"]["n"] == n, timeout=10)
        th.wait_until(lambda n=n: len(agent.events("completed", app_id="org.example.Mail")) == n + 1, 10,
                      f"wake {n} completed")
    th.expect_error("LimitsExceeded", notify, 6)

    def minutes_to_wait():
        message = th.expect_error("LimitsExceeded", notify, 7)
        found = re.search(r"the next is allowed in ((?:\d+ (?:h|min|s) ?)+)", message)
        assert found, message
        size = {"h": 3600, "min": 60, "s": 1}
        return sum(int(n) * size[unit] for n, unit in re.findall(r"(\d+) (h|min|s)", found.group(1))) / 60

    with clock_stepped(STEP):
        th.wait_until(lambda: "The wall clock was set" in agent.stderr(), 5, "the agent hears the step")
        assert 55 <= minutes_to_wait() <= 60
        assert 0 <= chat_waited() < 60
        agent.stop()
        agent.restart()
        assert 55 <= minutes_to_wait() <= 60
        assert 0 <= chat_waited() < 60
