"""SIGHUP and Admin1.Reload (`systemctl --user reload bgpolicyd`, which runs `bgpolicy
reload`) read the configuration file again: the new values act from their next use, an invalid
file changes nothing and says why, and the knob that needs a restart says so. Reload answers
once the reload is done, and refuses an invalid file in the parser's words. Driven by a real
app process on a private bus."""

import json
import signal
import threading
import time

import tasks_helpers as th
from tasks_helpers import expect_error, later, world  # noqa: F401 - the fixture

APP_ID = "org.example.Reload"
REFRESH = f"{APP_ID}.refresh"
SYNC = f"{APP_ID}.sync"


def write_config(agent, text):
    (agent.world.tmp / "config" / "bgpolicy" / "bgpolicy.conf").write_text(text)


def reload(agent, expect=None):
    """Sends SIGHUP and waits until GetStatus shows the reload done (`expect(status)`)."""
    before = agent.status()
    # config_loaded_at has whole seconds: a reload in the same second must still be seen.
    while int(time.time()) == before["config_loaded_at"]:
        time.sleep(0.05)
    agent.proc.popen.send_signal(signal.SIGHUP)
    return th.wait_until(
        lambda: (s := agent.status()) and (expect(s) if expect else s["config_loaded_at"] > before["config_loaded_at"]) and s,
        10, "the reload to show in GetStatus")


def run_once(agent, app, seen):
    """Submits the refresh, launches it, and returns its RunTask (one not in `seen`)."""
    app.submit(REFRESH, "refresh", earliest_begin=later(3600))
    agent.simulate_launch(APP_ID, REFRESH)
    run = app.wait_event("RunTask", lambda e: e["identifier"] == REFRESH and e["task_id"] not in seen, timeout=10)
    seen.add(run["task_id"])
    app.complete(run["task_id"], True, "new-data")
    return run


def test_sighup_reloads_the_configuration_and_a_bad_file_changes_nothing(world):
    agent = world.start_agent(config="[slices]\nrefresh = 4s\nexpiration_warning = 2s\n[limits]\npending_processing = 1\n")
    app = world.registered_app(APP_ID, [REFRESH, SYNC, f"{SYNC}.2"])
    seen = set()
    assert run_once(agent, app, seen)["seconds"] == 4
    app.submit(SYNC, "processing", earliest_begin=later(3600))
    expect_error("TooManyPendingRequests", app.submit, f"{SYNC}.2", "processing", earliest_begin=later(3600))
    status = agent.status()
    assert "config_error" not in status and "config_pending" not in status, status
    config = world.tmp / "config" / "bgpolicy" / "bgpolicy.conf"
    assert status["config_source"] == str(config), status

    # New values: the agent goes on (SIGHUP no longer stops it), and they act from their next use.
    write_config(agent, th.IMMEDIATE_WINDOWS + "[slices]\nrefresh = 7s\nexpiration_warning = 2s\n"
                 "[limits]\npending_processing = 2\n")
    reload(agent)
    assert agent.alive()
    assert run_once(agent, app, seen)["seconds"] == 7
    app.submit(f"{SYNC}.2", "processing", earliest_begin=later(3600))
    log = agent.stderr()
    assert "Configuration reloaded" in log, agent.stderr_tail()
    assert "[slices] refresh: 4s → 7s" in log and "[limits] pending_processing: 1 → 2" in log, agent.stderr_tail()

    # An invalid file: nothing changes, and GetStatus, the log and `bgpolicy status` say why.
    write_config(agent, th.IMMEDIATE_WINDOWS + "[slices]\nrefresh = 3s\n[cpu]\nlimit = 180%\n")
    status = reload(agent, expect=lambda s: "config_error" in s)
    assert agent.alive()
    assert f"{config}:9" in status["config_error"] and "limit" in status["config_error"], status
    assert "Configuration not reloaded" in agent.stderr(), agent.stderr_tail()
    assert run_once(agent, app, seen)["seconds"] == 7, "an invalid file must leave the slices as they were"
    shown = agent.cli("status").stdout
    assert "180%" in shown and "not reloaded" in shown, shown

    # A knob that needs a restart: read, reported as pending, not applied; the rest applies.
    write_config(agent, th.IMMEDIATE_WINDOWS.replace("every-window", "predicted") + "[slices]\nrefresh = 6s\nexpiration_warning = 2s\n")
    status = reload(agent, expect=lambda s: "config_error" not in s)
    assert status["config_pending"] == ["[refresh] strategy"], status
    assert "next start" in agent.stderr(), agent.stderr_tail()
    # The log names what changed in effect: the slice, not the strategy, which waits (it was
    # logged as changed, beside the warning that it was not).
    assert "[slices] refresh: 7s → 6s" in agent.stderr(), agent.stderr_tail()
    assert "[refresh] strategy: every-window → predicted" not in agent.stderr(), agent.stderr_tail()
    assert run_once(agent, app, seen)["seconds"] == 6, "every-window still runs the refresh, now with a 6-s slice"
    assert "restart" in agent.cli("status").stdout

    # The file removed: the defaults apply.
    config.unlink()
    status = reload(agent, expect=lambda s: s["config_source"] == "defaults")
    assert "config_error" not in status, status
    assert agent.alive()


