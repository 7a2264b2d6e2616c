//! The translation of the Ingresses of one VIP: listeners built port by port, rules
//! placed host by host in precedence order, backends resolved, TLS redirects and ACME
//! challenges.

use super::*;

/// A listener being built.
pub(super) struct Building {
    pub(super) protocol: ListenerProtocol,
    /// The Ingress that first used the port (owner of its protocol).
    pub(super) owner: Rc<str>,
    pub(super) hosts: BTreeMap<Option<Hostname>, Vec<RouteRule>>,
    /// (host, match) → the Ingress that claimed it.
    pub(super) claims: HashMap<(Option<Hostname>, RouteMatch), Rc<str>>,
    pub(super) default_action: Option<(RouteAction, Rc<str>)>,
    /// The namespace of the default action's Ingress.
    pub(super) default_namespace: Option<String>,
    /// SNI host → (certificate, Ingress).
    pub(super) certs: BTreeMap<Hostname, (CertFile, Rc<str>)>,
    /// First certificate of a `spec.tls` entry without hosts.
    pub(super) hostless_cert: Option<CertFile>,
    /// The rules redirected to HTTPS whose path covers the ACME challenge directory
    /// (`/`, `/.well-known`, ...), with the action they would have had: see
    /// [`acme_passthrough`].
    pub(super) acme_covers: HashMap<(Option<Hostname>, RouteMatch), RouteAction>,
}

/// The listeners of one VIP, built Ingress after Ingress (in precedence order: the
/// first to claim a port, a host and path, a certificate or a backend's stickiness
/// keeps it).
pub(super) struct Translation<'t, 'a> {
    pub(super) idx: &'t Index<'a>,
    pub(super) opts: &'t VipOptions,
    pub(super) taken: &'t BTreeMap<u16, String>,
    pub(super) listeners: BTreeMap<u16, Building>,
    /// Backend → its state and the Ingress that set its stickiness.
    pub(super) backends: BTreeMap<BackendId, (BackendState, Rc<str>)>,
    pub(super) problems: BTreeSet<Problem>,
}

/// The Ingress being added.
pub(super) struct Current<'g> {
    pub(super) ing: &'g Ingress,
    /// `Ingress <ns>/<name>`, as owners are named in conflict messages.
    pub(super) me: Rc<str>,
    pub(super) settings: Settings,
    pub(super) tls: Vec<TlsEntry>,
    /// The ports it got, with their protocols.
    pub(super) ports: Vec<(u16, ListenerProtocol)>,
    /// HTTP is redirected only to an HTTPS port this Ingress really got.
    pub(super) https_served: bool,
}

impl Translation<'_, '_> {
    pub(super) fn add_ingress(&mut self, ing: &Ingress) {
        let me: Rc<str> = object(ing).to_string().into();
        let settings = Settings::read(ing, &mut self.problems);
        let tls = tls_entries(ing, self.idx, &mut self.problems);
        let ports = self.claim_ports(ing, &me, &settings, &tls);
        if ports.is_empty() {
            self.problems.insert(problem(
                ing,
                reason::NOTHING_TO_SERVE,
                "plain HTTP is off (loadbalancer/http: false) and no TLS certificate can be served; nothing is served".into(),
            ));
            return;
        }
        let cur = Current {
            ing,
            me,
            https_served: ports.iter().any(|&(_, p)| p == ListenerProtocol::Https),
            settings,
            tls,
            ports,
        };
        self.add_certificates(&cur);
        self.add_rules(&cur);
        self.add_default_backend(&cur);
    }

    /// The ports `ing` serves on: HTTP unless turned off, HTTPS when it has a
    /// certificate; a port another tenant holds, or that an older Ingress uses with the
    /// other protocol, is refused with a problem.
    pub(super) fn claim_ports(
        &mut self,
        ing: &Ingress,
        me: &Rc<str>,
        settings: &Settings,
        tls: &[TlsEntry],
    ) -> Vec<(u16, ListenerProtocol)> {
        let mut ports: Vec<(u16, ListenerProtocol)> = Vec::new();
        if settings.http {
            ports.push((settings.http_port, ListenerProtocol::Http));
        }
        if !tls.is_empty() {
            ports.push((settings.https_port, ListenerProtocol::Https));
        }
        ports.retain(|&(port, protocol)| {
            if let Some(reserved) = self.idx.reserved_ports.filter(|r| r.contains(port)) {
                self.problems.insert(problem(
                    ing,
                    reason::PORT_RESERVED,
                    format!(
                        "port {port} is kept by the LB nodes for themselves (global config reservedPorts: {reserved}); not served on it"
                    ),
                ));
                return false;
            }
            if let Some(holder) = self.taken.get(&port) {
                self.problems.insert(problem(
                    ing,
                    reason::PORT_CONFLICT,
                    format!(
                        "port {port} of IP {} is used by {holder}; not served on it",
                        self.opts.ip
                    ),
                ));
                return false;
            }
            let l = self.listeners.entry(port).or_insert_with(|| Building {
                protocol,
                owner: me.clone(),
                hosts: BTreeMap::new(),
                claims: HashMap::new(),
                default_action: None,
                default_namespace: None,
                certs: BTreeMap::new(),
                hostless_cert: None,
                acme_covers: HashMap::new(),
            });
            if l.protocol != protocol {
                self.problems.insert(problem(
                    ing,
                    reason::PORT_CONFLICT,
                    format!(
                        "port {port} is already {} for {}; not served on it as {}",
                        proto_name(l.protocol),
                        l.owner,
                        proto_name(protocol)
                    ),
                ));
                return false;
            }
            true
        });
        ports
    }

