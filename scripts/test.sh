#!/usr/bin/env bash
# Runs every k8slb check and test: formatting, clippy, unit and integration tests, and the
# lab's end-to-end tests (network namespaces with real keepalived, HAProxy and nginx, and
# the k8slb image under podman; they need root and fail, not skip, without it). Prints one
# summary line; exits non-zero if anything failed.
#
#   ./scripts/test.sh            everything
#   K8SLB_SKIP_DEPS=1 ./scripts/test.sh    do not check/install system packages
#   ./scripts/test.sh e2e_failover         only lab tests whose file matches (plus checks)
#
# The unit step runs the watcher's API-outage test (watcher/tests/kube_ha.rs,
# api_server_gone_and_back_nothing_is_reallocated) with its full 60 s outage:
# K8SLB_TEST_OUTAGE_S=60 is exported below (plain `cargo test` uses 10 s).
set -uo pipefail
cd "$(dirname "$0")/.."
# Where install-deps.sh puts Rust on a fresh machine.
export PATH="$PATH:$HOME/.cargo/bin"

start=$(date +%s)
failed=()
passed=()

step() {
    local name="$1"; shift
    echo
    echo "==> [$name] $*"
    local t0=$(date +%s)
    if "$@"; then
        passed+=("$name")
        echo "==> [$name] ok ($(( $(date +%s) - t0 )) s)"
    else
        failed+=("$name")
        echo "==> [$name] FAILED ($(( $(date +%s) - t0 )) s)"
    fi
}

if [ -z "${K8SLB_SKIP_DEPS:-}" ]; then
    if ! ./scripts/install-deps.sh; then
        echo "test.sh: FAIL: dependencies could not be installed"
        exit 1
    fi
fi

step fmt cargo fmt --all -- --check
step clippy cargo clippy --workspace --all-targets -- -D warnings
step build cargo build --workspace --bins
# The API server stays away for 60 s in the watcher's outage test.
export K8SLB_TEST_OUTAGE_S=60
step unit cargo test --workspace --exclude k8slb-tests --no-fail-fast
# The image (scripts/image.sh: release binaries, podman, offline) for e2e_image, which
# runs it under the manifests' security contexts; built here once so the lab step does
# not build it again. A failure here fails the run (and e2e_image, which then tries
# itself and says why).
if [ "$#" -eq 0 ] || printf '%s\n' "$@" | grep -q '^e2e_image$'; then
    step image ./scripts/image.sh
    case " ${passed[*]} " in *" image "*) export K8SLB_IMAGE_BUILT=1 ;; esac
fi
# The lab tests build whole topologies: one at a time, bounded in time.
if [ "$#" -gt 0 ]; then
    lab_args=()
    for t in "$@"; do lab_args+=(--test "$t"); done
else
    lab_args=(--tests)
fi
step lab timeout --signal=TERM --kill-after=30s 45m \
    cargo test -p k8slb-tests --no-fail-fast "${lab_args[@]}" -- --test-threads=1

elapsed=$(( $(date +%s) - start ))
echo
if [ "${#failed[@]}" -eq 0 ]; then
    echo "test.sh: PASS (${passed[*]}) in ${elapsed} s"
    exit 0
fi
echo "test.sh: FAIL (failed: ${failed[*]}; passed: ${passed[*]:-none}) in ${elapsed} s"
exit 1
