//! The `loadbalancer/*` annotations of a Service, read once by the shared reader
//! ([`crate::annotations`]), each refused value reported and ignored; then the values of
//! the Service's boolean and enumerated options checked.

use super::problems::{short, Problems};
pub(super) use crate::annotations::Annotations;
use crate::annotations::Issue;
use crate::names::ServiceKey;
use crate::problem::{ObjRef, Problem, Reason};
use k8s_openapi::api::core::v1::Service;

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

/// The Service's known options; every refusal a problem on it.
pub(super) fn read(svc: &Service, key: &ServiceKey, problems: &mut Problems) -> Annotations {
    let mut issues = Vec::new();
    let a = Annotations::read(
        svc.metadata.annotations.as_ref(),
        KNOWN_ANNOTATIONS,
        &mut issues,
    );
    let object = ObjRef::Service(key.clone());
    for Issue {
        reason,
        option,
        message,
    } in issues
    {
        let p = Problem::new(object.clone(), reason.clone(), message);
        if reason == Reason::InvalidAnnotation && ADDRESS_ANNOTATIONS.contains(&option.as_str()) {
            problems.insert_blocking(p);
        } else {
            problems.insert(p);
        }
    }
    check_values(&a, problems, |reason, message| {
        Problem::new(object.clone(), reason, message)
    });
    a
}

/// The values of the boolean and enumerated options.
fn check_values(
    a: &Annotations,
    problems: &mut Problems,
    problem: impl Fn(Reason, String) -> Problem,
) {
    for f in ["ssl", "sslbackend", "sslredirect", "nocheck"] {
        if let Some(v) = a.get(f) {
            if !v.is_empty() && a.flag(f).is_none() {
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
    if let Some(m) = a.get_lc("mode") {
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
