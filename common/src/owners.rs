//! Who contributed what to a state: every block a proxy config renders comes from one
//! object, its owner: a Service (the state's `services`, by key), or the Ingress,
//! HTTPRoute, TLSRoute/TCPRoute/UDPRoute or Gateway that produced a route rule, a
//! listener's default action, a certificate or an L4 route ([`crate::routes`], `owner`).
//!
//! [`without`] removes a set of owners' contributions and leaves everything else as it
//! was: the actor's quarantine (issue 20) serves a state without the objects whose blocks
//! the proxy's checker refuses. Pure.

use crate::problem::ObjRef;
use crate::state::State;
use std::collections::BTreeSet;

/// Every owner of something in `state`, sorted: its Services, and the owners of its
/// route rules, default actions, certificates and L4 routes. Parts without an owner (a
/// state of an older watcher) are nobody's and never removed.
pub fn owners(state: &State) -> BTreeSet<ObjRef> {
    let mut out: BTreeSet<ObjRef> = state
        .services
        .keys()
        .cloned()
        .map(ObjRef::Service)
        .collect();
    for l in &state.http.listeners {
        out.extend(l.default_owner.iter().cloned());
        for v in &l.virtual_hosts {
            out.extend(v.rules.iter().filter_map(|r| r.owner.clone()));
        }
        if let Some(t) = &l.tls {
            out.extend(t.certificates.iter().filter_map(|c| c.owner.clone()));
        }
    }
    for s in &state.http.streams {
        out.extend(s.routes.iter().filter_map(|r| r.owner.clone()));
        if let Some(t) = &s.terminate {
            out.extend(t.certificates.iter().filter_map(|c| c.owner.clone()));
        }
    }
    out
}

/// `state` without what `remove` contributed: their Services (and their keys on their
/// VIPs; the VIPs stay), their route rules (a virtual host left without rules goes),
/// default actions, certificates and L4 routes. Listeners, backends, VIPs and
/// everything else stay as they were.
pub fn without(state: &State, remove: &BTreeSet<ObjRef>) -> State {
    let mut s = state.clone();
    if remove.is_empty() {
        return s;
    }
    let gone = |o: &Option<ObjRef>| o.as_ref().is_some_and(|o| remove.contains(o));
    s.services
        .retain(|k, _| !remove.contains(&ObjRef::Service(k.clone())));
    for v in s.vips.values_mut() {
        v.services
            .retain(|k| !remove.contains(&ObjRef::Service(k.clone())));
    }
    for l in &mut s.http.listeners {
        if gone(&l.default_owner) {
            l.default_action = None;
            l.default_owner = None;
        }
        for v in &mut l.virtual_hosts {
            v.rules.retain(|r| !gone(&r.owner));
        }
        l.virtual_hosts.retain(|v| !v.rules.is_empty());
        if let Some(t) = &mut l.tls {
            t.certificates.retain(|c| !gone(&c.owner));
        }
    }
    for st in &mut s.http.streams {
        st.routes.retain(|r| !gone(&r.owner));
        if let Some(t) = &mut st.terminate {
            t.certificates.retain(|c| !gone(&c.owner));
        }
    }
    s
}