    /// The certificates of `cur`'s TLS hosts on its HTTPS ports, for SNI.
    pub(super) fn add_certificates(&mut self, cur: &Current<'_>) {
        for &(port, protocol) in &cur.ports {
            if protocol != ListenerProtocol::Https {
                continue;
            }
            let l = self.listeners.get_mut(&port).expect("claimed");
            for t in &cur.tls {
                if t.hostless && l.hostless_cert.is_none() {
                    l.hostless_cert = Some(t.file.clone());
                }
                for h in &t.hosts {
                    match l.certs.get(h) {
                        Some((f, owner)) if f != &t.file => {
                            self.problems.insert(problem(
                                cur.ing,
                                reason::CERTIFICATE_CONFLICT,
                                format!("host {h} already has a certificate on port {port} from {owner}; this Ingress's is not used for it"),
                            ));
                        }
                        Some(_) => {}
                        None => {
                            l.certs.insert(h.clone(), (t.file.clone(), cur.me.clone()));
                        }
                    }
                }
            }
        }
    }

    /// The rules' paths, each on every port of `cur`.
    pub(super) fn add_rules(&mut self, cur: &Current<'_>) {
        let spec = cur.ing.spec.as_ref();
        for rule in spec.and_then(|s| s.rules.as_ref()).into_iter().flatten() {
            let host = match rule.host.as_deref().unwrap_or("") {
                "" => None,
                h => match h.parse::<Hostname>() {
                    Ok(h) => Some(h),
                    Err(e) => {
                        self.problems.insert(problem(
                            cur.ing,
                            reason::INVALID_HOST,
                            format!("rule skipped: {e}"),
                        ));
                        continue;
                    }
                },
            };
            let Some(http) = &rule.http else { continue };
            for p in &http.paths {
                let Some(m) = self.path_match(cur.ing, p) else {
                    continue;
                };
                let action = self.resolve(cur, &p.backend);
                self.add_route(cur, host.clone(), RouteMatch::on_path(m), action);
            }
        }
    }

    /// A path of a rule as a match, or a problem.
    pub(super) fn path_match(
        &mut self,
        ing: &Ingress,
        p: &k8s_openapi::api::networking::v1::HTTPIngressPath,
    ) -> Option<PathMatch> {
        let raw = p.path.as_deref().unwrap_or("");
        let raw = if raw.is_empty() && p.path_type == "ImplementationSpecific" {
            "/"
        } else {
            raw
        };
        let path = match raw.parse::<HttpPath>() {
            Ok(p) => p,
            Err(e) => {
                self.problems.insert(problem(
                    ing,
                    reason::INVALID_PATH,
                    format!("path skipped: {e}"),
                ));
                return None;
            }
        };
        match p.path_type.as_str() {
            "Exact" => Some(PathMatch::Exact(path)),
            "Prefix" | "ImplementationSpecific" => Some(PathMatch::prefix(&path)),
            other => {
                self.problems.insert(problem(
                    ing,
                    reason::INVALID_PATH,
                    format!("path skipped: pathType {:?} is not Exact, Prefix or ImplementationSpecific", short(other)),
                ));
                None
            }
        }
    }

