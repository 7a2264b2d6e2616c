//! The install manifests (`manifests/k8slb-<proxy>.yml`):
//!
//! - they are exactly what `manifests/build.sh` renders with `kubectl kustomize` (no drift);
//! - every document parses and has apiVersion, kind and metadata.name; no removed API
//!   versions; the global config parses with the real config parser;
//! - the workloads are wired as documented (args, env, probes, capabilities);
//! - the RBAC grants exactly the calls of `docs/api-calls.md`, per binary: nothing
//!   missing, nothing more, and every referenced role exists.

use clap::Parser;
use k8slb_actor::run::RunArgs;
use serde::Deserialize;
use serde_yaml::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const PROXIES: [&str; 3] = ["haproxy", "nginx", "kubeproxy"];
/// The variants that serve Ingresses (`manifests/k8slb-<proxy>-ingress.yml`).
const INGRESS_VARIANTS: [&str; 2] = ["haproxy-ingress", "nginx-ingress"];
/// The variants with BGP-mode pools (`manifests/k8slb-<proxy>-bgp.yml`).
const BGP_VARIANTS: [&str; 1] = ["haproxy-bgp"];
const NS: &str = "k8slb-system";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn docs(proxy: &str) -> Vec<Value> {
    let path = root().join(format!("manifests/k8slb-{proxy}.yml"));
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|v| !v.is_null())
        .collect()
}

fn s<'a>(v: &'a Value, path: &str) -> &'a str {
    get(v, path)
        .as_str()
        .unwrap_or_else(|| panic!("{path} is not a string in {v:?}"))
}

fn get<'a>(v: &'a Value, path: &str) -> &'a Value {
    let mut cur = v;
    for k in path.split('.') {
        cur = match k.parse::<usize>() {
            Ok(i) => &cur[i],
            Err(_) => &cur[k],
        };
    }
    cur
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| s(d, "kind") == kind && s(d, "metadata.name") == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| s.iter().map(|x| x.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn env_of(container: &Value) -> BTreeMap<String, Value> {
    container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| (s(e, "name").to_string(), e.clone()))
        .collect()
}

#[test]
fn checked_in_manifests_match_build_sh() {
    let out = Command::new("sh")
        .arg(root().join("manifests/build.sh"))
        .arg("--check")
        .env_remove("VERSION")
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_document_is_a_named_object_of_a_served_version() {
    for proxy in PROXIES.iter().chain(&INGRESS_VARIANTS).chain(&BGP_VARIANTS) {
        let docs = docs(proxy);
        assert!(docs.len() >= 10, "{proxy}: {} documents", docs.len());
        let mut seen = BTreeSet::new();
        for d in &docs {
            let (api, kind, name) = (s(d, "apiVersion"), s(d, "kind"), s(d, "metadata.name"));
            assert!(!name.is_empty(), "{proxy}: {kind} without a name");
            assert!(
                !api.contains("beta") && !api.contains("alpha"),
                "{proxy}: {kind} {name} uses {api}"
            );
            if ["Deployment", "DaemonSet"].contains(&kind) {
                assert_eq!(api, "apps/v1");
            }
            let cluster_scoped = [
                "Namespace",
                "ClusterRole",
                "ClusterRoleBinding",
                "IngressClass",
            ]
            .contains(&kind);
            if cluster_scoped {
                assert!(get(d, "metadata.namespace").is_null(), "{kind} {name}");
            } else {
                assert_eq!(s(d, "metadata.namespace"), NS, "{kind} {name}");
            }
            assert!(
                seen.insert((kind.to_string(), name.to_string())),
                "{proxy}: duplicate {kind} {name}"
            );
        }
        find(&docs, "Namespace", NS);
    }
}

#[test]
fn global_config_parses_and_matches_the_proxy() {
    for proxy in PROXIES {
        let docs = docs(proxy);
        let cm = find(&docs, "ConfigMap", "global");
        let text = s(cm, "data.config");
        let cfg = k8slb_common::config::parse_global_config(text)
            .unwrap_or_else(|e| panic!("{proxy}: {e}"));
        let pool = &cfg.pools[&"default".parse().unwrap()];
        assert_eq!(pool.network.canonical().to_string(), "192.168.10.0/24");
        assert_eq!(cfg.keepalived.advert_int_ms, 100);
        assert_eq!(cfg.keepalived.email, None);
        let json: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            json["pools"]["default"]["range"],
            "192.168.10.240-192.168.10.249"
        );
        for p in ["haproxy", "nginx"] {
            assert_eq!(
                json.get(p).is_some(),
                p == proxy,
                "{proxy}: the {p} section is there only for its proxy"
            );
        }
    }
}

