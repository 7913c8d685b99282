"""Hostile input on the session bus: big arguments and signals, and arguments that cannot be
read. The agent answers them (with its own error names) without decoding what it refuses, so
its memory stays bounded and its connection's thread is not held up for its other callers.

Timing is never judged against a fixed figure: the agent's answer to a big message is
compared with the bus daemon's answer to the same bytes, measured in the same test."""

import os
import threading
import time

from gi.repository import Gio, GLib

import tasks_helpers as th
from tasks_helpers import AGENT_NAME, AGENT_PATH, SCHEDULER, world  # noqa: F401 - the fixture

BIG = 32 * 1024 * 1024  # bytes of `ay`: far over the agent's 64 KiB bound for a call's arguments
CALL_BOUND = 64 * 1024  # the most of a call's arguments the agent reads (AgentService.maximumCallBodyBytes)
BUS = "org.freedesktop.DBus"
BUS_PATH = "/org/freedesktop/DBus"


def big_bytes():
    return GLib.Variant.new_from_bytes(GLib.VariantType("ay"), GLib.Bytes.new(b"\0" * BIG), True)


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM line")


def timed_call(conn, dest, path, iface, method, params):
    """(seconds, error name or None) of one call."""
    start = time.perf_counter()
    try:
        conn.call_sync(dest, path, iface, method, params, None, Gio.DBusCallFlags.NO_AUTO_START, 120_000, None)
        name = None
    except GLib.Error as error:
        name = Gio.DBusError.get_remote_error(error) or error.message
    return time.perf_counter() - start, name


def bus_pace(conn, params):
    """How long the bus daemon takes to read the same arguments and answer (UnknownMethod): the
    machine's pace for moving them through libdbus, the baseline the agent is judged against."""
    seconds, name = timed_call(conn, BUS, BUS_PATH, BUS, "NoSuchMethod", params)
    assert name == "org.freedesktop.DBus.Error.UnknownMethod", name
    return seconds


def status_answers(conn):
    result = th.call(conn, th.ADMIN, "GetStatus", reply_type="(a{sv})")
    assert "pending" in result[0], result


def check_bounded(agent, hwm_before, what):
    growth = vm_hwm_kib(agent.pid) - hwm_before
    th.ch.log(f"{what}: peak RSS grew by {growth / 1024:.1f} MiB")
    # libdbus holds the message it read (and briefly its read buffer): about twice its size.
    # Decoding an `ay` value by value took 24 bytes per byte (over 750 MiB here).
    assert growth * 1024 < 4 * BIG, (
        f"{what}: the agent's peak RSS grew by {growth / 1024:.0f} MiB for a {BIG >> 20} MiB message")
    assert agent.alive()


def test_big_arguments_to_an_unknown_method_are_refused_undecoded(world):
    agent = world.start_agent()
    client = world.stack.push(th.ch.GBus(world.address)).conn
    status_answers(client)
    params = GLib.Variant.new_tuple(big_bytes())
    pace = bus_pace(client, params)
    hwm_before = vm_hwm_kib(agent.pid)
    seconds, name = timed_call(client, AGENT_NAME, AGENT_PATH, SCHEDULER, "NoSuchMethod", params)
    th.ch.log(f"\nNoSuchMethod with {BIG >> 20} MiB: agent {seconds:.2f} s, bus {pace:.2f} s")
    assert name == "org.bgpolicy.Error.UnknownMethod", name
    check_bounded(agent, hwm_before, "NoSuchMethod")
    # The agent reads the message once more than the bus does (the bus forwards it): about
    # twice the bus's time. Decoding it took 20 to 60 times as long.
    assert seconds < 6 * pace + 0.5, f"the agent took {seconds:.2f} s, the bus {pace:.2f} s for the same bytes"
    status_answers(client)


def test_big_submit_options_are_refused_with_limits_exceeded(world):
    agent = world.start_agent()
    client = world.stack.push(th.ch.GBus(world.address)).conn
    status_answers(client)
    options = GLib.Variant("a{sv}", {"earliest_begin": big_bytes()})
    params = GLib.Variant.new_tuple(GLib.Variant("s", "x"), GLib.Variant("s", "refresh"), options)
    pace = bus_pace(client, params)
    hwm_before = vm_hwm_kib(agent.pid)
    start = time.perf_counter()
    try:
        th.call(client, SCHEDULER, "Submit", "ssa{sv}", ("x", "refresh", {"earliest_begin": big_bytes()}), timeout=120)
        raise AssertionError("a Submit with 32 MiB of options succeeded")
    except th.AgentError as error:
        seconds = time.perf_counter() - start
        assert error.name == "org.bgpolicy.Error.LimitsExceeded", error
        assert "Submit" in error.message and f"{CALL_BOUND} bytes" in error.message, error.message
    th.ch.log(f"\nSubmit with {BIG >> 20} MiB of options: agent {seconds:.2f} s, bus {pace:.2f} s")
    check_bounded(agent, hwm_before, "Submit")
    assert seconds < 6 * pace + 0.5, f"the agent took {seconds:.2f} s, the bus {pace:.2f} s for the same bytes"
    # A Submit of an ordinary size is still served.
    th.call(client, SCHEDULER, "Register", "asa{sv}", (["x"], th.register_options(app_id="org.example.Big")), "(s)")
    th.call(client, SCHEDULER, "Submit", "ssa{sv}", ("x", "refresh", th.submit_options(earliest_begin=th.later(3600))))
    assert [p["identifier"] for p in agent.list_pending() if p["app_id"] == "org.example.Big"] == ["x"]


