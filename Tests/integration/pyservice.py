#!/usr/bin/python3
"""org.bgpolicy.PyPeer1: a Python GDBus service for interop tests of bgpolicy's D-Bus layer.

It mirrors org.bgpolicy.TestPeer1 (Tests/Tools/TestPeer): one echo method per D-Bus type,
ReadFD/MakePipe for file descriptors, Fail/FailGError for errors, Sleep, Emit -> Pinged,
and the properties Label (read-write, emits PropertiesChanged) and Count (read-only).
Nothing here uses bgpolicy code, so `bgpolicy-testpeer client` talking to it checks our
layer against GLib's implementation of D-Bus.

    python3 pyservice.py --address ADDRESS [--name org.bgpolicy.PyPeer]

Prints "READY <unique name>" once it owns the name; exits 0 on SIGTERM/SIGINT, 2 if the
name is taken, 1 if the bus goes away.
"""

import argparse
import os
import select
import signal
import sys

import gi

gi.require_version("Gio", "2.0")
gi.require_version("GLib", "2.0")
from gi.repository import Gio, GLib  # noqa: E402

BUS_NAME = "org.bgpolicy.PyPeer"
OBJECT_PATH = "/org/bgpolicy/PyPeer"
INTERFACE = "org.bgpolicy.PyPeer1"
MAX_FD_TEXT = 4096

# The echo methods: name -> the one type each takes and returns (same as TestPeer1).
ECHO_METHODS = {
    "EchoByte": "y",
    "EchoBoolean": "b",
    "EchoInt16": "n",
    "EchoUInt16": "q",
    "EchoInt32": "i",
    "EchoUInt32": "u",
    "EchoInt64": "x",
    "EchoUInt64": "t",
    "EchoDouble": "d",
    "EchoString": "s",
    "EchoObjectPath": "o",
    "EchoSignature": "g",
    "EchoVariant": "v",
    "EchoStrings": "as",
    "EchoDict": "a{sv}",
    "EchoStruct": "(ybnqiuxtdsog)",
    "EchoNested": "a{sa(iv)}",
    "EchoBytes": "ay",
}


def introspection_xml():
    methods = []
    for name, sig in ECHO_METHODS.items():
        methods.append(
            f'<method name="{name}"><arg name="value" type="{sig}" direction="in"/>'
            f'<arg name="echoed" type="{sig}" direction="out"/></method>'
        )
    methods.append(
        '<method name="ReadFD"><arg name="fd" type="h" direction="in"/>'
        '<arg name="text" type="s" direction="out"/></method>'
    )
    methods.append(
        '<method name="MakePipe"><arg name="text" type="s" direction="in"/>'
        '<arg name="fd" type="h" direction="out"/></method>'
    )
    methods.append(
        '<method name="Fail"><arg name="name" type="s" direction="in"/>'
        '<arg name="message" type="s" direction="in"/></method>'
    )
    methods.append('<method name="FailGError"><arg name="message" type="s" direction="in"/></method>')
    methods.append('<method name="Sleep"><arg name="milliseconds" type="u" direction="in"/></method>')
    methods.append('<method name="Emit"><arg name="text" type="s" direction="in"/></method>')
    return (
        f'<node><interface name="{INTERFACE}">'
        + "".join(methods)
        + '<signal name="Pinged"><arg name="text" type="s"/></signal>'
        + '<property name="Label" type="s" access="readwrite"/>'
        + '<property name="Count" type="u" access="read">'
        + '<annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="false"/></property>'
        + "</interface></node>"
    )


def read_text(fd, limit=MAX_FD_TEXT):
    """Reads until end of file or `limit` bytes, waiting at most 5 s for each chunk."""
    data = b""
    while len(data) < limit:
        ready, _, _ = select.select([fd], [], [], 5)
        if not ready:
            raise TimeoutError(f"nothing to read from fd {fd} after 5 s")
        chunk = os.read(fd, limit - len(data))
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", errors="replace")


