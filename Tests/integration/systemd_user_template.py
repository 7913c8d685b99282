"""python-dbusmock's `systemd` template with what a user manager's clients need first: the
Manager's `Subscribe` and `Unsubscribe` (the stock template lacks them). A template rather than
`AddMethod` after start, so that a client that sees the name appear and subscribes at once
never meets a manager without them. Used as `python3 -m dbusmock --session --template PATH`."""

import dbus

from dbusmock.templates.systemd import *  # noqa: F401,F403 - the stock template, re-exported
from dbusmock.templates.systemd import MAIN_IFACE


@dbus.service.method(MAIN_IFACE, in_signature="", out_signature="")
def Subscribe(_self):
    """Real systemd starts sending unit and job signals to the caller; the mock sends them to
    everyone anyway. Calls are logged (GetMethodCalls), so tests can wait for them."""


@dbus.service.method(MAIN_IFACE, in_signature="", out_signature="")
def Unsubscribe(_self):
    pass


@dbus.service.method(MAIN_IFACE, in_signature="asas", out_signature="a(ssssssouso)")
def ListUnitsByPatterns(self, states, patterns):
    """The units added with AddMockUnit whose ActiveState is among `states` and whose name
    matches one of the shell-style `patterns` (either list empty: no filter), as systemd lists
    them: name, description, load, active and sub state, following, path, job id, type, path."""
    import fnmatch

    from dbusmock import mockobject
    from dbusmock.templates.systemd import UNIT_IFACE

    units = []
    for name, path in sorted(self.units.items()):
        active = str(mockobject.objects[path].Get(UNIT_IFACE, "ActiveState"))
        if states and active not in states:
            continue
        if patterns and not any(fnmatch.fnmatchcase(name, p) for p in patterns):
            continue
        units.append((name, "", "loaded", active, "running" if active == "active" else "dead", "",
                      dbus.ObjectPath(path), dbus.UInt32(0), "", dbus.ObjectPath("/")))
    return dbus.Array(units, signature="(ssssssouso)")
