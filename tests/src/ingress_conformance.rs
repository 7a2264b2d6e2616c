//! The Ingress conformance suite (kubernetes-sigs/ingress-controller-conformance,
//! `features/*.feature` in the conformance data directory) through the standalone mode:
//! the Gherkin scenarios are data ([`crate::gherkin`]), their steps run by the small
//! interpreter here, as facts transcribed from the upstream Go step definitions:
//!
//! - "a new random namespace": one namespace per feature (`ingress-conformance-<feature>`);
//!   every scenario of a feature applies the same objects, so they are applied once and
//!   kept until the feature's last scenario;
//! - each Service an Ingress names gets a Deployment of the suite's echo server (here
//!   lab-backend `--echo`, pods `<service>-lab-<i>`, answering with the request's path, host,
//!   method, proto, headers and the `service` and `pod` that served it) and a Service on the
//!   port the Ingress names; "scaled to N" gives it N pods (one EndpointSlice each);
//! - our IngressClass `k8slb` is the cluster's default (the suite's Ingresses name no
//!   class, but one names an unknown class);
//! - requests as the suite's Go client sends them: `User-Agent: Go-http-client/1.1`, the
//!   URL's host as `Host` (the Ingress's address when the URL has none), redirects
//!   followed (same method, the location's host and path, to the same address), TLS
//!   without verification (verification is its own step).
//!
//! One line per scenario per proxy: PASS, or FAIL with the step and why.

use crate::gherkin::{self, Feature, Scenario, Step};
use crate::system::System;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The features, in the order they run.
pub const FEATURES: &[&str] = &[
    "default_backend",
    "host_rules",
    "ingress_class",
    "load_balancing",
    "path_rules",
];

/// How long an Ingress may take to get (or, for the negative step, to keep not having)
/// its address.
const STATUS_TIMEOUT: Duration = Duration::from_secs(25);
/// The first port of the Ingress suite's echo listeners on `be1` (the Gateway API
/// runner's start at 20000).
const ECHO_PORT: u16 = 24000;

/// The features read from `<data>/ingress-controller-conformance/features/`.
pub fn read_features(data: &Path) -> Result<Vec<(String, Feature)>> {
    FEATURES
        .iter()
        .map(|stem| {
            let path = data
                .join("ingress-controller-conformance/features")
                .join(format!("{stem}.feature"));
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let f = gherkin::parse(&text).with_context(|| format!("parsing {}", path.display()))?;
            Ok((stem.to_string(), f))
        })
        .collect()
}

fn namespace_of(stem: &str) -> String {
    format!("ingress-conformance-{}", stem.replace('_', "-"))
}

/// A step's text with its quoted parts replaced by `"…"` and its numbers removed (what
/// the interpreter matches on), and the quoted parts.
fn pattern(text: &str) -> (String, Vec<String>) {
    let (p, args) = quoted(text);
    let p: String = p.chars().filter(|c| !c.is_ascii_digit()).collect();
    (p.trim_end().to_string(), args)
}

fn quoted(text: &str) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut args = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find('"') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let Some(j) = after.find('"') else {
            out.push_str(&rest[i..]);
            rest = "";
            break;
        };
        args.push(after[..j].to_string());
        out.push_str("\"…\"");
        rest = &after[j + 1..];
    }
    out.push_str(rest);
    (out, args)
}

/// The numbers in a step's text, in order.
fn numbers(text: &str) -> Vec<u64> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// The Services an Ingress's spec names (default backend and rules), with the port each
/// is named with.
fn backends(ingress: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut add = |b: &Value| {
        if let Some(name) = b["service"]["name"].as_str() {
            if !out.iter().any(|(n, _)| n == name) {
                out.push((name.to_string(), b["service"]["port"].clone()));
            }
        }
    };
    add(&ingress["spec"]["defaultBackend"]);
    for rule in ingress["spec"]["rules"].as_array().into_iter().flatten() {
        for p in rule["http"]["paths"].as_array().into_iter().flatten() {
            add(&p["backend"]);
        }
    }
    out
}

fn yaml(doc: &str) -> Result<Value> {
    serde_yaml::from_str(doc).context("a step's YAML")
}

