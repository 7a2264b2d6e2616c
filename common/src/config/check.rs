//! The checker of the global config: every key known (with the closest known one
//! suggested for a typo), every value validated, duplicate keys refused, and every
//! error collected with its path.

use super::*;

mod bgp;

pub(super) const TOP_KEYS: &[&str] = &[
    "pools",
    "keepalived",
    "haproxy",
    "nginx",
    "loadBalancerClass",
    "claimUnclassed",
    "reservedPorts",
    "tenancy",
    "limits",
    "bgp",
];
/// The most filters the Gateway API lets one HTTPRoute rule have (so the most
/// RequestMirror filters).
const MAX_FILTERS_PER_RULE: usize = 16;

pub(super) const LIMITS_KEYS: &[&str] = &[
    "conditionalRulesPerHost",
    "portsPerService",
    "retryBackendsPerNamespace",
    "listenerSetListenersPerGateway",
    "mirrorsPerRule",
];
pub(super) const TENANCY_KEYS: &[&str] = &["hostOwnership", "namespaceGroups", "addressSharing"];
pub(super) const POOL_KEYS: &[&str] = &[
    "network",
    "range",
    "interface",
    "maxScale",
    "addressesPerNamespace",
    "mode",
];
pub(super) const KEEPALIVED_KEYS: &[&str] = &[
    "email",
    "emailFrom",
    "emailServer",
    "emailServerTimeout",
    "advertInt",
    "unicast",
    "preempt",
    "garpRepeat",
    "garpMasterDelay",
];
pub(super) const HAPROXY_KEYS: &[&str] = &[
    "global",
    "defaults",
    "tcpfront",
    "httpfront",
    "tcpback",
    "httpback",
];
pub(super) const NGINX_KEYS: &[&str] = &["global", "http", "proxy", "upstream", "stream"];

#[derive(Default)]
pub(super) struct Checker {
    pub(super) errors: Vec<String>,
    pub(super) warnings: Vec<String>,
}

impl Checker {
    pub(super) fn err(&mut self, path: &str, msg: impl fmt::Display) {
        self.errors.push(format!("{path}: {msg}"));
    }

