//! Route models of the costs one tenant can put on the others (issue 20), shared by the
//! render tests (`tests/render_http.rs`) and the bench (`benches/tenant_cost.rs`, which
//! includes this file by path).

#![allow(dead_code)]

use k8slb_common::routes::{
    BackendId, BackendState, HeaderEdits, HeaderMatch, HeaderValue, HttpRoutes, Listener,
    ListenerProtocol, PathMatch, QueryMatch, RouteAction, RouteMatch, RouteRule, RuleFilters,
    VirtualHost,
};
use k8slb_common::state::Endpoint;
use std::net::IpAddr;

pub const TENANT_VIP: &str = "198.18.0.10";

/// The backends `a` and `b` (one endpoint each, `a_ep` and `b_ep`).
fn backends(a_ep: (&str, u16), b_ep: (&str, u16)) -> (BackendId, BackendId, HttpRoutes) {
    let a: BackendId = "default/nginx-service:80".parse().unwrap();
    let b: BackendId = "default/nginx-service1:8080".parse().unwrap();
    let st = |(ip, port): (&str, u16)| BackendState {
        endpoints: vec![Endpoint {
            ip: ip.parse().unwrap(),
            port,
            draining: false,
        }],
        stickiness: None,
        protocol: Default::default(),
        tls: None,
    };
    let routes = HttpRoutes {
        backends: [(a.clone(), st(a_ep)), (b.clone(), st(b_ep))]
            .into_iter()
            .collect(),
        ..HttpRoutes::default()
    };
    (a, b, routes)
}

fn listener(ip: IpAddr, virtual_hosts: Vec<VirtualHost>) -> Listener {
    Listener {
        ip,
        port: 80,
        protocol: ListenerProtocol::Http,
        tls: None,
        virtual_hosts,
        default_action: None,
        default_owner: None,
    }
}

/// `n` nested Prefix rules (`/a`, `/a/a`, ...) on `nested.example.com`, each with a
/// header match (`x-h: v<i>`) and a filter (sets `x-f: f<i>`): every deeper rule's
/// location is covered by every shallower one (what made nginx's render grow as n^2.8).
pub fn nested_conditional(n: usize) -> HttpRoutes {
    let (a, _, mut routes) = backends(("10.244.1.10", 80), ("10.244.1.11", 8000));
    let mut rules: Vec<RouteRule> = (1..=n)
        .map(|i| RouteRule {
            matches: RouteMatch {
                headers: vec![HeaderMatch {
                    name: "x-h".parse().unwrap(),
                    value: format!("v{i}").parse().unwrap(),
                }],
                ..RouteMatch::on_path(PathMatch::Prefix("/a".repeat(i).parse().unwrap()))
            },
            action: RouteAction::forward(a.clone()),
            filters: RuleFilters {
                request_headers: HeaderEdits {
                    set: vec![HeaderValue {
                        name: "x-f".parse().unwrap(),
                        value: format!("f{i}").parse().unwrap(),
                    }],
                    ..HeaderEdits::default()
                },
                ..RuleFilters::default()
            },
            owner: None,
        })
        .collect();
    rules.reverse(); // the longest prefix first: the model's precedence
    routes.listeners = vec![listener(
        TENANT_VIP.parse().unwrap(),
        vec![VirtualHost {
            host: Some("nested.example.com".parse().unwrap()),
            any_depth: false,
            rules,
        }],
    )];
    routes
}

