//! The k8slb image, run as the generated manifest says (manifests/k8slb-haproxy.yml, read
//! at test time; `K8SLB_MANIFEST` for another): the watcher Deployment's container on the
//! files source, and the actor DaemonSet's container on two LB nodes of the lab, each in
//! the lab host's network namespace with exactly its securityContext (capabilities,
//! user, read-only root, no privilege escalation) and its volumes (hostPath -> a lab
//! directory, emptyDir -> tmpfs). See tests/src/container.rs for the translation.
//!
//! The image is built by scripts/image.sh (run by the test unless `K8SLB_IMAGE_BUILT=1`).
//! Needs root, podman and runc; fails, never skips, without them.

use anyhow::{bail, ensure, Context, Result};
use k8slb_tests::container::{self, ContainerSpec, Workload};
use k8slb_tests::objects::{svc, tcp};
use k8slb_tests::system::{Options, System};
use k8slb_tests::traffic::Proto;
use k8slb_tests::wait;
use std::net::SocketAddr;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

/// What the actor of the haproxy variant needs each capability for. Used only to
/// explain a failure: the failure itself comes from the daemons refusing to work.
const ACTOR_NEEDS: [(&str, &str); 3] = [
    (
        "NET_ADMIN",
        "VIPs on interfaces over netlink (keepalived, the actor's stale-VIP cleanup)",
    ),
    (
        "NET_RAW",
        "keepalived's raw VRRP socket and its gratuitous ARP / NA packets",
    ),
    ("NET_BIND_SERVICE", "HAProxy listening on ports below 1024"),
];

/// One line naming the capabilities the manifest gives the actor and, of those it needs,
/// the ones it lacks.
fn capability_diagnosis(actor: &Workload) -> String {
    let granted = actor.effective_caps();
    let missing: Vec<String> = ACTOR_NEEDS
        .iter()
        .filter(|(c, _)| granted.as_ref().is_some_and(|g| !g.iter().any(|x| x == c)))
        .map(|(c, why)| format!("{c} ({why})"))
        .collect();
    let granted = granted.map_or("all".to_string(), |g| g.join(", "));
    if missing.is_empty() {
        format!(
            "the actor container ran with capabilities [{granted}] from {}",
            actor.source
        )
    } else {
        format!(
            "the actor container ran with capabilities [{granted}] from {}: it lacks {}",
            actor.source,
            missing.join(", ")
        )
    }
}

/// The processes of a container run with what its workload says: checked on every
/// process in its PID namespace (from /proc, not from podman's view of it).
fn check_security(name: &str, w: &Workload) -> Result<()> {
    let init = container::container_pid(name)?;
    ensure!(init > 0, "container {name} is not running");
    let procs = container::pid_namespace_processes(init)?;
    ensure!(!procs.is_empty(), "no process in container {name}");
    for (pid, _, comm) in &procs {
        let s = container::proc_security(*pid)?;
        let what = format!("{name}: pid {pid} ({comm})");
        if let Some(u) = w.run_as_user {
            // A child may drop root for its own user (FRR's daemons run as frr); none
            // runs as another user than the manifest's otherwise, and PID 1 as it says.
            let dropped_root = u == 0 && s.uid != 0 && *pid != init;
            ensure!(
                s.uid == u || dropped_root,
                "{what} runs as uid {}, the manifest says {u}",
                s.uid
            );
        }
        if let Some(caps) = w.effective_caps() {
            // Children may drop capabilities (HAProxy workers do); none gains one.
            ensure!(
                s.caps.iter().all(|c| caps.contains(c)),
                "{what} has capabilities {:?}, beyond the manifest's {caps:?}",
                s.caps
            );
            if *pid == init {
                ensure!(
                    s.caps == caps,
                    "{what} has capabilities {:?}, the manifest says exactly {caps:?}",
                    s.caps
                );
            }
        }
        if w.allow_privilege_escalation == Some(false) {
            ensure!(s.no_new_privs, "{what} may gain privileges (NoNewPrivs 0)");
        }
        if w.read_only_root {
            ensure!(s.root_read_only, "{what} has a writable root filesystem");
        }
    }
    Ok(())
}

/// The haproxy master on `node`: the haproxy whose parent is not a haproxy and that has
/// haproxy children (an orphaned worker has none).
fn haproxy_master(sys: &System, node: &str) -> Result<i32> {
    let ppid = |p: i32| -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        stat[stat.rfind(')')? + 1..]
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let pids = sys.pids_named(node, "haproxy")?;
    pids.iter()
        .copied()
        .find(|p| {
            ppid(*p).is_some_and(|pp| !pids.contains(&pp))
                && pids.iter().any(|c| ppid(*c) == Some(*p))
        })
        .with_context(|| format!("no haproxy master on {node} (haproxy pids {pids:?})"))
}

