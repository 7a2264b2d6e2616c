//! Validated names. Every value that can reach a rendered config file is one of these
//! newtypes, built once at the boundary (`FromStr` / serde) and trusted afterwards.
//!
//! The allow-lists are deliberately narrow: a name that a template may paste into
//! `haproxy.cfg`, `nginx.conf` or `keepalived.conf` can never hold whitespace, quotes,
//! braces, semicolons, `#`, CR/LF or anything else with meaning in those grammars.

use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;
use std::str::FromStr;

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}: {why}")]
pub struct NameError {
    pub what: &'static str,
    pub value: String,
    pub why: &'static str,
}

pub(crate) fn err(what: &'static str, value: &str, why: &'static str) -> NameError {
    // Keep hostile values short and printable in messages.
    let mut v: String = value.chars().take(80).collect();
    if value.chars().count() > 80 {
        v.push('…');
    }
    NameError {
        what,
        value: v,
        why,
    }
}

/// RFC 1123 label: lowercase alphanumerics and '-', starting and ending alphanumeric.
fn is_dns_label(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(|l| is_dns_label(l, 63))
}

/// A newtype over `String` whose only constructor is `FromStr` (and serde, `TryFrom`
/// through it); also used by [`crate::routes`].
macro_rules! string_newtype {
    ($(#[$m:meta])* $name:ident, $what:literal, $check:expr, $why:literal) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl FromStr for $name {
            type Err = NameError;
            fn from_str(s: &str) -> Result<Self, NameError> {
                let check: fn(&str) -> bool = $check;
                if check(s) {
                    Ok(Self(s.to_string()))
                } else {
                    Err($crate::names::err($what, s, $why))
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = NameError;
            fn try_from(s: String) -> Result<Self, NameError> {
                s.parse()
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}
pub(crate) use string_newtype;

string_newtype!(
    /// An IP pool's name: also a file name (`/etc/certs/<pool>.pem`) and part of VRRP
    /// instance names, so letters, digits, '-' and '_' only, at most 63 characters.
    PoolName,
    "pool name",
    |s| !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && s.as_bytes()[0].is_ascii_alphanumeric(),
    "use 1-63 letters, digits, '-' or '_', starting with a letter or digit"
);

string_newtype!(
    /// A Kubernetes Node name (RFC 1123 subdomain).
    NodeName,
    "node name",
    is_dns_subdomain,
    "a node name is an RFC 1123 subdomain (lowercase letters, digits, '-' and '.')"
);

string_newtype!(
    /// A Kubernetes namespace or Service name (RFC 1123 label, at most 63 characters).
    ObjectName,
    "object name",
    |s| is_dns_label(s, 63),
    "must be an RFC 1123 label: 1-63 lowercase letters, digits or '-'"
);

string_newtype!(
    /// A Service port name (RFC 1123 label, at most 15 characters in Kubernetes; we take 63).
    PortName,
    "port name",
    |s| is_dns_label(s, 63),
    "must be an RFC 1123 label: lowercase letters, digits or '-'"
);

string_newtype!(
    /// A network interface name as the kernel accepts it (at most 15 bytes, no '/',
    /// whitespace or ':'); we narrow it further to letters, digits, '-', '_' and '.'.
    IfName,
    "interface name",
    |s| !s.is_empty()
        && s.len() <= 15
        && s != "."
        && s != ".."
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.'),
    "use 1-15 letters, digits, '-', '_' or '.'"
);

string_newtype!(
    /// An e-mail address for keepalived notifications: a conservative allow-list.
    Email,
    "e-mail address",
    |s| {
        let Some((local, domain)) = s.split_once('@') else { return false };
        !local.is_empty()
            && local.len() <= 64
            && local.bytes().all(|b| b.is_ascii_alphanumeric() || b"._%+-".contains(&b))
            && is_dns_subdomain(&domain.to_ascii_lowercase())
    },
    "expected local@domain with letters, digits and ._%+- only"
);

string_newtype!(
    /// The SMTP server for keepalived notifications: a host name or an IP address
    /// (keepalived takes no `host:port` form here).
    SmtpServer,
    "SMTP server",
    |s| s.parse::<std::net::IpAddr>().is_ok() || is_dns_subdomain(&s.to_ascii_lowercase()),
    "expected a host name or an IP address"
);

/// `<namespace>/<name>` of a Service (or any namespaced object).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    pub namespace: ObjectName,
    pub name: ObjectName,
}

impl ServiceKey {
    pub fn new(namespace: &str, name: &str) -> Result<Self, NameError> {
        Ok(Self {
            namespace: namespace.parse()?,
            name: name.parse()?,
        })
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl FromStr for ServiceKey {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        let (ns, name) = s
            .split_once('/')
            .ok_or_else(|| err("service key", s, "expected <namespace>/<name>"))?;
        Self::new(ns, name)
    }
}

impl Serialize for ServiceKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ServiceKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

string_newtype!(
    /// The name of an object whose names are RFC 1123 subdomains (Ingress, Secret, ...).
    SubdomainName,
    "object name",
    is_dns_subdomain,
    "must be an RFC 1123 subdomain: lowercase letters, digits, '-' and '.'"
);

/// `<namespace>/<name>` of an object whose name is a subdomain: an Ingress (and the
/// Gateway API's routes). Its text form is that of [`ServiceKey`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub namespace: ObjectName,
    pub name: SubdomainName,
}

impl ObjectKey {
    pub fn new(namespace: &str, name: &str) -> Result<Self, NameError> {
        Ok(Self {
            namespace: namespace.parse()?,
            name: name.parse()?,
        })
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl FromStr for ObjectKey {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        let (ns, name) = s
            .split_once('/')
            .ok_or_else(|| err("object key", s, "expected <namespace>/<name>"))?;
        Self::new(ns, name)
    }
}

impl Serialize for ObjectKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ObjectKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// A raw line of admin-supplied proxy configuration (k8slb's `haproxy.global[]` and the
/// like). These come from the cluster admin's global ConfigMap, not from tenants, so their
/// content is free-form; but a line can never smuggle in another line: CR, LF, NUL and
/// other control characters are refused.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ConfigLine(String);

impl ConfigLine {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for ConfigLine {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        if s.len() > 4096 {
            return Err(err("config line", s, "longer than 4096 bytes"));
        }
        if s.chars().any(|c| c.is_control() && c != '\t') {
            return Err(err(
                "config line",
                s,
                "contains a control character (CR, LF, NUL, ...): one array element is one line",
            ));
        }
        Ok(Self(s.to_string()))
    }
}

impl<'de> Deserialize<'de> for ConfigLine {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for ConfigLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `<pool>=<ifname>` (the actor's `--interface`): the interface a pool's VIPs go on.
pub fn parse_interface(s: &str) -> Result<(PoolName, IfName), String> {
    let (pool, ifname) = s
        .split_once('=')
        .ok_or_else(|| format!("expected <pool>=<ifname>, got {s:?}"))?;
    Ok((
        pool.parse().map_err(|e| format!("{e}"))?,
        ifname.parse().map_err(|e| format!("{e}"))?,
    ))
}

/// The L4 route kinds (experimental channel): `TLSRoute`, `TCPRoute`, `UDPRoute`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum L4Kind {
    #[default]
    Tls,
    Tcp,
    Udp,
}

impl L4Kind {
    pub const ALL: [L4Kind; 3] = [L4Kind::Tls, L4Kind::Tcp, L4Kind::Udp];

    /// The kind as the API names it.
    pub fn as_str(self) -> &'static str {
        match self {
            L4Kind::Tls => "TLSRoute",
            L4Kind::Tcp => "TCPRoute",
            L4Kind::Udp => "UDPRoute",
        }
    }

    /// The resource (plural) the API serves it as.
    pub fn plural(self) -> &'static str {
        match self {
            L4Kind::Tls => "tlsroutes",
            L4Kind::Tcp => "tcproutes",
            L4Kind::Udp => "udproutes",
        }
    }

    pub fn parse(kind: &str) -> Option<L4Kind> {
        L4Kind::ALL.into_iter().find(|k| k.as_str() == kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_flag() {
        let (p, i) = parse_interface("default=eth0").unwrap();
        assert_eq!((p.as_str(), i.as_str()), ("default", "eth0"));
        assert!(parse_interface("default").is_err());
        assert!(parse_interface("default=eth 0").is_err());
        assert!(parse_interface("de;fault=eth0").is_err());
    }

    #[test]
    fn pool_names() {
        assert!("default".parse::<PoolName>().is_ok());
        assert!("ipv6_pool-2".parse::<PoolName>().is_ok());
        for bad in [
            "",
            "../x",
            "a b",
            "a\nb",
            "a;b",
            "a{",
            "-x",
            "x#",
            &"a".repeat(64),
        ] {
            assert!(bad.parse::<PoolName>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn service_keys() {
        let k: ServiceKey = "default/web".parse().unwrap();
        assert_eq!(k.to_string(), "default/web");
        for bad in [
            "web",
            "default/web\nx",
            "Default/web",
            "a/b/c",
            "/web",
            "ns/",
        ] {
            assert!(bad.parse::<ServiceKey>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn config_lines_refuse_line_breaks() {
        assert!("maxconn 4096".parse::<ConfigLine>().is_ok());
        assert!("option\tforwardfor".parse::<ConfigLine>().is_ok());
        assert!("a\nb".parse::<ConfigLine>().is_err());
        assert!("a\rb".parse::<ConfigLine>().is_err());
        assert!("a\0b".parse::<ConfigLine>().is_err());
    }

    #[test]
    fn interface_and_node_names() {
        assert!("eth0".parse::<IfName>().is_ok());
        assert!("br-lan.10".parse::<IfName>().is_ok());
        assert!("averyveryverylongname".parse::<IfName>().is_err());
        assert!("eth 0".parse::<IfName>().is_err());
        assert!("lb-1.example.com".parse::<NodeName>().is_ok());
        assert!("LB1".parse::<NodeName>().is_err());
        assert!("ops@example.com".parse::<Email>().is_ok());
        assert!("ops@exa mple.com".parse::<Email>().is_err());
        assert!("a\n@b.c".parse::<Email>().is_err());
        assert!("smtp.example.com".parse::<SmtpServer>().is_ok());
        assert!("2001:db8::25".parse::<SmtpServer>().is_ok());
        assert!("smtp.example.com:25".parse::<SmtpServer>().is_err());
    }
}
