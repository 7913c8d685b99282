"""Interop of bgpolicy's D-Bus layer (Sources/BGPolicyDBus) with implementations not written with it.

One direction: `bgpolicy-testpeer serve` (our layer) is driven by gdbus, busctl (sd-bus) and
Python GDBus. The other: `bgpolicy-testpeer client` (our layer) drives pyservice.py (GDBus).
Last, `bgpolicy-testpeer self-test` (what scripts/leakcheck.sh runs under valgrind) runs plain.
Every test runs on a private bus of its own (conftest.py).
"""

import json
import os
import re
import signal
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import gi
import pytest

gi.require_version("Gio", "2.0")
gi.require_version("GLib", "2.0")
from gi.repository import Gio, GLib  # noqa: E402

from conftest import DBusDaemon, busctl, executable, gdbus, run  # noqa: E402

PEER = "org.bgpolicy.TestPeer"
PEER_PATH = "/org/bgpolicy/TestPeer"
PEER_IFACE = "org.bgpolicy.TestPeer1"
PROPS = "org.freedesktop.DBus.Properties"
PYSERVICE = Path(__file__).with_name("pyservice.py")
PY_PEER = "org.bgpolicy.PyPeer"

UNICODE = "ünïcødé ✓ 日本語 🎉"

# Every echo method and its type, as both peers declare them.
# The same table the Python service serves (one list of methods for both sides).
from pyservice import ECHO_METHODS  # noqa: E402
OTHER_METHODS = {  # name -> (in signature, out signature)
    "ReadFD": ("h", "s"),
    "MakePipe": ("s", "h"),
    "Fail": ("ss", ""),
    "Sleep": ("u", ""),
    "Emit": ("s", ""),
}


# MARK: Fixtures and helpers


@pytest.fixture
def testpeer(private_bus, bin_dir, processes):
    """`bgpolicy-testpeer serve` on the private bus; must still run at the end, and exit 0 on SIGTERM."""
    peer = processes.start([executable(bin_dir, "bgpolicy-testpeer"), "serve", "--address", private_bus])
    line = peer.wait_for("READY ")
    peer.unique_name = line.split()[1]
    yield peer
    assert peer.popen.poll() is None, f"the peer died during the test ({peer.popen.returncode}): {peer.stderr()}"
    code = peer.stop(timeout=10)
    assert code == 0, f"the peer exited {code} on SIGTERM: {peer.stderr()}"


@pytest.fixture
def gio(private_bus):
    """A Python GDBus connection to the private bus."""
    flags = Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION
    connection = Gio.DBusConnection.new_for_address_sync(private_bus, flags, None, None)
    connection.set_exit_on_close(False)
    yield connection
    connection.close_sync(None)


def gio_call(connection, method, signature, values, reply=None, timeout_ms=10000, fds=None, interface=PEER_IFACE, path=PEER_PATH):
    """Calls the peer from GDBus; returns (reply GVariant, out fd list)."""
    parameters = GLib.Variant(f"({signature})", tuple(values)) if signature else None
    reply_type = GLib.VariantType(f"({reply})") if reply is not None else None
    return connection.call_with_unix_fd_list_sync(
        PEER, path, interface, method, parameters, reply_type, Gio.DBusCallFlags.NONE, timeout_ms, fds, None
    )


def remote_error(error):
    """(D-Bus error name, message) of a GLib.Error from a GDBus call. GDBus puts
    "GDBus.Error:NAME: " before the message (strip_remote_error cannot change PyGObject's copy)."""
    name = Gio.DBusError.get_remote_error(error)
    prefix = f"GDBus.Error:{name}: "
    message = error.message[len(prefix):] if error.message.startswith(prefix) else error.message
    return name, message


def wait_until(condition, timeout=10):
    """Iterates the default GLib main context until condition() holds or timeout passes."""
    context = GLib.MainContext.default()
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        context.iteration(False) or time.sleep(0.01)
    return True


def sync_with_bus(connection):
    """A round trip to the bus daemon, so every match rule sent before it is in force."""
    connection.call_sync(
        "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetId", None, None,
        Gio.DBusCallFlags.NONE, 10000, None,
    )


def descriptors(pid):
    """The descriptors a process has open (libdispatch's timerfds, which it keeps, left out)."""
    out = {}
    for entry in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{entry}")
        except OSError:
            continue
        if target != "anon_inode:[timerfd]":
            out[int(entry)] = target
    return out


