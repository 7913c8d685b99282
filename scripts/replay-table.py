#!/usr/bin/python3
"""The replay table of `make bench`: `bgpolicy replay` on the StudentLife traces.

Usage: replay-table.py BINDIR [--quick]

Converts the shared StudentLife file (found as Tests/integration/test_replay.py finds it:
$BGPOLICY_SHARED_DIR, else ../shared next to the repository, else /work/shared) with
scripts/studentlife-trace.py for users 00, 01 and 02 (only 00 with --quick), runs
`BINDIR/bgpolicy replay --trace T --policy P --json` for each policy below, and prints one
markdown table per user (a row per policy, bgpolicy also with --apps first-seen, a column per
figure), then bgpolicy's ratios:
freshness_15m and wake-ups against periodic:60m, refreshes as a percentage of periodic:60m's,
and freshness_15m as a percentage of oracle:10m's (the best any policy could do).

Then what a replay costs: the wall time and peak RSS of each run, against `oracle:10m`'s on
the same trace (which holds the trace and few refreshes), on user 00 and (not with --quick)
on a trace of 3,012 apps over 60 days (`desktop-trace.py --rare 3000 5 60`), where
`periodic:15m` makes 17 million refreshes: they are scored as they are made, not held.
Figures are reported, never asserted. Python 3 standard library only.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONVERTER = ROOT / "scripts" / "studentlife-trace.py"
DESKTOP = ROOT / "scripts" / "desktop-trace.py"
# "bgpolicy --apps first-seen": the same policy told nothing of the trace beyond its past, not
# even how many apps it holds (Docs/Replay.md, "What bgpolicy is told of the apps").
POLICIES = ["bgpolicy", "bgpolicy --apps first-seen", "periodic:15m", "periodic:30m", "periodic:60m", "oracle:10m"]
KEYS = ["wakeups_per_day", "refreshes_per_day", "freshness_5m", "freshness_15m",
        "median_staleness_s", "wasted_fraction"]
USERS = ["00", "01", "02"]


def find_studentlife():
    relative = Path("traces") / "studentlife" / "running_app_u00_u01_u02.csv"
    roots = [Path(os.environ["BGPOLICY_SHARED_DIR"])] if os.environ.get("BGPOLICY_SHARED_DIR") else []
    roots += [ROOT.parent / "shared", Path("/work/shared")]
    for root in roots:
        if (root / relative).is_file():
            return root / relative
    return None


def replay(bgpolicy, trace, policy):
    """The figures of one replay, its wall time in seconds and its peak RSS in kB."""
    with tempfile.TemporaryFile(mode="w+") as err:
        started = time.monotonic()
        name, *options = policy.split()
        proc = subprocess.Popen([str(bgpolicy), "replay", "--trace", str(trace), "--policy", name, *options, "--json"],
                                stdout=subprocess.PIPE, stderr=err, text=True)
        out = proc.stdout.read()
        # wait4, not wait: the child's own peak RSS (getrusage's is the most of all children).
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            sys.exit(f"replay-table: bgpolicy replay --policy {policy} on {trace.name} failed "
                     f"(status {proc.returncode}): {err.read().strip()}")
    return json.loads(out), seconds, usage.ru_maxrss


def cell(key, value):
    if value is None:
        return "n/a"
    if key == "median_staleness_s":
        return f"{value:,.0f}"
    if key.endswith("_per_day"):
        return f"{value:,.2f}"
    return f"{value:.3f}"


def ratio(a, b, percent=False):
    if a is None or not b:
        return "n/a"
    return f"{a / b * 100:.0f} %" if percent else f"{a / b:.2f}×"


def table(user, figures):
    lines = [f"StudentLife user {user}:", "",
             "| policy | " + " | ".join(KEYS) + " |",
             "|---|" + "---:|" * len(KEYS)]
    for policy in POLICIES:
        lines.append(f"| {policy} | " + " | ".join(cell(k, figures[policy].get(k)) for k in KEYS) + " |")
    ours, hourly, oracle = figures["bgpolicy"], figures["periodic:60m"], figures["oracle:10m"]
    lines += ["",
              "bgpolicy: freshness_15m " + ratio(ours["freshness_15m"], hourly["freshness_15m"])
              + " periodic:60m's; wake-ups " + ratio(ours["wakeups_per_day"], hourly["wakeups_per_day"])
              + " periodic:60m's; refreshes " + ratio(ours["refreshes_per_day"], hourly["refreshes_per_day"], True)
              + " of periodic:60m's; freshness_15m " + ratio(ours["freshness_15m"], oracle["freshness_15m"], True)
              + " of oracle:10m's; with --apps first-seen, freshness_15m "
              + ratio(figures["bgpolicy --apps first-seen"]["freshness_15m"], hourly["freshness_15m"])
              + " periodic:60m's."]
    return "\n".join(lines)


def main(argv):
    args = [a for a in argv if a != "--quick"]
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    bgpolicy = Path(args[0]) / "bgpolicy"
    if not os.access(bgpolicy, os.X_OK):
        sys.exit(f"replay-table: {bgpolicy} is missing: build it first (swift build --product bgpolicy)")
    source = find_studentlife()
    if source is None:
        print("replay-table: the StudentLife trace is not here (traces/studentlife/running_app_u00_u01_u02.csv "
              "under $BGPOLICY_SHARED_DIR, ../shared or /work/shared); skipping the replay table.", file=sys.stderr)
        return 0
    quick = "--quick" in argv
    users = USERS[:1] if quick else USERS
    costs = []
    with tempfile.TemporaryDirectory(prefix="bgpolicy-replay-table-") as out:
        subprocess.run([sys.executable, str(CONVERTER), str(source), out, "--user", *users], check=True)
        tables = []
        for user in users:
            trace = Path(out) / f"studentlife-u{user}.csv"
            runs = {policy: replay(bgpolicy, trace, policy) for policy in POLICIES}
            tables.append(table(user, {policy: run[0] for policy, run in runs.items()}))
            if user == USERS[0]:
                costs.append((f"StudentLife {user}", runs))
        if not quick:
            trace = Path(out) / "rare3000.csv"
            with open(trace, "w") as f:
                subprocess.run([sys.executable, str(DESKTOP), "--rare", "3000", "5", "60"], stdout=f, check=True)
            policies = ["oracle:10m", "periodic:60m", "periodic:15m", "bgpolicy"]
            costs.append(("3,012 apps, 60 days", {policy: replay(bgpolicy, trace, policy) for policy in policies}))
    print("\n\n".join(tables))
    print()
    print(cost_table(costs))
    return 0


def cost_table(costs):
    lines = ["What a replay costs (wall time, and peak RSS against oracle:10m's on the same trace):", "",
             "| trace | policy | refreshes (scored) | seconds | peak RSS (MB) | RSS × oracle:10m's |",
             "|---|---|---:|---:|---:|---:|"]
    for name, runs in costs:
        baseline = runs["oracle:10m"][2]
        for policy, (figures, seconds, rss) in runs.items():
            lines.append(f"| {name} | {policy} | {figures['refreshes_per_day']:,.0f}/day | {seconds:.2f} | {rss / 1024:,.1f} | "
                         f"{rss / baseline:.2f}× |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
