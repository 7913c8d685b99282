"""One app flooding Scheduler1 (10,000 Submit/Cancel pairs, 64 calls in flight) must not slow
down another app much, must get only answers (success, or LimitsExceeded when it overdoes it),
and must not make the agent grow."""

import json
import os
import signal
import statistics
import threading
import time

import pytest

import tasks_helpers as th
from tasks_helpers import PYTHON, SCHEDULER, later, world  # noqa: F401 - the fixture

MIB = 1024  # VmRSS is in KiB


class Observer:
    """Another app, in this process: times its own GetRefreshStatus and GetPending calls."""

    def __init__(self, world):
        self.gbus = world.stack.push(th.ch.GBus(world.address))
        th.call(self.gbus.conn, SCHEDULER, "Register", "asa{sv}",
                (["org.example.Observer.refresh"], th.register_options(app_id="org.example.Observer")), "(s)")
        th.call(self.gbus.conn, SCHEDULER, "Submit", "ssa{sv}",
                ("org.example.Observer.refresh", "refresh", th.submit_options(earliest_begin=later(3600))))
        self.turn = 0

    def one(self):
        """Latency in seconds of one call, alternating the two methods."""
        self.turn += 1
        method, reply = ("GetRefreshStatus", "(s)") if self.turn % 2 else ("GetPending", "(aa{sv})")
        start = time.perf_counter()
        result = th.call(self.gbus.conn, SCHEDULER, method, reply_type=reply, timeout=10)
        elapsed = time.perf_counter() - start
        assert result[0] == "available" if method == "GetRefreshStatus" else len(result[0]) == 1, result
        return elapsed


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(observer, seconds):
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        out.append(observer.one())
    return out


