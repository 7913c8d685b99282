#!/usr/bin/python3
"""Write a synthetic desktop usage trace (SPEC.md §4) of work sessions or of daily routines, for
`bgpolicy replay`.

Usage: desktop-trace.py [--sparse] [--rare N] SEED [DAYS]   (the trace goes to standard output;
       desktop-trace.py --routines [--jitter MIN] [--strays P] SEED [DAYS]   DAYS defaults to 35)

No finer-grained desktop trace is available here, so this one stands in to show how the policy
behaves with exact-time opens that come in sessions, not on StudentLife's 20-min snapshots.
The model, the same for every seed:
  - 12 apps, each with a popularity weight (a mail client and a browser most, photos least).
  - Weekdays: a session at about 08:36 (σ 9 min) and one at about 13:18 (σ 18 min); every day
    1–4 more at uniformly random times between 09:00 and 23:00.
  - A session lasts 20–120 min and uses 2–4 apps drawn by popularity. Within it the user keeps
    switching: an app chosen at random among the session's is opened, used for an exponential
    time (mean 2 min) and closed; the next open follows after an exponential gap (mean 4 min).
  - An open of an app that is already open is dropped (an app is open or not), so opens and
    closes alternate per app.
With --sparse, the same sessions hold few opens instead: 1–3 apps drawn by popularity, each
opened once, kept open 10–60 min, the next opened 1–5 min after the previous one. Apps are
rarely reopened soon after they are closed, so what serves there is not what serves above.
With --rare N, N more apps are installed and seldom used, as on most desktops: each is opened
1–4 times over the whole trace, at a uniformly random time between 09:00 and 23:00 on a random
day, and used 1–30 min. The budget of a policy held to a share of `periodic`'s refreshes grows
with them (`periodic` refreshes every app of the trace), so wake-ups, not refreshes, are what
binds. The sessions are the same as without them.
With --routines, a different model, of habits rather than sessions: 6–12 of the apps (how many
is drawn per seed), each with 1–4 routines. A routine is a time of day drawn uniformly between
07:00 and 23:00, kept on any one day with a probability drawn between 0.5 and 0.95, on
weekdays only for about half of the routines; a kept routine opens the app at its time plus a
normal jitter (σ MIN minutes, 5 by default), for 2–30 min. Besides, each app is opened once on
a day with probability P (0.1 by default) at a uniformly random time between 08:00 and 23:00:
use no habit foretells. --sparse and --rare do not apply to it.
The generator is seeded and deterministic: the same arguments give the same trace.
"""

import random
import sys

APPS = [("org.gnome.Evolution", 10), ("org.gnome.Calendar", 4), ("im.chat.App", 8), ("org.mozilla.firefox", 9),
        ("com.news.Reader", 3), ("org.gnome.Photos", 1), ("com.music.Player", 2), ("org.notes.App", 3),
        ("org.todo.List", 2), ("com.podcast.App", 1), ("org.gnome.Maps", 1), ("org.gnome.Weather", 2)]
# A Monday, 00:00 UTC.
START = 1_700_438_400


def generate(seed, days, sparse=False, rare=0):
    r = random.Random(seed)
    names = [name for name, _ in APPS]
    weights = [weight for _, weight in APPS]
    events = []
    for d in range(days):
        day = START + d * 86_400
        starts = [8.6 + r.gauss(0, 0.15), 13.3 + r.gauss(0, 0.3)] if d % 7 < 5 else []
        starts += [r.uniform(9, 23) for _ in range(r.randint(1, 4))]
        for hour in starts:
            t = day + hour * 3600
            if sparse:
                for app in r.choices(names, weights, k=r.randint(1, 3)):
                    events.append((int(t), app, "open"))
                    events.append((int(t + r.uniform(10, 60) * 60), app, "close"))
                    t += r.uniform(1, 5) * 60
                continue
            end = t + r.uniform(20, 120) * 60
            used = r.choices(names, weights, k=r.randint(2, 4))
            while t < end:
                app = r.choice(used)
                used_for = r.expovariate(1 / 120)
                events.append((int(t), app, "open"))
                events.append((int(t + used_for), app, "close"))
                t += used_for + r.expovariate(1 / 240)
    # Drawn apart, so that the sessions are the same with or without them.
    seldom = random.Random(f"{seed} rare")
    for i in range(rare):
        for _ in range(seldom.randint(1, 4)):
            t = START + seldom.randrange(days) * 86_400 + seldom.uniform(9, 23) * 3600
            events.append((int(t), f"org.seldom.App{i + 1}", "open"))
            events.append((int(t + seldom.uniform(1, 30) * 60), f"org.seldom.App{i + 1}", "close"))
    return one_open_at_a_time(events)


def routines(seed, days, jitter=5.0, strays=0.1):
    """The --routines model (see the docstring): habits at the same minutes each day."""
    r = random.Random(f"{seed} routines")
    names = [name for name, _ in APPS][: r.randint(6, 12)]
    habits = {name: [(r.uniform(7, 23), r.uniform(0.5, 0.95), r.random() < 0.5)
                     for _ in range(r.randint(1, 4))] for name in names}
    events = []
    for d in range(days):
        day = START + d * 86_400
        for name in names:
            for hour, kept, weekdays_only in habits[name]:
                if (weekdays_only and d % 7 >= 5) or r.random() >= kept:
                    continue
                t = day + hour * 3600 + r.gauss(0, jitter * 60)
                events += [(int(t), name, "open"), (int(t + r.uniform(2, 30) * 60), name, "close")]
            if r.random() < strays:
                t = day + r.uniform(8, 23) * 3600
                events += [(int(t), name, "open"), (int(t + r.uniform(2, 30) * 60), name, "close")]
    return one_open_at_a_time(events)


def one_open_at_a_time(events):
    """Closes before opens at the same second; then one open per app at a time (an open of an
    app already open is dropped, with its close)."""
    events.sort(key=lambda e: (e[0], e[2] == "open", e[1]))
    out, depth = [], {}
    for t, app, kind in events:
        if kind == "open":
            depth[app] = depth.get(app, 0) + 1
            if depth[app] == 1:
                out.append((t, app, kind))
        else:
            depth[app] -= 1
            if depth[app] == 0:
                out.append((t, app, kind))
    return out


def number(text):
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value >= 0 and value == value and value != float("inf") else None


def main(argv):
    args = argv[1:]
    sparse, rare, habitual, jitter, strays = False, 0, False, 5.0, 0.1
    while args[:1] in (["--sparse"], ["--rare"], ["--routines"], ["--jitter"], ["--strays"]):
        if args[0] in ("--sparse", "--routines"):
            sparse, habitual = sparse or args[0] == "--sparse", habitual or args[0] == "--routines"
            args = args[1:]
        elif args[0] == "--rare" and len(args) > 1 and args[1].isdigit():
            rare, args = int(args[1]), args[2:]
        elif args[0] == "--jitter" and len(args) > 1 and number(args[1]) is not None:
            jitter, args = number(args[1]), args[2:]
        elif args[0] == "--strays" and len(args) > 1 and number(args[1]) is not None and number(args[1]) <= 1:
            strays, args = number(args[1]), args[2:]
        else:
            break
    mixed = habitual and (sparse or rare)
    if mixed or len(args) not in (1, 2) or not all(a.isdigit() for a in args):
        sys.stderr.write(__doc__)
        return 2
    days = int(args[1]) if len(args) == 2 else 35
    trace = routines(int(args[0]), days, jitter, strays) if habitual else generate(int(args[0]), days, sparse, rare)
    print("timestamp,app_id,event")
    for t, app, kind in trace:
        print(f"{t},{app},{kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
