use super::keepalived::advert_int;
use super::*;
use k8slb_common::state::Mode;

#[test]
fn fast_address_text_is_display_text() {
    for a in [
        "0.0.0.0:0",
        "10.1.2.3:8080",
        "255.255.255.255:65535",
        "127.0.0.1:1",
        "[::]:0",
        "[fd00::1]:443",
        "[2001:db8::ffff:1.2.3.4]:80",
    ] {
        let a: SocketAddr = a.parse().unwrap();
        let mut s = String::new();
        push_socket_addr(&mut s, a);
        assert_eq!(s, a.to_string());
    }
    for n in [0u32, 1, 9, 10, 99, 100, 65535, u32::MAX] {
        let mut s = String::new();
        push_u32(&mut s, n);
        assert_eq!(s, n.to_string());
    }
}

#[test]
fn advert_int_seconds() {
    assert_eq!(advert_int(100).unwrap(), "0.1");
    assert_eq!(advert_int(1000).unwrap(), "1");
    assert_eq!(advert_int(1500).unwrap(), "1.5");
    assert_eq!(advert_int(10).unwrap(), "0.01");
    assert_eq!(advert_int(250).unwrap(), "0.25");
    assert_eq!(advert_int(40950).unwrap(), "40.95");
    assert!(advert_int(0).is_err());
    assert!(advert_int(40960).is_err());
}

#[test]
fn slots() {
    assert_eq!(slot_count(0), 8);
    assert_eq!(slot_count(5), 8);
    // 8 replicas + a 25% surge + 2 still draining fit without a reload.
    assert_eq!(slot_count(8), 16);
    assert!(slot_count(8) >= 8 + 2 + 2);
    assert_eq!(slot_count(10), 16);
    assert_eq!(slot_count(11), 32);
    assert_eq!(slot_count(16), 32);
    let a: SocketAddr = "10.0.0.1:80".parse().unwrap();
    let b: SocketAddr = "10.0.0.2:80".parse().unwrap();
    let c: SocketAddr = "10.0.0.3:80".parse().unwrap();
    let first = assign_slots(&[(a, false), (b, false), (c, false)], None);
    let prev = Backend {
        name: "be".into(),
        mode: Mode::Tcp,
        stick_source: None,
        cookie: false,
        server_opts: String::new(),
        slots: first,
        track: None,
    };
    // b leaves, a new endpoint 10.0.0.0 (sorted first) arrives: a and c stay put.
    let z: SocketAddr = "10.0.0.0:80".parse().unwrap();
    let next = assign_slots(&[(z, false), (a, false), (c, true)], Some(&prev));
    assert_eq!(next[0].endpoint, Some(a));
    assert_eq!(next[1].endpoint, Some(z));
    assert_eq!(next[2].endpoint, Some(c));
    assert!(next[2].draining);
    assert_eq!(next.len(), 8);
    // Unchanged endpoints keep every slot, whether the slots hold them in the
    // endpoints' order (first) or not (next: z sits after a).
    for slots in [prev.slots.clone(), next.clone()] {
        let eps: Vec<(SocketAddr, bool)> = [z, a, b, c]
            .iter()
            .filter_map(|ep| {
                slots
                    .iter()
                    .find(|s| s.endpoint == Some(*ep))
                    .map(|s| (*ep, s.draining))
            })
            .collect();
        let be = Backend {
            slots: slots.clone(),
            ..prev.clone()
        };
        assert_eq!(assign_slots(&eps, Some(&be)), slots);
    }
}

#[test]
fn haproxy_global_defaults_unless_the_admin_sets_them() {
    let mut state = State::from_json(include_str!("../../tests/fixtures/empty.json")).unwrap();
    let node: NodeName = "n1".parse().unwrap();
    let opts = ViewOptions::new(Provider::Haproxy);
    let v = view(&state, &node, &opts).unwrap();
    assert_eq!(
        v.haproxy.unwrap().default_global,
        ["hard-stop-after 30m", "mworker-max-reloads 50"]
    );
    state.config.haproxy.global = vec!["hard-stop-after 5m".parse().unwrap()];
    let v = view(&state, &node, &opts).unwrap();
    let hp = v.haproxy.unwrap();
    assert_eq!(hp.default_global, ["mworker-max-reloads 50"]);
    assert_eq!(hp.global.len(), 1);
}

#[test]
fn httpfront_lines_the_template_writes_are_dropped_once() {
    let mut state = State::from_json(include_str!("../../tests/fixtures/empty.json")).unwrap();
    let node: NodeName = "n1".parse().unwrap();
    let opts = ViewOptions::new(Provider::Haproxy);
    // k8slb's defaults, spaced differently, and one line of the admin's own.
    state.config.haproxy.httpfront = [
        "option  forwardfor",
        "http-request add-header X-Forwarded-Proto https if { ssl_fc }",
        "http-request set-header X-Real-IP %[src]",
    ]
    .iter()
    .map(|l| l.parse().unwrap())
    .collect();
    let v = view(&state, &node, &opts).unwrap();
    let kept: Vec<&str> = v
        .haproxy
        .as_ref()
        .unwrap()
        .httpfront
        .iter()
        .map(|l| l.as_str())
        .collect();
    assert_eq!(kept, ["http-request set-header X-Real-IP %[src]"]);
    assert_eq!(
        v.notes
            .iter()
            .filter(|n| n.contains("every http frontend has it"))
            .count(),
        2,
        "{:?}",
        v.notes
    );
    // The template itself writes each of them exactly once per http frontend.
    let tpl = include_str!("../../../templates/haproxy.cfg.tera");
    for l in &HTTP_FRONTEND_LINES[..4] {
        assert_eq!(tpl.matches(l).count(), 1, "{l}");
    }
}

