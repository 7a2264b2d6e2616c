//! HAProxy Runtime API and master CLI over unix stream sockets.
//!
//! One command per connection (HAProxy closes a non-interactive connection after the
//! answer), or several joined with `;` in one connection. Answers are returned as text;
//! a command is considered failed when HAProxy's answer carries one of its error
//! markers (see [`answer_is_error`]).
//!
//! The master CLI (`haproxy -W -S <sock>`) answers `show proc`, parsed by
//! [`ProcList::parse`], which is how a reload is confirmed: the current worker's pid
//! changes and the master's reload counter goes up.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("connect to HAProxy socket {path}: {source}")]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("talk to HAProxy socket {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("HAProxy refused command {command:?}: {answer}")]
    Refused { command: String, answer: String },
    #[error("cannot parse `show proc` answer: {0:?}")]
    ShowProc(String),
}

impl RuntimeError {
    /// A fixed string for metric labels.
    pub fn category(&self) -> &'static str {
        match self {
            RuntimeError::Connect { .. } => "connect",
            RuntimeError::Io { .. } => "io",
            RuntimeError::Refused { .. } => "refused",
            RuntimeError::ShowProc(_) => "show_proc",
        }
    }
}

/// Timeout of one exchange on a socket.
pub const SOCKET_TIMEOUT: Duration = Duration::from_secs(5);

/// Send `command` (one line, no newline) and read the whole answer.
pub fn send(path: &Path, command: &str) -> Result<String, RuntimeError> {
    let io = |source| RuntimeError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut s = UnixStream::connect(path).map_err(|source| RuntimeError::Connect {
        path: path.to_path_buf(),
        source,
    })?;
    s.set_read_timeout(Some(SOCKET_TIMEOUT)).map_err(io)?;
    s.set_write_timeout(Some(SOCKET_TIMEOUT)).map_err(io)?;
    s.write_all(command.as_bytes()).map_err(io)?;
    s.write_all(b"\n").map_err(io)?;
    // The master CLI keeps the connection open until our side is closed.
    s.shutdown(std::net::Shutdown::Write).map_err(io)?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(io)?;
    Ok(out)
}

/// True when an answer of the Runtime API reports a failure. Successful `set server`
/// commands answer nothing or an informational line ("no need to change the addr",
/// "IP changed from ..."); failures name the problem.
pub fn answer_is_error(answer: &str) -> bool {
    const MARKERS: &[&str] = &[
        "No such",
        "Unknown command",
        "Unknown map",
        "Require",
        "requires",
        "Invalid",
        "invalid",
        "Permission denied",
        "not found",
        "cannot",
        "Can't",
        "failed",
        "error",
        "Error",
    ];
    MARKERS.iter().any(|m| answer.contains(m))
}

/// The prefix of the pseudo-command `<UPDATE_CERT><certificate path>` in a command list
/// ([`crate::render::RuntimeCommand::UpdateCert`]): [`apply_commands`] carries it out
/// with [`update_cert`].
pub const UPDATE_CERT: &str = "k8slb-update-ssl-cert ";

/// Replace the certificate HAProxy loaded from `cert` (a path of its config) with the
/// file's current content, hitless: `set ssl cert <cert> <<` + the PEM, then
/// `commit ssl cert <cert>`. If either is refused (a key that does not match, a path the
/// config does not name), the transaction is aborted so nothing half-done stays open,
/// and the refusal is returned (the caller reloads instead). The file is read here, and
/// neither the command nor an error ever holds its content.
pub fn update_cert(socket: &Path, cert: &str) -> Result<(), RuntimeError> {
    let pem = std::fs::read_to_string(cert).map_err(|source| RuntimeError::Io {
        path: PathBuf::from(cert),
        source,
    })?;
    // The payload ends at the first empty line: none inside it.
    let payload: Vec<&str> = pem.lines().filter(|l| !l.trim().is_empty()).collect();
    let set = format!("set ssl cert {cert} <<\n{}\n", payload.join("\n"));
    let refused = |command: String, answer: &str| RuntimeError::Refused {
        command,
        answer: answer.trim().to_string(),
    };
    let answer = send(socket, &set)?;
    if answer_is_error(&answer) || !answer.contains("Transaction") {
        let _ = send(socket, &format!("abort ssl cert {cert}"));
        return Err(refused(format!("set ssl cert {cert}"), &answer));
    }
    let commit = format!("commit ssl cert {cert}");
    let answer = send(socket, &commit)?;
    if answer_is_error(&answer) || !answer.contains("Success!") {
        let _ = send(socket, &format!("abort ssl cert {cert}"));
        return Err(refused(commit, &answer));
    }
    Ok(())
}

/// Apply `commands` one connection each; stop at the first refusal.
/// Returns how many commands were applied.
pub fn apply_commands(path: &Path, commands: &[String]) -> Result<usize, RuntimeError> {
    for c in commands {
        if let Some(cert) = c.strip_prefix(UPDATE_CERT) {
            update_cert(path, cert)?;
            continue;
        }
        let answer = send(path, c)?;
        if answer_is_error(&answer) {
            return Err(RuntimeError::Refused {
                command: c.clone(),
                answer: answer.trim().to_string(),
            });
        }
    }
    Ok(commands.len())
}

