#!/usr/bin/python3
"""A bgpolicy app in Python with GDBus: the whole Scheduler1/Client1 round trip.

It registers one task identifier with bgpolicyd, exports org.bgpolicy.Client1 so the agent
can launch it, and submits a refresh request. When the agent calls RunTask, the app replies at
once, submits the next refresh, does its "work" on a GLib timeout, then calls SetTaskCompleted.
ExpireTask stops the work and completes the task as failed.

    /usr/bin/python3 Docs/examples/python_app.py --app-id org.example.PyApp
    bgpolicy simulate launch org.example.PyApp org.example.PyApp.refresh

It prints one line per event, such as `run task_id=… identifier=… kind=refresh seconds=30`.
Needs python3-gi (Debian) and a running bgpolicyd on the session bus.
"""

import argparse
import signal
import sys
import time

import gi

gi.require_version("Gio", "2.0")
gi.require_version("GLib", "2.0")
from gi.repository import Gio, GLib  # noqa: E402

AGENT_NAME = "org.bgpolicy.Agent1"
AGENT_PATH = "/org/bgpolicy/Agent1"
SCHEDULER = "org.bgpolicy.Scheduler1"
CLIENT_PATH = "/org/bgpolicy/Client1"
CLIENT_XML = """
<node>
  <interface name="org.bgpolicy.Client1">
    <method name="RunTask">
      <arg name="task_id" type="s" direction="in"/>
      <arg name="identifier" type="s" direction="in"/>
      <arg name="kind" type="s" direction="in"/>
      <arg name="seconds" type="u" direction="in"/>
      <arg name="info" type="a{sv}" direction="in"/>
    </method>
    <method name="ExpireTask">
      <arg name="task_id" type="s" direction="in"/>
    </method>
  </interface>
</node>
"""
# Ask for the next refresh no sooner than this (the agent may wait longer).
REFRESH_INTERVAL = 15 * 60


def event(name, **fields):
    """One line per event, flushed, so tests and people can follow along."""
    parts = [name] + [f"{key}={value}" for key, value in fields.items()]
    print(" ".join(parts), flush=True)


def error_name(error):
    """The D-Bus error name of a GLib.Error from a call, such as org.bgpolicy.Error.Unavailable."""
    return Gio.DBusError.get_remote_error(error) or "unknown"


def error_text(error):
    """The agent's message without GDBus's "GDBus.Error:NAME: " prefix."""
    name = Gio.DBusError.get_remote_error(error)
    prefix = f"GDBus.Error:{name}: "
    return error.message[len(prefix):] if name and error.message.startswith(prefix) else error.message


