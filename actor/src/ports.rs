//! Ports another program on this node holds: the proxy's checker does not bind (neither
//! `haproxy -c` nor `nginx -t` opens a listener), so a config that listens on a VIP port
//! that another program holds on every address (`0.0.0.0:111`, `[::]:9100`) passes the
//! check and then fails at the reload, for the whole config: every later state fails the
//! same way, for every tenant. The plan refuses the ports the admin reserves
//! (`reservedPorts`); this is the node's own view, checked with the config, so the
//! quarantine finds the object that asks for such a port and serves the rest.
//!
//! The proxies bind VIPs, never a wildcard address: a wildcard listener is another
//! program's. A listener on one address of the node (`192.168.0.11:10250`) does not
//! keep a VIP's port from being bound, and is not counted. An IPv6 wildcard counts for
//! IPv4 too (it takes both families unless it is `V6ONLY`, which the kernel does not
//! show here): the careful side.
//!
//! Read from `/proc/net/{tcp,tcp6,udp,udp6}` of the actor's network namespace (the
//! node's: the actor runs on the host network). Pure apart from [`read`].

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;

/// A transport a proxy listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    Tcp,
    Udp,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        }
    }
}

/// The wildcard listeners of the namespace: (transport, IPv6?, port).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wildcards(BTreeSet<(Transport, bool, u16)>);

impl Wildcards {
    /// From the text of `/proc/net/<tcp|udp>[6]`: TCP sockets in LISTEN, UDP sockets
    /// bound (UNCONN), on the all-zero address.
    pub fn add_proc_table(&mut self, transport: Transport, v6: bool, text: &str) {
        for line in text.lines().skip(1) {
            let mut fields = line.split_whitespace();
            let (Some(_), Some(local), Some(_), Some(st)) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let listening = match transport {
                Transport::Tcp => st == "0A",
                Transport::Udp => st == "07",
            };
            let Some((addr, port)) = local.split_once(':') else {
                continue;
            };
            let Ok(port) = u16::from_str_radix(port, 16) else {
                continue;
            };
            if listening && !addr.is_empty() && addr.bytes().all(|b| b == b'0') {
                self.0.insert((transport, v6, port));
            }
        }
    }

    /// Which of `listens` another program's wildcard listener keeps from being bound.
    pub fn conflicts<'a>(
        &self,
        listens: impl IntoIterator<Item = &'a (SocketAddr, Transport)>,
    ) -> Vec<(SocketAddr, Transport)> {
        listens
            .into_iter()
            .filter(|(addr, t)| {
                let port = addr.port();
                self.0.contains(&(*t, true, port))
                    || (addr.is_ipv4() && self.0.contains(&(*t, false, port)))
            })
            .copied()
            .collect()
    }
}

/// The wildcard listeners under `net` (`/proc/net`, or `/proc/<pid>/net` for another
/// namespace's); a table that cannot be read counts as empty.
pub fn read(net: &Path) -> Wildcards {
    let mut w = Wildcards::default();
    for (file, transport, v6) in [
        ("tcp", Transport::Tcp, false),
        ("tcp6", Transport::Tcp, true),
        ("udp", Transport::Udp, false),
        ("udp6", Transport::Udp, true),
    ] {
        if let Ok(text) = std::fs::read_to_string(net.join(file)) {
            w.add_proc_table(transport, v6, &text);
        }
    }
    w
}

/// The checker-style line for a refused listen (what the node report quotes).
pub fn refusal(conflicts: &[(SocketAddr, Transport)]) -> String {
    conflicts
        .iter()
        .map(|(a, t)| {
            format!(
                "[ALERT] k8slb: cannot listen on {a}/{}: another program on this node listens on port {} of every address",
                t.as_str(),
                a.port()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:006F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 10 0 0 10 0
   1: 0B00A8C0:280A 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 10 0 0 10 0
   2: 00000000:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 10 0 0 10 0
   3: 0100007F:2AF8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1 0 10 0 0 10 0
";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:238C 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5 1 0 10 0 0 10 0
";
    const UDP: &str = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  10: 00000000:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 6 2 0 0
";

    fn wild() -> Wildcards {
        let mut w = Wildcards::default();
        w.add_proc_table(Transport::Tcp, false, TCP);
        w.add_proc_table(Transport::Tcp, true, TCP6);
        w.add_proc_table(Transport::Udp, false, UDP);
        w
    }

    #[test]
    fn only_wildcard_listeners_of_other_programs_count() {
        assert_eq!(
            wild().0,
            BTreeSet::from([
                (Transport::Tcp, false, 111),
                (Transport::Tcp, true, 9100),
                (Transport::Udp, false, 53),
            ]),
            "a node-address listener (192.168.0.11:10250), a connected socket (port 8080) \
             and a loopback one (127.0.0.1:11000) do not keep a VIP's port"
        );
    }

    #[test]
    fn a_vip_port_held_on_every_address_conflicts_on_its_transport_and_family() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let listens = [
            (a("198.18.0.10:111"), Transport::Tcp),
            (a("198.18.0.10:111"), Transport::Udp),
            (a("198.18.0.10:9100"), Transport::Tcp),
            (a("[fd00::10]:9100"), Transport::Tcp),
            (a("[fd00::10]:111"), Transport::Tcp),
            (a("198.18.0.10:53"), Transport::Udp),
            (a("198.18.0.10:10250"), Transport::Tcp),
            (a("198.18.0.10:80"), Transport::Tcp),
        ];
        assert_eq!(
            wild().conflicts(&listens),
            vec![
                (a("198.18.0.10:111"), Transport::Tcp),
                (a("198.18.0.10:9100"), Transport::Tcp),
                (a("[fd00::10]:9100"), Transport::Tcp),
                (a("198.18.0.10:53"), Transport::Udp),
            ]
        );
        let line = refusal(&[(a("198.18.0.10:111"), Transport::Tcp)]);
        assert!(
            line.starts_with("[ALERT]") && line.contains("198.18.0.10:111/tcp"),
            "{line}"
        );
    }

    #[test]
    fn this_namespace_reads_without_error() {
        // Whatever this machine listens on: the tables parse (an unreadable one is empty).
        let _ = read(Path::new("/proc/net"));
        assert_eq!(read(Path::new("/nonexistent")), Wildcards::default());
    }
}
