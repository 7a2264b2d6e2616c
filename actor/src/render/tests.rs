use super::*;
use crate::render::files::one_label_regex;
use crate::render::nginx::http::{nx_exact_after_one, NxBlock, NxSplits};
use crate::render::nginx::stream::MAX_NGINX_WEIGHT;
use k8slb_common::routes::{FieldName, FieldValue, WeightedBackend};

#[test]
fn embedded_templates_parse() {
    Renderer::embedded().unwrap();
}

#[test]
fn override_dir_parse_error_fails_at_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(HAPROXY), "{% if %}").unwrap();
    let e = Renderer::from_dir(dir.path()).unwrap_err();
    assert!(matches!(e, RenderError::ParseTemplate { .. }), "{e}");
    // Missing files fall back to the embedded ones.
    let empty = tempfile::tempdir().unwrap();
    Renderer::from_dir(empty.path()).unwrap();
}

#[test]
fn cli_lines() {
    let c = RuntimeCommand::SetServer {
        backend: "be_a_b_80".into(),
        server: "s3".into(),
        addr: "2001:db8::1".parse().unwrap(),
        port: 80,
    };
    assert_eq!(
        c.to_cli(),
        "set server be_a_b_80/s3 addr 2001:db8::1 port 80"
    );
    let d = RuntimeCommand::Drain {
        backend: "be".into(),
        server: "s1".into(),
    };
    assert_eq!(d.to_cli(), "set server be/s1 state drain");
}

#[test]
fn embedded_route_templates_parse() {
    HttpRenderer::embedded().unwrap();
}

/// The plan refuses a value by the length of the token this renderer makes of it
/// (`k8slb_common::routes::NGINX_MAX_TOKEN`): both must measure alike.
#[test]
fn the_plans_token_measures_are_the_rendered_lengths() {
    let v: FieldValue = "id:7 (beta)-x".parse().unwrap();
    let quoted = |t: &str| t.len() + 2;
    assert_eq!(
        v.nginx_match_token_len(),
        quoted(&nx_exact_after_one(v.as_str()))
    );
    let name: FieldName = "x-add".parse().unwrap();
    let mut splits = NxSplits::default();
    let var = splits.added(&name, &v);
    let Some(NxBlock::Map {
        var: named,
        default,
        ..
    }) = splits.blocks.last()
    else {
        panic!("an added header's value is a map");
    };
    assert_eq!(named, &var);
    assert_eq!(v.nginx_edit_token_len(&name, true), default.len());
    assert_eq!(v.nginx_edit_token_len(&name, false), quoted(v.as_str()));
}

#[test]
fn wildcard_regex_is_one_label_and_has_no_backslash() {
    assert_eq!(one_label_regex(".foo-bar.com"), "^[^.]+[.]foo-bar[.]com$");
}

#[test]
fn nginx_weights_give_each_backend_its_share_whatever_its_endpoint_count() {
    // 90/10 over one endpoint each.
    assert_eq!(nx_weights(&[(90, 1), (10, 1)]), [Some(9), Some(1)]);
    // 2 vs 3 endpoints, equal weights: each endpoint of the first weighs 3/2 of the
    // second's, so each backend gets half.
    assert_eq!(nx_weights(&[(1, 2), (1, 3)]), [Some(3), Some(2)]);
    // Weight 0 or no ready endpoint: no share.
    assert_eq!(nx_weights(&[(5, 1), (0, 4), (7, 0)]), [Some(1), None, None]);
    // Too large: scaled, shares kept within 10^-5.
    let w = nx_weights(&[(65535, 7), (1, 9), (3, 11), (2, 13)]);
    assert!(w
        .iter()
        .flatten()
        .all(|w| *w >= 1 && *w <= MAX_NGINX_WEIGHT));
    let share0 = (w[0].unwrap() * 7) as f64
        / (w[0].unwrap() * 7 + w[1].unwrap() * 9 + w[2].unwrap() * 11 + w[3].unwrap() * 13) as f64;
    assert!((share0 - 65535.0 / 65541.0).abs() < 1e-4, "{share0}");
}

#[test]
fn cumulative_shares_end_at_the_scale() {
    let b = |w| WeightedBackend {
        id: "default/a:80".parse().unwrap(),
        weight: w,
        request_headers: Default::default(),
        client_certificate: None,
    };
    assert_eq!(cumulative_shares(&[b(90), b(10)]), [9000, 10000]);
    assert_eq!(cumulative_shares(&[b(0), b(0)]), [0, 0]);
}