def gvariant_text(signature, text):
    """What `gdbus call` prints for a one-value reply: the tuple, as g_variant_print does."""
    value = GLib.Variant.parse(GLib.VariantType(signature), text, None, None)
    return GLib.Variant.new_tuple(value).print_(True)


# MARK: gdbus call, every type

STRUCT_MAX = (
    "(255, true, -32768, 65535, -2147483648, 4294967295, -9223372036854775808, 18446744073709551615, "
    f"-1.5e-300, '{UNICODE}', '/org/bgpolicy/TestPeer', 'a{{sa(iv)}}')"
)
STRUCT_ZERO = "(0, false, 0, 0, 0, 0, 0, 0, 0.0, '', '/', '')"

GDBUS_CASES = [
    ("EchoByte", "0"), ("EchoByte", "127"), ("EchoByte", "255"),
    ("EchoBoolean", "true"), ("EchoBoolean", "false"),
    ("EchoInt16", "-32768"), ("EchoInt16", "0"), ("EchoInt16", "32767"),
    ("EchoUInt16", "0"), ("EchoUInt16", "65535"),
    ("EchoInt32", "-2147483648"), ("EchoInt32", "42"), ("EchoInt32", "2147483647"),
    ("EchoUInt32", "0"), ("EchoUInt32", "4294967295"),
    ("EchoInt64", "-9223372036854775808"), ("EchoInt64", "9007199254740993"), ("EchoInt64", "9223372036854775807"),
    ("EchoUInt64", "0"), ("EchoUInt64", "18446744073709551615"),
    ("EchoDouble", "0.0"), ("EchoDouble", "-0.0"), ("EchoDouble", "3.141592653589793"), ("EchoDouble", "-1e-300"),
    ("EchoDouble", "1.7976931348623157e308"), ("EchoDouble", "2.2250738585072014e-308"), ("EchoDouble", "inf"), ("EchoDouble", "-inf"),
    ("EchoDouble", "nan"),
    ("EchoString", "''"), ("EchoString", "'hello'"), ("EchoString", f"'{UNICODE}'"),
    ("EchoString", r"'tab\tnewline\n quote\' dquote\" backslash\\ <xml>&amp;'"),
    ("EchoString", "'" + "x" * 5000 + "'"),
    ("EchoObjectPath", "'/'"), ("EchoObjectPath", "'/org/bgpolicy/TestPeer'"), ("EchoObjectPath", "'/a/b_c/D9/_'"),
    ("EchoSignature", "''"), ("EchoSignature", "'a{sv}'"), ("EchoSignature", "'(ybnqiuxtdsog)'"), ("EchoSignature", "'aa{sa(iv)}hv'"),
    ("EchoVariant", "<int32 7>"), ("EchoVariant", f"<'{UNICODE}'>"), ("EchoVariant", "<byte 0>"), ("EchoVariant", "<-0.0>"),
    ("EchoVariant", "<objectpath '/a'>"), ("EchoVariant", "<signature 'a{sv}'>"), ("EchoVariant", "<<<<uint64 18446744073709551615>>>>"),
    ("EchoVariant", "<@as []>"), ("EchoVariant", "<[<int64 -9223372036854775808>, <<true>>]>"),
    ("EchoVariant", "<{'a': <uint16 1>, 'nested': <<{'k': <false>}>>}>"), ("EchoVariant", f"<@(ybnqiuxtdsog) {STRUCT_MAX}>"),
    ("EchoVariant", "<@a{sa(iv)} {'x': [(1, <'s'>)]}>"), ("EchoVariant", "<@ay [1, 2, 255]>"),
    ("EchoStrings", "[]"), ("EchoStrings", "['']"), ("EchoStrings", f"['a', '', '{UNICODE}']"),
    ("EchoDict", "{}"), ("EchoDict", "{'a': <1>, 'b': <'x'>, 'c': <@ay [1, 2]>, 'd': <<true>>}"),
    ("EchoDict", f"{{'min': <int64 -9223372036854775808>, 'empty': <@as []>, 'struct': <{STRUCT_ZERO}>, '{UNICODE}': <3.5>}}"),
    ("EchoStruct", STRUCT_MAX), ("EchoStruct", STRUCT_ZERO),
    ("EchoNested", "{}"), ("EchoNested", "{'empty': []}"),
    ("EchoNested", "{'x': [(1, <'s'>), (-2, <[<1>, <'two'>]>)], 'y': [(-2147483648, <<<uint64 1>>>), (2147483647, <{'k': <objectpath '/a'>}>)]}"),
    ("EchoBytes", "[]"), ("EchoBytes", "[0, 1, 127, 128, 255]"), ("EchoBytes", "b'text'"),
]


