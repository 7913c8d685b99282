#!/usr/bin/env bash
# `make bench`: release builds, on private buses; prints three tables.
#   1. The D-Bus layer and the agent: GetStatus against the bus daemon's GetId, 64 in
#      flight, RSS over 100,000 calls, idle wake-ups (Tests/Tools/Bench).
#   2. Tasks: Submit against GetId with no other request pending and with 1,000 apps ×
#      11 pending, the agent's RSS for them, and its restart on that state against an
#      empty-state start (Tests/Tools/Bench/TasksBench.swift).
#   3. Device conditions: a uevent to the agent's Conditions PropertiesChanged against the
#      same uevent to upowerd's own, idle cost and memory beside upowerd's
#      (Tests/bench/conditions_bench.py, the real upowerd on a umockdev testbed).
# Arguments go to bgpolicy-bench (--quick for a smoke test, --json, --help); with --quick
# the conditions bench runs short too.
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The bench starts the bgpolicyd that sits next to it, so build both.
swift_build_release --product bgpolicyd
swift_build_release --product bgpolicy-bench
private_bus "$(release_bin)/bgpolicy-bench" "$@"

conditions_args=()
for arg in "$@"; do
    [[ $arg == --quick ]] && conditions_args=(--rounds 5 --idle-seconds 5)
done
echo
umockdev-wrapper /usr/bin/python3 "$ROOT/Tests/bench/conditions_bench.py" "$(release_bin)" "${conditions_args[@]}"
