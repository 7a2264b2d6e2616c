//! The `loadbalancer/*` annotations of a Service, read once: keys matched
//! case-insensitively (k8slb's README writes `loadBalancer/pool`), values trimmed, each
//! refused value reported and ignored.

use super::problems::{short, Problems};
use crate::names::ServiceKey;
use crate::problem::{ObjRef, Problem, Reason};
use k8s_openapi::api::core::v1::Service;
use std::collections::{BTreeMap, BTreeSet};

const KNOWN_ANNOTATIONS: &[&str] = &[
    "pool",
    "ips",
    "ssl",
    "mode",
    "sslbackend",
    "sslredirect",
    "nocheck",
    "stickiness",
    "proxy-protocol",
    "scale",
    "allow-shared-ip",
];

/// The annotations that make the address request: a problem with them explains why a
/// Service has no address.
const ADDRESS_ANNOTATIONS: &[&str] = &["pool", "ips"];

/// The known options by name, and the options whose value was refused (so ignored).
pub(super) struct Annotations {
    values: BTreeMap<String, String>,
    refused: BTreeSet<String>,
}

impl Annotations {
    pub fn read(svc: &Service, key: &ServiceKey, problems: &mut Problems) -> Annotations {
        let mut a = Annotations {
            values: BTreeMap::new(),
            refused: BTreeSet::new(),
        };
        let object = ObjRef::Service(key.clone());
        let problem = |reason, message| Problem::new(object.clone(), reason, message);
        for (k, v) in svc.metadata.annotations.iter().flatten() {
            a.add(k, v, problems, &problem);
        }
        a.check_values(problems, &problem);
        a
    }

    /// One annotation, if it is one of ours.
    fn add(
        &mut self,
        k: &str,
        v: &str,
        problems: &mut Problems,
        problem: &impl Fn(Reason, String) -> Problem,
    ) {
        let lk = k.to_ascii_lowercase();
        let Some(opt) = lk.strip_prefix("loadbalancer/") else {
            return;
        };
        if !KNOWN_ANNOTATIONS.contains(&opt) {
            problems.insert(problem(
                Reason::UnknownAnnotation,
                format!(
                    "annotation {:?} is not one of loadbalancer/{{{}}}; ignored",
                    short(k),
                    KNOWN_ANNOTATIONS.join(",")
                ),
            ));
            return;
        }
        let mut invalid = |message: String| {
            let p = problem(Reason::InvalidAnnotation, message);
            if ADDRESS_ANNOTATIONS.contains(&opt) {
                problems.insert_blocking(p);
            } else {
                problems.insert(p);
            }
        };
        // Trimmed first: a YAML block scalar (`pool: |`) ends with a newline.
        let v = v.trim();
        if v.len() > 1024 || v.chars().any(char::is_control) {
            invalid(format!(
                "annotation {k}: value {:?} is too long or holds control characters; ignored",
                short(v)
            ));
            self.refused.insert(opt.to_string());
            return;
        }
        let v = v.to_string();
        if let Some(prev) = self.values.get(opt) {
            if prev != &v {
                invalid(format!(
                    "annotation loadbalancer/{opt} is given twice with different case and values; using {prev:?}"
                ));
            }
            return;
        }
        self.values.insert(opt.to_string(), v);
    }

    /// The values of the boolean and enumerated options.
    fn check_values(&self, problems: &mut Problems, problem: &impl Fn(Reason, String) -> Problem) {
        for f in ["ssl", "sslbackend", "sslredirect", "nocheck"] {
            if let Some(v) = self.get(f) {
                if !v.is_empty()
                    && !v.eq_ignore_ascii_case("true")
                    && !v.eq_ignore_ascii_case("false")
                {
                    problems.insert(problem(
                        Reason::InvalidAnnotation,
                        format!(
                            "loadbalancer/{f}: {:?} is not true or false; ignored",
                            short(v)
                        ),
                    ));
                }
            }
        }
        if let Some(m) = self.get_lc("mode") {
            if !["", "http", "tcp", "false", "auto"].contains(&m.as_str()) {
                problems.insert(problem(
                    Reason::InvalidAnnotation,
                    format!(
                        "loadbalancer/mode: {:?} is not http or tcp; using automatic mode",
                        short(&m)
                    ),
                ));
            }
        }
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.values.get(k).map(String::as_str)
    }

    pub fn get_lc(&self, k: &str) -> Option<String> {
        self.get(k).map(str::to_ascii_lowercase)
    }

    /// Was the value of `k` refused (so ignored)?
    pub fn refused(&self, k: &str) -> bool {
        self.refused.contains(k)
    }

    /// true / false (case-insensitive); anything else (blank included) is "automatic".
    pub fn flag(&self, k: &str) -> Option<bool> {
        match self.get_lc(k).as_deref() {
            Some("true") => Some(true),
            Some("false") => Some(false),
            _ => None,
        }
    }
}
