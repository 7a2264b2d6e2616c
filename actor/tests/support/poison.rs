//! A poison the plan does not know about, for the quarantine's tests and bench: the real
//! view and render, plus a block the proxy refuses for one owner (a Service whose port is
//! [`POISON_PORT`]); a proxy whose check is a real checker (given as a closure) and whose
//! start and reload only record the config; and states of many Services.

#![allow(dead_code)]

use k8slb_actor::apply::{Desired, NodeContext, NodeRenderer};
use k8slb_actor::daemons::{Daemon, DaemonError, DaemonKind};
use k8slb_actor::node_renderer::RealRenderer;
use k8slb_actor::view::NodeView;
use k8slb_common::state::{Endpoint, Provider, State};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A Service with this port gets the poison block.
pub const POISON_PORT: u16 = 6666;

/// The real renderer; a view of a state with a Service on [`POISON_PORT`] renders a
/// block the proxy refuses (HAProxy: an unknown keyword in a backend; nginx: an unknown
/// directive).
pub struct PoisonRenderer {
    pub real: RealRenderer,
    pub proxy: Provider,
}

impl NodeRenderer for PoisonRenderer {
    type View = (NodeView, Vec<String>);
    fn view(
        &self,
        state: &State,
        ctx: &NodeContext,
        previous: Option<&Self::View>,
    ) -> Result<Self::View, k8slb_actor::view::ViewError> {
        let poisoned = state
            .services
            .iter()
            .filter(|(_, s)| s.ports.iter().any(|p| p.port == POISON_PORT))
            .map(|(k, _)| k.to_string().replace('/', "_"))
            .collect();
        Ok((
            self.real.view(state, ctx, previous.map(|p| &p.0))?,
            poisoned,
        ))
    }
    fn render(&self, view: &Self::View) -> Result<Desired, k8slb_actor::render_error::RenderError> {
        let mut d = self.real.render(&view.0)?;
        if let Some(text) = d.proxy.as_mut() {
            for p in &view.1 {
                match self.proxy {
                    Provider::Nginx => text.push_str(&format!("\npoison_directive_of_{p} on;\n")),
                    _ => text.push_str(&format!("\nbackend poison_{p}\n  poison-keyword-of-{p}\n")),
                }
            }
        }
        Ok(d)
    }
    fn runtime_diff(&self, old: &Self::View, new: &Self::View) -> Option<Vec<String>> {
        (old.1 == new.1)
            .then(|| self.real.runtime_diff(&old.0, &new.0))
            .flatten()
    }
    fn same_outside_proxy(&self, old: &Self::View, new: &Self::View) -> bool {
        old.1 == new.1 && self.real.same_outside_proxy(&old.0, &new.0)
    }
    fn listens(
        &self,
        view: &Self::View,
    ) -> std::collections::BTreeSet<(std::net::SocketAddr, k8slb_actor::ports::Transport)> {
        self.real.listens(&view.0)
    }
    fn fd_shortfall(&self, view: &Self::View) -> Option<String> {
        self.real.fd_shortfall(&view.0)
    }
}

pub type Checker = Box<dyn Fn(&Path) -> Result<(), DaemonError> + Send>;

/// A daemon whose check is `check` (a real checker) and whose start, reload and Runtime
/// API record what it would serve: the config file's text, in `serving`.
pub struct Checked {
    pub kind: DaemonKind,
    pub cfg: PathBuf,
    pub check: Checker,
    pub up: bool,
    pub serving: Arc<Mutex<String>>,
    pub checks: Arc<Mutex<usize>>,
}

impl Checked {
    fn load(&self) {
        *self.serving.lock().unwrap() = std::fs::read_to_string(&self.cfg).unwrap_or_default();
    }
}

impl Daemon for Checked {
    fn kind(&self) -> DaemonKind {
        self.kind
    }
    fn config_path(&self) -> &Path {
        &self.cfg
    }
    fn check(&self, candidate: &Path) -> Result<(), DaemonError> {
        *self.checks.lock().unwrap() += 1;
        (self.check)(candidate)
    }
    fn start(&mut self) -> Result<(), DaemonError> {
        self.up = true;
        self.load();
        Ok(())
    }
    fn reload(&mut self) -> Result<(), DaemonError> {
        self.load();
        Ok(())
    }
    fn runtime(&mut self, _: &[String]) -> Result<(), DaemonError> {
        // No process to talk to: a reload stands in (the file is written after).
        Err(DaemonError::RuntimeUnsupported { daemon: self.kind })
    }
    fn poll_exit(&mut self) -> Option<String> {
        None
    }
    fn is_running(&self) -> bool {
        self.up
    }
    fn stop(&mut self, _: Duration) {
        self.up = false;
    }
}

/// keepalived that accepts everything.
pub fn any_keepalived(cfg: PathBuf) -> Checked {
    Checked {
        kind: DaemonKind::Keepalived,
        cfg,
        check: Box::new(|_| Ok(())),
        up: false,
        serving: Default::default(),
        checks: Default::default(),
    }
}

/// The `default-sections` state (Services default/web, default/db, default/empty on
/// 192.168.10.240-242, pool `default`, nodes lb-1 and lb-2).
pub fn base_state() -> State {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/default-sections.json");
    State::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Add the Service `<key>` (a copy of default/web: HTTP, on 192.168.10.240) on `port`
/// with one endpoint `ep:8080`.
pub fn add_service(s: &mut State, key: &str, port: u16, ep: &str) {
    let web = s.services[&"default/web".parse().unwrap()].clone();
    let mut svc = web;
    svc.ports.truncate(1);
    svc.ports[0].port = port;
    svc.ports[0].endpoints = vec![Endpoint {
        ip: ep.parse().unwrap(),
        port: 8080,
        draining: false,
    }];
    let k: k8slb_common::names::ServiceKey = key.parse().unwrap();
    s.services.insert(k.clone(), svc);
    let vip = s.vips.get_mut(&"192.168.10.240".parse().unwrap()).unwrap();
    if !vip.services.contains(&k) {
        vip.services.push(k);
        vip.services.sort();
    }
}

/// `n` tenant Services `t<i>/svc` on ports 20000 + i, and one poison `tp/poison`.
pub fn tenants(n: usize) -> State {
    let mut s = base_state();
    for i in 0..n {
        let port = 20000 + u16::try_from(i).unwrap();
        add_service(
            &mut s,
            &format!("t{i}/svc"),
            port,
            &format!("10.2.{}.{}", i / 250, 1 + i % 250),
        );
    }
    add_service(&mut s, "tp/poison", POISON_PORT, "10.3.0.1");
    s
}
