"""The store's recovery, seen from outside the agent:

- a corrupt database file at start-up (garbage where the file should be, or a real database
  with a damaged page): the agent starts, logs it at critical, moves the file aside (kept for the
  user, beside the new one) and works on a fresh database;
- damage found while the agent runs: the caller is told, and the agent exits so that its next
  start (systemd's Restart=on-failure) recovers the file as above;
- the file removed while the agent runs (with its directory, or alone): the next write puts it
  back from what the agent holds, and nothing is lost;
- a full disk: the state directory on a small tmpfs, filled up while the agent runs. Submit and
  Cancel fail with org.bgpolicy.Error.Failed saying nothing was changed, the requests that were
  pending before stay pending (after the disk frees up, and after a restart), and the agent keeps
  serving throughout.

The tmpfs needs `mount` (root, as in the project's containers). Where mounting is refused (or
BGPOLICY_TEST_NO_TMPFS is set), the same test runs with a file size limit on the agent instead
(RLIMIT_FSIZE); the test's output says which it used. Under BGPOLICY_NO_SKIPS=1 (CI) the
fallback fails the test instead: it checks less."""

import errno
import os
import resource
import sqlite3
import subprocess
import threading
import time

import pytest

import conditions_helpers as ch
import tasks_helpers as th
from conftest import NO_SKIPS
from tasks_helpers import expect_error, later, world  # noqa: F401 - the fixture

APP = "org.example.Recovery"
IDENTIFIERS = [f"{APP}.a", f"{APP}.b", f"{APP}.c"]


def state_dir(world):
    return world.tmp / "state" / "bgpolicy"


def database(world):
    return state_dir(world) / "bgpolicy.sqlite"


def pending_identifiers(agent):
    return sorted(p["identifier"] for p in agent.list_pending() if p["app_id"] == APP)


def critical_lines(stderr):
    """The log lines at level critical (`<time> critical <label>: ...`)."""
    return [line for line in stderr.splitlines() if line.split(" ", 2)[1:2] == ["critical"]]


def moved_aside(world):
    return sorted(p for p in state_dir(world).iterdir() if p.name.startswith("bgpolicy.sqlite.corrupt-"))


def assert_recovery_in_history(agent, moved, words):
    """One machine-wide `database-recovered` entry, naming the file kept and saying `words`;
    `bgpolicy history` prints it."""
    entries = agent.events("database-recovered")
    assert len(entries) == 1, agent.history()
    assert "app_id" not in entries[0] and str(moved) in entries[0]["detail"] and words in entries[0]["detail"], entries
    assert "database-recovered" in agent.cli("history").stdout


# MARK: A corrupt file at start-up


def write_garbage(world):
    directory = state_dir(world)
    directory.mkdir(parents=True, mode=0o700)
    garbage = b"this is not a database, but the wreck of one\n" * 200
    database(world).write_bytes(garbage)
    return garbage


def damage_a_page(world):
    """A real database of this agent (an app, a pending request), with its second page
    overwritten: SQLite opens the file, and its quick_check finds the damage."""
    agent = world.start_agent()
    app = world.registered_app(APP, IDENTIFIERS)
    app.submit(IDENTIFIERS[0], "refresh", earliest_begin=later(3600))
    app.quit()
    agent.stop()
    world.agent = None
    # Everything into the main file first, so the damage is not hidden by a WAL copy of it.
    db = sqlite3.connect(database(world))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    assert not (state_dir(world) / "bgpolicy.sqlite-wal").exists()
    with open(database(world), "r+b") as f:
        page = int.from_bytes(f.read(18)[16:18], "big") or 65536
        f.seek(page)
        f.write(b"\xa5" * page)
    return database(world).read_bytes()


