"""make bench, device conditions: the real upowerd on a umockdev testbed, the agent beside it.

- Latency: a charger uevent to the agent's Conditions PropertiesChanged, against the same
  uevent to upowerd's own PropertiesChanged (the floor), both timed on arrival at a GDBus
  client on each bus.
- Idle cost: context switches of the agent and of upowerd over the same quiet window.
- Memory: the agent's RSS beside upowerd's.
- Without UPower, on battery: upowerd is stopped, and udev's timed re-read of the battery
  (every `--udev-read-seconds`, set in the agent's configuration) is the agent's one timer;
  its context switches per read of a battery that does not change, by thread.

Run under umockdev-wrapper (scripts/bench.sh does): usage `conditions_bench.py BIN_DIR`.
Figures are printed, never asserted.
"""
import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import conditions_helpers as h  # noqa: E402


def ctx_switches(pid):
    """Context switches per thread id: {tid: count}."""
    counts = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            lines = (task / "status").read_text().splitlines()
        except FileNotFoundError:  # the thread just exited
            continue
        counts[task.name] = sum(int(line.split()[1]) for line in lines
                                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")))
    return counts


def switches_between(before, after):
    """Switches in the window: growth of threads alive at both ends, all of a thread born in
    it, and one for each thread that ended in it (it woke at least to exit)."""
    total = sum(count - before.get(tid, 0) for tid, count in after.items())
    return total + len(set(before) - set(after))


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--idle-seconds", type=float, default=60)
    parser.add_argument("--udev-read-seconds", type=int, default=2)
    parser.add_argument("--udev-reads", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not h.umockdev_available():
        sys.exit("conditions_bench.py: run under umockdev-wrapper (scripts/bench.sh does)")

    stack = h.Stack()
    tmp = Path(tempfile.mkdtemp(prefix="bgpolicy-bench-"))
    try:
        tb, ac, bat = h.battery_testbed()
        system_daemon = stack.push(h.DBusDaemon())
        session_daemon = stack.push(h.DBusDaemon())
        system = stack.push(h.GBus(system_daemon.address))
        session = stack.push(h.GBus(session_daemon.address))
        env = h.system_env(system_daemon.address, tb, tmp)
        config = tmp / "config" / "bgpolicy" / "bgpolicy.conf"
        config.parent.mkdir(parents=True)
        config.write_text(f"[battery]\nudev_read_interval = {args.udev_read_seconds}s\n")
        h.start_logind(stack, system, env)
        upowerd = h.start_upowerd(stack, system, env)
        agent = h.Agent(stack, args.bin_dir, session, h.agent_env(session_daemon.address, system_daemon.address, tb, tmp),
                        log_level="warning")
        agent.wait_conditions(lambda c: "upower" in c["sources"] and c.get("on_battery") is True, timeout=10)
        upower_changes = system.record("type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'")

        floor, ours = [], []
        plugged = False
        for _ in range(args.rounds):
            plugged = not plugged
            expected = not plugged
            t0 = h.set_charger(tb, ac, bat, plugged)
            up = upower_changes.wait(lambda e: e["path"] == "/org/freedesktop/UPower"
                                     and e["args"][1].get("OnBattery") is expected, 2.0, since=t0)
            mine = agent.wait_changed(lambda c: c.get("on_battery") is expected, since=t0, timeout=2.0)
            if up and mine:
                floor.append((up["time"] - t0) * 1000)
                ours.append((mine["time"] - t0) * 1000)
            time.sleep(0.2)

        # Quiet window: nothing changes; count wake-ups of both daemons.
        time.sleep(1.0)
        a0, u0 = ctx_switches(agent.proc.pid), ctx_switches(upowerd.pid)
        time.sleep(args.idle_seconds)
        a1, u1 = ctx_switches(agent.proc.pid), ctx_switches(upowerd.pid)
        agent_rss, upower_rss = rss_kib(agent.proc.pid), rss_kib(upowerd.pid)

        # Without UPower, on battery: udev alone, its timer on. Unplugged first, if the rounds
        # left the charger in.
        if plugged:
            h.set_charger(tb, ac, bat, False)
        upowerd.kill()  # SIGKILL, and waits for it
        agent.wait_conditions(lambda c: "upower" not in c["sources"] and c.get("on_battery") is True, timeout=10)
        time.sleep(args.udev_read_seconds + 1.0)
        names = {task.name: (task / "comm").read_text().strip() for task in Path(f"/proc/{agent.proc.pid}/task").iterdir()}
        d0 = ctx_switches(agent.proc.pid)
        time.sleep(args.udev_read_seconds * args.udev_reads)
        d1 = ctx_switches(agent.proc.pid)
        per_thread = {}
        for tid, count in d1.items():
            grew = count - d0.get(tid, 0)
            if grew:
                name = names.get(tid, "new thread")
                per_thread[name] = per_thread.get(name, 0) + grew
        udev_per_read = switches_between(d0, d1) / args.udev_reads

        def med(x):
            return statistics.median(x) if x else float("nan")

        def p90(x):
            return sorted(x)[int(len(x) * 0.9) - 1] if x else float("nan")

        figures = {
            "rounds": len(ours), "idle_seconds": args.idle_seconds,
            "latency_median_ms": med(ours), "upowerd_latency_median_ms": med(floor),
            "latency_p90_ms": p90(ours), "upowerd_latency_p90_ms": p90(floor),
            "idle_context_switches": switches_between(a0, a1), "upowerd_idle_context_switches": switches_between(u0, u1),
            "rss_kib": agent_rss, "upowerd_rss_kib": upower_rss,
            "udev_reads": args.udev_reads, "udev_read_seconds": args.udev_read_seconds,
            "udev_context_switches_per_read": udev_per_read, "udev_context_switches_by_thread": per_thread,
        }
        if args.json:
            print(json.dumps(figures, indent=2))
            return

        def ratio(a, b):
            return f"{a / b:.2f}×" if b else "—"

        print(f"Device conditions: {len(ours)} charger uevents, {args.idle_seconds:.0f} s idle window")
        print("| figure | bgpolicyd | baseline (upowerd) | ratio |")
        print("|---|---|---|---|")
        print(f"| uevent → PropertiesChanged, median (ms) | {med(ours):.2f} | {med(floor):.2f} | {ratio(med(ours), med(floor))} |")
        print(f"| uevent → PropertiesChanged, p90 (ms) | {p90(ours):.2f} | {p90(floor):.2f} | {ratio(p90(ours), p90(floor))} |")
        print(f"| context switches while idle | {switches_between(a0, a1)} | {switches_between(u0, u1)} | — |")
        print(f"| RSS (KiB) | {agent_rss} | {upower_rss} | {ratio(agent_rss, upower_rss)} |")
        threads = ", ".join(f"{name} {count}" for name, count in sorted(per_thread.items())) or "none"
        print(f"Without UPower, on battery: {args.udev_reads} timed udev reads, one every {args.udev_read_seconds} s, "
              f"of a battery that does not change: {udev_per_read:.2f} context switches a read ({threads})")
    finally:
        stack.close()


if __name__ == "__main__":
    main()
