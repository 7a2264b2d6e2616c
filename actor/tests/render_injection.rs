//! Injection tests: hostile values are refused by `State::from_json` before anything is
//! rendered, and, for random valid states, the rendered files have exactly the lines the
//! templates write (no value adds a line).

use k8slb_actor::render::Renderer;
use k8slb_actor::view::{view, ViewOptions};
use k8slb_common::state::{Provider, State};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::path::Path;

fn base() -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls-port-443-redirect.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    // The base itself is valid.
    State::from_json(&v.to_string()).unwrap();
    v
}

fn hostile() -> Vec<String> {
    let mut v: Vec<String> = [
        "a\nb", "a\rb", "a{b", "a}b", "a;b", "a#b", "a\"b", "a'b", "a b", "a\tb", "a\0b", "a\\b",
        "$(id)", "a`b`",
    ]
    .map(String::from)
    .to_vec();
    v.push("x".repeat(10_000));
    v
}

/// Rename the key `from` of the object at `pointer` to `to`.
fn rename_key(v: &mut Value, pointer: &str, from: &str, to: &str) {
    let obj = v.pointer_mut(pointer).unwrap().as_object_mut().unwrap();
    let x = obj.remove(from).unwrap();
    obj.insert(to.to_string(), x);
}

fn refused(v: &Value, what: &str, bad: &str) {
    let r = State::from_json(&v.to_string());
    assert!(
        r.is_err(),
        "{what} = {:?} was accepted",
        &bad[..bad.len().min(40)]
    );
}

/// Puts a hostile value somewhere in the state JSON.
type Setter<'a> = Box<dyn Fn(&mut Value) + 'a>;

#[test]
fn hostile_names_are_refused() {
    for bad in hostile() {
        let b = bad.as_str();
        let setters: Vec<(&str, Setter)> = vec![
            (
                "pool name (key)",
                Box::new(|v| rename_key(v, "/config/pools", "default", b)),
            ),
            (
                "pool of an instance",
                Box::new(|v| v["instances"][0]["pool"] = json!(b)),
            ),
            (
                "node name (key)",
                Box::new(|v| rename_key(v, "/nodes", "lb-1", b)),
            ),
            (
                "member node",
                Box::new(|v| v["instances"][0]["members"][0]["node"] = json!(b)),
            ),
            (
                "interface",
                Box::new(|v| v["config"]["pools"]["default"]["interface"] = json!(b)),
            ),
            (
                "cert path",
                Box::new(|v| v["config"]["certPath"] = json!(format!("/etc/{b}"))),
            ),
            (
                "service key",
                Box::new(|v| rename_key(v, "/services", "shop/front", &format!("shop/{b}"))),
            ),
            (
                "port name",
                Box::new(|v| v["services"]["shop/front"]["ports"][0]["name"] = json!(b)),
            ),
            (
                "cert",
                Box::new(|v| v["services"]["shop/front"]["ports"][1]["cert"] = json!(b)),
            ),
            (
                "vip owner",
                Box::new(|v| v["vips"]["192.168.10.240"]["owner"] = json!(b)),
            ),
            (
                "email",
                Box::new(|v| v["config"]["keepalived"]["email"] = json!(format!("{b}@x.org"))),
            ),
            (
                "smtp server",
                Box::new(|v| v["config"]["keepalived"]["emailServer"] = json!(b)),
            ),
            (
                "endpoint ip",
                Box::new(|v| {
                    v["services"]["shop/front"]["ports"][0]["endpoints"][0]["ip"] =
                        json!(format!("10.0.0.1{b}"))
                }),
            ),
            (
                "source range",
                Box::new(|v| {
                    v["services"]["shop/front"]["ports"][0]["sourceRanges"] =
                        json!([format!("10.0.0.0/8{b}")])
                }),
            ),
            (
                "vip key",
                Box::new(|v| {
                    rename_key(v, "/vips", "192.168.10.240", &format!("192.168.10.240{b}"))
                }),
            ),
        ];
        for (what, set) in setters {
            let mut v = base();
            set(&mut v);
            refused(&v, what, b);
        }
    }
}

#[test]
fn config_lines_cannot_hold_a_line_break() {
    // Admin lines are free-form (their `{`, `;`, `#` are the admin's business) but one
    // element is one line: CR, LF, NUL and other controls, or >4096 bytes, are refused.
    for bad in ["a\nb", "a\rb", "a\0b", "a\u{1b}b", &"x".repeat(10_000)] {
        for section in [
            "haproxy/global",
            "haproxy/defaults",
            "haproxy/httpfront",
            "haproxy/tcpback",
            "nginx/global",
            "nginx/http",
            "nginx/proxy",
            "nginx/stream",
        ] {
            let mut v = base();
            let (a, b) = section.split_once('/').unwrap();
            v["config"][a][b] = json!(["ok", bad]);
            refused(&v, section, bad);
        }
    }
}