fn zombies(name: &str) -> Result<Vec<(i32, char, String)>> {
    let init = container::container_pid(name)?;
    Ok(container::pid_namespace_processes(init)?
        .into_iter()
        .filter(|(_, st, _)| *st == 'Z')
        .collect())
}

/// The whole check: the images under the manifest's security contexts take a VIP,
/// serve it, reap orphans, and fail over cleanly on SIGTERM.
fn images_do_their_jobs(spec: &ContainerSpec, name: &str) -> Result<()> {
    let mut sys = System::start(Options::new(name).containers(spec.clone()))?;

    // The watcher did its job (a state, an IP for the Service) as its Deployment's user.
    check_security(&sys.container_name("watcher"), &spec.watcher)?;
    let s = svc("default", "web").port(tcp("http", 80, 8080));
    sys.apply_service(&s)?;
    let ip = sys.wait_ips("default/web", T)?[0];
    let target = SocketAddr::new(ip, 80);

    // Each actor: PID 1 of its container, the manifest's security context.
    for n in sys.lb_nodes() {
        check_security(&sys.container_name(&n), &spec.actor)?;
    }
    // A VIP taken by one node, traffic served through it.
    sys.wait_serving(Proto::Http, target, T)?;
    let master = sys.wait_one_holder(ip, T)?;
    let cname = sys.container_name(&master);

    // PID 1 reaps orphans: HAProxy's master SIGKILLed leaves its workers to PID 1. The
    // actor restarts HAProxy; no process of the container stays a zombie.
    let hp = haproxy_master(&sys, &master)?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(hp),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    wait::until(T, || {
        Ok(haproxy_master(&sys, &master).is_ok_and(|p| p != hp) && zombies(&cname)?.is_empty())
    })
    .with_context(|| {
        format!(
            "after HAProxy's master was killed on {master}: zombies {:?}",
            zombies(&cname).unwrap_or_default()
        )
    })?;
    sys.wait_serving(Proto::Http, target, T)?;
    check_security(&cname, &spec.actor)?;

    // SIGTERM (podman stop with the grace period): the actor releases its VIPs and exits
    // 0 before the grace period ends; the other actor container takes over.
    let grace = Duration::from_secs(spec.actor.grace_seconds);
    let (took, code) = sys.stop_actor_container(&master)?;
    eprintln!("podman stop on {master}: exited {code} after {took:?} (grace {grace:?})");
    ensure!(
        took < grace,
        "the actor on {master} took {took:?} to stop: SIGKILLed after the grace period {grace:?}"
    );
    ensure!(
        code == 0,
        "the actor on {master} exited with {code} on SIGTERM"
    );
    let holders = sys.holders(ip)?;
    ensure!(
        !holders.contains(&master),
        "{ip} still on {master} after its actor stopped"
    );
    wait::until(T, || Ok(sys.holders(ip)?.iter().any(|h| *h != master)))
        .context("no other actor took the VIP")?;
    sys.wait_serving(Proto::Http, target, T)?;
    sys.lab.pass();
    Ok(())
}

fn with_diagnosis(spec: &ContainerSpec, r: Result<()>) -> Result<()> {
    r.map_err(|e| e.context(capability_diagnosis(&spec.actor)))
}

#[test]
#[ignore = "needs root: podman runs the k8slb image under the manifests' security contexts in the lab's network namespaces; ./scripts/test.sh runs it"]
fn images_under_the_manifests_security_contexts_serve_reap_and_fail_over() {
    let spec = ContainerSpec::from_manifest().expect("the generated manifest");
    // The manifest is what is tested, whatever it says; these only catch a wrong file.
    assert_eq!(spec.actor.command, ["k8slb-actor"], "{}", spec.actor.source);
    assert_eq!(
        spec.watcher.command,
        ["k8slb-watcher"],
        "{}",
        spec.watcher.source
    );
    if let Err(e) = with_diagnosis(&spec, images_do_their_jobs(&spec, "image")) {
        panic!("{e:#}");
    }
}

/// The same test logic with NET_RAW removed from the DaemonSet's capabilities fails, and
/// its message names the capability.
#[test]
#[ignore = "needs root: podman runs the k8slb image under the manifests' security contexts in the lab's network namespaces; ./scripts/test.sh runs it"]
fn a_capability_removed_from_the_daemonset_fails_naming_it() {
    let spec = ContainerSpec::from_manifest().expect("the generated manifest");
    let mut cut = spec.clone();
    cut.actor = spec.actor.without_cap("NET_RAW");
    let r = with_diagnosis(&cut, images_do_their_jobs(&cut, "image-noraw"));
    let e = match r {
        Ok(()) => {
            panic!("the images worked without NET_RAW: the test cannot see a missing capability")
        }
        Err(e) => format!("{e:#}"),
    };
    eprintln!("as expected, without NET_RAW:\n{e}");
    assert!(e.contains("lacks NET_RAW"), "{e}");
}

