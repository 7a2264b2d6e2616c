//! Address ranges, pool expressions and range sets, with 128-bit arithmetic.
//!
//! Pure: no I/O, no clock. Nothing here ever enumerates a range: an IPv6 `/64` (or `::/0`)
//! costs the same as an IPv4 `/28`. Linear scans over IPv6 pools are what broke MetalLB,
//! Cilium LB-IPAM, metal3 and nvidia-k8s-ipam (see `peers.md` §3.3).
//!
//! Internally an address is a `u128` in the space of its family: IPv4 addresses and IPv6
//! addresses live in separate spaces (separate maps in [`RangeSet`]) and never compare or
//! merge across families. All arithmetic saturates or is checked; nothing panics on
//! `0.0.0.0/0`, `::/0`, `255.255.255.255` or `ffff:…:ffff`.
//!
//! Differences from k8slb (Perl, `Net::IP`), on purpose:
//! - a non-aligned CIDR such as the README's `1.2.3.0/22` is accepted and normalised to its
//!   network (`1.2.0.0/22`), and the normalisation is reported ([`PoolExpr::was_normalised`]),
//!   where k8slb silently failed every assignment in the pool;
//! - the first address of an `a-b` range is allocatable (k8slb's `while (++$ip)` never
//!   handed it out), and an IPv4 CIDR with prefix < 31 never hands out its broadcast address
//!   (k8slb could); see [`PoolExpr::allocatable`];
//! - IPv6 addresses are canonical (RFC 5952), never the fully expanded form k8slb stored.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Bound;
use std::str::FromStr;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/// Why an address, a range or a pool expression was refused. Every message names the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// [`parse_ip`] refused a user-given address.
    #[error("invalid IP address {input:?}: {reason}")]
    ParseAddress { input: String, reason: String },
    /// [`PoolExpr::parse`] refused a pool expression.
    #[error("invalid pool expression {input:?}: {reason}")]
    ParsePool { input: String, reason: String },
    /// [`IpRange::new`] refused a pair of addresses.
    #[error("invalid IP range {start}-{end}: {reason}")]
    NewRange {
        start: IpAddr,
        end: IpAddr,
        reason: String,
    },
}

impl RangeError {
    /// A fixed, low-cardinality label for metrics and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            RangeError::ParseAddress { .. } => "InvalidAddress",
            RangeError::ParsePool { .. } => "InvalidPoolExpression",
            RangeError::NewRange { .. } => "InvalidRange",
        }
    }

    /// The human reason alone, without the input.
    pub fn reason(&self) -> &str {
        match self {
            RangeError::ParseAddress { reason, .. }
            | RangeError::ParsePool { reason, .. }
            | RangeError::NewRange { reason, .. } => reason,
        }
    }
}

/// Keep hostile inputs short and printable in messages.
fn shown(input: &str) -> String {
    let mut v: String = input.chars().take(80).collect();
    if input.chars().count() > 80 {
        v.push('…');
    }
    v
}

// ---------------------------------------------------------------------------------------
// u128 helpers
// ---------------------------------------------------------------------------------------

/// The address as a number in its own family's space.
fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// Inverse of [`to_u128`]. For IPv4, `n` must fit in 32 bits (callers guarantee it).
fn from_u128(v4: bool, n: u128) -> IpAddr {
    if v4 {
        debug_assert!(n <= u128::from(u32::MAX));
        IpAddr::V4(Ipv4Addr::from(n.min(u128::from(u32::MAX)) as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(n))
    }
}

/// Size of the inclusive interval `[s, e]` (`s <= e`), saturating at `u128::MAX`.
fn span(s: u128, e: u128) -> u128 {
    (e - s).saturating_add(1)
}

// ---------------------------------------------------------------------------------------
// IpRange
// ---------------------------------------------------------------------------------------

/// Inclusive range of addresses of one family. Invariant: `start <= end`, same family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpRange {
    start: IpAddr,
    end: IpAddr,
}

impl IpRange {
    /// Refuses mixed families and `start > end`.
    pub fn new(start: IpAddr, end: IpAddr) -> Result<Self, RangeError> {
        range_reason(start, end)
            .map(|reason| Err(RangeError::NewRange { start, end, reason }))
            .unwrap_or(Ok(IpRange { start, end }))
    }

