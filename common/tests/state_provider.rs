//! The provider a state was planned for: recorded by `plan()`, serialised next to
//! `version`, and optional, so a state published by a watcher older than the field
//! still parses (and means "not recorded").

use k8slb_common::config::parse_global_config;
use k8slb_common::objects::Objects;
use k8slb_common::plan::{plan, PlanOptions};
use k8slb_common::state::{Provider, State};

fn config() -> k8slb_common::config::GlobalConfig {
    parse_global_config(
        r#"{"pools":{"default":{"network":"198.18.0.0/24","range":"198.18.0.10-198.18.0.20"}}}"#,
    )
    .unwrap()
}

#[test]
fn plan_records_the_provider_it_planned_for() {
    for provider in Provider::ALL {
        let opts = PlanOptions {
            provider,
            ..Default::default()
        };
        let s = plan(&config(), &opts, &Objects::default(), None);
        assert_eq!(s.provider, Some(provider));
        let json = s.to_json();
        assert!(
            json.starts_with(&format!(
                "{{\n  \"version\": 1,\n  \"provider\": \"{provider}\",\n"
            )),
            "{json}"
        );
        assert_eq!(State::from_json(&json).unwrap(), s);
    }
}

#[test]
fn a_state_without_the_field_parses_and_round_trips_unchanged() {
    let mut s = plan(
        &config(),
        &PlanOptions::default(),
        &Objects::default(),
        None,
    );
    s.provider = None;
    let old = s.to_json();
    assert!(!old.contains("provider"), "{old}");
    let parsed = State::from_json(&old).unwrap();
    assert_eq!(parsed.provider, None);
    assert_eq!(parsed.to_json(), old);
}

#[test]
fn an_unknown_provider_is_refused() {
    let s = plan(
        &config(),
        &PlanOptions::default(),
        &Objects::default(),
        None,
    );
    let json = s
        .to_json()
        .replace("\"provider\": \"haproxy\"", "\"provider\": \"envoy\"");
    let e = State::from_json(&json).unwrap_err().to_string();
    assert!(e.contains("unknown variant `envoy`"), "{e}");
}

#[test]
fn the_cli_spellings_of_k8slb_proxy_parse() {
    let parse = |s: &str| s.parse::<Provider>();
    assert_eq!(parse(""), Ok(Provider::Haproxy));
    assert_eq!(parse("NGINX"), Ok(Provider::Nginx));
    assert_eq!(parse("kube-proxy"), Ok(Provider::Kubeproxy));
    assert_eq!(parse("kubeproxy"), Ok(Provider::Kubeproxy));
    assert!(parse("envoy")
        .unwrap_err()
        .contains("expected haproxy, nginx or kubeproxy"));
    for p in Provider::ALL {
        assert_eq!(parse(p.as_str()), Ok(p));
    }
}
