#!/usr/bin/env bash
# The k8slb demo, as root: installs what is missing, builds, starts a lab (network
# namespaces on this machine: 2 LB nodes, 2 backends, a client; nothing leaves them),
# applies the seed README's myapp-loadbalancer Service, shows its EXTERNAL-IP and which
# backend answers, cuts the master's link and prints how long the VIP was dark, cleans up.
#
#   K8SLB_DEMO_PROXY=nginx ./scripts/demo.sh     the same with nginx
set -euo pipefail
cd "$(dirname "$0")/.."
# Where install-deps.sh puts Rust on a fresh machine.
export PATH="$PATH:$HOME/.cargo/bin"

if [ "$(id -u)" -ne 0 ]; then
    echo "demo.sh: run as root (the demo creates network namespaces and runs keepalived): sudo $0" >&2
    exit 1
fi
./scripts/install-deps.sh
echo "==> cargo build --release (first time: a few minutes)"
cargo build --release --workspace --bins --quiet
exec ./target/release/lab-demo
