//! `k8slb-actor render`: write this node's configs into a directory.
//!
//! Writes `keepalived.conf` and `haproxy.cfg` or `nginx.conf` (nothing for kubeproxy)
//! into `--out`, `frr.conf` when the state has BGP-mode pools and peers for this node
//! (every BGP-mode address announced, as when the proxy serves them all; no router ID,
//! which the running actor takes from the node's first IPv4 address; passwords as
//! `<redacted>`), and, when the state routes Ingresses on HAProxy, the map and crt-list
//! files that haproxy.cfg names, under `--out`/routes. Interfaces are not detected here: every pool
//! of an instance this node is a member of needs `interface` in the state or an
//! `--interface <pool>=<ifname>`.

use crate::render::{Rendered, Renderer};
use crate::view::{view, ViewOptions};
use anyhow::Context as _;
use k8slb_common::names::{parse_interface, IfName, NodeName, PoolName};
use k8slb_common::state::{Provider, State};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Arguments of `k8slb-actor render`.
#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// The published state document (JSON), as the watcher writes it.
    #[arg(long, env = "K8SLB_STATE_FILE")]
    pub state: PathBuf,
    /// This node's name (the Kubernetes Node name the state uses).
    #[arg(long, env = "K8SLB_NODE_NAME")]
    pub node: NodeName,
    /// Which proxy to render for (k8slb's PROXY); a state planned for another is
    /// refused.
    #[arg(long, env = "PROXY", default_value = "haproxy", value_parser = crate::view::provider_arg())]
    pub proxy: Provider,
    /// Interface of a pool, as <pool>=<ifname>; repeat for several pools. Overrides the
    /// pool's `interface` in the state. Render does not detect interfaces.
    #[arg(long = "interface", value_name = "POOL=IFNAME", value_parser = parse_interface)]
    pub interfaces: Vec<(PoolName, IfName)>,
    /// Directory with override templates (keepalived.conf.tera, haproxy.cfg.tera,
    /// nginx.conf.tera); missing files use the embedded templates.
    #[arg(long, env = "K8SLB_TEMPLATES")]
    pub templates: Option<PathBuf>,
    /// Where the node's certificates of TLS Secrets are (`<dir>/<stem>.pem`), as written
    /// into the routes' HTTPS listeners.
    #[arg(long, env = "K8SLB_CERTS_DIR", default_value = "/run/k8slb/certs")]
    pub certs_dir: PathBuf,
    /// HAProxy master/stats socket path written into haproxy.cfg (Runtime API).
    #[arg(
        long,
        env = "K8SLB_RUNTIME_SOCKET",
        default_value = "/run/k8slb/haproxy.sock"
    )]
    pub runtime_socket: PathBuf,
    /// Proxy pid file written into the config [default: /run/k8slb/<proxy>.pid].
    #[arg(long, env = "K8SLB_PID_FILE")]
    pub pid_file: Option<PathBuf>,
    /// Output directory (created if missing); receives keepalived.conf and haproxy.cfg or
    /// nginx.conf, and frr.conf with BGP-mode pools.
    #[arg(long)]
    pub out: PathBuf,
}

/// k8slb's `PRIORITY<n>` variables (n >= 1), from an environment iterator.
pub fn priority_overrides(
    vars: impl Iterator<Item = (String, String)>,
) -> anyhow::Result<BTreeMap<u32, u8>> {
    let mut out = BTreeMap::new();
    for (k, v) in vars {
        let Some(n) = k.strip_prefix("PRIORITY") else {
            continue;
        };
        let Ok(n) = n.parse::<u32>() else { continue };
        if n == 0 {
            continue;
        }
        let p: u8 = v
            .trim()
            .parse()
            .ok()
            .filter(|p| (1..=254).contains(p))
            .with_context(|| format!("{k}={v:?}: expected a priority in 1..=254"))?;
        out.insert(n, p);
    }
    Ok(out)
}

