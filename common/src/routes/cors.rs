//! The Gateway API CORS filter in the route model: which origins may read a rule's
//! answers, what a preflight request (an `OPTIONS` with `Origin` and
//! `Access-Control-Request-Method`) is told, and what the answers to the others carry.
//! Every value is validated here (origins as `scheme://host[:port]`, methods, header
//! names): the renders write them into configs as they are.

use super::*;

/// One allowed origin: `scheme://host[:port]`, the host possibly `*.` and a domain (any
/// number of labels in place of the `*`, as the Gateway API says), lowercase.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CorsOrigin(String);

impl CorsOrigin {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `(scheme, host, port)`; `host` starts with `*.` for a wildcard.
    fn parts(&self) -> (&str, &str, Option<&str>) {
        let (scheme, rest) = self.0.split_once("://").unwrap_or(("", &self.0));
        match rest.split_once(':') {
            Some((host, port)) => (scheme, host, Some(port)),
            None => (scheme, rest, None),
        }
    }

    /// Is `origin` (an `Origin` header's value, compared in lowercase) one this pattern
    /// allows?
    pub fn allows(&self, origin: &str) -> bool {
        let origin = origin.to_ascii_lowercase();
        let (scheme, host, port) = self.parts();
        let Some(rest) = origin.strip_prefix(&format!("{scheme}://")) else {
            return false;
        };
        let (o_host, o_port) = match rest.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        };
        if o_port != port {
            return false;
        }
        match host.strip_prefix('*') {
            Some(suffix) => o_host.strip_suffix(suffix).is_some_and(|labels| {
                !labels.is_empty()
                    && labels
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
                    && !labels.starts_with('.')
                    && !labels.ends_with('.')
            }),
            None => o_host == host,
        }
    }

    /// A regex (PCRE and HAProxy's) that matches exactly the `Origin` values this
    /// pattern allows, in lowercase: `.` as `[.]`, the `*` as one or more labels.
    pub fn regex(&self) -> String {
        let (scheme, host, port) = self.parts();
        let dots = |s: &str| s.replace('.', "[.]");
        let host = match host.strip_prefix('*') {
            Some(suffix) => format!("[a-z0-9-]+([.][a-z0-9-]+)*{}", dots(suffix)),
            None => dots(host),
        };
        let port = port.map(|p| format!(":{p}")).unwrap_or_default();
        format!("^{}://{host}{port}$", dots(scheme).replace('+', "[+]"))
    }
}

impl std::str::FromStr for CorsOrigin {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| Err(format!("CORS origin {}: {why}", crate::problem::cut(s, 80)));
        if s.len() > 253 + 32 {
            return bad("too long");
        }
        let lower = s.to_ascii_lowercase();
        let Some((scheme, rest)) = lower.split_once("://") else {
            return bad("not scheme://host[:port] (or *)");
        };
        let scheme_ok = scheme.len() <= 16
            && scheme.starts_with(|c: char| c.is_ascii_lowercase())
            && scheme
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+.-".contains(&b));
        if !scheme_ok {
            return bad("invalid scheme");
        }
        let (host, port) = match rest.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        };
        if let Some(p) = port {
            if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return bad("invalid port");
            }
        }
        let name = host.strip_prefix("*.").unwrap_or(host);
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        };
        if name.is_empty() || !name.split('.').all(label_ok) {
            return bad("invalid host (DNS labels, optionally after `*.`)");
        }
        Ok(CorsOrigin(lower))
    }
}

impl TryFrom<String> for CorsOrigin {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<CorsOrigin> for String {
    fn from(o: CorsOrigin) -> String {
        o.0
    }
}

/// The CORS filter of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cors {
    /// `*` among `allowOrigins`: every origin.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub any_origin: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub origins: Vec<CorsOrigin>,
    /// `*` among `allowMethods`: a preflight is told the method it asks for.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub any_method: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<Method>,
    /// `*` among `allowHeaders`: a preflight is told the headers it asks for.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub any_header: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<FieldName>,
    /// `*` among `exposeHeaders`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expose_any: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose: Vec<FieldName>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub credentials: bool,
    /// Seconds a preflight's answer may be cached (the API's default: 5).
    pub max_age: u32,
}