def test_a_reload_with_nothing_changed_says_so(world):
    agent = world.start_agent()
    reload(agent)
    assert "Configuration reloaded; nothing changed" in agent.stderr(), agent.stderr_tail()
    status = agent.status()
    assert "config_error" not in status and "config_pending" not in status, status


# --- Admin1.Reload and `bgpolicy reload` -------------------------------------------------
# What `systemctl --user reload bgpolicyd` runs (ExecReload=): it must fail on an invalid file,
# with what is wrong, and return only once the reload is done.

def test_reload_refuses_an_invalid_file_in_the_parser_s_words_and_keeps_the_configuration(world):
    agent = world.start_agent(config="[slices]\nrefresh = 4s\nexpiration_warning = 2s\n")
    app = world.registered_app(APP_ID, [REFRESH])
    seen = set()
    config = world.tmp / "config" / "bgpolicy" / "bgpolicy.conf"
    loaded_at = agent.status()["config_loaded_at"]
    write_config(agent, th.IMMEDIATE_WINDOWS + "[slices]\nrefresh = 3s\n[cpu]\nlimit = 180%\n")

    message = expect_error("InvalidArgument", agent.admin, "Reload")
    assert message.startswith("not reloaded, the agent goes on with the configuration it had: invalid configuration: "), message
    assert f"{config}:9: [cpu] limit: " in message and '"180%"' in message, message
    # GetStatus says the same at once: the answer came after the reload, not before it.
    status = agent.status()
    assert message.endswith(status["config_error"]), (message, status)
    assert status["config_loaded_at"] == loaded_at, status
    assert run_once(agent, app, seen)["seconds"] == 4, "an invalid file must leave the slices as they were"

    # bgpolicy reload: status 1, the agent's message and a hint; nothing on standard output.
    r = agent.cli("reload", check=False)
    assert (r.returncode, r.stdout) == (1, ""), r
    first, hint = r.stderr.splitlines()
    assert first == f"bgpolicy: {message} (InvalidArgument)", r.stderr
    assert hint == "Fix the file, then run 'bgpolicy reload' again.", r.stderr
    assert agent.alive()
    assert run_once(agent, app, seen)["seconds"] == 4


