"""Shell completion of `bgpolicy`, as bash runs it: the script `bgpolicy
--generate-completion-script bash` writes (the one `make install` installs), sourced in a real
bash, its completion function called as bash calls it on TAB, and the candidates read back.

App ids and task identifiers come from the running agent, asked without auto-start: pressing
TAB must never start bgpolicyd through D-Bus activation, and must stay silent when the agent
cannot answer."""
import os
import signal
import subprocess
import time

import tasks_helpers as th
from tasks_helpers import TIMEOUT, later, world  # noqa: F401 - the fixture

# Completes the last of the words given after the script's name, as bash does on TAB at the
# end of the line, and prints each candidate on a line of its own.
COMPLETE = r'''
source "$1"; shift
COMP_WORDS=("$@")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMP_LINE="${COMP_WORDS[*]}"
COMP_POINT=${#COMP_LINE}
_bgpolicy bgpolicy "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}"
printf '%s\n' "${COMPREPLY[@]}"
'''


def completion_script(bin_dir, tmp):
    path = tmp / "bgpolicy.bash"
    out = subprocess.run([str(bin_dir / "bgpolicy"), "--generate-completion-script", "bash"],
                         capture_output=True, text=True, timeout=TIMEOUT, check=True).stdout
    path.write_text(out)
    return path


def complete(bin_dir, script, env, *words):
    """The candidates bash offers for the last of `words` (the command line so far)."""
    env = dict(env, PATH=f"{bin_dir}:{os.environ['PATH']}")
    result = subprocess.run(["bash", "-c", COMPLETE, "complete", str(script), "bgpolicy", *words],
                            env=env, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result
    assert result.stderr == "", f"completion must print nothing but candidates: {result.stderr!r}"
    return [line for line in result.stdout.splitlines() if line]


def test_bash_completes_commands_options_and_policies(world):
    script = completion_script(world.bin_dir, world.tmp)
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=world.address)
    assert complete(world.bin_dir, script, env, "st") == ["status"]
    assert set(complete(world.bin_dir, script, env, "sim")) == {"simulate"}
    assert set(complete(world.bin_dir, script, env, "simulate", "")) >= {"launch", "expire"}
    assert "--policy" in complete(world.bin_dir, script, env, "replay", "--")
    assert complete(world.bin_dir, script, env, "replay", "--policy", "periodic:") == \
        ["periodic:15m", "periodic:30m", "periodic:60m"]


def test_bash_completes_app_ids_and_identifiers_from_the_running_agent(world):
    agent = world.start_agent()
    mail, mail_refresh, mail_clean = "org.example.Mail", "org.example.Mail.refresh", "org.example.Mail.clean"
    maps, maps_refresh = "org.example.Maps", "org.example.Maps.refresh"
    mail_app = world.registered_app(mail, [mail_refresh, mail_clean])
    mail_app.submit(mail_refresh, "refresh", earliest_begin=later(3600))
    mail_app.submit(mail_clean, "processing", earliest_begin=later(3600))
    maps_app = world.registered_app(maps, [maps_refresh])
    maps_app.submit(maps_refresh, "refresh", earliest_begin=later(3600))
    script = completion_script(world.bin_dir, world.tmp)

    def offered(*words):
        return complete(world.bin_dir, script, agent.env, *words)

    # App ids: every registered app, then those that start with what was typed.
    assert offered("explain", "") == [mail, maps]
    assert offered("explain", "org.example.Mai") == [mail]
    for command in (["enable"], ["disable"], ["forget"], ["pending"], ["history"], ["timeline"], ["simulate", "launch"]):
        assert offered(*command, "org.example.Ma") == [mail, maps], command
    assert offered("explain", "org.example.Nobody") == []

    # Identifiers: the pending requests of the app named before them, and no other app's.
    assert offered("explain", mail, "") == [mail_clean, mail_refresh]
    assert offered("explain", mail, "org.example.Mail.r") == [mail_refresh]
    assert offered("explain", maps, "") == [maps_refresh]
    assert offered("simulate", "launch", "--json", maps, "") == [maps_refresh]

    # `simulate expire` offers what is running: none yet, then the launched refresh.
    assert offered("simulate", "expire", maps, "") == []
    agent.simulate_launch(maps, maps_refresh)
    maps_app.wait_run_task(maps_refresh, timeout=5)
    assert offered("simulate", "expire", maps, "") == [maps_refresh]
    assert offered("explain", maps, "") == [], "a running request is no longer pending"


def test_completion_is_silent_and_quick_without_an_agent(world):
    script = completion_script(world.bin_dir, world.tmp)
    for address in (world.address, "unix:path=/nonexistent"):  # no agent on the bus; no bus at all
        env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=address)
        started = time.monotonic()
        assert complete(world.bin_dir, script, env, "explain", "") == []
        # The call's own timeout is 1 s; nobody owning the name answers at once.
        assert time.monotonic() - started < 5


def test_completion_is_silent_and_quick_on_a_bus_that_never_answers(tmp_path, bin_dir):
    """A dbus-daemon stopped (SIGSTOP): the kernel takes the connection, nothing answers its
    Hello, and libdbus would wait for good; TAB gives up after its second."""
    bus = th.PrivateBus(tmp_path)
    os.kill(bus.pid, signal.SIGSTOP)
    try:
        script = completion_script(bin_dir, tmp_path)
        started = time.monotonic()
        assert complete(bin_dir, script, dict(os.environ, DBUS_SESSION_BUS_ADDRESS=bus.address), "explain", "") == []
        assert time.monotonic() - started < 5
    finally:
        os.kill(bus.pid, signal.SIGCONT)
        bus.stop()


def test_completion_never_starts_the_agent_through_dbus_activation(tmp_path, bin_dir):
    """A bus that could activate org.bgpolicy.Agent1 (here a script that leaves a mark): TAB
    asks it nothing that would start it. The same name asked with auto-start (gdbus) does
    start it, so the set-up can tell."""
    services = tmp_path / "services"
    services.mkdir()
    marker = tmp_path / "activated"
    starter = tmp_path / "start-agent.sh"
    starter.write_text(f"#!/bin/sh\necho $$ >> '{marker}'\nsleep 30\n")
    starter.chmod(0o755)
    (services / "org.bgpolicy.Agent1.service").write_text(
        f"[D-BUS Service]\nName=org.bgpolicy.Agent1\nExec={starter}\n")
    bus = th.PrivateBus(tmp_path, service_dir=services)
    try:
        env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=bus.address)
        script = completion_script(bin_dir, tmp_path)
        assert complete(bin_dir, script, env, "explain", "") == []
        assert complete(bin_dir, script, env, "explain", "org.example.Mail", "") == []
        assert complete(bin_dir, script, env, "simulate", "expire", "org.example.Mail", "") == []
        time.sleep(0.5)
        assert not marker.exists(), "pressing TAB started the agent"

        subprocess.run(["gdbus", "call", "--session", "--dest", "org.bgpolicy.Agent1", "--object-path",
                        "/org/bgpolicy/Agent1", "--method", "org.bgpolicy.Admin1.GetStatus", "--timeout", "2"],
                       env=env, capture_output=True, text=True, timeout=TIMEOUT)
        th.wait_until(marker.exists, 10, "gdbus's auto-starting call to activate the fake agent")
    finally:
        bus.stop()
        if marker.exists():
            for pid in marker.read_text().split():
                try:
                    os.kill(int(pid), 9)
                except ProcessLookupError:
                    pass
