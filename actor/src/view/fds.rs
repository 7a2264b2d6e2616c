//! Whether the proxy of a view can start at all under the open-files limit.
//!
//! Neither checker opens a socket: `haproxy -c` and `nginx -t` accept a config with more
//! listening sockets than the process may hold, and the proxy then fails at the reload
//! (HAProxy: "Cannot raise FD limit"; nginx: "socket() failed (24: Too many open
//! files)", or its workers exit on "worker_connections are not enough for N listening
//! sockets"). No tenant's change would then apply. [`NodeView::fd_shortfall`] says so
//! before the check, and the applier treats it as the checker's refusal: the quarantine
//! leaves objects out until the rest fits ([`crate::apply`]).
//!
//! The count is the view's: every distinct listening socket ([`NodeView::listens`]),
//! and for HAProxy every server with a health check, its threads and fixed part
//! ([`HaproxyFds`]) at the smallest `maxconn` (the view lowers a configured one to fit;
//! a config that does not fit even then cannot start).

use super::haproxy::{last_line, number_in};
use super::NodeView;
use crate::fdlimit::{FdBudget, HaproxyFds, FD_MARGIN};

/// The first words of every [`NodeView::fd_shortfall`] message: it quotes only counts,
/// never an object, so it may be shown on any object the quarantine leaves out for it.
pub const FD_SHORTFALL: &str = "open files:";

impl NodeView {
    /// Why this view's proxy could not start under `budget` (its open-files limit),
    /// if it could not; `None` when it fits or the limit is unknown.
    pub fn fd_shortfall(&self, budget: Option<FdBudget>) -> Option<String> {
        let budget = budget?;
        let listeners = self.listens().len() as u64;
        if let Some(h) = &self.haproxy {
            let limit = last_line(&h.global, "ulimit-n")
                .and_then(|i| number_in(&h.global, i, "ulimit-n"))
                .map_or(budget.limit, |(_, v)| v.min(budget.limit));
            let threads = last_line(&h.global, "nbthread")
                .and_then(|i| number_in(&h.global, i, "nbthread"))
                .map_or(budget.cpus, |(_, v)| v);
            let checks = h
                .backends
                .iter()
                .chain(self.http.iter().flat_map(|p| &p.backends))
                .filter(|b| b.track.is_none() && b.server_opts.contains(" check"))
                .map(|b| b.slots.len() as u64)
                .sum();
            let fds = HaproxyFds {
                // The stats socket is a listener too.
                listeners: listeners + 1,
                checks,
                threads,
                splice: false,
            };
            let need = fds.needed(1);
            return (need > limit).then(|| {
                format!(
                    "{FD_SHORTFALL} the limit {limit} is too low for HAProxy to start with {listeners} \
                     listening sockets and {checks} health-checked servers (it needs at least \
                     {need}); objects are left out until the rest fits"
                )
            });
        }
        let n = self.nginx.as_ref()?;
        let nofile = last_line(&n.global, "worker_rlimit_nofile")
            .and_then(|i| number_in(&n.global, i, "worker_rlimit_nofile"))
            .map_or(budget.limit, |(_, v)| v.min(budget.limit));
        let need = listeners + FD_MARGIN;
        if need > nofile {
            return Some(format!(
                "{FD_SHORTFALL} the limit {nofile} is too low for nginx to start with {listeners} \
                 listening sockets (it needs at least {need}); objects are left out until the \
                 rest fits"
            ));
        }
        match n.worker_connections {
            Some(wc) if listeners >= wc => Some(format!(
                "{FD_SHORTFALL} nginx worker_connections {wc} is not enough for its {listeners} \
                 listening sockets (its workers would exit); objects are left out until the \
                 rest fits"
            )),
            _ => None,
        }
    }
}
