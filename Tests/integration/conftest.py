"""Shared fixtures for bgpolicy's integration tests (Docs/Testing.md, /work/shared/TESTBED.md).

- `bin_dir`: the SwiftPM bin folder, from $BGPOLICY_BUILD_DIR or `swift build --show-bin-path`.
- `private_bus`: a dbus-daemon of the test's own; yields its address, with
  DBUS_SESSION_BUS_ADDRESS set to it for the test (and every process it starts).
- `private_system_bus`: a second one, exported as DBUS_SYSTEM_BUS_ADDRESS.
- `processes`: starts processes that are killed after the test (`processes.start(...)`).
- `gdbus(address, ...)`, `busctl(address, ...)`: run the tools against a bus address with a
  timeout, returning the CompletedProcess.

Every subprocess has a timeout, and every process a test starts is ended when it finishes.
"""

import os
import select
import signal
import stat
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The private buses use the scripts' configuration when it is there: the stock session bus
# without service directories, so nothing installed on the machine can be activated.
BUS_CONFIG = ROOT / "scripts" / "session-bus.conf"
DEFAULT_TIMEOUT = 30


# MARK: Skips

# Some tests need what a machine may not grant: CAP_SYS_TIME to step the clock, a tmpfs to fill
# the disk, `unshare`. On a developer's machine they skip, and `-ra` lists why; in CI
# (.ci/run sets BGPOLICY_NO_SKIPS=1) a skip fails the test instead, so a green CI cannot hide
# that clock steps or a full disk went untested. An expected failure (xfail) is not a skip.
NO_SKIPS = os.environ.get("BGPOLICY_NO_SKIPS") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if NO_SKIPS and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (f"skipped, and BGPOLICY_NO_SKIPS=1 forbids skips: {reason}\n"
                           "give the test what it needs (see Docs/Testing.md), or unset BGPOLICY_NO_SKIPS")


# MARK: Binaries


def find_bin_dir():
    configured = os.environ.get("BGPOLICY_BUILD_DIR")
    if configured:
        return Path(configured)
    swift = os.environ.get("SWIFT", "swift")
    result = subprocess.run(
        [swift, "build", "--package-path", str(ROOT), "--show-bin-path"],
        capture_output=True, text=True, timeout=120, check=True,
    )
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def bin_dir():
    path = find_bin_dir()
    if not path.is_dir():
        pytest.fail(f"no build folder at {path}: build first (swift build), or set BGPOLICY_BUILD_DIR")
    return path


def executable(bin_dir, name):
    path = Path(bin_dir) / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: build it first (swift build --product {name})")
    return str(path)


# MARK: Private buses


def remove_bus_sockets(address):
    """Removes the socket files of a dbus-daemon that has exited, named by its address
    (`unix:path=`, as `unix:tmpdir=` listens on): the daemon removes them itself on SIGTERM, but
    not when killed (SIGKILL), nor on a SIGTERM that comes before it has set up its handler, and
    each left a /tmp/dbus-XXXXXXXXXX behind for good. Only what the address names, and only a
    socket."""
    for entry in address.split(";"):
        kind, _, params = entry.partition(":")
        if kind != "unix":
            continue
        for pair in params.split(","):
            key, _, value = pair.partition("=")
            if key != "path":
                continue
            path = os.fsdecode(urllib.parse.unquote_to_bytes(value))  # D-Bus escapes bytes as %XX
            try:
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    os.unlink(path)
            except FileNotFoundError:
                pass


def process_alive(pid):
    """Whether `pid` runs; a zombie that nobody reaps yet (a process started with --fork is not
    our child) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat_file:
            return stat_file.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def stop_bus(pid, address, timeout=5):
    """Ends the dbus-daemon `pid` (started with --fork: not our child): SIGTERM (and SIGCONT,
    should it be stopped), then SIGKILL after `timeout` seconds; once it is gone, its socket
    files (remove_bus_sockets)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + timeout
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not process_alive(pid):
            break
    if not process_alive(pid):
        remove_bus_sockets(address)


class DBusDaemon:
    """A dbus-daemon started with --fork: it is not our child, so it is ended by its pid."""

    def __init__(self):
        config = [f"--config-file={BUS_CONFIG}"] if BUS_CONFIG.is_file() else ["--session"]
        result = subprocess.run(
            ["dbus-daemon", *config, "--fork", "--print-address=1", "--print-pid=2"],
            capture_output=True, text=True, timeout=DEFAULT_TIMEOUT, check=False,
        )
        # stderr may also carry "Failed to set fd limit" when running as root without
        # CAP_SYS_RESOURCE (harmless, see Docs/Testing.md); the pid is the last line.
        pid_lines = [line for line in result.stderr.splitlines() if line.strip().isdigit()]
        if result.returncode != 0 or not result.stdout.strip() or not pid_lines:
            raise RuntimeError(f"dbus-daemon failed ({result.returncode}): {result.stdout} {result.stderr}")
        self.address = result.stdout.strip().splitlines()[0]
        self.pid = int(pid_lines[-1])

    def alive(self):
        return process_alive(self.pid)

    def stop(self, timeout=5):
        """SIGTERM, then SIGKILL; then its socket file (stop_bus)."""
        stop_bus(self.pid, self.address, timeout)


