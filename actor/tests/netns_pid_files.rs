//! The actor owns its work dir: a pid file left there by an earlier container (the work
//! dir is a hostPath) that names a live process which is not a daemon of ours (PIDs are
//! reused: a host process, this container's own threads, a kernel thread) never stops a
//! daemon from starting. keepalived refuses to start with "daemon is already running"
//! while its pid file names any live process; the actor removes such a file first.
//! Real keepalived, HAProxy and nginx, each in a network namespace of its own.

mod support;

use k8slb_actor::daemons::{stop_leftover, Daemon, Haproxy, Keepalived, Nginx, Paths};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::*;

/// A live process that is not ours: `sleep`, killed on drop.
struct Unrelated(Child);

impl Unrelated {
    fn start() -> Unrelated {
        Unrelated(
            Command::new("sleep")
                .arg("120")
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Unrelated {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn plant(pid_file: &Path, pid: u32) {
    std::fs::write(pid_file, format!("{pid}\n")).unwrap();
}

/// Starts `daemon` with its pid file naming a live unrelated process; it must start, the
/// unrelated process must live on, and the pid file must then name the daemon.
fn starts_despite_a_stale_pid_file(mut daemon: impl Daemon, pid_file: &Path) {
    let mut other = Unrelated::start();
    plant(pid_file, other.pid());
    let started = daemon.start();
    let name = daemon.kind();
    assert!(started.is_ok(), "{name}: {:?}", started.err());
    assert!(daemon.is_running(), "{name}");
    assert!(other.alive(), "{name}: the unrelated process was touched");
    let now = std::fs::read_to_string(pid_file).unwrap_or_default();
    assert_ne!(
        now.trim(),
        other.pid().to_string(),
        "{name}: the pid file still names the unrelated process"
    );
    daemon.stop(Duration::from_secs(3));
}

#[test]
#[ignore = "needs root: network namespaces, keepalived; ./scripts/test.sh runs it"]
fn keepalived_starts_when_its_pid_file_names_a_live_unrelated_process() {
    require_root_and(&["ip", "keepalived"]);
    let ns = Netns::new("k8slb-pid");
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::new(dir.path());
    // A config with one instance, so keepalived forks its VRRP child (what `start`
    // waits for), on an interface of the namespace's own.
    ns.veth("k0", "k1", "198.18.90.1/24");
    std::fs::write(
        paths.keepalived_conf(),
        "global_defs {\n  router_id pidtest\n}\n\
         vrrp_instance vi_1 {\n  state BACKUP\n  interface k0\n  virtual_router_id 51\n\
         priority 100\n  advert_int 1\n  virtual_ipaddress {\n    198.18.90.10/32\n  }\n}\n",
    )
    .unwrap();
    let bin = ns.wrapper(dir.path(), "keepalived");
    starts_despite_a_stale_pid_file(Keepalived::new(bin, paths.clone()), &paths.keepalived_pid());
}

#[test]
#[ignore = "needs root: network namespaces, haproxy; ./scripts/test.sh runs it"]
fn haproxy_starts_when_its_pid_file_names_a_live_unrelated_process() {
    require_root_and(&["ip", "haproxy"]);
    let ns = Netns::new("k8slb-pid");
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::new(dir.path());
    std::fs::write(
        paths.haproxy_cfg(),
        format!(
            "global\n  pidfile {}\n\
             defaults\n  mode tcp\n  timeout client 1s\n  timeout server 1s\n  timeout connect 1s\n\
             frontend f\n  bind 127.0.0.1:8080\n",
            paths.haproxy_pid().display()
        ),
    )
    .unwrap();
    let bin = ns.wrapper(dir.path(), "haproxy");
    starts_despite_a_stale_pid_file(Haproxy::new(bin, paths.clone()), &paths.haproxy_pid());
}

#[test]
#[ignore = "needs root: network namespaces, nginx; ./scripts/test.sh runs it"]
fn nginx_starts_when_its_pid_file_names_a_live_unrelated_process() {
    require_root_and(&["ip", "nginx"]);
    let ns = Netns::new("k8slb-pid");
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::new(dir.path());
    std::fs::write(
        paths.nginx_conf(),
        format!(
            "pid {};\nevents {{}}\nhttp {{\n  access_log off;\n  server {{\n    listen 127.0.0.1:8080;\n  }}\n}}\n",
            paths.nginx_pid().display()
        ),
    )
    .unwrap();
    let bin = ns.wrapper(dir.path(), "nginx");
    starts_despite_a_stale_pid_file(Nginx::new(bin, paths.clone()), &paths.nginx_pid());
}

/// nginx's workers outlive a master killed with SIGKILL (HAProxy's do not) and keep its
/// listening sockets: a new master could never bind them ("Address already in use")
/// while they went on serving the old config. The actor stops them when it sees the
/// master gone, and the restarted nginx serves the new config.
#[test]
#[ignore = "needs root: network namespaces, nginx; ./scripts/test.sh runs it"]
fn nginx_restarts_when_its_master_alone_was_killed_and_the_orphaned_workers_stop() {
    require_root_and(&["ip", "nginx"]);
    let ns = Netns::new("k8slb-orph");
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::new(dir.path());
    let conf = |body: &str| {
        std::fs::write(
            paths.nginx_conf(),
            format!(
                "pid {};\nworker_processes 2;\nevents {{}}\nhttp {{\n  access_log off;\n  server {{\n    listen 127.0.0.1:8080;\n    return 200 \"{body}\\n\";\n  }}\n}}\n",
                paths.nginx_pid().display()
            ),
        )
        .unwrap()
    };
    conf("first");
    let bin = ns.wrapper(dir.path(), "nginx");
    let mut nginx = Nginx::new(bin, paths.clone());
    nginx.start().unwrap();
    let body = |ns: &Netns| {
        ns.get("127.0.0.1:8080", "/")
            .trim()
            .rsplit('\n')
            .next()
            .map(str::to_string)
    };
    assert_eq!(body(&ns).as_deref(), Some("first"));
    let master = nginx.pid().unwrap();
    let workers = children(master);
    assert!(!workers.is_empty(), "no worker");

    // The master alone is killed (an operator's kill -9, a crash): its workers go on.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(master as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || nginx.poll_exit().is_some()),
        "the master's exit is seen"
    );
    let nginx_process = |p: &u32| {
        std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(b"nginx: "))
            && comm(*p).is_some()
    };
    assert!(
        wait_until(Duration::from_secs(5), || !workers
            .iter()
            .any(nginx_process)),
        "the orphaned workers still run: {workers:?}"
    );

    // The actor starts nginx again, on a new config: it binds and serves it.
    conf("second");
    let started = nginx.start();
    assert!(started.is_ok(), "{:?}", started.err());
    assert_eq!(body(&ns).as_deref(), Some("second"));
    nginx.stop(Duration::from_secs(3));
}

/// At start the actor stops daemons an earlier actor left running; a pid file naming
/// something else is not ours to stop: that process lives on, and the file goes.
#[test]
fn a_leftover_pid_file_naming_another_process_is_removed_and_the_process_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::new(dir.path());
    let mut other = Unrelated::start();
    plant(&paths.keepalived_pid(), other.pid());
    assert_eq!(
        stop_leftover(
            &paths.keepalived_pid(),
            &paths.keepalived_conf(),
            Duration::from_secs(1)
        ),
        None
    );
    assert!(other.alive());
    assert!(!paths.keepalived_pid().exists());
}
