//! An Ingress's annotations: the known ones read and validated (each refused value a
//! problem), an unknown one in our prefix said to be unknown.

use super::*;
use crate::annotations::{Annotations, Issue};

/// An Ingress's `loadbalancer/*` options, by the shared reader ([`crate::annotations`]);
/// what it refuses appended to `issues`.
pub(super) fn read_annotations(ing: &Ingress, issues: &mut Vec<Issue>) -> Annotations {
    Annotations::read(ing.metadata.annotations.as_ref(), KNOWN_ANNOTATIONS, issues)
}

pub(super) const KNOWN_ANNOTATIONS: &[&str] = &[
    "pool",
    "sslredirect",
    "http",
    "http-port",
    "https-port",
    "stickiness",
    "stickiness-cookie",
    "scale",
];

/// An Ingress's `loadbalancer/*` settings, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Settings {
    pub(super) ssl_redirect: bool,
    pub(super) http: bool,
    pub(super) http_port: u16,
    pub(super) https_port: u16,
    pub(super) sticky: Option<Sticky>,
}

impl Settings {
    pub(super) fn read(ing: &Ingress, problems: &mut BTreeSet<Problem>) -> Settings {
        let mut s = Settings {
            ssl_redirect: true,
            http: true,
            http_port: DEFAULT_HTTP_PORT,
            https_port: DEFAULT_HTTPS_PORT,
            sticky: None,
        };
        let bad = |problems: &mut BTreeSet<Problem>, opt: &str, v: &str, what: &str| {
            problems.insert(problem(
                ing,
                reason::INVALID_ANNOTATION,
                format!(
                    "loadbalancer/{opt}: {:?} is not {what}; ignored",
                    v.chars().take(64).collect::<String>()
                ),
            ));
        };
        let mut kind: Option<&str> = None;
        let mut cookie: Option<CookieName> = None;
        let mut issues = Vec::new();
        let list = read_annotations(ing, &mut issues);
        for i in issues {
            problems.insert(problem(ing, i.reason, i.message));
        }
        for (opt, v) in list.iter() {
            let flag = crate::annotations::parse_flag;
            let port = |v: &str| v.parse::<u16>().ok().filter(|p| *p != 0);
            match opt {
                "pool" => {} // read by `select`
                "scale" => {
                    if let Err(message) = crate::scale::parse(v) {
                        problems.insert(problem(ing, reason::INVALID_ANNOTATION, message));
                    }
                }
                "sslredirect" => match flag(v) {
                    Some(b) => s.ssl_redirect = b,
                    None => bad(problems, opt, v, "true or false"),
                },
                "http" => match flag(v) {
                    Some(b) => s.http = b,
                    None => bad(problems, opt, v, "true or false"),
                },
                "http-port" => match port(v) {
                    Some(p) => s.http_port = p,
                    None => bad(problems, opt, v, "a port (1-65535)"),
                },
                "https-port" => match port(v) {
                    Some(p) => s.https_port = p,
                    None => bad(problems, opt, v, "a port (1-65535)"),
                },
                "stickiness" => match v.to_ascii_lowercase().as_str() {
                    "none" | "" => kind = Some("none"),
                    "source" => kind = Some("source"),
                    "cookie" => kind = Some("cookie"),
                    _ => bad(problems, opt, v, "none, source or cookie"),
                },
                "stickiness-cookie" => match v.parse::<CookieName>() {
                    Ok(c) => cookie = Some(c),
                    Err(_) => bad(
                        problems,
                        opt,
                        v,
                        "a cookie name (letters, digits, -_.!*+^~)",
                    ),
                },
                _ => unreachable!("unknown options are skipped above"),
            }
        }
        s.sticky = match kind {
            Some("source") => Some(Sticky::Source),
            Some("cookie") => Some(Sticky::Cookie {
                name: cookie.unwrap_or_else(|| DEFAULT_COOKIE.parse().expect("valid")),
            }),
            _ => None,
        };
        s.plain_http_apart(ing, problems);
        s
    }
    /// Plain HTTP on the HTTPS port cannot be: off, with a problem.
    fn plain_http_apart(&mut self, ing: &Ingress, problems: &mut BTreeSet<Problem>) {
        if self.http && self.http_port == self.https_port {
            problems.insert(problem(
                ing,
                reason::PORT_CONFLICT,
                format!(
                    "loadbalancer/http-port and https-port are both {}; plain HTTP is off",
                    self.http_port
                ),
            ));
            self.http = false;
        }
    }
}
