#!/usr/bin/env bash
# Debug build of every product, with the import check. Extra arguments go to
# `swift build` (e.g. --build-tests, --product bgpolicyd).
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
swift_build "$@"
