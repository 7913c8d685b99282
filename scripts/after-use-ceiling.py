#!/usr/bin/env python3
"""What refreshing an app each time the user leaves it can score on a SPEC §4 trace.

    scripts/after-use-ceiling.py TRACE... [--per-app-per-day R] [--max-wakes-per-day W]
                                          [--bgpolicy BIN]

The policy replayed here is the window after use at its most generous: every close of an app
refreshes it a second later, unless the app was refreshed in the last 15 minutes (SPEC §2),
or the pool is empty (with --per-app-per-day: R refreshes a day for each app of the trace,
holding one day's worth, starting half full, as `RefreshPlanner`'s), or W refreshes were made
in the last 24 hours (--max-wakes-per-day). It knows when the user leaves, not whether they
come back, so it is causal; with no limits it is a ceiling for any policy whose refreshes come
at closes. The figures are scored as `bgpolicy replay` scores them (ReplayMetrics): opens after
the trace's first 7 days, fresh when a refresh of the app came at most 15 minutes before.

With --bgpolicy, `BIN replay --policy periodic:60m` gives each trace's baseline, and the
freshness is also printed as a multiple of it (issue 5's target is 2.5x on desktop traces).
Docs/Replay.md ("Desktop-like sessions") quotes this script's figures."""

import argparse
import bisect
import collections
import csv
import json
import subprocess
import sys

DAY = 86_400
WARM_UP = 7 * DAY
FRESH = 900
MIN_INTERVAL = 900
MERGE = 60


def read(path):
    with open(path, newline="", encoding="utf-8-sig") as f:
        return [(float(r["timestamp"]), r["app_id"], r["event"]) for r in csv.DictReader(f)]


def replay(events, per_app_per_day, max_wakes):
    """Each app's refresh times, in order."""
    start = events[0][0]
    apps = {app for _, app, _ in events}
    daily = None if per_app_per_day is None else per_app_per_day * len(apps)
    tokens = None if daily is None else daily / 2
    last_time = start
    last_refresh = {}
    refreshes = collections.defaultdict(list)
    recent = collections.deque()
    for time, app, kind in events:
        if daily is not None:
            tokens = min(daily, tokens + daily * (time - last_time) / DAY)
        last_time = time
        if kind != "close":
            continue
        at = time + 1
        while recent and recent[0] <= at - DAY:
            recent.popleft()
        if tokens is not None and tokens < 1:
            continue
        if max_wakes is not None and len(recent) >= max_wakes:
            continue
        if app in last_refresh and at - last_refresh[app] < MIN_INTERVAL:
            continue
        if tokens is not None:
            tokens -= 1
        last_refresh[app] = at
        refreshes[app].append(at)
        recent.append(at)
    return refreshes


def score(events, refreshes):
    start, end = events[0][0], events[-1][0]
    scored_from = start + WARM_UP
    days = (end - scored_from) / DAY
    if days <= 0:
        sys.exit("after-use-ceiling: the trace is not longer than its 7-day warm-up")
    opens = fresh = 0
    for time, app, kind in events:
        if kind != "open" or not scored_from <= time <= end:
            continue
        opens += 1
        times = refreshes.get(app, [])
        i = bisect.bisect_right(times, time)
        if i and time - times[i - 1] <= FRESH:
            fresh += 1
    scored = sorted(t for times in refreshes.values() for t in times if scored_from <= t <= end)
    wakes, group = 0, -float("inf")
    for t in scored:
        if t > group + MERGE:
            wakes += 1
            group = t
    return {
        "freshness_15m": fresh / opens if opens else 0.0,
        "refreshes_per_day": len(scored) / days,
        "wakeups_per_day": wakes / days,
        "opens_per_day": opens / days,
    }


def periodic(binary, trace):
    out = subprocess.run([binary, "replay", "--trace", trace, "--policy", "periodic:60m", "--json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["freshness_15m"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--per-app-per-day", type=float, help="the refresh budget (RefreshPlanner: 2.2)")
    parser.add_argument("--max-wakes-per-day", type=int, help="at most this many refreshes in any 24 hours")
    parser.add_argument("--bgpolicy", help="a bgpolicy binary, for periodic:60m's figure")
    args = parser.parse_args()
    ratios = []
    for trace in args.traces:
        events = read(trace)
        events.sort(key=lambda e: e[0])
        if not events:
            sys.exit(f"after-use-ceiling: {trace} has no events")
        figures = score(events, replay(events, args.per_app_per_day, args.max_wakes_per_day))
        line = (f"{trace}: freshness_15m {figures['freshness_15m']:.3f}, "
                f"{figures['refreshes_per_day']:.1f} refreshes and {figures['wakeups_per_day']:.1f} wake-ups "
                f"a day, {figures['opens_per_day']:.1f} opens a day")
        if args.bgpolicy:
            base = periodic(args.bgpolicy, trace)
            ratio = figures["freshness_15m"] / base if base else float("inf")
            ratios.append(ratio)
            line += f"; periodic:60m {base:.3f}, {ratio:.2f}x"
        print(line)
    if ratios:
        print(f"{len(ratios)} traces: {min(ratios):.2f}x to {max(ratios):.2f}x periodic:60m")


if __name__ == "__main__":
    main()