    /// The range holding `ip` alone.
    pub fn single(ip: IpAddr) -> Self {
        IpRange { start: ip, end: ip }
    }

    pub fn start(&self) -> IpAddr {
        self.start
    }

    pub fn end(&self) -> IpAddr {
        self.end
    }

    pub fn family_is_v4(&self) -> bool {
        self.start.is_ipv4()
    }

    /// True when the range holds exactly one address.
    pub fn is_single(&self) -> bool {
        self.start == self.end
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.family_is_v4() && self.start <= ip && ip <= self.end
    }

    pub fn contains_range(&self, other: &IpRange) -> bool {
        self.family_is_v4() == other.family_is_v4()
            && self.start <= other.start
            && other.end <= self.end
    }

    pub fn overlaps(&self, other: &IpRange) -> bool {
        self.family_is_v4() == other.family_is_v4()
            && self.start <= other.end
            && other.start <= self.end
    }

    /// The addresses in both ranges, if any.
    pub fn intersection(&self, other: &IpRange) -> Option<IpRange> {
        self.overlaps(other).then(|| IpRange {
            start: self.start.max(other.start),
            end: self.end.min(other.end),
        })
    }

    /// Number of addresses, saturating at `u128::MAX` (a full `::/0` has 2^128 addresses).
    pub fn size(&self) -> u128 {
        let (_, s, e) = self.raw();
        span(s, e)
    }

    /// `(is_v4, start, end)` as numbers.
    fn raw(&self) -> (bool, u128, u128) {
        (self.family_is_v4(), to_u128(self.start), to_u128(self.end))
    }

    fn from_raw(v4: bool, s: u128, e: u128) -> Self {
        IpRange {
            start: from_u128(v4, s),
            end: from_u128(v4, e),
        }
    }
}

/// Why `start-end` is not a range, if it is not.
fn range_reason(start: IpAddr, end: IpAddr) -> Option<String> {
    match (start, end) {
        (IpAddr::V4(_), IpAddr::V6(_)) | (IpAddr::V6(_), IpAddr::V4(_)) => Some(format!(
            "start {} is {} but end {} is {}: both ends must be of the same family",
            canonical(start),
            family_name(start),
            canonical(end),
            family_name(end)
        )),
        _ if start > end => Some(format!(
            "start {} is after end {}",
            canonical(start),
            canonical(end)
        )),
        _ => None,
    }
}

fn family_name(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

impl From<IpNet> for IpRange {
    /// All addresses of the network (host bits of `net` ignored).
    fn from(net: IpNet) -> Self {
        IpRange {
            start: net.network(),
            end: net.broadcast(),
        }
    }
}

impl fmt::Display for IpRange {
    /// `a` for a single address, else `a-b` (RFC 5952 for IPv6).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_single() {
            write!(f, "{}", canonical(self.start))
        } else {
            write!(f, "{}-{}", canonical(self.start), canonical(self.end))
        }
    }
}

// ---------------------------------------------------------------------------------------
// Addresses
// ---------------------------------------------------------------------------------------

/// Canonical text of an address: dotted quad for IPv4, RFC 5952 for IPv6 (lowercase,
/// leading zeros dropped, the longest run of two or more zero groups compressed, the first
/// one on a tie). Rust's `Display` for `Ipv6Addr` already does exactly this (tested).
pub fn canonical(ip: IpAddr) -> String {
    ip.to_string()
}

/// Parse an address given by a user (`loadBalancerIP`, an annotation) strictly: trims
/// whitespace, rejects zone ids (`fe80::1%eth0`), brackets, prefixes, IPv4-mapped IPv6
/// (`::ffff:10.0.0.1`) and leading zeros in IPv4 octets (`010.0.0.1`: octal or decimal?),
/// each with a clear message.
pub fn parse_ip(s: &str) -> Result<IpAddr, RangeError> {
    parse_addr(s.trim()).map_err(|reason| RangeError::ParseAddress {
        input: shown(s),
        reason,
    })
}

