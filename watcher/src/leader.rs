//! Leader election on a `coordination.k8s.io/v1` Lease, the client-go way.
//!
//! - Every `renew` interval the candidate reads the Lease. Free (absent, no holder) or
//!   expired → take it with an update that carries the read `resourceVersion` (409: another
//!   candidate won the race). Expiry is judged on *our* clock: the record must not have
//!   changed for `leaseDurationSeconds` since we first saw it, so clock skew between
//!   nodes does not matter.
//! - The holder renews (`renewTime`) with the same optimistic concurrency. If it cannot
//!   renew for `renew_deadline` (2/3 of the lease duration) it steps down before anyone
//!   else may take over, so two leaders never write at the same time.
//! - On shutdown the leader releases the Lease (empty holder, duration 1 s) so a peer
//!   takes over at once.
//!
//! Why not kube-lease-manager or kubert's `lease`: kube-lease-manager writes the Lease with
//! server-side apply (a `patch` verb the RBAC does not grant, and a change of
//! `docs/api-calls.md`) and judges expiry from the holder's timestamps with a tolerated skew,
//! where this judges it on our clock alone; kubert's needs the Lease to exist (404
//! otherwise), so something else would have to create it. Neither has the two ways to stop
//! this one has (release on shutdown, release nothing on abandon) that the HA tests pin.

use crate::failing::FailureLog;
use crate::kube::{api_code, describe, timed_for, FIELD_MANAGER, WRITE_TIMEOUT};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub const LEASE_NAME: &str = "k8slb-watcher";

#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub identity: String,
    pub duration: Duration,
    pub renew: Duration,
}

/// A pod-unique identity: `<POD_NAME or hostname>-<random>`.
pub fn default_identity(pod_name: Option<&str>) -> String {
    use std::hash::{BuildHasher, Hasher};
    let base = pod_name
        .map(str::to_string)
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "k8slb-watcher".into());
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.write_u32(std::process::id());
    format!("{base}-{:08x}", h.finish() as u32)
}

/// Run the election until `shutdown` (then release the Lease if we hold it) or `abandon`
/// (stop at once, release nothing: the process is going away uncleanly, as on a crash);
/// `tx` carries whether we lead, `flag` mirrors it for synchronous checks right before
/// each write.
pub async fn run(
    client: Client,
    cfg: LeaseConfig,
    tx: watch::Sender<bool>,
    flag: Arc<AtomicBool>,
    shutdown: CancellationToken,
    abandon: CancellationToken,
) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let renew_deadline = cfg.duration.mul_f64(2.0 / 3.0);
    // What we last saw of someone else's lease, and when it last changed (our clock).
    let mut observed: Option<(String, Instant)> = None;
    let mut last_renew: Option<Instant> = None;
    let mut failures = FailureLog::new("the Lease request");
    let set = |v: bool| {
        flag.store(v, Ordering::SeqCst);
        tx.send_if_modified(|old| {
            let changed = *old != v;
            *old = v;
            changed
        });
    };
    loop {
        let leading = flag.load(Ordering::SeqCst);
        let result = tokio::select! {
            _ = abandon.cancelled() => {
                flag.store(false, Ordering::SeqCst);
                return;
            }
            r = step(&api, &cfg, &mut observed) => r,
        };
        if result.is_ok() {
            failures.succeeded();
        }
        match result {
            Ok(true) => {
                if !leading {
                    tracing::info!(identity = %cfg.identity, "became the leader");
                }
                last_renew = Some(Instant::now());
                set(true);
            }
            Ok(false) => {
                if leading {
                    tracing::warn!(identity = %cfg.identity, "lost the lease");
                }
                last_renew = None;
                set(false);
            }
            Err(e) => {
                if leading && last_renew.is_none_or(|t| t.elapsed() >= renew_deadline) {
                    tracing::error!(identity = %cfg.identity, error = %describe(&e), "cannot renew the lease in time; stepping down");
                    last_renew = None;
                    set(false);
                } else {
                    failures.failed(1, &describe(&e));
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = abandon.cancelled() => {
                flag.store(false, Ordering::SeqCst);
                return;
            }
            _ = tokio::time::sleep(cfg.renew) => {}
        }
    }
    if flag.load(Ordering::SeqCst) {
        set(false);
        match release(&api, &cfg).await {
            Ok(()) => tracing::info!(identity = %cfg.identity, "released the lease"),
            Err(e) => {
                tracing::warn!(identity = %cfg.identity, error = %e, "cannot release the lease; a peer takes over when it expires")
            }
        }
    }
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

fn secs(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

/// One round: Ok(true) if we hold the lease afterwards.
async fn step(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    observed: &mut Option<(String, Instant)>,
) -> Result<bool, kube::Error> {
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let current = timed(api.get_opt(LEASE_NAME)).await?;
    let Some(mut lease) = current else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(LEASE_NAME.into()),
                namespace: Some(cfg.namespace.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(cfg.identity.clone()),
                lease_duration_seconds: Some(secs(cfg.duration)),
                acquire_time: Some(now()),
                renew_time: Some(now()),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match timed(api.create(&pp, &lease)).await {
            Ok(_) => Ok(true),
            Err(e) if api_code(&e) == Some(409) => Ok(false),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let rv = lease.metadata.resource_version.clone().unwrap_or_default();
    let mine = holder == cfg.identity;
    if !mine && !holder.is_empty() {
        // Someone else's: expired only if unchanged for its duration on our clock.
        let duration = Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(15).max(1)).unwrap_or(15),
        );
        let record = format!(
            "{holder}|{:?}|{:?}",
            spec.renew_time.as_ref().map(|t| t.0),
            spec.lease_duration_seconds
        );
        let since = match observed {
            Some((r, t)) if *r == record => *t,
            _ => {
                *observed = Some((record, Instant::now()));
                return Ok(false);
            }
        };
        if since.elapsed() < duration {
            return Ok(false);
        }
        tracing::info!(previous = %holder, "the lease expired; taking over");
    }
    let mut new = spec.clone();
    new.holder_identity = Some(cfg.identity.clone());
    new.lease_duration_seconds = Some(secs(cfg.duration));
    new.renew_time = Some(now());
    if !mine {
        new.acquire_time = Some(now());
        new.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    lease.spec = Some(new);
    lease.metadata.resource_version = Some(rv);
    lease.metadata.managed_fields = None;
    match timed(api.replace(LEASE_NAME, &pp, &lease)).await {
        Ok(_) => {
            *observed = None;
            Ok(true)
        }
        Err(e) if api_code(&e) == Some(409) => Ok(false),
        Err(e) => Err(e),
    }
}

async fn release(api: &Api<Lease>, cfg: &LeaseConfig) -> Result<(), kube::Error> {
    let Some(mut lease) = timed(api.get_opt(LEASE_NAME)).await? else {
        return Ok(());
    };
    let mut spec = lease.spec.clone().unwrap_or_default();
    if spec.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now());
    lease.spec = Some(spec);
    lease.metadata.managed_fields = None;
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    timed(api.replace(LEASE_NAME, &pp, &lease))
        .await
        .map(|_| ())
}

/// A Lease request has at most 5 s: well within the renew deadline.
async fn timed<T>(
    f: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    timed_for(
        WRITE_TIMEOUT.min(Duration::from_secs(5)),
        || "the lease request".into(),
        f,
    )
    .await
}
