#!/usr/bin/env bash
# Runs every k8slb check and test: formatting, clippy, unit and integration tests, and the
# lab's end-to-end tests (network namespaces with real keepalived, HAProxy and nginx, and
# the k8slb image under podman). Needs root: it fails at once, saying so, without it.
# Prints one summary line; exits non-zero if anything failed.
#
# Root-only tests are `#[ignore = "needs root: ..."]`: plain `cargo test --workspace`, as
# any user, runs the rest and lists them as ignored with the reason; this script runs
# them too (`-- --include-ignored`). A test ignored for any other reason (a known
# failure) stays out, and the summary lists it with its reason.
#
# Nothing may be left running: keepalived, haproxy, nginx and k8slb processes (the
# binaries, the lab's helpers, the tests' keepalived stand-in) that were not running
# before the run and still run after it FAIL the run (step `leftovers`, which lists them,
# then ends them).
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
# A one-shot build (CI, a fresh clone) gains nothing from incremental compilation and
# its caches take gigabytes: a CI run once failed on a full disk (ENOSPC in rustc).
if [ -n "${CI:-}" ]; then
    export CARGO_INCREMENTAL=0
fi
echo "test.sh: free disk space where it builds: $(df -h --output=avail . | tail -1 | tr -d ' ')"
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

if [ "$(id -u)" -ne 0 ]; then
    echo "test.sh: FAIL: needs root (network namespaces, VRRP, podman): sudo $0 $*" >&2
    echo "test.sh: plain \`cargo test --workspace\` runs every test that does not need root" >&2
    exit 1
fi

# The processes a test may start and must not leave behind: those matching LEFTOVER_RE
# (full command lines) that belong to this run, i.e. whose environment holds this run's
# K8SLB_TEST_RUN (inherited by everything the tests start) or whose command line names
# this checkout (the lab's run dir, the binaries in a target dir inside it). Other
# checkouts' tests running on the same machine at the same time, and the machine's own
# daemons, are not counted; neither is anything that already ran before this run began.
export K8SLB_TEST_RUN="$$-$(date +%s%N)"
LEFTOVER_RE='(^|/)(keepalived|haproxy|nginx|zebra|bgpd|bfdd|k8slb-actor|k8slb-watcher|lab-backend|lab-client|lab-bench|lab-demo)( |$)|/keepalived-stub( |$)'
ours() {
    local p
    for p in $(pgrep -f -- "$LEFTOVER_RE"); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qxF "K8SLB_TEST_RUN=$K8SLB_TEST_RUN" \
            || tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF "$PWD/"; then
            echo "$p"
        fi
    done | sort
}
before=$(ours)