class App:
    def __init__(self, args):
        self.args = args
        self.loop = GLib.MainLoop()
        self.bus = Gio.bus_get_sync(Gio.BusType.SESSION, None)
        self.agent_owner = None
        self.running = {}  # task_id -> (GLib source id of its work, identifier)
        self.completed = 0
        self.status = 0

    # MARK: Calls to the agent

    def call_sync(self, method, parameters, reply_type):
        return self.bus.call_sync(
            AGENT_NAME, AGENT_PATH, SCHEDULER, method, parameters,
            GLib.VariantType.new(reply_type), Gio.DBusCallFlags.NONE, 10000, None)

    def start(self):
        # Export Client1 before registering: the agent may call RunTask as soon as it knows us.
        node = Gio.DBusNodeInfo.new_for_xml(CLIENT_XML)
        self.bus.register_object(CLIENT_PATH, node.interfaces[0], self.on_client_call, None, None)
        # Only the agent may start or stop our work; follow who owns its name.
        Gio.bus_watch_name_on_connection(
            self.bus, AGENT_NAME, Gio.BusNameWatcherFlags.NONE, self.on_agent_appeared, self.on_agent_vanished)

        try:
            reply = self.call_sync("Register", self.register_arguments(), "(s)")
        except GLib.Error as error:
            event("register-failed", error=error_name(error), message=error_text(error))
            return False
        event("registered", app_id=reply.unpack()[0], identifiers=self.args.identifier)
        # The watch above reports the owner from the main loop; know it before any RunTask.
        owner = self.bus.call_sync(
            "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetNameOwner",
            GLib.Variant("(s)", (AGENT_NAME,)), GLib.VariantType.new("(s)"), Gio.DBusCallFlags.NONE, 10000, None)
        self.agent_owner = owner.unpack()[0]
        return self.submit_sync()

    def register_arguments(self):
        options = {}
        if self.args.app_id:
            options["app_id"] = GLib.Variant("s", self.args.app_id)
        return GLib.Variant("(asa{sv})", ([self.args.identifier], options))

    def register_again(self):
        """A restarted agent has forgotten this connection: register again so it can launch us."""
        def done(bus, result):
            try:
                app_id = bus.call_finish(result).unpack()[0]
                event("registered", app_id=app_id, identifiers=self.args.identifier)
            except GLib.Error as error:
                event("register-failed", error=error_name(error), message=error_text(error))

        # NO_AUTO_START: the agent came back by itself; if it has gone again, it stays gone.
        self.bus.call(
            AGENT_NAME, AGENT_PATH, SCHEDULER, "Register", self.register_arguments(),
            GLib.VariantType.new("(s)"), Gio.DBusCallFlags.NO_AUTO_START, 10000, None, done)

    def submit_sync(self):
        try:
            self.call_sync("Submit", self.submit_arguments(), "()")
        except GLib.Error as error:
            event("submit-failed", identifier=self.args.identifier, error=error_name(error), message=error_text(error))
            return False
        event("submitted", identifier=self.args.identifier, kind="refresh")
        return True

    def submit_arguments(self):
        options = {"earliest_begin": GLib.Variant("x", int(time.time()) + REFRESH_INTERVAL)}
        return GLib.Variant("(ssa{sv})", (self.args.identifier, "refresh", options))

    def submit_next(self):
        """Asks for the next refresh without blocking the main loop."""
        def done(bus, result):
            try:
                bus.call_finish(result)
                event("submitted", identifier=self.args.identifier, kind="refresh")
            except GLib.Error as error:
                event("submit-failed", identifier=self.args.identifier, error=error_name(error), message=error_text(error))

        self.bus.call(
            AGENT_NAME, AGENT_PATH, SCHEDULER, "Submit", self.submit_arguments(),
            None, Gio.DBusCallFlags.NONE, 10000, None, done)

    def complete(self, task_id, identifier, success, result):
        """SetTaskCompleted, asynchronously; counts the task once the agent has answered."""
        def done(bus, async_result):
            try:
                bus.call_finish(async_result)
                event("completed", task_id=task_id, identifier=identifier,
                      success=str(success).lower(), result=result or "-")
            except GLib.Error as error:
                event("complete-failed", task_id=task_id, error=error_name(error), message=error_text(error))
            self.completed += 1
            if self.args.exit_after and self.completed >= self.args.exit_after:
                event("exiting", completed=self.completed)
                self.loop.quit()

        # NO_AUTO_START: only the agent that ran the task can take its completion. One the user
        # stopped meanwhile must not be started again just to answer that it knows no such task.
        self.bus.call(
            AGENT_NAME, AGENT_PATH, SCHEDULER, "SetTaskCompleted",
            GLib.Variant("(sbs)", (task_id, success, result)),
            None, Gio.DBusCallFlags.NO_AUTO_START, 10000, None, done)

    # MARK: org.bgpolicy.Client1

    def on_agent_appeared(self, _bus, _name, owner):
        restarted = self.agent_owner is not None and owner != self.agent_owner
        self.agent_owner = owner
        if restarted:
            self.register_again()

    def on_agent_vanished(self, _bus, _name):
        # Keep the old owner until a new one appears, so that its arrival reads as a restart.
        pass

    def on_client_call(self, _bus, sender, _path, _interface, method, parameters, invocation):
        if self.agent_owner is None or sender != self.agent_owner:
            invocation.return_dbus_error(
                "org.bgpolicy.Error.AccessDenied", f"only {AGENT_NAME} may call org.bgpolicy.Client1")
            return
        if method == "RunTask":
            task_id, identifier, kind, seconds, _info = parameters.unpack()
            # Reply at once; the work happens later, on the main loop.
            invocation.return_value(None)
            event("run", task_id=task_id, identifier=identifier, kind=kind, seconds=seconds)
            if task_id in self.running:
                return
            # Ask for the next refresh first, as iOS apps do: whatever happens, one stays pending.
            self.submit_next()
            delay = max(0, int(self.args.work_seconds * 1000))
            self.running[task_id] = (GLib.timeout_add(delay, self.on_work_done, task_id, identifier), identifier)
        elif method == "ExpireTask":
            (task_id,) = parameters.unpack()
            invocation.return_value(None)
            work = self.running.pop(task_id, None)
            event("expired", task_id=task_id, running=str(work is not None).lower())
            if work is not None:
                source, identifier = work
                GLib.source_remove(source)
                self.complete(task_id, identifier, False, "failed")
        else:
            invocation.return_dbus_error("org.freedesktop.DBus.Error.UnknownMethod", f"no method {method}")

    def on_work_done(self, task_id, identifier):
        self.running.pop(task_id, None)
        event("worked", task_id=task_id, seconds=self.args.work_seconds)
        self.complete(task_id, identifier, True, "new-data")
        return GLib.SOURCE_REMOVE

    def run(self):
        for number in (signal.SIGINT, signal.SIGTERM):
            GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, number, self.on_signal)
        if not self.start():
            return 1
        self.loop.run()
        return self.status

    def on_signal(self):
        event("exiting", completed=self.completed)
        self.loop.quit()
        return GLib.SOURCE_REMOVE


def main(argv):
    parser = argparse.ArgumentParser(description="A Python GDBus app that bgpolicyd launches in the background.")
    parser.add_argument("--app-id", default="org.bgpolicy.examples.PyApp",
                        help="the app id to register as (for apps outside Flatpak, snap and systemd app units); "
                             "empty: let the agent derive it")
    parser.add_argument("--identifier", help="the task identifier (default: APP_ID.refresh)")
    parser.add_argument("--exit-after", type=int, default=0, metavar="N",
                        help="exit after N completed tasks (0: run until stopped)")
    parser.add_argument("--work-seconds", type=float, default=1.0, metavar="S",
                        help="how long each task's work takes, in seconds")
    args = parser.parse_args(argv)
    if args.identifier is None:
        args.identifier = f"{args.app_id or 'org.bgpolicy.examples.PyApp'}.refresh"
    if args.exit_after < 0:
        parser.error("--exit-after must be 0 or more")
    return App(args).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
