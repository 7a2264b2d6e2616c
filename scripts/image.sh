#!/usr/bin/env bash
# Builds k8slb's image (localhost/k8slb/k8slb:latest) with podman, offline:
#
# - podman reads the project's own configuration (scripts/podman/: runc runtime, rlimits a
#   container can get here, no registry searched) and keeps its images under
#   $K8SLB_IMAGE_DIR (default /var/tmp/k8slb-images), apart from the machine's;
# - the base image is a Debian bookworm root made with mmdebstrap and imported as
#   localhost/debian:bookworm, once (kept in that storage; rebuilt only when missing);
# - the binaries come from `cargo build --release` on this machine, as the build context
#   `binaries`, which replaces the Dockerfile's stage of that name (no rust:1-bookworm
#   pull);
# - apt inside the build reaches the Debian archive (host network for the build only).
#
#   ./scripts/image.sh                   build (cargo build --release, then the image)
#   ./scripts/image.sh --env             print the environment the image tests use
#   K8SLB_IMAGE_SKIP_CARGO=1 ./scripts/image.sh    use target/release as it is
#   K8SLB_IMAGE=<name> ./scripts/image.sh          another tag
#
# Prints the image's size last. Needs root and podman, buildah, runc, mmdebstrap
# (./scripts/install-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
export PATH="$PATH:$HOME/.cargo/bin"

image_dir="${K8SLB_IMAGE_DIR:-/var/tmp/k8slb-images}"
image="${K8SLB_IMAGE:-localhost/k8slb/k8slb:latest}"
base="localhost/debian:bookworm"

mkdir -p "$image_dir"
storage_conf="$root/scripts/podman/storage.conf"
if [ "$image_dir" != "/var/tmp/k8slb-images" ]; then
    storage_conf="$image_dir/storage.conf"
    cat >"$storage_conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$image_dir/storage"
runroot = "$image_dir/run"
EOF
fi
export CONTAINERS_CONF="$root/scripts/podman/containers.conf"
export CONTAINERS_STORAGE_CONF="$storage_conf"
export CONTAINERS_REGISTRIES_CONF="$root/scripts/podman/registries.conf"

if [ "${1:-}" = "--env" ]; then
    echo "CONTAINERS_CONF=$CONTAINERS_CONF"
    echo "CONTAINERS_STORAGE_CONF=$CONTAINERS_STORAGE_CONF"
    echo "CONTAINERS_REGISTRIES_CONF=$CONTAINERS_REGISTRIES_CONF"
    echo "K8SLB_IMAGE=$image"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "image.sh: must run as root (rootful podman)" >&2
    exit 1
fi
for tool in podman runc mmdebstrap; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "image.sh: $tool is missing; run ./scripts/install-deps.sh" >&2
        exit 1
    fi
done

t0=$(date +%s)
# ---- base: a Debian root from the archive, imported once --------------------------------
if podman image exists "$base"; then
    echo "image.sh: base $base present (cached in $image_dir)"
else
    echo "image.sh: making $base with mmdebstrap (once)"
    tar="$image_dir/debian-bookworm.tar"
    rm -f "$tar"
    mmdebstrap --quiet --variant=minbase \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --aptopt='Acquire::Languages "none"' \
        bookworm "$tar"
    podman import --quiet --change 'CMD ["/bin/bash"]' "$tar" "$base" >/dev/null
    rm -f "$tar"
fi

# ---- binaries ---------------------------------------------------------------------------
target="${CARGO_TARGET_DIR:-$root/target}"
if [ -z "${K8SLB_IMAGE_SKIP_CARGO:-}" ]; then
    echo "image.sh: cargo build --release"
    cargo build --release --locked -p k8slb-watcher -p k8slb-actor
fi
bins="$image_dir/binaries"
rm -rf "$bins"
mkdir -p "$bins/out"
for b in k8slb-watcher k8slb-actor; do
    if [ ! -x "$target/release/$b" ]; then
        echo "image.sh: $target/release/$b is missing (cargo build --release)" >&2
        exit 1
    fi
    install -m 0755 "$target/release/$b" "$bins/out/$b"
    # The release profile keeps line tables (debug = 1) for backtraces on this machine;
    # the image does not need them (symbols stay).
    if command -v strip >/dev/null 2>&1; then
        strip --strip-debug "$bins/out/$b"
    fi
done

# ---- image ------------------------------------------------------------------------------
old_id="$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
echo "image.sh: podman build $image"
podman build --quiet --pull=never --network=host \
    --build-arg BASE="$base" \
    --build-context binaries="$bins" \
    --layers=true \
    -t "$image" . >/dev/null
new_id="$(podman image inspect --format '{{.Id}}' "$image")"
# The previous build of this tag, now untagged: gone (the layer cache of the apt step
# stays, so the next build only redoes the COPY layers).
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
    podman rmi "$old_id" >/dev/null 2>&1 || true
fi
# Dangling images only (the layer cache of the tagged image is its ancestors: kept).
podman image prune --force >/dev/null 2>&1 || true
rm -rf "$bins"

size="$(podman image inspect --format '{{.Size}}' "$image")"
echo "image.sh: built $image (${new_id:0:12}) in $(( $(date +%s) - t0 )) s, size $(( size / 1000000 )) MB ($size bytes)"