/// The Gateway API's maxima on one host: `rules` rules (the plan's per-host cap allows
/// 256), each a match with a method, 16 headers and 16 query parameters (the CRD's
/// maxima); the first one's values as long as nginx can load (2,044 `-`: a match value
/// is escaped in a regex), a request header set to 4,093 characters, one added of the
/// longest value that fits after the request's own, a response header set to 4,093.
pub fn crd_maxima(rules: usize) -> HttpRoutes {
    let (a, b, mut routes) = backends(("10.244.1.10", 80), ("10.244.1.11", 8000));
    let long_match = "-".repeat(2044);
    let rule = |i: usize| {
        let value = |k: usize| {
            if i == 0 {
                long_match.clone()
            } else {
                format!("v{i}-{k}")
            }
        };
        let filters = if i == 0 {
            let hv = |name: &str, value: String| HeaderValue {
                name: name.parse().unwrap(),
                value: value.parse().unwrap(),
            };
            RuleFilters {
                request_headers: HeaderEdits {
                    set: vec![hv("x-set", "s".repeat(4093))],
                    add: vec![hv("x-add", "a".repeat(4095 - 2 - 7 - "x-add".len()))],
                    remove: vec![],
                },
                response_headers: HeaderEdits {
                    set: vec![hv("x-resp", "r".repeat(4093))],
                    ..HeaderEdits::default()
                },
                ..RuleFilters::default()
            }
        } else {
            RuleFilters::default()
        };
        RouteRule {
            matches: RouteMatch {
                path: PathMatch::Prefix(format!("/p{i}").parse().unwrap()),
                method: Some("GET".parse().unwrap()),
                headers: (0..16)
                    .map(|k| HeaderMatch {
                        name: format!("x-h{k:02}").parse().unwrap(),
                        value: value(k).parse().unwrap(),
                    })
                    .collect(),
                query: (0..16)
                    .map(|k| QueryMatch {
                        name: format!("q{k:02}").parse().unwrap(),
                        value: value(k).parse().unwrap(),
                    })
                    .collect(),
            },
            action: RouteAction::forward(if i.is_multiple_of(2) {
                a.clone()
            } else {
                b.clone()
            }),
            filters,
            owner: None,
        }
    };
    let mut v = VirtualHost {
        host: Some("max.example.com".parse().unwrap()),
        any_depth: false,
        rules: (0..rules).map(rule).collect(),
    };
    v.sort_rules();
    routes.listeners = vec![listener(TENANT_VIP.parse().unwrap(), vec![v])];
    routes
}

/// Two hosts on one listener: `quiet.example.com` (one Prefix `/` rule to backend `a`)
/// and `busy.example.com` with `n` rules that match a header (`x-h: v<i>`, to `b`) and,
/// last, a Prefix `/` rule to `b`.
pub fn busy_neighbour(n: usize, a_ep: (&str, u16), b_ep: (&str, u16)) -> HttpRoutes {
    let (a, b, mut routes) = backends(a_ep, b_ep);
    let mut busy: Vec<RouteRule> = (0..n)
        .map(|i| RouteRule {
            matches: RouteMatch {
                headers: vec![HeaderMatch {
                    name: "x-h".parse().unwrap(),
                    value: format!("v{i}").parse().unwrap(),
                }],
                ..RouteMatch::on_path(PathMatch::Prefix("/".parse().unwrap()))
            },
            action: RouteAction::forward(b.clone()),
            filters: RuleFilters::default(),
            owner: None,
        })
        .collect();
    busy.push(RouteRule::new(
        RouteMatch::on_path(PathMatch::Prefix("/".parse().unwrap())),
        RouteAction::forward(b.clone()),
    ));
    let quiet = VirtualHost {
        host: Some("quiet.example.com".parse().unwrap()),
        any_depth: false,
        rules: vec![RouteRule::new(
            RouteMatch::on_path(PathMatch::Prefix("/".parse().unwrap())),
            RouteAction::forward(a),
        )],
    };
    let busy = VirtualHost {
        host: Some("busy.example.com".parse().unwrap()),
        any_depth: false,
        rules: busy,
    };
    routes.listeners = vec![listener(TENANT_VIP.parse().unwrap(), vec![busy, quiet])];
    routes
}

/// `mirror.example.com`, one Prefix `/` rule to backend `a` (`a_ep`) that mirrors every
/// request to each of `mirror_eps` (one backend each): what a tenant's route costs the
/// proxy per request it copies.
pub fn mirroring(a_ep: (&str, u16), mirror_eps: &[(&str, u16)]) -> HttpRoutes {
    let (a, _, mut routes) = backends(a_ep, a_ep);
    let mut mirrors = Vec::new();
    for (i, (ip, port)) in mirror_eps.iter().enumerate() {
        let id: BackendId = format!("default/mirror{i}:80").parse().unwrap();
        routes.backends.insert(
            id.clone(),
            BackendState {
                endpoints: vec![Endpoint {
                    ip: ip.parse().unwrap(),
                    port: *port,
                    draining: false,
                }],
                stickiness: None,
                protocol: Default::default(),
                tls: None,
            },
        );
        mirrors.push(id);
    }
    let rule = RouteRule {
        filters: RuleFilters {
            mirrors,
            ..RuleFilters::default()
        },
        ..RouteRule::new(
            RouteMatch::on_path(PathMatch::Prefix("/".parse().unwrap())),
            RouteAction::forward(a),
        )
    };
    routes.listeners = vec![listener(
        TENANT_VIP.parse().unwrap(),
        vec![VirtualHost {
            host: Some("mirror.example.com".parse().unwrap()),
            any_depth: false,
            rules: vec![rule],
        }],
    )];
    routes
}
