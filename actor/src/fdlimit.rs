//! Fit the proxy's connection limits to the open-files limit it will run under.
//!
//! The actor raises its soft `RLIMIT_NOFILE` to the hard limit at start, and HAProxy and
//! nginx inherit it. Neither can go above it (in a container without
//! `CAP_SYS_RESOURCE`), so a configured `maxconn` that needs more descriptors than that
//! makes HAProxy exit at start ("Cannot raise FD limit to 40048, limit is 20000", with
//! `strict-limits`, its default since 2.3), and the supervisor restarts it forever.
//!
//! **HAProxy** (2.6, `haproxy.c`/`compute_ideal_maxsock`) needs, for a global `maxconn`
//! of `m`: `2 m` (both sides of every connection), plus `2 * maxpipes` (`m / 4` pipes
//! only when splicing is on), one per listener (every `bind`, the stats socket), one per
//! server with a health check, `3 * nbthread` (a poller and a wake-up pipe per thread)
//! and a fixed part. Measured with HAProxy 2.6.12 in master-worker mode with a master CLI
//! (`-W -S`, as the actor runs it): the fixed part is 32 ([`HAPROXY_BASE_FDS`]); for
//! maxconn 1000, 1 thread, 10 frontends and 10 checked servers HAProxy asks for
//! 2056 = 2000 + 10 + 1 + 10 + 3 + 32. The actor keeps [`FD_MARGIN`] more for what the
//! count does not know (log sockets, resolvers, Lua).
//!
//! **nginx**: every connection of a worker (client, upstream, and each listening
//! socket) is one descriptor and counts in `worker_connections`; a worker also holds a
//! few files of its own (logs, epoll, channel): `worker_connections` is fitted to the
//! limit minus [`FD_MARGIN`], and a `worker_rlimit_nofile` above the limit is lowered.
//!
//! The fitting never raises a configured value; it only lowers one that cannot work, and
//! the view says so in a note (logged once).

/// The limit the proxy will run under, and the CPUs HAProxy counts for its default
/// `nbthread`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdBudget {
    /// `RLIMIT_NOFILE` hard limit of the actor (the proxy inherits it as soft and hard).
    pub limit: u64,
    /// CPUs this process may run on (HAProxy 2.6's default `nbthread`, at most 64).
    pub cpus: u64,
}

impl FdBudget {
    /// This process's hard limit and CPUs.
    pub fn of_this_process() -> Result<FdBudget, nix::errno::Errno> {
        let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)?;
        // The CPUs this process may run on, as HAProxy counts them (its affinity),
        // not `available_parallelism`, which also honours a cgroup quota that HAProxy
        // ignores (fewer threads counted than HAProxy starts).
        let cpus = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .and_then(|l| count_cpu_list(l.trim()))
            })
            .filter(|&n| n > 0)
            .or_else(|| {
                std::thread::available_parallelism()
                    .ok()
                    .map(|n| n.get() as u64)
            })
            .unwrap_or(1);
        Ok(FdBudget {
            limit: hard,
            cpus: cpus.min(64),
        })
    }
}

/// How many CPUs a list like `0-3,8,10-11` names (`/proc/<pid>/status`'s
/// `Cpus_allowed_list`); `None` if it does not parse.
pub fn count_cpu_list(list: &str) -> Option<u64> {
    let mut n = 0u64;
    for part in list.split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
                b.checked_sub(a)? + 1
            }
            None => {
                part.parse::<u64>().ok()?;
                1
            }
        };
    }
    Some(n)
}

/// HAProxy's fixed descriptors besides listeners, checks and threads (measured, 2.6.12,
/// `-W -S`).
pub const HAPROXY_BASE_FDS: u64 = 32;
/// Kept free on top of what the daemon itself counts.
pub const FD_MARGIN: u64 = 32;

/// What HAProxy's global part counts besides `maxconn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HaproxyFds {
    /// Every `bind` plus the stats socket.
    pub listeners: u64,
    /// `server` lines with `check`.
    pub checks: u64,
    pub threads: u64,
    /// Some line turns splicing on (`option splice-*`): `maxconn / 4` pipes.
    pub splice: bool,
}

impl HaproxyFds {
    /// Descriptors HAProxy asks for with `maxconn`, plus [`FD_MARGIN`].
    pub fn needed(&self, maxconn: u64) -> u64 {
        let pipes = if self.splice { maxconn / 4 } else { 0 };
        2 * maxconn
            + 2 * pipes
            + self.listeners
            + self.checks
            + 3 * self.threads
            + HAPROXY_BASE_FDS
            + FD_MARGIN
    }