/// Issue 9: `maxconn 20000` under a hard limit of 20,000 made HAProxy exit at start.
#[test]
fn proxy_limits_are_lowered_to_the_open_files_limit_never_raised() {
    let mut state = State::from_json(include_str!("../../tests/fixtures/empty.json")).unwrap();
    state.config.haproxy.global = vec!["maxconn 20000".parse().unwrap()];
    let node: NodeName = "n1".parse().unwrap();
    let mut opts = ViewOptions::new(Provider::Haproxy);
    let maxconn = |v: &NodeView| {
        v.haproxy
            .as_ref()
            .unwrap()
            .global
            .iter()
            .map(|l| l.as_str().to_string())
            .find(|l| l.starts_with("maxconn"))
    };
    // No budget: as configured.
    let v = view(&state, &node, &opts).unwrap();
    assert_eq!(maxconn(&v).as_deref(), Some("maxconn 20000"));
    assert_eq!(v.proxy_maxconn(), Some(20000));
    // Under 4096: lowered, with a note naming the configured value, the limit and
    // the value used.
    opts.fd_budget = Some(FdBudget {
        limit: 4096,
        cpus: 2,
    });
    let v = view(&state, &node, &opts).unwrap();
    assert_eq!(maxconn(&v).as_deref(), Some("maxconn 2000"));
    assert_eq!(v.proxy_maxconn(), Some(2000));
    let note: Vec<&String> = v.notes.iter().filter(|n| n.contains("maxconn")).collect();
    assert_eq!(note.len(), 1, "{:?}", v.notes);
    assert!(
        note[0].starts_with(
            "haproxy.global maxconn 20000 lowered to 2000: the open-files limit is 4096"
        ),
        "{}",
        note[0]
    );
    // A limit too low for HAProxy to start at all: the view is refused, with the counts.
    assert_eq!(v.fd_shortfall(opts.fd_budget), None);
    let tight = Some(FdBudget { limit: 50, cpus: 2 });
    let why = view(&state, &node, &opts).unwrap().fd_shortfall(tight);
    assert_eq!(
        why.as_deref(),
        Some(
            "open files: the limit 50 is too low for HAProxy to start with 0 listening \
             sockets and 0 health-checked servers (it needs at least 73); objects are left \
             out until the rest fits"
        )
    );
    // A value that fits is never raised, and no note.
    state.config.haproxy.global = vec![
        "maxconn 500".parse().unwrap(),
        "ulimit-n 100000".parse().unwrap(),
    ];
    let v = view(&state, &node, &opts).unwrap();
    assert_eq!(maxconn(&v).as_deref(), Some("maxconn 500"));
    let hp = v.haproxy.as_ref().unwrap();
    assert_eq!(hp.global[1].as_str(), "ulimit-n 4096");
    assert!(
        !v.notes.iter().any(|n| n.contains("maxconn")),
        "{:?}",
        v.notes
    );
    assert!(v
        .notes
        .iter()
        .any(|n| n.contains("ulimit-n 100000 lowered to 4096")));

    // nginx: the default events block and an admin's worker_rlimit_nofile.
    let mut opts = ViewOptions::new(Provider::Nginx);
    state.config.nginx.global = vec![];
    let v = view(&state, &node, &opts).unwrap();
    assert_eq!(v.proxy_maxconn(), Some(NGINX_WORKER_CONNECTIONS));
    opts.fd_budget = Some(FdBudget {
        limit: 4096,
        cpus: 2,
    });
    state.config.nginx.global = vec!["worker_rlimit_nofile 65536;".parse().unwrap()];
    let v = view(&state, &node, &opts).unwrap();
    let nx = v.nginx.as_ref().unwrap();
    assert_eq!(nx.global[0].as_str(), "worker_rlimit_nofile 4096;");
    assert_eq!(
        nx.worker_connections,
        Some(4096 - crate::fdlimit::FD_MARGIN)
    );
    // The admin's own events block: its worker_connections is fitted too.
    state.config.nginx.global = vec!["events { worker_connections 100000; multi_accept on; }"
        .parse()
        .unwrap()];
    let v = view(&state, &node, &opts).unwrap();
    let nx = v.nginx.as_ref().unwrap();
    assert_eq!(
        nx.global[0].as_str(),
        format!(
            "events {{ worker_connections {}; multi_accept on; }}",
            4096 - crate::fdlimit::FD_MARGIN
        )
    );
    assert!(!nx.add_events);
    // ... also over several lines (as in k8slb's sample config).
    let state = State::from_json(include_str!("../../tests/fixtures/empty.json")).unwrap();
    let v = view(&state, &node, &opts).unwrap();
    assert_eq!(v.proxy_maxconn(), Some(1024));
    opts.fd_budget = Some(FdBudget {
        limit: 1000,
        cpus: 2,
    });
    let v = view(&state, &node, &opts).unwrap();
    assert_eq!(v.proxy_maxconn(), Some(1000 - crate::fdlimit::FD_MARGIN));
    assert!(v.nginx.as_ref().unwrap().global.iter().any(
        |l| l.as_str() == format!("  worker_connections {};", 1000 - crate::fdlimit::FD_MARGIN)
    ));
}

#[test]
fn safe_paths() {
    assert!(safe_path("x", Path::new("/run/k8slb/haproxy.sock")).is_ok());
    for bad in ["run/x", "/a b", "/a\nb", "/a/../b", "/a;b", "/a{b"] {
        assert!(safe_path("x", Path::new(bad)).is_err(), "{bad:?}");
    }
}
