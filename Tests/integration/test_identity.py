"""App identity (SPEC §1): the agent derives an app's id from the caller's pid, its Flatpak
instance, snap or systemd app unit, never from what the caller says; unverified ids are held by
one live connection at a time and can never take over a verified one.

Each test app is a process of its own; before it registers, the test writes its entry in a fake
proc tree (BGPOLICY_PROC_ROOT): `<root>/<pid>/cgroup`, `<root>/<pid>/root/.flatpak-info`, and
`<root>/<pid>/stat` linked to the real one."""

import subprocess
import time

import pytest

import tasks_helpers as th
from tasks_helpers import AgentError, expect_error, later, unit_cgroup, world  # noqa: F401


@pytest.mark.parametrize("cgroup,flatpak_app,expected_id,identity", [
    pytest.param(unit_cgroup("app-gnome-org.example.Maps-1234.scope"), None, "org.example.Maps", "systemd-unit",
                 id="gnome-scope"),
    pytest.param(unit_cgroup("app-org.kde.konsole-a1b2c3.scope"), None, "org.kde.konsole", "systemd-unit",
                 id="kde-scope"),
    pytest.param(unit_cgroup("app-org.kde.dolphin@12ab.service"), None, "org.kde.dolphin", "systemd-unit",
                 id="kde-service"),
    pytest.param(unit_cgroup(r"app-gnome-org.example.My\x2dApp-77.scope"), None, "org.example.My-App",
                 "systemd-unit", id="escaped"),
    pytest.param(unit_cgroup("app-flatpak-org.example.Flat-99.scope"), "org.example.Flat", "org.example.Flat",
                 "flatpak", id="flatpak"),
    pytest.param(unit_cgroup("snap.firefox.firefox-2f8a6c1e-4b1d-4f7a-9c0e-1a2b3c4d5e6f.scope"), None,
                 "snap.firefox", "snap", id="snap"),
])
def test_register_derives_the_app_id(world, cgroup, flatpak_app, expected_id, identity):
    agent = world.start_agent()
    app = world.app("derived", cgroup=cgroup, flatpak_app=flatpak_app)
    identifier = f"{expected_id}.refresh"
    assert app.register([identifier]) == expected_id
    record = agent.app_record(expected_id)
    assert record is not None, agent.list_apps()
    assert (record["identity"], record["verified"], record["connected"], record["identifiers"]) == \
        (identity, True, True, [identifier]), record
    # The connection is bound to the derived id: its requests are that app's.
    app.submit(identifier, "refresh", earliest_begin=later(3600))
    assert [(p["app_id"], p["identifier"]) for p in agent.list_pending()] == [(expected_id, identifier)]


def test_a_verified_caller_cannot_claim_another_app_id(world):
    agent = world.start_agent()
    app = world.app("maps", cgroup=unit_cgroup("app-gnome-org.example.Maps-1234.scope"))
    message = expect_error("AccessDenied", app.register, ["org.example.Bank.refresh"], app_id="org.example.Bank")
    assert "org.example.Maps" in message and "org.example.Bank" in message, message
    assert agent.app_record("org.example.Bank") is None
    assert app.register(["org.example.Maps.refresh"]) == "org.example.Maps"


def test_an_unverified_id_is_held_by_one_live_connection(world):
    agent = world.start_agent()
    first = world.app("first")
    assert first.register(["org.example.Notes.sync"], app_id="org.example.Notes") == "org.example.Notes"
    record = agent.app_record("org.example.Notes")
    assert (record["identity"], record["verified"]) == ("unverified", False), record

    second = world.app("second")
    message = expect_error("AccessDenied", second.register, ["org.example.Notes.sync"], app_id="org.example.Notes")
    assert "org.example.Notes" in message, message
    # Refused, so not bound: the second connection is still nobody.
    expect_error("NotRegistered", second.pending)

    first.quit()
    th.wait_until(lambda: agent.app_record("org.example.Notes")["connected"] is False, 5,
                  "the agent sees the first connection go")

    def takes_it():
        try:
            return second.register(["org.example.Notes.sync"], app_id="org.example.Notes")
        except AgentError as error:
            assert error.name == th.ERROR_PREFIX + "AccessDenied", error
            return None
    assert th.wait_until(takes_it, 5, "the id is free once its connection closed") == "org.example.Notes"
    assert agent.app_record("org.example.Notes")["connected"] is True