    /// The largest `maxconn <= configured` whose need fits `limit`, rounded down to a
    /// multiple of 100 when lowered (so a Service more or less does not change it, and
    /// the config text stays the same); at least 1.
    pub fn fit(&self, configured: u64, limit: u64) -> u64 {
        if self.needed(configured) <= limit {
            return configured;
        }
        let fixed = self.needed(0);
        let avail = limit.saturating_sub(fixed);
        // 2 per connection, 2.5 with splicing (one pipe of two per 4 connections).
        let mut m = if self.splice {
            avail * 2 / 5
        } else {
            avail / 2
        };
        while m > 0 && self.needed(m) > limit {
            m -= 1;
        }
        if m >= 200 {
            m -= m % 100;
        }
        m.clamp(1, configured)
    }
}

/// nginx's `worker_connections` for a limit of `nofile` descriptors per worker: at most
/// `configured`, at least 1.
pub fn nginx_worker_connections(configured: u64, nofile: u64) -> u64 {
    configured.min(nofile.saturating_sub(FD_MARGIN)).max(1)
}

/// The number after `keyword` in `line` (`maxconn 20000`, `worker_connections 4096;`),
/// as its byte range and value.
pub fn find_number(line: &str, keyword: &str) -> Option<(std::ops::Range<usize>, u64)> {
    let mut from = 0;
    while let Some(i) = line[from..].find(keyword) {
        let start = from + i;
        let before_ok = start == 0
            || line[..start]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_whitespace() || c == '{' || c == ';');
        let rest = &line[start + keyword.len()..];
        let ws = rest.len() - rest.trim_start().len();
        let digits = rest[ws..].bytes().take_while(u8::is_ascii_digit).count();
        if before_ok && ws > 0 && digits > 0 {
            let a = start + keyword.len() + ws;
            let range = a..a + digits;
            if let Ok(v) = line[range.clone()].parse() {
                return Some((range, v));
            }
        }
        from = start + keyword.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fds(listeners: u64, checks: u64, threads: u64) -> HaproxyFds {
        HaproxyFds {
            listeners,
            checks,
            threads,
            splice: false,
        }
    }

    /// Numbers HAProxy 2.6.12 printed ("Cannot raise FD limit to N") for these configs,
    /// with `-W -S`; ours are the same plus the margin.
    #[test]
    fn need_matches_haproxy_2_6() {
        // maxconn 1000, nbthread 1: 10 frontends + stats socket, 10 checked servers.
        assert_eq!(fds(11, 10, 1).needed(1000) - FD_MARGIN, 2056);
        // 1 frontend + stats socket, 1 checked server.
        assert_eq!(fds(2, 1, 1).needed(1000) - FD_MARGIN, 2038);
        // nbthread 2 and 4: 3 more per thread.
        assert_eq!(fds(3, 1, 2).needed(1000) - FD_MARGIN, 2042);
        assert_eq!(fds(3, 1, 4).needed(1000) - fds(3, 1, 1).needed(1000), 9);
    }

    #[test]
    fn fit_keeps_what_fits_and_lowers_what_does_not() {
        let f = fds(3, 8, 2);
        assert_eq!(f.fit(2000, 20000), 2000);
        // k8slb's default maxconn under this machine's limit (issue 9).
        let m = f.fit(20000, 20000);
        assert_eq!(m, 9900);
        assert!(f.needed(m) <= 20000 && f.needed(m + 100) > 20000);
        assert_eq!(f.fit(20000, 4096), 2000);
        assert!(f.needed(2000) <= 4096);
        // Never above the configured value, never 0.
        assert_eq!(f.fit(150, 200), 59);
        assert_eq!(f.fit(20000, 10), 1);
        // Splicing needs pipes too.
        let s = HaproxyFds { splice: true, ..f };
        let m = s.fit(20000, 20000);
        assert!(s.needed(m) <= 20000 && m < 8000, "{m}");
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("x"), None);
    }

    #[test]
    fn this_process_has_a_budget() {
        let b = FdBudget::of_this_process().unwrap();
        assert!(b.limit > 0 && (1..=64).contains(&b.cpus), "{b:?}");
    }

    #[test]
    fn nginx_fits() {
        assert_eq!(nginx_worker_connections(16384, 1_048_576), 16384);
        assert_eq!(nginx_worker_connections(16384, 4096), 4096 - FD_MARGIN);
        assert_eq!(nginx_worker_connections(16384, 0), 1);
    }

    #[test]
    fn numbers_in_lines() {
        assert_eq!(
            find_number("maxconn 20000", "maxconn"),
            Some((8..13, 20000))
        );
        assert_eq!(
            find_number("events { worker_connections 4096; }", "worker_connections").map(|r| r.1),
            Some(4096)
        );
        assert_eq!(find_number("maxconnx 5", "maxconn"), None);
        assert_eq!(find_number("tune.maxconn 5", "maxconn"), None);
        assert_eq!(find_number("maxconn", "maxconn"), None);
        assert_eq!(find_number("maxconn abc", "maxconn"), None);
    }
}
