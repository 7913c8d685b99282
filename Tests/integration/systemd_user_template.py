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
