"""`bgpolicy` as a demanding user drives it (Docs/CLI.md): the real binary against a real agent on
a private bus, for the corners test_agent.py's CLI tests leave out."""

import subprocess

from test_agent import BIN, agent, bus  # noqa: F401 - the fixtures


def test_an_empty_app_id_is_refused_by_timeline_as_by_the_other_commands(agent):
    """GetTimeline reads "" as every app; `bgpolicy timeline "$APP"` with APP unset must not
    draw every app with status 0, where `pending ""` and `explain "" ID` refuse it."""
    pending = agent.cli("pending", "", check=False)
    assert pending.returncode == 1 and "(NotRegistered)" in pending.stderr, pending
    for extra in [[], ["--json"]]:
        r = agent.cli("timeline", "", *extra, check=False)
        assert (r.returncode, r.stdout, r.stderr) == (1, "", pending.stderr), r