# What `ours` lists now and did not before the run; waits up to 15 s for it to end (a
# daemon stopping), then lists it, ends it (SIGKILL) and fails.
leftovers() {
    local new=""
    for _ in $(seq 1 75); do
        new=$(comm -13 <(echo "$before") <(ours) | paste -sd, -)
        [ -z "$new" ] && return 0
        sleep 0.2
    done
    echo "left running after the tests (started during this run):"
    ps -o pid,ppid,lstart,args -p "$new" | sed 's/^/    /'
    for p in ${new//,/ }; do kill -9 "$p" 2>/dev/null; done
    echo "(ended with SIGKILL)"
    return 1
}

# Tests ignored for another reason than "needs root" or "needs haproxy" (the daemons this
# script installs), e.g. known failures, stay out of --include-ignored: `--skip <name>`
# for each, and they are listed in the summary.
other_ignored=$(git ls-files '*.rs' | xargs awk '
    /#\[ignore *= *"/ {
        r = $0; sub(/.*#\[ignore *= *"/, "", r); sub(/"\].*/, "", r)
        if (r !~ /^needs (root|haproxy)/) pending = r
        next
    }
    pending != "" && /fn [A-Za-z0-9_]+/ {
        n = $0; sub(/.*fn /, "", n); sub(/[^A-Za-z0-9_].*/, "", n)
        print n "\t" FILENAME ": " pending
        pending = ""
    }')
skips=()
while IFS=$'\t' read -r name why; do
    [ -n "$name" ] && skips+=(--skip "$name")
done <<<"$other_ignored"

# The Gateway API conformance runner reads the upstream suite's data files, which are not
# in this repository (K8SLB_CONFORMANCE_DIR, default ../shared/conformance beside the
# checkout). Without them it is not run, and the summary says so (the test itself fails
# when run without its data).
conformance_dir=${K8SLB_CONFORMANCE_DIR:-$(pwd)/../shared/conformance}
if [ ! -f "$conformance_dir/gateway-api/conformance/base/manifests.yaml" ]; then
    skips+=(--skip gateway_api_conformance_suite_on_haproxy_and_nginx)
    other_ignored+="${other_ignored:+$'\n'}gateway_api_conformance_suite_on_haproxy_and_nginx"$'\t'"tests/tests/e2e_conformance.rs: no conformance data at $conformance_dir (set K8SLB_CONFORMANCE_DIR)"
    skips+=(--skip ingress_conformance_features_on_haproxy_and_nginx)
    other_ignored+="${other_ignored:+$'\n'}ingress_conformance_features_on_haproxy_and_nginx"$'\t'"tests/tests/e2e_conformance.rs: no conformance data at $conformance_dir (set K8SLB_CONFORMANCE_DIR)"
fi
# The fake API server serves the Gateway API from the same data's CRD files
# (gateway-api/config/crd/): the tests that install them fail without them, and are
# skipped here with that reason.
if [ ! -f "$conformance_dir/gateway-api/config/crd/standard/gateway.networking.k8s.io_gateways.yaml" ]; then
    for t in \
        fakeapi/tests/crds.rs:the_standard_channel_serves_every_kind_and_version_its_crd_files_declare \
        fakeapi/tests/crds.rs:a_new_gateway_reads_back_pruned_and_with_its_crds_defaults \
        fakeapi/tests/crds.rs:a_status_the_real_apiserver_refuses_is_refused_with_its_422 \
        fakeapi/tests/crds.rs:a_spec_the_schema_refuses_is_refused_on_create_and_update \
        fakeapi/tests/kube_client.rs:gateway_api_kinds_behave_as_custom_resources \
        watcher/tests/kube_cleanup.rs:cleanup_removes_our_status_and_state_and_keeps_other_controllers_entries \
        watcher/tests/kube_gateway.rs:gateways_get_addresses_and_the_specifications_status_within_the_variants_rbac \
        watcher/tests/kube_gateway.rs:with_the_experimental_crds_tcp_and_udp_routes_get_their_status_within_the_rbac \
        watcher/tests/kube_gateway.rs:without_the_crds_services_are_served_and_the_watcher_restarts_once_they_exist \
        watcher/tests/kube_gateway.rs:the_watcher_restarts_when_the_l4_route_kinds_are_installed_later; do
        skips+=(--skip "${t#*:}")
        other_ignored+="${other_ignored:+$'\n'}${t#*:}"$'\t'"${t%%:*}: no Gateway API CRD files at $conformance_dir/gateway-api/config/crd (set K8SLB_CONFORMANCE_DIR)"
    done
fi

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
step unit cargo test --workspace --exclude k8slb-tests --no-fail-fast -- --include-ignored "${skips[@]}"
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
    cargo test -p k8slb-tests --no-fail-fast "${lab_args[@]}" -- --include-ignored "${skips[@]}" --test-threads=1
step leftovers leftovers

elapsed=$(( $(date +%s) - start ))
echo
if [ -n "$other_ignored" ]; then
    echo "test.sh: not run (ignored for another reason than root):"
    printf '    %s\n' "$other_ignored" | tr '\t' ' '
fi
if [ "${#failed[@]}" -eq 0 ]; then
    echo "test.sh: PASS (${passed[*]}) in ${elapsed} s"
    exit 0
fi
echo "test.sh: FAIL (failed: ${failed[*]}; passed: ${passed[*]:-none}) in ${elapsed} s"
exit 1