/// What a feature's steps need from the echo backend: its Services and their pod counts.
pub fn echo_needs(features: &[(String, Feature)]) -> Result<BTreeMap<(String, String), usize>> {
    let mut out = BTreeMap::new();
    for (stem, f) in features {
        let ns = namespace_of(stem);
        for s in f
            .background
            .iter()
            .chain(f.scenarios.iter().flat_map(|s| &s.steps))
        {
            let (p, args) = pattern(&s.text);
            if let Some(doc) = &s.doc {
                let v = yaml(doc)?;
                let ing = if p.starts_with("an Ingress resource named") {
                    json!({"spec": v})
                } else {
                    v
                };
                for (name, _) in backends(&ing) {
                    out.entry((ns.clone(), name)).or_insert(1);
                }
            }
            if p.starts_with("The backend deployment \"…\" for the ingress resource is scaled to")
            {
                let n = numbers(&s.text).last().copied().unwrap_or(1) as usize;
                out.insert((ns.clone(), args[0].clone()), n);
            }
        }
    }
    Ok(out)
}

/// A request's answer, as the suite captures it.
#[derive(Debug, Clone, Default)]
struct Captured {
    status: u16,
    proto: String,
    headers: Vec<(String, String)>,
    /// The echo's JSON (Null when the body is not JSON).
    request: Value,
}

/// The Ingress suite on one [`System`].
pub struct IngressRunner<'a> {
    sys: &'a System,
    be: IpAddr,
    /// (namespace, service) → the echo ports of its pods.
    echoes: BTreeMap<(String, String), Vec<u16>>,
    tmp: PathBuf,
}

impl Drop for IngressRunner<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.tmp);
    }
}

/// One scenario's state (the suite's `state.Scenario`).
#[derive(Default, Clone)]
struct Run {
    docs: Vec<Value>,
    ingress: Option<(String, String)>,
    address: Option<String>,
    captured: Option<Captured>,
    /// Statuses of the last "I send N requests" → the pods that answered each.
    many: BTreeMap<u16, std::collections::BTreeSet<String>>,
    /// Certificates made by the scenario's steps, by host name (PEM file).
    cas: BTreeMap<String, PathBuf>,
}