    /// One (host, match) of `cur` on each of its ports, unless an older Ingress claimed
    /// it there; on HTTP, a redirect to HTTPS when the host has a certificate.
    pub(super) fn add_route(
        &mut self,
        cur: &Current<'_>,
        host: Option<Hostname>,
        m: RouteMatch,
        action: RouteAction,
    ) {
        for &(port, protocol) in &cur.ports {
            let l = self.listeners.get_mut(&port).expect("claimed");
            match l.claims.entry((host.clone(), m.clone())) {
                std::collections::hash_map::Entry::Occupied(o) if o.get() != &cur.me => {
                    let owner = o.get();
                    self.problems.insert(problem(
                        cur.ing,
                        reason::PATH_CONFLICT,
                        format!(
                            "host {} path {} on port {port} is already served for {owner} (older); not served for this Ingress",
                            host.as_ref().map_or("*", Hostname::as_str),
                            describe_match(&m)
                        ),
                    ));
                    continue;
                }
                // The same path twice in one Ingress: the first.
                std::collections::hash_map::Entry::Occupied(_) => continue,
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(cur.me.clone());
                }
            }
            let s = &cur.settings;
            let redirect = protocol == ListenerProtocol::Http
                && s.ssl_redirect
                && cur.https_served
                && cur.tls.iter().any(|t| t.covers(host.as_ref()))
                && !is_acme(&m);
            if redirect && m.path.matches(ACME_CHALLENGE_PREFIX) {
                l.acme_covers
                    .insert((host.clone(), m.clone()), action.clone());
            }
            let action = if redirect {
                RouteAction::Redirect(Redirect {
                    scheme: Some(Scheme::Https),
                    host: None,
                    port: (s.https_port != DEFAULT_HTTPS_PORT).then_some(s.https_port),
                    path: None,
                    replace_prefix: None,
                    status: RedirectStatus::PermanentRedirect308,
                })
            } else {
                action.clone()
            };
            l.hosts.entry(host.clone()).or_default().push(RouteRule {
                matches: m.clone(),
                action,
                filters: Default::default(),
                owner: Some(object(cur.ing)),
            });
        }
    }

    /// Forward to the backend an Ingress names (recorded in the backend table, with
    /// `cur`'s stickiness unless an older Ingress set it), or 503 with a problem.
    pub(super) fn resolve(&mut self, cur: &Current<'_>, b: &IngressBackend) -> RouteAction {
        let ns = ns_of(cur.ing);
        match self.idx.backend(ns, b) {
            Ok((port, protocol)) => {
                let id = port.id.clone();
                match self.backends.get(&id) {
                    Some((st, owner))
                        if st.stickiness != cur.settings.sticky && owner != &cur.me =>
                    {
                        self.problems.insert(problem(
                            cur.ing,
                            reason::STICKINESS_CONFLICT,
                            format!("backend {id} already has the stickiness of {owner} (older); this Ingress's is not applied"),
                        ));
                    }
                    Some(_) => {}
                    None => {
                        self.backends.insert(
                            id.clone(),
                            (
                                port.backend_state(protocol, cur.settings.sticky.clone()),
                                cur.me.clone(),
                            ),
                        );
                    }
                }
                RouteAction::forward(id)
            }
            Err((why, message)) => {
                self.problems.insert(problem(cur.ing, why, message));
                RouteAction::Respond {
                    status: FixedStatus::ServiceUnavailable503,
                }
            }
        }
    }

    /// `spec.defaultBackend`: the default action of each of `cur`'s ports that has none.
    pub(super) fn add_default_backend(&mut self, cur: &Current<'_>) {
        let Some(db) = cur
            .ing
            .spec
            .as_ref()
            .and_then(|s| s.default_backend.as_ref())
        else {
            return;
        };
        let action = self.resolve(cur, db);
        for &(port, _) in &cur.ports {
            let l = self.listeners.get_mut(&port).expect("claimed");
            match &l.default_action {
                Some((_, owner)) if owner != &cur.me => {
                    self.problems.insert(problem(
                        cur.ing,
                        reason::DEFAULT_BACKEND_CONFLICT,
                        format!("port {port} already has the defaultBackend of {owner} (older); this one is not used"),
                    ));
                }
                Some(_) => {}
                None => {
                    l.default_action = Some((action.clone(), cur.me.clone()));
                    l.default_namespace = cur.ing.metadata.namespace.clone();
                }
            }
        }
    }

    pub(super) fn finish(self) -> VipRoutes {
        let opts = self.opts;
        let mut routes = HttpRoutes {
            listeners: self
                .listeners
                .into_iter()
                .map(|(port, b)| b.into_listener(opts, port, self.idx.host_owners))
                .collect(),
            backends: self
                .backends
                .into_iter()
                .map(|(k, (v, _))| (k, v))
                .collect(),
            ..HttpRoutes::default()
        };
        routes.normalize();
        VipRoutes {
            routes,
            problems: self.problems.into_iter().collect(),
        }
    }
}