/// The strict address parser shared by [`parse_ip`] and [`PoolExpr::parse`]; `s` is
/// already trimmed. Returns the human reason on failure.
fn parse_addr(s: &str) -> Result<IpAddr, String> {
    if s.is_empty() {
        return Err("empty address".into());
    }
    if let Some(i) = s.find('%') {
        return Err(format!(
            "zone ids ({:?}) are not allowed; give the address alone",
            &s[i..]
        ));
    }
    if s.starts_with('[') || s.ends_with(']') {
        return Err("remove the brackets around the IPv6 address".into());
    }
    if s.contains('/') {
        return Err("expected a single address, not a CIDR".into());
    }
    if s.chars().any(char::is_whitespace) {
        return Err("whitespace inside the address".into());
    }
    if !s.contains(':') {
        if let Some(octet) = s
            .split('.')
            .find(|o| o.len() > 1 && o.starts_with('0') && o.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(format!(
                "leading zero in IPv4 octet {octet:?} is ambiguous (octal or decimal?); \
                 write it without leading zeros"
            ));
        }
    }
    match IpAddr::from_str(s) {
        Ok(IpAddr::V6(a)) if a.to_ipv4_mapped().is_some() => Err(format!(
            "IPv4-mapped IPv6 addresses are not allowed; write the IPv4 address {} instead",
            a.to_ipv4_mapped()
                .map(|v4| v4.to_string())
                .unwrap_or_default()
        )),
        Ok(ip) => Ok(ip),
        Err(_) if s.contains(':') => Err("not a valid IPv6 address".into()),
        Err(_) if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') => {
            Err("not a valid IPv4 address (expected four decimal octets 0-255)".into())
        }
        Err(_) => Err("not an IP address".into()),
    }
}

// ---------------------------------------------------------------------------------------
// PoolExpr
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `net/len`, `net` already truncated to its network.
    Cidr { net: IpNet, normalised: bool },
    /// `a-b` or `a - b`.
    Span,
    /// `a`.
    Single,
}

/// A parsed pool expression (`pools.<p>.network` or `pools.<p>.range`), as k8slb documents
/// it: `192.168.10.0/24` (CIDR, a non-aligned one normalised to its network), `a-b`,
/// `a - b` (any whitespace around `-`), or a single address; IPv4 or IPv6.
///
/// Equality is structural: `1.2.3.0/22` (normalised) and `1.2.0.0/22` cover the same
/// addresses but differ in [`PoolExpr::was_normalised`]; compare [`PoolExpr::range`] for
/// coverage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolExpr {
    form: Form,
    range: IpRange,
}

impl PoolExpr {
    /// Parse a pool expression; leading and trailing whitespace is ignored. Errors carry the
    /// input and a human reason.
    pub fn parse(s: &str) -> Result<Self, RangeError> {
        Self::parse_trimmed(s.trim()).map_err(|reason| RangeError::ParsePool {
            input: shown(s),
            reason,
        })
    }

