//! How the state is cut into objects small enough for Kubernetes.
//!
//! Decision: a ConfigMap's data is limited to 1 MiB, and 10,000 Services of 10 endpoints
//! make about 5 MB of compact JSON. So the state is published as gzip-compressed JSON in
//! `binaryData`, and sharded when one object would be too big:
//!
//! - the **index** object ([`STATE_NAME`], `k8slb-state`) holds everything except the
//!   Services (config, nodes, VRRP instances, VIPs, problems), the shard count, and a
//!   digest of each shard;
//! - **shard** objects (`k8slb-state-<i>`) hold the Services whose key hashes (FNV-1a,
//!   stable across versions) to `i`, so an unrelated change rewrites one shard, not all;
//! - the shard count is the smallest power of two for which every shard fits under
//!   [`MAX_OBJECT_BYTES`]; a small state is a single index with no shard at all.
//!
//! Writers write the shards first and the index last: the index is the commit point.
//! Readers take the index, then the shards, and accept the set only if every shard's
//! digest matches the index; a mismatch means a write is in progress, so the reader keeps
//! its last good state and retries. Nothing ever sees half a state.

use crate::names::ServiceKey;
use crate::state::{ServiceState, State, StateError};
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};

/// Budget for one object's payload: 1 MiB minus room for metadata.
pub const MAX_OBJECT_BYTES: usize = 900 * 1024;
/// Refuse to inflate more than this (a corrupt or hostile object must not exhaust memory).
pub const MAX_INFLATED_BYTES: u64 = 512 * 1024 * 1024;

// The state objects as the watcher writes them and the actors read them: names only,
// no client here.

/// Name of the index ConfigMap; part `p` is the ConfigMap `{STATE_NAME}{p.suffix}`
/// (`k8slb-state-<i>` for shard `i`).
pub const STATE_NAME: &str = "k8slb-state";
/// The `binaryData` key holding a part's gzip payload.
pub const STATE_KEY: &str = "state.json.gz";
/// The labels of every state object (index and shards): who manages it, what it is.
pub const STATE_LABELS: [(&str, &str); 2] = [
    ("app.kubernetes.io/managed-by", "k8slb"),
    ("k8slb.io/part", "state"),
];
/// [`STATE_LABELS`] as a label selector (a test keeps the two in step).
pub const STATE_SELECTOR: &str = "app.kubernetes.io/managed-by=k8slb,k8slb.io/part=state";

/// One object to publish: its name suffix ("" for the index, "-<i>" for shard i) and its
/// gzip-compressed JSON payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub suffix: String,
    pub gzip: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Index {
    /// The state without `services`.
    state: State,
    /// Number of shards (0: the Services are in `services` below).
    shards: u32,
    /// FNV-1a 64 of each shard's gzip payload, hex.
    digests: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    services: BTreeMap<ServiceKey, ServiceState>,
}

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("state part {part:?} is missing")]
    MissingPart { part: String },
    #[error("state shard {part:?} does not match the index (a write is in progress?)")]
    Digest { part: String },
    #[error("state part {part:?} cannot be decompressed: {source}")]
    Inflate {
        part: String,
        #[source]
        source: std::io::Error,
    },
    #[error("state part {part:?} is larger than {MAX_INFLATED_BYTES} bytes inflated")]
    TooBig { part: String },
    #[error(transparent)]
    State(#[from] StateError),
    #[error("state part {part:?} is not valid: {source}")]
    Decode {
        part: String,
        #[source]
        source: serde_json::Error,
    },
}

/// FNV-1a, 64 bit: stable, dependency-free, good enough to spread keys and to tell two
/// payloads apart (it is not a security boundary: the objects are ours).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::new(6));
    e.write_all(bytes).expect("writing to a Vec");
    e.finish().expect("writing to a Vec")
}

fn gunzip(part: &str, bytes: &[u8]) -> Result<Vec<u8>, PublishError> {
    let mut out = Vec::new();
    GzDecoder::new(bytes)
        .take(MAX_INFLATED_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|source| PublishError::Inflate {
            part: part.to_string(),
            source,
        })?;
    if out.len() as u64 > MAX_INFLATED_BYTES {
        return Err(PublishError::TooBig {
            part: part.to_string(),
        });
    }
    Ok(out)
}

fn shard_of(key: &ServiceKey, shards: u32) -> usize {
    (fnv1a(key.to_string().as_bytes()) % u64::from(shards)) as usize
}

/// Cut a state into parts, each under `max_bytes` compressed when possible. The first
/// part is the index. Deterministic: the same state gives the same bytes.
pub fn encode(state: &State, max_bytes: usize) -> Vec<Part> {
    let mut head = state.clone();
    let services = std::mem::take(&mut head.services);
    // Unsharded: everything in the index.
    let single = Index {
        state: head.clone(),
        shards: 0,
        digests: vec![],
        services: services.clone(),
    };
    let bytes = gzip(&serde_json::to_vec(&single).expect("serialises"));
    if bytes.len() <= max_bytes {
        return vec![Part {
            suffix: String::new(),
            gzip: bytes,
        }];
    }
    let mut shards: u32 = 2;
    loop {
        let mut buckets: Vec<BTreeMap<&ServiceKey, &ServiceState>> =
            vec![BTreeMap::new(); shards as usize];
        for (k, v) in &services {
            buckets[shard_of(k, shards)].insert(k, v);
        }
        let parts: Vec<Vec<u8>> = buckets
            .iter()
            .map(|b| gzip(&serde_json::to_vec(b).expect("serialises")))
            .collect();
        // 4096 shards is far beyond any real cluster; stop there whatever the sizes.
        if parts.iter().all(|p| p.len() <= max_bytes) || shards >= 4096 {
            let index = Index {
                state: head,
                shards,
                digests: parts.iter().map(|p| format!("{:016x}", fnv1a(p))).collect(),
                services: BTreeMap::new(),
            };
            let mut out = vec![Part {
                suffix: String::new(),
                gzip: gzip(&serde_json::to_vec(&index).expect("serialises")),
            }];
            out.extend(parts.into_iter().enumerate().map(|(i, gzip)| Part {
                suffix: format!("-{i}"),
                gzip,
            }));
            return out;
        }
        shards *= 2;
    }
}