def test_a_caller_that_leaves_during_its_register_is_not_left_bound(world):
    """A Register whose caller leaves while the agent asks the bus for its credentials: the
    bus's NameOwnerChanged comes before the caller is bound, so the agent must ask again once
    it is. Without that, the app stayed "connected" to a dead name for good, counted as in use,
    and its work went to that name rather than to its bus_name."""
    agent = world.start_agent()

    def leave_during_register(app_id):
        conn = th.connect(world.address)
        message = th.Gio.DBusMessage.new_method_call(
            th.AGENT_NAME, th.AGENT_PATH, "org.bgpolicy.Scheduler1", "Register")
        message.set_body(th.GLib.Variant("(asa{sv})", ([f"{app_id}.refresh"], {"app_id": th.GLib.Variant("s", app_id)})))
        message.set_flags(th.Gio.DBusMessageFlags.NO_REPLY_EXPECTED)
        conn.send_message(message, th.Gio.DBusSendMessageFlags.NONE)
        conn.flush_sync(None)
        conn.close_sync(None)

    def bound_ids():
        return {e["app_id"] for e in agent.events("registered") if e.get("app_id", "").startswith("org.example.Ghost")}
    # Whether the bus still knew a caller when the agent asked for its credentials is a race:
    # about one caller in ten gets registered. Callers go ten at a time until one did, so
    # that the case under test (bound, then its leave to be seen) surely happened; 100 callers
    # all refused would be some 1 in 40,000 runs.
    ids = []
    for batch in range(10):
        new_ids = [f"org.example.Ghost{batch * 10 + i}" for i in range(10)]
        for app_id in new_ids:
            leave_during_register(app_id)
        ids += new_ids
        time.sleep(0.5)
        if bound_ids():
            break
    assert bound_ids(), f"none of {len(ids)} callers that left during their Register was registered"

    def records():
        return {app["app_id"]: app for app in agent.list_apps()}
    # A caller gone before the bus gave its process id is refused (the agent cannot see who it
    # was: test_a_caller_the_agent_cannot_see_gets_no_hosts_rights); one the bus still knew is
    # registered. Either way, none may stay bound.
    time.sleep(2)
    # The agent sees each leave at once; a little slack for the last one's signal.
    th.wait_until(lambda: not [i for i, app in records().items() if i in ids and app["connected"]], 3,
                  "the agent sees every caller gone")
    # Nor in use: each leave ends the use its registration began, a moment after the unbinding.
    th.wait_until(lambda: not set(ids) & set(agent.status().get("in_use", [])), 3,
                  "the agent to see every caller's use end")


def test_an_unverified_caller_can_never_take_a_verified_id(world):
    agent = world.start_agent()
    verified = world.app("maps", cgroup=unit_cgroup("app-gnome-org.example.Maps-1234.scope"))
    assert verified.register(["org.example.Maps.refresh"]) == "org.example.Maps"
    impostor = world.app("impostor")
    message = expect_error("AccessDenied", impostor.register, ["org.example.Maps.refresh"], app_id="org.example.Maps")
    assert "org.example.Maps" in message, message
    # SPEC §1: "it can never take over an id that a verified caller uses" - not when the
    # verified app is closed either.
    verified.quit()
    th.wait_until(lambda: agent.app_record("org.example.Maps")["connected"] is False, 5, "maps disconnected")
    time.sleep(0.2)
    expect_error("AccessDenied", impostor.register, ["org.example.Maps.refresh"], app_id="org.example.Maps")
    record = agent.app_record("org.example.Maps")
    assert (record["identity"], record["verified"]) == ("systemd-unit", True), record


