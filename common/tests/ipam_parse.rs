//! Table tests: pool expressions, addresses, canonical text, allocatable ranges.

use std::net::IpAddr;

use k8slb_common::ipam::{canonical, parse_ip, IpRange, PoolExpr, RangeError};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn r(a: &str, b: &str) -> IpRange {
    IpRange::new(ip(a), ip(b)).unwrap()
}

/// (input, range start, range end, cidr, prefix_len, normalised, canonical)
#[allow(clippy::type_complexity)]
const OK: &[(&str, &str, &str, Option<&str>, u8, bool, &str)] = &[
    (
        "192.168.10.0/24",
        "192.168.10.0",
        "192.168.10.255",
        Some("192.168.10.0/24"),
        24,
        false,
        "192.168.10.0/24",
    ),
    (
        "192.168.10.200-192.168.10.254",
        "192.168.10.200",
        "192.168.10.254",
        None,
        32,
        false,
        "192.168.10.200-192.168.10.254",
    ),
    (
        "192.168.10.240 - 192.168.10.249",
        "192.168.10.240",
        "192.168.10.249",
        None,
        32,
        false,
        "192.168.10.240-192.168.10.249",
    ),
    (
        " 10.0.0.1 - 10.0.0.5 ",
        "10.0.0.1",
        "10.0.0.5",
        None,
        32,
        false,
        "10.0.0.1-10.0.0.5",
    ),
    (
        "\t10.0.0.1\t-\n10.0.0.5\r\n",
        "10.0.0.1",
        "10.0.0.5",
        None,
        32,
        false,
        "10.0.0.1-10.0.0.5",
    ),
    (
        "10.0.0.1-10.0.0.1",
        "10.0.0.1",
        "10.0.0.1",
        None,
        32,
        false,
        "10.0.0.1-10.0.0.1",
    ),
    // The README's non-aligned CIDR: accepted, normalised to its network.
    (
        "1.2.3.0/22",
        "1.2.0.0",
        "1.2.3.255",
        Some("1.2.0.0/22"),
        22,
        true,
        "1.2.0.0/22",
    ),
    (
        "10.0.0.7/32",
        "10.0.0.7",
        "10.0.0.7",
        Some("10.0.0.7/32"),
        32,
        false,
        "10.0.0.7/32",
    ),
    (
        "10.0.0.7/31",
        "10.0.0.6",
        "10.0.0.7",
        Some("10.0.0.6/31"),
        31,
        true,
        "10.0.0.6/31",
    ),
    (
        "0.0.0.0/0",
        "0.0.0.0",
        "255.255.255.255",
        Some("0.0.0.0/0"),
        0,
        false,
        "0.0.0.0/0",
    ),
    (
        "255.255.255.255",
        "255.255.255.255",
        "255.255.255.255",
        None,
        32,
        false,
        "255.255.255.255",
    ),
    (
        "  10.1.2.3  ",
        "10.1.2.3",
        "10.1.2.3",
        None,
        32,
        false,
        "10.1.2.3",
    ),
    (
        "2001:468::/64",
        "2001:468::",
        "2001:468::ffff:ffff:ffff:ffff",
        Some("2001:468::/64"),
        64,
        false,
        "2001:468::/64",
    ),
    (
        "2001:468:101::/96",
        "2001:468:101::",
        "2001:468:101::ffff:ffff",
        Some("2001:468:101::/96"),
        96,
        false,
        "2001:468:101::/96",
    ),
    (
        "2001:0468:0101:0000:0000:0000:0000:0005/96",
        "2001:468:101::",
        "2001:468:101::ffff:ffff",
        Some("2001:468:101::/96"),
        96,
        true,
        "2001:468:101::/96",
    ),
    (
        "2001:468:101::10-2001:468:101::ff",
        "2001:468:101::10",
        "2001:468:101::ff",
        None,
        128,
        false,
        "2001:468:101::10-2001:468:101::ff",
    ),
    (
        "2001:DB8:0:0:0:0:0:1 - 2001:db8::00ff",
        "2001:db8::1",
        "2001:db8::ff",
        None,
        128,
        false,
        "2001:db8::1-2001:db8::ff",
    ),
    (
        "2001:0db8:0000:0000:0000:0000:0000:0001",
        "2001:db8::1",
        "2001:db8::1",
        None,
        128,
        false,
        "2001:db8::1",
    ),
    (
        "::/0",
        "::",
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        Some("::/0"),
        0,
        false,
        "::/0",
    ),
    (
        "fd00::1/128",
        "fd00::1",
        "fd00::1",
        Some("fd00::1/128"),
        128,
        false,
        "fd00::1/128",
    ),
];

