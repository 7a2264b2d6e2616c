//! The configs k8slb ships (manifests/overlays/<proxy>/config-<proxy>.yml, and the built-in sections of a
//! config without `haproxy` / `nginx`) render without the actor dropping any of their
//! lines (issue 9: the shipped `httpfront` lines were dropped, with a log line, on every
//! render). An admin's duplicate of a line the template writes is still dropped, and
//! logged once per distinct config, not per render.
//!
//! The log lines are the actor's own (`RealRenderer::view`), captured from `tracing`.

use k8slb_actor::apply::{NodeContext, NodeRenderer};
use k8slb_actor::node_renderer::RealRenderer;
use k8slb_actor::render::Renderer;
use k8slb_actor::view::ViewOptions;
use k8slb_common::config::{parse_config_file, parse_global_config};
use k8slb_common::state::{Provider, State};
use std::io::Write;
use std::sync::{Arc, Mutex};

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
    /// Run `f` with the actor's log going here.
    fn during<T>(&self, f: impl FnOnce() -> T) -> T {
        let w = self.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || w.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(sub, f)
    }
}

/// `fixtures/plain-http.json` (an http and a tcp Service) with `config` as its config.
fn state_with(config: &k8slb_common::config::GlobalConfig) -> State {
    let mut s = State::from_json(include_str!("fixtures/plain-http.json")).unwrap();
    s.config = config.actor_config(&"/etc/k8slb/certs".parse().unwrap());
    s
}

fn renderer(proxy: Provider) -> RealRenderer {
    let mut o = ViewOptions::new(proxy);
    o.interfaces
        .insert("default".parse().unwrap(), "eth0".parse().unwrap());
    RealRenderer::new(Renderer::embedded().unwrap(), "lb-1".parse().unwrap(), o)
}

/// View + render `state` like the actor does, `times` times from scratch (a retry or a
/// restart has no previous view); the captured log.
fn view_render(proxy: Provider, state: &State, times: usize) -> (String, Vec<String>) {
    let r = renderer(proxy);
    let log = Captured::default();
    let notes = log.during(|| {
        let mut notes = Vec::new();
        for _ in 0..times {
            let v = r.view(state, &NodeContext::default(), None).unwrap();
            r.render(&v).unwrap();
            notes = v.notes;
        }
        notes
    });
    (log.text(), notes)
}

#[test]
fn shipped_configs_render_without_dropping_a_line() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/overlays");
    for proxy in [Provider::Haproxy, Provider::Nginx, Provider::Kubeproxy] {
        let name = format!("{proxy:?}").to_lowercase();
        let path = format!("{root}/{name}/config-{name}.yml");
        let text = std::fs::read_to_string(&path).unwrap();
        let cfg = parse_config_file(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        let state = state_with(&cfg);
        assert!(!state.services.is_empty());
        let (log, notes) = view_render(proxy, &state, 2);
        assert!(
            !log.contains("dropped"),
            "{path}: the actor drops a line:\n{log}"
        );
        assert!(
            notes.iter().all(|n| !n.contains("dropped")),
            "{path}: {notes:?}"
        );
    }
    // The built-in sections (a config with pools only).
    let cfg = parse_global_config(
        r#"{"pools": {"default": {"network": "192.168.10.0/24", "range": "192.168.10.240-192.168.10.249"}}}"#,
    )
    .unwrap();
    for proxy in [Provider::Haproxy, Provider::Nginx] {
        let (log, _) = view_render(proxy, &state_with(&cfg), 2);
        assert!(!log.contains("dropped"), "built-in {proxy:?}:\n{log}");
    }
}

#[test]
fn an_admins_duplicate_line_is_dropped_and_logged_once_per_config() {
    let text = r#"{"pools": {"default": {"network": "192.168.10.0/24", "range": "192.168.10.240-192.168.10.249"}},
        "haproxy": {"global": [], "defaults": [], "tcpfront": [], "tcpback": [], "httpback": [],
                    "httpfront": ["option forwardfor", "http-request set-header X-Real-IP %[src]"]}}"#;
    let state = state_with(&parse_global_config(text).unwrap());
    let r = renderer(Provider::Haproxy);
    let log = Captured::default();
    let dropped = |log: &Captured| log.text().matches("dropped").count();
    log.during(|| {
        // Three views of the same config from scratch (retries, a restart): one line.
        for _ in 0..3 {
            let v = r.view(&state, &NodeContext::default(), None).unwrap();
            let cfg = r.render(&v).unwrap().proxy.unwrap();
            // Once per http frontend (the template's), never twice in one.
            assert!(cfg.contains("option forwardfor"), "{cfg}");
            for block in cfg.split("\nfrontend ") {
                assert!(block.matches("option forwardfor").count() <= 1, "{cfg}");
            }
            assert!(cfg.contains("http-request set-header X-Real-IP %[src]"));
        }
    });
    assert_eq!(dropped(&log), 1, "{}", log.text());
    assert!(
        log.text()
            .contains(r#"haproxy.httpfront line "option forwardfor" dropped"#),
        "{}",
        log.text()
    );

    // Another config with one more duplicate: only the new one is logged.
    let mut other = state.clone();
    other
        .config
        .haproxy
        .httpfront
        .push("option  forwardfor".parse().unwrap());
    log.during(|| {
        for _ in 0..2 {
            r.view(&other, &NodeContext::default(), None).unwrap();
        }
    });
    assert_eq!(dropped(&log), 2, "{}", log.text());
}
