#!/usr/bin/env bash
# k8slb's benchmark, as root: builds in release mode and runs lab-bench in a throw-away lab.
# Progress goes to stderr; the LAST line on stdout is one JSON object with the results.
#
#   K8SLB_BENCH_TRIALS=10          link-cut trials (default 10; proxy-crash trials: half)
#   K8SLB_BENCH_DEFAULT_TRIALS=3   trials with keepalived's default advert_int (1 s)
#   K8SLB_BENCH_WRK_SECONDS=5      length of each wrk run (2 rounds of 5 runs)
#
#   ./scripts/bench.sh soak        the chaos soak (tests/src/soak.rs) on the Kubernetes path:
#                                  3 LB nodes + 1 joining, random faults (actor, keepalived and
#                                  proxy SIGKILLed, link cut, watcher restart, API server gone
#                                  60 s, Node label removed and re-added, node added) while
#                                  Services come and go and endpoints churn, under steady traffic.
#                                  JSON: soak_faults, soak_violations (goal 0), soak_violation_list,
#                                  soak_max_recovery_ms, soak_failed_outside_faults (goal 0), ...
#     K8SLB_BENCH_SOAK_S=600       how long faults keep coming (seconds)
#     K8SLB_SOAK_SEED=<n>          replays a run's fault plan (the seed is printed)
#     K8SLB_SOAK_API_OUTAGE_S=60   K8SLB_SOAK_LBS=3   K8SLB_SOAK_RECOVERY_S=15
#   ./scripts/bench.sh bgp         only BGP mode (also in the default run): an FRR router
#                                  (multipath, BFD 50 ms x 3) in front of 3 LB nodes. JSON:
#                                  bgp_spread (new connections per node of 1000),
#                                  bgp_spread_min_pct (goal >= 20), bgp_v6_spread, bgp_v6_failed,
#                                  bgp_proxy_kill_withdrawn_ms,
#                                  bgp_proxy_kill_failed_after (goal 0),
#                                  bgp_link_cut_route_removed_ms, bgp_link_cut_failed_ms
#                                  (goal <= 300), bgp_link_cut_failed_after (goal 0),
#                                  bgp_rolling_restart_failed (goal 0),
#                                  bgp_rolling_restart_reset_in_flight (goal <= 6), bgp_vrrp_pool_failed
#   ./scripts/bench.sh ingress     only the Ingress convergence: a new Ingress host -> its first
#                                  200 through the ingress VIP (p50 of 4; the first VIP apart)
#   ./scripts/bench.sh saturation  false VRRP failovers with every core busy (nproc burners in
#                                  each LB node): advert_int 0.1 s and 0.05 s, then link-cut
#                                  failover at 0.05 s, then 0.05 s with keepalived under SCHED_RR.
#     K8SLB_BENCH_SATURATION_S=120 per setting;  K8SLB_BENCH_SATURATION_RT=0 skips the SCHED_RR pass
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
exec "${CARGO_TARGET_DIR:-./target}/release/lab-bench" "$@"
