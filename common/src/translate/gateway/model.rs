//! The route model the listeners make: every address of each Gateway × each of its
//! usable listeners, the rules placed on them in precedence order, and only the
//! backends something still routes to.

use super::*;

impl Translation<'_, '_> {
    /// The TCP, UDP and TLS listeners on every address of their Gateway, with the stream
    /// routes placed on them (the first route of a server name wins), and the
    /// certificates of the TLS listeners that terminate (merged by SNI as HTTPS
    /// listeners' are: [`merge_tls`]). On a port of both TLS modes (where the provider
    /// serves them), the passthrough listeners' routes are marked
    /// [`StreamRoute::passthrough`].
    pub(super) fn stream_listeners(&self, placed: &[StreamPlaced]) -> Vec<StreamListener> {
        let mut streams: BTreeMap<(IpAddr, u16, bool), StreamListener> = BTreeMap::new();
        let mut default_from_any_host: BTreeMap<(IpAddr, u16), bool> = BTreeMap::new();
        // Whether the first listener on each TLS address and port terminates.
        let mut modes: BTreeMap<(IpAddr, u16, bool), bool> = BTreeMap::new();
        let mut placed_on: BTreeMap<usize, Vec<&StreamPlaced>> = BTreeMap::new();
        for p in placed {
            placed_on.entry(p.0).or_default().push(p);
        }
        for (li, l) in self.lsts.iter().enumerate() {
            let Some(protocol) = l.stream else { continue };
            let Ok(port) = u16::try_from(l.spec.port) else {
                continue;
            };
            for ip in self.addresses_of(&l.gateway) {
                let entry = streams
                    .entry((ip, port, protocol.is_udp()))
                    .or_insert_with(|| StreamListener {
                        ip,
                        port,
                        protocol,
                        routes: Vec::new(),
                        terminate: None,
                    });
                // Another Gateway's listener on a shared address holds it (another
                // protocol, or TLS of the other mode where the provider does not serve
                // both on one port).
                let terminates = *modes
                    .entry((ip, port, protocol.is_udp()))
                    .or_insert(l.tls.is_some());
                if entry.protocol != protocol
                    || (!self.input.serves_tls_mixed && terminates != l.tls.is_some())
                {
                    continue;
                }
                if let Some(t) = &l.tls {
                    let any = default_from_any_host.entry((ip, port)).or_default();
                    merge_tls(&mut entry.terminate, any, t, l.hostname.is_none());
                }
                let mine = placed_on.get(&li).into_iter().flatten();
                for (_, host, (weighted, invalid), owner) in mine {
                    if !entry.routes.iter().any(|r| &r.host == host) {
                        entry.routes.push(StreamRoute {
                            host: host.clone(),
                            backends: weighted.clone(),
                            invalid: *invalid,
                            owner: Some(owner.clone()),
                            // Marked on every TLS route of a passthrough listener;
                            // cleared below where the port does not terminate.
                            passthrough: protocol == StreamProtocol::Tls && l.tls.is_none(),
                        });
                    }
                }
            }
        }
        // Only a port that terminates tells the routes it passes through apart (a
        // port of both modes: TLSRouteModeMixed).
        for s in streams.values_mut().filter(|s| s.terminate.is_none()) {
            for r in &mut s.routes {
                r.passthrough = false;
            }
        }
        streams.into_values().collect()
    }

    fn addresses_of(&self, gateway: &ObjectKey) -> Vec<IpAddr> {
        self.input
            .addresses
            .get(gateway)
            .cloned()
            .unwrap_or_default()
    }

    /// The whole model: the HTTP and HTTPS listeners with `placed` (sorted here), the
    /// stream listeners, and the backends they use.
    pub(super) fn model(
        &mut self,
        mut placed: Vec<Placed>,
        streams: Vec<StreamListener>,
    ) -> HttpRoutes {
        placed.sort_by(|a, b| a.key.cmp(&b.key));
        let mut placed_on: BTreeMap<usize, Vec<&Placed>> = BTreeMap::new();
        for p in &placed {
            placed_on.entry(p.at.0).or_default().push(p);
        }
        let mut listeners: BTreeMap<(IpAddr, u16), Listener> = BTreeMap::new();
        let mut default_from_any_host: BTreeMap<(IpAddr, u16), bool> = BTreeMap::new();
        let mut vhosts: BTreeMap<(IpAddr, u16), BTreeMap<Option<Hostname>, usize>> =
            BTreeMap::new();
        // The hostnames of each Gateway's served HTTP(S) listeners on each port.
        let mut hostnames: BTreeMap<(&ObjectKey, i32), Vec<&Hostname>> = BTreeMap::new();
        for l in self.lsts.iter().filter(|l| l.protocol.is_some()) {
            if let Some(h) = &l.hostname {
                hostnames
                    .entry((&l.gateway, l.spec.port))
                    .or_default()
                    .push(h);
            }
        }
        for (li, l) in self.lsts.iter().enumerate() {
            let Some(protocol) = l.protocol else { continue };
            let Ok(port) = u16::try_from(l.spec.port) else {
                continue;
            };
            for ip in self.addresses_of(&l.gateway) {
                let entry = listeners.entry((ip, port)).or_insert_with(|| Listener {
                    ip,
                    port,
                    protocol,
                    tls: None,
                    virtual_hosts: Vec::new(),
                    default_action: None,
                    default_owner: None,
                });
                if let Some(t) = &l.tls {
                    let any = default_from_any_host.entry((ip, port)).or_default();
                    merge_tls(&mut entry.tls, any, t, l.hostname.is_none());
                }
                let on_port = hostnames.get(&(&l.gateway, l.spec.port));
                let mine = placed_on.get(&li).map_or(&[][..], Vec::as_slice);
                let index = vhosts.entry((ip, port)).or_default();
                self.fill_listener(
                    (entry, index),
                    (li, on_port.map_or(&[][..], Vec::as_slice)),
                    mine,
                );
            }
        }
        self.sni_zones(&mut listeners);
        let mut routes = HttpRoutes {
            listeners: listeners.into_values().collect(),
            backends: std::mem::take(&mut self.backends),
            streams,
            udp_backends: std::mem::take(&mut self.udp_backends),
            ca_bundles: BTreeMap::new(),
        };
        for l in &mut routes.listeners {
            l.sort_virtual_hosts();
        }
        for s in &mut routes.streams {
            s.sort_routes();
        }
        keep_used_backends(&mut routes);
        // The client CA bundles of the listeners served.
        for l in &self.lsts {
            if let (Some(c), Some(_)) = (&l.client_ca, l.protocol) {
                routes.ca_bundles.insert(c.id.clone(), c.pem.clone());
            }
        }
        routes
    }

