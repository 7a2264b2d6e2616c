#!/usr/bin/env bash
# Installs what k8slb's demo, tests and benchmark need, only if missing (idempotent).
# Debian/Ubuntu (apt-get). Run as root.
set -euo pipefail

need_root() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "install-deps.sh: must run as root to install packages (missing: $*)" >&2
        exit 1
    fi
}

# command -> package
declare -A PKG=(
    [haproxy]=haproxy
    [keepalived]=keepalived
    [nginx]=nginx
    # BGP mode (issue 25): zebra, bgpd, bfdd, vtysh; frr-reload.py is in frr-pythontools.
    [vtysh]=frr
    [ip]=iproute2
    [ss]=iproute2
    [sysctl]=procps
    [wrk]=wrk
    [openssl]=openssl
    [curl]=curl
    # A listener that is not ours (actor/tests/quarantine.rs: a port held by another program).
    [python3]=python3
    [cc]=build-essential
    [make]=build-essential
    [pkg-config]=pkg-config
    # The image build and the image tests (scripts/image.sh, tests/tests/e2e_image.rs):
    # rootful podman on runc, the base image made with mmdebstrap.
    [podman]=podman
    [buildah]=buildah
    [runc]=runc
    [mmdebstrap]=mmdebstrap
)

missing=()
for cmd in "${!PKG[@]}"; do
    if ! PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1; then
        missing+=("${PKG[$cmd]}")
    fi
done
# nginx's L4 (stream) module is a separate package, not pulled in with
# --no-install-recommends; the actor loads it when a stream block is rendered.
if [ ! -e /usr/lib/nginx/modules/ngx_stream_module.so ]; then
    missing+=(libnginx-mod-stream)
fi
if [ ! -e /usr/lib/frr/frr-reload.py ]; then
    missing+=(frr-pythontools)
fi
if [ ! -e /etc/ssl/certs/ca-certificates.crt ]; then
    missing+=(ca-certificates)
fi

if [ "${#missing[@]}" -gt 0 ]; then
    # unique
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    need_root "${missing[@]}"
    echo "install-deps.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# kubectl (with its built-in kustomize v5) renders manifests/k8slb-*.yml; the manifest
# tests compare the checked-in files with its output. Debian's kubernetes-client (1.20)
# is too old (kustomize v2): this machine's kind ships kubectl 1.32. The demo does not
# need it; the tests fail (saying why) without it.
if ! command -v kubectl >/dev/null 2>&1; then
    echo "install-deps.sh: WARNING: kubectl not found: manifests/build.sh and the manifest tests (actor/tests/manifests.rs) need kubectl >= 1.27 (kustomize v5) and will fail; install it from your Kubernetes package source" >&2
fi

# The daemons are run by the lab, never as system services: stop any that the package
# installation started, so they do not hold ports or VIPs on the host.
for svc in haproxy keepalived nginx frr; do
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
        systemctl stop "$svc" || true
        systemctl disable "$svc" >/dev/null 2>&1 || true
    fi
done

# Rust: the workspace needs cargo >= 1.85 (rust-version in Cargo.toml). On a fresh machine
# without it, rustup installs the stable toolchain (with rustfmt and clippy) into ~/.cargo (K8SLB_NO_RUSTUP=1: do not).
export PATH="$PATH:$HOME/.cargo/bin"
if ! command -v cargo >/dev/null 2>&1; then
    if [ -n "${K8SLB_NO_RUSTUP:-}" ]; then
        echo "install-deps.sh: Rust is not installed; install it with rustup (https://rustup.rs), version 1.85 or newer" >&2
        exit 1
    fi
    echo "install-deps.sh: installing Rust (rustup, stable) into $HOME/.cargo"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile default --default-toolchain stable >/dev/null
fi
ver="$(cargo --version | awk '{print $2}')"
major="${ver%%.*}"; rest="${ver#*.}"; minor="${rest%%.*}"
if [ "$major" -lt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -lt 85 ]; }; then
    if [ -z "${K8SLB_NO_RUSTUP:-}" ] && command -v rustup >/dev/null 2>&1; then
        echo "install-deps.sh: cargo $ver is too old; rustup update stable"
        rustup update stable >/dev/null && rustup default stable >/dev/null
        ver="$(cargo --version | awk '{print $2}')"
    else
        echo "install-deps.sh: cargo $ver is too old; k8slb needs Rust 1.85 or newer (rustup update)" >&2
        exit 1
    fi
fi
echo "install-deps.sh: all dependencies present (cargo $ver, $(haproxy -v | head -1 | awk '{print "haproxy",$3}'), $(keepalived -v 2>&1 | head -1 | awk '{print "keepalived",$2}'))"
