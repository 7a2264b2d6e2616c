//! BGP mode (issue 25): the addresses of BGP-mode pools are bound on `lo` of every LB
//! node and announced as host routes to the routers through FRR, which spread flows over
//! the nodes (ECMP). keepalived has nothing to do with them (the plan puts them in no
//! VRRP instance).
//!
//! - [`render`]: pure: which addresses are announced (those of BGP-mode pools that the
//!   proxy serves now, none when the node is not an LB node) and `frr.conf`;
//! - [`daemon`]: zebra, bfdd and bgpd as children, the checker (`vtysh --dryrun`), the
//!   reload (`frr-reload.py`, no session reset);
//! - [`Bgp`]: the driver the control loop calls: after every apply and every supervision
//!   tick ([`Bgp::update`]: the proxy crashed, was refused, came back), at shutdown
//!   ([`Bgp::withdraw`] before the proxy stops, then [`Bgp::stop`]).
//!
//! A change of the announced set alone (the usual one: a proxy crashed or came back, a
//! Service came or went) is applied with `vtysh` `network` / `no network` commands at
//! once; anything else goes through `frr-reload.py`. Both leave sessions up.

pub mod daemon;
pub mod render;
pub mod sessions;

use crate::admin::Metrics;
use crate::daemons::{Daemon, DaemonError};
use crate::supervise::{Action, Restarter};
use crate::vip::{self, AddrOps};
use daemon::{Frr, FrrBinaries};
use ipnet::IpNet;
use k8slb_common::bgp::{BgpPassword, SecretName, PASSWORD_KEY};
use k8slb_common::names::NodeName;
use k8slb_common::report::PeerProblem;
use k8slb_common::state::State;
use render::{announced, bgp_vips, frr_view, FrrRenderer, FrrView, LeftOut};
use sessions::{parse_neighbors, PeerWatch};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where FRR's files of the actor with `work_dir` go: under `/run/k8slb-frr/`, one
/// directory per work dir (several actors on one machine, in network namespaces). Not
/// under the work dir: FRR's daemons run as the `frr` user, which must reach its
/// sockets, and a work dir may be under a directory only root may enter (`/root`).
pub fn runtime_dir(work_dir: &std::path::Path) -> PathBuf {
    let abs = std::path::absolute(work_dir).unwrap_or_else(|_| work_dir.to_path_buf());
    let h = k8slb_common::publish::fnv1a(abs.as_os_str().as_encoded_bytes());
    PathBuf::from(RUNTIME_ROOT).join(format!("{h:016x}"))
}

/// The parent of every [`runtime_dir`] (created 0755).
pub const RUNTIME_ROOT: &str = "/run/k8slb-frr";

/// The loopback interface the BGP-mode addresses are bound on.
pub const LOOPBACK: &str = "lo";
/// How long [`Bgp::withdraw`] waits at most for the routes to be gone (the default
/// of `--bgp-withdraw-wait-ms`).
pub const DEFAULT_WITHDRAW_WAIT: Duration = Duration::from_secs(2);
/// After FRR has no prefix left to send, how long the proxy still serves (within the
/// withdraw wait): the routers receive the withdrawal and reprogram their forwarding.
const WITHDRAW_LINGER: Duration = Duration::from_millis(300);
/// How often the sessions are looked at (metrics, readiness).
const OBSERVE_EVERY: Duration = Duration::from_secs(1);
/// How soon a config that failed is tried again (a new one is tried at once).
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// What FRR reports of its sessions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sessions {
    pub peers: usize,
    pub established: usize,
    /// Prefixes sent, summed over the established sessions.
    pub prefixes_sent: u64,
    pub bfd_up: usize,
}