impl<'a> IngressRunner<'a> {
    /// Starts the echo pods on `be1`.
    pub fn start(sys: &'a mut System, needs: &BTreeMap<(String, String), usize>) -> Result<Self> {
        let be = IpAddr::V4(sys.lab.host("be1").v4);
        let bin = crate::bins::locate("lab-backend")?
            .to_string_lossy()
            .into_owned();
        let mut args = vec![bin];
        let mut echoes = BTreeMap::new();
        let mut port = ECHO_PORT;
        for ((ns, svc), pods) in needs {
            let mut ports = Vec::new();
            for i in 0..*pods {
                args.push("--echo".into());
                args.push(format!("{be}:{port},{ns},{svc}-lab-{i}"));
                ports.push(port);
                port += 1;
            }
            echoes.insert((ns.clone(), svc.clone()), ports);
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        sys.lab.spawn_in("be1", "ingress-echo", &argv)?;
        let tmp =
            std::env::temp_dir().join(format!("k8slb-ingress-conformance-{}", std::process::id()));
        std::fs::create_dir_all(&tmp)?;
        let runner = IngressRunner {
            sys,
            be,
            echoes,
            tmp,
        };
        let first = runner
            .echoes
            .values()
            .next()
            .and_then(|p| p.first())
            .copied();
        let url = format!("http://{be}:{}/", first.context("no echo")?);
        crate::wait::until(Duration::from_secs(10), || {
            Ok(runner
                .sys
                .lab
                .run_in("client", &["curl", "-sf", "-m", "1", &url])?
                .status
                .success())
        })
        .context("the Ingress echo backend does not answer")?;
        Ok(runner)
    }

    /// Runs every scenario of a feature: (scenario name, Ok or the failed step and why).
    /// `known` says whether a scenario is a known failure (it then gets
    /// [`crate::conformance::KNOWN_FAIL_TIMEOUT`], not [`STATUS_TIMEOUT`]). Between
    /// features, the last one's Ingresses are deleted and their statuses waited out.
    /// A negative scenario (a 404 expected) cannot pass early on a proxy that has not
    /// loaded the feature's Ingress yet: in every feature a positive scenario (an answer
    /// from a named backend) runs first, on the same objects.
    pub fn run_feature(
        &mut self,
        stem: &str,
        f: &Feature,
        known: impl Fn(&str) -> bool,
    ) -> Vec<(String, Result<(), String>)> {
        let file = format!("ingress-conformance-{stem}");
        let mut out = Vec::new();
        for s in &f.scenarios {
            let timeout = if known(&s.name) {
                crate::conformance::KNOWN_FAIL_TIMEOUT
            } else {
                STATUS_TIMEOUT
            };
            let r = self.run_scenario(stem, &file, f, s, timeout);
            out.push((s.name.clone(), r));
        }
        let _ = self.sys.delete(&file);
        let dir = self
            .sys
            .status_dir()
            .join("Ingress")
            .join(namespace_of(stem));
        let _ = crate::wait::until(Duration::from_secs(10), || {
            Ok(std::fs::read_dir(&dir).map_or(true, |d| d.count() == 0))
        });
        out
    }

    /// The steps up to the first request set the scene, once; the requests and their
    /// assertions are then repeated until they hold [`crate::conformance::SWEEPS`] times
    /// in a row (the proxies converge on a new Ingress a moment after its status shows
    /// the address), or `timeout` passes: Err, the last failed step and why.
    fn run_scenario(
        &self,
        stem: &str,
        file: &str,
        f: &Feature,
        s: &Scenario,
        timeout: Duration,
    ) -> Result<(), String> {
        let steps: Vec<&Step> = f.background.iter().chain(&s.steps).collect();
        let first_request = steps
            .iter()
            .position(|st| pattern(&st.text).0.starts_with("I send "))
            .unwrap_or(steps.len());
        let mut run = Run::default();
        for step in &steps[..first_request] {
            self.step(stem, file, &mut run, step)
                .map_err(|e| format!("{}: {e:#}", step.text))?;
        }
        let deadline = Instant::now() + timeout;
        let mut streak = 0;
        loop {
            let mut probe = run.clone();
            let failed = steps[first_request..].iter().find_map(|step| {
                self.step(stem, file, &mut probe, step)
                    .err()
                    .map(|e| format!("{}: {e:#}", step.text))
            });
            match failed {
                None => {
                    streak += 1;
                    if streak >= crate::conformance::SWEEPS {
                        return Ok(());
                    }
                }
                Some(e) if Instant::now() >= deadline => return Err(e),
                Some(_) => {
                    streak = 0;
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }

    fn namespace_docs(&self, run: &mut Run, ns: &str) {
        if run.docs.iter().any(|d| d["kind"] == "Namespace") {
            return;
        }
        run.docs
            .push(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}}));
        run.docs.push(
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
            "metadata": {"name": "k8slb",
                         "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
            "spec": {"controller": "k8slb.io/ingress-controller"}}),
        );
    }