/// Fields that the schema keeps as free `String`s are never rendered.
#[test]
fn free_strings_in_the_state_are_not_rendered() {
    let mut v = base();
    let evil = "evil\n}\nglobal_defs { script_user root }";
    v["instances"][0]["name"] = json!(evil);
    v["services"]["shop/front"]["pool"] = json!(evil);
    v["config"]["pools"]["default"]["network"] = json!(evil);
    v["problems"] = json!([{"object": evil, "reason": evil, "message": evil}]);
    let state = State::from_json(&v.to_string()).expect("these fields are plain strings");
    let r = Renderer::embedded().unwrap();
    for proxy in [Provider::Haproxy, Provider::Nginx, Provider::Kubeproxy] {
        let mut o = ViewOptions::new(proxy);
        o.interfaces
            .insert("default".parse().unwrap(), "eth0".parse().unwrap());
        let out = r
            .render(&view(&state, &"lb-1".parse().unwrap(), &o).unwrap())
            .unwrap();
        for text in [Some(out.keepalived), out.proxy].into_iter().flatten() {
            assert!(!text.contains("evil"), "{text}");
        }
    }
}

#[test]
fn unsafe_option_paths_are_refused() {
    let state = State::from_json(&base().to_string()).unwrap();
    let mut o = ViewOptions::new(Provider::Haproxy);
    o.interfaces
        .insert("default".parse().unwrap(), "eth0".parse().unwrap());
    o.runtime_socket = "/run/x.sock\n  stats socket /tmp/y".into();
    assert!(view(&state, &"lb-1".parse().unwrap(), &o).is_err());
}

// ---------------------------------------------------------------------------------------
// Property: random valid states render to exactly the lines the template structure
// predicts, admin lines appear verbatim as whole lines, and nginx braces balance.

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,8}[a-z0-9]"
}

fn admin_line() -> impl Strategy<Value = String> {
    // Free-form but single-line, including characters that mean something in the configs.
    "[a-z][ -~]{0,30}".prop_map(|s| s.replace(['{', '}'], "x"))
}

prop_compose! {
    fn port_json(n: u16)(
        http in any::<bool>(), tls in any::<bool>(), redirect in any::<bool>(),
        backend_tls in any::<bool>(), check in any::<bool>(),
        stick in 0..3u8, pp in 0..3u8, udp in 0..6u8,
        ranges in proptest::collection::vec((0..255u8, 8..32u8), 0..3),
        eps in proptest::collection::vec((1..255u8, 1..255u8, 1..65535u16, any::<bool>()), 0..12),
    ) -> Value {
        let mut eps: Vec<_> = eps.into_iter().map(|(a, b, p, d)| (format!("10.9.{a}.{b}"), p, d)).collect();
        eps.sort(); eps.dedup_by(|x, y| x.0 == y.0 && x.1 == y.1);
        let stickiness = ["none", "source", "cookie"][stick as usize];
        let proxy_protocol = [None, Some("v1"), Some("v2")][pp as usize];
        json!({
            "protocol": if udp == 0 { "UDP" } else { "TCP" },
            "port": n, "mode": if http { "http" } else { "tcp" },
            "tls": tls, "cert": "default", "redirect": redirect, "backendTls": backend_tls,
            "check": check, "stickiness": stickiness,
            "stickinessTimeoutS": 600,
            "proxyProtocol": proxy_protocol,
            "sourceRanges": ranges.into_iter().map(|(a, l)| format!("{a}.0.0.0/{l}").parse::<ipnet::IpNet>().unwrap().trunc().to_string()).collect::<Vec<_>>(),
            "endpoints": eps.into_iter().map(|(ip, port, d)| json!({"ip": ip, "port": port, "draining": d})).collect::<Vec<_>>(),
        })
    }
}

fn state_strategy() -> impl Strategy<Value = Value> {
    let svc = (
        name(),
        name(),
        proptest::collection::vec(port_json(0), 1..4),
        any::<bool>(),
    );
    (
        proptest::collection::vec(svc, 0..6),
        proptest::collection::vec(admin_line(), 0..4),
        proptest::collection::vec(admin_line(), 0..4),
    )
        .prop_map(|(svcs, lines_a, lines_b)| {
            let mut v = base();
            v["services"] = json!({});
            v["config"]["haproxy"]["httpfront"] = json!(lines_a);
            v["config"]["haproxy"]["tcpback"] = json!(lines_b);
            v["config"]["nginx"]["proxy"] =
                json!(lines_a.iter().map(|l| format!("# {l}")).collect::<Vec<_>>());
            for (i, (ns, n, ports, v6)) in svcs.into_iter().enumerate() {
                let mut ips = vec![json!(format!("192.168.10.{}", 10 + i))];
                if v6 {
                    ips.push(json!(format!("fd00:10::{}", 10 + i)));
                }
                let ports: Vec<Value> = ports
                    .into_iter()
                    .enumerate()
                    .map(|(j, mut p)| {
                        p["port"] = json!(1000 + j as u16);
                        p
                    })
                    .collect();
                v["services"][format!("{ns}/{n}")] =
                    json!({"ips": ips, "pool": "default", "ipMode": "Proxy", "ports": ports});
            }
            v
        })
}