@pytest.mark.parametrize("method,text", GDBUS_CASES, ids=[f"{m}-{i}" for i, (m, _) in enumerate(GDBUS_CASES)])
def test_gdbus_call_echo(testpeer, private_bus, method, text):
    signature = ECHO_METHODS[method]
    # "--" so that negative numbers are not taken for options
    result = gdbus(
        private_bus, "call", "--dest", PEER, "--object-path", PEER_PATH, "--method", f"{PEER_IFACE}.{method}", "--", text
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == gvariant_text(signature, text)
    # and the value read back equals the one sent, not only its text
    sent = GLib.Variant.new_tuple(GLib.Variant.parse(GLib.VariantType(signature), text, None, None))
    got = GLib.Variant.parse(GLib.VariantType(f"({signature})"), result.stdout.strip(), None, None)
    assert got.equal(sent)


def test_gdbus_covers_every_echo_method():
    assert {method for method, _ in GDBUS_CASES} == set(ECHO_METHODS)


# MARK: busctl call, every type

BUSCTL_STRUCT_ARGS = [
    "255", "true", "-32768", "65535", "-2147483648", "4294967295", "-9223372036854775808", "18446744073709551615",
    "-1.5", UNICODE, "/org/bgpolicy/TestPeer", "a{sa(iv)}",
]
BUSCTL_STRUCT_DATA = [
    255, True, -32768, 65535, -2147483648, 4294967295, -9223372036854775808, 18446744073709551615,
    -1.5, UNICODE, "/org/bgpolicy/TestPeer", "a{sa(iv)}",
]

# (method, busctl arguments after the signature, the JSON "data" element expected back)
BUSCTL_CASES = [
    ("EchoByte", ["0"], 0), ("EchoByte", ["255"], 255),
    ("EchoBoolean", ["true"], True), ("EchoBoolean", ["false"], False),
    ("EchoInt16", ["-32768"], -32768), ("EchoInt16", ["32767"], 32767),
    ("EchoUInt16", ["65535"], 65535),
    ("EchoInt32", ["-2147483648"], -2147483648), ("EchoInt32", ["2147483647"], 2147483647),
    ("EchoUInt32", ["4294967295"], 4294967295),
    ("EchoInt64", ["-9223372036854775808"], -9223372036854775808), ("EchoInt64", ["9223372036854775807"], 9223372036854775807),
    ("EchoUInt64", ["0"], 0), ("EchoUInt64", ["18446744073709551615"], 18446744073709551615),
    ("EchoDouble", ["1.5"], 1.5), ("EchoDouble", ["-0.1"], -0.1), ("EchoDouble", ["1e308"], 1e308),
    ("EchoString", [""], ""), ("EchoString", [UNICODE], UNICODE),
    ("EchoString", ["tab\tnewline\n quote' dquote\" backslash\\"], "tab\tnewline\n quote' dquote\" backslash\\"),
    ("EchoObjectPath", ["/"], "/"), ("EchoObjectPath", ["/org/bgpolicy/TestPeer"], "/org/bgpolicy/TestPeer"),
    ("EchoSignature", [""], ""), ("EchoSignature", ["a{sa(iv)}"], "a{sa(iv)}"),
    ("EchoVariant", ["i", "5"], {"type": "i", "data": 5}),
    ("EchoVariant", ["v", "v", "s", "deep"], {"type": "v", "data": {"type": "v", "data": {"type": "s", "data": "deep"}}}),
    ("EchoVariant", ["as", "0"], {"type": "as", "data": []}),
    ("EchoVariant", ["a{sv}", "1", "k", "t", "18446744073709551615"],
     {"type": "a{sv}", "data": {"k": {"type": "t", "data": 18446744073709551615}}}),
    ("EchoVariant", ["(sx)", UNICODE, "-9223372036854775808"], {"type": "(sx)", "data": [UNICODE, -9223372036854775808]}),
    ("EchoStrings", ["0"], []), ("EchoStrings", ["3", "a", "", UNICODE], ["a", "", UNICODE]),
    ("EchoDict", ["0"], {}),
    ("EchoDict", ["3", "a", "i", "1", "b", "s", "x", "c", "ay", "2", "1", "2"],
     {"a": {"type": "i", "data": 1}, "b": {"type": "s", "data": "x"}, "c": {"type": "ay", "data": [1, 2]}}),
    ("EchoStruct", BUSCTL_STRUCT_ARGS, BUSCTL_STRUCT_DATA),
    ("EchoNested", ["0"], {}),
    ("EchoNested", ["2", "x", "2", "1", "s", "hi", "-2", "as", "2", "a", "b", "e", "0"],
     {"x": [[1, {"type": "s", "data": "hi"}], [-2, {"type": "as", "data": ["a", "b"]}]], "e": []}),
    ("EchoBytes", ["0"], []), ("EchoBytes", ["5", "0", "1", "127", "128", "255"], [0, 1, 127, 128, 255]),
]


@pytest.mark.parametrize("method,args,data", BUSCTL_CASES, ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(BUSCTL_CASES)])
def test_busctl_call_echo(testpeer, private_bus, method, args, data):
    signature = ECHO_METHODS[method]
    # "--" so that negative numbers are not taken for options
    result = busctl(private_bus, "--json=short", "--", "call", PEER, PEER_PATH, PEER_IFACE, method, signature, *args)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"type": signature, "data": [data]}