/// One process line of the master CLI's `show proc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    /// `master`, `worker`, or a program name.
    pub kind: String,
    /// For the master: reloads since start; for a worker: reloads since it started
    /// (0 for the current generation).
    pub reloads: u32,
}

/// Parsed `show proc` of the master CLI.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProcList {
    pub master: Option<Proc>,
    /// Current generation (under `# workers`).
    pub workers: Vec<Proc>,
    /// Previous generations still finishing connections (under `# old workers`).
    pub old_workers: Vec<Proc>,
}

impl ProcList {
    /// Parse HAProxy 2.x's `show proc` output:
    ///
    /// ```text
    /// #<PID>          <type>          <reloads>       <uptime>        <version>
    /// 1162            master          5 [failed: 0]   0d00h02m07s     2.6.12
    /// # workers
    /// 1271            worker          0               0d00h00m00s     2.6.12
    /// # old workers
    /// 1233            worker          3               0d00h00m43s     2.6.12
    /// ```
    pub fn parse(text: &str) -> Result<Self, RuntimeError> {
        #[derive(PartialEq)]
        enum Sec {
            Top,
            Workers,
            Old,
            Other,
        }
        let mut sec = Sec::Top;
        let mut out = ProcList::default();
        for line in text.lines() {
            let t = line.trim();
            if t.is_empty() {
                continue;
            }
            if let Some(h) = t.strip_prefix('#') {
                let h = h.trim();
                sec = if h.starts_with('<') {
                    Sec::Top
                } else if h == "workers" {
                    Sec::Workers
                } else if h == "old workers" {
                    Sec::Old
                } else {
                    Sec::Other
                };
                continue;
            }
            let mut f = t.split_whitespace();
            let (Some(pid), Some(kind), Some(reloads)) = (f.next(), f.next(), f.next()) else {
                return Err(RuntimeError::ShowProc(line.to_string()));
            };
            let (Ok(pid), Ok(reloads)) = (pid.parse::<u32>(), reloads.parse::<u32>()) else {
                return Err(RuntimeError::ShowProc(line.to_string()));
            };
            let p = Proc {
                pid,
                kind: kind.to_string(),
                reloads,
            };
            match sec {
                Sec::Top if p.kind == "master" => out.master = Some(p),
                Sec::Workers => out.workers.push(p),
                Sec::Old => out.old_workers.push(p),
                _ => {}
            }
        }
        if out.master.is_none() {
            return Err(RuntimeError::ShowProc(text.chars().take(200).collect()));
        }
        Ok(out)
    }

    /// The pid of the current worker (the first of the current generation).
    pub fn current_worker(&self) -> Option<u32> {
        self.workers.first().map(|p| p.pid)
    }

    pub fn master_reloads(&self) -> u32 {
        self.master.as_ref().map_or(0, |m| m.reloads)
    }
}

/// `show proc` on the master CLI.
pub fn show_proc(master_socket: &Path) -> Result<ProcList, RuntimeError> {
    ProcList::parse(&send(master_socket, "show proc")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOW_PROC: &str =
        "#<PID>          <type>          <reloads>       <uptime>        <version>\n\
1162            master          5 [failed: 0]   0d00h02m07s     2.6.12-1+deb12u4\n\
# workers\n\
1271            worker          0               0d00h00m00s     2.6.12-1+deb12u4\n\
# old workers\n\
1233            worker          3               0d00h00m43s     2.6.12-1+deb12u4\n\
# programs\n\
\n";

    #[test]
    fn parses_show_proc() {
        let p = ProcList::parse(SHOW_PROC).unwrap();
        assert_eq!(p.master.as_ref().unwrap().pid, 1162);
        assert_eq!(p.master_reloads(), 5);
        assert_eq!(p.current_worker(), Some(1271));
        assert_eq!(p.old_workers.len(), 1);
        assert_eq!(p.old_workers[0].reloads, 3);
    }

    #[test]
    fn show_proc_garbage_is_an_error() {
        assert!(ProcList::parse("Unknown command\n").is_err());
        assert!(ProcList::parse("").is_err());
    }

    #[test]
    fn error_answers() {
        assert!(!answer_is_error(""));
        assert!(!answer_is_error("\n"));
        assert!(!answer_is_error("IP changed from '1.2.3.4' to '1.2.3.5', port changed from '80' to '81' by 'stats socket command'\n"));
        assert!(!answer_is_error("no need to change the addr, port\n"));
        assert!(answer_is_error("No such server.\n"));
        assert!(answer_is_error("No such backend.\n"));
        assert!(answer_is_error(
            "Unknown command. Please enter one of the following commands only :\n"
        ));
        assert!(answer_is_error("Require 'backend/server'.\n"));
        assert!(answer_is_error("Permission denied\n"));
    }
}
