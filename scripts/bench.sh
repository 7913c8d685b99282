#!/usr/bin/env bash
# `make bench`: the D-Bus layer's benchmark, release build, on a private session bus.
# Arguments go to bgpolicy-bench (--quick for a smoke test, --json, --help).
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The bench starts the bgpolicyd that sits next to it, so build both.
swift_build_release --product bgpolicyd
swift_build_release --product bgpolicy-bench
private_bus "$(release_bin)/bgpolicy-bench" "$@"