def test_busctl_covers_every_echo_method():
    assert {method for method, _, _ in BUSCTL_CASES} == set(ECHO_METHODS)


# MARK: Python GDBus: file descriptors, concurrency


def test_fd_readfd_from_gdbus(testpeer, gio):
    text = f"through a pipe {UNICODE}"
    reader, writer = os.pipe()
    os.write(writer, text.encode())
    os.close(writer)
    fds = Gio.UnixFDList.new()
    fds.append(reader)  # duplicates it
    os.close(reader)
    reply, _ = gio_call(gio, "ReadFD", "h", [0], reply="s", fds=fds)
    assert reply.unpack() == (text,)


def test_fd_readfd_regular_file(testpeer, gio):
    with tempfile.TemporaryFile() as f:
        f.write(b"from a file\n" * 10)
        f.flush()
        f.seek(0)
        fds = Gio.UnixFDList.new()
        fds.append(f.fileno())
        reply, _ = gio_call(gio, "ReadFD", "h", [0], reply="s", fds=fds)
    assert reply.unpack() == ("from a file\n" * 10,)


def test_fd_readfd_reads_at_most_4k(testpeer, gio):
    reader, writer = os.pipe()
    os.write(writer, b"y" * 6000)
    os.close(writer)
    fds = Gio.UnixFDList.new()
    fds.append(reader)
    os.close(reader)
    reply, _ = gio_call(gio, "ReadFD", "h", [0], reply="s", fds=fds)
    assert reply.unpack() == ("y" * 4096,)


def test_fd_makepipe_to_gdbus(testpeer, gio):
    text = f"from the peer {UNICODE}"
    reply, out = gio_call(gio, "MakePipe", "s", [text], reply="h")
    (index,) = reply.unpack()
    assert out is not None and out.get_length() == 1
    fd = out.get(index)  # a duplicate we own
    try:
        data = b""
        while chunk := os.read(fd, 4096):
            data += chunk
    finally:
        os.close(fd)
    assert data.decode() == text


def test_fd_roundtrips_leave_no_descriptor_open_in_the_peer(testpeer, gio):
    before = descriptors(testpeer.pid)
    for i in range(30):
        reply, out = gio_call(gio, "MakePipe", "s", [f"round trip {i}"], reply="h")
        fds = Gio.UnixFDList.new()
        fd = out.get(reply.unpack()[0])
        fds.append(fd)
        os.close(fd)
        back, _ = gio_call(gio, "ReadFD", "h", [0], reply="s", fds=fds)
        assert back.unpack() == (f"round trip {i}",)
    deadline = time.monotonic() + 5
    while len(descriptors(testpeer.pid)) > len(before) and time.monotonic() < deadline:
        time.sleep(0.05)
    after = descriptors(testpeer.pid)
    assert len(after) <= len(before), f"new descriptors in the peer: { {k: v for k, v in after.items() if before.get(k) != v} }"


