//! The watcher serving the Gateway API (`--ingress --gateway-api`) against the fake API
//! server, as its ServiceAccount with the RBAC of the Ingress install variant
//! (`manifests/k8slb-haproxy-ingress.yml`): without the CRDs it serves the rest and says
//! why; with them, Gateways get their addresses and the specification's status on
//! GatewayClasses, Gateways and HTTPRoutes (another controller's entries untouched); with
//! the experimental channel's CRDs too, TCPRoutes and UDPRoutes get theirs.

mod kube_util;

use kube_util::*;
use serde_json::{json, Value};
use std::time::Duration;

const GW: &str = "gateway.networking.k8s.io";

/// The watcher's log lines, captured once for this test binary (both tests log).
fn logs() -> &'static Capture {
    static LOGS: std::sync::OnceLock<Capture> = std::sync::OnceLock::new();
    LOGS.get_or_init(Capture::install)
}

/// A log line whose message holds every one of `parts`.
fn logged(parts: &[&str]) -> bool {
    logs().lines().iter().any(|l| {
        let m = l["fields"]["message"].as_str().unwrap_or_default();
        parts.iter().all(|p| m.contains(p))
    })
}

/// The writes the Gateway API CRDs' schemas refused (422): what a real API server with
/// the v1.6.1 CRDs would have refused of the watcher's writes.
fn invalid_writes(api: &k8slb_fakeapi::FakeApi) -> Vec<String> {
    api.requests()
        .into_iter()
        .filter(|r| r.status == 422)
        .map(|r| format!("{} {}: {}", r.method, r.path, r.message.unwrap_or_default()))
        .collect()
}

fn start_gateway(api: &k8slb_fakeapi::FakeApi) -> Watcher {
    let mut a = args("w1");
    a.ingress = true;
    a.gateway_api = true;
    a.gateway_api_check = Duration::from_millis(300);
    start_with(api, a)
}

fn class() -> Value {
    json!({"apiVersion": format!("{GW}/v1"), "kind": "GatewayClass",
           "metadata": {"name": "k8slb"},
           "spec": {"controllerName": "k8slb.io/gateway-controller"}})
}

fn gateway() -> Value {
    json!({"apiVersion": format!("{GW}/v1"), "kind": "Gateway",
           "metadata": {"name": "gw", "namespace": "default"},
           "spec": {"gatewayClassName": "k8slb", "listeners": [
               {"name": "http", "port": 80, "protocol": "HTTP"},
               {"name": "tcp", "port": 5432, "protocol": "TCP"}]}})
}

fn route(name: &str, backend: &str) -> Value {
    json!({"apiVersion": format!("{GW}/v1"), "kind": "HTTPRoute",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["web.example.com"],
                    "rules": [{"backendRefs": [{"name": backend, "port": 80}]}]}})
}

fn get(api: &k8slb_fakeapi::FakeApi, path: &str) -> Value {
    api.get_object(&format!("/apis/{GW}/v1/{path}"))
        .unwrap_or_else(|| panic!("{path} exists"))
}

/// `(type, status, reason)` of a conditions array.
fn conds(v: &Value) -> Vec<(String, String, String)> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("type"), s("status"), s("reason"))
        })
        .collect()
}

