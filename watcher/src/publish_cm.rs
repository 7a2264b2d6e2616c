//! The `configmap` state destination: [`k8slb_common::publish`] parts as ConfigMaps
//! `k8slb-state` (the index) and `k8slb-state-<i>` (shards) in the watcher's namespace,
//! payload in `binaryData["state.json.gz"]`, labelled [`STATE_LABELS`], written with
//! server-side apply. Names, key and labels are the constants of
//! [`k8slb_common::publish`], which the actors' reader uses too.
//!
//! Shards first, index last (the index is the commit point), then shards the index no
//! longer references are deleted. A part whose bytes did not change is not written.

use crate::kube::{api_code, code_label, describe, is_timeout, timed, FIELD_MANAGER};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use k8slb_common::publish::{
    decode, encode, PublishError, MAX_OBJECT_BYTES, STATE_KEY, STATE_LABELS, STATE_NAME,
};
use k8slb_common::state::State;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::Api;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The previous state as found in the cluster.
#[derive(Debug)]
pub enum StateLoad {
    /// No index object: no state was ever published.
    None,
    Loaded(Box<State>),
    /// A shard is missing or does not match the index: a write is in progress. Retry.
    InProgress(String),
    /// The objects exist but cannot be read (corrupt, other version): start from the
    /// Services' status only.
    Unreadable(String),
}

fn payload(cm: &ConfigMap) -> Option<Vec<u8>> {
    cm.binary_data
        .as_ref()
        .and_then(|b| b.get(STATE_KEY))
        .map(|b| b.0.clone())
}

/// Decode the state from the ConfigMaps, fetched by name.
pub fn load(get: impl Fn(&str) -> Option<Arc<ConfigMap>>) -> StateLoad {
    let Some(index) = get(STATE_NAME) else {
        return StateLoad::None;
    };
    let Some(bytes) = payload(&index) else {
        return StateLoad::Unreadable(format!("{STATE_NAME} has no binaryData.{STATE_KEY}"));
    };
    match decode(&bytes, |suffix| {
        get(&format!("{STATE_NAME}{suffix}")).and_then(|c| payload(&c))
    }) {
        Ok(s) => StateLoad::Loaded(Box::new(s)),
        Err(e @ (PublishError::MissingPart { .. } | PublishError::Digest { .. })) => {
            StateLoad::InProgress(e.to_string())
        }
        Err(e) => StateLoad::Unreadable(e.to_string()),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PublishCmError {
    #[error("cannot apply ConfigMap {name}: {}", describe(.source))]
    Apply {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot delete the stale shard {name}: {}", describe(.source))]
    DeleteShard {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing ConfigMap {name} timed out")]
    Timeout { name: String },
    #[error("no longer the leader")]
    NotLeader,
}

impl PublishCmError {
    pub fn category(&self) -> &'static str {
        match self {
            PublishCmError::Apply { .. } => "apply",
            PublishCmError::DeleteShard { .. } => "delete",
            PublishCmError::Timeout { .. } => "timeout",
            PublishCmError::NotLeader => "not_leader",
        }
    }

    /// The `code` label of `write_failures_total`: the HTTP code, `timeout` or `transport`.
    pub fn code(&self) -> String {
        match self {
            PublishCmError::Apply { source, .. } | PublishCmError::DeleteShard { source, .. } => {
                code_label(source)
            }
            PublishCmError::Timeout { .. } => "timeout".into(),
            PublishCmError::NotLeader => "not_leader".into(),
        }
    }
}

/// Writes the state, remembering what each object holds so unchanged parts are skipped.
pub struct Publisher {
    api: Api<ConfigMap>,
    namespace: String,
    /// Object name -> payload it holds (as far as we know).
    written: BTreeMap<String, Vec<u8>>,
}

impl Publisher {
    pub fn new(api: Api<ConfigMap>, namespace: &str) -> Self {
        Publisher {
            api,
            namespace: namespace.to_string(),
            written: BTreeMap::new(),
        }
    }

    /// Forget what we wrote and take what the cluster holds (on becoming the leader:
    /// another watcher may have written since).
    pub fn reset_from(&mut self, cms: &[Arc<ConfigMap>]) {
        self.written.clear();
        for cm in cms {
            let Some(name) = cm.metadata.name.as_deref() else {
                continue;
            };
            if is_state_name(name) {
                self.written
                    .insert(name.to_string(), payload(cm).unwrap_or_default());
            }
        }
    }

    /// Publish `state`. `still_leader` is asked before every write.
    pub async fn publish(
        &mut self,
        state: &State,
        still_leader: impl Fn() -> bool,
    ) -> Result<usize, PublishCmError> {
        let parts = encode(state, MAX_OBJECT_BYTES);
        let mut writes = 0;
        // parts[0] is the index: write it last.
        let (index, shards) = parts.split_first().expect("encode gives an index");
        for part in shards.iter().chain(std::iter::once(index)) {
            let name = format!("{STATE_NAME}{}", part.suffix);
            if self.written.get(&name) == Some(&part.gzip) {
                continue;
            }
            if !still_leader() {
                return Err(PublishCmError::NotLeader);
            }
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(self.namespace.clone()),
                    labels: Some(
                        STATE_LABELS
                            .iter()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect(),
                    ),
                    ..Default::default()
                },
                binary_data: Some(BTreeMap::from([(
                    STATE_KEY.to_string(),
                    ByteString(part.gzip.clone()),
                )])),
                ..Default::default()
            };
            let pp = PatchParams::apply(FIELD_MANAGER).force();
            match timed(
                || format!("applying ConfigMap {name}"),
                self.api.patch(&name, &pp, &Patch::Apply(&cm)),
            )
            .await
            {
                Err(e) if is_timeout(&e) => {
                    self.written.remove(&name);
                    return Err(PublishCmError::Timeout { name });
                }
                Err(source) => {
                    self.written.remove(&name);
                    return Err(PublishCmError::Apply { name, source });
                }
                Ok(_) => {
                    writes += 1;
                    self.written.insert(name, part.gzip.clone());
                }
            }
        }
        // Shards the index no longer references.
        let shard_count = shards.len();
        let stale: Vec<String> = self
            .written
            .keys()
            .filter(|n| shard_index(n).is_some_and(|i| i >= shard_count))
            .cloned()
            .collect();
        for name in stale {
            if !still_leader() {
                return Err(PublishCmError::NotLeader);
            }
            match timed(
                || format!("deleting ConfigMap {name}"),
                self.api.delete(&name, &DeleteParams::default()),
            )
            .await
            {
                Err(e) if is_timeout(&e) => return Err(PublishCmError::Timeout { name }),
                Ok(_) => {
                    writes += 1;
                    self.written.remove(&name);
                }
                Err(e) if api_code(&e) == Some(404) => {
                    self.written.remove(&name);
                }
                Err(source) => return Err(PublishCmError::DeleteShard { name, source }),
            }
        }
        Ok(writes)
    }
}

pub(crate) fn is_state_name(name: &str) -> bool {
    name == STATE_NAME || shard_index(name).is_some()
}

fn shard_index(name: &str) -> Option<usize> {
    name.strip_prefix(STATE_NAME)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_state_name("k8slb-state"));
        assert_eq!(shard_index("k8slb-state-12"), Some(12));
        assert_eq!(shard_index("k8slb-state"), None);
        assert_eq!(shard_index("k8slb-state-x"), None);
        assert!(!is_state_name("global"));
    }
}
