#!/usr/bin/env bash
# `make bench`: release builds, on private buses; prints six tables.
#   1. The D-Bus layer and the agent: GetStatus against the bus daemon's GetId, 64 in
#      flight, RSS over 100,000 calls, idle wake-ups (Tests/Tools/Bench).
#   2. Tasks: Submit against GetId with no other request pending and with 1,000 apps ×
#      11 pending, the agent's RSS for them, and its restart on that state against an
#      empty-state start (Tests/Tools/Bench/TasksBench.swift).
#   3. Device conditions: a uevent to the agent's Conditions PropertiesChanged against the
#      same uevent to upowerd's own, idle cost and memory beside upowerd's
#      (Tests/bench/conditions_bench.py, the real upowerd on a umockdev testbed).
#   4. The usage log: ingest through TaskStore against a bare table, and the per-app
#      summary query with 10,000,000 events against a count(*) of the app's rows
#      (Tests/Tools/Bench/UsageBench.swift; the log is kept in .build-release between runs).
#   5. Planning: WindowPlanner's decision for one window with 1,000 apps × 11 requests
#      against RunWhenEligiblePolicy's on the same facts (Tests/Tools/Bench/PlanningBench.swift).
#   6. Replay: `bgpolicy replay` of the StudentLife users 00–02 under bgpolicy, periodic
#      and oracle policies, and bgpolicy's ratios to periodic:60m and oracle:10m
#      (scripts/replay-table.py).
# Arguments go to bgpolicy-bench (--quick for a smoke test, --json, --help); with --quick
# the conditions bench runs short too, and the replay table covers user 00 only.
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The bench starts the bgpolicyd that sits next to it, so build both.
swift_build_release --product bgpolicyd
swift_build_release --product bgpolicy-bench
swift_build_release --product bgpolicy
private_bus "$(release_bin)/bgpolicy-bench" --usage-file "$RELEASE_SCRATCH/bench-usage.sqlite" "$@"

conditions_args=()
replay_args=()
for arg in "$@"; do
    if [[ $arg == --quick ]]; then
        conditions_args=(--rounds 5 --idle-seconds 5 --udev-reads 3)
        replay_args=(--quick)
    fi
done
echo
umockdev-wrapper /usr/bin/python3 "$ROOT/Tests/bench/conditions_bench.py" "$(release_bin)" "${conditions_args[@]}"
echo
/usr/bin/python3 "$ROOT/scripts/replay-table.py" "$(release_bin)" "${replay_args[@]}"