def test_many_concurrent_calls_from_gdbus(testpeer, gio):
    replies = {}

    def done(connection, result, index):
        try:
            replies[index] = connection.call_finish(result).unpack()
        except GLib.Error as error:
            replies[index] = error

    # Under the object server's 256 calls waiting per caller (`maximumQueuedCallsPerCaller`):
    # with 300 sent at once, whether the last ones found room depended on how fast the peer
    # answered, and a busy machine got LimitsExceeded for call 299. What lies beyond the limit
    # is test_flood's and ConnectionTests' to check.
    count = 250
    for i in range(count):
        method, signature, value = [
            ("EchoInt64", "x", -i), ("EchoString", "s", f"{UNICODE} {i}"), ("EchoDict", "a{sv}", {"i": GLib.Variant("u", i)}),
        ][i % 3]
        gio.call(
            PEER, PEER_PATH, PEER_IFACE, method, GLib.Variant(f"({signature})", (value,)), None,
            Gio.DBusCallFlags.NONE, 20000, None, done, i,
        )
    assert wait_until(lambda: len(replies) == count, timeout=30), f"{len(replies)} of {count} replies arrived"
    for i in range(count):
        expected = [(-i,), (f"{UNICODE} {i}",), ({"i": i},)][i % 3]
        assert replies[i] == expected, f"call {i}: {replies[i]}"


# MARK: Properties


def test_properties_with_gdbus_introspect(testpeer, private_bus):
    result = gdbus(private_bus, "introspect", "--dest", PEER, "--object-path", PEER_PATH)
    assert result.returncode == 0, result.stderr
    assert "readwrite s Label = 'initial';" in result.stdout
    assert re.search(r"readonly u Count = \d+;", result.stdout), result.stdout


def test_properties_with_busctl(testpeer, private_bus):
    get = busctl(private_bus, "get-property", PEER, PEER_PATH, PEER_IFACE, "Label")
    assert (get.returncode, get.stdout.strip()) == (0, 's "initial"'), get.stderr
    label = f"new {UNICODE}"
    setp = busctl(private_bus, "set-property", PEER, PEER_PATH, PEER_IFACE, "Label", "s", label)
    assert setp.returncode == 0, setp.stderr
    get = busctl(private_bus, "--json=short", "get-property", PEER, PEER_PATH, PEER_IFACE, "Label")
    assert json.loads(get.stdout) == {"type": "s", "data": label}
    count = busctl(private_bus, "--json=short", "get-property", PEER, PEER_PATH, PEER_IFACE, "Count")
    assert json.loads(count.stdout)["type"] == "u"
    # Count is read-only; the wrong type for Label is refused; both leave the peer serving.
    ro = busctl(private_bus, "set-property", PEER, PEER_PATH, PEER_IFACE, "Count", "u", "3")
    assert ro.returncode != 0 and "read-only" in ro.stderr, ro.stderr
    wrong = busctl(private_bus, "set-property", PEER, PEER_PATH, PEER_IFACE, "Label", "u", "3")
    assert wrong.returncode != 0 and "Label" in wrong.stderr, wrong.stderr
    get = busctl(private_bus, "--json=short", "get-property", PEER, PEER_PATH, PEER_IFACE, "Label")
    assert json.loads(get.stdout) == {"type": "s", "data": label}


def test_count_counts_calls(testpeer, private_bus):
    def count():
        result = busctl(private_bus, "--json=short", "get-property", PEER, PEER_PATH, PEER_IFACE, "Count")
        return json.loads(result.stdout)["data"]

    start = count()
    for i in range(5):
        busctl(private_bus, "call", PEER, PEER_PATH, PEER_IFACE, "EchoUInt32", "u", str(i), check=True)
    assert count() == start + 5


def test_properties_changed_seen_by_gdbus_subscriber(testpeer, private_bus, gio):
    seen = []
    subscription = gio.signal_subscribe(
        PEER, PROPS, "PropertiesChanged", PEER_PATH, PEER_IFACE, Gio.DBusSignalFlags.NONE,
        lambda conn, sender, path, iface, member, params: seen.append((sender, params.unpack())),
    )
    try:
        sync_with_bus(gio)
        label = f"changed {UNICODE}"
        result = busctl(private_bus, "set-property", PEER, PEER_PATH, PEER_IFACE, "Label", "s", label)
        assert result.returncode == 0, result.stderr
        assert wait_until(lambda: seen), "no PropertiesChanged arrived"
        sender, (interface, changed, invalidated) = seen[0]
        assert sender == testpeer.unique_name
        assert (interface, changed, invalidated) == (PEER_IFACE, {"Label": label}, [])
        # GetAll agrees
        reply = gio.call_sync(PEER, PEER_PATH, PROPS, "GetAll", GLib.Variant("(s)", (PEER_IFACE,)), None,
                              Gio.DBusCallFlags.NONE, 10000, None).unpack()[0]
        assert reply["Label"] == label and isinstance(reply["Count"], int)
    finally:
        gio.signal_unsubscribe(subscription)