/// Lines the haproxy template writes for this view, computed independently.
fn haproxy_lines(v: &k8slb_actor::view::HaproxyView, skipped: usize) -> usize {
    let mut n = 1
        + 5 // comment, global, master-worker, pidfile, stats socket, expose-experimental-directives
        + v.global.len()
        + v.default_global.len()
        + 1
        + 1
        + v.defaults.len()
        + v.default_timeouts.len()
        + skipped;
    for f in &v.frontends {
        n += 1 + 1 + 2 + 1; // blank, frontend, bind, mode, default_backend
        n += f.source_ranges.is_some() as usize;
        if f.mode == k8slb_common::state::Mode::Http {
            // option forwardfor, 3 set-header, 2 del-header (the client certificate
            // headers a client sent), http-after-response Server
            n += f.redirect as usize + 7 + v.httpfront.len();
        } else {
            n += v.tcpfront.len();
        }
    }
    for b in &v.backends {
        n += 1 + 1 + 1 + b.slots.len();
        n += 2 * b.stick_source.is_some() as usize + b.cookie as usize;
        n += if b.mode == k8slb_common::state::Mode::Http {
            v.httpback.len()
        } else {
            v.tcpback.len()
        };
    }
    n
}

/// The template's fixed Server-header line of every HTTP frontend (parentheses, which no
/// validated value renders).
const SERVER_HEADER_LINE: &str =
    "http-after-response set-header Server haproxy unless { res.hdr(server) -m found }";

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn rendered_lines_are_template_lines(v in state_strategy()) {
        let state = State::from_json(&v.to_string()).unwrap();
        let r = Renderer::embedded().unwrap();
        let node = "lb-1".parse().unwrap();
        for proxy in [Provider::Haproxy, Provider::Nginx] {
            let mut o = ViewOptions::new(proxy);
            o.interfaces.insert("default".parse().unwrap(), "eth0".parse().unwrap());
            let nv = view(&state, &node, &o).unwrap();
            let out = r.render(&nv).unwrap();
            let text = out.proxy.unwrap();
            prop_assert!(text.ends_with('\n'));
            // k8slb's own fixed nginx lines (the Host and Server defaults): not templates,
            // but constants of render_http, with quotes and a regex.
            let base = k8slb_actor::render::nx_http_base(&state.config.nginx.http).join("\n");
            // And the client certificate headers a client sent, deleted in every
            // location (a constant name, an empty value).
            let cleared: Vec<String> = ["proxy", "grpc"]
                .iter()
                .flat_map(|m| {
                    [
                        k8slb_common::routes::CLIENT_CERT_VERIFY_HEADER,
                        k8slb_common::routes::CLIENT_CERT_HEADER,
                    ]
                    .map(|h| format!("{m}_set_header {h} \"\";"))
                })
                .collect();
            let admin: std::collections::HashSet<&str> = match proxy {
                Provider::Haproxy => state.config.haproxy.global.iter()
                    .chain(&state.config.haproxy.defaults).chain(&state.config.haproxy.httpfront)
                    .chain(&state.config.haproxy.tcpfront).chain(&state.config.haproxy.httpback)
                    .chain(&state.config.haproxy.tcpback).map(|l| l.as_str())
                    .chain([SERVER_HEADER_LINE]).collect(),
                _ => state.config.nginx.global.iter().chain(&state.config.nginx.http)
                    .chain(&state.config.nginx.proxy).chain(&state.config.nginx.upstream)
                    .chain(&state.config.nginx.stream).map(|l| l.as_str())
                    .chain(base.lines().map(str::trim_start))
                    .chain(cleared.iter().map(String::as_str)).collect(),
            };
            // Every line is an admin line verbatim or uses only the characters the
            // templates and validated values can produce.
            for line in text.lines() {
                let t = line.trim_start();
                let ok = admin.contains(t)
                    || t.starts_with("# ")
                    || t.chars().all(|c| c.is_ascii_alphanumeric() || " _-./:[]{}%;$=!,".contains(c));
                prop_assert!(ok, "unexpected line {:?}", line);
            }
            match proxy {
                Provider::Haproxy => {
                    let hp = nv.haproxy.as_ref().unwrap();
                    prop_assert_eq!(text.lines().count(), haproxy_lines(hp, nv.skipped.len()));
                }
                _ => {
                    let mut depth = 0i64;
                    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
                        depth += line.matches('{').count() as i64 - line.matches('}').count() as i64;
                        prop_assert!(depth >= 0);
                    }
                    prop_assert_eq!(depth, 0);
                }
            }
        }
    }
}