    fn parse_trimmed(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err("empty; expected a CIDR (a.b.c.d/n), a range (a-b) or an address".into());
        }
        if let Some((addr, len)) = s.split_once('/') {
            let looks_like_addr = |t: &str| t.contains('.') || t.contains(':');
            if s.split_once('-')
                .is_some_and(|(a, b)| looks_like_addr(a) && looks_like_addr(b))
            {
                return Err("mixes a CIDR and a range; use one form".into());
            }
            if addr != addr.trim_end() || len != len.trim_start() {
                return Err("whitespace around '/'".into());
            }
            let ip = parse_addr(addr).map_err(|r| format!("network address: {r}"))?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "prefix length {len:?} is not a number between 0 and {max}"
                ));
            }
            let prefix: u16 = len.parse().map_err(|_| "bad prefix length".to_string())?;
            if prefix > max {
                return Err(format!(
                    "prefix length /{prefix} is longer than {max} for an {} network",
                    family_name(ip)
                ));
            }
            let given = IpNet::new(ip, prefix as u8).map_err(|e| e.to_string())?;
            let net = given.trunc();
            let normalised = net.addr() != ip;
            return Ok(PoolExpr {
                form: Form::Cidr { net, normalised },
                range: IpRange::from(net),
            });
        }
        if let Some((a, b)) = s.split_once('-') {
            if b.contains('-') {
                return Err("more than one '-'; expected a single range a-b".into());
            }
            let (a, b) = (a.trim(), b.trim());
            if a.is_empty() {
                return Err("missing start address before '-'".into());
            }
            if b.is_empty() {
                return Err("missing end address after '-'".into());
            }
            let start = parse_addr(a).map_err(|r| format!("start {a:?}: {r}"))?;
            let end = parse_addr(b).map_err(|r| format!("end {b:?}: {r}"))?;
            if let Some(reason) = range_reason(start, end) {
                return Err(reason);
            }
            return Ok(PoolExpr {
                form: Form::Span,
                range: IpRange { start, end },
            });
        }
        let ip = parse_addr(s)?;
        Ok(PoolExpr {
            form: Form::Single,
            range: IpRange::single(ip),
        })
    }

    /// The full range covered (for a CIDR: network to broadcast).
    pub fn range(&self) -> IpRange {
        self.range
    }

    /// `Some` for the CIDR form, normalised to its network.
    pub fn cidr(&self) -> Option<IpNet> {
        match self.form {
            Form::Cidr { net, .. } => Some(net),
            _ => None,
        }
    }

    /// The CIDR prefix length; 32 or 128 for the other forms.
    pub fn prefix_len(&self) -> u8 {
        match self.form {
            Form::Cidr { net, .. } => net.prefix_len(),
            _ if self.range.family_is_v4() => 32,
            _ => 128,
        }
    }

    /// True when a CIDR had host bits set and was normalised to its network
    /// (`1.2.3.0/22` -> `1.2.0.0/22`). The config layer should warn about it.
    pub fn was_normalised(&self) -> bool {
        matches!(
            self.form,
            Form::Cidr {
                normalised: true,
                ..
            }
        )
    }

    pub fn family_is_v4(&self) -> bool {
        self.range.family_is_v4()
    }

    /// The addresses the dynamic allocator may hand out from this expression used as a
    /// pool `range`: the whole range, first address included (k8slb never handed out the
    /// first one: a bug we do not keep), except that
    /// - an IPv4 CIDR with prefix < 31 skips its network and broadcast addresses;
    /// - an IPv6 CIDR with prefix < 127 skips its first address (the Subnet-Router anycast
    ///   address, RFC 4291 §2.6.1). Its last address is handed out.
    ///
    /// `/31`, `/32`, `/127`, `/128`, `a-b` and single addresses give the whole range.
    pub fn allocatable(&self) -> IpRange {
        let (v4, s, e) = self.range.raw();
        match self.form {
            Form::Cidr { net, .. } if v4 && net.prefix_len() < 31 => {
                IpRange::from_raw(v4, s + 1, e - 1)
            }
            Form::Cidr { net, .. } if !v4 && net.prefix_len() < 127 => {
                IpRange::from_raw(v4, s + 1, e)
            }
            _ => self.range,
        }
    }

    /// Canonical text: `a.b.c.d/n` (the normalised network), `a-b` (RFC 5952 for IPv6), or
    /// `a` for a single address. `PoolExpr::parse(&x.canonical())` gives back `x` (except
    /// for the normalisation flag, which is then false).
    pub fn canonical(&self) -> String {
        match self.form {
            Form::Cidr { net, .. } => format!("{}/{}", canonical(net.addr()), net.prefix_len()),
            Form::Span => format!(
                "{}-{}",
                canonical(self.range.start),
                canonical(self.range.end)
            ),
            Form::Single => canonical(self.range.start),
        }
    }
}

impl fmt::Display for PoolExpr {
    /// Same as [`PoolExpr::canonical`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical())
    }
}

impl FromStr for PoolExpr {
    type Err = RangeError;
    fn from_str(s: &str) -> Result<Self, RangeError> {
        PoolExpr::parse(s)
    }
}

impl Serialize for PoolExpr {
    /// As the canonical string.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.canonical())
    }
}

impl<'de> Deserialize<'de> for PoolExpr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        PoolExpr::parse(&s).map_err(serde::de::Error::custom)
    }
}

