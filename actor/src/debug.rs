//! `k8slb-actor debug ...` (hidden): small probes used by the root tests, run inside a
//! network namespace with `ip netns exec` so the test process itself never changes
//! namespace.
//!
//! - `addrs`: this namespace's addresses over netlink, one `ifname addr/prefix` a line;
//! - `detect <ip>`: the interface [`crate::vip::detect_interface`] picks for `<ip>`;
//! - `connect --addr <ip:port> --until <file>`: connect, send an HTTP/1.0 request and
//!   read the answer in a loop until `<file>` exists; prints `ok=<n> failed=<m>` and the
//!   first errors;
//! - `listen --addr <ip:port> [--answer <text>]`: hold a listening socket (no
//!   SO_REUSEPORT) until killed, so a daemon that wants the same port cannot start; with
//!   `--answer`, a tiny HTTP backend that answers every request with `<text>`.

use crate::vip::{self, AddrOps};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct DebugArgs {
    #[command(subcommand)]
    pub cmd: DebugCmd,
}

#[derive(Debug, clap::Subcommand)]
pub enum DebugCmd {
    /// List addresses over netlink.
    Addrs,
    /// Detect the interface for an address (longest-prefix match).
    Detect { ip: std::net::IpAddr },
    /// One HTTP/1.0 GET; prints the answer.
    Get {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long, default_value = "/")]
        path: String,
    },
    /// Listen on an address until killed (accepts and closes connections).
    Listen {
        #[arg(long)]
        addr: SocketAddr,
        /// Answer each request with `HTTP/1.0 200` and this body (else close at once).
        #[arg(long)]
        answer: Option<String>,
    },
    /// Connect in a loop until a file exists; count failures.
    Connect {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long)]
        until: PathBuf,
    },
}

pub fn run(args: DebugArgs) -> anyhow::Result<()> {
    match args.cmd {
        DebugCmd::Addrs => {
            let mut nl = vip::Netlink::new()?;
            for a in nl.addresses()? {
                println!("{} {}", a.ifname, a.net);
            }
        }
        DebugCmd::Detect { ip } => {
            let mut nl = vip::Netlink::new()?;
            let addrs: Vec<(String, ipnet::IpNet)> = nl
                .addresses()?
                .into_iter()
                .map(|a| (a.ifname, a.net))
                .collect();
            match vip::detect_interface(ip, &addrs) {
                Some(i) => println!("{i}"),
                None => anyhow::bail!("no interface for {ip}"),
            }
        }
        DebugCmd::Get { addr, path } => {
            print!("{}", String::from_utf8_lossy(&get(addr, &path)?));
        }
        DebugCmd::Listen { addr, answer } => {
            let l = std::net::TcpListener::bind(addr)?;
            println!("listening on {}", l.local_addr()?);
            std::io::stdout().flush()?;
            for c in l.incoming() {
                if let (Ok(mut c), Some(body)) = (c, answer.as_deref()) {
                    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut buf = [0u8; 4096];
                    let _ = c.read(&mut buf);
                    let _ = write!(
                        c,
                        "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                }
            }
        }
        DebugCmd::Connect { addr, until } => {
            let (mut ok, mut failed) = (0u64, 0u64);
            let mut errors = Vec::new();
            while !until.exists() {
                match probe(addr) {
                    Ok(()) => ok += 1,
                    Err(e) => {
                        failed += 1;
                        if errors.len() < 5 {
                            errors.push(e.to_string());
                        }
                    }
                }
            }
            println!("ok={ok} failed={failed}");
            for e in errors {
                println!("error: {e}");
            }
        }
    }
    Ok(())
}

fn get(addr: SocketAddr, path: &str) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    Ok(buf)
}

fn probe(addr: SocketAddr) -> std::io::Result<()> {
    let buf = get(addr, "/")?;
    if buf.starts_with(b"HTTP/1.") {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "bad answer: {:?}",
            String::from_utf8_lossy(&buf[..buf.len().min(40)])
        )))
    }
}
