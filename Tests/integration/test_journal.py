"""bgpolicyd's output as the journal stores it, and its exit status for errors a person must
fix. Under systemd the agent's standard error is the journal's stream, named by JOURNAL_STREAM
(`device:inode`); the agent then prefixes each line with its syslog priority (`<3>` for an
error), so that `journalctl -p err` finds errors. These tests give the agent a file as standard
error and JOURNAL_STREAM naming that file, as systemd would name its socket."""
import os
import signal
import subprocess
import time
from pathlib import Path

from test_agent import BIN, Bus

EX_CONFIG = 78


def run_agent(tmp, stderr_path, journal, *, config=None, bus=None, system_bus="unix:path=/nonexistent"):
    config_dir = Path(tmp) / "config" / "bgpolicy"
    config_dir.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (config_dir / "bgpolicy.conf").write_text(config)
    err = open(stderr_path, "wb")
    env = dict(os.environ, XDG_STATE_HOME=str(Path(tmp) / "state"), XDG_CONFIG_HOME=str(Path(tmp) / "config"),
               DBUS_SESSION_BUS_ADDRESS=bus.address if bus else "unix:path=/nonexistent",
               DBUS_SYSTEM_BUS_ADDRESS=system_bus)
    env.pop("JOURNAL_STREAM", None)
    if journal is True:
        info = os.fstat(err.fileno())
        env["JOURNAL_STREAM"] = f"{info.st_dev}:{info.st_ino}"
    elif journal:
        env["JOURNAL_STREAM"] = journal
    proc = subprocess.Popen([str(BIN / "bgpolicyd")], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=err)
    err.close()
    return proc


def test_an_invalid_configuration_exits_78_at_error_priority_in_the_journal(tmp_path):
    config = "[limits]\nbogus = 1\n"
    proc = run_agent(tmp_path / "a", tmp_path / "plain.err", journal=None, config=config)
    assert proc.wait(timeout=20) == EX_CONFIG
    plain = (tmp_path / "plain.err").read_text()
    assert plain.startswith("Error: invalid configuration: ") and "bgpolicy.conf:2:" in plain, plain

    proc = run_agent(tmp_path / "b", tmp_path / "journal.err", journal=True, config=config)
    assert proc.wait(timeout=20) == EX_CONFIG
    journal = (tmp_path / "journal.err").read_text()
    assert journal.startswith("<3>Error: invalid configuration: ") and "bgpolicy.conf:2:" in journal, journal


def wait_for_line(path, predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = path.read_text(errors="replace").splitlines()
        if any(predicate(line) for line in lines):
            return lines
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout}s; stderr:\n{path.read_text(errors='replace')}")


def test_the_running_agent_logs_each_line_with_its_priority_to_the_journal(tmp_path):
    bus = Bus()
    try:
        err = tmp_path / "journal.err"
        proc = run_agent(tmp_path, err, journal=True, bus=bus)
        try:
            # No system bus: a warning. Starting up: info lines.
            lines = wait_for_line(err, lambda line: line.startswith("<4>") and "system bus is not reachable" in line,
                                  20, "the missing system bus, at warning priority")
            wait_for_line(err, lambda line: line.startswith("<6>"), 20, "an info line")
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
        lines = err.read_text(errors="replace").splitlines()
        assert lines and all(line[:3] in {"<2>", "<3>", "<4>", "<5>", "<6>", "<7>"} for line in lines), lines
        # The journal stamps entries itself: no timestamp of the agent's own.
        assert not any(line[3:7].isdigit() for line in lines), lines
    finally:
        bus.stop()


def test_journal_stream_naming_another_file_is_not_the_journal(tmp_path):
    """JOURNAL_STREAM is inherited by children whose output went elsewhere: the agent checks
    that its standard error is that stream before writing priorities."""
    bus = Bus()
    try:
        err = tmp_path / "plain.err"
        other = tmp_path / "other"
        other.write_text("")
        info = os.stat(other)
        proc = run_agent(tmp_path, err, journal=f"{info.st_dev}:{info.st_ino}", bus=bus)
        try:
            wait_for_line(err, lambda line: "system bus is not reachable" in line, 20, "the missing system bus")
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
        lines = err.read_text(errors="replace").splitlines()
        assert not any(line.startswith("<") for line in lines), lines
        assert any(" warning " in line and "system bus is not reachable" in line for line in lines), lines
    finally:
        bus.stop()


def test_a_standard_error_whose_reader_is_gone_does_not_kill_the_agent(tmp_path):
    """`bgpolicyd 2>&1 | less`, and less quit: the next log line (here the reload's) fails with
    EPIPE. The agent goes on, answers, and still stops cleanly; before, SIGPIPE killed it past
    its clean stop."""
    bus = Bus()
    read_end, write_end = os.pipe()
    try:
        env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "config"),
                   DBUS_SESSION_BUS_ADDRESS=bus.address, DBUS_SYSTEM_BUS_ADDRESS="unix:path=/nonexistent")
        env.pop("JOURNAL_STREAM", None)
        proc = subprocess.Popen([str(BIN / "bgpolicyd")], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=write_end)
        os.close(write_end)
        try:
            status = lambda: subprocess.run([str(BIN / "bgpolicy"), "status", "--json"], env=env,
                                            capture_output=True, text=True, timeout=20)
            deadline = time.monotonic() + 20
            while status().returncode != 0:
                assert proc.poll() is None and time.monotonic() < deadline, f"not ready: {proc.poll()}"
                time.sleep(0.05)
            os.close(read_end)
            read_end = None
            proc.send_signal(signal.SIGHUP)  # logs "reloaded" (or why not): a write to the pipe
            time.sleep(0.5)
            assert proc.poll() is None, f"the agent died: {proc.returncode}"
            assert status().returncode == 0
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
    finally:
        if read_end is not None:
            os.close(read_end)
        bus.stop()


def test_standard_descriptors_started_closed_are_held_on_dev_null(tmp_path):
    """Started with standard error (and input) closed, the agent holds /dev/null there, so that
    its log lines cannot land in the first file it opens after."""
    bus = Bus()
    try:
        env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "config"),
                   DBUS_SESSION_BUS_ADDRESS=bus.address, DBUS_SYSTEM_BUS_ADDRESS="unix:path=/nonexistent")
        # umockdev-wrapper's preload opens a socket of its own before the agent's main runs: it
        # would take descriptor 2 before the agent can hold it. It is not needed here.
        env.pop("LD_PRELOAD", None)

        def close_stdin_and_stderr():
            os.close(0)
            os.close(2)

        proc = subprocess.Popen([str(BIN / "bgpolicyd")], env=env, stdout=subprocess.DEVNULL,
                                preexec_fn=close_stdin_and_stderr)
        try:
            deadline = time.monotonic() + 20
            while subprocess.run([str(BIN / "bgpolicy"), "status", "--json"], env=env, capture_output=True,
                                 timeout=20).returncode != 0:
                assert proc.poll() is None and time.monotonic() < deadline, f"not ready: {proc.poll()}"
                time.sleep(0.05)
            assert os.readlink(f"/proc/{proc.pid}/fd/0") == "/dev/null"
            assert os.readlink(f"/proc/{proc.pid}/fd/2") == "/dev/null"
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
    finally:
        bus.stop()