/// Put a state back together from its index and a way to fetch shards by suffix.
pub fn decode(
    index: &[u8],
    mut shard: impl FnMut(&str) -> Option<Vec<u8>>,
) -> Result<State, PublishError> {
    let raw = gunzip("", index)?;
    let text = std::str::from_utf8(&raw).map_err(|e| PublishError::Inflate {
        part: String::new(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })?;
    // Check the version first, with the same rule as a plain state file.
    #[derive(Deserialize)]
    struct Probe {
        state: serde_json::Value,
    }
    let probe: Probe = serde_json::from_str(text).map_err(|source| PublishError::Decode {
        part: String::new(),
        source,
    })?;
    State::from_json(&probe.state.to_string())?;
    let index: Index = serde_json::from_str(text).map_err(|source| PublishError::Decode {
        part: String::new(),
        source,
    })?;
    let mut state = index.state;
    state.services = index.services;
    for i in 0..index.shards as usize {
        let suffix = format!("-{i}");
        let bytes = shard(&suffix).ok_or_else(|| PublishError::MissingPart {
            part: suffix.clone(),
        })?;
        if index.digests.get(i) != Some(&format!("{:016x}", fnv1a(&bytes))) {
            return Err(PublishError::Digest { part: suffix });
        }
        let raw = gunzip(&suffix, &bytes)?;
        let part: BTreeMap<ServiceKey, ServiceState> =
            serde_json::from_slice(&raw).map_err(|source| PublishError::Decode {
                part: suffix.clone(),
                source,
            })?;
        state.services.extend(part);
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_global_config;
    use crate::state::{IpMode, State};

    fn state_with(n: usize) -> State {
        let cfg = parse_global_config(r#"{"pools":{}}"#).unwrap();
        let mut s = State::empty(cfg.actor_config(&Default::default()));
        for i in 0..n {
            s.services.insert(
                format!("ns{}/svc{i}", i % 7).parse().unwrap(),
                ServiceState {
                    ips: vec![format!("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255)
                        .parse()
                        .unwrap()],
                    pool: "default".into(),
                    ip_mode: IpMode::Proxy,
                    uid: format!("{:032x}", fnv1a(&i.to_le_bytes()) as u128 * 7919),
                    ports: vec![],
                },
            );
        }
        s
    }

    #[test]
    fn small_state_is_one_part_and_round_trips() {
        let s = state_with(10);
        let parts = encode(&s, MAX_OBJECT_BYTES);
        assert_eq!(parts.len(), 1);
        assert_eq!(decode(&parts[0].gzip, |_| None).unwrap(), s);
    }

    #[test]
    fn big_state_is_sharded_and_every_part_fits() {
        let s = state_with(5000);
        let parts = encode(&s, 16 * 1024);
        assert!(parts.len() > 2, "{}", parts.len());
        assert!(parts.iter().all(|p| p.gzip.len() <= 16 * 1024));
        let get = |suffix: &str| {
            parts
                .iter()
                .find(|p| p.suffix == suffix)
                .map(|p| p.gzip.clone())
        };
        assert_eq!(decode(&parts[0].gzip, get).unwrap(), s);
        // Deterministic.
        assert_eq!(encode(&s, 16 * 1024), parts);
    }

    #[test]
    fn a_stale_or_missing_shard_is_refused() {
        let s = state_with(5000);
        let parts = encode(&s, 16 * 1024);
        let mut other = s.clone();
        other.services.remove(&"ns0/svc0".parse().unwrap());
        let newer = encode(&other, 16 * 1024);
        assert_eq!(newer.len(), parts.len());
        // Index from the newer write, shards from the older one: some digest differs.
        let old = |suffix: &str| {
            parts
                .iter()
                .find(|p| p.suffix == suffix)
                .map(|p| p.gzip.clone())
        };
        assert!(matches!(
            decode(&newer[0].gzip, old),
            Err(PublishError::Digest { .. })
        ));
        assert!(matches!(
            decode(&newer[0].gzip, |_| None),
            Err(PublishError::MissingPart { .. })
        ));
        // Only one shard changed.
        let changed = parts.iter().zip(&newer).filter(|(a, b)| a != b).count();
        assert_eq!(changed, 2, "the index and the one shard holding ns0/svc0");
    }

    #[test]
    fn the_selector_is_the_labels() {
        let labels: Vec<String> = STATE_LABELS
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        assert_eq!(STATE_SELECTOR, labels.join(","));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode(b"not gzip", |_| None).is_err());
        assert!(decode(&gzip(b"{\"state\":{\"version\":99}}"), |_| None).is_err());
    }
}