def test_an_unverified_claim_ends_when_the_verified_app_registers(world):
    """SPEC §1: an unverified id can never take over an id a verified caller uses. A process
    that claimed Maps before Maps itself registered loses the id then: it can no longer see,
    submit or cancel Maps' requests, nor take deliveries or the id back, and the bus_name it
    gave goes with it."""
    agent = world.start_agent()
    squatter = world.app("squatter")
    squatter.register(["org.example.Maps.refresh"], app_id="org.example.Maps", bus_name="org.example.Maps.Squatter")
    squatter.submit("org.example.Maps.refresh", "refresh", earliest_begin=later(3600))

    maps = world.app("maps", cgroup=unit_cgroup("app-gnome-org.example.Maps-1234.scope"))
    assert maps.register(["org.example.Maps.refresh"]) == "org.example.Maps"

    record = agent.app_record("org.example.Maps")
    assert (record["identity"], record["verified"], record["connected"]) == ("systemd-unit", True, True), record
    # Nor does the name it gave for D-Bus activation stay: the agent would start the squatter
    # for Maps' work once Maps quits.
    assert "bus_name" not in record, record
    for call in (squatter.pending, lambda: squatter.cancel("org.example.Maps.refresh"),
                 lambda: squatter.submit("org.example.Maps.refresh", "refresh")):
        expect_error("NotRegistered", call)
    message = expect_error("AccessDenied", squatter.register, ["org.example.Maps.refresh"], app_id="org.example.Maps")
    assert "systemd-unit" in message, message
    # The request it made stays the app's, for the app to keep or cancel.
    assert [p["identifier"] for p in maps.pending()] == ["org.example.Maps.refresh"]
    assert "lost it to the app itself" in agent.stderr(), agent.stderr_tail()
    # The squatter leaving changes nothing for Maps.
    squatter.quit()
    time.sleep(0.3)
    assert agent.app_record("org.example.Maps")["connected"] is True
    maps.cancel("org.example.Maps.refresh")


def test_a_claimant_that_loses_the_id_is_told_to_stop_its_work(world):
    """The squatter was running a slice and a background task as Maps when Maps itself
    registered: it is still on the bus, so it gets ExpireTask for both (its handlers stop the
    work), and both end as failed in the history. It used to hear nothing, work on, and find
    every later report refused."""
    agent = world.start_agent()
    squatter = world.app("squatter")
    squatter.register(["org.example.Maps.refresh"], app_id="org.example.Maps")
    squatter.submit("org.example.Maps.refresh", "refresh", earliest_begin=later(3600))
    agent.simulate_launch("org.example.Maps", "org.example.Maps.refresh")
    run = squatter.wait_run_task("org.example.Maps.refresh", timeout=5)
    (token, _seconds) = squatter.begin_background_task("saving")

    maps = world.app("maps", cgroup=unit_cgroup("app-gnome-org.example.Maps-1234.scope"))
    assert maps.register(["org.example.Maps.refresh"]) == "org.example.Maps"
    for task_id in (run["task_id"], token):
        squatter.wait_event("ExpireTask", lambda e, t=task_id: e["task_id"] == t, timeout=5)
    entry = agent.wait_history("vanished", task_id=run["task_id"], timeout=5)
    assert entry["result"] == "failed" and "lost the app id (ExpireTask sent)" in entry["detail"], entry
    entry = agent.wait_history("background-task-ended", task_id=token, timeout=5)
    assert "lost the app id (ExpireTask sent)" in entry["detail"], entry
    assert agent.status()["running"] == []
    assert maps.events_of("ExpireTask") == []