#[test]
fn parse_accepts_every_documented_form() {
    for &(input, start, end, cidr, prefix, normalised, canon) in OK {
        let e = PoolExpr::parse(input).unwrap_or_else(|err| panic!("{input:?}: {err}"));
        assert_eq!(e.range(), r(start, end), "{input:?} range");
        assert_eq!(
            e.cidr().map(|n| n.to_string()),
            cidr.map(str::to_string),
            "{input:?} cidr"
        );
        assert_eq!(e.prefix_len(), prefix, "{input:?} prefix_len");
        assert_eq!(e.was_normalised(), normalised, "{input:?} was_normalised");
        assert_eq!(e.canonical(), canon, "{input:?} canonical");
        assert_eq!(e.to_string(), canon, "{input:?} Display");
        // The canonical text parses back to the same expression (bar the normalisation flag).
        let back = PoolExpr::parse(&e.canonical()).unwrap();
        assert_eq!(back.range(), e.range());
        assert_eq!(back.cidr(), e.cidr());
        assert_eq!(back.canonical(), e.canonical());
        assert!(!back.was_normalised());
        // FromStr agrees with parse.
        assert_eq!(input.parse::<PoolExpr>().unwrap(), e);
    }
}

/// (input, a fragment the reason must contain)
const ERR: &[(&str, &str)] = &[
    ("", "empty"),
    ("   ", "empty"),
    ("abc", "not an IP address"),
    ("10.0.0.5-10.0.0.1", "start 10.0.0.5 is after end 10.0.0.1"),
    (
        "10.0.0.9 - 10.0.0.1",
        "start 10.0.0.9 is after end 10.0.0.1",
    ),
    (
        "2001:db8::9-2001:db8::1",
        "start 2001:db8::9 is after end 2001:db8::1",
    ),
    ("10.0.0.1-2001::1", "same family"),
    ("2001::1-10.0.0.1", "same family"),
    ("10.0.0.0/33", "longer than 32"),
    ("2001:db8::/129", "longer than 128"),
    ("10.0.0.0/", "prefix length"),
    ("10.0.0.0/-1", "prefix length"),
    ("10.0.0.0/+8", "prefix length"),
    ("10.0.0.0/2a", "prefix length"),
    ("10.0.0.0/1000", "prefix length"),
    ("/24", "network address: empty"),
    ("10.0.0.0 / 24", "whitespace around '/'"),
    ("10.0.0.0/24/8", "prefix length"),
    ("10.0.0.1-", "missing end"),
    ("-10.0.0.1", "missing start"),
    ("10.0.0.1-10.0.0.2-10.0.0.3", "more than one '-'"),
    ("10.0.0.0/24-10.0.1.0/24", "mixes a CIDR and a range"),
    ("10.0.0.256", "not a valid IPv4 address"),
    ("10.0.0", "not a valid IPv4 address"),
    ("010.0.0.1", "leading zero"),
    ("10.0.0.01-10.0.0.5", "leading zero"),
    ("::ffff:10.0.0.1", "IPv4-mapped"),
    ("::ffff:10.0.0.0/120", "IPv4-mapped"),
    ("::ffff:a00:1-::ffff:a00:5", "IPv4-mapped"),
    ("fe80::1%eth0", "zone id"),
    ("[2001:db8::1]", "brackets"),
    ("2001:db8:::1", "not a valid IPv6 address"),
    ("10.0.0.1 10.0.0.2", "whitespace inside"),
    ("10.0.0.1,10.0.0.2", "not an IP address"),
];

#[test]
fn parse_rejects_with_input_and_reason() {
    for &(input, fragment) in ERR {
        let err = PoolExpr::parse(input).expect_err(input);
        let msg = err.to_string();
        assert!(
            matches!(err, RangeError::ParsePool { .. }),
            "{input:?}: {err:?}"
        );
        assert!(
            msg.contains(fragment),
            "{input:?}: message {msg:?} lacks {fragment:?}"
        );
        assert!(
            msg.contains(&format!("{:?}", input)),
            "{input:?}: message {msg:?} does not name the input"
        );
        assert_eq!(err.category(), "InvalidPoolExpression");
    }
}

#[test]
fn error_message_is_readable() {
    let err = PoolExpr::parse("10.0.0.9-10.0.0.1").unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"invalid pool expression "10.0.0.9-10.0.0.1": start 10.0.0.9 is after end 10.0.0.1"#
    );
    let err = PoolExpr::parse("10.0.0.1-2001::1").unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"invalid pool expression "10.0.0.1-2001::1": start 10.0.0.1 is IPv4 but end 2001::1 is IPv6: both ends must be of the same family"#
    );
    // Hostile, long inputs are cut in messages.
    let long = "x".repeat(500);
    assert!(PoolExpr::parse(&long).unwrap_err().to_string().len() < 200);
}

