//! The `loadbalancer/*` annotations of an object, read by one reader for Services,
//! Ingresses and Gateways: keys matched case-insensitively (k8slb's README writes
//! `loadBalancer/pool`), values trimmed (a YAML block scalar ends with a newline), one
//! length limit, control characters refused, an option given twice with different case
//! and values reported, an option that is not one of the kind's reported as unknown.
//!
//! What each option means is the caller's: this module knows only the syntax shared by
//! all of them, and gives each refusal as an [`Issue`] for the caller to report on its
//! object (with the reason and whether it blocks an address, which only it knows).

use crate::problem::Reason;
use std::collections::{BTreeMap, BTreeSet};

/// The prefix of k8slb's annotations, lowercased.
pub const PREFIX: &str = "loadbalancer/";

/// The longest value read (bytes, after trimming): longer ones are refused. An address
/// list (`loadbalancer/ips`) is the longest value an option takes.
pub const MAX_VALUE_LEN: usize = 1024;

/// A refused annotation: `option` is its name without the prefix, lowercased.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub reason: Reason,
    pub option: String,
    pub message: String,
}

/// The known options by name (lowercased, without the prefix) with their trimmed values,
/// and the options whose value was refused (so ignored).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Annotations {
    values: BTreeMap<String, String>,
    refused: BTreeSet<String>,
}

/// `s` cut to 64 characters, for messages (written with `{:?}`, which escapes what is
/// not printable).
fn short(s: &str) -> String {
    s.chars().take(64).collect()
}

impl Annotations {
    /// The options in `known` from `annotations` (an object's `metadata.annotations`);
    /// every refusal appended to `issues`.
    pub fn read(
        annotations: Option<&BTreeMap<String, String>>,
        known: &[&str],
        issues: &mut Vec<Issue>,
    ) -> Annotations {
        let mut a = Annotations::default();
        for (k, v) in annotations.into_iter().flatten() {
            a.add(k, v, known, issues);
        }
        a
    }

    fn add(&mut self, k: &str, v: &str, known: &[&str], issues: &mut Vec<Issue>) {
        let lk = k.to_ascii_lowercase();
        let Some(opt) = lk.strip_prefix(PREFIX) else {
            return;
        };
        let mut issue = |reason, message| {
            issues.push(Issue {
                reason,
                option: opt.to_string(),
                message,
            })
        };
        if !known.contains(&opt) {
            let why = if opt == "config" {
                " (a raw proxy configuration from tenants is not supported, on purpose: see docs/ingress.md)"
            } else {
                ""
            };
            issue(
                Reason::UnknownAnnotation,
                format!(
                    "annotation {:?} is not one of {PREFIX}{{{}}}; ignored{why}",
                    short(k),
                    known.join(",")
                ),
            );
            return;
        }
        let v = v.trim();
        if v.len() > MAX_VALUE_LEN || v.chars().any(char::is_control) {
            issue(
                Reason::InvalidAnnotation,
                format!(
                    "annotation {PREFIX}{opt}: value {:?} is too long (over {MAX_VALUE_LEN} bytes) or holds control characters; ignored",
                    short(v)
                ),
            );
            self.refused.insert(opt.to_string());
            return;
        }
        if let Some(prev) = self.values.get(opt) {
            if prev != v {
                issue(
                    Reason::InvalidAnnotation,
                    format!(
                        "annotation {PREFIX}{opt} is given twice with different case and values; using {:?}",
                        short(prev)
                    ),
                );
            }
            return;
        }
        self.values.insert(opt.to_string(), v.to_string());
    }

    /// The value of option `k` (lowercase, without the prefix), trimmed.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.values.get(k).map(String::as_str)
    }

    /// [`Self::get`], lowercased.
    pub fn get_lc(&self, k: &str) -> Option<String> {
        self.get(k).map(str::to_ascii_lowercase)
    }

    /// Every option given, with its value, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Was the value of `k` refused (so ignored)?
    pub fn refused(&self, k: &str) -> bool {
        self.refused.contains(k)
    }

    /// `true` / `false` (any case); anything else, blank included, is `None`.
    pub fn flag(&self, k: &str) -> Option<bool> {
        self.get(k).and_then(parse_flag)
    }
}

/// `true` / `false`, in any case.
pub fn parse_flag(v: &str) -> Option<bool> {
    if v.eq_ignore_ascii_case("true") {
        Some(true)
    } else if v.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, &str)], known: &[&str]) -> (Annotations, Vec<Issue>) {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut issues = Vec::new();
        let a = Annotations::read(Some(&map), known, &mut issues);
        (a, issues)
    }

    #[test]
    fn keys_match_in_any_case_and_values_are_trimmed() {
        let (a, issues) = read(
            &[("loadBalancer/Pool", " dmz\n"), ("other/pool", "x")],
            &["pool"],
        );
        assert_eq!(a.get("pool"), Some("dmz"));
        assert!(issues.is_empty(), "{issues:?}");
    }

    #[test]
    fn an_unknown_option_is_an_issue_and_config_says_why_it_is_refused() {
        let (a, issues) = read(&[("loadbalancer/config", "global\n")], &["pool"]);
        assert_eq!(a.iter().count(), 0);
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].reason, Reason::UnknownAnnotation);
        assert!(issues[0].message.contains("not supported, on purpose"));
    }

    #[test]
    fn a_value_at_the_limit_is_read_one_byte_over_or_with_a_control_character_refused() {
        let at = "a".repeat(MAX_VALUE_LEN);
        let over = "a".repeat(MAX_VALUE_LEN + 1);
        let (a, issues) = read(&[("loadbalancer/ips", &at)], &["ips"]);
        assert_eq!(a.get("ips"), Some(at.as_str()));
        assert!(issues.is_empty());
        for bad in [over.as_str(), "a\u{7}b", "a\nb"] {
            let (a, issues) = read(&[("loadbalancer/ips", bad)], &["ips"]);
            assert_eq!(a.get("ips"), None, "{bad:?}");
            assert!(a.refused("ips"));
            assert_eq!(issues[0].reason, Reason::InvalidAnnotation);
            assert_eq!(issues[0].option, "ips");
            assert!(issues[0].message.len() < 400, "messages are cut");
        }
    }

    #[test]
    fn an_option_twice_with_different_values_keeps_the_first_in_key_order_and_says_so() {
        let (a, issues) = read(
            &[("loadbalancer/pool", "a"), ("loadBalancer/pool", "b")],
            &["pool"],
        );
        // BTreeMap order: "loadBalancer/pool" < "loadbalancer/pool".
        assert_eq!(a.get("pool"), Some("b"));
        assert_eq!(issues.len(), 1);
        let (_, same) = read(
            &[("loadbalancer/pool", "a"), ("loadBalancer/pool", "a")],
            &["pool"],
        );
        assert!(same.is_empty());
    }

    #[test]
    fn flags_are_true_or_false_in_any_case_else_automatic() {
        let (a, _) = read(
            &[
                ("loadbalancer/ssl", "TRUE"),
                ("loadbalancer/nocheck", "False"),
                ("loadbalancer/sslbackend", "yes"),
            ],
            &["ssl", "nocheck", "sslbackend"],
        );
        assert_eq!(a.flag("ssl"), Some(true));
        assert_eq!(a.flag("nocheck"), Some(false));
        assert_eq!(a.flag("sslbackend"), None);
        assert_eq!(a.flag("sslredirect"), None);
    }
}