def test_registering_again_withdraws_the_requests_of_identifiers_left_out(world):
    """Register's list replaces the one given before: a pending request of an identifier
    left out is cancelled (with a history entry), not delivered later, and stays gone after a
    restart."""
    agent = world.start_agent()
    app = world.registered_app("org.example.Feeds", ["org.example.Feeds.refresh", "org.example.Feeds.clean"])
    app.submit("org.example.Feeds.refresh", "refresh", earliest_begin=later(3600))
    app.submit("org.example.Feeds.clean", "processing", earliest_begin=later(3600))

    app.register(["org.example.Feeds.refresh"], app_id="org.example.Feeds")
    assert [p["identifier"] for p in app.pending()] == ["org.example.Feeds.refresh"]
    assert [p["identifier"] for p in agent.list_pending()] == ["org.example.Feeds.refresh"]
    cancelled = agent.events("cancelled", app_id="org.example.Feeds")
    assert [(e["identifier"], e["detail"]) for e in cancelled] == [
        ("org.example.Feeds.clean", "cancelled: the app registered again without org.example.Feeds.clean")], cancelled
    expect_error("NotPermitted", app.submit, "org.example.Feeds.clean", "processing")

    agent.restart()
    assert [p["identifier"] for p in agent.list_pending()] == ["org.example.Feeds.refresh"]


def test_an_app_cannot_see_or_cancel_another_apps_requests(world):
    agent = world.start_agent()
    shared = "org.example.Shared.refresh"  # the same identifier text in both apps
    a = world.app("a", cgroup=unit_cgroup("app-gnome-org.example.A-11.scope"))
    assert a.register([shared]) == "org.example.A"
    b = world.registered_app("org.example.B", [shared])
    a.submit(shared, "refresh", earliest_begin=later(3600))

    assert b.pending() == []
    expect_error("UnknownTask", b.cancel, shared)
    b.scheduler("CancelAll")
    assert b.explain(shared)["state"] == "not-pending"
    assert [p["identifier"] for p in a.pending()] == [shared]
    assert [(p["app_id"], p["identifier"]) for p in agent.list_pending()] == [("org.example.A", shared)]
    # And the owner can.
    a.cancel(shared)
    assert a.pending() == []



