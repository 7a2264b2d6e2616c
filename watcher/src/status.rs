//! Service status: `status.loadBalancer.ingress` = one entry per VIP, `{ip, ipMode}` (or
//! k8slb's `{hostname: "<ip>.sslip.io"}` with `--status-hostname`), written through the
//! status subresource with a JSON merge patch that carries the observed
//! `metadata.resourceVersion` as a precondition: a Service that changed since we looked
//! gives 409 and is retried on the next tick with fresh data, so we never overwrite a
//! status we did not see.
//!
//! Only differences are written: the desired ingress is compared with the observed one
//! (ip, hostname, ipMode). A Service that leaves our claim has its status cleared only if
//! it still exists and its status still shows an IP we gave it (never another
//! controller's status).
//!
//! Which writes is decided without I/O ([`StatusMemory::decide`], called by the reconcile);
//! [`StatusWriter`] only executes them.

use crate::failing::FailureLog;
use crate::kube::{api_code, code_label, describe, timed, FIELD_MANAGER};
use k8s_openapi::api::core::v1::Service;
use k8slb_common::names::ServiceKey;
use k8slb_common::state::{IpMode, ServiceState, State};
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
    fn to_json(&self) -> Value {
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

/// k8slb's hostname form: `<ip>.sslip.io`, IPv6 with '-' for ':'.
pub fn sslip(ip: &IpAddr) -> String {
    format!("{}.sslip.io", ip.to_string().replace(':', "-"))
}

pub fn desired(ss: &ServiceState, hostname_form: bool) -> Vec<Ingress> {
    ss.ips
        .iter()
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
                    ip_mode: Some(
                        match ss.ip_mode {
                            IpMode::Proxy => "Proxy",
                            IpMode::Vip => "VIP",
                        }
                        .to_string(),
                    ),
                }
            }
        })
        .collect()
}

pub fn observed(svc: &Service) -> Vec<Ingress> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref())
        .map(|v| {
            v.iter()
                .map(|i| Ingress {
                    ip: i.ip.clone(),
                    hostname: i.hostname.clone(),
                    ip_mode: i.ip_mode.clone(),
                })
                .collect()
        })
        .unwrap_or_default()
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
    pub key: ServiceKey,
    pub resource_version: String,
    pub ingress: Vec<Ingress>,
    /// The IPs the ingress shows (for the log).
    pub ips: Vec<IpAddr>,
}

/// One status clear: the Service left our claim and its status still shows `ips`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusClear {
    pub key: ServiceKey,
    pub resource_version: String,
    pub ips: Vec<IpAddr>,
}

/// What the status writes remember between rounds (pure data, decided on by
/// [`StatusMemory::decide`], updated by the writer after each write).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StatusMemory {
    /// Service -> (resourceVersion we patched from, what we wrote): while the store still
    /// shows that resourceVersion, our write is simply not visible yet; do not repeat it.
    pub memo: HashMap<ServiceKey, (String, Vec<Ingress>)>,
    /// Services that left our claim and whose status may still show our IPs.
    pub pending_clears: BTreeMap<ServiceKey, Vec<IpAddr>>,
}

impl StatusMemory {
    /// Record the IPs released between two published states.
    pub fn released(&mut self, previous: &State, next: &State) {
        for (key, old) in &previous.services {
            let now: &[IpAddr] = next
                .services
                .get(key)
                .map(|s| s.ips.as_slice())
                .unwrap_or_default();
            let gone: Vec<IpAddr> = old
                .ips
                .iter()
                .filter(|ip| !now.contains(ip))
                .copied()
                .collect();
            if !gone.is_empty() && now.is_empty() {
                self.pending_clears.insert(key.clone(), gone);
            }
        }
        // A Service that is claimed again is the normal path's business.
        self.pending_clears
            .retain(|k, _| next.services.get(k).is_none_or(|s| s.ips.is_empty()));
    }

    /// The writes that bring every claimed Service's status to what `state` says, and the
    /// clears of released ones. `service` looks a Service up as last seen (None: gone or
    /// undecodable). Forgets what no longer needs remembering.
    pub fn decide<'s>(
        &mut self,
        state: &State,
        service: impl Fn(&ServiceKey) -> Option<&'s Service>,
        hostname_form: bool,
    ) -> (Vec<StatusPatch>, Vec<StatusClear>) {
        let mut patches = Vec::new();
        let mut seen = Vec::new();
        for (key, ss) in &state.services {
            if ss.ips.is_empty() {
                continue;
            }
            let Some(svc) = service(key) else {
                continue;
            };
            if !ss.uid.is_empty() && svc.metadata.uid.as_deref() != Some(ss.uid.as_str()) {
                continue; // re-created since the plan; the next tick sees it
            }
            seen.push(key.clone());
            let want = desired(ss, hostname_form);
            if observed(svc) == want {
                self.memo.remove(key);
                continue;
            }
            let rv = svc.metadata.resource_version.clone().unwrap_or_default();
            if self.memo.get(key) == Some(&(rv.clone(), want.clone())) {
                continue; // written, not yet seen by the watch
            }
            patches.push(StatusPatch {
                key: key.clone(),
                resource_version: rv,
                ingress: want,
                ips: ss.ips.clone(),
            });
        }
        self.memo.retain(|k, _| seen.contains(k));

        let mut clears = Vec::new();
        self.pending_clears.retain(|key, ips| {
            let Some(svc) = service(key) else {
                return false; // deleted: nothing to clear
            };
            if !shows_any(&observed(svc), ips) {
                return false; // not ours (any more)
            }
            clears.push(StatusClear {
                key: key.clone(),
                resource_version: svc.metadata.resource_version.clone().unwrap_or_default(),
                ips: ips.clone(),
            });
            true
        });
        (patches, clears)
    }

    /// Whether released Services may still show our IPs (retry soon).
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
            failures: FailureLog::new("patching Service status"),
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
            match self
                .patch(key.namespace.as_str(), key.name.as_str(), &body)
                .await
            {
                Ok(()) => {
                    tracing::info!(service = %key, ips = ?p.ips, "status updated");
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
                        tracing::debug!(service = %key, "status changed since we looked; retrying");
                    } else {
                        metrics.status_patch("error");
                        metrics.write_failed("status", code_label(&e));
                        errors = (errors.0 + 1, format!("Service {key}: {}", describe(&e)));
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
            match self
                .patch(key.namespace.as_str(), key.name.as_str(), &body)
                .await
            {
                Ok(()) => {
                    tracing::info!(service = %key, ips = ?c.ips, "status cleared");
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
                        tracing::debug!(service = %key, "status changed since we looked; retrying");
                    } else {
                        metrics.status_patch("error");
                        metrics.write_failed("status", code_label(&e));
                        errors = (errors.0 + 1, format!("Service {key}: {}", describe(&e)));
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

    async fn patch(&self, ns: &str, name: &str, body: &Value) -> Result<(), kube::Error> {
        let api: Api<Service> = Api::namespaced(self.client.clone(), ns);
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        timed(
            || format!("patching the status of {ns}/{name}"),
            api.patch_status(name, &pp, &Patch::Merge(body)),
        )
        .await
        .map(|_| ())
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