    /// The zones of the HTTPS listeners sharing each address and port (misdirected
    /// requests: see SniZones): collected, then sorted once.
    fn sni_zones(&self, listeners: &mut BTreeMap<(IpAddr, u16), Listener>) {
        for l in self.lsts.iter() {
            if l.protocol != Some(ListenerProtocol::Https) {
                continue;
            }
            let Ok(port) = u16::try_from(l.spec.port) else {
                continue;
            };
            for ip in self.addresses_of(&l.gateway) {
                let Some(tls) = listeners.get_mut(&(ip, port)).and_then(|e| e.tls.as_mut()) else {
                    continue;
                };
                let zones = tls.zones.get_or_insert_with(Default::default);
                match &l.hostname {
                    Some(h) => zones.hostnames.push(h.clone()),
                    None => zones.any = true,
                }
            }
        }
        for zones in listeners
            .values_mut()
            .filter_map(|e| e.tls.as_mut()?.zones.as_mut())
        {
            zones.hostnames.sort();
            zones.hostnames.dedup();
        }
    }

    /// The rules `placed` on listener `li` (in precedence order) into `entry`'s virtual
    /// hosts (`index`: where each of them is; `on_port`: the hostnames of its Gateway's
    /// served HTTP(S) listeners on its port). Listener isolation: a request goes to the
    /// routes of the most specific listener whose hostname it matches, never to a less
    /// specific one's.
    fn fill_listener(
        &self,
        (entry, index): (&mut Listener, &mut BTreeMap<Option<Hostname>, usize>),
        (li, on_port): (usize, &[&Hostname]),
        placed: &[&Placed],
    ) {
        let l = &self.lsts[li];
        // Nothing is narrower than a name (only a wildcard, or no hostname, has more
        // specific listeners under it); nothing to look for without rules.
        let narrower: Vec<&Hostname> =
            if placed.is_empty() || l.hostname.as_ref().is_some_and(|h| !h.is_wildcard()) {
                Vec::new()
            } else {
                on_port
                    .iter()
                    .copied()
                    .filter(|h| narrower_than(h, l.hostname.as_ref()))
                    .collect()
            };
        for p in placed {
            let host = p.at.1.clone();
            if narrower.iter().any(|n| covers(n, host.as_ref())) {
                continue; // a more specific listener takes these requests
            }
            vhost((&mut *entry, &mut *index), host)
                .rules
                .push(p.rule.clone());
        }
        // Its hostname is its own even without a route (404), so that a less specific
        // listener's wildcard routes do not take its requests.
        if let Some(h) = &l.hostname {
            vhost((entry, index), Some(h.clone()));
        }
    }
}

/// Only the backends a rule forwards (or mirrors) to or a stream route uses stay in the
/// model.
fn keep_used_backends(routes: &mut HttpRoutes) {
    let streamed = |udp: bool, id: &BackendId| {
        routes.streams.iter().any(|s| {
            s.protocol.is_udp() == udp
                && s.routes
                    .iter()
                    .any(|r| r.backends.iter().any(|b| &b.id == id))
        })
    };
    let forwarded = |id: &BackendId| {
        routes.listeners.iter().any(|l| {
            l.virtual_hosts.iter().any(|v| {
                v.rules.iter().any(|r| {
                    matches!(&r.action, RouteAction::Forward { backends, .. } if backends.iter().any(|b| &b.id == id))
                        || r.filters.mirrors.contains(id)
                        || r.filters.partial_mirrors.iter().any(|m| &m.backend == id)
                })
            })
        })
    };
    let used_by_http: BTreeSet<BackendId> = routes
        .backends
        .keys()
        .filter(|id| streamed(false, id) || forwarded(id))
        .cloned()
        .collect();
    let used_by_udp: BTreeSet<BackendId> = routes
        .udp_backends
        .keys()
        .filter(|id| streamed(true, id))
        .cloned()
        .collect();
    routes.backends.retain(|id, _| used_by_http.contains(id));
    routes.udp_backends.retain(|id, _| used_by_udp.contains(id));
}
