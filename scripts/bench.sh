#!/usr/bin/env bash
# k8slb's benchmark, as root: builds in release mode and runs lab-bench in a throw-away lab.
# Progress goes to stderr; the LAST line on stdout is one JSON object with the results.
#
#   K8SLB_BENCH_TRIALS=10          link-cut trials (default 10; proxy-crash trials: half)
#   K8SLB_BENCH_DEFAULT_TRIALS=3   trials with keepalived's default advert_int (1 s)
#   K8SLB_BENCH_WRK_SECONDS=5      length of each wrk run (2 rounds of 5 runs)
set -euo pipefail
cd "$(dirname "$0")/.."
# Where install-deps.sh puts Rust on a fresh machine.
export PATH="$PATH:$HOME/.cargo/bin"
if [ "$(id -u)" -ne 0 ]; then
    echo "bench.sh: run as root (the lab creates network namespaces): sudo $0" >&2
    exit 1
fi
./scripts/install-deps.sh >&2
cargo build --release --workspace --bins --quiet >&2
exec ./target/release/lab-bench