// ---------------------------------------------------------------------------------------
// RangeSet
// ---------------------------------------------------------------------------------------

/// A set of addresses as sorted, disjoint, non-adjacent (merged) ranges, one map per
/// family (`start -> end`, both inclusive). Because the representation is canonical, `==`
/// is set equality.
///
/// Costs, with n stored ranges: `insert`, `remove`, `contains`, `first_free`: O(log n)
/// (plus the ranges merged away); `free_in`: O(log n + k), k the ranges overlapping
/// `within`; `len`: O(n). None depends on the size of a range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    v4: BTreeMap<u128, u128>,
    v6: BTreeMap<u128, u128>,
}

impl RangeSet {
    pub fn new() -> Self {
        Self::default()
    }

    fn map(&self, v4: bool) -> &BTreeMap<u128, u128> {
        if v4 {
            &self.v4
        } else {
            &self.v6
        }
    }

    fn map_mut(&mut self, v4: bool) -> &mut BTreeMap<u128, u128> {
        if v4 {
            &mut self.v4
        } else {
            &mut self.v6
        }
    }

    /// Add one address. O(log n).
    pub fn insert(&mut self, ip: IpAddr) {
        self.insert_range(IpRange::single(ip));
    }

    /// Add every address of `r`, merging with overlapping and adjacent ranges.
    /// O(log n + m), m the ranges merged.
    pub fn insert_range(&mut self, r: IpRange) {
        let (v4, mut s, mut e) = r.raw();
        let map = self.map_mut(v4);
        // A range starting at or before `s` that overlaps or touches `s`.
        if let Some((&ps, &pe)) = map.range(..=s).next_back() {
            if pe.saturating_add(1) >= s {
                s = ps;
                e = e.max(pe);
            }
        }
        // Ranges starting inside [s, e+1] (the predecessor included, when merged) overlap
        // or touch: absorb them. Only the last one can reach past `e`. Re-seeking costs
        // O(log n) per absorbed range and never allocates.
        while let Some((&a, &b)) = map.range(s..=e.saturating_add(1)).next() {
            map.remove(&a);
            e = e.max(b);
        }
        map.insert(s, e);
    }

    /// Remove one address. O(log n).
    pub fn remove(&mut self, ip: IpAddr) {
        self.remove_range(IpRange::single(ip));
    }

    /// Remove every address of `r`. O(log n + m), m the ranges touched.
    pub fn remove_range(&mut self, r: IpRange) {
        let (v4, s, e) = r.raw();
        let map = self.map_mut(v4);
        // A range starting before `s` that reaches it: keep its head, and its tail if it
        // reaches past `e`.
        if let Some((&ps, &pe)) = map.range(..s).next_back() {
            if pe >= s {
                map.insert(ps, s - 1);
                if pe > e {
                    map.insert(e + 1, pe);
                }
            }
        }
        // Ranges starting inside [s, e]: drop them, keeping a tail past `e` (keys inserted
        // here are > e, so the loop ends).
        while let Some((&a, &b)) = map.range(s..=e).next() {
            map.remove(&a);
            if b > e {
                map.insert(e + 1, b);
            }
        }
    }

