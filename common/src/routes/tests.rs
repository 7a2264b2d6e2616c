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