# MARK: Signals


def test_signal_pinged_seen_by_gdbus_subscriber(testpeer, private_bus, gio):
    seen = []
    subscription = gio.signal_subscribe(
        PEER, PEER_IFACE, "Pinged", PEER_PATH, None, Gio.DBusSignalFlags.NONE,
        lambda conn, sender, path, iface, member, params: seen.append((sender, path, params.unpack())),
    )
    try:
        sync_with_bus(gio)
        result = gdbus(private_bus, "call", "--dest", PEER, "--object-path", PEER_PATH,
                       "--method", f"{PEER_IFACE}.Emit", f"'ping {UNICODE}'")
        assert (result.returncode, result.stdout.strip()) == (0, "()"), result.stderr
        assert wait_until(lambda: seen), "no Pinged arrived"
        assert seen == [(testpeer.unique_name, PEER_PATH, (f"ping {UNICODE}",))]
    finally:
        gio.signal_unsubscribe(subscription)


# MARK: Introspection and the Peer interface


def test_busctl_introspect_lists_every_member(testpeer, private_bus):
    result = busctl(private_bus, "introspect", PEER, PEER_PATH)
    assert result.returncode == 0, result.stderr
    rows = {}
    interface = None
    for line in result.stdout.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "interface":
            interface = fields[0]
        elif len(fields) >= 4 and fields[0].startswith("."):
            rows[(interface, fields[0][1:])] = (fields[1], fields[2], fields[3])
    for method, signature in ECHO_METHODS.items():
        assert rows[(PEER_IFACE, method)] == ("method", signature, signature)
    for method, (inputs, outputs) in OTHER_METHODS.items():
        assert rows[(PEER_IFACE, method)] == ("method", inputs or "-", outputs or "-")
    assert rows[(PEER_IFACE, "Pinged")][:2] == ("signal", "s")
    assert rows[(PEER_IFACE, "Label")][:2] == ("property", "s")
    assert rows[(PEER_IFACE, "Count")][:2] == ("property", "u")
    for interface, member in [
        ("org.freedesktop.DBus.Introspectable", "Introspect"), ("org.freedesktop.DBus.Peer", "Ping"),
        ("org.freedesktop.DBus.Peer", "GetMachineId"), (PROPS, "Get"), (PROPS, "GetAll"), (PROPS, "Set"),
        (PROPS, "PropertiesChanged"),
    ]:
        assert (interface, member) in rows


def test_gdbus_introspect_xml(testpeer, private_bus):
    result = gdbus(private_bus, "introspect", "--xml", "--dest", PEER, "--object-path", PEER_PATH)
    assert result.returncode == 0, result.stderr
    root = ET.fromstring(result.stdout)
    interfaces = {i.get("name"): i for i in root.findall("interface")}
    assert {PEER_IFACE, PROPS, "org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Peer"} <= set(interfaces)
    methods = {m.get("name"): m for m in interfaces[PEER_IFACE].findall("method")}
    expected = {name: (sig, sig) for name, sig in ECHO_METHODS.items()} | OTHER_METHODS
    assert set(methods) == set(expected)
    for name, (inputs, outputs) in expected.items():
        args = methods[name].findall("arg")
        assert "".join(a.get("type") for a in args if a.get("direction") == "in") == inputs, name
        assert "".join(a.get("type") for a in args if a.get("direction") == "out") == outputs, name
    props = {p.get("name"): (p.get("type"), p.get("access")) for p in interfaces[PEER_IFACE].findall("property")}
    assert props == {"Label": ("s", "readwrite"), "Count": ("u", "read")}
    signals = {s.get("name"): [a.get("type") for a in s.findall("arg")] for s in interfaces[PEER_IFACE].findall("signal")}
    assert signals == {"Pinged": ["s"]}
    # and the parent path lists the object as a child node
    parent = gdbus(private_bus, "introspect", "--xml", "--dest", PEER, "--object-path", "/org/bgpolicy")
    assert [n.get("name") for n in ET.fromstring(parent.stdout).findall("node")] == ["TestPeer"]