fn has(v: &Value, type_: &str, status: &str, reason: &str) -> bool {
    conds(v)
        .iter()
        .any(|(t, s, r)| t == type_ && s == status && r == reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_crds_services_are_served_and_the_watcher_restarts_once_they_exist() {
    logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_ingress_variant(&api);
    api.put_object(svc("default", "lb"));
    let w = start_gateway(&api);
    let ip = wait_for("the Service gets its IP", || {
        ingress_ip(&api, "default", "lb")
    })
    .await;
    assert_eq!(ip, "10.0.0.10");
    wait_for("the log says the CRDs are missing", || {
        logged(&["the Gateway API CRDs", "not installed"]).then_some(())
    })
    .await;
    wait_for("ready", || w.metrics.readiness.is_ready().then_some(())).await;
    assert_eq!(api.refused_requests(), Vec::<String>::new());
    assert_eq!(invalid_writes(&api), Vec::<String>::new());

    // Installed later: the watcher exits cleanly, to be restarted by its Deployment.
    api.install_gateway_api_crds(true);
    let done = tokio::time::timeout(Duration::from_secs(20), w.task)
        .await
        .expect("the watcher exits once the CRDs exist")
        .expect("no panic");
    done.expect("a clean exit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_restarts_when_the_l4_route_kinds_are_installed_later() {
    logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    // A release without the L4 routes (before v1.5 they were experimental only): the
    // v1.6.1 standard channel's CRD files without TLSRoute, TCPRoute and UDPRoute.
    let standard = k8slb_fakeapi::gateway_api_crd_dir("standard").unwrap_or_else(|e| panic!("{e}"));
    let older = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&standard).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !["tcproutes", "tlsroutes", "udproutes"]
            .iter()
            .any(|k| name.contains(k))
        {
            std::fs::copy(&path, older.path().join(&name)).unwrap();
        }
    }
    api.install_crds(older.path()).unwrap();
    seed_ingress_variant(&api);
    api.put_object(class());
    api.put_object(gateway());
    let w = start_gateway(&api);
    wait_for("the Gateway is served", || {
        let g = get(&api, "namespaces/default/gateways/gw");
        g.pointer("/status/addresses/0/value").map(|_| ())
    })
    .await;
    // Still serving a while later: nothing new was installed.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!w.task.is_finished(), "no restart without a new kind");
    api.install_gateway_api_crds(true);
    let done = tokio::time::timeout(Duration::from_secs(20), w.task)
        .await
        .expect("the watcher exits once TLSRoute, TCPRoute and UDPRoute exist")
        .expect("no panic");
    done.expect("a clean exit");
    assert!(logged(&["more Gateway API route kinds are installed now"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_get_addresses_and_the_specifications_status_within_the_variants_rbac() {
    logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    api.install_gateway_api_crds(true);
    seed_ingress_variant(&api);
    api.put_object(class());
    // Another controller's class: never touched.
    api.put_object(
        json!({"apiVersion": format!("{GW}/v1"), "kind": "GatewayClass",
        "metadata": {"name": "other"}, "spec": {"controllerName": "example.com/other"}}),
    );
    api.put_object(gateway());
    let mut r = route("web", "web");
    // Another controller's entry in the route's status: kept as it is.
    // As a real server holds it: the CRD defaults parentRef's group and kind.
    let theirs = json!({"parentRef": {"group": GW, "kind": "Gateway", "name": "their-gw"},
        "controllerName": "example.com/other",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    r["status"] = json!({"parents": [theirs.clone()]});
    api.put_object(r);
    api.put_object(route("missing", "nope"));
    // A GRPCRoute (standard channel): watched, attached and given its status as well.
    api.put_object(
        json!({"apiVersion": format!("{GW}/v1"), "kind": "GRPCRoute",
               "metadata": {"name": "rpc", "namespace": "default"},
               "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["grpc.example.com"],
                        "rules": [{"matches": [{"method": {"service": "echo.Echo", "method": "Ping"}}],
                                   "backendRefs": [{"name": "web", "port": 80}]}]}}),
    );
    let w = start_gateway(&api);

    let gw = wait_for("the Gateway's status shows its address", || {
        let g = get(&api, "namespaces/default/gateways/gw");
        (g.pointer("/status/addresses/0/value").is_some()).then_some(g)
    })
    .await;
    assert_eq!(
        gw["status"]["addresses"],
        json!([{"type": "IPAddress", "value": "10.0.0.10"}])
    );
    assert!(
        has(&gw["status"]["conditions"], "Accepted", "True", "Accepted"),
        "{gw:#}"
    );
    assert!(
        has(
            &gw["status"]["conditions"],
            "Programmed",
            "True",
            "Programmed"
        ),
        "{gw:#}"
    );
    let listeners = gw["status"]["listeners"].as_array().unwrap();
    let http = listeners.iter().find(|l| l["name"] == "http").unwrap();
    assert_eq!(http["attachedRoutes"], 3, "{http:#}");
    assert_eq!(
        http["supportedKinds"],
        json!([{"group": GW, "kind": "HTTPRoute"}, {"group": GW, "kind": "GRPCRoute"}])
    );
    assert!(
        has(&http["conditions"], "Programmed", "True", "Programmed"),
        "{http:#}"
    );
    // A TCP listener is served, though without the experimental CRDs no TCPRoute can
    // name it.
    let tcp = listeners.iter().find(|l| l["name"] == "tcp").unwrap();
    assert!(
        has(&tcp["conditions"], "Accepted", "True", "Accepted"),
        "{tcp:#}"
    );
    assert_eq!(
        tcp["supportedKinds"],
        json!([{"group": GW, "kind": "TCPRoute"}])
    );
    for c in gw["status"]["conditions"].as_array().unwrap() {
        assert_eq!(
            c["observedGeneration"], gw["metadata"]["generation"],
            "{c:#}"
        );
        assert!(
            c["lastTransitionTime"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z')),
            "{c:#}"
        );
    }

    let class_status = wait_for("our class is Accepted", || {
        let c = get(&api, "gatewayclasses/k8slb");
        has(&c["status"]["conditions"], "Accepted", "True", "Accepted").then_some(c)
    })
    .await;
    assert!(class_status["status"]["conditions"].is_array());
    // Another controller's class keeps what the CRD's default gave it (Accepted Unknown,
    // Pending): k8slb never writes it.
    let other = get(&api, "gatewayclasses/other");
    assert!(
        has(
            &other["status"]["conditions"],
            "Accepted",
            "Unknown",
            "Pending"
        ),
        "{other:#}"
    );

    let web = wait_for("the route's parent status", || {
        let r = get(&api, "namespaces/default/httproutes/web");
        (r["status"]["parents"].as_array().map_or(0, Vec::len) == 2).then_some(r)
    })
    .await;
    let parents = web["status"]["parents"].as_array().unwrap();
    assert_eq!(
        parents[0], theirs,
        "another controller's entry is kept as it was"
    );
    assert_eq!(parents[1]["controllerName"], "k8slb.io/gateway-controller");
    assert_eq!(
        parents[1]["parentRef"],
        json!({"group": GW, "kind": "Gateway", "namespace": "default", "name": "gw"})
    );
    assert!(has(
        &parents[1]["conditions"],
        "Accepted",
        "True",
        "Accepted"
    ));
    assert!(has(
        &parents[1]["conditions"],
        "ResolvedRefs",
        "True",
        "ResolvedRefs"
    ));
    let rpc = wait_for("the GRPCRoute's parent status", || {
        let r = get(&api, "namespaces/default/grpcroutes/rpc");
        r.pointer("/status/parents/0").cloned()
    })
    .await;
    assert_eq!(rpc["controllerName"], "k8slb.io/gateway-controller");
    assert!(
        has(&rpc["conditions"], "Accepted", "True", "Accepted"),
        "{rpc:#}"
    );
    assert!(
        has(&rpc["conditions"], "ResolvedRefs", "True", "ResolvedRefs"),
        "{rpc:#}"
    );
    let missing = wait_for("the broken route's status", || {
        let r = get(&api, "namespaces/default/httproutes/missing");
        r.pointer("/status/parents/0").cloned()
    })
    .await;
    assert!(
        has(
            &missing["conditions"],
            "ResolvedRefs",
            "False",
            "BackendNotFound"
        ),
        "{missing:#}"
    );
    // And an Event on it, like any object's problem.
    let ev = wait_for("the broken route's Event", || {
        let e = events_for(&api, "missing");
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert!(
        ev.iter().any(|(reason, _, _)| reason == "BackendNotFound"),
        "{ev:?}"
    );

    // The state has the Gateway and its routes; a steady state writes nothing more.
    let st = state(&api).expect("a published state");
    assert_eq!(
        st.gateways[&"default/gw".parse().unwrap()].ips,
        ["10.0.0.10".parse::<std::net::IpAddr>().unwrap()]
    );
    assert!(st.http.listeners.iter().any(|l| l.port == 80));
    let rv = get(&api, "namespaces/default/gateways/gw")["metadata"]["resourceVersion"].clone();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        get(&api, "namespaces/default/gateways/gw")["metadata"]["resourceVersion"],
        rv,
        "no write without a change"
    );

    // The route leaves our Gateway: our entry goes, theirs stays.
    let mut moved = get(&api, "namespaces/default/httproutes/web");
    moved["spec"]["parentRefs"] = json!([{"name": "their-gw"}]);
    api.put_object(moved);
    let web = wait_for("our entry removed", || {
        let r = get(&api, "namespaces/default/httproutes/web");
        (r["status"]["parents"].as_array().map_or(0, Vec::len) == 1).then_some(r)
    })
    .await;
    assert_eq!(web["status"]["parents"][0], theirs);
    assert_eq!(api.refused_requests(), Vec::<String>::new());
    assert_eq!(invalid_writes(&api), Vec::<String>::new());
    w.stop().await;
}

fn l4_route(kind: &str, name: &str, section: &str, port: i64) -> Value {
    json!({"apiVersion": format!("{GW}/v1alpha2"), "kind": kind,
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"parentRefs": [{"name": "gw", "sectionName": section}],
                    "rules": [{"backendRefs": [{"name": "db", "port": port}]}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_experimental_crds_tcp_and_udp_routes_get_their_status_within_the_rbac() {
    logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    api.install_gateway_api_experimental_crds();
    seed_ingress_variant(&api);
    api.put_object(class());
    let mut gw = gateway();
    gw["spec"]["listeners"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "dns", "port": 53, "protocol": "UDP"}));
    // A listener that takes routes from the namespaces labelled team=web.
    gw["spec"]["listeners"].as_array_mut().unwrap().push(json!(
        {"name": "team", "port": 8080, "protocol": "HTTP", "allowedRoutes": {"namespaces": {
            "from": "Selector", "selector": {"matchLabels": {"team": "web"}}}}}));
    api.put_object(gw);
    api.put_object(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "apps", "labels": {"team": "web"}}}));
    let mut team_route = route("team", "web");
    team_route["metadata"]["namespace"] = json!("apps");
    team_route["spec"]["parentRefs"] =
        json!([{"name": "gw", "namespace": "default", "sectionName": "team"}]);
    team_route["spec"]["rules"][0]["backendRefs"][0]["namespace"] = json!("default");
    api.put_object(team_route);
    let mut db = svc("default", "db");
    db["spec"]["type"] = json!("ClusterIP");
    db["spec"]["ports"] = json!([{"name": "pg", "port": 5432, "protocol": "TCP"},
                                 {"name": "dns", "port": 53, "protocol": "UDP"}]);
    api.put_object(db);
    api.put_object(l4_route("TCPRoute", "pg", "tcp", 5432));
    api.put_object(l4_route("UDPRoute", "dns", "dns", 53));
    let w = start_gateway(&api);

    let path = |plural: &str, name: &str| {
        format!("/apis/{GW}/v1alpha2/namespaces/default/{plural}/{name}")
    };
    let pg = wait_for("the TCPRoute's parent status", || {
        let r = api.get_object(&path("tcproutes", "pg"))?;
        r.pointer("/status/parents/0").cloned()
    })
    .await;
    assert_eq!(pg["controllerName"], "k8slb.io/gateway-controller");
    assert_eq!(
        pg["parentRef"],
        json!({"group": GW, "kind": "Gateway", "namespace": "default", "name": "gw", "sectionName": "tcp"})
    );
    assert!(
        has(&pg["conditions"], "Accepted", "True", "Accepted"),
        "{pg:#}"
    );
    assert!(
        has(&pg["conditions"], "ResolvedRefs", "True", "ResolvedRefs"),
        "{pg:#}"
    );
    // This variant runs HAProxy, which does not proxy UDP: the listener says so, the
    // UDPRoute is not allowed by any listener, and an Event tells its owner.
    let dns = wait_for("the UDPRoute's parent status", || {
        let r = api.get_object(&path("udproutes", "dns"))?;
        r.pointer("/status/parents/0").cloned()
    })
    .await;
    assert!(
        has(
            &dns["conditions"],
            "Accepted",
            "False",
            "NotAllowedByListeners"
        ),
        "{dns:#}"
    );
    let ev = wait_for("the UDPRoute's Event", || {
        let e = events_for(&api, "dns");
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert!(
        ev.iter()
            .any(|(reason, _, _)| reason == "NotAllowedByListeners"),
        "{ev:?}"
    );
    // The Event names the route at the version the watcher watches: v1 from the v1.6.1
    // CRDs on (v1alpha2 is served by the experimental channel, not preferred).
    let involved: Vec<String> = api
        .list("events")
        .iter()
        .filter(|e| e.pointer("/involvedObject/name") == Some(&json!("dns")))
        .filter_map(|e| {
            e.pointer("/involvedObject/apiVersion")?
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(involved, [format!("{GW}/v1")], "{involved:?}");
    let g = get(&api, "namespaces/default/gateways/gw");
    let listeners = g["status"]["listeners"].as_array().unwrap();
    let udp = listeners.iter().find(|l| l["name"] == "dns").unwrap();
    assert!(
        has(
            &udp["conditions"],
            "Accepted",
            "False",
            "UnsupportedProtocol"
        ),
        "{udp:#}"
    );
    let tcp = listeners.iter().find(|l| l["name"] == "tcp").unwrap();
    assert_eq!(tcp["attachedRoutes"], 1, "{tcp:#}");
    // The route in `apps` is allowed by the selector (the Namespace's labels, watched).
    let team = wait_for("the selected route's status", || {
        let r = api.get_object(&format!("/apis/{GW}/v1/namespaces/apps/httproutes/team"))?;
        r.pointer("/status/parents/0").cloned()
    })
    .await;
    assert!(
        has(&team["conditions"], "Accepted", "True", "Accepted"),
        "{team:#}"
    );

    // The published state has the TCP stream on the Gateway's address.
    let st = state(&api).expect("a published state");
    let ip: std::net::IpAddr = "10.0.0.10".parse().unwrap();
    assert!(
        st.http
            .streams
            .iter()
            .any(|s| s.ip == ip && s.port == 5432 && s.routes.len() == 1),
        "{:?}",
        st.http.streams
    );
    assert_eq!(api.refused_requests(), Vec::<String>::new());
    assert_eq!(invalid_writes(&api), Vec::<String>::new());
    w.stop().await;
}

/// A BackendTLSPolicy (standard channel v1.6.1) in the fake API server: the watcher
/// watches it and the ConfigMaps of every namespace under the variant's RBAC, puts TLS
/// with the policy's hostname and CA bundle on the Service's backend in the published
/// state, and writes the policy's ancestor status, which the CRD's schema takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_tls_policy_is_watched_applied_and_given_its_ancestor_status() {
    logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    api.install_gateway_api_crds(true);
    seed_ingress_variant(&api);
    api.put_object(class());
    api.put_object(gateway());
    api.put_object(route("web", "web"));
    let (ca, _) = k8slb_common::testing::ca("test-ca");
    api.put_object(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "web-ca", "namespace": "default"},
        "data": {"ca.crt": ca}}));
    api.put_object(json!({"apiVersion": format!("{GW}/v1"), "kind": "BackendTLSPolicy",
        "metadata": {"name": "web-tls", "namespace": "default"},
        "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
                 "validation": {"caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "web-ca"}],
                                "hostname": "web.internal"}}}));
    // A second policy for the same Service: Conflicted (the older, by name on a tie of
    // creation times, holds it), with an Event on it.
    let mut second = api
        .get_object(&format!(
            "/apis/{GW}/v1/namespaces/default/backendtlspolicies/web-tls"
        ))
        .unwrap();
    second["metadata"] = json!({"name": "web-tls-second", "namespace": "default"});
    second["spec"]["validation"]["hostname"] = json!("other.internal");
    api.put_object(second);
    let w = start_gateway(&api);
    let conflicted = wait_for("the second policy's ancestor status", || {
        let p = get(&api, "namespaces/default/backendtlspolicies/web-tls-second");
        p.pointer("/status/ancestors/0").cloned()
    })
    .await;
    assert!(
        has(&conflicted["conditions"], "Accepted", "False", "Conflicted"),
        "{conflicted:#}"
    );
    let ev = wait_for("the conflicted policy's Event", || {
        let e = events_for(&api, "web-tls-second");
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert!(
        ev.iter().any(|(reason, _, _)| reason == "Conflicted"),
        "{ev:?}"
    );
    let ancestor = wait_for("the policy's ancestor status", || {
        let p = get(&api, "namespaces/default/backendtlspolicies/web-tls");
        p.pointer("/status/ancestors/0").cloned()
    })
    .await;
    assert_eq!(
        ancestor["ancestorRef"],
        json!({"group": GW, "kind": "Gateway", "namespace": "default", "name": "gw"})
    );
    assert!(
        has(&ancestor["conditions"], "Accepted", "True", "Accepted"),
        "{ancestor:#}"
    );
    assert!(
        has(
            &ancestor["conditions"],
            "ResolvedRefs",
            "True",
            "ResolvedRefs"
        ),
        "{ancestor:#}"
    );
    let st = state(&api).expect("a published state");
    let tls = st.http.backends[&"default/web:80".parse().unwrap()]
        .tls
        .clone()
        .expect("TLS on the policy's Service");
    assert_eq!(tls.server_name.as_str(), "web.internal");
    assert!(st.http.ca_bundles[&tls.ca].contains("BEGIN CERTIFICATE"));
    assert_eq!(api.refused_requests(), Vec::<String>::new());
    assert_eq!(invalid_writes(&api), Vec::<String>::new());
    w.stop().await;
}

/// A ListenerSet (standard channel v1.6.1) of another namespace on a Gateway that allows
/// it: the watcher lists and watches ListenerSets under the variant's RBAC, serves the
/// set's listener with the route attached to it (a route naming the Gateway does not
/// reach it), and writes the set's status, the route's parent entry for the set and the
/// Gateway's `attachedListenerSets`, which the CRDs' schemas take. A set of a Gateway
/// that does not allow sets is `NotAllowed` and serves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_set_is_watched_served_and_given_its_status() {
    logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    api.install_gateway_api_crds(true);
    seed_ingress_variant(&api);
    api.put_object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}));
    api.put_object(class());
    let mut gw = gateway();
    gw["spec"]["allowedListeners"] = json!({"namespaces": {"from": "All"}});
    api.put_object(gw);
    let mut closed = gateway();
    closed["metadata"]["name"] = json!("closed");
    api.put_object(closed);
    let set = |name: &str, parent: &str, host: &str| {
        json!({"apiVersion": format!("{GW}/v1"), "kind": "ListenerSet",
               "metadata": {"name": name, "namespace": "team"},
               "spec": {"parentRef": {"name": parent, "namespace": "default"},
                        "listeners": [{"name": "shop", "port": 8080, "protocol": "HTTP",
                                       "hostname": host,
                                       "allowedRoutes": {"namespaces": {"from": "All"}}}]}})
    };
    api.put_object(set("shop", "gw", "shop.example.com"));
    api.put_object(set("refused", "closed", "refused.example.com"));
    let mut r = route("via-set", "web");
    r["spec"]["parentRefs"] =
        json!([{"group": GW, "kind": "ListenerSet", "name": "shop", "namespace": "team"}]);
    r["spec"]["hostnames"] = json!([]);
    api.put_object(r);
    let w = start_gateway(&api);
    let st = wait_for("the set's status", || {
        let s = get(&api, "namespaces/team/listenersets/shop");
        let st = s.get("status")?;
        has(&st["conditions"], "Programmed", "True", "Programmed").then(|| st.clone())
    })
    .await;
    assert!(
        has(&st["conditions"], "Accepted", "True", "Accepted"),
        "{st:#}"
    );
    assert_eq!(st["listeners"][0]["name"], "shop");
    assert_eq!(st["listeners"][0]["attachedRoutes"], 1, "{st:#}");
    let refused = wait_for("the refused set's status", || {
        let s = get(&api, "namespaces/team/listenersets/refused");
        let st = s.get("status")?;
        has(&st["conditions"], "Accepted", "False", "NotAllowed").then(|| st.clone())
    })
    .await;
    assert!(
        has(&refused["conditions"], "Programmed", "False", "NotAllowed"),
        "{refused:#}"
    );
    let g = wait_for("attachedListenerSets", || {
        let g = get(&api, "namespaces/default/gateways/gw");
        (g.pointer("/status/attachedListenerSets") == Some(&json!(1))).then_some(g)
    })
    .await;
    assert!(
        has(&g["status"]["conditions"], "Accepted", "True", "Accepted"),
        "{g:#}"
    );
    let parent = wait_for("the route's parent entry", || {
        let r = get(&api, "namespaces/default/httproutes/via-set");
        r.pointer("/status/parents/0").cloned()
    })
    .await;
    assert_eq!(
        parent["parentRef"],
        json!({"group": GW, "kind": "ListenerSet", "namespace": "team", "name": "shop"})
    );
    assert!(
        has(&parent["conditions"], "Accepted", "True", "Accepted"),
        "{parent:#}"
    );
    // Served: the set's host on its port, with the route; the refused set's not at all.
    let st = wait_for("a published state with the set's listener", || {
        let s = state(&api)?;
        s.http.listeners.iter().any(|l| l.port == 8080).then_some(s)
    })
    .await;
    let l = st.http.listeners.iter().find(|l| l.port == 8080).unwrap();
    let hosts: Vec<String> = l
        .virtual_hosts
        .iter()
        .filter(|v| !v.rules.is_empty())
        .filter_map(|v| v.host.as_ref().map(|h| h.to_string()))
        .collect();
    assert_eq!(hosts, ["shop.example.com"]);
    assert_eq!(api.refused_requests(), Vec::<String>::new());
    assert_eq!(invalid_writes(&api), Vec::<String>::new());
    w.stop().await;
}

/// A Gateway whose client certificate validation is `AllowInsecureFallback` gets
/// `InsecureFrontendValidationMode: True` (`ConfigurationChanged`) written on it, within
/// the variant's RBAC and the CRD's schema; the condition goes once the mode is back
/// to `AllowValidOnly` (the API: "removed as soon as ... changed back").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insecure_fallback_validation_is_said_on_the_gateway_and_unsaid_when_it_goes() {
    logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    api.install_gateway_api_crds(true);
    seed_ingress_variant(&api);
    api.put_object(class());
    let (ca, _) = k8slb_common::testing::ca("clients-ca");
    api.put_object(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "clients", "namespace": "default"},
        "data": {"ca.crt": ca}}));
    let with_mode = |mode: &str| {
        let mut g = gateway();
        g["spec"]["tls"] = json!({"frontend": {"default": {"validation": {
            "mode": mode,
            "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "clients"}]}}}});
        g
    };
    api.put_object(with_mode("AllowInsecureFallback"));
    let w = start_gateway(&api);
    let insecure = |g: &Value| {
        conds(&g["status"]["conditions"])
            .into_iter()
            .find(|c| c.0 == "InsecureFrontendValidationMode")
    };
    let said = wait_for("InsecureFrontendValidationMode on the Gateway", || {
        insecure(&get(&api, "namespaces/default/gateways/gw"))
    })
    .await;
    assert_eq!(
        said,
        (
            "InsecureFrontendValidationMode".to_string(),
            "True".to_string(),
            "ConfigurationChanged".to_string()
        )
    );
    let mut g = get(&api, "namespaces/default/gateways/gw");
    g["spec"] = with_mode("AllowValidOnly")["spec"].clone();
    api.put_object(g);
    wait_for("the condition removed", || {
        let g = get(&api, "namespaces/default/gateways/gw");
        (insecure(&g).is_none() && has(&g["status"]["conditions"], "Accepted", "True", "Accepted"))
            .then_some(())
    })
    .await;
    assert_eq!(api.refused_requests(), Vec::<String>::new());
    assert_eq!(invalid_writes(&api), Vec::<String>::new());
    w.stop().await;
}

/// The node report ConfigMap of `node`'s actor: of this build (listing its features),
/// or of an actor older than the `features` key.
fn node_report(node: &str, this_build: bool) -> Value {
    use k8slb_common::report::{NodeReport, REPORT_KEY, REPORT_LABELS};
    let json = if this_build {
        NodeReport::new(&node.parse().unwrap(), "haproxy", []).to_json()
    } else {
        format!(r#"{{"node":"{node}","proxy":"haproxy","quarantined":[]}}"#)
    };
    let labels: serde_json::Map<String, Value> = REPORT_LABELS
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": format!("k8slb-node-{node}"), "namespace": "k8slb-system",
                        "labels": labels},
           "data": {REPORT_KEY: json}})
}

/// Version skew: a Gateway's TLS port of both modes (TLSRouteModeMixed) waits until
/// every LB node's actor reports rendering it. With lb2's actor older (its report has
/// no `features`), both listeners of the port are `ProtocolConflict`, saying to upgrade
/// the DaemonSet, with an Event; the Gateway's other port is served. Once lb2's report
/// lists the feature, the port is served mixed and the listeners are Accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_port_of_both_modes_waits_until_every_lb_nodes_actor_reports_rendering_it() {
    logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    api.install_gateway_api_crds(true);
    seed_ingress_variant(&api);
    api.put_object(class());
    let (crt, key) = k8slb_common::testing::self_signed_for(&["a.example"]);
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    api.put_object(
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "a-tls", "namespace": "default"},
        "data": {"tls.crt": b64(&crt), "tls.key": b64(&key)}}),
    );
    api.put_object(json!({"apiVersion": format!("{GW}/v1"), "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": "default"},
        "spec": {"gatewayClassName": "k8slb", "listeners": [
            {"name": "term", "port": 8443, "protocol": "TLS", "hostname": "a.example",
             "tls": {"mode": "Terminate", "certificateRefs": [{"name": "a-tls"}]}},
            {"name": "pass", "port": 8443, "protocol": "TLS", "hostname": "b.example",
             "tls": {"mode": "Passthrough"}},
            {"name": "alone", "port": 9443, "protocol": "TLS", "hostname": "b.example",
             "tls": {"mode": "Passthrough"}}]}}));
    for (name, section, host) in [
        ("term", "term", "a.example"),
        ("pass", "pass", "b.example"),
        ("alone", "alone", "b.example"),
    ] {
        api.put_object(json!({"apiVersion": format!("{GW}/v1"), "kind": "TLSRoute",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"parentRefs": [{"name": "gw", "sectionName": section}],
                     "hostnames": [host],
                     "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}));
    }
    api.put_object(node_report("lb1", true));
    api.put_object(node_report("lb2", false));
    let w = start_gateway(&api);

    let listener = |name: &str| {
        let g = get(&api, "namespaces/default/gateways/gw");
        g["status"]["listeners"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|l| l["name"] == name)
            .cloned()
    };
    let term = wait_for("the terminating listener refused", || {
        listener("term").filter(|l| has(&l["conditions"], "Accepted", "False", "ProtocolConflict"))
    })
    .await;
    let accepted = term["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Accepted")
        .unwrap();
    assert_eq!(
        accepted["message"],
        "another TLS listener uses port 8443 with the other tls.mode: not every load-balancer node's actor supports TLS listeners of both modes on one port yet: upgrade the DaemonSet"
    );
    let pass = listener("pass").unwrap();
    assert!(
        has(
            &pass["conditions"],
            "Conflicted",
            "True",
            "ProtocolConflict"
        ),
        "{pass:#}"
    );
    let alone = listener("alone").unwrap();
    assert!(
        has(&alone["conditions"], "Accepted", "True", "Accepted"),
        "{alone:#}"
    );
    let ev = wait_for("the Gateway's Event", || {
        let e: Vec<_> = events_for(&api, "gw")
            .into_iter()
            .filter(|(r, m, _)| r == "ProtocolConflict" && m.contains("upgrade the DaemonSet"))
            .collect();
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert!(ev[0].1.starts_with("listener "), "{ev:?}");
    let streams = |s: &k8slb_common::state::State| -> Vec<(u16, bool)> {
        s.http
            .streams
            .iter()
            .map(|s| (s.port, s.is_mixed()))
            .collect()
    };
    assert_eq!(streams(&state(&api).unwrap()), [(9443, false)]);

    // lb2's actor upgraded: its report lists the feature; the port is served mixed.
    api.put_object(node_report("lb2", true));
    wait_for("the port served mixed", || {
        let s = state(&api)?;
        (streams(&s) == [(8443, true), (9443, false)]).then_some(())
    })
    .await;
    wait_for("both listeners Accepted", || {
        ["term", "pass"]
            .iter()
            .all(|n| {
                listener(n).is_some_and(|l| has(&l["conditions"], "Accepted", "True", "Accepted"))
            })
            .then_some(())
    })
    .await;
    assert_eq!(api.refused_requests(), Vec::<String>::new());
    assert_eq!(invalid_writes(&api), Vec::<String>::new());
    w.stop().await;
}