pub fn run(args: RenderArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.state)
        .with_context(|| format!("reading state {}", args.state.display()))?;
    let state =
        State::from_json(&text).with_context(|| format!("state {}", args.state.display()))?;
    if let Some(planned) = crate::control::provider_mismatch(&state, args.proxy) {
        anyhow::bail!(
            "state {}: {}",
            args.state.display(),
            crate::control::mismatch_reason(planned, args.proxy)
        );
    }
    let renderer = match &args.templates {
        Some(dir) => Renderer::from_dir(dir),
        None => Renderer::embedded(),
    }
    .context("loading templates")?;
    let mut opts = ViewOptions::new(args.proxy);
    opts.interfaces = args.interfaces.iter().cloned().collect();
    opts.priority_overrides = priority_overrides(std::env::vars())?;
    opts.runtime_socket = args.runtime_socket.clone();
    if let Some(p) = &args.pid_file {
        opts.pid_file = p.clone();
    }
    if !state.nodes.contains_key(&args.node) {
        eprintln!(
            "k8slb-actor: warning: node {} is not a load-balancer node in the state; it holds no VIPs",
            args.node
        );
    }
    opts.secret_cert_dir = args.certs_dir.clone();
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let out = std::path::absolute(&args.out)
        .with_context(|| format!("the absolute path of {}", args.out.display()))?;
    opts.routes_dir = out.join("routes");
    opts.hop_dir = out.join("hop");
    let v = view(&state, &args.node, &opts).context("building this node's view")?;
    for s in &v.skipped {
        eprintln!(
            "k8slb-actor: note: {} port {}/{:?} not proxied: {}",
            s.service,
            s.port,
            s.protocol,
            s.reason.as_str()
        );
    }
    for n in &v.notes {
        eprintln!("k8slb-actor: note: {n}");
    }
    let Rendered {
        keepalived,
        proxy,
        files,
        notes,
    } = renderer.render(&v).context("rendering")?;
    for n in &notes {
        eprintln!("k8slb-actor: note: {n}");
    }
    if !files.is_empty() {
        std::fs::create_dir_all(&opts.routes_dir)
            .with_context(|| format!("creating {}", opts.routes_dir.display()))?;
    }
    for (path, text) in &files {
        std::fs::write(path, text).with_context(|| format!("writing {path}"))?;
    }
    let write = |name: &str, text: &str| -> anyhow::Result<()> {
        let path = args.out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write("keepalived.conf", &keepalived)?;
    if let (Some(name), Some(text)) = (Rendered::proxy_file_name(args.proxy), proxy) {
        write(name, &text)?;
    }
    if let Some(text) = frr_conf(&state, &args.node, args.templates.as_deref())? {
        write("frr.conf", &text)?;
    }
    Ok(())
}

/// `frr.conf` of `node` as the actor would run it with every BGP-mode address served,
/// passwords redacted; `None` without BGP for this node.
fn frr_conf(
    state: &State,
    node: &NodeName,
    templates: Option<&std::path::Path>,
) -> anyhow::Result<Option<String>> {
    use crate::frr::render::{announced, frr_view, FrrRenderer};
    use k8slb_common::bgp::BgpPassword;
    let redacted = |_: &k8slb_common::bgp::SecretName| {
        BgpPassword::try_from(&b"<redacted>"[..]).map_err(|e| e.to_string())
    };
    let all = announced(state, node, None);
    let Some(v) = frr_view(state, node, &[], &all, &redacted) else {
        return Ok(None);
    };
    let renderer = match templates {
        Some(dir) => FrrRenderer::from_dir(dir),
        None => FrrRenderer::embedded(),
    }
    .context("loading the frr.conf template")?;
    Ok(Some(renderer.render(&v).context("rendering frr.conf")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frr_conf_is_rendered_for_a_bgp_node_with_passwords_redacted() {
        let s = crate::frr::render::tests::state_with_password();
        let text = frr_conf(&s, &"lb-1".parse().unwrap(), None)
            .unwrap()
            .unwrap();
        assert!(
            text.contains("neighbor 198.18.3.1 password <redacted>"),
            "{text}"
        );
        assert!(text.contains("network 198.18.10.10/32"), "{text}");
        let mut vrrp_only = s.clone();
        vrrp_only.config.bgp = None;
        assert_eq!(
            frr_conf(&vrrp_only, &"lb-1".parse().unwrap(), None).unwrap(),
            None
        );
    }

    #[test]
    fn priorities_from_env() {
        let env = [
            ("PRIORITY1", "60"),
            ("PRIORITY12", "70"),
            ("PRIORITYX", "1"),
            ("PATH", "/bin"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let m = priority_overrides(env.into_iter()).unwrap();
        assert_eq!(m, BTreeMap::from([(1, 60), (12, 70)]));
        let bad = [("PRIORITY2".to_string(), "300".to_string())];
        assert!(priority_overrides(bad.into_iter()).is_err());
    }
}