#[derive(Debug, Parser)]
struct ActorCli {
    #[command(subcommand)]
    cmd: ActorCmd,
}

#[derive(Debug, clap::Subcommand)]
enum ActorCmd {
    Run(RunArgs),
}

#[test]
fn workloads_are_wired_as_documented() {
    for proxy in PROXIES {
        let docs = docs(proxy);

        // The watcher.
        let w = find(&docs, "Deployment", "watcher");
        assert_eq!(get(w, "spec.replicas").as_u64(), Some(2));
        let pod = get(w, "spec.template.spec");
        assert_eq!(s(pod, "serviceAccountName"), "watcher");
        let c = &pod["containers"][0];
        assert_eq!(
            strings(&c["args"]),
            ["run", "--source", "kubernetes", "--state-out", "configmap"]
        );
        let env = env_of(c);
        assert_eq!(s(&env["PROXY"], "value"), proxy);
        for k in ["NODE_SELECTOR", "CERT_PATH", "VRID_OFFSET", "LOG_LEVEL"] {
            assert!(env.contains_key(k), "{proxy}: watcher env {k}");
        }
        assert_eq!(
            s(&env["POD_NAME"], "valueFrom.fieldRef.fieldPath"),
            "metadata.name"
        );
        assert_eq!(s(c, "livenessProbe.httpGet.path"), "/livez");
        assert_eq!(s(c, "readinessProbe.httpGet.path"), "/readyz");
        assert_eq!(get(c, "ports.0.containerPort").as_u64(), Some(9253));
        assert_eq!(
            get(pod, "securityContext.runAsNonRoot").as_bool(),
            Some(true)
        );
        assert_eq!(
            get(c, "securityContext.readOnlyRootFilesystem").as_bool(),
            Some(true)
        );
        assert_eq!(
            get(c, "securityContext.allowPrivilegeEscalation").as_bool(),
            Some(false)
        );
        assert_eq!(
            strings(get(c, "securityContext.capabilities.drop")),
            ["ALL"]
        );
        assert!(get(c, "securityContext.capabilities.add").is_null());
        let node_selector = s(&env["NODE_SELECTOR"], "value").to_string();

        // The actor.
        let a = find(&docs, "DaemonSet", "actor");
        let pod = get(a, "spec.template.spec");
        assert_eq!(s(pod, "serviceAccountName"), "actor");
        assert_eq!(get(pod, "hostNetwork").as_bool(), Some(true));
        assert_eq!(s(pod, "dnsPolicy"), "ClusterFirstWithHostNet");
        assert_eq!(get(pod, "terminationGracePeriodSeconds").as_u64(), Some(30));
        // The SIGTERM hand-over and the daemons' stops fit in it.
        let longest = k8slb_actor::leave::longest_stop(
            k8slb_actor::leave::DEFAULT_WAIT,
            k8slb_actor::run::STOP_GRACE,
        );
        assert!(
            longest < std::time::Duration::from_secs(30),
            "the actor may take {longest:?} to stop"
        );
        // The watcher's NODE_SELECTOR and the DaemonSet's nodeSelector agree.
        let (k, v) = node_selector.split_once('=').unwrap();
        assert_eq!(get(pod, "nodeSelector").as_mapping().unwrap().len(), 1);
        assert_eq!(s(pod, &format!("nodeSelector.{k}")), v);
        let c = &pod["containers"][0];
        let args = strings(&c["args"]);
        assert_eq!(args, ["run", "--state", "configmap"]);
        let env = env_of(c);
        assert_eq!(s(&env["PROXY"], "value"), proxy);
        assert_eq!(
            s(&env["K8SLB_NODE_NAME"], "valueFrom.fieldRef.fieldPath"),
            "spec.nodeName"
        );
        // The args and the PROXY value are what the real CLI accepts.
        let cli =
            ActorCli::try_parse_from(["k8slb-actor".to_string()].into_iter().chain(args).chain([
                "--node".into(),
                "n1".into(),
                "--proxy".into(),
                proxy.into(),
            ]))
            .unwrap_or_else(|e| panic!("{proxy}: {e}"));
        let ActorCmd::Run(run) = cli.cmd;
        assert_eq!(run.state, k8slb_actor::run::StateSource::ConfigMap);
        assert_eq!(run.namespace, NS);
        assert_eq!(run.admin_addr.port(), 9254);
        assert_eq!(get(c, "ports.0.containerPort").as_u64(), Some(9254));
        assert_eq!(s(c, "livenessProbe.httpGet.path"), "/livez");
        assert_eq!(s(c, "readinessProbe.httpGet.path"), "/readyz");
        let sc = &c["securityContext"];
        assert!(
            get(sc, "privileged").as_bool() != Some(true),
            "{proxy}: the actor is not privileged"
        );
        assert_eq!(strings(get(sc, "capabilities.drop")), ["ALL"]);
        let mut expected = vec!["NET_ADMIN", "NET_RAW", "NET_BIND_SERVICE"];
        if proxy == "nginx" {
            expected.extend(["SETUID", "SETGID", "CHOWN"]);
        }
        assert_eq!(strings(get(sc, "capabilities.add")), expected, "{proxy}");
        let mounts: BTreeMap<String, &Value> = c["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|m| (s(m, "mountPath").to_string(), m))
            .collect();
        assert_eq!(get(mounts["/etc/certs"], "readOnly").as_bool(), Some(true));
        assert!(
            mounts.contains_key("/var/lib/k8slb"),
            "the work dir (last-state.json)"
        );
        let volumes: BTreeMap<String, &Value> = pod["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|v| (s(v, "name").to_string(), v))
            .collect();
        for m in mounts.values() {
            assert!(
                volumes.contains_key(s(m, "name")),
                "{proxy}: volume {}",
                s(m, "name")
            );
        }
        assert_eq!(
            s(volumes[s(mounts["/etc/certs"], "name")], "hostPath.path"),
            "/etc/certs"
        );
        // Only the sysctl init container is privileged, and only for nginx (HAProxy binds
        // with freebind, kube-proxy binds nothing).
        let inits = pod["initContainers"]
            .as_sequence()
            .cloned()
            .unwrap_or_default();
        if proxy != "nginx" {
            assert!(inits.is_empty(), "{proxy}: {inits:?}");
        } else {
            assert_eq!(inits.len(), 1);
            assert_eq!(s(&inits[0], "name"), "sysctl");
            assert!(s(&inits[0], "command.2").contains("ip_nonlocal_bind"));
        }
        // Every image is the same, tagged (not :latest).
        let images: BTreeSet<&str> = docs
            .iter()
            .filter(|d| ["Deployment", "DaemonSet"].contains(&s(d, "kind")))
            .flat_map(|d| {
                let pod = get(d, "spec.template.spec");
                pod["containers"]
                    .as_sequence()
                    .into_iter()
                    .chain(pod["initContainers"].as_sequence())
                    .flatten()
                    .map(|c| s(c, "image"))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(images.len(), 1, "{images:?}");
        assert!(!images.iter().next().unwrap().ends_with(":latest"));
    }
}

// ---------------------------------------------------------------------------------
// RBAC against docs/api-calls.md

/// (binary, scope, group, resource, verb); scope is "cluster" (a ClusterRole through a
/// ClusterRoleBinding: any namespace or cluster-scoped objects) or the namespace.
type Grant = (String, String, String, String, String);

/// Parse the tables of docs/api-calls.md: `| verbs | group/version resource | scope | why |`,
/// under `## <binary>` (every variant), `## <binary> --ingress` (the Ingress variants
/// only; taken when `ingress`) or `## <binary> --bgp` (the BGP variants; when `bgp`).
/// Verbs: comma-separated, parenthesised remarks ignored. Resource: the first word is
/// the group/version (`v1` is the core group), the resource is in backticks. Scope: a
/// cell starting with "namespace" is the k8slb namespace; anything else (cluster,
/// all namespaces, the involved object's namespace) needs a ClusterRole.
fn documented(ingress: bool, bgp: bool) -> BTreeSet<Grant> {
    let text = std::fs::read_to_string(root().join("docs/api-calls.md")).unwrap();
    let mut out = BTreeSet::new();
    let mut binary: Option<String> = None;
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            let mut words = h.split_whitespace();
            let bin = words.next().unwrap_or_default().to_string();
            binary = match words.next() {
                None => Some(bin),
                Some("--ingress") => ingress.then_some(bin),
                Some("--bgp") => bgp.then_some(bin),
                Some(other) => panic!("docs/api-calls.md: unknown variant {other} in {line}"),
            };
            continue;
        }
        let Some(bin) = &binary else { continue };
        let line = line.trim();
        if !line.starts_with('|') || line.starts_with("|---") || line.starts_with("| verb") {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert!(cells.len() >= 3, "bad row in docs/api-calls.md: {line}");
        let mut verbs = String::new();
        let mut depth = 0;
        for ch in cells[0].chars() {
            match ch {
                '(' => depth += 1,
                ')' => depth -= 1,
                c if depth == 0 => verbs.push(c),
                _ => {}
            }
        }
        let gv = cells[1].split_whitespace().next().unwrap();
        let group = match gv.split_once('/') {
            Some((g, _)) => g.to_string(),
            None => String::new(),
        };
        let resource = cells[1]
            .split('`')
            .nth(1)
            .unwrap_or_else(|| panic!("no `resource` in {line}"))
            .to_string();
        let scope = if cells[2].starts_with("namespace") {
            NS.to_string()
        } else {
            "cluster".to_string()
        };
        for v in verbs.split(',').map(str::trim).filter(|v| !v.is_empty()) {
            out.insert((
                bin.clone(),
                scope.clone(),
                group.clone(),
                resource.clone(),
                v.to_string(),
            ));
        }
    }
    out
}

fn granted(docs: &[Value]) -> BTreeSet<Grant> {
    let sa_binary = |sa: &str| match sa {
        "watcher" => "k8slb-watcher".to_string(),
        "actor" => "k8slb-actor".to_string(),
        other => panic!("unknown ServiceAccount {other}"),
    };
    let mut out = BTreeSet::new();
    for b in docs
        .iter()
        .filter(|d| ["RoleBinding", "ClusterRoleBinding"].contains(&s(d, "kind")))
    {
        let role_kind = s(b, "roleRef.kind");
        let role_name = s(b, "roleRef.name");
        // Every referenced role exists (k8slb bound an undefined ClusterRole).
        let role = docs
            .iter()
            .find(|d| {
                s(d, "kind") == role_kind
                    && s(d, "metadata.name") == role_name
                    && (role_kind == "ClusterRole"
                        || s(d, "metadata.namespace") == s(b, "metadata.namespace"))
            })
            .unwrap_or_else(|| {
                panic!(
                    "{} {} references a missing {role_kind} {role_name}",
                    s(b, "kind"),
                    s(b, "metadata.name")
                )
            });
        let scope = if s(b, "kind") == "ClusterRoleBinding" {
            "cluster".to_string()
        } else {
            s(b, "metadata.namespace").to_string()
        };
        for subject in b["subjects"].as_sequence().unwrap() {
            assert_eq!(s(subject, "kind"), "ServiceAccount");
            assert_eq!(s(subject, "namespace"), NS);
            let sa = s(subject, "name");
            find(docs, "ServiceAccount", sa);
            for rule in role["rules"].as_sequence().unwrap() {
                assert!(rule.get("nonResourceURLs").is_none());
                for g in strings(&rule["apiGroups"]) {
                    for r in strings(&rule["resources"]) {
                        for v in strings(&rule["verbs"]) {
                            assert!(g != "*" && r != "*" && v != "*", "wildcard in {role_name}");
                            out.insert((sa_binary(sa), scope.clone(), g.clone(), r.clone(), v));
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn rbac_grants_exactly_the_documented_calls() {
    for bin in ["k8slb-watcher", "k8slb-actor"] {
        assert!(
            documented(false, false).iter().any(|g| g.0 == bin),
            "docs/api-calls.md has no rows for {bin}"
        );
    }
    let variants = PROXIES
        .iter()
        .map(|p| (*p, false, false))
        .chain(INGRESS_VARIANTS.iter().map(|p| (*p, true, false)))
        .chain(BGP_VARIANTS.iter().map(|p| (*p, false, true)));
    for (proxy, ingress, bgp) in variants {
        let documented = documented(ingress, bgp);
        let granted = granted(&docs(proxy));
        let missing: Vec<_> = documented.difference(&granted).collect();
        let extra: Vec<_> = granted.difference(&documented).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "k8slb-{proxy}.yml RBAC vs docs/api-calls.md\n  documented, not granted: {missing:#?}\n  granted, not documented: {extra:#?}"
        );
    }
}

/// Only the Ingress and BGP variants grant anything on Secrets; there, the actor reads
/// the Secrets of its namespace only, and nothing cluster-wide; in the BGP variant the
/// watcher reads none.
#[test]
fn only_the_ingress_and_bgp_variants_touch_secrets() {
    for proxy in PROXIES {
        let granted = granted(&docs(proxy));
        let secrets: Vec<_> = granted.iter().filter(|g| g.3 == "secrets").collect();
        assert!(secrets.is_empty(), "{proxy}: {secrets:?}");
    }
    for proxy in BGP_VARIANTS {
        let granted = granted(&docs(proxy));
        let secrets: Vec<_> = granted.iter().filter(|g| g.3 == "secrets").collect();
        assert!(!secrets.is_empty(), "{proxy}");
        for g in secrets {
            assert_eq!(
                (g.0.as_str(), g.1.as_str()),
                ("k8slb-actor", NS),
                "{proxy}: {g:?}"
            );
            assert!(["list", "watch"].contains(&g.4.as_str()), "{proxy}: {g:?}");
        }
    }
    for proxy in INGRESS_VARIANTS {
        let granted = granted(&docs(proxy));
        let actor: Vec<_> = granted
            .iter()
            .filter(|g| g.0 == "k8slb-actor" && g.3 == "secrets")
            .collect();
        assert!(!actor.is_empty(), "{proxy}");
        for g in actor {
            assert_eq!(g.1, NS, "{proxy}: {g:?}");
            assert!(["list", "watch"].contains(&g.4.as_str()), "{proxy}: {g:?}");
        }
        let docs = docs(proxy);
        let class = find(&docs, "IngressClass", "k8slb");
        assert_eq!(s(class, "spec.controller"), "k8slb.io/ingress-controller");
        let watcher = find(&docs, "Deployment", "watcher");
        let env = env_of(get(watcher, "spec.template.spec.containers.0"));
        assert_eq!(
            env["K8SLB_INGRESS"]["value"].as_str(),
            Some("true"),
            "{proxy}"
        );
    }
}

/// The actor reads the state and writes its node report: ConfigMaps of its namespace,
/// nothing else (no Secret writes, no cluster-wide object, no delete).
#[test]
fn the_actor_reads_configmaps_and_writes_only_configmaps_of_its_namespace() {
    let granted = granted(&docs("haproxy"));
    let actor: Vec<_> = granted.iter().filter(|g| g.0 == "k8slb-actor").collect();
    let verbs: Vec<&str> = actor.iter().map(|g| g.4.as_str()).collect();
    assert_eq!(verbs, ["create", "list", "patch", "watch"], "{actor:?}");
    for g in actor {
        assert_eq!(
            (g.1.as_str(), g.2.as_str(), g.3.as_str()),
            (NS, "", "configmaps")
        );
    }
}

/// `resourceNames` only match requests that name an object: a rule limited by name that
/// grants create (a POST has no name), list, watch or deletecollection grants nothing
/// the binary can use, and the call it was meant for is refused.
#[test]
fn rules_limited_by_name_grant_only_verbs_that_name_an_object() {
    for proxy in PROXIES.iter().chain(&INGRESS_VARIANTS).chain(&BGP_VARIANTS) {
        let docs = docs(proxy);
        for role in docs
            .iter()
            .filter(|d| ["Role", "ClusterRole"].contains(&s(d, "kind")))
        {
            for rule in role["rules"].as_sequence().unwrap() {
                if strings(&rule["resourceNames"]).is_empty() {
                    continue;
                }
                for v in strings(&rule["verbs"]) {
                    assert!(
                        ["get", "update", "patch", "delete"].contains(&v.as_str()),
                        "{proxy}: {} {}: `{v}` with resourceNames never matches",
                        s(role, "kind"),
                        s(role, "metadata.name")
                    );
                }
            }
        }
    }
}