def test_calls_are_read_up_to_64_kib_which_the_largest_register_fits_in(world):
    """The agent read a call's arguments up to the library's 1 MiB, some 24 MiB once read, when
    none of its calls takes more than about 17 KiB. A Register of 64 identifiers of 255 bytes,
    the largest call it serves, is within its 64 KiB; a Submit just over it is refused unread."""
    world.start_agent()
    client = world.stack.push(th.ch.GBus(world.address)).conn
    app_id = "org.example." + "a" * (255 - len("org.example."))
    identifiers = [f"{app_id[:251]}.t{i:02d}" for i in range(64)]
    assert {len(i) for i in identifiers} == {255}
    th.call(client, SCHEDULER, "Register", "asa{sv}",
            (identifiers, th.register_options(app_id=app_id, background_only=True)), "(s)")
    options = {"earliest_begin": GLib.Variant("ay", b"\0" * CALL_BOUND)}
    try:
        th.call(client, SCHEDULER, "Submit", "ssa{sv}", (identifiers[0], "refresh", options))
        raise AssertionError(f"a Submit with {CALL_BOUND} bytes of options was read")
    except th.AgentError as error:
        assert error.name == "org.bgpolicy.Error.LimitsExceeded", error
        assert f"{CALL_BOUND} bytes" in error.message, error.message
    # Under the bound, the same options are read, and refused for what they hold.
    options = {"earliest_begin": GLib.Variant("ay", b"\0" * (CALL_BOUND // 2))}
    try:
        th.call(client, SCHEDULER, "Submit", "ssa{sv}", (identifiers[0], "refresh", options))
        raise AssertionError("a Submit with bytes for earliest_begin succeeded")
    except th.AgentError as error:
        assert error.name == "org.bgpolicy.Error.InvalidArgument", error


def test_a_big_signal_nobody_wants_is_dropped_undecoded(world):
    agent = world.start_agent()
    client = world.stack.push(th.ch.GBus(world.address)).conn
    status_answers(client)
    params = GLib.Variant.new_tuple(big_bytes())
    # The baseline: the same signal to the bus daemon, then a call it answers after reading it.
    start = time.perf_counter()
    client.emit_signal(BUS, "/org/example/Big", "org.example.Big", "Big", params)
    client.call_sync(BUS, BUS_PATH, BUS, "GetId", None, None, Gio.DBusCallFlags.NONE, 120_000, None)
    pace = time.perf_counter() - start
    hwm_before = vm_hwm_kib(agent.pid)
    # A unicast signal to the agent; messages from one sender arrive in order, so GetStatus is
    # answered only once the agent has dealt with the signal.
    start = time.perf_counter()
    client.emit_signal(AGENT_NAME, "/org/example/Big", "org.example.Big", "Big", params)
    status_answers(client)
    seconds = time.perf_counter() - start
    th.ch.log(f"\nunwanted {BIG >> 20} MiB signal: agent {seconds:.2f} s, bus {pace:.2f} s")
    check_bounded(agent, hwm_before, "an unwanted signal")
    assert seconds < 6 * pace + 0.5, f"the agent took {seconds:.2f} s, the bus {pace:.2f} s for the same bytes"


def test_arguments_that_cannot_be_read_get_the_agents_invalid_argument(world):
    """A handle in a variant with no descriptor passed: libdbus lets it through, our reader
    refuses it, and the answer is the agent's own error, not freedesktop's InvalidArgs."""
    world.start_agent()
    client = world.stack.push(th.ch.GBus(world.address)).conn
    options = GLib.Variant("a{sv}", {"earliest_begin": GLib.Variant("h", 0)})
    params = GLib.Variant.new_tuple(GLib.Variant("s", "x"), GLib.Variant("s", "refresh"), options)
    for _ in range(2):
        try:
            client.call_sync(AGENT_NAME, AGENT_PATH, SCHEDULER, "Submit", params, None,
                             Gio.DBusCallFlags.NO_AUTO_START, 10_000, None)
            raise AssertionError("a Submit whose options cannot be read succeeded")
        except GLib.Error as error:
            name = Gio.DBusError.get_remote_error(error)
            assert name == "org.bgpolicy.Error.InvalidArgument", error.message
            assert "Submit" in error.message, error.message


PROPERTIES = "org.freedesktop.DBus.Properties"


def test_a_property_set_is_refused_from_its_names_before_its_value_is_read(world):
    """Properties calls were read whole on the connection's thread before they were routed,
    outside the caller's bounds: a Set of the read-only Conditions with 1 MiB of `ay` was read
    value by value (some 24 MiB) only to be refused. Now the interface and property names are
    read alone: a Set of a read-only or unknown property is refused without its value being read.
    The value here cannot be read at all (a handle with no descriptor passed): before, the call
    got InvalidArgument for it, not PropertyReadOnly."""
    world.start_agent()
    client = world.stack.push(th.ch.GBus(world.address)).conn
    unreadable = GLib.Variant("h", 0)
    for prop, expected in [("Conditions", "org.bgpolicy.Error.PropertyReadOnly"),
                           ("NoSuchProperty", "org.bgpolicy.Error.UnknownProperty")]:
        for interface in [th.ADMIN, ""]:
            params = GLib.Variant.new_tuple(GLib.Variant("s", interface), GLib.Variant("s", prop), GLib.Variant("v", unreadable))
            _, name = timed_call(client, AGENT_NAME, AGENT_PATH, PROPERTIES, "Set", params)
            assert name == expected, (prop, interface, name)
    # A big value is refused the same way, unread.
    params = GLib.Variant.new_tuple(GLib.Variant("s", th.ADMIN), GLib.Variant("s", "Conditions"),
                                    GLib.Variant("v", big_bytes()))
    _, name = timed_call(client, AGENT_NAME, AGENT_PATH, PROPERTIES, "Set", params)
    assert name == "org.bgpolicy.Error.PropertyReadOnly", name
    # Reading the property is served as before.
    conditions = th.call(client, PROPERTIES, "Get", "ss", (th.ADMIN, "Conditions"), "(v)")[0]
    assert isinstance(conditions, dict), conditions
    status_answers(client)


CLIENT_XML = """<node><interface name="org.bgpolicy.Client1">
<method name="RunTask"><arg type="s" direction="in"/><arg type="s" direction="in"/><arg type="s" direction="in"/>
<arg type="u" direction="in"/><arg type="a{sv}" direction="in"/><arg type="ay" direction="out"/></method>
<method name="ExpireTask"><arg type="s" direction="in"/><arg type="ay" direction="out"/></method>
</interface></node>"""


class BigAnswerApp:
    """An app of this process (its own connection, served by a thread) that answers RunTask
    and ExpireTask with BIG bytes of `ay`, where Client1 returns nothing."""

    def __init__(self, address, app_id):
        self.payload = GLib.Variant.new_tuple(big_bytes())
        self.ready = threading.Event()
        self.expire_answered = threading.Event()
        threading.Thread(target=self.serve, args=(address, app_id), daemon=True).start()
        assert self.ready.wait(10), "the app did not register"

    def serve(self, address, app_id):
        context = GLib.MainContext.new()
        context.push_thread_default()
        conn = Gio.DBusConnection.new_for_address_sync(
            address, Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION,
            None, None)
        interface = Gio.DBusNodeInfo.new_for_xml(CLIENT_XML).interfaces[0]

        def method(_conn, _sender, _path, _iface, name, _params, invocation):
            invocation.return_value(self.payload)
            if name == "ExpireTask":
                self.expire_answered.set()
        conn.register_object("/org/bgpolicy/Client1", interface, method, None, None)
        self.conn = conn
        th.call(conn, SCHEDULER, "Register", "asa{sv}", ([f"{app_id}.refresh"], th.register_options(app_id=app_id)), "(s)")
        th.call(conn, SCHEDULER, "Submit", "ssa{sv}",
                (f"{app_id}.refresh", "refresh", th.submit_options(earliest_begin=th.later(3600))))
        self.ready.set()
        GLib.MainLoop.new(context, False).run()


def test_a_big_answer_to_run_task_is_not_read(world):
    """RunTask returns nothing; an app answering it with 32 MiB of `ay` was read value by value
    on the connection's thread: the agent's peak RSS grew by about 1.7 GB for 50 MB, and every
    other caller waited the 13 s it took (SimulateLaunch gave up at 10 s). A reply over 64 KiB is
    measured, not read: the task is delivered, at the pace of moving the bytes."""
    agent = world.start_agent()
    hwm_before = vm_hwm_kib(agent.pid)
    BigAnswerApp(world.address, "org.example.Big")
    started = time.monotonic()
    agent.admin("SimulateLaunch", "ss", ("org.example.Big", "org.example.Big.refresh"), timeout=60)
    th.ch.log(f"SimulateLaunch with a {BIG >> 20} MiB answer: {time.monotonic() - started:.2f} s")
    check_bounded(agent, hwm_before, "a big answer to RunTask")
    assert agent.wait_history("delivered", app_id="org.example.Big", timeout=5)
    status_answers(world.session.conn)


def test_a_big_answer_to_expire_task_is_not_read(world):
    """ExpireTask returns nothing; its answer was read whole, value by value, on the
    connection's thread: 32 MiB of `ay` took the agent's peak RSS up by about 750 MiB, and
    every other caller waited. Like RunTask's, a reply over 64 KiB is measured, not read."""
    agent = world.start_agent()
    app = BigAnswerApp(world.address, "org.example.Big")
    agent.admin("SimulateLaunch", "ss", ("org.example.Big", "org.example.Big.refresh"), timeout=60)
    assert agent.wait_history("delivered", app_id="org.example.Big", timeout=5)
    hwm_before = vm_hwm_kib(agent.pid)
    agent.admin("SimulateExpiration", "ss", ("org.example.Big", "org.example.Big.refresh"))
    assert app.expire_answered.wait(10), "the app was not sent ExpireTask"
    # Messages from one connection arrive in order: the agent answers this call only once it
    # has dealt with the app's answer to ExpireTask.
    th.call(app.conn, SCHEDULER, "GetRefreshStatus", reply_type="(s)", timeout=60)
    status_answers(world.session.conn)
    check_bounded(agent, hwm_before, "a big answer to ExpireTask")
    assert agent.alive()


def call_with_descriptors(conn, interface, method, signature, args, count):
    """The remote error (name, message) of a call that carries `count` descriptors, or None."""
    read_end, write_end = os.pipe()
    try:
        fds = Gio.UnixFDList.new()
        for _ in range(count):
            fds.append(read_end)
        conn.call_with_unix_fd_list_sync(AGENT_NAME, AGENT_PATH, interface, method, th.variant_args(signature, args),
                                         None, Gio.DBusCallFlags.NO_AUTO_START, 10_000, fds, None)
        return None
    except GLib.Error as error:
        return Gio.DBusError.get_remote_error(error), error.message
    finally:
        os.close(read_end)
        os.close(write_end)


def descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_call_carrying_file_descriptors_is_refused_before_it_waits(world):
    """No method of the agent takes a file descriptor. A call that carried some was served
    all the same (GetStatus), or queued in its caller's lane with its descriptors open in the
    agent, and a handle in Submit's options was duplicated, only to be refused as the wrong
    type once its turn came. Now the agent answers InvalidArgument at once, saying why."""
    agent = world.start_agent()
    client = world.stack.push(th.ch.GBus(world.address)).conn
    status_answers(client)
    before = descriptors(agent.pid)
    th.call(client, SCHEDULER, "Register", "asa{sv}", (["x"], th.register_options(app_id="org.example.Fd")), "(s)")
    submit = ("x", "refresh", {**th.submit_options(earliest_begin=th.later(3600)), "extra": GLib.Variant("h", 0)})
    calls = [
        (th.ADMIN, "GetStatus", "", (), "org.bgpolicy.Admin1.GetStatus"),
        (SCHEDULER, "Submit", "ssa{sv}", submit, "org.bgpolicy.Scheduler1.Submit"),
        ("org.freedesktop.DBus.Properties", "Get", "ss", (th.ADMIN, "Conditions"), "org.freedesktop.DBus.Properties.Get"),
    ]
    for interface, method, signature, args, named in calls:
        refusal = call_with_descriptors(client, interface, method, signature, args, 16)
        assert refusal is not None, f"{method} carrying 16 descriptors was served"
        name, text = refusal
        assert name == "org.bgpolicy.Error.InvalidArgument", (method, name, text)
        assert named in text and "file descriptor" in text, text
    # Nothing was queued or kept: no request pending, and no descriptor left open.
    assert [p for p in agent.list_pending() if p["app_id"] == "org.example.Fd"] == []
    th.wait_until(lambda: descriptors(agent.pid) <= before, 5, "the agent closes the descriptors it was sent")
    # The same calls without descriptors are served.
    th.call(client, SCHEDULER, "Submit", "ssa{sv}", ("x", "refresh", th.submit_options(earliest_begin=th.later(3600))))
    assert [p["identifier"] for p in agent.list_pending() if p["app_id"] == "org.example.Fd"] == ["x"]
    status_answers(client)
