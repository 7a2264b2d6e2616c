//! An Ingress's `spec.tls`: each Secret's certificate (through [`crate::translate::refs`]) and
//! the hosts it covers.

use super::*;

/// A `spec.tls` certificate of one Ingress that can be served.
pub(super) struct TlsEntry {
    pub(super) file: CertFile,
    /// The hosts it is served for (those its certificate's names cover).
    pub(super) hosts: Vec<Hostname>,
    /// The entry names no hosts: a default certificate candidate.
    pub(super) hostless: bool,
}

impl TlsEntry {
    pub(super) fn covers(&self, host: Option<&Hostname>) -> bool {
        match host {
            None => self.hostless,
            Some(h) => self
                .hosts
                .iter()
                .any(|t| t == h || (!h.is_wildcard() && t.is_wildcard() && t.matches(h.as_str()))),
        }
    }
}

/// The `spec.tls` entries of `ing` whose Secret can be served, with problems for the rest.
pub(super) fn tls_entries(
    ing: &Ingress,
    idx: &Index<'_>,
    problems: &mut BTreeSet<Problem>,
) -> Vec<TlsEntry> {
    let ns = ns_of(ing);
    let mut out = Vec::new();
    for t in ing.spec.iter().flat_map(|s| s.tls.iter().flatten()) {
        let raw = t.secret_name.as_deref().unwrap_or("");
        let (file, meta) = match idx.secrets.tls(ns, raw) {
            Ok(found) => found,
            Err(e) => {
                use crate::translate::refs::SecretRefError;
                let (why, message) = match e {
                    SecretRefError::InvalidName => (
                        reason::SECRET_NOT_FOUND,
                        format!("spec.tls secretName {:?} is not a valid Secret name", short(raw)),
                    ),
                    SecretRefError::NotFound => (
                        reason::SECRET_NOT_FOUND,
                        format!("Secret {ns}/{raw} does not exist"),
                    ),
                    SecretRefError::WrongType(type_) => (
                        reason::SECRET_WRONG_TYPE,
                        format!(
                            "Secret {ns}/{raw} is of type {:?}, not {TLS_SECRET_TYPE}",
                            short(type_)
                        ),
                    ),
                    SecretRefError::Invalid(refusal) => (
                        reason::SECRET_INVALID,
                        format!(
                            "Secret {ns}/{raw} does not hold a certificate and key both proxies load: {refusal}"
                        ),
                    ),
                };
                problems.insert(problem(
                    ing,
                    why,
                    format!("{message}; its hosts get no certificate"),
                ));
                continue;
            }
        };
        let (namespace, name) = (ns, raw);
        let mut hosts = Vec::new();
        let mut uncovered = false;
        for h in t.hosts.iter().flatten() {
            match h.parse::<Hostname>() {
                Ok(h) if !crate::certs::covers(&meta.dns_names, h.as_str()) => {
                    uncovered = true;
                    problems.insert(problem(
                        ing,
                        reason::CERTIFICATE_HOST_MISMATCH,
                        format!(
                            "the certificate of Secret {namespace}/{name} is not for host {h} (its subjectAltName DNS names: {}; the common name is never read); the host gets the default certificate and no redirect to HTTPS",
                            crate::certs::names_list(&meta.dns_names)
                        ),
                    ));
                }
                Ok(h) => hosts.push(h),
                Err(e) => {
                    problems.insert(problem(
                        ing,
                        reason::INVALID_HOST,
                        format!("spec.tls host skipped: {e}"),
                    ));
                }
            }
        }
        let hostless = t.hosts.as_ref().is_none_or(|h| h.is_empty());
        if hosts.is_empty() && !hostless && !uncovered {
            continue; // every host refused: not a default certificate either
        }
        // A host its certificate is not for is still served on HTTPS (the Ingress keeps
        // its HTTPS port), with the listener's default certificate.
        hosts.sort();
        hosts.dedup();
        out.push(TlsEntry {
            file,
            hosts,
            hostless,
        });
    }
    out
}
