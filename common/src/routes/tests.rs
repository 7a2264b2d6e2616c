use super::*;

#[test]
fn hostnames_accept_rfc1123_and_one_leading_wildcard() {
    for ok in [
        "foo.bar.com",
        "localhost",
        "*.example.com",
        "a-1.b2.c",
        "xn--bcher-kva.example",
    ] {
        assert!(ok.parse::<Hostname>().is_ok(), "{ok:?} refused");
    }
    for bad in [
        "",
        "*",
        "*.",
        "Foo.com",
        "foo.*.com",
        "**.foo.com",
        "*foo.com",
        "foo..com",
        "-foo.com",
        "foo.com.",
        "foo_bar.com",
        "10.0.0.1",
        "foo.com:80",
        "foo.com\nbar",
        "foo com",
        "foo\"com",
        "foo{.com",
        "foo;.com",
        "foo#.com",
    ] {
        assert!(bad.parse::<Hostname>().is_err(), "{bad:?} accepted");
    }
}

#[test]
fn wildcard_matches_exactly_one_label() {
    let w: Hostname = "*.foo.com".parse().unwrap();
    assert!(w.matches("bar.foo.com"));
    assert!(!w.matches("baz.bar.foo.com"));
    assert!(!w.matches("foo.com"));
    assert!(!w.matches(".foo.com"));
    let e: Hostname = "foo.com".parse().unwrap();
    assert!(e.matches("foo.com"));
    assert!(!e.matches("a.foo.com"));
}

#[test]
fn paths_accept_url_path_characters_only() {
    for ok in [
        "/",
        "/foo",
        "/foo/",
        "/a-b_c.d~e/f!*+,=:@&",
        "/.well-known/acme-challenge/x",
    ] {
        assert!(ok.parse::<HttpPath>().is_ok(), "{ok:?} refused");
    }
    for bad in [
        "", "foo", "//", "/a//b", "/a/./b", "/a/../b", "/..", "/.", "/a b", "/a\nb", "/a\rb",
        "/a\"b", "/a'b", "/a{b", "/a}b", "/a;b", "/a#b", "/a?b", "/a%20b", "/a$b", "/a\\b",
        "/a(b)",
    ] {
        assert!(bad.parse::<HttpPath>().is_err(), "{bad:?} accepted");
    }
    assert!(format!("/{}", "a".repeat(1023)).parse::<HttpPath>().is_ok());
    assert!(format!("/{}", "a".repeat(1024))
        .parse::<HttpPath>()
        .is_err());
}

#[test]
fn tokens_refuse_config_metacharacters() {
    assert!("X-Forwarded-For".parse::<HeaderName>().is_ok());
    assert!("route_id".parse::<CookieName>().is_ok());
    for bad in [
        "", "a b", "a#b", "a'b", "a$b", "a%b", "a|b", "a;b", "a\nb", "a:b",
    ] {
        assert!(bad.parse::<HeaderName>().is_err(), "{bad:?} accepted");
        assert!(bad.parse::<CookieName>().is_err(), "{bad:?} accepted");
    }
}

#[test]
fn element_wise_prefix() {
    let p = PathMatch::prefix(&"/foo/".parse().unwrap());
    assert_eq!(p, PathMatch::Prefix("/foo".parse().unwrap()));
    assert!(p.matches("/foo"));
    assert!(p.matches("/foo/"));
    assert!(p.matches("/foo/bar"));
    assert!(!p.matches("/foobar"));
    assert!(PathMatch::prefix(&HttpPath::root()).matches("/anything"));
}

#[test]
fn backend_ids_round_trip() {
    let id: BackendId = "default/web:8080".parse().unwrap();
    assert_eq!(id.to_string(), "default/web:8080");
    assert_eq!(serde_json::to_string(&id).unwrap(), "\"default/web:8080\"");
    for bad in [
        "default/web",
        "default/web:0",
        "default/web:x",
        "web:80",
        "a/b:70000",
    ] {
        assert!(bad.parse::<BackendId>().is_err(), "{bad:?} accepted");
    }
}

