//! Service and Ingress status: `status.loadBalancer.ingress` = one entry per VIP,
//! `{ip, ipMode}` for a Service, `{ip}` for an Ingress (or k8slb's
//! `{hostname: "<ip>.sslip.io"}` with `--status-hostname`), written through the
//! status subresource with a JSON merge patch that carries the observed
//! `metadata.resourceVersion` as a precondition: a Service that changed since we looked
//! gives 409 and is retried on the next tick with fresh data, so we never overwrite a
//! status we did not see.
//!
//! Only differences are written: the desired ingress is compared with the observed one
//! (ip, hostname, ipMode). A Service or an Ingress that leaves our claim (an Ingress that
//! leaves our class, say) has its status cleared only if it still exists and its status
//! still shows an IP we gave it (never another controller's status).
//!
//! Which writes is decided without I/O ([`StatusMemory::decide`], called by the reconcile);
//! [`StatusWriter`] only executes them.

use crate::failing::FailureLog;
use crate::kube::{api_code, code_label, describe, timed, FIELD_MANAGER};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress as IngressObject;
use k8slb_common::names::{ObjectKey, ServiceKey};
use k8slb_common::state::{IpMode, State};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// One ingress entry, as far as we compare it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ingress {
    pub ip: Option<String>,
    pub hostname: Option<String>,
    pub ip_mode: Option<String>,
}

impl Ingress {
    pub(crate) fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        if let Some(ip) = &self.ip {
            m.insert("ip".into(), json!(ip));
        }
        if let Some(h) = &self.hostname {
            m.insert("hostname".into(), json!(h));
        }
        if let Some(mode) = &self.ip_mode {
            m.insert("ipMode".into(), json!(mode));
        }
        Value::Object(m)
    }
}

/// An object whose status we write.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    Service(ServiceKey),
    Ingress(ObjectKey),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Service(k) => write!(f, "Service {k}"),
            Target::Ingress(k) => write!(f, "Ingress {k}"),
        }
    }
}

/// An object as last seen, as far as status writes look at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub uid: Option<String>,
    pub resource_version: String,
    pub ingress: Vec<Ingress>,
}

impl Seen {
    fn new(
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        ingress: Vec<Ingress>,
    ) -> Seen {
        Seen {
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            ingress,
        }
    }

    pub fn service(svc: &Service) -> Seen {
        let entries = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref());
        let ingress = entries.into_iter().flatten().map(|i| Ingress {
            ip: i.ip.clone(),
            hostname: i.hostname.clone(),
            ip_mode: i.ip_mode.clone(),
        });
        Seen::new(&svc.metadata, ingress.collect())
    }

    /// An Ingress's status has no ipMode.
    pub fn ingress(ing: &IngressObject) -> Seen {
        let entries = ing
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref());
        let ingress = entries.into_iter().flatten().map(|i| Ingress {
            ip: i.ip.clone(),
            hostname: i.hostname.clone(),
            ip_mode: None,
        });
        Seen::new(&ing.metadata, ingress.collect())
    }
}

/// k8slb's hostname form: `<ip>.sslip.io`, IPv6 with '-' for ':'.
pub fn sslip(ip: &IpAddr) -> String {
    format!("{}.sslip.io", ip.to_string().replace(':', "-"))
}

/// The status entries for `ips`: `ip_mode` is the Service's (None for an Ingress, whose
/// status has no ipMode).
pub fn desired(ips: &[IpAddr], ip_mode: Option<IpMode>, hostname_form: bool) -> Vec<Ingress> {
    ips.iter()
        .map(|ip| {
            if hostname_form {
                Ingress {
                    ip: None,
                    hostname: Some(sslip(ip)),
                    ip_mode: None,
                }
            } else {
                Ingress {
                    ip: Some(ip.to_string()),
                    hostname: None,
                    ip_mode: ip_mode.map(|m| {
                        match m {
                            IpMode::Proxy => "Proxy",
                            IpMode::Vip => "VIP",
                        }
                        .to_string()
                    }),
                }
            }
        })
        .collect()
}

/// Whether an observed status shows one of `ips` (either form).
fn shows_any(obs: &[Ingress], ips: &[IpAddr]) -> bool {
    obs.iter().any(|i| {
        ips.iter().any(|ip| {
            i.ip.as_deref().and_then(|s| s.parse::<IpAddr>().ok()) == Some(*ip)
                || i.hostname.as_deref() == Some(sslip(ip).as_str())
        })
    })
}

