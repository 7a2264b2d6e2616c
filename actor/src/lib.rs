//! k8slb actor: from the published state to running keepalived + HAProxy / nginx on
//! this node.
//!
//! - [`view`]: pure, state + node -> this node's view;
//! - [`render`]: pure, view + templates -> config texts; and the endpoint-only diff that
//!   the HAProxy Runtime API can apply without a reload;
//! - [`render_http`]: pure, the L7 route model -> HAProxy / nginx config parts;
//! - [`cmd_render`]: `k8slb-actor render`;
//! - [`node_renderer`]: the real view + render behind the applier's seam (no daemon, no
//!   write);
//! - [`apply`]: render -> check -> atomic swap -> reload -> confirm, debounced: the pure
//!   decision (`apply::decision`), each daemon's lifecycle (`apply::slot`) and the
//!   health and exit watcher threads (`apply::health`);
//! - [`quarantine`]: pure, the bisection that finds the owners whose part of a config
//!   the proxy's checker refuses (the applier serves the rest without them);
//! - [`staged`]: the files a proxy config names, staged, checked and installed with it;
//! - [`ports`]: ports another program on the node holds on every address, refused with
//!   the proxy's check (the checkers do not bind);
//! - [`daemons`]: keepalived, HAProxy and nginx as child processes (the I/O seam);
//! - [`handover`]: pure, a VIP that changes VRRP instance is held out of keepalived for a
//!   hold-down first, so no two nodes hold it;
//! - [`leave`]: on SIGTERM, the VIPs this node holds are handed to a peer (kept on `lo`
//!   until a peer's VRRP advert says it is master) before the daemons stop;
//! - [`fdlimit`]: pure, the proxy's connection limits fitted to the open-files limit;
//! - [`debug`]: hidden probes for the root tests;
//! - [`haproxy_rt`]: the HAProxy Runtime API and master CLI client;
//! - [`vip`]: netlink behind a small trait (interfaces, VIP observation, stale cleanup);
//! - [`supervise`]: keepalived and the proxy as children, restarted with backoff;
//! - [`admin`]: `/livez`, `/readyz`, `/metrics`;
//! - [`state_source`]: where `run` gets the state: a file, or the watcher's ConfigMaps;
//! - [`report`]: the node report for the watcher: the objects the quarantine leaves out;
//! - [`control`]: pure, the control loop's decisions as a step over inputs (state
//!   arrived, tick, apply outcome, daemons supervised, shutdown) returning actions;
//! - [`run`]: `k8slb-actor run`: the driver that feeds [`control`] and carries out its
//!   actions;
//! - [`init`]: PID 1 in a container: forwards signals to the actor and reaps orphans.

/// A line on stderr that is lost, not a panic, when stderr cannot be written (a full disk,
/// a closed pipe): `eprintln!` panics then, and the actor (or its PID-1 init) must go on to
/// stop its daemons and remove its VIPs.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod admin;
pub mod apply;
pub mod bgp_secrets;
pub mod cert_source;
pub mod cmd_render;
pub mod control;
pub mod daemons;
pub mod debug;
pub mod fdlimit;
pub mod frr;
pub mod handover;
pub mod haproxy_rt;
pub mod init;
pub mod leave;
pub mod node_renderer;
pub mod ports;
pub mod quarantine;
pub mod render;
pub mod render_error;
pub mod report;
pub mod run;
pub mod staged;
pub mod state_source;
pub mod supervise;
pub mod view;
pub mod vip;