/// (expression, allocatable start, allocatable end)
const ALLOCATABLE: &[(&str, &str, &str)] = &[
    ("192.168.10.0/24", "192.168.10.1", "192.168.10.254"),
    ("1.2.3.0/22", "1.2.0.1", "1.2.3.254"),
    ("10.0.0.0/30", "10.0.0.1", "10.0.0.2"),
    ("10.0.0.6/31", "10.0.0.6", "10.0.0.7"),
    ("10.0.0.7/32", "10.0.0.7", "10.0.0.7"),
    ("0.0.0.0/0", "0.0.0.1", "255.255.255.254"),
    // a-b: the whole range, first address included (k8slb's bug, fixed).
    (
        "192.168.10.240-192.168.10.249",
        "192.168.10.240",
        "192.168.10.249",
    ),
    ("10.0.0.1-10.0.0.2", "10.0.0.1", "10.0.0.2"),
    ("10.0.0.0-10.0.0.255", "10.0.0.0", "10.0.0.255"),
    ("10.0.0.1", "10.0.0.1", "10.0.0.1"),
    ("255.255.255.255", "255.255.255.255", "255.255.255.255"),
    // IPv6 CIDR: skip the Subnet-Router anycast address, keep the last one.
    (
        "2001:468::/64",
        "2001:468::1",
        "2001:468::ffff:ffff:ffff:ffff",
    ),
    (
        "2001:468:101::/96",
        "2001:468:101::1",
        "2001:468:101::ffff:ffff",
    ),
    ("2001:db8::/126", "2001:db8::1", "2001:db8::3"),
    ("2001:db8::/127", "2001:db8::", "2001:db8::1"),
    ("2001:db8::5/128", "2001:db8::5", "2001:db8::5"),
    ("::/0", "::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
    ("2001:db8::-2001:db8::ff", "2001:db8::", "2001:db8::ff"),
    ("2001:db8::7", "2001:db8::7", "2001:db8::7"),
];

#[test]
fn allocatable_ranges() {
    for &(input, start, end) in ALLOCATABLE {
        let e = PoolExpr::parse(input).unwrap();
        assert_eq!(e.allocatable(), r(start, end), "{input:?}");
        assert!(e.range().contains_range(&e.allocatable()), "{input:?}");
    }
}

#[test]
fn sizes_saturate_and_never_panic() {
    let all6 = PoolExpr::parse("::/0").unwrap();
    assert_eq!(all6.range().size(), u128::MAX); // 2^128, saturated
    assert_eq!(all6.allocatable().size(), u128::MAX); // 2^128 - 1, exact
    assert_eq!(
        PoolExpr::parse("0.0.0.0/0").unwrap().range().size(),
        1 << 32
    );
    assert_eq!(
        PoolExpr::parse("2001:468::/64").unwrap().range().size(),
        1 << 64
    );
    assert_eq!(
        PoolExpr::parse("2001:468::/64")
            .unwrap()
            .allocatable()
            .size(),
        (1 << 64) - 1
    );
    assert_eq!(
        PoolExpr::parse("192.168.10.0/24")
            .unwrap()
            .allocatable()
            .size(),
        254
    );
    assert_eq!(IpRange::single(ip("::")).size(), 1);
    assert_eq!(
        IpRange::single(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")).size(),
        1
    );
}

#[test]
fn ip_range_new_and_predicates() {
    assert!(matches!(
        IpRange::new(ip("10.0.0.2"), ip("10.0.0.1")),
        Err(RangeError::NewRange { .. })
    ));
    let err = IpRange::new(ip("10.0.0.1"), ip("::1")).unwrap_err();
    assert!(err.to_string().contains("same family"), "{err}");
    assert_eq!(err.category(), "InvalidRange");

    let a = r("10.0.0.0", "10.0.0.255");
    let b = r("10.0.0.255", "10.0.1.0");
    let c = r("10.0.1.0", "10.0.1.255");
    assert!(a.family_is_v4());
    assert!(!r("::1", "::2").family_is_v4());
    assert!(a.overlaps(&b) && b.overlaps(&a));
    assert!(!a.overlaps(&c));
    assert!(a.contains(ip("10.0.0.0")) && a.contains(ip("10.0.0.255")));
    assert!(!a.contains(ip("10.0.1.0")));
    assert!(a.contains_range(&r("10.0.0.3", "10.0.0.4")));
    assert!(!a.contains_range(&b));
    assert_eq!(a.intersection(&b), Some(IpRange::single(ip("10.0.0.255"))));
    assert_eq!(a.intersection(&c), None);

    // Families never mix, even where the numbers coincide (0.0.0.1 and ::1 are both "1").
    let v4 = r("0.0.0.0", "255.255.255.255");
    let v6 = r("::", "::ffff:ffff");
    assert!(!v4.contains(ip("::1")));
    assert!(!v6.contains(ip("0.0.0.1")));
    assert!(!v4.overlaps(&v6) && !v6.overlaps(&v4));
    assert!(!v6.contains_range(&IpRange::single(ip("0.0.0.1"))));
    assert_eq!(v4.intersection(&v6), None);

    assert_eq!(a.to_string(), "10.0.0.0-10.0.0.255");
    assert_eq!(
        IpRange::single(ip("2001:db8::1")).to_string(),
        "2001:db8::1"
    );
    assert_eq!(
        IpRange::from("10.1.2.3/8".parse::<ipnet::IpNet>().unwrap()),
        r("10.0.0.0", "10.255.255.255")
    );
}

#[test]
fn canonical_is_rfc5952() {
    for (input, want) in [
        ("2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1"),
        ("2001:DB8::1", "2001:db8::1"),
        // A single zero group is not compressed (RFC 5952 §4.2.2).
        ("2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"),
        // The longest run is compressed (§4.2.3)...
        ("2001:0:0:1:0:0:0:1", "2001:0:0:1::1"),
        // ... and the first one on a tie.
        ("2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"),
        ("2001:0468:0101:0000:0000:0000:0000:0005", "2001:468:101::5"),
        ("0:0:0:0:0:0:0:0", "::"),
        ("0:0:0:0:0:0:0:1", "::1"),
        ("fe80:0:0:0:0:0:0:0", "fe80::"),
        (
            "FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        ),
        ("10.0.0.1", "10.0.0.1"),
        ("0.0.0.0", "0.0.0.0"),
    ] {
        assert_eq!(canonical(ip(input)), want, "{input}");
        assert_eq!(canonical(parse_ip(input).unwrap()), want, "{input}");
    }
}

#[test]
fn parse_ip_is_strict() {
    for (input, want) in [
        ("10.0.0.1", "10.0.0.1"),
        ("  10.0.0.1\n", "10.0.0.1"),
        ("0.0.0.0", "0.0.0.0"),
        ("2001:db8::1", "2001:db8::1"),
        (" 2001:0DB8::0001 ", "2001:db8::1"),
        ("fe80::1", "fe80::1"),
    ] {
        assert_eq!(parse_ip(input).unwrap(), ip(want), "{input:?}");
    }
    for (input, fragment) in [
        ("", "empty"),
        ("  ", "empty"),
        ("fe80::1%eth0", "zone ids (\"%eth0\")"),
        ("fe80::1%1", "zone ids"),
        ("::ffff:10.0.0.1", "write the IPv4 address 10.0.0.1 instead"),
        ("::ffff:a00:1", "IPv4-mapped"),
        ("010.0.0.1", "leading zero in IPv4 octet \"010\""),
        ("10.0.0.00", "leading zero"),
        ("10.00.0.1", "leading zero"),
        ("10.0.0.1/32", "not a CIDR"),
        ("[::1]", "brackets"),
        ("10.0.0.1 ", "__ok__"),
        ("10. 0.0.1", "whitespace inside"),
        ("10.0.0.256", "not a valid IPv4 address"),
        ("1.2.3", "not a valid IPv4 address"),
        ("0x0a.0.0.1", "not an IP address"),
        ("::g", "not a valid IPv6 address"),
        ("host.example", "not an IP address"),
    ] {
        if fragment == "__ok__" {
            assert!(parse_ip(input).is_ok());
            continue;
        }
        let err = parse_ip(input).expect_err(input);
        assert!(matches!(err, RangeError::ParseAddress { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains(fragment),
            "{input:?}: {msg:?} lacks {fragment:?}"
        );
        assert!(
            msg.contains(&format!("{input:?}")),
            "{msg:?} does not name {input:?}"
        );
        assert_eq!(err.category(), "InvalidAddress");
    }
    // A zero octet alone is fine; only a zero *prefix* is ambiguous.
    assert_eq!(parse_ip("10.0.0.0").unwrap(), ip("10.0.0.0"));
}

#[test]
fn serde_uses_the_canonical_string() {
    let e: PoolExpr = serde_json::from_str(r#"" 2001:0468::0/64 ""#).unwrap();
    assert_eq!(serde_json::to_string(&e).unwrap(), r#""2001:468::/64""#);
    let err = serde_json::from_str::<PoolExpr>(r#""10.0.0.5-10.0.0.1""#).unwrap_err();
    assert!(err
        .to_string()
        .contains("start 10.0.0.5 is after end 10.0.0.1"));
}
