# syntax=docker/dockerfile:1
#
# One image for both binaries: k8slb-watcher (Deployment) and k8slb-actor (DaemonSet, with
# keepalived, HAProxy and nginx as its children). The manifests in manifests/ run it with
# `command: ["k8slb-watcher"]` or `command: ["k8slb-actor"]`.
#
# With a registry (builds the binaries from source in rust:1-bookworm):
#
#   docker build -t k8slb/k8slb:latest .
#
# Offline, as scripts/image.sh does: the binaries from `cargo build --release` on the host
# replace the `binaries` stage (a build context named like a stage overrides it, in
# BuildKit and in buildah/podman; the rust stage is then skipped, not pulled), and the
# base image is made locally with mmdebstrap:
#
#   podman build --pull=never --build-arg BASE=localhost/debian:bookworm \
#     --build-context binaries=<dir with out/k8slb-watcher and out/k8slb-actor> \
#     -t localhost/k8slb/k8slb:latest .
#
# Package versions are Debian bookworm's, the ones the lab and root tests run against:
# keepalived 2.2.7, HAProxy 2.6, nginx 1.22 with libnginx-mod-stream.

# The runtime base (any Debian bookworm root: debian:bookworm-slim, or a local import).
ARG BASE=debian:bookworm-slim

# ---- binaries: built from source, unless a build context `binaries` replaces them -------
FROM rust:1-bookworm AS binaries
WORKDIR /src
COPY . .
# The registry and target caches make a rebuild after a source change incremental.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p k8slb-watcher -p k8slb-actor \
 && install -D -m 0755 target/release/k8slb-watcher /out/k8slb-watcher \
 && install -D -m 0755 target/release/k8slb-actor /out/k8slb-actor \
 && strip --strip-debug /out/k8slb-watcher /out/k8slb-actor

# ---- runtime ---------------------------------------------------------------------------
FROM ${BASE}
# One layer: the packages, without apt's lists and caches, and without the packaged
# configs and docs the actor never uses (it renders its own under /var/lib/k8slb).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        keepalived haproxy nginx libnginx-mod-stream ca-certificates \
        frr frr-pythontools \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log \
        /usr/share/doc /usr/share/man \
 && rm -f /etc/nginx/sites-enabled/default \
 && mkdir -p /etc/certs /var/lib/k8slb
COPY --from=binaries /out/k8slb-watcher /out/k8slb-actor /usr/local/bin/
# The templates are embedded in k8slb-actor; --templates <dir> overrides them.
COPY templates /usr/share/k8slb/templates
# The watcher runs as 65532 (its Deployment's securityContext); the actor as root with a
# few capabilities (the DaemonSet's). The actor is PID 1 in its container: it handles
# SIGTERM (releases its VIPs, stops its children) and reaps orphans.
EXPOSE 9253 9254
CMD ["k8slb-actor", "--help"]
