#!/usr/bin/python3
"""Convert the StudentLife "running apps" snapshots into usage traces (SPEC.md §4), one per user.

Usage: studentlife-trace.py INPUT.csv OUTDIR [--user ID ...]
Writes OUTDIR/studentlife-u<ID>.csv for each user (all users in INPUT by default).

The input (see ../shared/traces/README.md) has a snapshot of the phone's recent tasks every
~20 minutes, most recent first: rows `userId,timestamp,RUNNING_TASKS_id,
RUNNING_TASKS_baseActivity_mPackage,RUNNING_TASKS_topActivity_mPackage`. The package of a row is
its base activity's package. Rows of the excluded packages below are dropped first: they are not
apps that would get refreshed (the launcher, system UI, phone, settings-like system surfaces and
the study's own sensing app).

The rule for an `open` of package P at snapshot time t (the snapshot's timestamp):
  1. P is the front app at t (the first row of the snapshot, if that row is not excluded) and
     was not the front app of the previous snapshot, or the previous snapshot is more than
     1 hour earlier (the phone was off or not sampled: a new session); or
  2. P has a task id at t that it never had in an earlier snapshot of this user: a fresh launch
     since the previous snapshot, even if P is no longer in front (the user opened it briefly).
     The first snapshot of a user is a baseline for task ids: its tasks predate the trace, so
     only its front app opens (rule 1).
An app opened by rule 2 alone gets its `close` at the same instant. A front app gets its `close`
at the first later snapshot where it is not in front (a relaunch in front closes and reopens
it); if the next snapshot is more than 1 hour later, at its own last snapshot before the gap;
and at the last snapshot of the trace. Within one timestamp: closes first, then opens, in
package order, with the front app's open last. Timestamps are those of the snapshots, so an
open is stamped up to ~20 minutes after the launch it stands for.
"""

import csv
import os
import sys

EXCLUDED = {
    "com.android.launcher",
    "com.android.launcher2",
    "com.android.launcher3",
    "com.google.android.launcher",
    "com.android.systemui",
    "com.android.phone",
    "com.android.incallui",
    "com.android.dialer",
    "android",
    "org.bewellapp",
}

SESSION_GAP = 3600.0


def read_snapshots(path):
    """{user: [(timestamp, [(task_id, package), ...] most recent first)]} in time order."""
    users = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            user = row["userId"]
            ts = int(row["timestamp"])
            snaps = users.setdefault(user, {})
            snaps.setdefault(ts, []).append((row["RUNNING_TASKS_id"], row["RUNNING_TASKS_baseActivity_mPackage"]))
    return {u: sorted(s.items()) for u, s in users.items()}


def convert(snapshots):
    """The events [(timestamp, app_id, 'open'|'close')] of one user's snapshots."""
    events = []
    seen_tasks = set()
    front = None
    previous_ts = None
    for index, (ts, rows) in enumerate(snapshots):
        new_session = previous_ts is None or ts - previous_ts > SESSION_GAP
        if front is not None and new_session:
            events.append((previous_ts, front, "close"))
            front = None
        first_package = rows[0][1]
        now_front = None if first_package in EXCLUDED else first_package
        launched = set()
        for task_id, package in rows:
            key = (task_id, package)
            if key not in seen_tasks:
                seen_tasks.add(key)
                if index > 0 and package not in EXCLUDED:
                    launched.add(package)
        closes, opens = [], []
        if front is not None and front != now_front:
            closes.append(front)
        opens_front = now_front is not None and (now_front != front)
        # A relaunch of the app that stays in front is still an open (rule 2).
        if now_front is not None and now_front == front and now_front in launched:
            closes.append(front)
            opens_front = True
        opens.extend(sorted(launched - {now_front}))
        for package in closes:
            events.append((ts, package, "close"))
        for package in opens:
            events.append((ts, package, "open"))
            events.append((ts, package, "close"))
        if opens_front:
            events.append((ts, now_front, "open"))
        front = now_front
        previous_ts = ts
    if front is not None:
        events.append((previous_ts, front, "close"))
    return events


def write_trace(events, path):
    with open(path, "w", newline="") as f:
        f.write("timestamp,app_id,event\n")
        for ts, app, kind in events:
            f.write(f"{ts},{app},{kind}\n")


def main(argv):
    args = argv[1:]
    users = None
    if "--user" in args:
        i = args.index("--user")
        users = args[i + 1:]
        args = args[:i]
    if len(args) != 2 or (users is not None and not users):
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 64
    source, outdir = args
    os.makedirs(outdir, exist_ok=True)
    snapshots = read_snapshots(source)
    for user in sorted(snapshots):
        if users is not None and user not in users:
            continue
        events = convert(snapshots[user])
        write_trace(events, os.path.join(outdir, f"studentlife-u{user}.csv"))
    missing = [u for u in users or [] if u not in snapshots]
    if missing:
        sys.stderr.write(f"no snapshots for user(s) {', '.join(missing)}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
