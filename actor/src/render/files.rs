//! The names and contents of the files a proxy config names, shared by both proxies and
//! by the Runtime API updates: slugs, certificate paths, the splits maps (one writer for
//! HTTP rules and L4 streams) and the version lines that make a change in them a change
//! in the config.

use crate::render::haproxy::HAPROXY_ROUTES;
use crate::render_error::RenderError;
use crate::view::HttpRenderOptions;
use crate::view::{safe_path, NodeView};
use k8slb_common::routes::{
    CertFile, HttpRoutes, Listener, ListenerProtocol, RouteAction, Scheme, StreamListener,
    WeightedBackend,
};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// A comment line with a digest of the route files' names and contents.
pub(crate) fn files_version(files: &BTreeMap<String, String>) -> String {
    if files.is_empty() {
        return String::new();
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, text) in files {
        for b in name.bytes().chain([0]).chain(text.bytes()).chain([0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("\n# route files version {h:016x}\n")
}

/// One comment line per Secret certificate the routes use (listeners' and client
/// certificates presented to backends), with its content version: a renewed
/// certificate changes the config, so the proxy reloads and serves it (the file name
/// alone does not change).
pub(crate) fn cert_versions(view: &NodeView) -> String {
    let Some(h) = &view.http else {
        return String::new();
    };
    let files: std::collections::BTreeSet<&k8slb_common::routes::CertFile> = h
        .routes
        .tls_settings()
        .flat_map(|t| {
            t.certificates
                .iter()
                .map(|c| &c.file)
                .chain(&t.default_certificate)
        })
        .chain(k8slb_common::certs::client_certificates(&h.routes))
        .filter(|f| !f.version().is_empty())
        .collect();
    // A line of its own even if the text before it does not end its last line.
    files
        .iter()
        .map(|f| format!("\n# certificate {} version {}", f.stem(), f.version()))
        .chain((!files.is_empty()).then(|| "\n".to_string()))
        .collect()
}

pub(crate) fn render_err(name: &'static str, e: impl std::fmt::Display) -> RenderError {
    RenderError::Render {
        name,
        detail: e.to_string(),
    }
}

pub(crate) fn path_err(e: crate::view::ViewError) -> RenderError {
    render_err(HAPROXY_ROUTES, e)
}

/// `198.18.0.10` → `198_18_0_10`, `fd00::1` → `fd00__1`.
/// The scheme of a listener's requests.
pub(crate) fn listener_scheme(l: &Listener) -> Scheme {
    match l.protocol {
        ListenerProtocol::Http => Scheme::Http,
        ListenerProtocol::Https => Scheme::Https,
    }
}

pub(crate) fn ip_slug(ip: IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "_")
}

/// `*.foo-bar.com` → `^[^.]+[.]foo-bar[.]com$` (labels hold only `[a-z0-9-]`).
pub(crate) fn one_label_regex(suffix: &str) -> String {
    format!("^[^.]+{}$", suffix.replace('.', "[.]"))
}

/// Where `f` is on the node, without the extension (`.pem`; nginx also `.key` for a
/// pool's): the path HAProxy's `crt` / crt-list names, and so the name of its certificate
/// in HAProxy's store (`set ssl cert <path>.pem`).
pub fn cert_path(f: &CertFile, o: &HttpRenderOptions) -> Result<String, RenderError> {
    let dir = match f {
        CertFile::Pool { .. } => &o.pool_cert_dir,
        CertFile::Secret { .. } => &o.secret_cert_dir,
    };
    let dir = safe_path("certificate directory", dir).map_err(path_err)?;
    Ok(format!("{}/{}", dir.trim_end_matches('/'), f.stem()))
}

/// The splits map key of backend `i` of the split at `pos`.
pub(crate) fn split_key(pos: &str, i: usize) -> String {
    format!("{pos}_b{i}")
}

/// Where a rule is, for the splits map: `r<virtual host>_<rule>`, or `d` for the
/// listener's default action.
pub(crate) fn rule_pos(vh: usize, rule: usize) -> String {
    format!("r{vh}_{rule}")
}

/// The HAProxy frontend of the HTTP listener `l`: `rtf_<ip>_<port>`; its map and
/// crt-list files are named after it.
pub(crate) fn http_frontend_name(l: &Listener) -> String {
    format!("rtf_{}_{}", ip_slug(l.ip), l.port)
}

/// The HAProxy frontend of the (TCP or TLS) stream listener `s`: `rts_<ip>_<port>`.
pub(crate) fn stream_frontend_name(s: &StreamListener) -> String {
    format!("rts_{}_{}", ip_slug(s.ip), s.port)
}

/// One HAProxy frontend's splits map, for an HTTP listener or an L4 stream listener:
/// where it is and its entries (key, cumulative share of [`SPLIT_SCALE`]) in render
/// order. The one writer of splits maps: the file's content at render
/// ([`SplitsMap::write`]) and the `set map` commands of a change of weights
/// ([`crate::render::runtime_diff`]) both come from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitsMap {
    pub path: String,
    pub entries: Vec<(String, u32)>,
}

impl SplitsMap {
    /// The splits of the HTTP listener `l`: every forward to two or more backends, keys
    /// `r<virtual host>_<rule>_b<i>` (`d_b<i>` for the listener's default action). A
    /// backend of weight 0 has no share; the invalid references' share (above the last
    /// backend's) and, when every weight is 0, every request gets 500.
    pub fn of_listener(l: &Listener, o: &HttpRenderOptions) -> Result<Self, RenderError> {
        let mut entries = Vec::new();
        let mut add = |pos: String, a: &RouteAction| {
            if let (true, RouteAction::Forward { backends, invalid }) = (a.is_split(), a) {
                push_split(&mut entries, &pos, backends, *invalid);
            }
        };
        for (i, v) in l.virtual_hosts.iter().enumerate() {
            for (j, r) in v.rules.iter().enumerate() {
                add(rule_pos(i + 1, j), &r.action);
            }
        }
        if let Some(d) = &l.default_action {
            add("d".into(), d);
        }
        Ok(SplitsMap {
            path: format!("{}/{}.splits.map", files_dir(o)?, http_frontend_name(l)),
            entries,
        })
    }

    /// The splits of the stream listener `s`: each route with two or more backends,
    /// keys `r<route>_b<i>`.
    pub fn of_stream(s: &StreamListener, o: &HttpRenderOptions) -> Result<Self, RenderError> {
        let mut entries = Vec::new();
        for (i, r) in s.routes.iter().enumerate() {
            if r.is_split() {
                push_split(&mut entries, &format!("r{i}"), &r.backends, r.invalid);
            }
        }
        Ok(SplitsMap {
            path: format!("{}/{}.splits.map", files_dir(o)?, stream_frontend_name(s)),
            entries,
        })
    }

    /// The map file into `files` and its path; no file (`None`) without a split.
    pub fn write(self, files: &mut BTreeMap<String, String>) -> Option<String> {
        if self.entries.is_empty() {
            return None;
        }
        let text: String = self
            .entries
            .iter()
            .map(|(k, v)| format!("{k} {v}\n"))
            .collect();
        files.insert(self.path.clone(), text);
        Some(self.path)
    }
}

/// The entries of one split at `pos`: key `<pos>_b<i>` per backend, its cumulative share.
fn push_split(out: &mut Vec<(String, u32)>, pos: &str, backends: &[WeightedBackend], invalid: u16) {
    for (i, share) in cumulative_shares_with(backends, invalid)
        .into_iter()
        .enumerate()
    {
        out.push((split_key(pos, i), share));
    }
}

/// A split draws a number below this; each backend's share is its part of it.
pub const SPLIT_SCALE: u32 = 10_000;

/// The cumulative shares (of [`SPLIT_SCALE`]) of `backends`, in
/// order: backend `i` takes a draw below its share and at or above the one before. A
/// weight 0 has no share; every weight 0: every share 0.
pub fn cumulative_shares(backends: &[WeightedBackend]) -> Vec<u32> {
    cumulative_shares_with(backends, 0)
}

/// [`cumulative_shares`] of `backends` and, after them, a share of weight `rest` that
/// no backend takes (a draw at or above the last share: the invalid references' 500).
pub fn cumulative_shares_with(backends: &[WeightedBackend], rest: u16) -> Vec<u32> {
    let total: u64 = backends.iter().map(|b| u64::from(b.weight)).sum::<u64>() + u64::from(rest);
    let mut cum = 0u64;
    backends
        .iter()
        .map(|b| {
            cum += u64::from(b.weight);
            (cum * u64::from(SPLIT_SCALE))
                .checked_div(total)
                .unwrap_or(0) as u32
        })
        .collect()
}

/// The directory of the routes' files (maps, crt-lists), checked.
pub(crate) fn files_dir(o: &HttpRenderOptions) -> Result<String, RenderError> {
    let dir = safe_path("routes files directory", &o.files_dir).map_err(path_err)?;
    Ok(dir.trim_end_matches('/').to_string())
}

/// The CA bundle files the backends and listeners of `routes` name ([`crate::view::ca_file`]), into
/// `files`: the PEM the plan checked ([`k8slb_common::certs::ca_bundle`]), as it is.
pub(crate) fn ca_files(
    routes: &HttpRoutes,
    o: &HttpRenderOptions,
    files: &mut BTreeMap<String, String>,
) -> Result<(), RenderError> {
    let dir = files_dir(o)?;
    let backends = routes
        .backends
        .values()
        .filter_map(|b| b.tls.as_ref().map(|t| &t.ca));
    let clients = routes
        .listeners
        .iter()
        .filter_map(|l| l.tls.as_ref()?.client_ca.as_ref());
    for ca in backends.chain(clients) {
        if let Some(pem) = routes.ca_bundles.get(ca) {
            files.insert(crate::view::ca_file(&dir, ca), pem.clone());
        }
    }
    Ok(())
}
