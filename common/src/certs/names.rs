//! Which hosts a certificate is for: the DNS names of its leaf's subjectAltName, matched
//! as RFC 6125 (section 6.4) and the browsers match them.
//!
//! - Only `dNSName` entries of the subjectAltName count. The subject's common name is
//!   **never** read, even when the certificate has no subjectAltName: browsers stopped
//!   reading it in 2017 (Chrome 58, Firefox 48 for certificates of public CAs) and RFC 9525
//!   (which obsoletes RFC 6125) drops it; OpenSSL's `X509_check_host` still falls back to
//!   it, so a certificate OpenSSL clients accept for a host may be refused here, never the
//!   other way round.
//! - Names compare case-insensitively, after removing one trailing dot.
//! - A wildcard is a whole leftmost label `*` over at least two labels (`*.example.com`):
//!   it covers exactly one label in its place (`a.example.com`), not the name itself
//!   (`example.com`) nor two labels (`a.b.example.com`). Partial wildcards (`f*.example.com`,
//!   `*oo.example.com`), a `*` elsewhere, and `*.com` cover nothing (RFC 6125 lets a client
//!   refuse them; the browsers do).
//! - A host that is itself a wildcard (an Ingress's `*.example.com`) is covered only by
//!   the same wildcard name: a certificate for `a.example.com` does not serve every name
//!   below `example.com`.

use x509_parser::prelude::*;

/// The DNS names of the subjectAltName of the certificate `der` (lowercase, one trailing
/// dot removed, sorted, deduplicated). Empty when it has none, or when the extension does
/// not decode (then it covers nothing).
pub(super) fn dns_names(der: &[u8]) -> Vec<String> {
    let Ok((_, c)) = X509Certificate::from_der(der) else {
        return Vec::new();
    };
    let Ok(Some(san)) = c.subject_alternative_name() else {
        return Vec::new();
    };
    let mut out: Vec<String> = san
        .value
        .general_names
        .iter()
        .filter_map(|g| match g {
            GeneralName::DNSName(n) => Some(normal(n)),
            _ => None,
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

fn normal(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// Whether a certificate whose subjectAltName holds `names` (as [`dns_names`] gives
/// them) is for `host`: see the module documentation.
pub fn covers(names: &[String], host: &str) -> bool {
    let host = normal(host);
    names.iter().any(|n| name_covers(n, &host))
}

/// `pattern` (a normalised SAN) covers the normalised `host`.
fn name_covers(pattern: &str, host: &str) -> bool {
    if pattern == host {
        // Also a wildcard host and the same wildcard name.
        return !host.is_empty();
    }
    let Some(suffix) = pattern.strip_prefix("*.") else {
        return false;
    };
    if host.starts_with("*.") || suffix.contains('*') || !suffix.contains('.') {
        return false;
    }
    match host.split_once('.') {
        Some((label, rest)) => !label.is_empty() && rest == suffix,
        None => false,
    }
}

/// The first of `names`, for a message: escaped (a certificate's names are the user's
/// bytes), at most four, and how many more.
pub fn names_list(names: &[String]) -> String {
    const SHOWN: usize = 4;
    if names.is_empty() {
        return "none".into();
    }
    let mut out = names
        .iter()
        .take(SHOWN)
        .map(|n| n.escape_debug().take(64).collect::<String>())
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        out.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6125's rules, one row per case: (the certificate's DNS names, the host, covered).
    #[test]
    fn a_certificate_covers_the_hosts_its_dns_names_name_and_one_label_under_a_wildcard() {
        let rows: &[(&[&str], &str, bool)] = &[
            (&["bank.example.com"], "bank.example.com", true),
            (&["bank.example.com"], "BANK.Example.COM", true),
            (&["bank.example.com"], "bank.example.com.", true),
            (&["bank.example.com."], "bank.example.com", true),
            (&["bank.example.com"], "evil.example.com", false),
            (&["bank.example.com"], "a.bank.example.com", false),
            (&["bank.example.com"], "example.com", false),
            (&["bank.example.com"], "*.example.com", false),
            (&["a.example.com", "b.example.com"], "b.example.com", true),
            // A wildcard: one label in its place, never the name itself nor two labels.
            (&["*.example.com"], "a.example.com", true),
            (&["*.example.com"], "A.EXAMPLE.COM.", true),
            (&["*.example.com"], "example.com", false),
            (&["*.example.com"], "a.b.example.com", false),
            (&["*.example.com"], ".example.com", false),
            (&["*.example.com"], "a.example.org", false),
            (&["*.example.com"], "aexample.com", false),
            // A wildcard host needs the same wildcard name.
            (&["*.example.com"], "*.example.com", true),
            (&["*.example.com"], "*.EXAMPLE.com", true),
            (&["a.example.com"], "*.example.com", false),
            (&["*.example.com"], "*.a.example.com", false),
            (&["*.a.example.com"], "*.example.com", false),
            // Not wildcards: partial, not leftmost, over one label, doubled.
            (&["b*.example.com"], "bank.example.com", false),
            (&["*k.example.com"], "bank.example.com", false),
            (&["bank.*.com"], "bank.example.com", false),
            (&["*.com"], "example.com", false),
            (&["*"], "localhost", false),
            (&["*.*.example.com"], "a.b.example.com", false),
            // Nothing covers nothing.
            (&[], "bank.example.com", false),
            (&[""], "", false),
        ];
        for (names, host, want) in rows {
            let names: Vec<String> = names.iter().map(|n| normal(n)).collect();
            assert_eq!(covers(&names, host), *want, "{names:?} for {host:?}");
        }
    }

    /// A certificate's names are the user's bytes: a message lists them escaped,
    /// bounded, a few of them.
    #[test]
    fn a_message_lists_a_few_names_escaped() {
        let names: Vec<String> = [
            "a.example.com\nFORGED line",
            &"x".repeat(300),
            "c",
            "d",
            "e",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let m = names_list(&names);
        assert!(m.starts_with("a.example.com\\nFORGED line, "), "{m}");
        assert!(!m.contains('\n') && m.ends_with(", c, d and 1 more"), "{m}");
        assert!(m.len() < 200, "{m}");
        assert_eq!(names_list(&[]), "none");
    }

    fn cert(args: &[&str]) -> Vec<u8> {
        let d = tempfile::tempdir().unwrap();
        let (k, c) = (d.path().join("k"), d.path().join("c"));
        let out = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args([
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "2",
                "-outform",
                "DER",
            ])
            .args(args)
            .arg("-keyout")
            .arg(&k)
            .arg("-out")
            .arg(&c)
            .output()
            .expect("the openssl command");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read(c).unwrap()
    }

    /// Only dNSName entries are names; a common name is never one (a certificate without
    /// a subjectAltName covers no host, whatever its CN says).
    #[test]
    fn the_names_are_the_dns_subject_alt_names_never_the_common_name() {
        let cn_only = cert(&["-subj", "/CN=bank.example.com"]);
        assert!(dns_names(&cn_only).is_empty());
        assert!(!covers(&dns_names(&cn_only), "bank.example.com"));
        let mixed = cert(&[
            "-subj",
            "/CN=cn.example.com",
            "-addext",
            "subjectAltName=DNS:B.example.com.,IP:198.18.0.1,email:a@example.com,DNS:*.example.org,DNS:b.example.com",
        ]);
        assert_eq!(dns_names(&mixed), ["*.example.org", "b.example.com"]);
        assert!(!covers(&dns_names(&mixed), "cn.example.com"));
        assert!(!covers(&dns_names(&mixed), "198.18.0.1"));
        assert!(dns_names(b"not DER").is_empty());
    }
}