def test_admin1_refuses_apps_in_a_sandbox(world):
    """An app in a Flatpak or snap may talk to the agent to schedule its own work; Admin1,
    the user's controls, refuses it: it cannot read other apps' requests and history, nor
    switch their work off. GetStatus stays open, without the entries that name apps (which are
    open, which run in the background). A process outside a sandbox (here, one in an app unit)
    is the user's, and may."""
    agent = world.start_agent()
    other = world.registered_app("org.example.Bank", ["org.example.Bank.refresh"])
    other.submit("org.example.Bank.refresh", "refresh", earliest_begin=later(3600))
    other.scheduler("ReportUsage", "s", ("foreground",))
    th.wait_until(lambda: "org.example.Bank" in agent.status().get("in_use", []), 3, "the agent sees Bank in use")
    flat = world.app("flat", cgroup=unit_cgroup("app-flatpak-org.example.Flat-99.scope"), flatpak_app="org.example.Flat")
    snap = world.app("snap", cgroup=unit_cgroup("snap.firefox.firefox-2f8a6c1e-4b1d-4f7a-9c0e-1a2b3c4d5e6f.scope"))
    for app, words in ((flat, "org.example.Flat in a Flatpak sandbox"), (snap, "snap.firefox in a snap sandbox")):
        for method, signature, args in (("ListApps", "", ()), ("ListPending", "", ()), ("GetHistory", "xu", (0, 10)),
                                        ("SetGlobalEnabled", "b", (False,)),
                                        ("SetAppEnabled", "sb", ("org.example.Bank", False)),
                                        ("Explain", "ss", ("org.example.Bank", "org.example.Bank.refresh")),
                                        ("SimulateLaunch", "ss", ("org.example.Bank", "org.example.Bank.refresh")),
                                        ("GetTimeline", "s", ("",)),
                                        ("ForgetApp", "s", ("org.example.Bank",))):
            message = expect_error("AccessDenied", app.call, th.ADMIN, method, signature, args)
            assert words in message and "bgpolicy command" in message, (method, message)
        # Twice: the first call waits for the bus to say who called, the next is answered at once.
        for _ in range(2):
            (status,) = app.call(th.ADMIN, "GetStatus")
            assert status["global_enabled"] is True and status["pending"] == 1, status
            assert "in_use" not in status and "running" not in status, status
    # Nothing changed.
    assert agent.status()["global_enabled"] is True
    assert agent.app_record("org.example.Bank")["enabled"] is True
    assert [p["app_id"] for p in agent.list_pending()] == ["org.example.Bank"]
    # `bgpolicy` run inside a sandbox (an app's terminal) is refused the same way, and its
    # hint says where to run it (it said that only the session's own user may).
    root = world.proc_root
    cgroup = unit_cgroup("app-flatpak-org.example.Term-7.scope")
    script = (f'mkdir -p {root}/$$/root && ln -s /proc/$$/stat {root}/$$/stat && printf "%s" "$CGROUP" > {root}/$$/cgroup'
              f' && printf "[Application]\\nname=org.example.Term\\n" > {root}/$$/root/.flatpak-info'
              f' && exec {agent.bin_dir}/bgpolicy apps')
    r = subprocess.run(["sh", "-c", script], env={**agent.env, "CGROUP": cgroup}, capture_output=True, text=True,
                       timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 1 and "org.example.Term in a Flatpak sandbox" in r.stderr, r
    assert "flatpak-spawn --host bgpolicy" in r.stderr and "own user" not in r.stderr, r.stderr
    # An app unit is not a sandbox: its process is the user's.
    unit = world.app("unit", cgroup=unit_cgroup("app-gnome-org.example.Maps-1234.scope"))
    (apps,) = unit.call(th.ADMIN, "ListApps")
    assert [a["app_id"] for a in apps] == ["org.example.Bank"], apps


def test_a_caller_the_agent_cannot_see_gets_no_hosts_rights(world):
    """The bus reports the PID of the process that opened a connection. A sandboxed app that
    connects, forks and exits leaves its connection to the child under a PID that is gone, and
    a gone process looked like a plain one on the host: it could use Admin1 (switch every app's
    work off, forget apps) and register as any app id no verified app held. Here the caller's
    /proc entry has no cgroup to read, as for a process gone: both are refused, saying why, and
    nothing changes. A process the agent can see outside a sandbox still may."""
    agent = world.start_agent()
    ghost = world.app("ghost", cgroup=None)
    world.fake_proc(ghost.pid, cgroup=None)
    for method, signature, args in (("ListApps", "", ()), ("SetGlobalEnabled", "b", (False,))):
        message = expect_error("AccessDenied", ghost.call, th.ADMIN, method, signature, args)
        assert "cannot see the calling process" in message and f"PID {ghost.pid}" in message, message
    message = expect_error("AccessDenied", ghost.register, ["org.example.Notes.sync"], app_id="org.example.Notes")
    assert "cannot see this process" in message, message
    assert agent.status()["global_enabled"] is True
    assert agent.list_apps() == []
    seen = world.registered_app("org.example.Notes", ["org.example.Notes.sync"], name="seen")
    assert "org.example.Notes" in agent.status().get("in_use", []), agent.status()
    (status,) = ghost.call(th.ADMIN, "GetStatus")
    assert "in_use" not in status and status["apps"] == 1, status
    assert agent.app_record("org.example.Notes")["identity"] == "unverified"
    (apps,) = seen.call(th.ADMIN, "ListApps")
    assert [a["app_id"] for a in apps] == ["org.example.Notes"], apps