/// The manifest is parsed, not guessed: the actor runs as root with NET_ADMIN, NET_RAW
/// and NET_BIND_SERVICE only (haproxy variant), the watcher as 65532 with none.
#[test]
fn manifest_security_contexts_are_read() -> Result<()> {
    let spec = ContainerSpec::from_manifest()?;
    let caps = spec
        .actor
        .effective_caps()
        .context("actor: capabilities not dropped")?;
    if caps != ["NET_ADMIN", "NET_BIND_SERVICE", "NET_RAW"] {
        bail!("actor capabilities {caps:?} in {}", spec.actor.source);
    }
    ensure!(spec.watcher.effective_caps() == Some(vec![]));
    ensure!(spec.watcher.run_as_user == Some(65532));
    ensure!(spec.actor.read_only_root && spec.watcher.read_only_root);
    Ok(())
}

/// What the BGP variant's actor needs beyond the base, for a failure's message.
const BGP_NEEDS: &str = "FRR's daemons need SETUID and SETGID (they switch to the user frr), CHOWN (their runtime directory), SYS_ADMIN (FRR 8 refuses to start without it) and KILL (the actor stops them)";

/// The BGP variant (manifests/k8slb-haproxy-bgp.yml) as users run it: the actor
/// containers under its security context start FRR as their children, which peer with
/// the lab's upstream router (TCP MD5 on IPv4, the password from the Secret's node copy),
/// announce a BGP-mode pool's address from both nodes, and withdraw it when the actor
/// stops (SIGTERM, exit 0 within the grace period). Every process of the containers,
/// FRR's included, stays within the manifest's capabilities.
#[test]
#[ignore = "needs root: podman runs the k8slb image under the BGP manifest's security context in the lab's network namespaces with an FRR router; ./scripts/test.sh runs it"]
fn the_bgp_variant_announces_from_every_node_under_its_manifests_security_context() {
    let m = k8slb_tests::bins::repo_root().join("manifests/k8slb-haproxy-bgp.yml");
    let spec = ContainerSpec::from_file(&m).expect("the BGP manifest");
    let caps = spec.actor.effective_caps().unwrap_or_default();
    for c in ["SETUID", "SETGID", "CHOWN", "SYS_ADMIN", "KILL"] {
        assert!(
            caps.iter().any(|x| x == c),
            "{c} not in {caps:?}: {BGP_NEEDS}"
        );
    }
    if let Err(e) = bgp_in_containers(&spec) {
        panic!(
            "{e:#}\n(the actor ran with capabilities {caps:?} from {}; {BGP_NEEDS})",
            spec.actor.source
        );
    }
}

fn bgp_in_containers(spec: &ContainerSpec) -> Result<()> {
    use k8slb_tests::bgp;
    let mut opts = Options::new("image-bgp").containers(spec.clone());
    opts.config_extra = bgp::config();
    let mut sys = System::start(opts)?;
    for n in sys.lb_nodes() {
        let d = sys.actor_bgp_secrets_dir(&n).join(bgp::PASSWORD_SECRET);
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join("password"), bgp::PASSWORD)?;
    }
    bgp::start_router(&mut sys)?;
    let fast = svc("default", "fast")
        .port(tcp("http", 80, 8080))
        .annotation("loadbalancer/pool", "ecmp");
    sys.apply_service(&fast)?;
    let ip = sys.wait_ips("default/fast", T)?[0];
    let nodes = sys.lb_nodes();
    bgp::wait_hops(&sys, ip, nodes.len()).context("the address announced by every node")?;
    let target = SocketAddr::new(ip, 80);
    sys.wait_serving(Proto::Http, target, T)?;
    for n in &nodes {
        check_security(&sys.container_name(n), &spec.actor)?;
        let frr = sys.pids_named(n, "bgpd")?;
        ensure!(!frr.is_empty(), "no bgpd in the container of {n}");
    }
    // SIGTERM: the routes withdrawn before the proxy stops; exit 0 within the grace.
    let first = nodes[0].clone();
    let grace = Duration::from_secs(spec.actor.grace_seconds);
    let (took, code) = sys.stop_actor_container(&first)?;
    eprintln!("podman stop on {first}: exited {code} after {took:?} (grace {grace:?})");
    ensure!(
        took < grace && code == 0,
        "the actor on {first}: {code} after {took:?}"
    );
    bgp::wait_hops(&sys, ip, nodes.len() - 1).context("the stopped node's route withdrawn")?;
    sys.wait_serving(Proto::Http, target, T)?;
    sys.lab.pass();
    Ok(())
}