/// One status write the reconcile decided: set the ingress of `key` to `ingress`, on the
/// condition that the Service is still at `resource_version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusPatch {
    pub key: Target,
    pub resource_version: String,
    pub ingress: Vec<Ingress>,
    /// The IPs the ingress shows (for the log).
    pub ips: Vec<IpAddr>,
}

/// One status clear: the Service left our claim and its status still shows `ips`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusClear {
    pub key: Target,
    pub resource_version: String,
    pub ips: Vec<IpAddr>,
}

/// What the status writes remember between rounds (pure data, decided on by
/// [`StatusMemory::decide`], updated by the writer after each write).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StatusMemory {
    /// Service -> (resourceVersion we patched from, what we wrote): while the store still
    /// shows that resourceVersion, our write is simply not visible yet; do not repeat it.
    pub memo: HashMap<Target, (String, Vec<Ingress>)>,
    /// Objects that left our claim and whose status may still show our IPs.
    pub pending_clears: BTreeMap<Target, Vec<IpAddr>>,
}

/// What `state` claims: each object with IPs, its IPs, its uid when known, and the status
/// entries it should show.
fn claims(state: &State, hostname_form: bool) -> Vec<(Target, &[IpAddr], &str, Vec<Ingress>)> {
    let services = state.services.iter().map(|(k, s)| {
        (
            Target::Service(k.clone()),
            s.ips.as_slice(),
            s.uid.as_str(),
            desired(&s.ips, Some(s.ip_mode), hostname_form),
        )
    });
    let ingresses = state.ingresses.iter().map(|(k, i)| {
        (
            Target::Ingress(k.clone()),
            i.ips.as_slice(),
            i.uid.as_str(),
            desired(&i.ips, None, hostname_form),
        )
    });
    services
        .chain(ingresses)
        .filter(|(_, ips, _, _)| !ips.is_empty())
        .collect()
}

/// The IPs of every object `state` claims.
fn claimed_ips(state: &State) -> BTreeMap<Target, &[IpAddr]> {
    let services = state
        .services
        .iter()
        .map(|(k, s)| (Target::Service(k.clone()), s.ips.as_slice()));
    let ingresses = state
        .ingresses
        .iter()
        .map(|(k, i)| (Target::Ingress(k.clone()), i.ips.as_slice()));
    services
        .chain(ingresses)
        .filter(|(_, ips)| !ips.is_empty())
        .collect()
}

impl StatusMemory {
    /// Record the IPs released between two published states.
    pub fn released(&mut self, previous: &State, next: &State) {
        let now = claimed_ips(next);
        for (key, old) in claimed_ips(previous) {
            if !now.contains_key(&key) {
                self.pending_clears.insert(key, old.to_vec());
            }
        }
        // An object that is claimed again is the normal path's business.
        self.pending_clears.retain(|k, _| !now.contains_key(k));
    }

    /// The writes that bring every claimed object's status to what `state` says, and the
    /// clears of released ones. `seen` looks an object up as last seen (None: gone or
    /// undecodable). Forgets what no longer needs remembering.
    pub fn decide(
        &mut self,
        state: &State,
        seen: impl Fn(&Target) -> Option<Seen>,
        hostname_form: bool,
    ) -> (Vec<StatusPatch>, Vec<StatusClear>) {
        let mut patches = Vec::new();
        let mut kept = Vec::new();
        for (key, ips, uid, want) in claims(state, hostname_form) {
            let Some(obj) = seen(&key) else {
                continue;
            };
            if !uid.is_empty() && obj.uid.as_deref() != Some(uid) {
                continue; // re-created since the plan; the next tick sees it
            }
            kept.push(key.clone());
            if obj.ingress == want {
                self.memo.remove(&key);
                continue;
            }
            let rv = obj.resource_version;
            if self.memo.get(&key) == Some(&(rv.clone(), want.clone())) {
                continue; // written, not yet seen by the watch
            }
            patches.push(StatusPatch {
                key,
                resource_version: rv,
                ingress: want,
                ips: ips.to_vec(),
            });
        }
        self.memo.retain(|k, _| kept.contains(k));

        let mut clears = Vec::new();
        self.pending_clears.retain(|key, ips| {
            let Some(obj) = seen(key) else {
                return false; // deleted: nothing to clear
            };
            if !shows_any(&obj.ingress, ips) {
                return false; // not ours (any more)
            }
            clears.push(StatusClear {
                key: key.clone(),
                resource_version: obj.resource_version,
                ips: ips.clone(),
            });
            true
        });
        (patches, clears)
    }