def history_root_page(db):
    """Checkpoints the agent's database through `db`, a connection to it, so that everything is
    in the main file; returns the history table's first page there and the page size."""
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (page,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'history'").fetchone()
    (size,) = db.execute("PRAGMA page_size").fetchone()
    return page, size


def overwrite_page(world, page, size):
    """Overwrites page `page` (counted from 1, of `size` bytes) of the agent's database file."""
    with open(database(world), "r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\xa5" * size)


def damage_the_history_table(world, db):
    """Overwrites the history table's first page in the agent's stopped database, once
    everything is in the main file: checkpointed through `db`, a connection to it, which is
    closed before the file is written."""
    page, size = history_root_page(db)
    db.close()
    overwrite_page(world, page, size)


@pytest.mark.parametrize("damage", [write_garbage, damage_a_page], ids=["garbage", "damaged-page"])
def test_corrupt_database_is_moved_aside_and_the_agent_works(world, damage):
    broken = damage(world)
    agent = world.start_agent()

    stderr = agent.stderr()
    loud = critical_lines(stderr)
    assert len(loud) == 1 and "The database was corrupt" in loud[0], stderr
    moved = moved_aside(world)
    assert len(moved) == 1, moved
    # Kept for the user as it was, the damage included: the open that found it wrote nothing
    # (GRDB's WAL set-up used to create and drop a table in it before the check ran).
    assert moved[0].read_bytes() == broken, "the broken file is kept for the user, unchanged"
    assert str(moved[0]) in loud[0], "the log says where the file went"
    assert database(world).exists()
    # The history, where `bgpolicy history` shows it, says so too.
    assert_recovery_in_history(agent, moved[0], "The database was corrupt")

    # A fresh, working database: nothing of garbage; of the real file, whose damaged page 2 is
    # its migration record (the first table made), every table read back one by one.
    if damage is write_garbage:
        assert agent.list_apps() == []
    else:
        assert [a["app_id"] for a in agent.list_apps()] == [APP]
        assert pending_identifiers(agent) == [IDENTIFIERS[0]]
    app = world.registered_app(APP, IDENTIFIERS)
    app.submit(IDENTIFIERS[0], "refresh", earliest_begin=later(3600))
    assert pending_identifiers(agent) == [IDENTIFIERS[0]]

    # It stays fixed: the next start finds a sound file and says nothing critical.
    app.quit()
    agent.stop()
    agent.previous.clear()
    agent.restart()
    assert critical_lines(agent.stderr()) == [], agent.stderr()
    assert len(moved_aside(world)) == 1
    assert pending_identifiers(agent) == [IDENTIFIERS[0]]



def test_a_damaged_table_loses_that_table_only(world):
    """A real database of this agent whose history table's first page is damaged: the file is
    moved aside, and every table still readable (the app, its pending request, its switch) is
    read back into the fresh one; the log says what was lost."""
    agent = world.start_agent()
    app = world.registered_app(APP, IDENTIFIERS)
    app.submit(IDENTIFIERS[0], "refresh", earliest_begin=later(3600))
    agent.cli("disable", APP)
    app.quit()
    agent.stop()
    db = sqlite3.connect(database(world))
    damage_the_history_table(world, db)

    agent.restart()
    loud = critical_lines(agent.stderr())
    assert len(loud) == 1 and "these are lost: history" in loud[0], agent.stderr()
    assert len(moved_aside(world)) == 1
    assert_recovery_in_history(agent, moved_aside(world)[0], "these are lost: history")
    assert [a["app_id"] for a in agent.list_apps()] == [APP]
    assert agent.app_record(APP)["enabled"] is False
    assert pending_identifiers(agent) == [IDENTIFIERS[0]]


def test_a_damaged_identifier_table_keeps_the_pending_requests(world):
    """The table of the identifiers each app registered is the one damaged: its app's pending
    requests are kept, with the identifiers they name, rather than dropped at load as
    "no longer registered" (both were lost before, though the log said the requests were
    kept). History ids go on from where they were, not from the highest one left."""
    agent = world.start_agent()
    app = world.registered_app(APP, IDENTIFIERS)
    app.submit(IDENTIFIERS[0], "refresh", earliest_begin=later(3600))
    app.submit(IDENTIFIERS[1], "processing", earliest_begin=later(3600))
    app.quit()
    agent.stop()
    db = sqlite3.connect(database(world))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (newest,) = db.execute("SELECT max(id) FROM history").fetchone()
    db.execute("DELETE FROM history WHERE id = ?", (newest,))  # as `bgpolicy forget` leaves a gap
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (page,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'app_identifiers'").fetchone()
    (size,) = db.execute("PRAGMA page_size").fetchone()
    db.close()
    overwrite_page(world, page, size)

    agent.restart()
    loud = critical_lines(agent.stderr())
    assert len(loud) == 1 and "these are lost: app_identifiers" in loud[0], agent.stderr()
    assert "Dropped a pending request" not in agent.stderr(), agent.stderr_tail()
    assert sorted(pending_identifiers(agent)) == IDENTIFIERS[:2]
    again = world.registered_app(APP, IDENTIFIERS)
    again.submit(IDENTIFIERS[2], "processing", earliest_begin=later(3600))
    assert sorted(pending_identifiers(agent)) == IDENTIFIERS
    assert min(e["id"] for e in agent.history() if e.get("event") == "submitted"
               and e.get("identifier") == IDENTIFIERS[2]) > newest


def test_a_damaged_file_of_the_previous_release_keeps_its_readable_tables(world):
    """The same damage in a file the release before left (one migration short), first opened by
    this one: an upgrade is a start. The readable tables are read back into a fresh file of
    that release's schema, which is then migrated; only the history is lost. (Salvage took
    only files of this build's schema, and lost the app and its request.)"""
    agent = world.start_agent()
    app = world.registered_app(APP, IDENTIFIERS)
    app.submit(IDENTIFIERS[0], "refresh", earliest_begin=later(3600))
    app.quit()
    agent.stop()
    db = sqlite3.connect(database(world))
    # As the release before v7-refresh-yield left it.
    db.execute("DELETE FROM grdb_migrations WHERE identifier = 'v7-refresh-yield'")
    db.execute("ALTER TABLE planner_state DROP COLUMN paid_trials")
    db.execute("ALTER TABLE planner_state DROP COLUMN paid_successes")
    db.commit()
    damage_the_history_table(world, db)

    agent.restart()
    loud = critical_lines(agent.stderr())
    assert len(loud) == 1 and "these are lost: history" in loud[0], agent.stderr()
    assert [a["app_id"] for a in agent.list_apps()] == [APP]
    assert pending_identifiers(agent) == [IDENTIFIERS[0]]
    with sqlite3.connect(f"file:{database(world)}?mode=ro", uri=True) as db:
        assert ("v7-refresh-yield",) in db.execute("SELECT identifier FROM grdb_migrations").fetchall()


def test_damage_found_while_the_agent_runs_stops_it_and_the_next_start_recovers(world):
    """The history table's first page damaged under a running agent (after the check at start):
    the next write that reads it fails with org.bgpolicy.Error.Failed saying the database is
    damaged; the agent logs it at critical and exits with a failure status, so that systemd
    starts it again (Restart=on-failure); that start moves the file aside and keeps every
    table still readable."""
    agent = world.start_agent()
    app = world.registered_app(APP, IDENTIFIERS)
    app.submit(IDENTIFIERS[0], "refresh", earliest_begin=later(3600))
    db = sqlite3.connect(database(world))
    overwrite_page(world, *history_root_page(db))
    # A write from another connection: the agent's next transaction sees the database changed,
    # drops the pages it had cached, and reads the damaged one from the file.
    (version,) = db.execute("PRAGMA user_version").fetchone()
    db.execute(f"PRAGMA user_version = {version}")
    db.close()

    message = expect_error("Failed", app.submit, IDENTIFIERS[1], "processing", earliest_begin=later(3600))
    assert "damaged" in message and "nothing was changed" in message and "try again" in message, message
    th.wait_until(lambda: not agent.alive(), 10, "the agent to exit")
    assert agent.proc.popen.returncode not in (0, None), agent.proc.popen.returncode
    loud = critical_lines(agent.stderr())
    assert len(loud) == 1 and "found damaged while the agent ran" in loud[0], agent.stderr_tail()
    assert moved_aside(world) == [], "the running agent leaves the file where it is"
    # ... and says the file is damaged, so that the next start does not trust quick_check alone.
    marker = state_dir(world) / "bgpolicy.sqlite.damaged"
    assert marker.exists()

    # What systemd does next: the agent starts again, and its start-up recovery runs.
    agent.previous.append(agent.proc)
    agent.restart()
    loud = critical_lines(agent.proc.stderr())
    assert len(loud) == 1 and "these are lost: history" in loud[0], agent.stderr_tail()
    assert len(moved_aside(world)) == 1
    assert_recovery_in_history(agent, moved_aside(world)[0], "these are lost: history")
    assert [a["app_id"] for a in agent.list_apps()] == [APP]
    assert pending_identifiers(agent) == [IDENTIFIERS[0]]
    assert not marker.exists()


def killed_and_restarted_with_every_request(agent):
    """SIGKILLs `agent` and starts it again: it must start without a critical line and still
    hold the app, its three requests and their three `submitted` entries."""
    agent.sigkill()
    agent.restart()
    assert critical_lines(agent.proc.stderr()) == [], agent.stderr_tail()
    assert [a["app_id"] for a in agent.list_apps()] == [APP]
    assert pending_identifiers(agent) == IDENTIFIERS
    submitted = [e for e in agent.history() if e.get("event") == "submitted"]
    assert len(submitted) == 3, agent.history()


@pytest.mark.parametrize("what", ["the state directory", "the database file alone"])
def test_a_database_removed_under_the_running_agent_is_written_again(world, what):
    """Someone removes the agent's state (the whole directory, or the file and not its -wal)
    while it runs: the next write puts the database back at its path from what the agent holds,
    later writes go to it, and a crash after that (SIGKILL: no checkpoint at stop) loses
    nothing; the journal says what happened and how to start afresh."""
    import shutil
    agent = world.start_agent()
    app = world.registered_app(APP, IDENTIFIERS)
    app.submit(IDENTIFIERS[0], "refresh", earliest_begin=later(3600))
    if what == "the state directory":
        shutil.rmtree(state_dir(world))
    else:
        database(world).unlink()
        assert (state_dir(world) / "bgpolicy.sqlite-wal").exists()
    assert not database(world).exists()

    app.submit(IDENTIFIERS[1], "processing", earliest_begin=later(3600))
    assert database(world).exists()
    th.wait_until(lambda: "The database was removed while the agent ran; it was written again" in agent.stderr(),
                  5, "the agent to log the restored file")
    assert "stop the agent first (systemctl --user stop bgpolicyd), then remove the file" in agent.stderr()
    app.submit(IDENTIFIERS[2], "processing", earliest_begin=later(3600))
    assert agent.alive() and critical_lines(agent.stderr()) == [], agent.stderr_tail()

    killed_and_restarted_with_every_request(agent)


def test_a_log_removed_under_the_running_agent_loses_nothing_at_a_crash(world):
    """Someone removes the database's -wal alone while the agent runs: SQLite goes on writing
    to the log it has open, so what was committed since the last checkpoint, and everything
    after, was in a removed file only, and a SIGKILL then lost all of it (the app, every
    request). The next write puts the database back from what the agent holds, with a log of
    its own at the path; the journal says what happened."""
    agent = world.start_agent()
    app = world.registered_app(APP, IDENTIFIERS)
    app.submit(IDENTIFIERS[0], "refresh", earliest_begin=later(3600))
    wal = state_dir(world) / "bgpolicy.sqlite-wal"
    wal.unlink()

    app.submit(IDENTIFIERS[1], "processing", earliest_begin=later(3600))
    assert wal.exists()
    th.wait_until(lambda: "The database's log (its -wal file) was removed while the agent ran" in agent.stderr(),
                  5, "the agent to log the restored file")
    app.submit(IDENTIFIERS[2], "processing", earliest_begin=later(3600))
    assert agent.alive() and critical_lines(agent.stderr()) == [], agent.stderr_tail()
    # A log that stays is no removal: the file is written again once, not at every write.
    assert agent.stderr().count("The database's log (its -wal file) was removed") == 1, agent.stderr_tail()

    killed_and_restarted_with_every_request(agent)


def test_a_file_marked_damaged_is_moved_aside_even_if_quick_check_passes(world):
    """A sound file with the marker a running agent leaves when SQLite calls the file damaged
    (`bgpolicy.sqlite.damaged`): quick_check does not see all that a read can trip on, so the
    next start moves the file aside and reads every table back, whatever it says, rather than
    stop at every start. Nothing readable is lost, and the marker goes."""
    agent = world.start_agent()
    app = world.registered_app(APP, IDENTIFIERS)
    app.submit(IDENTIFIERS[0], "refresh", earliest_begin=later(3600))
    app.quit()
    agent.stop()
    marker = state_dir(world) / "bgpolicy.sqlite.damaged"
    marker.touch()

    agent.previous.clear()
    agent.restart()
    loud = critical_lines(agent.stderr())
    assert len(loud) == 1 and "all its tables were read back" in loud[0], agent.stderr()
    assert len(moved_aside(world)) == 1 and not marker.exists()
    assert [a["app_id"] for a in agent.list_apps()] == [APP]
    assert pending_identifiers(agent) == [IDENTIFIERS[0]]


# MARK: A full disk


def mount_small_tmpfs(world, path, size="4m"):
    """A tmpfs of `size` at `path`, unmounted when the test ends; None when mounted, else why not."""
    path.mkdir(parents=True, exist_ok=True)
    if os.environ.get("BGPOLICY_TEST_NO_TMPFS"):
        return "BGPOLICY_TEST_NO_TMPFS is set"
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                            capture_output=True, text=True, timeout=10, check=False)
    if result.returncode != 0:
        return result.stderr.strip() or f"mount exited {result.returncode}"
    world.stack.push(lambda: subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=10, check=False))
    return None