/// `show bgp summary json` (every address family) into [`Sessions`] (without BFD).
pub fn parse_summary(json: &str) -> Sessions {
    let mut s = Sessions::default();
    let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
        return s;
    };
    let mut seen = BTreeSet::new();
    let Some(families) = v.as_object() else {
        return s;
    };
    for fam in families.values() {
        let Some(peers) = fam.get("peers").and_then(|p| p.as_object()) else {
            continue;
        };
        for (addr, p) in peers {
            let up = p.get("state").and_then(|x| x.as_str()) == Some("Established");
            if seen.insert(addr.clone()) {
                s.peers += 1;
                if up {
                    s.established += 1;
                }
            }
            if up {
                s.prefixes_sent += p.get("pfxSnt").and_then(|x| x.as_u64()).unwrap_or(0);
            }
        }
    }
    s
}

/// `show bfd peers json`: how many are up.
pub fn parse_bfd(json: &str) -> usize {
    serde_json::from_str::<Vec<serde_json::Value>>(json)
        .map(|v| {
            v.iter()
                .filter(|p| p.get("status").and_then(|s| s.as_str()) == Some("up"))
                .count()
        })
        .unwrap_or(0)
}

/// The announced-set change between two views that differ in nothing else: the
/// `vtysh` commands that make it, or `None` when something else changed.
pub fn network_commands(old: &FrrView, new: &FrrView) -> Option<Vec<String>> {
    let strip = |v: &FrrView| FrrView {
        v4_announced: vec![],
        v6_announced: vec![],
        ..v.clone()
    };
    if strip(old) != strip(new) {
        return None;
    }
    let mut cmds = vec![
        "configure terminal".to_string(),
        format!("router bgp {}", new.asn),
    ];
    for (fam, o, n) in [
        ("ipv4", &old.v4_announced, &new.v4_announced),
        ("ipv6", &old.v6_announced, &new.v6_announced),
    ] {
        let (o, n): (BTreeSet<&IpNet>, BTreeSet<&IpNet>) = (o.iter().collect(), n.iter().collect());
        if o == n {
            continue;
        }
        cmds.push(format!("address-family {fam} unicast"));
        cmds.extend(o.difference(&n).map(|p| format!("no network {p}")));
        cmds.extend(n.difference(&o).map(|p| format!("network {p}")));
        cmds.push("exit-address-family".into());
    }
    Some(cmds)
}

/// The BGP side of one actor.
pub struct Bgp {
    node: NodeName,
    frr: Frr,
    renderer: FrrRenderer,
    metrics: Arc<Metrics>,
    /// The state last applied (what [`Bgp::refresh`] works from).
    state: Option<Arc<State>>,
    node_addresses: Vec<IpAddr>,
    /// What FRR runs: the view and its text (the file at `frr.conf`).
    running: Option<(FrrView, String)>,
    restarter: Restarter,
    /// Why FRR does not run what is wanted (a refused config, a failed start).
    failure: Option<String>,
    /// Withdrawn for good (shutdown): nothing is announced any more.
    withdrawn: bool,
    sessions: Option<Sessions>,
    observed_at: Option<Instant>,
    /// A config that failed (its check, reload or start), and when to try it again:
    /// the same text is not tried on every tick.
    retry: Option<(String, Instant)>,
    /// The addresses this actor put on `lo`.
    bound: BTreeSet<IpAddr>,
    /// Where the password Secrets are, one directory each (`<dir>/<name>/password`):
    /// `--bgp-secrets-dir`.
    secrets_dir: Option<PathBuf>,
    /// The peers the last rendered config leaves out, as last logged.
    left_out: Vec<LeftOut>,
    /// The sessions, for the node report.
    watch: PeerWatch,
    /// Addresses to remove from `lo`, withdrawn, and when (see [`Bgp::bind`]).
    unbind_after: BTreeMap<IpAddr, Instant>,
}

fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}

