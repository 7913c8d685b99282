"""SIGHUP (`systemctl --user reload bgpolicyd`) reads the configuration file again: the new
values act from their next use, an invalid file changes nothing and says why, and the knob
that needs a restart says so. Driven by a real app process on a private bus."""

import signal
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