impl Building {
    pub(super) fn into_listener(
        self,
        opts: &VipOptions,
        port: u16,
        owners: Option<&crate::tenancy::HostOwners>,
    ) -> Listener {
        // A default backend never answers for a host that another namespace owns: its
        // unmatched requests get 404 (a rule after all of the host's own).
        let foreign = |host: &Option<Hostname>| -> bool {
            match (owners, host, self.default_namespace.as_deref()) {
                (Some(o), Some(h), Some(ns)) => o.owner_of(h.as_str(), ns).is_some(),
                _ => false,
            }
        };
        let not_found = RouteRule {
            matches: RouteMatch::on_path(PathMatch::prefix(&HttpPath::root())),
            action: RouteAction::Respond {
                status: FixedStatus::NotFound404,
            },
            filters: Default::default(),
            // There in place of the default backend's answer.
            owner: self
                .default_action
                .as_ref()
                .and_then(|(_, owner)| owner.parse().ok()),
        };
        let tls = (self.protocol == ListenerProtocol::Https).then(|| {
            // A file two Ingresses name (the same Secret) is owned by the older.
            let mut by_file: BTreeMap<CertFile, (Vec<Hostname>, Rc<str>)> = BTreeMap::new();
            for (h, (f, owner)) in self.certs {
                by_file
                    .entry(f)
                    .or_insert_with(|| (vec![], owner))
                    .0
                    .push(h);
            }
            ListenerTls {
                certificates: by_file
                    .into_iter()
                    .map(|(file, (hosts, owner))| Certificate {
                        file,
                        hosts,
                        owner: owner.parse().ok(),
                    })
                    .collect(),
                default_certificate: if opts.pool_certificate {
                    Some(CertFile::Pool {
                        pool: opts.pool.clone(),
                    })
                } else {
                    self.hostless_cert
                },
                client_ca: None,
                client_validation: Default::default(),
                zones: None,
            }
        });
        let mut l = Listener {
            ip: opts.ip,
            port,
            protocol: self.protocol,
            tls,
            virtual_hosts: self
                .hosts
                .into_iter()
                .map(|(host, mut rules)| {
                    let catch_all = rules.iter().any(|r| {
                        r.matches == RouteMatch::on_path(PathMatch::prefix(&HttpPath::root()))
                    });
                    if !catch_all && foreign(&host) {
                        rules.push(not_found.clone());
                    }
                    let mut v = VirtualHost::new(host, rules);
                    v.sort_rules();
                    acme_passthrough(&mut v, &self.acme_covers);
                    v
                })
                .collect(),
            default_owner: self
                .default_action
                .as_ref()
                .and_then(|(_, owner)| owner.parse().ok()),
            default_action: self.default_action.map(|(a, _)| a),
        };
        l.sort_virtual_hosts();
        l
    }
}

/// A rule for ACME HTTP-01 challenges (a path in `/.well-known/acme-challenge/`, or that
/// directory itself: a stored prefix has no trailing `/`): never redirected to HTTPS.
pub(super) fn is_acme(m: &RouteMatch) -> bool {
    let dir = ACME_CHALLENGE_PREFIX.trim_end_matches('/');
    match &m.path {
        PathMatch::Exact(p) => p.as_str().starts_with(ACME_CHALLENGE_PREFIX),
        PathMatch::Prefix(p) => p.as_str() == dir || p.as_str().starts_with(ACME_CHALLENGE_PREFIX),
    }
}

/// ACME HTTP-01 challenges are never redirected, whatever rule covers them: when the
/// rule that takes `/.well-known/acme-challenge/<token>` on `v` (sorted) is a redirect to
/// HTTPS made from a covering rule (`/`, `/.well-known`), a rule for the challenge
/// directory with the action the covering rule had goes before it. (A rule in the
/// directory itself is never redirected: [`is_acme`].)
pub(super) fn acme_passthrough(
    v: &mut VirtualHost,
    covers: &HashMap<(Option<Hostname>, RouteMatch), RouteAction>,
) {
    let Some(taker) = v
        .rules
        .iter()
        .find(|r| r.matches.matches(ACME_CHALLENGE_PREFIX))
    else {
        return;
    };
    let Some(action) = covers.get(&(v.host.clone(), taker.matches.clone())) else {
        return;
    };
    let dir: HttpPath = ACME_CHALLENGE_PREFIX
        .trim_end_matches('/')
        .parse()
        .expect("a valid path");
    let owner = taker.owner.clone();
    v.rules.push(RouteRule {
        matches: RouteMatch::on_path(PathMatch::prefix(&dir)),
        action: action.clone(),
        filters: Default::default(),
        owner,
    });
    v.sort_rules();
}

pub(super) fn describe_match(m: &RouteMatch) -> String {
    match &m.path {
        PathMatch::Exact(p) => format!("{p} (Exact)"),
        PathMatch::Prefix(p) => format!("{p} (Prefix)"),
    }
}

pub(super) fn proto_name(p: ListenerProtocol) -> &'static str {
    match p {
        ListenerProtocol::Http => "HTTP",
        ListenerProtocol::Https => "HTTPS",
    }
}