    fn object<'a>(&mut self, path: &str, v: &'a Value) -> Option<&'a Map<String, Value>> {
        match v {
            Value::Object(m) => Some(m),
            _ => {
                self.err(path, format!("expected an object, found {}", kind(v)));
                None
            }
        }
    }

    fn unknown_keys(&mut self, path: &str, m: &Map<String, Value>, known: &[&str]) {
        for k in m.keys() {
            if !known.contains(&k.as_str()) {
                let hint = closest(k, known)
                    .map(|s| format!(" (did you mean {s:?}?)"))
                    .unwrap_or_else(|| format!(" (known keys: {})", known.join(", ")));
                self.err(&join(path, k), format!("unknown key{hint}"));
            }
        }
    }

    pub(super) fn global(&mut self, v: &Value) -> GlobalConfig {
        let mut cfg = GlobalConfig {
            pools: BTreeMap::new(),
            keepalived: default_keepalived(),
            haproxy: default_haproxy(),
            nginx: default_nginx(),
            class: DEFAULT_CLASS.to_string(),
            claim_unclassed: true,
            reserved_ports: ReservedPorts::default_set(),
            tenancy: Tenancy::default(),
            limits: Limits::default(),
            bgp: None,
            warnings: vec![],
        };
        let Some(top) = self.object("config", v) else {
            return cfg;
        };
        self.unknown_keys("", top, TOP_KEYS);
        match top.get("pools") {
            Some(p) => cfg.pools = self.pools(p),
            None => self.err("pools", "is required (an object of pool name -> pool)"),
        }
        if let Some(k) = top.get("keepalived") {
            cfg.keepalived = self.keepalived(k);
        }
        if let Some(h) = top.get("haproxy") {
            cfg.haproxy = self.haproxy(h);
        }
        if let Some(n) = top.get("nginx") {
            cfg.nginx = self.nginx(n);
        }
        if let Some(c) = top.get("loadBalancerClass") {
            match c.as_str() {
                Some(s) if valid_class(s) => cfg.class = s.to_string(),
                _ => self.err(
                    "loadBalancerClass",
                    "expected a label-style name such as \"k8slb.io/loadbalancer\"",
                ),
            }
        }
        if let Some(b) = top.get("claimUnclassed") {
            if let Some(b) = self.boolean("claimUnclassed", b) {
                cfg.claim_unclassed = b;
            }
        }
        if let Some(t) = top.get("tenancy") {
            cfg.tenancy = self.tenancy(t);
        }
        if let Some(r) = top.get("reservedPorts") {
            if let Some(r) = self.reserved_ports(r) {
                cfg.reserved_ports = r;
            }
        }
        if let Some(l) = top.get("limits") {
            cfg.limits = self.limits(l);
        }
        if let Some(b) = top.get("bgp") {
            cfg.bgp = self.bgp(b);
        }
        self.bgp_pools_have_peers(&cfg);
        cfg
    }

    /// `tenancy`: `hostOwnership` (`"Strict"`, the default, or `"Shared"`) and
    /// `namespaceGroups` (an array of arrays of namespace names).
    fn tenancy(&mut self, v: &Value) -> Tenancy {
        let mut t = Tenancy::default();
        let Some(m) = self.object("tenancy", v) else {
            return t;
        };
        self.unknown_keys("tenancy", m, TENANCY_KEYS);
        match m.get("hostOwnership") {
            None => {}
            Some(Value::String(s)) if s.eq_ignore_ascii_case("strict") => {}
            Some(Value::String(s)) if s.eq_ignore_ascii_case("shared") => t.shared_hosts = true,
            Some(_) => self.err(
                "tenancy.hostOwnership",
                "expected \"Strict\" (the namespace of the oldest claim owns a host) or \"Shared\"",
            ),
        }
        match m
            .get("addressSharing")
            .map(|v| v.as_str().map(str::to_ascii_lowercase))
        {
            None => {}
            Some(Some(v)) if v == "samenamespace" => {}
            Some(Some(v)) if v == "anynamespace" => {
                t.address_sharing = AddressSharing::AnyNamespace
            }
            Some(Some(v)) if v == "open" => t.address_sharing = AddressSharing::Open,
            Some(_) => self.err(
                "tenancy.addressSharing",
                "expected \"SameNamespace\" (the default), \"AnyNamespace\" or \"Open\"",
            ),
        }
        if let Some(g) = m.get("namespaceGroups") {
            let groups = g.as_array().map(|groups| {
                groups
                    .iter()
                    .map(|g| {
                        g.as_array().and_then(|names| {
                            names
                                .iter()
                                .map(|n| {
                                    n.as_str()
                                        .filter(|n| n.parse::<crate::names::ObjectName>().is_ok())
                                        .map(str::to_string)
                                })
                                .collect::<Option<std::collections::BTreeSet<String>>>()
                        })
                    })
                    .collect::<Option<Vec<_>>>()
            });
            match groups.flatten() {
                Some(groups) => t.namespace_groups = groups,
                None => self.err(
                    "tenancy.namespaceGroups",
                    "expected an array of arrays of namespace names",
                ),
            }
        }
        t
    }

    /// `reservedPorts`: an array of ports (`22`, `"22"`) and inclusive ranges
    /// (`"2379-2380"`); it replaces the default list (`[]` reserves none).
    fn reserved_ports(&mut self, v: &Value) -> Option<ReservedPorts> {
        let Value::Array(items) = v else {
            self.err(
                "reservedPorts",
                format!(
                    "expected an array of ports and \"from-to\" ranges, found {}",
                    kind(v)
                ),
            );
            return None;
        };
        let port = |s: &str| s.trim().parse::<u16>().ok().filter(|p| *p != 0);
        let mut ranges = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let range = match item {
                Value::Number(n) => n
                    .as_u64()
                    .and_then(|n| u16::try_from(n).ok())
                    .filter(|p| *p != 0)
                    .map(|p| (p, p)),
                Value::String(s) => match s.split_once('-') {
                    Some((a, b)) => port(a).zip(port(b)).filter(|(a, b)| a <= b),
                    None => port(s).map(|p| (p, p)),
                },
                _ => None,
            };
            match range {
                Some(r) => ranges.push(r),
                None => {
                    ok = false;
                    self.err(
                        &format!("reservedPorts[{i}]"),
                        format!(
                            "expected a port (1-65535) or a range \"from-to\", found {}",
                            item.to_string().chars().take(40).collect::<String>()
                        ),
                    );
                }
            }
        }
        ok.then(|| ReservedPorts::from_ranges(ranges))
    }

    fn limits(&mut self, v: &Value) -> Limits {
        let mut out = Limits::default();
        let Some(m) = self.object("limits", v) else {
            return out;
        };
        self.unknown_keys("limits", m, LIMITS_KEYS);
        let mut whole_from = |key: &str, min: usize, max: usize, into: &mut usize| {
            let Some(n) = m.get(key) else { return };
            let path = format!("limits.{key}");
            match self.number(&path, n) {
                Some(n) if n.fract() == 0.0 && (min as f64..=max as f64).contains(&n) => {
                    *into = n as usize;
                }
                Some(_) => self.err(
                    &path,
                    format!("expected a whole number from {min} to {max}"),
                ),
                None => {}
            }
        };
        // 0 forbids mirroring; 16 is the most filters the API lets one rule have.
        whole_from(
            "mirrorsPerRule",
            0,
            MAX_FILTERS_PER_RULE,
            &mut out.mirrors_per_rule,
        );
        let mut whole = |key: &str, max: usize, into: &mut usize| whole_from(key, 1, max, into);
        whole(
            "conditionalRulesPerHost",
            100_000,
            &mut out.conditional_rules_per_host,
        );
        whole("portsPerService", 131_070, &mut out.ports_per_service);
        whole(
            "retryBackendsPerNamespace",
            100_000,
            &mut out.retry_backends_per_namespace,
        );
        whole(
            "listenerSetListenersPerGateway",
            100_000,
            &mut out.listener_set_listeners_per_gateway,
        );
        out
    }

    fn pools(&mut self, v: &Value) -> BTreeMap<PoolName, Pool> {
        let mut out = BTreeMap::new();
        let Some(m) = self.object("pools", v) else {
            return out;
        };
        for (name, pv) in m {
            if let Some(pool) = self.pool(name, pv) {
                out.insert(pool.name.clone(), pool);
            }
        }
        self.check_overlaps(&out);
        out
    }

    /// One pool; None (and errors) if it is not valid.
    fn pool(&mut self, name: &str, pv: &Value) -> Option<Pool> {
        let path = join("pools", name);
        let pool_name: Option<PoolName> = match name.parse() {
            Ok(n) => Some(n),
            Err(e) => {
                self.err(&path, e);
                None
            }
        };
        let pm = self.object(&path, pv)?;
        self.unknown_keys(&path, pm, POOL_KEYS);
        let network = self.pool_expr(&path, pm, "network");
        let range = self.pool_expr(&path, pm, "range");
        let interface = self.pool_interface(&path, pm);
        let mut max_scale = crate::scale::MAX;
        if let Some(v) = pm.get("maxScale") {
            match self.number(&join(&path, "maxScale"), v) {
                Some(n)
                    if n.fract() == 0.0 && (1.0..=f64::from(crate::scale::MAX)).contains(&n) =>
                {
                    max_scale = n as u8
                }
                Some(_) => self.err(
                    &join(&path, "maxScale"),
                    format!("expected a whole number from 1 to {}", crate::scale::MAX),
                ),
                None => {}
            }
        }
        let mut per_namespace = None;
        if let Some(v) = pm.get("addressesPerNamespace") {
            match self.number(&join(&path, "addressesPerNamespace"), v) {
                Some(n) if n.fract() == 0.0 && n <= f64::from(u32::MAX) => {
                    per_namespace = Some(n as u32)
                }
                Some(_) => self.err(
                    &join(&path, "addressesPerNamespace"),
                    "expected a whole number (0 or more)",
                ),
                None => {}
            }
        }
        let mode = self.pool_mode(&path, pm);
        let (Some(pool_name), Some(network), Some(range)) = (pool_name, network, range) else {
            return None;
        };
        if network.range().family_is_v4() != range.range().family_is_v4() {
            self.err(
                &join(&path, "range"),
                format!(
                    "{} and network {} are of different address families",
                    range, network
                ),
            );
            return None;
        }
        if !network.range().contains_range(&range.range()) {
            self.err(
                &join(&path, "range"),
                format!("{range} is not inside the pool's network {network}"),
            );
            return None;
        }
        Some(Pool {
            name: pool_name,
            network,
            range,
            interface,
            max_scale,
            per_namespace,
            mode,
        })
    }

    /// `pools.<name>.interface`: optional, blank is absent.
    fn pool_interface(&mut self, path: &str, pm: &Map<String, Value>) -> Option<IfName> {
        match pm.get("interface") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.trim().is_empty() => None,
            Some(Value::String(s)) => match s.trim().parse::<IfName>() {
                Ok(i) => Some(i),
                Err(e) => {
                    self.err(&join(path, "interface"), e);
                    None
                }
            },
            Some(other) => {
                self.err(
                    &join(path, "interface"),
                    format!("expected a string, found {}", kind(other)),
                );
                None
            }
        }
    }

    /// Every address belongs to at most one pool.
    fn check_overlaps(&mut self, out: &BTreeMap<PoolName, Pool>) {
        let pools: Vec<&Pool> = out.values().collect();
        for (i, a) in pools.iter().enumerate() {
            for b in &pools[i + 1..] {
                if a.network.range().overlaps(&b.network.range()) {
                    self.err(
                        &join("pools", b.name.as_str()),
                        format!(
                            "network {} overlaps pool {:?} (network {}); pools must not share addresses",
                            b.network, a.name.as_str(), a.network
                        ),
                    );
                }
            }
        }
    }

    fn pool_expr(&mut self, path: &str, m: &Map<String, Value>, key: &str) -> Option<PoolExpr> {
        let p = join(path, key);
        match m.get(key) {
            None | Some(Value::Null) => {
                self.err(&p, "is required");
                None
            }
            Some(Value::String(s)) => match PoolExpr::parse(s) {
                Ok(e) => {
                    if e.was_normalised() {
                        self.warnings.push(format!(
                            "{p}: {:?} is not aligned to its prefix; using {}",
                            s.trim(),
                            e
                        ));
                    }
                    Some(e)
                }
                Err(e) => {
                    self.err(&p, e);
                    None
                }
            },
            Some(other) => {
                self.err(&p, format!("expected a string, found {}", kind(other)));
                None
            }
        }
    }

    fn boolean(&mut self, path: &str, v: &Value) -> Option<bool> {
        match v {
            Value::Bool(b) => Some(*b),
            Value::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
            Value::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
            other => {
                self.err(
                    path,
                    format!("expected true or false, found {}", kind(other)),
                );
                None
            }
        }
    }

    /// A non-negative number given as a JSON number or a numeric string (k8slb wrote
    /// `"emailServerTimeout": "30"`).
    fn number(&mut self, path: &str, v: &Value) -> Option<f64> {
        let n = match v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if n.is_finite() && n >= 0.0 => Some(n),
            _ => {
                self.err(path, format!("expected a non-negative number, found {v}"));
                None
            }
        }
    }

    fn keepalived(&mut self, v: &Value) -> KeepalivedSettings {
        let mut k = default_keepalived();
        let Some(m) = self.object("keepalived", v) else {
            return k;
        };
        self.unknown_keys("keepalived", m, KEEPALIVED_KEYS);
        self.keepalived_email(m, &mut k);
        self.keepalived_vrrp(m, &mut k);
        if k.email.is_some() && (k.email_from.is_none() || k.email_server.is_none()) {
            self.err(
                "keepalived.email",
                "needs emailFrom and emailServer as well",
            );
        }
        k
    }

    /// `keepalived.<key>` as trimmed text; blank is absent.
    fn keepalived_text(&mut self, m: &Map<String, Value>, key: &str) -> Option<String> {
        match m.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.trim().is_empty() => None,
            Some(Value::String(s)) => Some(s.trim().to_string()),
            Some(o) => {
                self.err(
                    &join("keepalived", key),
                    format!("expected a string, found {}", kind(o)),
                );
                None
            }
        }
    }

    /// The notification e-mail settings.
    fn keepalived_email(&mut self, m: &Map<String, Value>, k: &mut KeepalivedSettings) {
        if let Some(s) = self.keepalived_text(m, "email") {
            match s.parse::<Email>() {
                Ok(e) => k.email = Some(e),
                Err(e) => self.err("keepalived.email", e),
            }
        }
        if let Some(s) = self.keepalived_text(m, "emailFrom") {
            match s.parse::<Email>() {
                Ok(e) => k.email_from = Some(e),
                Err(e) => self.err("keepalived.emailFrom", e),
            }
        }
        if let Some(s) = self.keepalived_text(m, "emailServer") {
            match s.parse::<SmtpServer>() {
                Ok(e) => k.email_server = Some(e),
                Err(e) => self.err("keepalived.emailServer", e),
            }
        }
        if let Some(v) = m.get("emailServerTimeout") {
            if !matches!(v, Value::String(s) if s.trim().is_empty()) {
                if let Some(n) = self.number("keepalived.emailServerTimeout", v) {
                    if n.fract() == 0.0 && (1.0..=3600.0).contains(&n) {
                        k.email_server_timeout_s = n as u32;
                    } else {
                        self.err(
                            "keepalived.emailServerTimeout",
                            "expected whole seconds between 1 and 3600",
                        );
                    }
                }
            }
        }
    }

    /// Advertisement interval, unicast, preemption, gratuitous ARP.
    fn keepalived_vrrp(&mut self, m: &Map<String, Value>, k: &mut KeepalivedSettings) {
        if let Some(v) = m.get("advertInt") {
            if let Some(n) = self.number("keepalived.advertInt", v) {
                // VRRPv3: centiseconds, 0.01 s .. 40.95 s.
                let ms = (n * 1000.0).round();
                if !(10.0..=40950.0).contains(&ms) || !(ms as u32).is_multiple_of(10) {
                    self.err(
                        "keepalived.advertInt",
                        "expected seconds between 0.01 and 40.95 in steps of 0.01 (VRRPv3)",
                    );
                } else {
                    k.advert_int_ms = ms as u32;
                }
            }
        }
        if let Some(v) = m.get("unicast") {
            if let Some(b) = self.boolean("keepalived.unicast", v) {
                k.unicast = b;
            }
        }
        if let Some(v) = m.get("preempt") {
            if let Some(b) = self.boolean("keepalived.preempt", v) {
                k.preempt = b;
            }
        }
        if let Some(v) = m.get("garpRepeat") {
            if let Some(n) = self.number("keepalived.garpRepeat", v) {
                if n.fract() == 0.0 && (1.0..=100.0).contains(&n) {
                    k.garp_repeat = n as u32;
                } else {
                    self.err("keepalived.garpRepeat", "expected a whole number 1..100");
                }
            }
        }
        if let Some(v) = m.get("garpMasterDelay") {
            if let Some(n) = self.number("keepalived.garpMasterDelay", v) {
                if n.fract() == 0.0 && n <= 255.0 {
                    k.garp_master_delay_s = n as u32;
                } else {
                    self.err(
                        "keepalived.garpMasterDelay",
                        "expected whole seconds 0..255",
                    );
                }
            }
        }
    }

    fn lines(&mut self, path: &str, m: &Map<String, Value>, key: &str) -> Option<Vec<ConfigLine>> {
        let v = m.get(key)?;
        let p = join(path, key);
        let Value::Array(items) = v else {
            self.err(
                &p,
                format!("expected an array of strings, found {}", kind(v)),
            );
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let ip = format!("{p}[{i}]");
            match item {
                Value::String(s) => match s.parse::<ConfigLine>() {
                    Ok(l) => out.push(l),
                    Err(e) => self.err(&ip, e),
                },
                other => self.err(&ip, format!("expected a string, found {}", kind(other))),
            }
        }
        Some(out)
    }

    fn haproxy(&mut self, v: &Value) -> HaproxySections {
        let mut h = default_haproxy();
        let Some(m) = self.object("haproxy", v) else {
            return h;
        };
        self.unknown_keys("haproxy", m, HAPROXY_KEYS);
        macro_rules! take {
            ($($f:ident),*) => {$(
                if let Some(l) = self.lines("haproxy", m, stringify!($f)) { h.$f = l; }
            )*};
        }
        take!(global, defaults, tcpfront, httpfront, tcpback, httpback);
        h
    }

    fn nginx(&mut self, v: &Value) -> NginxSections {
        let mut n = default_nginx();
        let Some(m) = self.object("nginx", v) else {
            return n;
        };
        self.unknown_keys("nginx", m, NGINX_KEYS);
        macro_rules! take {
            ($($f:ident),*) => {$(
                if let Some(l) = self.lines("nginx", m, stringify!($f)) { n.$f = l; }
            )*};
        }
        take!(global, http, proxy, upstream, stream);
        n
    }
}