class TmpfsDisk:
    """The state directory on a small tmpfs: full when a filler file takes every free block."""

    exact = True  # SQLite sees ENOSPC, which the agent words as "full"

    def __init__(self, world, mount):
        self.mount = mount
        self.filler = None

    def start_agent(self, world):
        return world.start_agent()

    def fill(self, _agent):
        self.filler = self.mount / "filler"
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for size in (1 << 20, 1 << 16, 1 << 12, 1):
                chunk = b"\x00" * size
                while True:
                    try:
                        os.write(fd, chunk)
                    except OSError as error:
                        assert error.errno == errno.ENOSPC, error
                        break
        finally:
            os.close(fd)

    def free(self, _agent):
        self.filler.unlink()


class SizeLimitedDisk:
    """Where no tmpfs can be mounted: the agent's file size limit (RLIMIT_FSIZE, set on the
    running process as `prlimit --fsize` does) lowered to the size of its WAL, so that the next
    write to the database fails as on a full disk. SIGXFSZ is ignored in the agent (set before
    exec, which keeps it), so the write fails with EFBIG instead of killing it; SQLite reports
    that as an I/O error, not SQLITE_FULL, so only "nothing was changed" is asserted."""

    exact = False

    def __init__(self, world, _mount):
        self.world = world

    def start_agent(self, world):
        world.agent = XfszIgnoringAgent(world)
        return world.agent

    def fill(self, agent):
        wal = state_dir(self.world) / "bgpolicy.sqlite-wal"
        _, hard = resource.prlimit(agent.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(agent.pid, resource.RLIMIT_FSIZE, (wal.stat().st_size, hard))

    def free(self, agent):
        _, hard = resource.prlimit(agent.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(agent.pid, resource.RLIMIT_FSIZE, (hard, hard))


class XfszIgnoringAgent(th.TaskAgent):
    def start(self):
        command = ["/bin/sh", "-c", 'trap "" XFSZ; exec "$0" "$@"', self.bin_dir / "bgpolicyd", "--log-level",
                   self.log_level]
        self.proc = self.world.stack.push(ch.Proc(command, self.env, name="bgpolicyd"))
        self.world.session.wait_for_name(th.AGENT_NAME, process=self.proc)
        return self


def simulated_full_disk(world):
    """The state directory on a small tmpfs, or under RLIMIT_FSIZE where mounting is refused.
    The fallback checks less (no "full" in the message, no start on a full disk), so under
    BGPOLICY_NO_SKIPS=1 (CI) it fails the test instead, as a skip would."""
    mount = world.tmp / "state"
    refused = mount_small_tmpfs(world, mount)
    if refused and NO_SKIPS:
        pytest.fail(f"no tmpfs for a full disk ({refused}), and BGPOLICY_NO_SKIPS=1 forbids the weaker "
                    "RLIMIT_FSIZE fallback: give the tests `mount` (see Docs/Testing.md), or unset BGPOLICY_NO_SKIPS")
    disk = SizeLimitedDisk(world, mount) if refused else TmpfsDisk(world, mount)
    print(f"full disk simulated with {type(disk).__name__}" + (f" (no tmpfs: {refused})" if refused else ""))
    return disk


def test_full_disk_loses_no_pending_request_and_the_agent_keeps_serving(world):
    disk = simulated_full_disk(world)
    agent = disk.start_agent(world)
    app = world.registered_app(APP, IDENTIFIERS)
    app.submit(IDENTIFIERS[0], "refresh", earliest_begin=later(3600))
    assert pending_identifiers(agent) == [IDENTIFIERS[0]]

    disk.fill(agent)
    message = expect_error("Failed", app.submit, IDENTIFIERS[1], "processing", earliest_begin=later(3600))
    assert "nothing was changed" in message and ("full" in message or not disk.exact), message
    message = expect_error("Failed", app.cancel, IDENTIFIERS[0])
    assert "nothing was changed" in message, message
    message = expect_error("Failed", app.scheduler, "CancelAll")
    assert "nothing was changed" in message, message
    # The journal, where the message sends a person, says what failed.
    for what in ("a request", "a cancellation", "a cancellation of all requests"):
        assert f"The database failed on {what}; the caller was told nothing changed" in agent.stderr(), agent.stderr_tail()
    # Nothing changed indeed, and the agent still answers everyone.
    assert pending_identifiers(agent) == [IDENTIFIERS[0]]
    assert [p["identifier"] for p in app.pending()] == [IDENTIFIERS[0]]
    assert agent.status() is not None and agent.alive()

    # The disk frees up: the same agent writes again, and the earlier request is still there.
    disk.free(agent)
    app.submit(IDENTIFIERS[1], "processing", earliest_begin=later(3600))
    assert pending_identifiers(agent) == IDENTIFIERS[:2]

    # Full again, then the agent is killed outright and started once there is room.
    disk.fill(agent)
    expect_error("Failed", app.submit, IDENTIFIERS[2], "processing", earliest_begin=later(3600))
    app.quit()
    agent.sigkill()
    if isinstance(disk, TmpfsDisk):
        # It starts on the full disk too (its housekeeping waits), and serves what it has.
        agent.restart()
        assert pending_identifiers(agent) == IDENTIFIERS[:2]
        assert agent.alive()
        agent.sigkill()
        disk.free(agent)
    agent.restart()
    assert pending_identifiers(agent) == IDENTIFIERS[:2]
    app = world.registered_app(APP, IDENTIFIERS, name="again")
    app.submit(IDENTIFIERS[2], "processing", earliest_begin=later(3600))
    assert pending_identifiers(agent) == IDENTIFIERS


@pytest.mark.parametrize("then", ["nothing", "sqlite3"])
def test_a_clean_stop_then_a_start_on_a_full_disk(world, then):
    """A clean stop folds the WAL into the file and leaves it empty; the next start comes on a
    full disk. The agent starts (its open writes nothing: GRDB's WAL set-up would write a table
    into an empty WAL, which failed as SQLITE_FULL, and systemd soon stops restarting an agent
    that exits), serves every pending request, answers Submit with Failed while the disk is full,
    and writes again once there is room. Also when a user's sqlite3 opened the file after the
    stop: closing it removed the -wal and -shm, and SQLite cannot read a WAL file without
    writing a -shm first (the agent then keeps the WAL's index in its memory instead)."""
    disk = simulated_full_disk(world)
    if not isinstance(disk, TmpfsDisk):
        pytest.skip("needs a tmpfs to fill while no agent runs")
    agent = disk.start_agent(world)
    app = world.registered_app(APP, IDENTIFIERS)
    app.submit(IDENTIFIERS[0], "refresh", earliest_begin=later(3600))
    app.submit(IDENTIFIERS[1], "processing", earliest_begin=later(3600))
    app.quit()
    agent.stop()
    wal = state_dir(world) / "bgpolicy.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0, "the stop empties the WAL"
    if then == "sqlite3":
        db = sqlite3.connect(database(world))
        db.execute("SELECT count(*) FROM pending").fetchall()
        db.close()
        assert not (state_dir(world) / "bgpolicy.sqlite-shm").exists()

    disk.fill(agent)
    agent.restart()
    assert agent.alive(), agent.stderr_tail()
    assert ("opened without its shared-memory file" in agent.proc.stderr()) == (then == "sqlite3"), agent.stderr_tail()
    assert pending_identifiers(agent) == IDENTIFIERS[:2]
    # Every call that writes is refused, saying so, and the agent serves on: a Register...
    app = world.app(name="again")
    message = expect_error("Failed", app.register, IDENTIFIERS, app_id=APP)
    assert "nothing was changed" in message and "full" in message, message
    assert pending_identifiers(agent) == IDENTIFIERS[:2] and agent.alive()
    # ... and, once the app could register, a Submit.
    disk.free(agent)
    assert app.register(IDENTIFIERS, app_id=APP) == APP
    disk.fill(agent)
    message = expect_error("Failed", app.submit, IDENTIFIERS[2], "processing", earliest_begin=later(3600))
    assert "nothing was changed" in message and "full" in message, message
    assert pending_identifiers(agent) == IDENTIFIERS[:2] and agent.alive()

    disk.free(agent)
    app.submit(IDENTIFIERS[2], "processing", earliest_begin=later(3600))
    assert pending_identifiers(agent) == IDENTIFIERS
    app.quit()
    agent.stop()
    agent.restart()
    assert pending_identifiers(agent) == IDENTIFIERS
    assert critical_lines(agent.stderr()) == [], agent.stderr_tail()


def test_submits_that_fail_together_leave_the_stored_request(world):
    """Two Submits of one identifier under way at once (from two connections of the app), both refused by a full disk: the
    request stays the one stored. (The second put back what the first was to be, which was
    never stored: it was then delivered, and a restart lost it.)"""
    disk = simulated_full_disk(world)
    agent = disk.start_agent(world)
    # Two connections of one app (calls from one connection run in order): this process, in
    # the app's unit, so that the agent identifies both.
    world.fake_proc(os.getpid(), cgroup=th.unit_cgroup(f"app-gnome-{APP}-77.scope"))
    conns = [th.connect(world.daemon.address) for _ in range(2)]
    for conn in conns:
        world.stack.push(lambda conn=conn: conn.close_sync(None))
        assert th.call(conn, th.SCHEDULER, "Register", "asa{sv}", [IDENTIFIERS, th.register_options()], "(s)") == (APP,)
    stored = int(later(3600))
    th.call(conns[0], th.SCHEDULER, "Submit", "ssa{sv}",
            [IDENTIFIERS[0], "refresh", th.submit_options(earliest_begin=stored)])

    disk.fill(agent)
    for round_ in range(5):
        errors = []

        def submit(conn, begin):
            try:
                th.call(conn, th.SCHEDULER, "Submit", "ssa{sv}",
                        [IDENTIFIERS[0], "refresh", th.submit_options(earliest_begin=begin)])
                errors.append(None)
            except th.AgentError as error:
                errors.append(error.name)
        threads = [threading.Thread(target=submit, args=(conns[k], stored + 60 * (2 * round_ + k + 1)))
                   for k in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert errors == [th.ERROR_PREFIX + "Failed"] * 2, errors
        assert [(p["identifier"], p["earliest_begin"]) for p in agent.list_pending()] == [(IDENTIFIERS[0], stored)], round_
    disk.free(agent)


def test_a_completion_on_a_full_disk_is_refused_and_can_be_sent_again(world):
    """Store first, memory second, for `SetTaskCompleted` too: on a full disk the app is told
    `Failed` and its task stays running, so that it can tell the agent again once there is room.
    (It was answered OK and ended in memory only, and the next start recorded it interrupted.)"""
    disk = simulated_full_disk(world)
    agent = disk.start_agent(world)
    app = world.registered_app(APP, IDENTIFIERS)
    app.submit(IDENTIFIERS[0], "refresh")
    run = app.wait_run_task(IDENTIFIERS[0], timeout=15)

    disk.fill(agent)
    message = expect_error("Failed", app.set_task_completed, run["task_id"], True, "new-data")
    assert "nothing was changed" in message, message
    assert [r["task_ids"] for r in agent.status()["running"]] == [[run["task_id"]]], agent.status()
    assert "The database failed on a task's completion" in agent.stderr(), agent.stderr_tail()

    disk.free(agent)
    app.set_task_completed(run["task_id"], True, "new-data")
    assert agent.wait_history("completed", task_id=run["task_id"])["result"] == "new-data"
    assert agent.status()["running"] == []
    # It is stored: after a crash, the task is completed, not interrupted.
    agent.sigkill()
    agent.restart()
    assert agent.events("interrupted") == []
    assert [e["result"] for e in agent.events("completed", task_id=run["task_id"])] == ["new-data"]


def test_a_simulated_launch_on_a_full_disk_is_refused_and_the_request_stays(world):
    """`SimulateLaunch` records the slice before it delivers: on a full disk it answers `Failed`,
    delivers nothing, and the request stays pending, to be launched once there is room."""
    disk = simulated_full_disk(world)
    agent = disk.start_agent(world)
    app = world.registered_app(APP, IDENTIFIERS)
    app.submit(IDENTIFIERS[0], "refresh", earliest_begin=later(3600))

    disk.fill(agent)
    message = expect_error("Failed", agent.simulate_launch, APP, IDENTIFIERS[0])
    assert "nothing was changed" in message, message
    assert pending_identifiers(agent) == [IDENTIFIERS[0]]
    assert agent.status()["running"] == [] and app.events_of("RunTask") == [], app.app_events()

    disk.free(agent)
    agent.simulate_launch(APP, IDENTIFIERS[0])
    app.wait_run_task(IDENTIFIERS[0], timeout=15)
    assert pending_identifiers(agent) == []


def test_tasks_left_running_do_not_keep_the_agent_from_starting_on_a_full_disk(world):
    """Closing the tasks a killed agent left running (`interrupted`) takes a write. On a full
    disk it is put off to the next start, rather than the agent failing to start (systemd would
    soon stop restarting it): it starts, serves, and the next start with room closes them."""
    disk = simulated_full_disk(world)
    if not isinstance(disk, TmpfsDisk):
        pytest.skip("needs a tmpfs to fill while no agent runs")
    agent = disk.start_agent(world)
    app = world.registered_app(APP, IDENTIFIERS)
    app.submit(IDENTIFIERS[0], "refresh")
    run = app.wait_run_task(IDENTIFIERS[0], timeout=15)
    app.submit(IDENTIFIERS[1], "processing", earliest_begin=later(3600))
    agent.sigkill()
    app.quit()

    disk.fill(agent)
    agent.restart()
    assert agent.alive() and pending_identifiers(agent) == [IDENTIFIERS[1]]
    assert "Could not record the tasks the agent's last stop interrupted" in agent.stderr(), agent.stderr_tail()
    assert agent.events("interrupted") == []

    agent.sigkill()
    disk.free(agent)
    agent.restart()
    assert [e["task_id"] for e in agent.events("interrupted")] == [run["task_id"]]
    assert pending_identifiers(agent) == [IDENTIFIERS[1]]


def test_a_slice_that_cannot_be_recorded_is_tried_again_minutes_later_not_at_once(world):
    """A refresh falls due while the disk is full: the slice cannot be recorded, so it is not
    delivered, and the request stays pending. The next try comes after the delivery retry wait,
    like a delivery that failed. (Each evaluation asked for the next, which found the app
    eligible in the same window and tried the write again: thousands of tries and error lines
    in seconds, every window.)"""
    disk = simulated_full_disk(world)
    agent = disk.start_agent(world)
    app = world.registered_app(APP, IDENTIFIERS)
    app.submit(IDENTIFIERS[0], "refresh", earliest_begin=later(2))
    disk.fill(agent)
    th.wait_until(lambda: "Could not record a slice" in agent.stderr(), 10, "the refresh falls due on the full disk")
    time.sleep(3)
    tries = agent.stderr().count("Could not record a slice")
    assert tries == 1, f"{tries} tries to record the slice in 3 s; agent stderr:\n{agent.stderr_tail(8)}"
    assert "trying again in 5 minutes" in agent.stderr()
    assert app.events_of("RunTask") == []
    assert agent.alive(), agent.stderr_tail(30)
    assert pending_identifiers(agent) == [IDENTIFIERS[0]]
    explanation = agent.explain(APP, IDENTIFIERS[0])
    assert "unreachable" in explanation["blocking"] and "retrying in" in " ".join(explanation["reasons"]), explanation
    assert agent.alive()


def reserve(world):
    """The room the store keeps for a full disk (`TaskStore.keepReserve`)."""
    return state_dir(world) / "bgpolicy.sqlite.reserve"


class FailedDelivery:
    """An activatable app whose launch fails after 3 s: its request, delivered while the disk
    fills up, is put back on the full disk. `reserve_spent`: the store's reserve is removed
    before the disk fills, as if an earlier put-back had spent it."""

    SLOW, IDENTIFIER = "org.example.Slow", "org.example.Slow.refresh"

    def __init__(self, world, reserve_spent):
        self.world = world
        self.disk = simulated_full_disk(world)
        if not isinstance(self.disk, TmpfsDisk):
            pytest.skip("needs a tmpfs to fill while a delivery is under way")
        (world.service_dir / f"{self.SLOW}.service").write_text(
            f'[D-BUS Service]\nName={self.SLOW}\nExec=/bin/sh -c "sleep 3; exit 1"\n')
        self.agent = world.start_agent()
        assert reserve(world).stat().st_size == 1 << 20, "the agent keeps 1 MiB in reserve from its start"
        app = world.app("slow")
        app.register([self.IDENTIFIER], app_id=self.SLOW, bus_name=self.SLOW)
        app.submit(self.IDENTIFIER, "refresh", earliest_begin=later(3600))
        app.quit()
        th.wait_until(lambda: self.agent.app_record(self.SLOW)["connected"] is False, 5, "the app is gone")
        if reserve_spent:
            reserve(world).unlink()

    def fail_on_full_disk(self):
        outcome = []
        # From a connection of its own: calls from one connection are answered in order, and
        # the test asks the agent how the launch goes while it waits for the app.
        launcher = th.connect(self.world.daemon.address)
        self.world.stack.push(lambda: launcher.close_sync(None))

        def launch():
            try:
                th.call(launcher, th.ADMIN, "SimulateLaunch", "ss", (self.SLOW, self.IDENTIFIER), timeout=40)
                outcome.append(None)
            except th.AgentError as error:
                outcome.append(error.name)
        thread = threading.Thread(target=launch)
        thread.start()
        th.wait_until(lambda: self.agent.explain(self.SLOW, self.IDENTIFIER)["state"] == "running", 5,
                      "the bus starts the app")
        self.disk.fill(self.agent)
        thread.join(timeout=40)
        assert outcome == [th.ERROR_PREFIX + "Unavailable"], outcome
        assert [p["identifier"] for p in self.agent.list_pending()] == [self.IDENTIFIER]

    def stored(self):
        with sqlite3.connect(f"file:{database(self.world)}?mode=ro", uri=True) as db:
            return [row[0] for row in db.execute("SELECT identifier FROM pending WHERE app_id = ?", (self.SLOW,))]


def test_a_request_put_back_on_a_full_disk_is_written_when_there_is_room(tmp_path):
    """A delivery that fails puts its request back: pending again, and the task's running row
    gone. On a full disk, with the store's reserve spent, that write fails; the request stays
    pending in memory, and is written at the next chance, so that a crash after the disk has
    room does not close the task as interrupted and lose the request. (It was written never,
    and a restart lost it.)"""
    with th.open_world(tmp_path, activation=True) as world:
        delivery = FailedDelivery(world, reserve_spent=True)
        delivery.fail_on_full_disk()
        agent = delivery.agent
        delivery.disk.free(agent)
        # Any evaluation is the next chance: here, another app's Submit.
        other = world.registered_app("org.example.Other", ["org.example.Other.refresh"])
        other.submit("org.example.Other.refresh", "refresh", earliest_begin=later(3600))
        th.wait_until(lambda: delivery.stored() == [delivery.IDENTIFIER], 5, "the request written again")
        agent.sigkill()
        agent.restart()
        assert sorted(p["identifier"] for p in agent.list_pending()) == ["org.example.Other.refresh",
                                                                         delivery.IDENTIFIER]
        assert agent.events("interrupted", app_id=delivery.SLOW) == []
        for words in ("Could not put a request back on disk", "A request put back in memory is on disk again"):
            assert words in agent.stderr(), words
        # The start made the reserve again, now that there is room.
        assert reserve(world).stat().st_size == 1 << 20


def test_a_request_put_back_on_a_full_disk_is_written_on_the_reserve_and_survives_a_stop(tmp_path):
    """The same put-back with the store's reserve in place: the reserve is given back to the
    file system and the write is tried again at once, so that a stop, or a crash, before the
    disk has room again does not lose the request. (Before the reserve, a stop on the still
    full disk left the task running on disk, and the next start closed it as interrupted and
    lost the request.)"""
    with th.open_world(tmp_path, activation=True) as world:
        delivery = FailedDelivery(world, reserve_spent=False)
        delivery.fail_on_full_disk()
        agent = delivery.agent
        # Written while the disk is still full: on disk now, not at the next chance.
        assert delivery.stored() == [delivery.IDENTIFIER]
        assert not reserve(world).exists()
        assert "the room kept in reserve was given back" in agent.stderr(), agent.stderr_tail(20)
        assert "Could not put a request back on disk" not in agent.stderr()
        # Others take what the reserve gave back, and the agent stops on the full disk.
        delivery.disk.fill(agent)
        agent.stop()
        assert "is lost" not in agent.stderr()
        delivery.disk.free(agent)
        agent.restart()
        assert [p["identifier"] for p in agent.list_pending()] == [delivery.IDENTIFIER]
        assert agent.events("interrupted", app_id=delivery.SLOW) == []
        assert reserve(world).stat().st_size == 1 << 20


def test_a_request_put_back_with_no_reserve_and_a_stop_on_the_full_disk_is_said_lost(tmp_path):
    """The limit: with the reserve spent and the disk still full at the stop, the request put
    back cannot be written, and the next start closes its task as interrupted. The stop says so
    for each such request, naming it, so that the user knows which work to start again."""
    with th.open_world(tmp_path, activation=True) as world:
        delivery = FailedDelivery(world, reserve_spent=True)
        delivery.fail_on_full_disk()
        agent = delivery.agent
        agent.stop()
        lost = {line for line in agent.proc.stderr().splitlines() if "could not be written before the stop, and is lost" in line}
        assert len(lost) == 1 and delivery.IDENTIFIER in lost.pop(), agent.stderr_tail(20)
        delivery.disk.free(agent)
        agent.restart()
        assert agent.list_pending() == []
        assert [e["identifier"] for e in agent.events("interrupted", app_id=delivery.SLOW)] == [delivery.IDENTIFIER]