impl Cors {
    /// Does the rule allow `origin` (an `Origin` header's value)?
    pub fn allows(&self, origin: &str) -> bool {
        self.any_origin || self.origins.iter().any(|o| o.allows(origin))
    }

    /// `Access-Control-Allow-Methods` of a preflight: the list, or None for `*` (the
    /// method asked for is told).
    pub fn methods_value(&self) -> Option<String> {
        (!self.any_method).then(|| {
            self.methods
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        })
    }

    /// `Access-Control-Allow-Headers` of a preflight: the list (None when empty), or
    /// None for `*` (the headers asked for are told: see `any_header`).
    pub fn headers_value(&self) -> Option<String> {
        (!self.any_header && !self.headers.is_empty()).then(|| join(&self.headers))
    }

    /// `Access-Control-Expose-Headers`: the list, `*`, or None.
    pub fn expose_value(&self) -> Option<String> {
        if self.expose_any {
            Some("*".into())
        } else if self.expose.is_empty() {
            None
        } else {
            Some(join(&self.expose))
        }
    }
}

fn join(names: &[FieldName]) -> String {
    names
        .iter()
        .map(|n| n.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_scheme_host_and_port_and_a_wildcard_takes_one_or_more_labels() {
        let o: CorsOrigin = "https://*.bar.com".parse().unwrap();
        for (origin, allowed) in [
            ("https://www.bar.com", true),
            ("https://xpto.www.bar.com", true),
            ("HTTPS://WWW.BAR.COM", true),
            ("https://bar.com", false),
            ("http://www.bar.com", false),
            ("https://www.bar.com:8443", false),
            ("https://www.bar.com.evil.com", false),
            ("https://evil.com/.bar.com", false),
            ("https://.bar.com", false),
        ] {
            assert_eq!(o.allows(origin), allowed, "{origin}");
            let re = regex_lite(&o.regex(), &origin.to_ascii_lowercase());
            assert_eq!(re, allowed, "regex {} for {origin}", o.regex());
        }
        let exact: CorsOrigin = "https://www.foo.com:8443".parse().unwrap();
        assert!(exact.allows("https://www.foo.com:8443"));
        assert!(!exact.allows("https://www.foo.com"));
        for bad in [
            "www.foo.com",
            "https://",
            "https://a b.com",
            "https://foo.com/path",
            "https://*",
            "https://x.*.com",
            "https://foo.com:port",
            "https://foo.com:123456",
            "ht\"tp://foo.com",
            "https://foo.com\nx",
        ] {
            assert!(bad.parse::<CorsOrigin>().is_err(), "{bad:?}");
        }
    }

    /// A tiny matcher for the regexes `regex` makes (anchors, `[.]`, `[a-z0-9-]+`, one
    /// optional group repeated): enough to check them against `allows` without a regex
    /// crate.
    fn regex_lite(re: &str, s: &str) -> bool {
        let re = re.trim_start_matches('^').trim_end_matches('$');
        match re.split_once("[a-z0-9-]+([.][a-z0-9-]+)*") {
            None => re.replace("[.]", ".").replace("[+]", "+") == s,
            Some((head, tail)) => {
                let (head, tail) = (
                    head.replace("[.]", ".").replace("[+]", "+"),
                    tail.replace("[.]", "."),
                );
                let Some(mid) = s.strip_prefix(&head).and_then(|r| r.strip_suffix(&tail)) else {
                    return false;
                };
                !mid.is_empty()
                    && mid.split('.').all(|l| {
                        !l.is_empty()
                            && l.bytes()
                                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    })
            }
        }
    }
}