/// The JSON paths of keys given twice in one object. `serde_json::Value` keeps the last
/// one silently, which would turn a copy-pasted pool that was not renamed into a pool
/// that quietly vanished.
pub(super) fn duplicate_keys(text: &str) -> Vec<String> {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    struct Walk<'a> {
        path: String,
        out: &'a mut Vec<String>,
    }
    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<(), A::Error> {
            let mut i = 0;
            while s
                .next_element_seed(Walk {
                    path: format!("{}[{i}]", self.path),
                    out: &mut *self.out,
                })?
                .is_some()
            {
                i += 1;
            }
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
            let mut seen = std::collections::BTreeSet::new();
            while let Some(k) = m.next_key::<String>()? {
                let path = join(&self.path, &k);
                if !seen.insert(k) && !self.out.contains(&path) {
                    self.out.push(path.clone());
                }
                m.next_value_seed(Walk {
                    path,
                    out: &mut *self.out,
                })?;
            }
            Ok(())
        }
    }
    let mut out = Vec::new();
    let mut d = serde_json::Deserializer::from_str(text);
    // The text already parsed as a Value, so this walk cannot fail.
    let _ = Walk {
        path: String::new(),
        out: &mut out,
    }
    .deserialize(&mut d);
    out
}

pub(super) fn valid_class(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-./_".contains(&b))
}

pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The known key closest to `k` (case-insensitive equality, or edit distance <= 2).
pub(super) fn closest<'a>(k: &str, known: &[&'a str]) -> Option<&'a str> {
    let lower = k.to_ascii_lowercase();
    known
        .iter()
        .map(|c| (strsim::levenshtein(&lower, &c.to_ascii_lowercase()), *c))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, c)| c)
}