#[test]
fn statuses_refuse_other_codes() {
    assert!(serde_json::from_str::<RedirectStatus>("308").is_ok());
    assert!(serde_json::from_str::<RedirectStatus>("200").is_err());
    assert!(serde_json::from_str::<FixedStatus>("503").is_ok());
    assert!(serde_json::from_str::<FixedStatus>("418").is_err());
}

#[test]
fn hostile_strings_in_a_document_are_refused_on_read() {
    let doc = r#"{"listeners":[{"ip":"198.18.0.1","port":80,"protocol":"http",
            "virtualHosts":[{"host":"a.com\nbind :1","rules":[]}]}],"backends":{}}"#;
    assert!(serde_json::from_str::<HttpRoutes>(doc).is_err());
    let doc = r#"{"listeners":[{"ip":"198.18.0.1","port":80,"protocol":"http",
            "virtualHosts":[{"rules":[{"matches":{"path":{"exact":"/a;b"}},
            "action":{"type":"respond","status":503}}]}]}],"backends":{}}"#;
    assert!(serde_json::from_str::<HttpRoutes>(doc).is_err());
}

#[test]
fn a_mirror_share_is_a_fraction_to_the_hundredth_of_a_percent() {
    let of = |n, d| MirrorShare::of(n, d).map(|s| s.map(MirrorShare::hundredths));
    assert_eq!(of(20, 100), Ok(Some(2000)));
    assert_eq!(of(25, 50), Ok(Some(5000)));
    assert_eq!(of(1, 3), Ok(Some(3333)));
    assert_eq!(of(2, 3), Ok(Some(6667)));
    assert_eq!(of(1, 10_000), Ok(Some(1)));
    // All is no share (a full mirror); the largest i32 fraction does not overflow.
    assert_eq!(of(3, 3), Ok(None));
    assert_eq!(of(i64::from(i32::MAX), i64::from(i32::MAX)), Ok(None));
    assert_eq!(of(i64::from(i32::MAX) - 1, i64::from(i32::MAX)), Ok(None));
    // Not shares, or below what the proxy draws.
    for (n, d) in [(1, 0), (-1, 100), (101, 100), (0, 100), (1, 1_000_000)] {
        assert!(of(n, d).is_err(), "{n}/{d}");
    }
    // The state holds hundredths; a value that is not a share does not load.
    let s: MirrorShare = serde_json::from_str("2000").unwrap();
    assert_eq!(s.hundredths(), 2000);
    assert_eq!(serde_json::to_string(&s).unwrap(), "2000");
    for bad in ["0", "10000", "65535"] {
        assert!(serde_json::from_str::<MirrorShare>(bad).is_err(), "{bad}");
    }
}

/// The client validation mode in the state: absent (a state of an older watcher) reads
/// as AllowValidOnly, the strict one; AllowValidOnly is left out (so an older actor
/// reads the same document); AllowInsecureFallback is written by name, and an actor
/// that does not know the field ignores it (asks for a valid certificate: stricter).
#[test]
fn the_client_validation_mode_defaults_to_the_strict_one_both_ways() {
    let old = r#"{"certificates": [], "clientCa": "0123456789abcdef0123456789abcdef"}"#;
    let t: ListenerTls = serde_json::from_str(old).unwrap();
    assert_eq!(t.client_validation, ClientValidationMode::AllowValidOnly);
    let text = serde_json::to_string(&t).unwrap();
    assert!(!text.contains("clientValidation"), "{text}");
    let mut t = t;
    t.client_validation = ClientValidationMode::AllowInsecureFallback;
    let text = serde_json::to_string(&t).unwrap();
    assert!(
        text.contains(r#""clientValidation":"AllowInsecureFallback""#),
        "{text}"
    );
    assert_eq!(serde_json::from_str::<ListenerTls>(&text).unwrap(), t);
    assert!(
        serde_json::from_str::<ListenerTls>(&text.replace("AllowInsecureFallback", "Open"))
            .is_err()
    );
}