    /// O(log n).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let x = to_u128(ip);
        self.map(ip.is_ipv4())
            .range(..=x)
            .next_back()
            .is_some_and(|(_, &e)| e >= x)
    }

    /// Number of addresses in the set, saturating at `u128::MAX`. O(n).
    pub fn len(&self) -> u128 {
        self.v4
            .iter()
            .chain(self.v6.iter())
            .fold(0u128, |acc, (&s, &e)| acc.saturating_add(span(s, e)))
    }

    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    /// The stored ranges: IPv4 first, then IPv6, each ascending.
    pub fn ranges(&self) -> impl Iterator<Item = IpRange> + '_ {
        let v4 = self.v4.iter().map(|(&s, &e)| IpRange::from_raw(true, s, e));
        let v6 = self
            .v6
            .iter()
            .map(|(&s, &e)| IpRange::from_raw(false, s, e));
        v4.chain(v6)
    }

    /// Lowest address of `within` that is NOT in the set, or `None` if `within` is fully
    /// used. O(log n): ranges are merged, so the address after a stored range is free.
    pub fn first_free(&self, within: &IpRange) -> Option<IpAddr> {
        let (v4, s, e) = within.raw();
        let map = self.map(v4);
        let mut cand = s;
        if let Some((_, &pe)) = map.range(..=s).next_back() {
            if pe >= s {
                if pe >= e {
                    return None;
                }
                cand = pe + 1;
            }
        }
        // With merged ranges this loop ends at its first step; it keeps the answer right
        // even if it did not.
        for (&ns, &ne) in map.range(cand..=e) {
            if ns > cand {
                break;
            }
            if ne >= e {
                return None;
            }
            cand = ne + 1;
        }
        Some(from_u128(v4, cand))
    }

    /// The free (not in the set) parts of `within`, ascending. Lazy: O(log n) to start,
    /// O(1) amortised per item.
    pub fn free_ranges<'a>(&'a self, within: &IpRange) -> impl Iterator<Item = IpRange> + 'a {
        let (v4, s, e) = within.raw();
        let map = self.map(v4);
        // Next candidate start of a gap; None once past `e` (or past u128::MAX).
        let mut cand = Some(s);
        if let Some((_, &pe)) = map.range(..=s).next_back() {
            if pe >= s {
                cand = if pe >= e { None } else { Some(pe + 1) };
            }
        }
        let mut used = match cand {
            Some(c) => map.range((Bound::Included(c), Bound::Included(e))),
            None => map.range((Bound::Excluded(e), Bound::Included(e))),
        };
        std::iter::from_fn(move || loop {
            let c = cand?;
            match used.next() {
                Some((&ns, &ne)) => {
                    cand = if ne >= e { None } else { Some(ne + 1) };
                    if ns > c {
                        return Some(IpRange::from_raw(v4, c, ns - 1));
                    }
                }
                None => {
                    cand = None;
                    return Some(IpRange::from_raw(v4, c, e));
                }
            }
        })
    }

    /// Number of addresses of `within` not in the set, saturating at `u128::MAX`.
    /// O(log n + k), k the stored ranges overlapping `within`.
    pub fn free_in(&self, within: &IpRange) -> u128 {
        self.free_ranges(within)
            .fold(0u128, |acc, r| acc.saturating_add(r.size()))
    }

    /// Number of addresses of `within` that are in the set, saturating at `u128::MAX`.
    /// O(log n + k).
    pub fn used_in(&self, within: &IpRange) -> u128 {
        let (v4, s, e) = within.raw();
        let map = self.map(v4);
        let mut total = 0u128;
        if let Some((_, &pe)) = map.range(..s).next_back() {
            if pe >= s {
                total = span(s, pe.min(e));
            }
        }
        for (&ns, &ne) in map.range(s..=e) {
            total = total.saturating_add(span(ns, ne.min(e)));
        }
        total
    }
}

impl FromIterator<IpAddr> for RangeSet {
    fn from_iter<I: IntoIterator<Item = IpAddr>>(iter: I) -> Self {
        let mut set = RangeSet::new();
        for ip in iter {
            set.insert(ip);
        }
        set
    }
}

impl Extend<IpAddr> for RangeSet {
    fn extend<I: IntoIterator<Item = IpAddr>>(&mut self, iter: I) {
        for ip in iter {
            self.insert(ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn u128_roundtrip_at_the_edges() {
        for a in [
            "0.0.0.0",
            "255.255.255.255",
            "::",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        ] {
            let a = ip(a);
            assert_eq!(from_u128(a.is_ipv4(), to_u128(a)), a);
        }
    }

    #[test]
    fn free_ranges_stops_at_u128_max() {
        let mut set = RangeSet::new();
        set.insert(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"));
        let all = IpRange::new(ip("::"), ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")).unwrap();
        let free: Vec<_> = set.free_ranges(&all).collect();
        assert_eq!(free.len(), 2);
        assert_eq!(
            free[1],
            IpRange::single(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"))
        );
        assert_eq!(set.free_in(&all), u128::MAX); // 2^128 - 1
    }
}