def test_a_flood_from_one_app_does_not_hurt_another(world):
    agent = world.start_agent()
    observer = Observer(world)
    measure(observer, 0.3)  # warm up both ends
    unloaded = [observer.one() for _ in range(400)]
    rss_before = agent.vm_rss_kib()
    agent_cpu_before = cpu_seconds(agent.pid)

    flood = world.stack.push(th.ch.Proc(
        [PYTHON, th.__file__, "flood", "--address", world.address, "--app-id", "org.example.Flood",
         "--count", "10000", "--inflight", "64"], dict(os.environ), name="flood"))
    th.wait_until(lambda: "FLOODING" in flood.stdout() or (not flood.alive() and pytest.fail(
        f"the flood client exited {flood.popen.returncode}: {flood.stderr()}")), 15, "the flood starts")
    # While it floods, a few times the flooder is stopped for a moment: the calls timed then see
    # the same machine without the flood, so that other load on the machine (a build, say) does
    # not pass for the agent's unfairness.
    loaded, quiet = [], []
    try:
        for _ in range(4):
            loaded += measure(observer, 0.6)
            flood.popen.send_signal(signal.SIGSTOP)
            time.sleep(0.1)  # its calls in flight are answered
            quiet += measure(observer, 0.4)
            flood.popen.send_signal(signal.SIGCONT)
    finally:
        flood.popen.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 180
    while flood.alive() and time.monotonic() < deadline:
        loaded.append(observer.one())
    assert flood.popen.wait(timeout=10) == 0, flood.stderr()
    summary = json.loads([line for line in flood.stdout().splitlines() if line.startswith("SUMMARY ")][0][8:])
    rss_after = agent.vm_rss_kib()
    agent_cpu = cpu_seconds(agent.pid) - agent_cpu_before

    base, calm = statistics.median(unloaded), statistics.median(quiet)
    busy = statistics.median(loaded) if loaded else float("inf")
    busy_p90 = sorted(loaded)[len(loaded) * 9 // 10] if loaded else float("inf")
    flooder = summary["latency_median"]
    th.ch.log(f"\nflood: {summary['calls']} calls in {summary['seconds']:.2f}s ({agent_cpu:.2f}s of agent CPU), "
              f"{summary['ok']} ok, {summary['limited']} LimitsExceeded; observer median {base * 1e6:.0f} us "
              f"before, {calm * 1e6:.0f} us with the flooder stopped, {busy * 1e6:.0f} us under the flood "
              f"({len(loaded)} calls, p90 {busy_p90 * 1e6:.0f} us); the flooder's own calls: median "
              f"{flooder * 1e6:.0f} us; VmRSS {rss_before / MIB:.1f} -> {rss_after / MIB:.1f} MiB")

    # Every call was answered: success, or LimitsExceeded (and then its Cancel found nothing).
    assert summary["other"] == [] and summary["unanswered"] == 0, summary
    assert summary["ok"] + summary["limited"] + summary["cancel_after_refused_submit"] == summary["calls"], summary
    assert summary["ok"] >= summary["calls"] // 2, summary
    assert agent.alive()

    assert len(loaded) >= 50, f"only {len(loaded)} observer calls during the flood: it was too short to judge"
    # On two cores the flooder, the bus daemon and the agent all compete with the observer for
    # the CPU, so its median rises with the machine's pace, not only with the agent's fairness:
    # 1.9-2.2x on a slow day (the bound was 2x, and failed five runs in eight). 3x leaves room
    # for that and still fails when a flood slows everyone down. It does not tell whether each
    # caller has a lane of its own: with every caller put in one lane the median stayed under
    # 1.5x. The next check does.
    assert busy <= 3 * max(base, calm), (
        f"the other app's median latency went from {base * 1e6:.0f} us ({calm * 1e6:.0f} us with the flooder "
        f"paused) to {busy * 1e6:.0f} us under the flood (more than 3x)")
    # Each caller has a lane of its own, served in turn: the other app's call waits for the one
    # flood call being served, not behind the flooder's 64. Its slow calls (p90) are compared
    # with the flooder's typical call, measured at the same time on the same machine, so the
    # machine's pace cancels out. Measured: 0.08-0.09 with lanes; 0.74-0.76 with every caller
    # in one lane (a sabotage of ObjectServer.enqueue), while the medians above barely moved.
    assert busy_p90 <= 0.3 * flooder, (
        f"the other app's slowest tenth of calls under the flood took {busy_p90 * 1e6:.0f} us or more, against "
        f"{flooder * 1e6:.0f} us for the flooder's median call: it waits in the flooder's queue (over 0.3x)")
    assert rss_after < 64 * MIB and rss_after < rss_before + 16 * MIB, \
        f"VmRSS {rss_before / MIB:.1f} MiB before the flood, {rss_after / MIB:.1f} MiB after"
    # The agent still answers, and each Submit's Cancel, served in order on the same connection,
    # withdrew it: pending are exactly the identifiers whose last call that succeeded was a
    # Submit (none, unless a Cancel was refused).
    assert sorted(p["identifier"] for p in agent.list_pending() if p["app_id"] == "org.example.Flood") == \
        summary["left_pending"], summary


def test_a_process_registering_new_app_ids_in_a_loop_is_stopped_at_the_apps_limit(world):
    """Each connection registers one app, but connections are cheap: a loop registering a new
    app id each time would grow the agent and its database without end. `[limits] apps` bounds
    what it keeps; beyond it a new id is refused with what to do, apps it knows register again,
    a restart keeps the count, and forgetting one makes room."""
    agent = world.start_agent(config="[limits]\napps = 3\n")

    def register(app_id):
        """Registers `app_id` from a connection of its own, then closes it, as a short-lived
        process does."""
        gbus = th.ch.GBus(world.address)
        try:
            return th.call(gbus.conn, SCHEDULER, "Register", "asa{sv}",
                           ([f"{app_id}.refresh"], th.register_options(app_id=app_id)), "(s)")[0]
        finally:
            gbus.close()

    known = [f"org.example.Loop{n}" for n in range(3)]
    for app_id in known:
        assert register(app_id) == app_id
    message = th.expect_error("LimitsExceeded", register, "org.example.Loop3")
    assert "3 registered apps" in message and "[limits] apps" in message, message
    assert "bgpolicy forget APP" in message and "org.example.Loop3" in message, message
    assert sorted(a["app_id"] for a in agent.list_apps()) == known
    # An app the agent knows is no new app: it registers again, from a new connection.
    assert register(known[1]) == known[1]
    assert "Refused a new app" in agent.stderr(), agent.stderr_tail()

    # The apps are in the database: a restarted agent counts them.
    agent.restart()
    th.expect_error("LimitsExceeded", register, "org.example.Loop4")
    agent.admin("ForgetApp", "s", (known[0],), "(a{sv})")
    assert register("org.example.Loop4") == "org.example.Loop4"
    assert sorted(a["app_id"] for a in agent.list_apps()) == [*known[1:], "org.example.Loop4"]


def test_notifications_sent_one_after_another_do_not_hold_the_apps_work_back(world):
    """Any process may notify any app. Six connections notifying Mail back to back keep a write
    of its newest wake under way all the time; Mail's own refresh, and the wake, still run
    (the agent's windows are always open here). When the app waited for those writes, neither
    ran until the notifications stopped."""
    agent = world.start_agent()
    mail = world.registered_app("org.example.Mail", ["org.example.Mail.refresh"])
    mail.configure(complete_after=0.2)
    stop = threading.Event()
    sent = []

    def notify_in_a_loop(n):
        gbus = th.ch.GBus(world.address)
        try:
            count = 0
            while not stop.is_set():
                th.call(gbus.conn, SCHEDULER, "NotifyContentAvailable", "sa{sv}",
                        ("org.example.Mail", {"from": th.GLib.Variant("i", n)}), None, 10.0)
                count += 1
            sent.append(count)
        finally:
            gbus.close()

    threads = [threading.Thread(target=notify_in_a_loop, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.5)
        mail.submit("org.example.Mail.refresh")
        kinds = lambda: {e["kind"] for e in mail.events_of("RunTask")}  # noqa: E731
        th.wait_until(lambda: {"refresh", "content-available"} <= kinds(), 10,
                      "Mail's refresh and a wake, while the notifications go on")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=15)
    assert len(sent) == 6 and min(sent) > 10, sent
    assert agent.alive()