@pytest.fixture
def private_bus(monkeypatch):
    """A private session bus: yields its address; DBUS_SESSION_BUS_ADDRESS points at it."""
    daemon = DBusDaemon()
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", daemon.address)
    try:
        yield daemon.address
    finally:
        daemon.stop()


@pytest.fixture
def private_system_bus(monkeypatch):
    """A second private bus standing in for the system bus: DBUS_SYSTEM_BUS_ADDRESS."""
    daemon = DBusDaemon()
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", daemon.address)
    try:
        yield daemon.address
    finally:
        daemon.stop()


# MARK: Processes


class Process:
    """A started process whose stdout is read line by line, with timeouts. Its stderr goes to
    a temporary file (so it can never fill a pipe and block), readable at any time."""

    def __init__(self, args, env=None):
        self.args = [str(a) for a in args]
        self._stderr = tempfile.TemporaryFile()
        self.popen = subprocess.Popen(
            self.args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._stderr,
            env=env, start_new_session=True, bufsize=0,
        )
        self.lines = []
        self._buffer = b""
        self._eof = False

    @property
    def pid(self):
        return self.popen.pid

    def read_line(self, timeout):
        """The next stdout line, or None at end of output or after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        fd = self.popen.stdout.fileno()
        while b"\n" not in self._buffer and not self._eof:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True
        if b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
        elif self._buffer:
            line, self._buffer = self._buffer, b""
        else:
            return None
        text = line.decode("utf-8", errors="replace")
        self.lines.append(text)
        return text

    def wait_for(self, prefix, timeout=DEFAULT_TIMEOUT):
        """Reads stdout until a line starts with `prefix`; fails the test on timeout or exit."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.read_line(max(0.0, deadline - time.monotonic()))
            if line is not None:
                if line.startswith(prefix):
                    return line
                continue
            code = self.popen.poll()
            if self._eof and code is None:
                code = self.wait(timeout=5)
            self.stop()
            pytest.fail(
                f"{' '.join(self.args)} did not print {prefix!r} "
                f"({'exited ' + str(code) if code is not None else f'timeout {timeout}s'}); "
                f"stdout: {self.lines!r}; stderr: {self.stderr()!r}"
            )

    def signal(self, sig):
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def wait(self, timeout=DEFAULT_TIMEOUT):
        """Waits for exit and returns the code; kills the process if it takes longer."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{' '.join(self.args)} did not exit within {timeout}s; stderr: {self.stderr()!r}")

    def kill(self):
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.popen.wait(timeout=DEFAULT_TIMEOUT)

    def stop(self, timeout=5):
        """SIGTERM, then SIGKILL after `timeout` seconds. Returns the exit code."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.popen.returncode

    def stdout_rest(self, timeout=5):
        """The rest of stdout, up to end of output (after the process exits) or `timeout`."""
        out = []
        while (line := self.read_line(timeout)) is not None:
            out.append(line)
        return out

    def stderr(self):
        """What the process has written on stderr so far."""
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", errors="replace")

    def close(self):
        self.stop()
        if self.popen.stdout and not self.popen.stdout.closed:
            self.popen.stdout.close()
        self._stderr.close()


class ProcessManager:
    def __init__(self):
        self.started = []

    def start(self, args, env=None):
        process = Process(args, env=env)
        self.started.append(process)
        return process

    def close_all(self):
        for process in reversed(self.started):
            process.close()


@pytest.fixture
def processes():
    """Starts processes for a test and ends them (SIGTERM, then SIGKILL) when it finishes."""
    manager = ProcessManager()
    try:
        yield manager
    finally:
        manager.close_all()


# MARK: Command-line clients


def run(args, timeout=DEFAULT_TIMEOUT, check=False, env=None):
    """Runs a command with a timeout; returns the CompletedProcess with text output."""
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, check=check,
        stdin=subprocess.DEVNULL, env=env,
    )


def gdbus(address, command, *args, timeout=DEFAULT_TIMEOUT, check=False):
    """`gdbus COMMAND --address ADDRESS ARGS...`."""
    return run(["gdbus", command, "--address", address, *args], timeout=timeout, check=check)


def busctl(address, *args, timeout=DEFAULT_TIMEOUT, check=False):
    """`busctl --address=ADDRESS ARGS...` (put options before the verb, `--` before negative numbers)."""
    return run(["busctl", f"--address={address}", *args], timeout=timeout, check=check)