def test_peer_ping_and_machine_id(testpeer, private_bus):
    ping = busctl(private_bus, "call", PEER, PEER_PATH, "org.freedesktop.DBus.Peer", "Ping")
    assert (ping.returncode, ping.stdout.strip()) == (0, ""), ping.stderr
    got = busctl(private_bus, "--json=short", "call", PEER, PEER_PATH, "org.freedesktop.DBus.Peer", "GetMachineId")
    assert got.returncode == 0, got.stderr
    machine_id = json.loads(got.stdout)["data"][0]
    assert re.fullmatch(r"[0-9a-f]{32}", machine_id)
    known = set()
    for path in ("/var/lib/dbus/machine-id", "/etc/machine-id"):
        try:
            known.add(Path(path).read_text().strip())
        except OSError:
            pass
    if known:
        assert machine_id in known


# MARK: Errors


def test_fail_returns_the_error_to_gdbus(testpeer, private_bus, gio):
    name, message = "org.bgpolicy.Test.Error.Custom", f"custom failure {UNICODE}"
    result = gdbus(private_bus, "call", "--dest", PEER, "--object-path", PEER_PATH,
                   "--method", f"{PEER_IFACE}.Fail", f"'{name}'", f"'{message}'")
    assert result.returncode != 0
    assert f"GDBus.Error:{name}: {message}" in result.stderr
    with pytest.raises(GLib.Error) as caught:
        gio_call(gio, "Fail", "ss", [name, message])
    assert remote_error(caught.value) == (name, message)
    busctl_result = busctl(private_bus, "call", PEER, PEER_PATH, PEER_IFACE, "Fail", "ss", name, message)
    assert busctl_result.returncode != 0 and message in busctl_result.stderr


def expect_gio_error(gio, method, signature, values, name, **kwargs):
    with pytest.raises(GLib.Error) as caught:
        gio_call(gio, method, signature, values, **kwargs)
    got_name, got_message = remote_error(caught.value)
    assert got_name == name, got_message
    return got_message


def test_unknown_method_then_still_serving(testpeer, private_bus, gio):
    result = busctl(private_bus, "call", PEER, PEER_PATH, PEER_IFACE, "NoSuchMethod")
    assert result.returncode != 0 and "NoSuchMethod" in result.stderr, result.stderr
    message = expect_gio_error(gio, "NoSuchMethod", "", [], "org.freedesktop.DBus.Error.UnknownMethod")
    assert "NoSuchMethod" in message
    ok = busctl(private_bus, "--json=short", "call", PEER, PEER_PATH, PEER_IFACE, "EchoInt32", "i", "5")
    assert json.loads(ok.stdout) == {"type": "i", "data": [5]}


def test_wrong_signature_then_still_serving(testpeer, private_bus, gio):
    result = busctl(private_bus, "call", PEER, PEER_PATH, PEER_IFACE, "EchoInt32", "s", "hello")
    assert result.returncode != 0
    assert 'EchoInt32 takes arguments of type "i", not "s"' in result.stderr, result.stderr
    expect_gio_error(gio, "EchoInt32", "s", ["hello"], "org.freedesktop.DBus.Error.InvalidArgs")
    expect_gio_error(gio, "EchoStruct", "(ybnqiuxtds)", [(1, True, 1, 1, 1, 1, 1, 1, 1.0, "x")],
                     "org.freedesktop.DBus.Error.InvalidArgs")
    ok = busctl(private_bus, "--json=short", "call", PEER, PEER_PATH, PEER_IFACE, "EchoInt32", "i", "5")
    assert json.loads(ok.stdout) == {"type": "i", "data": [5]}


def test_routing_errors(testpeer, gio):
    expect_gio_error(gio, "EchoInt32", "i", [1], "org.freedesktop.DBus.Error.UnknownObject", path="/org/bgpolicy/Nope")
    expect_gio_error(gio, "EchoInt32", "i", [1], "org.freedesktop.DBus.Error.UnknownInterface", interface="org.bgpolicy.Nope1")
    expect_gio_error(gio, "Get", "ss", [PEER_IFACE, "Nope"], "org.freedesktop.DBus.Error.UnknownProperty", interface=PROPS)
    expect_gio_error(gio, "Fail", "ss", ["not a name", "x"], "org.freedesktop.DBus.Error.InvalidArgs")
    reply, _ = gio_call(gio, "EchoInt32", "i", [3], reply="i")
    assert reply.unpack() == (3,)


def test_timeout_from_gdbus_then_still_serving(testpeer, gio):
    start = time.monotonic()
    with pytest.raises(GLib.Error) as caught:
        gio_call(gio, "Sleep", "u", [1500], timeout_ms=200)
    assert caught.value.matches(Gio.io_error_quark(), Gio.IOErrorEnum.TIMED_OUT), caught.value.message
    assert time.monotonic() - start < 1.4
    reply, _ = gio_call(gio, "EchoInt32", "i", [9], reply="i")
    assert reply.unpack() == (9,)