    /// Whether released objects may still show our IPs (retry soon).
    pub fn pending(&self) -> bool {
        !self.pending_clears.is_empty()
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub patched: usize,
    pub cleared: usize,
    pub failed: usize,
}

/// Executes the status writes the reconcile decided.
pub struct StatusWriter {
    client: Client,
    /// Status writes failing other than by conflict, logged once a minute.
    failures: FailureLog,
}

impl StatusWriter {
    pub fn new(client: Client) -> Self {
        StatusWriter {
            client,
            failures: FailureLog::new("patching status"),
        }
    }

    /// Write `patches`, then `clears`, asking `still_leader` before each, and record what
    /// was written in `memory`.
    pub async fn execute(
        &mut self,
        patches: &[StatusPatch],
        clears: &[StatusClear],
        memory: &mut StatusMemory,
        still_leader: impl Fn() -> bool,
        metrics: &crate::admin::Metrics,
    ) -> Outcome {
        let mut out = Outcome::default();
        // Failures other than conflicts (a 409 is expected: the next tick retries with
        // fresh data), and the last one's description.
        let mut errors = (0u64, String::new());
        for p in patches {
            if !still_leader() {
                self.report(&out, errors);
                return out;
            }
            let key = &p.key;
            let body = json!({
                "metadata": {"resourceVersion": p.resource_version},
                "status": {"loadBalancer": {"ingress": p.ingress.iter().map(Ingress::to_json).collect::<Vec<_>>()}},
            });
            match self.patch(key, &body).await {
                Ok(()) => {
                    tracing::info!(object = %key, ips = ?p.ips, "status updated");
                    metrics.status_patch("ok");
                    out.patched += 1;
                    memory
                        .memo
                        .insert(key.clone(), (p.resource_version.clone(), p.ingress.clone()));
                }
                Err(e) => {
                    out.failed += 1;
                    if api_code(&e) == Some(409) {
                        metrics.status_patch("conflict");
                        tracing::debug!(object = %key, "status changed since we looked; retrying");
                    } else {
                        metrics.status_patch("error");
                        metrics.write_failed("status", code_label(&e));
                        errors = (errors.0 + 1, format!("{key}: {}", describe(&e)));
                    }
                }
            }
        }
        for c in clears {
            if !still_leader() {
                break;
            }
            let key = &c.key;
            let body = json!({
                "metadata": {"resourceVersion": c.resource_version},
                "status": {"loadBalancer": {"ingress": null}},
            });
            match self.patch(key, &body).await {
                Ok(()) => {
                    tracing::info!(object = %key, ips = ?c.ips, "status cleared");
                    metrics.status_patch("ok");
                    out.cleared += 1;
                    memory.pending_clears.remove(key);
                }
                Err(e) if api_code(&e) == Some(404) => {
                    memory.pending_clears.remove(key);
                }
                Err(e) => {
                    out.failed += 1;
                    if api_code(&e) == Some(409) {
                        metrics.status_patch("conflict");
                        tracing::debug!(object = %key, "status changed since we looked; retrying");
                    } else {
                        metrics.status_patch("error");
                        metrics.write_failed("status", code_label(&e));
                        errors = (errors.0 + 1, format!("{key}: {}", describe(&e)));
                    }
                }
            }
        }
        self.report(&out, errors);
        out
    }

    /// One log line when status writes start failing, once a minute while they do, one
    /// when they work again (a round with a successful write and no failure).
    fn report(&mut self, out: &Outcome, errors: (u64, String)) {
        if errors.0 > 0 {
            self.failures.failed(errors.0, &errors.1);
        } else if out.patched + out.cleared > 0 {
            self.failures.succeeded();
        }
    }

    async fn patch(&self, target: &Target, body: &Value) -> Result<(), kube::Error> {
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let patch = Patch::Merge(body);
        let what = || format!("patching the status of {target}");
        match target {
            Target::Service(k) => {
                let api: Api<Service> = Api::namespaced(self.client.clone(), k.namespace.as_str());
                timed(what, api.patch_status(k.name.as_str(), &pp, &patch)).await?;
            }
            Target::Ingress(k) => {
                let api: Api<IngressObject> =
                    Api::namespaced(self.client.clone(), k.namespace.as_str());
                timed(what, api.patch_status(k.name.as_str(), &pp, &patch)).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslip_forms() {
        assert_eq!(sslip(&"10.0.0.1".parse().unwrap()), "10.0.0.1.sslip.io");
        assert_eq!(sslip(&"fd00::1".parse().unwrap()), "fd00--1.sslip.io");
    }
}