class PyPeer:
    def __init__(self, connection, loop):
        self.connection = connection
        self.loop = loop
        self.label = "initial"
        self.count = 0
        info = Gio.DBusNodeInfo.new_for_xml(introspection_xml()).interfaces[0]
        self.registration = connection.register_object(
            OBJECT_PATH, info, self.method_call, self.get_property, self.set_property
        )

    def method_call(self, connection, sender, path, interface, method, parameters, invocation):
        self.count += 1
        try:
            if method in ECHO_METHODS:
                # The same GVariant, byte for byte: an exact echo.
                invocation.return_value(parameters)
            elif method == "ReadFD":
                (index,) = parameters.unpack()
                fds = invocation.get_message().get_unix_fd_list()
                fd = fds.get(index)  # a duplicate we own
                try:
                    text = read_text(fd)
                finally:
                    os.close(fd)
                invocation.return_value(GLib.Variant("(s)", (text,)))
            elif method == "MakePipe":
                (text,) = parameters.unpack()
                data = text.encode("utf-8")
                if len(data) > MAX_FD_TEXT:
                    invocation.return_dbus_error(
                        "org.freedesktop.DBus.Error.InvalidArgs", f"at most {MAX_FD_TEXT} bytes fit, not {len(data)}"
                    )
                    return
                reader, writer = os.pipe()
                os.write(writer, data)
                os.close(writer)
                fds = Gio.UnixFDList.new()
                index = fds.append(reader)  # duplicates it
                os.close(reader)
                invocation.return_value_with_unix_fd_list(GLib.Variant("(h)", (index,)), fds)
            elif method == "Fail":
                name, message = parameters.unpack()
                invocation.return_dbus_error(name, message)
            elif method == "FailGError":
                (message,) = parameters.unpack()
                # A GLib error of the G_DBUS_ERROR domain; GDBus sends its registered D-Bus name.
                invocation.return_error_literal(Gio.dbus_error_quark(), Gio.DBusError.ACCESS_DENIED, message)
            elif method == "Sleep":
                (milliseconds,) = parameters.unpack()

                def reply():
                    invocation.return_value(None)
                    return GLib.SOURCE_REMOVE

                GLib.timeout_add(milliseconds, reply)
            elif method == "Emit":
                (text,) = parameters.unpack()
                connection.emit_signal(None, OBJECT_PATH, INTERFACE, "Pinged", GLib.Variant("(s)", (text,)))
                invocation.return_value(None)
            else:
                invocation.return_dbus_error("org.freedesktop.DBus.Error.UnknownMethod", f"no method {method}")
        except Exception as error:  # never leave a caller without a reply
            invocation.return_dbus_error("org.bgpolicy.PyPeer1.Error.Internal", f"{type(error).__name__}: {error}")

    def get_property(self, connection, sender, path, interface, name):
        if name == "Label":
            return GLib.Variant("s", self.label)
        if name == "Count":
            return GLib.Variant("u", self.count)
        return None

    def set_property(self, connection, sender, path, interface, name, value):
        if name != "Label":
            return False
        self.label = value.unpack()
        changed = GLib.Variant("(sa{sv}as)", (INTERFACE, {"Label": GLib.Variant("s", self.label)}, []))
        connection.emit_signal(None, OBJECT_PATH, "org.freedesktop.DBus.Properties", "PropertiesChanged", changed)
        return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="bus address (default: the session bus)")
    parser.add_argument("--name", default=BUS_NAME)
    args = parser.parse_args()

    flags = Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION
    if args.address:
        connection = Gio.DBusConnection.new_for_address_sync(args.address, flags, None, None)
    else:
        connection = Gio.bus_get_sync(Gio.BusType.SESSION, None)
    connection.set_exit_on_close(False)
    loop = GLib.MainLoop()
    status = {"code": 0}
    peer = PyPeer(connection, loop)

    reply = connection.call_sync(
        "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "RequestName",
        GLib.Variant("(su)", (args.name, 4)),  # DBUS_NAME_FLAG_DO_NOT_QUEUE
        GLib.VariantType("(u)"), Gio.DBusCallFlags.NONE, 10000, None,
    ).unpack()[0]
    if reply not in (1, 4):  # primary owner, already owner
        print(f"pyservice: the name {args.name} is taken", file=sys.stderr)
        return 2

    def on_closed(_connection, _remote_peer_vanished, _error):
        status["code"] = 1
        loop.quit()

    def on_signal():
        loop.quit()
        return GLib.SOURCE_REMOVE

    connection.connect("closed", on_closed)
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGTERM, on_signal)
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGINT, on_signal)
    print(f"READY {connection.get_unique_name()}", flush=True)
    loop.run()
    connection.unregister_object(peer.registration)
    if not connection.is_closed():
        connection.close_sync(None)
    return status["code"]


if __name__ == "__main__":
    sys.exit(main())