    fn add_ingress(&self, run: &mut Run, ns: &str, mut ing: Value) {
        ing["metadata"]["namespace"] = json!(ns);
        let name = ing["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        for (svc, port) in backends(&ing) {
            let ports = self
                .echoes
                .get(&(ns.to_string(), svc.clone()))
                .cloned()
                .unwrap_or_default();
            let mut sp = json!({"protocol": "TCP", "port": port["number"].as_u64().unwrap_or(8080), "targetPort": 8080});
            if let Some(n) = port["name"].as_str() {
                sp = json!({"protocol": "TCP", "name": n, "port": 8080, "targetPort": 8080});
            }
            run.docs.push(json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": svc, "namespace": ns},
                "spec": {"selector": {"app": svc}, "ports": [sp]}}));
            for (i, p) in ports.iter().enumerate() {
                let mut slice_port = json!({"protocol": "TCP", "port": p});
                if let Some(n) = sp["name"].as_str() {
                    slice_port["name"] = json!(n);
                }
                run.docs.push(json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": format!("{svc}-lab-{i}"), "namespace": ns,
                                 "labels": {"kubernetes.io/service-name": svc}},
                    "addressType": "IPv4",
                    "endpoints": [{"addresses": [self.be.to_string()],
                                   "conditions": {"ready": true, "serving": true, "terminating": false}}],
                    "ports": [slice_port]}));
            }
        }
        run.docs.push(ing);
        run.ingress = Some((ns.to_string(), name));
    }

    fn ingress_address(&self, run: &Run) -> Option<String> {
        let (ns, name) = run.ingress.as_ref()?;
        let st = self.sys.status_of(&format!("Ingress/{ns}/{name}"))?;
        st.pointer("/loadBalancer/ingress/0/ip")
            .or_else(|| st.pointer("/loadBalancer/ingress/0/hostname"))
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    fn step(&self, stem: &str, file: &str, run: &mut Run, step: &Step) -> Result<()> {
        let ns = namespace_of(stem);
        let (p, args) = pattern(&step.text);
        let nums = numbers(&step.text);
        let doc = || step.doc.as_deref().context("the step has no doc string");
        match p.as_str() {
            "a new random namespace" => self.namespace_docs(run, &ns),
            "an Ingress resource in a new random namespace" | "an Ingress resource" => {
                self.namespace_docs(run, &ns);
                let ing = yaml(doc()?)?;
                self.add_ingress(run, &ns, ing);
            }
            "an Ingress resource named \"…\" with this spec:" => {
                self.namespace_docs(run, &ns);
                let ing = json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                    "metadata": {"name": args[0]}, "spec": yaml(doc()?)?});
                self.add_ingress(run, &ns, ing);
            }
            "a self-signed TLS secret named \"…\" for the \"…\" hostname" => {
                let (crt, key) = k8slb_common::testing::self_signed_for(&[args[1].as_str()]);
                let ca = self.tmp.join(format!("{stem}-{}.pem", args[1]));
                std::fs::write(&ca, &crt)?;
                run.cas.insert(args[1].clone(), ca);
                run.docs.push(crate::l7::tls_secret(&ns, &args[0], &crt, &key));
            }
            "The Ingress status shows the IP address or FQDN where it is exposed" => {
                self.sys.apply(file, &json!({"apiVersion": "v1", "kind": "List", "items": run.docs}))?;
                crate::wait::until(STATUS_TIMEOUT, || Ok(self.ingress_address(run).is_some()))
                    .context("the Ingress has no address in its status")?;
                run.address = self.ingress_address(run);
            }
            "The Ingress status should not contain the IP address or FQDN" => {
                self.sys.apply(file, &json!({"apiVersion": "v1", "kind": "List", "items": run.docs}))?;
                // The suite's negative: no address over a window (3 s: the watcher's
                // rounds are sub-second; the positive steps converge within that).
                let t = Instant::now();
                while t.elapsed() < Duration::from_secs(3) {
                    if let Some(a) = self.ingress_address(run) {
                        bail!("the Ingress has the address {a}");
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
            "The backend deployment \"…\" for the ingress resource is scaled to" => {
                let want = nums.last().copied().unwrap_or(0) as usize;
                let have = self.echoes.get(&(ns.clone(), args[0].clone())).map_or(0, Vec::len);
                if have != want {
                    bail!("{} has {have} echo pods, not {want}", args[0]);
                }
            }
            "I send a \"…\" request to \"…\"" => {
                run.captured = Some(self.round_trip(run, &args[0], &args[1])?);
            }
            "I send a \"…\" request to http://\"…\"/\"…\"" => {
                let url = format!("http://{}/{}", args[1], args[2]);
                run.captured = Some(self.round_trip(run, &args[0], &url)?);
            }
            "I send  requests to \"…\"" => {
                let n = nums.first().copied().unwrap_or(1);
                run.many.clear();
                for _ in 0..n {
                    let c = self.round_trip(run, "GET", &args[0])?;
                    let pod = c.request["pod"].as_str().unwrap_or_default().to_string();
                    run.many.entry(c.status).or_default().insert(pod);
                }
            }
            "all the responses status-code must be  and the response body should contain the IP address of  different Kubernetes pods" => {
                let (status, pods) = (nums[0] as u16, nums[1] as usize);
                let got = run.many.get(&status).context(format!("no response with status {status}: {:?}", run.many))?;
                if got.len() != pods {
                    bail!("{} different pods answered {status}, not {pods}: {got:?}", got.len());
                }
            }
            _ => return self.assertion(run, &p, &args, &nums, step),
        }
        Ok(())
    }

    fn assertion(
        &self,
        run: &Run,
        p: &str,
        args: &[String],
        nums: &[u64],
        step: &Step,
    ) -> Result<()> {
        let c = run.captured.as_ref().context("no request was sent")?;
        let req = |k: &str| c.request[k].as_str().unwrap_or_default().to_string();
        let eq = |what: &str, got: String, want: &str| -> Result<()> {
            if got != want {
                bail!("{what} is {got:?}, not {want:?}");
            }
            Ok(())
        };
        match p {
            "the response status-code must be" => {
                let want = nums.first().copied().unwrap_or_default();
                if u64::from(c.status) != want {
                    bail!("the status is {}, not {want}", c.status);
                }
            }
            "the response must be served by the \"…\" service" => {
                eq("the service", req("service"), &args[0])?
            }
            "the request host must be \"…\"" => eq("the request's host", req("host"), &args[0])?,
            "the request method must be \"…\"" => {
                eq("the request's method", req("method"), &args[0])?
            }
            "the request proto must be \"…\"" => {
                eq("the request's proto", req("proto"), &args[0])?
            }
            "the response proto must be \"…\"" => {
                eq("the response's proto", c.proto.clone(), &args[0])?
            }
            "the request path must be \"…\"" => {
                let want = if args[0].starts_with('/') {
                    args[0].clone()
                } else {
                    format!("/{}", args[0])
                };
                eq("the request's path", req("path"), &want)?;
            }
            "the secure connection must verify the \"…\" hostname" => {
                let ca = run
                    .cas
                    .get(&args[0])
                    .context("no certificate was made for that host")?;
                let ip = run.address.as_deref().context("no address")?;
                let out = self.sys.lab.run_in(
                    "client",
                    &[
                        "curl",
                        "-s",
                        "-o",
                        "/dev/null",
                        "-m",
                        "3",
                        "--cacert",
                        &ca.display().to_string(),
                        "--resolve",
                        &format!("{}:443:{ip}", args[0]),
                        &format!("https://{}/", args[0]),
                    ],
                )?;
                if !out.status.success() {
                    bail!(
                        "curl could not verify {} (exit {:?})",
                        args[0],
                        out.status.code()
                    );
                }
            }
            "the response headers must contain <key> with matching <value>" => {
                for row in step.table.iter().skip(1) {
                    let vals: Vec<&str> = c
                        .headers
                        .iter()
                        .filter(|(k, _)| k.eq_ignore_ascii_case(&row[0]))
                        .map(|(_, v)| v.as_str())
                        .collect();
                    if vals.is_empty() || (row[1] != "*" && !vals.contains(&row[1].as_str())) {
                        bail!(
                            "the response headers have no {} {}: {:?}",
                            row[0],
                            row[1],
                            c.headers
                        );
                    }
                }
            }
            "the request headers must contain <key> with matching <value>" => {
                for row in step.table.iter().skip(1) {
                    let vals: Vec<String> = c.request["headers"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .filter(|(k, _)| k.eq_ignore_ascii_case(&row[0]))
                        .flat_map(|(_, v)| v.as_array().cloned().unwrap_or_default())
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect();
                    if vals.is_empty() || (row[1] != "*" && !vals.contains(&row[1])) {
                        bail!(
                            "the request headers have no {} {}: {}",
                            row[0],
                            row[1],
                            c.request["headers"]
                        );
                    }
                }
            }
            _ => bail!("a step the interpreter does not know"),
        }
        Ok(())
    }

    /// The suite's `CaptureRoundTrip`: `method` to `url` at the Ingress's address,
    /// redirects followed.
    fn round_trip(&self, run: &Run, method: &str, url: &str) -> Result<Captured> {
        let ip = run.address.clone().context("the Ingress has no address")?;
        let (mut scheme, rest) = url.split_once("://").context("a URL")?;
        let (host, path) = rest
            .split_once('/')
            .map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
        let (mut host, mut path) = (host.to_string(), path);
        for _ in 0..10 {
            let tls = scheme == "https";
            let port = if tls { 443 } else { 80 };
            let name = if host.is_empty() {
                ip.clone()
            } else {
                host.clone()
            };
            let mut a: Vec<String> = [
                "curl",
                "-s",
                "-i",
                "--path-as-is",
                "-m",
                "5",
                "-X",
                method,
                "-A",
                "Go-http-client/1.1",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let target = if tls {
                a.extend([
                    "-k".into(),
                    "--resolve".into(),
                    format!("{name}:{port}:{ip}"),
                ]);
                format!("https://{name}:{port}{path}")
            } else {
                a.extend(["-H".into(), format!("Host: {name}")]);
                format!("http://{ip}:{port}{path}")
            };
            a.push(target);
            let argv: Vec<&str> = a.iter().map(String::as_str).collect();
            let out = self.sys.lab.run_in("client", &argv)?;
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            let answer = crate::conformance::parse_answer(&text).with_context(|| {
                format!(
                    "no HTTP answer from {url} (curl exit {:?})",
                    out.status.code()
                )
            })?;
            let proto = text
                .lines()
                .next()
                .and_then(|l| l.split(' ').next())
                .unwrap_or_default()
                .to_string();
            if matches!(answer.status, 301 | 302 | 303 | 307 | 308) {
                let loc = answer
                    .headers
                    .iter()
                    .find(|(k, _)| k == "location")
                    .map(|(_, v)| v.clone())
                    .context("a redirect without Location")?;
                let (s, r) = match loc.split_once("://") {
                    Some((s, r)) => (s.to_string(), r.to_string()),
                    None => (scheme.to_string(), format!("{host}{loc}")),
                };
                let (h, p) = r
                    .split_once('/')
                    .map_or((r.clone(), "/".to_string()), |(h, p)| {
                        (h.to_string(), format!("/{p}"))
                    });
                scheme = if s == "https" { "https" } else { "http" };
                host = h.split(':').next().unwrap_or_default().to_string();
                path = p;
                continue;
            }
            return Ok(Captured {
                status: answer.status,
                proto,
                headers: answer.headers,
                request: serde_json::from_str(&answer.body).unwrap_or(Value::Null),
            });
        }
        bail!("more than 10 redirects")
    }
}

/// The `K8SLB_CONFORMANCE_DIR` features exist and every step of them is one the
/// interpreter knows (checked without a lab).
pub fn unknown_steps(features: &[(String, Feature)]) -> Vec<String> {
    const KNOWN: &[&str] = &[
        "a new random namespace",
        "an Ingress resource in a new random namespace",
        "an Ingress resource",
        "an Ingress resource named \"…\" with this spec:",
        "a self-signed TLS secret named \"…\" for the \"…\" hostname",
        "The Ingress status shows the IP address or FQDN where it is exposed",
        "The Ingress status should not contain the IP address or FQDN",
        "The backend deployment \"…\" for the ingress resource is scaled to",
        "I send a \"…\" request to \"…\"",
        "I send a \"…\" request to http://\"…\"/\"…\"",
        "I send  requests to \"…\"",
        "all the responses status-code must be  and the response body should contain the IP address of  different Kubernetes pods",
        "the response status-code must be",
        "the response must be served by the \"…\" service",
        "the request host must be \"…\"",
        "the request method must be \"…\"",
        "the request proto must be \"…\"",
        "the response proto must be \"…\"",
        "the request path must be \"…\"",
        "the secure connection must verify the \"…\" hostname",
        "the response headers must contain <key> with matching <value>",
        "the request headers must contain <key> with matching <value>",
    ];
    let mut out = Vec::new();
    for (stem, f) in features {
        for s in f
            .background
            .iter()
            .chain(f.scenarios.iter().flat_map(|s| &s.steps))
        {
            let (p, _) = pattern(&s.text);
            if !KNOWN.contains(&p.as_str()) {
                out.push(format!("{stem}: {}", s.text));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steps_quoted_parts_are_its_arguments() {
        let (p, a) = pattern(r#"I send a "GET" request to http://"my-host"/"""#);
        assert_eq!(
            pattern("the response status-code must be 404").0,
            "the response status-code must be"
        );
        assert_eq!(p, "I send a \"…\" request to http://\"…\"/\"…\"");
        assert_eq!(a, ["GET", "my-host", ""]);
        assert_eq!(
            numbers("all the responses status-code must be 200 and ... 10 different"),
            [200, 10]
        );
    }
}