# MARK: serve mode itself


def test_serve_exits_2_when_the_name_is_taken(testpeer, private_bus, bin_dir):
    result = run([executable(bin_dir, "bgpolicy-testpeer"), "serve", "--address", private_bus], timeout=30)
    assert result.returncode == 2, result.stderr
    assert PEER in result.stderr and testpeer.unique_name in result.stderr
    assert "READY" not in result.stdout


def test_serve_exits_0_on_sigint(private_bus, bin_dir, processes):
    peer = processes.start([executable(bin_dir, "bgpolicy-testpeer"), "serve", "--address", private_bus,
                            "--name", "org.bgpolicy.TestPeer.Other"])
    peer.wait_for("READY ")
    peer.signal(signal.SIGINT)
    assert peer.wait(timeout=10) == 0, peer.stderr()


def test_serve_exits_1_when_the_bus_goes_away(bin_dir, processes):
    daemon = DBusDaemon()
    try:
        peer = processes.start([executable(bin_dir, "bgpolicy-testpeer"), "serve", "--address", daemon.address])
        peer.wait_for("READY ")
    finally:
        daemon.stop()
    assert peer.wait(timeout=10) == 1
    assert "lost" in peer.stderr()


def test_usage_errors(bin_dir):
    peer = executable(bin_dir, "bgpolicy-testpeer")
    for args in ([], ["nonsense"], ["serve", "--bogus", "x"], ["client", "--address", "unix:path=/nonexistent"]):
        result = run([peer, *args], timeout=30)
        assert result.returncode == 64, (args, result.stderr)
        assert "usage:" in result.stderr


# MARK: The other direction: our layer as the client of a GDBus service


PY_CHECKS = [
    "echo.concurrent", "fd.ReadFD", "fd.MakePipe", "fd.roundtrip", "signal.Pinged", "error.Fail", "error.GError",
    "error.UnknownMethod", "error.InvalidArgs", "property.Label", "property.GetAll", "property.Count.readonly",
    "introspect", "peer.Ping", "peer.GetMachineId", "timeout.NoReply", "cancel.inflight", "cancel.before",
    "sleep.short",
]


def test_testpeer_client_against_python_gdbus_service(private_bus, bin_dir, processes):
    service = processes.start([sys.executable, str(PYSERVICE), "--address", private_bus])
    service.wait_for("READY ")
    result = run([executable(bin_dir, "bgpolicy-testpeer"), "client", "--address", private_bus, "--dest", PY_PEER],
                 timeout=180)
    lines = result.stdout.splitlines()
    failures = [line for line in lines if line.startswith("FAIL")]
    assert not failures, "\n".join(failures) + "\n" + result.stderr
    assert result.returncode == 0, result.stderr
    passed = {line[3:] for line in lines if line.startswith("ok ")}
    for method in ECHO_METHODS:
        assert f"echo.{method}.0" in passed, method
    assert set(PY_CHECKS) <= passed, set(PY_CHECKS) - passed
    assert len(passed) >= 90
    # the service lived through it, and ends cleanly
    assert service.popen.poll() is None, service.stderr()
    assert service.stop(timeout=10) == 0, service.stderr()


def test_testpeer_client_reports_failures(private_bus, bin_dir):
    # Nobody owns the name: every check fails, with a reason, and the exit code says so.
    result = run([executable(bin_dir, "bgpolicy-testpeer"), "client", "--address", private_bus, "--dest", PY_PEER],
                 timeout=180)
    assert result.returncode == 1
    assert "FAIL echo.EchoByte.0: org.freedesktop.DBus.Error.ServiceUnknown" in result.stdout


# MARK: self-test (scripts/leakcheck.sh runs it under valgrind)


def test_self_test(private_bus, bin_dir):
    result = run([executable(bin_dir, "bgpolicy-testpeer"), "self-test"], timeout=180)
    lines = result.stdout.splitlines()
    failures = [line for line in lines if line.startswith("FAIL")]
    assert not failures, "\n".join(failures) + "\n" + result.stderr
    assert result.returncode == 0, result.stderr
    passed = {line[3:] for line in lines if line.startswith("ok ")}
    assert {"echo.concurrent", "fd.churn", "signal.Pinged", "timeout.NoReply", "cancel.inflight", "close",
            "leak.descriptors", "bus.watchNameOwner"} <= passed
    assert len(passed) >= 100
