# syntax=docker/dockerfile:1
#
# One image for both binaries: k8slb-watcher (Deployment) and k8slb-actor (DaemonSet, with
# keepalived, HAProxy and nginx as its children). The manifests in manifests/ run it with
# `command: ["k8slb-watcher"]` or `command: ["k8slb-actor"]`.
#
#   docker build -t k8slb/k8slb:v0.1.0 .
#
# NOT BUILT HERE: the development machine has no container engine, so this file has never
# been built or run. What it relies on was checked on Debian bookworm directly (the
# package names and versions below are those the lab and root tests run against:
# keepalived 2.2.7, HAProxy 2.6, nginx 1.22 with libnginx-mod-stream); the image itself
# is untested.

# ---- build ----------------------------------------------------------------------------
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# The registry and target caches make a rebuild after a source change incremental.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p k8slb-watcher -p k8slb-actor \
 && install -D -m 0755 target/release/k8slb-watcher /out/k8slb-watcher \
 && install -D -m 0755 target/release/k8slb-actor /out/k8slb-actor

# ---- runtime --------------------------------------------------------------------------
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        keepalived haproxy nginx libnginx-mod-stream iproute2 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 # The packaged configs are never used (the actor renders its own, under /var/lib/k8slb).
 && rm -f /etc/nginx/sites-enabled/default \
 && mkdir -p /etc/certs /var/lib/k8slb
COPY --from=build /out/k8slb-watcher /out/k8slb-actor /usr/local/bin/
# The templates are embedded in k8slb-actor; --templates <dir> overrides them.
COPY templates /usr/share/k8slb/templates
# The watcher runs as 65532 (set in its Deployment); the actor as root with a few
# capabilities (see manifests/src/actor.yml).
EXPOSE 9253 9254
CMD ["k8slb-actor", "--help"]