def test_reload_answers_once_the_new_configuration_is_in_effect(world):
    agent = world.start_agent(config="[slices]\nrefresh = 4s\nexpiration_warning = 2s\n")
    app = world.registered_app(APP_ID, [REFRESH])
    seen = set()
    config = world.tmp / "config" / "bgpolicy" / "bgpolicy.conf"
    assert run_once(agent, app, seen)["seconds"] == 4

    # An invalid file first, so that the valid one's reload has an error to clear.
    write_config(agent, "[cpu]\nlimit = 180%\n")
    expect_error("InvalidArgument", agent.admin, "Reload")
    # A new slice length, and a knob that waits for a restart: GetStatus right after the
    # answer shows them, with no wait and no poll.
    write_config(agent, th.IMMEDIATE_WINDOWS.replace("every-window", "predicted")
                 + "[slices]\nrefresh = 7s\nexpiration_warning = 2s\n")
    before = int(time.time())
    assert agent.admin("Reload") == ()
    status = agent.status()
    assert "config_error" not in status, status
    assert status["config_pending"] == ["[refresh] strategy"], status
    assert status["config_loaded_at"] >= before, status
    assert run_once(agent, app, seen)["seconds"] == 7
    assert "[slices] refresh: 4s → 7s" in agent.stderr(), agent.stderr_tail()

    # bgpolicy reload: status 0, says which file, and the knob that waits.
    r = agent.cli("reload")
    assert r.stderr == "", r
    assert r.stdout == (f"Configuration reloaded from {config}. [refresh] strategy takes effect at the next start "
                        "(systemctl --user restart bgpolicyd).\n"), r.stdout
    # The file removed: the defaults, and --json gives the config_ keys of GetStatus.
    config.unlink()
    r = agent.cli("reload")
    assert r.stdout == f"Configuration reloaded: there is no {config}, so the defaults apply. [refresh] strategy " \
        "takes effect at the next start (systemctl --user restart bgpolicyd).\n", r.stdout
    shown = json.loads(agent.cli("reload", "--json").stdout)
    assert shown["config_source"] == "defaults" and shown["config_path"] == str(config), shown
    assert set(shown) == {"config_source", "config_path", "config_loaded_at", "config_pending"}, shown


def test_reloads_at_once_are_run_one_after_another(world):
    """Reload calls from six connections and a SIGHUP, all at once: each is answered, and the
    change is put in effect, and logged, once (two reloads run together would each start from
    the configuration they both found, and log it twice). A reload is quick, so this does not
    always make two meet; ReloadRequestsTests holds them apart step by step."""
    agent = world.start_agent(config="[slices]\nrefresh = 4s\nexpiration_warning = 2s\n")
    write_config(agent, th.IMMEDIATE_WINDOWS + "[slices]\nrefresh = 9s\nexpiration_warning = 2s\n")
    flags = th.Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | th.Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION
    connections = [th.Gio.DBusConnection.new_for_address_sync(
        world.address, flags,
        None, None) for _ in range(6)]
    answers, errors = [], []
    start = threading.Barrier(len(connections) + 1)

    def reload_from(conn):
        start.wait()
        try:
            answers.append(th.call(conn, th.ADMIN, "Reload"))
        except th.AgentError as error:
            errors.append(error)

    threads = [threading.Thread(target=reload_from, args=(conn,)) for conn in connections]
    for thread in threads:
        thread.start()
    start.wait()
    agent.proc.popen.send_signal(signal.SIGHUP)
    for thread in threads:
        thread.join(15)
    for conn in connections:
        conn.close_sync(None)
    assert errors == [] and answers == [()] * len(connections), (answers, errors)
    log = agent.stderr()
    assert log.count("[slices] refresh: 4s → 9s") == 1, agent.stderr_tail()
    assert agent.alive()
    app = world.registered_app(APP_ID, [REFRESH])
    assert run_once(agent, app, set())["seconds"] == 9


def test_the_refresh_budget_and_windows_a_day_follow_the_file_at_start_and_at_a_reload(world):
    # `[refresh] budget` and `windows_per_day` reach the planner (GetStatus's `refresh`) at the
    # start and at a reload; a lower budget trims the pool to a day of it at once.
    agent = world.start_agent(planner=True, config="[refresh]\nbudget = 5\nwindows_per_day = 12\n")
    world.registered_app(APP_ID, [REFRESH])
    refresh = th.wait_until(lambda: (r := agent.status()["refresh"]) and r["budget_per_day"] > 0 and r, 5,
                            "GetStatus counts the app's budget")
    assert (refresh["budget_per_day"], refresh["wakeups_target"]) == (5.0, 12.0), refresh
    write_config(agent, "[refresh]\nbudget = 0.5\nwindows_per_day = 30\n")
    status = reload(agent)
    assert (status["refresh"]["budget_per_day"], status["refresh"]["wakeups_target"]) == (0.5, 30.0), status["refresh"]
    assert status["refresh"]["budget_left"] <= 0.5, status["refresh"]
    log = agent.stderr()
    assert "[refresh] budget: 5 → 0.5" in log and "[refresh] windows_per_day: 12 → 30" in log, agent.stderr_tail()