/// The password of Secret `name` from its node copy `<dir>/<name>/password` (the
/// layout of a Secret volume), checked; or why there is none (never the value).
pub fn read_password(
    dir: Option<&std::path::Path>,
    name: &SecretName,
) -> Result<BgpPassword, String> {
    const MAX_FILE: u64 = 4096;
    let Some(dir) = dir else {
        return Err(format!(
            "Secret {name}: this actor has no --bgp-secrets-dir"
        ));
    };
    let path = dir.join(name.as_str()).join(PASSWORD_KEY);
    let missing = || {
        format!(
            "Secret {name} (k8slb's namespace, type {}, key {PASSWORD_KEY}) is not on this node ({})",
            k8slb_common::bgp::PASSWORD_SECRET_TYPE,
            path.display()
        )
    };
    match std::fs::metadata(&path) {
        Ok(m) if m.len() > MAX_FILE => {
            return Err(format!(
                "Secret {name}: its {PASSWORD_KEY} is {} bytes long",
                m.len()
            ))
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    let bytes = std::fs::read(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => missing(),
        _ => format!("{}: {e}", path.display()),
    })?;
    BgpPassword::try_from(bytes.as_slice())
        .map_err(|e| format!("the {PASSWORD_KEY} of Secret {name} {e}"))
}

impl Bgp {
    pub fn new(
        node: NodeName,
        dir: PathBuf,
        templates: Option<&std::path::Path>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let renderer = templates
            .map(FrrRenderer::from_dir)
            .unwrap_or_else(FrrRenderer::embedded)
            .or_else(|e| {
                tracing::error!(error = %e, "frr.conf template; using the embedded one");
                FrrRenderer::embedded()
            })
            .expect("the embedded frr.conf template parses (a unit test says so)");
        Bgp {
            node,
            frr: Frr::new(dir, FrrBinaries::default()),
            renderer,
            metrics,
            state: None,
            node_addresses: Vec::new(),
            running: None,
            restarter: Restarter::default(),
            failure: None,
            withdrawn: false,
            sessions: None,
            observed_at: None,
            retry: None,
            bound: BTreeSet::new(),
            secrets_dir: None,
            left_out: Vec::new(),
            watch: PeerWatch::default(),
            unbind_after: BTreeMap::new(),
        }
    }

    /// Where the peers' password Secrets are (`--bgp-secrets-dir`).
    pub fn set_secrets_dir(&mut self, dir: PathBuf) {
        self.secrets_dir = Some(dir);
    }

    /// The node's BGP peers that refuse its session, are down for long, or are left out
    /// of its config (for the node report).
    pub fn problems(&self, now: Instant) -> Vec<PeerProblem> {
        match &self.running {
            Some((view, _)) => self.watch.problems(view, now),
            None => Vec::new(),
        }
    }

    /// A new state was applied: bind its BGP-mode addresses on `lo`, announce those
    /// served. `serving`: the VIPs the proxy serves now (`None`: no proxy of ours).
    pub fn update(
        &mut self,
        state: Arc<State>,
        node_addresses: Vec<IpAddr>,
        serving: Option<&BTreeSet<IpAddr>>,
        ops: &mut dyn AddrOps,
        now: Instant,
    ) {
        self.state = Some(state);
        self.node_addresses = node_addresses;
        self.bind(ops, now);
        self.refresh(serving, now);
    }

    /// The addresses of the state's BGP-mode pools on `lo` (this node is an LB node),
    /// and no other address of a pool network there. An address that goes (the node was
    /// drained, the Service deleted) leaves `lo` only once FRR no longer announces it and
    /// [`WITHDRAW_LINGER`] later, so the routers stop sending new flows to this node
    /// before it stops accepting them; until then [`Bgp::supervise`] comes back to it.
    fn bind(&mut self, ops: &mut dyn AddrOps, now: Instant) {
        let Some(state) = self.state.clone() else {
            return;
        };
        let wanted: BTreeSet<IpAddr> = if state.nodes.contains_key(&self.node) {
            bgp_vips(&state)
        } else {
            BTreeSet::new()
        };
        let held = match ops.addresses() {
            Ok(h) => h,
            Err(e) => {
                tracing::error!(error = %e, "could not list addresses");
                return;
            }
        };
        let on_lo: BTreeSet<IpAddr> = held
            .iter()
            .filter(|a| a.ifname == LOOPBACK)
            .map(|a| a.ip())
            .collect();
        for ip in wanted.difference(&on_lo) {
            match ops.add(LOOPBACK, IpNet::from(*ip)) {
                Ok(()) => {
                    self.bound.insert(*ip);
                    tracing::info!(vip = %ip, "BGP-mode VIP bound on lo")
                }
                Err(e) => {
                    tracing::error!(vip = %ip, error = %e, "could not bind a BGP-mode VIP on lo")
                }
            }
        }
        // Only BGP-mode pools' addresses (a VRRP pool with `interface: lo` is
        // keepalived's), and those this actor bound (its pool left BGP mode).
        let bgp_pools: BTreeMap<_, _> = state
            .config
            .pools
            .iter()
            .filter(|(_, p)| !p.mode.is_vrrp())
            .map(|(n, p)| (n.clone(), p.clone()))
            .collect();
        let pools: Vec<_> = vip::pool_networks(&bgp_pools)
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        let stale: Vec<vip::Addr> = held
            .iter()
            .filter(|a| {
                a.ifname == LOOPBACK
                    && a.net.prefix_len() == a.net.max_prefix_len()
                    && !a.ip().is_loopback()
                    && !wanted.contains(&a.ip())
                    && (self.bound.contains(&a.ip()) || pools.iter().any(|p| p.contains(a.ip())))
            })
            .cloned()
            .collect();
        let announced: BTreeSet<IpAddr> = self
            .running
            .as_ref()
            .map(|(v, _)| v.prefixes().map(|p| p.addr()).collect())
            .unwrap_or_default();
        let stale_ips: BTreeSet<IpAddr> = stale.iter().map(|a| a.ip()).collect();
        self.unbind_after.retain(|ip, _| stale_ips.contains(ip));
        for a in &stale {
            if announced.contains(&a.ip()) {
                continue; // the refresh that follows withdraws it first
            }
            let at = *self
                .unbind_after
                .entry(a.ip())
                .or_insert(now + WITHDRAW_LINGER);
            if now < at {
                continue;
            }
            self.unbind_after.remove(&a.ip());
            match ops.delete(a) {
                Ok(()) => {
                    self.bound.remove(&a.ip());
                    tracing::info!(vip = %a.ip(), "BGP-mode VIP removed from lo")
                }
                Err(e) => {
                    tracing::error!(vip = %a.ip(), error = %e, "could not remove a VIP from lo")
                }
            }
        }
    }

    /// Render what should be announced now and bring FRR to it (start, fast path,
    /// reload, or stop when this node runs no BGP any more).
    pub fn refresh(&mut self, serving: Option<&BTreeSet<IpAddr>>, now: Instant) {
        let Some(state) = self.state.clone() else {
            return;
        };
        let announce = if self.withdrawn {
            BTreeSet::new()
        } else {
            announced(&state, &self.node, serving)
        };
        let dir = self.secrets_dir.clone();
        let passwords = move |name: &SecretName| read_password(dir.as_deref(), name);
        let Some(view) = frr_view(
            &state,
            &self.node,
            &self.node_addresses,
            &announce,
            &passwords,
        ) else {
            if self.frr.is_running() {
                tracing::info!("no BGP-mode pool or peer for this node any more: stopping FRR");
                self.frr.stop(Duration::from_secs(3));
            }
            self.running = None;
            self.failure = None;
            return;
        };
        if view.left_out != self.left_out {
            for l in view.left_out.iter().filter(|l| !self.left_out.contains(l)) {
                tracing::error!(peer = %l.address, asn = l.asn, why = %l.why, "BGP peer left out of FRR's config (its password)");
            }
            self.left_out = view.left_out.clone();
        }
        // The usual tick: nothing changed since the running config was rendered (the
        // view is everything the text says), so neither rendering nor comparing texts.
        if self.frr.is_running() && self.running.as_ref().is_some_and(|(v, _)| *v == view) {
            return;
        }
        let text = match self.renderer.render(&view) {
            Ok(t) => t,
            Err(e) => {
                self.fail(format!("render: {}", view.redact(&e.to_string())));
                return;
            }
        };
        if self.restarter.waiting() {
            return; // the supervisor restarts it with the file; see supervise
        }
        if self.frr.is_running() && self.running.as_ref().is_some_and(|(_, t)| *t == text) {
            return;
        }
        if self
            .retry
            .as_ref()
            .is_some_and(|(t, at)| *t == text && now < *at)
        {
            return;
        }
        match self.install(&view, &text, now) {
            Ok(()) => self.retry = None,
            Err(e) => {
                self.fail(view.redact(&e.to_string()));
                self.retry = Some((text, now + RETRY_AFTER));
            }
        }
    }

    fn fail(&mut self, why: String) {
        if self.failure.as_deref() != Some(why.as_str()) {
            tracing::error!(error = %why, "FRR does not run the wanted config");
        }
        self.failure = Some(why);
    }

    fn install(&mut self, view: &FrrView, text: &str, now: Instant) -> Result<(), DaemonError> {
        let starting = !self.frr.is_running();
        let was: BTreeSet<IpNet> = self
            .running
            .as_ref()
            .map(|(v, _)| v.prefixes().copied().collect())
            .unwrap_or_default();
        let now_set: BTreeSet<IpNet> = view.prefixes().copied().collect();
        // Fast path: only the announced set changed.
        let fast = match (&self.running, self.frr.is_running()) {
            (Some((old, _)), true) => network_commands(old, view),
            _ => None,
        };
        let candidate = self.frr.dir().join("frr.conf.new");
        std::fs::create_dir_all(self.frr.dir()).map_err(|e| DaemonError::Start {
            daemon: crate::daemons::DaemonKind::Frr,
            why: format!("create {}: {e}", self.frr.dir().display()),
        })?;
        // Mode 0600: it may hold TCP MD5 passwords (root's vtysh and frr-reload.py read it).
        write_private(&candidate, text).map_err(|e| DaemonError::Start {
            daemon: crate::daemons::DaemonKind::Frr,
            why: format!("write {}: {e}", candidate.display()),
        })?;
        if let Err(e) = self.frr.check(&candidate) {
            self.metrics.check_failure(crate::daemons::DaemonKind::Frr);
            return Err(e);
        }
        std::fs::rename(&candidate, self.frr.config_path()).map_err(|e| DaemonError::Start {
            daemon: crate::daemons::DaemonKind::Frr,
            why: format!("install {}: {e}", self.frr.config_path().display()),
        })?;
        let r = match fast {
            Some(cmds) => {
                let mut c = self.frr.vtysh();
                for cmd in &cmds {
                    c.arg("-c").arg(cmd);
                }
                match c.output() {
                    Ok(o) if o.status.success() => Ok(()),
                    // Fall back to the full reload.
                    _ => self.frr.reload(),
                }
            }
            None if self.frr.is_running() => self.frr.reload(),
            None => self.frr.start(),
        };
        if starting {
            match &r {
                Ok(()) => self.restarter.started(now),
                Err(_) => {
                    self.restarter.start_failed(now);
                }
            }
        }
        self.metrics
            .reload(crate::daemons::DaemonKind::Frr, r.is_ok());
        r?;
        for p in was.difference(&now_set) {
            tracing::info!(prefix = %p, "BGP: withdrawn");
        }
        for p in now_set.difference(&was) {
            tracing::info!(prefix = %p, "BGP: announced");
        }
        self.running = Some((view.clone(), text.to_string()));
        self.failure = None;
        Ok(())
    }

    /// Restart FRR when it died; look at the sessions now and then.
    pub fn supervise(
        &mut self,
        serving: Option<&BTreeSet<IpAddr>>,
        ops: &mut dyn AddrOps,
        now: Instant,
    ) {
        {
            let exited = if self.frr.is_running() {
                self.frr.poll_exit()
            } else {
                None
            };
            match self.restarter.tick(now, exited.is_some()) {
                Action::Nothing => {}
                Action::Died { delay, .. } => {
                    self.metrics.child_restart(crate::daemons::DaemonKind::Frr);
                    self.running = None;
                    self.fail(format!("exited ({})", exited.as_deref().unwrap_or("?")));
                    tracing::warn!(
                        status = exited.as_deref().unwrap_or("?"),
                        restart_in_ms = delay.as_millis() as u64,
                        "FRR exited; restarting"
                    );
                }
                Action::Restart => {}
            }
        }
        self.refresh(serving, now);
        if !self.unbind_after.is_empty() {
            self.bind(ops, now);
        }
        if self
            .observed_at
            .is_none_or(|t| now.duration_since(t) >= OBSERVE_EVERY)
        {
            self.observed_at = Some(now);
            self.observe();
        }
    }

    fn observe(&mut self) {
        let announced = self
            .running
            .as_ref()
            .map(|(v, _)| v.prefixes().count())
            .unwrap_or(0);
        let sessions = if self.frr.is_running() {
            let mut s = self
                .frr
                .show("show bgp summary json")
                .map(|j| parse_summary(&j))
                .unwrap_or_default();
            s.bfd_up = self
                .frr
                .show("show bfd peers json")
                .map(|j| parse_bfd(&j))
                .unwrap_or(0);
            Some(s)
        } else {
            None
        };
        let neighbors = if self.frr.is_running() {
            self.frr
                .show("show bgp neighbors json")
                .map(|j| parse_neighbors(&j))
                .ok()
        } else {
            None
        };
        self.watch.observe(neighbors, Instant::now());
        let s = sessions.clone().unwrap_or_default();
        self.metrics
            .set_bgp(s.peers, s.established, s.bfd_up, announced);
        self.sessions = sessions;
    }

    /// Why this node is not ready as far as BGP goes: FRR does not run the config it
    /// should, or there are BGP-mode VIPs and no session is established.
    pub fn not_ready(&self) -> Option<String> {
        if let Some(f) = &self.failure {
            return Some(format!("frr: {f}"));
        }
        let (view, _) = self.running.as_ref()?;
        // Nothing to announce (no BGP-mode VIP yet): nothing unserved.
        if self.state.as_ref().is_none_or(|s| bgp_vips(s).is_empty()) {
            return None;
        }
        match &self.sessions {
            Some(s) if s.established == 0 => Some(format!(
                "frr: no BGP session established ({} peer(s))",
                view.peers.len()
            )),
            _ => None,
        }
    }

    /// Shutdown, before the proxy stops: announce nothing, then wait until every
    /// session has sent its withdrawals (no prefix sent any more) and a short linger for
    /// the routers to act on them, or until `wait` passed.
    pub fn withdraw(&mut self, wait: Duration) {
        if self.running.is_none() {
            return;
        }
        self.withdrawn = true;
        let t0 = Instant::now();
        self.refresh(None, t0);
        loop {
            let sent = self
                .frr
                .show("show bgp summary json")
                .map(|j| parse_summary(&j).prefixes_sent)
                .unwrap_or(0);
            if sent == 0 {
                // FRR counts a prefix as no longer sent when the withdrawal is queued;
                // the router still has to receive it and reprogram its forwarding.
                std::thread::sleep(WITHDRAW_LINGER.min(wait.saturating_sub(t0.elapsed())));
                tracing::info!(
                    waited_ms = t0.elapsed().as_millis() as u64,
                    "BGP: every route withdrawn"
                );
                return;
            }
            if t0.elapsed() >= wait {
                tracing::warn!(
                    prefixes = sent,
                    waited_ms = t0.elapsed().as_millis() as u64,
                    "BGP: routes still announced after the wait; stopping anyway"
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stop FRR (its sessions close: the routers drop what is left) and unbind the
    /// BGP-mode addresses from `lo`.
    pub fn stop(&mut self, ops: &mut dyn AddrOps, grace: Duration) {
        if self.frr.is_running() {
            self.frr.stop(grace);
            // Sockets, pid files, the config: all rendered again at the next start.
            let _ = std::fs::remove_dir_all(self.frr.dir());
        }
        self.running = None;
        if let Some(state) = self.state.clone() {
            let mut vips = bgp_vips(&state);
            vips.extend(std::mem::take(&mut self.bound));
            let _ = vip::delete_selected(ops, |held| {
                held.iter()
                    .filter(|a| a.ifname == LOOPBACK && vips.contains(&a.ip()))
                    .cloned()
                    .collect()
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_counts_peers_once_and_prefixes_of_established_sessions() {
        let j = r#"{"ipv4Unicast":{"peers":{
            "198.18.3.1":{"state":"Established","pfxSnt":2},
            "198.18.4.1":{"state":"Active","pfxSnt":0}}},
          "ipv6Unicast":{"peers":{"fd00:3::1":{"state":"Established","pfxSnt":1}}}}"#;
        let s = parse_summary(j);
        assert_eq!((s.peers, s.established, s.prefixes_sent), (3, 2, 3));
        assert_eq!(parse_summary("not json"), Sessions::default());
        assert_eq!(
            parse_bfd(
                r#"[{"peer":"198.18.3.1","status":"up"},{"peer":"198.18.4.1","status":"down"}]"#
            ),
            1
        );
    }

    /// Addresses in memory, for [`Bgp::bind`].
    #[derive(Default)]
    struct Ops(Vec<vip::Addr>);

    impl AddrOps for Ops {
        fn addresses(&mut self) -> Result<Vec<vip::Addr>, vip::VipError> {
            Ok(self.0.clone())
        }
        fn interfaces(&mut self) -> Result<Vec<(u32, String)>, vip::VipError> {
            Ok(vec![(1, LOOPBACK.into()), (2, "eth0".into())])
        }
        fn add(&mut self, ifname: &str, net: IpNet) -> Result<(), vip::VipError> {
            self.0.push(addr(ifname, net));
            Ok(())
        }
        fn delete(&mut self, a: &vip::Addr) -> Result<(), vip::VipError> {
            self.0.retain(|x| x != a);
            Ok(())
        }
    }

    fn addr(ifname: &str, net: IpNet) -> vip::Addr {
        vip::Addr {
            ifname: ifname.into(),
            index: if ifname == LOOPBACK { 1 } else { 2 },
            net,
        }
    }

    fn on_lo(ops: &Ops) -> Vec<String> {
        ops.0
            .iter()
            .filter(|a| a.ifname == LOOPBACK)
            .map(|a| a.net.to_string())
            .collect()
    }

    #[test]
    fn bgp_vips_are_bound_on_lo_and_nothing_of_a_vrrp_pool_is_touched() {
        let s = Arc::new(render::tests::state());
        let mut ops = Ops(vec![
            addr(LOOPBACK, "127.0.0.1/8".parse().unwrap()),
            // A VRRP pool's address that someone put on lo: keepalived's, not ours.
            addr(LOOPBACK, "198.18.1.10/32".parse().unwrap()),
            // A BGP-mode pool's address no longer in the state (an earlier actor's).
            addr(LOOPBACK, "198.18.10.19/32".parse().unwrap()),
            addr("eth0", "198.18.3.2/24".parse().unwrap()),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let mut b = Bgp::new(
            "lb-1".parse().unwrap(),
            dir.path().join("frr"),
            None,
            Arc::new(Metrics::new()),
        );
        b.state = Some(s.clone());
        let t0 = Instant::now();
        b.bind(&mut ops, t0);
        // The earlier actor's address (announced by no one now) lingers, then goes.
        assert!(on_lo(&ops).contains(&"198.18.10.19/32".to_string()));
        b.bind(&mut ops, t0 + WITHDRAW_LINGER);
        assert_eq!(
            on_lo(&ops),
            [
                "127.0.0.1/8",
                "198.18.1.10/32",
                "198.18.10.10/32",
                "198.18.10.11/32",
                "fd00:10::10/128"
            ]
        );
        // The node leaves the LB nodes (drained): its BGP-mode addresses go, the rest stays.
        let mut drained = (*s).clone();
        drained.nodes.clear();
        b.state = Some(Arc::new(drained));
        // While FRR still announces them they stay (the withdrawal goes first).
        let all = announced(&s, &"lb-1".parse().unwrap(), None);
        let view = frr_view(&s, &b.node, &[], &all, &render::tests::no_passwords).unwrap();
        b.running = Some((view, String::new()));
        b.bind(&mut ops, t0);
        assert_eq!(on_lo(&ops).len(), 5, "{:?}", on_lo(&ops));
        // Withdrawn: gone once the linger passed.
        b.running = None;
        b.bind(&mut ops, t0);
        assert_eq!(on_lo(&ops).len(), 5, "{:?}", on_lo(&ops));
        b.bind(&mut ops, t0 + WITHDRAW_LINGER);
        assert_eq!(on_lo(&ops), ["127.0.0.1/8", "198.18.1.10/32"]);
    }

    #[test]
    fn a_password_is_read_from_its_secrets_node_copy_and_never_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let name: SecretName = "bgp-auth".parse().unwrap();
        let e = read_password(Some(dir.path()), &name).unwrap_err();
        assert!(e.contains("Secret bgp-auth"), "{e}");
        assert!(e.contains("is not on this node"), "{e}");
        std::fs::create_dir(dir.path().join("bgp-auth")).unwrap();
        let file = dir.path().join("bgp-auth").join(PASSWORD_KEY);
        std::fs::write(&file, "s3cret!x\n").unwrap();
        let pw = read_password(Some(dir.path()), &name).unwrap();
        assert_eq!(pw.expose(), "s3cret!x");
        std::fs::write(&file, "two words").unwrap();
        let e = read_password(Some(dir.path()), &name).unwrap_err();
        assert!(
            !e.contains("two words") && e.contains("not printable ASCII"),
            "{e}"
        );
        std::fs::write(&file, vec![b'a'; 10_000]).unwrap();
        assert!(read_password(Some(dir.path()), &name)
            .unwrap_err()
            .contains("10000 bytes"));
        assert!(read_password(None, &name).is_err());
    }

    #[test]
    fn an_announced_set_change_alone_takes_the_fast_path() {
        let s = render::tests::state();
        let n: NodeName = "lb-1".parse().unwrap();
        let all = announced(&s, &n, None);
        let none = render::tests::no_passwords;
        let old = frr_view(&s, &n, &[], &all, &none).unwrap();
        let fewer: BTreeSet<IpAddr> = all.iter().copied().skip(1).collect();
        let new = frr_view(&s, &n, &[], &fewer, &none).unwrap();
        let cmds = network_commands(&old, &new).unwrap();
        assert_eq!(
            cmds,
            [
                "configure terminal",
                "router bgp 64512",
                "address-family ipv4 unicast",
                "no network 198.18.10.10/32",
                "exit-address-family"
            ]
        );
        // A peer change is not a fast-path change.
        let mut other = new.clone();
        other.peers.pop();
        assert!(network_commands(&old, &other).is_none());
    }
}
