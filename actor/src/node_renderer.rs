//! The real [`NodeRenderer`]: the state through [`crate::view`] into this node's view,
//! and the view through [`crate::render`] into keepalived.conf, the proxy config and the
//! files it names. No daemon, no network, no write: it reads only the certificate
//! directories (which certificates are on this node), and everything it decides is a
//! function of the state, the node's context and those listings.

use crate::admin::Metrics;
use crate::apply::{Desired, NodeContext, NodeRenderer};
use crate::render::{self, Renderer};
use crate::render_error::RenderError;
use crate::staged::ConfigFiles;
use crate::view::{self, NodeView, ViewError, ViewOptions};
use k8slb_common::names::{NodeName, PoolName};
use k8slb_common::state::{Provider, State};
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

/// The real [`NodeRenderer`]: [`view::view_with_previous`] + [`Renderer`] +
/// [`render::runtime_diff`].
pub struct RealRenderer {
    pub renderer: Renderer,
    pub node: NodeName,
    pub base: ViewOptions,
    /// Where the rendered proxy limit goes (`proxy_maxconn`), if anywhere.
    pub metrics: Option<Arc<Metrics>>,
    /// The view notes logged last: each is logged once, when it appears, however often
    /// the same config is viewed again (retries, restarts, file syncs).
    pub logged: std::sync::Mutex<Vec<String>>,
    /// The same for the render's notes ([`render::Rendered::notes`]).
    pub logged_render: std::sync::Mutex<Vec<String>>,
}

/// Log each of `notes` that `logged` does not hold yet, then remember `notes`.
fn log_new_notes(logged: &std::sync::Mutex<Vec<String>>, notes: &[String], what: &'static str) {
    let mut logged = logged.lock().unwrap_or_else(|p| p.into_inner());
    if *logged != notes {
        for n in notes.iter().filter(|n| !logged.contains(n)) {
            tracing::info!(note = %n, "{what}");
        }
        *logged = notes.to_vec();
    }
}

impl RealRenderer {
    pub fn new(renderer: Renderer, node: NodeName, base: ViewOptions) -> Self {
        RealRenderer {
            renderer,
            node,
            base,
            metrics: None,
            logged: Default::default(),
            logged_render: Default::default(),
        }
    }
}

/// The pools of `state` whose certificate is on this node: `<certPath>/<pool>.pem`, and
/// for nginx (which loads the key from its own file) `<certPath>/<pool>.key`.
fn pool_certs_present(state: &State, proxy: Provider) -> BTreeSet<PoolName> {
    let dir = Path::new(state.config.cert_path.as_str());
    let exts: &[&str] = match proxy {
        Provider::Nginx => &["pem", "key"],
        _ => &["pem"],
    };
    state
        .config
        .pools
        .keys()
        .filter(|pool| {
            exts.iter()
                .all(|ext| dir.join(format!("{pool}.{ext}")).is_file())
        })
        .cloned()
        .collect()
}

impl NodeRenderer for RealRenderer {
    type View = NodeView;
    fn view(
        &self,
        state: &State,
        ctx: &NodeContext,
        previous: Option<&NodeView>,
    ) -> Result<NodeView, ViewError> {
        let mut opts = self.base.clone();
        for (p, i) in &ctx.interfaces {
            opts.interfaces
                .entry(p.clone())
                .or_insert_with(|| i.clone());
        }
        opts.node_addresses = ctx.node_addresses.clone();
        if !state.http.is_empty() {
            opts.secret_certs = Some(k8slb_common::certs::files::present(&opts.secret_cert_dir));
            opts.pool_certs = Some(pool_certs_present(state, opts.proxy));
        }
        let v = view::view_with_previous(state, &self.node, &opts, previous)?;
        // Each note once, when it appears (not again on every apply or retry).
        log_new_notes(&self.logged, &v.notes, "view");
        if let Some(m) = &self.metrics {
            m.proxy_maxconn.set(
                v.proxy_maxconn()
                    .map_or(0, |c| i64::try_from(c).unwrap_or(i64::MAX)),
            );
        }
        Ok(v)
    }
    fn render(&self, view: &NodeView) -> Result<Desired, RenderError> {
        let r = self.renderer.render(view)?;
        log_new_notes(&self.logged_render, &r.notes, "render");
        // The files the proxy config names are staged, checked and installed with it
        // by the applier, never written here.
        Ok(Desired {
            keepalived: r.keepalived,
            proxy: r.proxy,
            files: ConfigFiles::new(&self.base.routes_dir, r.files),
        })
    }
    fn runtime_diff(&self, old: &NodeView, new: &NodeView) -> Option<Vec<String>> {
        render::runtime_diff(old, new).map(|cmds| cmds.iter().map(|c| c.to_cli()).collect())
    }
    fn same_outside_proxy(&self, old: &NodeView, new: &NodeView) -> bool {
        // The proxy config is `runtime_diff`'s to judge, right after this.
        !render::is_structural(render::Config::Keepalived, old, new)
    }
    fn placement(&self, view: &NodeView) -> crate::handover::Placement {
        crate::handover::placement(&view.keepalived)
    }
    fn listens(
        &self,
        view: &NodeView,
    ) -> BTreeSet<(std::net::SocketAddr, crate::ports::Transport)> {
        view.listens()
    }
    fn fd_shortfall(&self, view: &NodeView) -> Option<String> {
        view.fd_shortfall(self.base.fd_budget)
    }

    fn hold_out(&self, mut view: NodeView, vips: &BTreeSet<IpAddr>) -> NodeView {
        crate::handover::hold_out(&mut view.keepalived, vips);
        view
    }
}