/// What `of` contributed to `state`, each piece as its JSON, in a fixed order: equal
/// for two states exactly when those owners' Services, rules, default actions,
/// certificates and L4 routes (with where they are) are the same.
pub fn contributions(state: &State, of: &BTreeSet<ObjRef>) -> Vec<String> {
    let mine = |o: &Option<ObjRef>| o.as_ref().is_some_and(|o| of.contains(o));
    fn json<T: serde::Serialize>(v: &T) -> String {
        serde_json::to_string(v).unwrap_or_default()
    }
    let mut out = Vec::new();
    for (k, s) in &state.services {
        if of.contains(&ObjRef::Service(k.clone())) {
            out.push(format!("{k} {}", json(s)));
        }
    }
    for l in &state.http.listeners {
        let at = format!("{} {}", l.ip, l.port);
        if mine(&l.default_owner) {
            out.push(format!("{at} default {}", json(&l.default_action)));
        }
        for v in &l.virtual_hosts {
            for r in v.rules.iter().filter(|r| mine(&r.owner)) {
                out.push(format!("{at} {} {}", json(&v.host), json(r)));
            }
        }
        if let Some(t) = &l.tls {
            for c in t.certificates.iter().filter(|c| mine(&c.owner)) {
                out.push(format!("{at} cert {}", json(c)));
            }
        }
    }
    for st in &state.http.streams {
        for r in st.routes.iter().filter(|r| mine(&r.owner)) {
            out.push(format!("{} {} {}", st.ip, st.port, json(r)));
        }
        if let Some(t) = &st.terminate {
            for c in t.certificates.iter().filter(|c| mine(&c.owner)) {
                out.push(format!("{} {} cert {}", st.ip, st.port, json(c)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routes::{
        CertFile, Certificate, HttpRoutes, Listener, ListenerProtocol, ListenerTls, PathMatch,
        RouteAction, RouteMatch, RouteRule, StreamListener, StreamProtocol, StreamRoute,
        VirtualHost,
    };

    fn ing(name: &str) -> ObjRef {
        ObjRef::Ingress {
            namespace: "t".into(),
            name: name.into(),
        }
    }

    fn rule(path: &str, owner: Option<ObjRef>) -> RouteRule {
        let mut r = RouteRule::new(
            RouteMatch::on_path(PathMatch::Prefix(path.parse().unwrap())),
            RouteAction::forward("t/web:80".parse().unwrap()),
        );
        r.owner = owner;
        r
    }

    fn state() -> State {
        let mut s: State = serde_json::from_str(include_str!("../tests/fixtures/owners-base.json"))
            .expect("fixture");
        s.http = HttpRoutes {
            listeners: vec![Listener {
                ip: "198.18.0.10".parse().unwrap(),
                port: 443,
                protocol: ListenerProtocol::Https,
                tls: Some(ListenerTls {
                    certificates: vec![
                        Certificate {
                            file: CertFile::Pool {
                                pool: "default".parse().unwrap(),
                            },
                            hosts: vec!["a.example".parse().unwrap()],
                            owner: Some(ing("a")),
                        },
                        Certificate {
                            file: CertFile::Pool {
                                pool: "other".parse().unwrap(),
                            },
                            hosts: vec!["b.example".parse().unwrap()],
                            owner: Some(ing("b")),
                        },
                    ],
                    default_certificate: None,
                    client_ca: None,
                    client_validation: Default::default(),
                    zones: None,
                }),
                virtual_hosts: vec![
                    VirtualHost::new(
                        Some("a.example".parse().unwrap()),
                        vec![rule("/a", Some(ing("a"))), rule("/old", None)],
                    ),
                    VirtualHost::new(
                        Some("b.example".parse().unwrap()),
                        vec![rule("/b", Some(ing("b")))],
                    ),
                ],
                default_action: Some(RouteAction::forward("t/web:80".parse().unwrap())),
                default_owner: Some(ing("b")),
            }],
            streams: vec![StreamListener {
                ip: "198.18.0.10".parse().unwrap(),
                port: 5000,
                protocol: StreamProtocol::Tcp,
                routes: vec![StreamRoute {
                    host: None,
                    backends: vec![],
                    invalid: 0,
                    owner: Some(ObjRef::L4Route {
                        kind: crate::names::L4Kind::Tcp,
                        namespace: "t".into(),
                        name: "tcp".into(),
                    }),
                    passthrough: false,
                }],
                terminate: None,
            }],
            ..Default::default()
        };
        s
    }

    #[test]
    fn owners_are_the_services_and_the_routes_objects() {
        let o: Vec<String> = owners(&state()).iter().map(|o| o.to_string()).collect();
        assert_eq!(
            o,
            [
                "Ingress t/a",
                "Ingress t/b",
                "Service default/db",
                "Service default/web",
                "TCPRoute t/tcp"
            ]
        );
    }

    #[test]
    fn without_removes_only_the_given_owners_contributions() {
        let s = state();
        assert_eq!(without(&s, &BTreeSet::new()), s);
        let gone: BTreeSet<ObjRef> =
            [ing("b"), ObjRef::Service("default/web".parse().unwrap())].into();
        let w = without(&s, &gone);
        assert_eq!(
            w.services.keys().map(|k| k.to_string()).collect::<Vec<_>>(),
            ["default/db"]
        );
        assert!(w
            .vips
            .values()
            .all(|v| v.services.iter().all(|k| k.name.as_str() != "web")));
        assert_eq!(w.vips.len(), s.vips.len(), "VIPs stay");
        let l = &w.http.listeners[0];
        assert_eq!(l.virtual_hosts.len(), 1, "b.example had only b's rule");
        assert_eq!(
            l.virtual_hosts[0].rules.len(),
            2,
            "a's rule and the ownerless one"
        );
        assert_eq!(l.default_action, None);
        let certs = &l.tls.as_ref().unwrap().certificates;
        assert_eq!(certs.len(), 1);
        assert_eq!(certs[0].owner, Some(ing("a")));
        assert_eq!(w.http.streams, s.http.streams, "the TCPRoute stays");
        assert_eq!(owners(&w).len(), owners(&s).len() - 2);
        // Everything else as it was.
        assert_eq!(w.config, s.config);
        assert_eq!(w.instances, s.instances);
        assert_eq!(w.http.backends, s.http.backends);
    }

    /// A terminating TLS listener's certificates are their owners' contributions: the
    /// quarantine takes out a refused owner's, the others' stay.
    #[test]
    fn a_terminating_streams_certificates_are_their_owners() {
        let mut s = state();
        let gw = |n: &str| ObjRef::Gateway {
            namespace: "infra".into(),
            name: n.into(),
        };
        let cert = |pool: &str, owner: ObjRef| Certificate {
            file: CertFile::Pool {
                pool: pool.parse().unwrap(),
            },
            hosts: vec![],
            owner: Some(owner),
        };
        s.http.streams[0].protocol = StreamProtocol::Tls;
        s.http.streams[0].terminate = Some(ListenerTls {
            certificates: vec![cert("default", gw("a")), cert("other", gw("b"))],
            default_certificate: None,
            client_ca: None,
            client_validation: Default::default(),
            zones: None,
        });
        assert!(owners(&s).contains(&gw("b")));
        let b: BTreeSet<ObjRef> = [gw("b")].into();
        assert_eq!(contributions(&s, &b).len(), 1);
        let w = without(&s, &b);
        let left = &w.http.streams[0].terminate.as_ref().unwrap().certificates;
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].owner, Some(gw("a")));
        assert!(!owners(&w).contains(&gw("b")));
    }

    #[test]
    fn contributions_change_only_with_the_owners_parts() {
        let s = state();
        let b: BTreeSet<ObjRef> = [ing("b")].into();
        let before = contributions(&s, &b);
        assert_eq!(before.len(), 3, "a rule, the default action, a certificate");
        let mut other = s.clone();
        other.http.listeners[0].virtual_hosts[0].rules.pop();
        other.services.clear();
        assert_eq!(
            contributions(&other, &b),
            before,
            "others' changes do not count"
        );
        let mut mine = s.clone();
        mine.http.listeners[0].virtual_hosts[1].rules[0].matches =
            RouteMatch::on_path(PathMatch::Prefix("/b2".parse().unwrap()));
        assert_ne!(contributions(&mine, &b), before);
    }

    #[test]
    fn owners_survive_the_state_json_and_older_states_still_load() {
        let s = state();
        let back = State::from_json(&s.to_json()).unwrap();
        assert_eq!(owners(&back), owners(&s));
        let old: State =
            serde_json::from_str(include_str!("../tests/fixtures/owners-base.json")).unwrap();
        assert!(old.http.listeners.is_empty());
    }
}
