//! The Gateway API served from the upstream v1.6.1 CRD files (`K8SLB_CONFORMANCE_DIR`,
//! default `../shared/conformance`): the kinds and versions they declare, and writes
//! pruned, defaulted and validated against their schemas, refused with kube-apiserver's
//! 422. Without the files every test here fails and says where it looked (never a silent
//! pass): `scripts/test.sh` skips them with that reason.

use k8slb_fakeapi::FakeApi;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{json, Value};

const GROUP: &str = "gateway.networking.k8s.io";

async fn client(api: &FakeApi) -> Client {
    let kubeconfig = Kubeconfig::read_from(api.kubeconfig_path()).expect("kubeconfig parses");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig loads");
    Client::try_from(config).expect("client")
}

fn resource(version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: version.into(),
        api_version: format!("{GROUP}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("a DynamicObject")
}

fn cond(t: &str) -> Value {
    json!({"type": t, "status": "True", "reason": t, "message": "",
           "lastTransitionTime": "2026-11-25T08:00:00Z", "observedGeneration": 1})
}

fn gateway() -> DynamicObject {
    object(json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": "Gateway",
        "metadata": {"name": "gw"},
        "spec": {"gatewayClassName": "k8slb",
                 "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]},
    }))
}

/// A Gateway status the real server accepts: what k8slb's watcher writes.
fn good_gateway_status() -> Value {
    json!({
        "addresses": [{"type": "IPAddress", "value": "198.18.0.1"}],
        "conditions": [cond("Accepted"), cond("Programmed")],
        "listeners": [{"name": "http", "attachedRoutes": 1,
                       "supportedKinds": [{"group": GROUP, "kind": "HTTPRoute"}],
                       "conditions": [cond("Accepted"), cond("Programmed"), cond("ResolvedRefs")]}],
    })
}

fn good_route_status() -> Value {
    json!({"parents": [{"parentRef": {"group": GROUP, "kind": "Gateway", "name": "gw"},
        "controllerName": "k8slb.io/gateway-controller",
        "conditions": [cond("Accepted"), cond("ResolvedRefs")]}]})
}

struct Refusal {
    code: u16,
    reason: String,
    message: String,
    causes: Vec<(String, String)>,
}

fn refusal(err: kube::Error) -> Refusal {
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err:?}")
    };
    Refusal {
        code: status.code,
        reason: status.reason.clone(),
        message: status.message.clone(),
        causes: status
            .details
            .iter()
            .flat_map(|d| d.causes.iter())
            .map(|c| (c.reason.clone(), c.field.clone()))
            .collect(),
    }
}

async fn started() -> (FakeApi, Client) {
    let api = FakeApi::start().await;
    api.install_gateway_api_crds(true);
    let client = client(&api).await;
    (api, client)
}

#[tokio::test]
async fn the_standard_channel_serves_every_kind_and_version_its_crd_files_declare() {
    let (api, client) = started().await;
    let served = |version: &str| {
        let client = client.clone();
        let gv = format!("{GROUP}/{version}");
        async move {
            let mut names: Vec<String> = match client.list_api_group_resources(&gv).await {
                Ok(list) => list
                    .resources
                    .into_iter()
                    .map(|r| r.name)
                    .filter(|n| !n.contains('/'))
                    .collect(),
                Err(_) => Vec::new(),
            };
            names.sort();
            names
        }
    };
    assert_eq!(
        served("v1").await,
        [
            "backendtlspolicies",
            "gatewayclasses",
            "gateways",
            "grpcroutes",
            "httproutes",
            "listenersets",
            "referencegrants",
            "tcproutes",
            "tlsroutes",
            "udproutes"
        ]
    );
    assert_eq!(
        served("v1beta1").await,
        [
            "gatewayclasses",
            "gateways",
            "httproutes",
            "referencegrants"
        ]
    );
    // Declared but not served in the standard channel.
    assert!(served("v1alpha2").await.is_empty());
    api.install_gateway_api_experimental_crds();
    assert_eq!(
        served("v1alpha2").await,
        ["tcproutes", "tlsroutes", "udproutes"]
    );
    assert_eq!(
        served("v1alpha3").await,
        ["backendtlspolicies", "tlsroutes"]
    );
    let x = client
        .list_api_group_resources("gateway.networking.x-k8s.io/v1alpha1")
        .await
        .expect("the experimental x-k8s.io group");
    let mut x: Vec<String> = x
        .resources
        .into_iter()
        .map(|r| r.name)
        .filter(|n| !n.contains('/'))
        .collect();
    x.sort();
    assert_eq!(x, ["xbackends", "xbackendtrafficpolicies", "xmeshes"]);

    // One object, every version: written at v1, read at v1beta1.
    let v1: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &resource("v1", "Gateway", "gateways"),
    );
    v1.create(&PostParams::default(), &gateway()).await.unwrap();
    let beta: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &resource("v1beta1", "Gateway", "gateways"),
    );
    let read = beta
        .get("gw")
        .await
        .expect("the v1 Gateway read as v1beta1");
    assert_eq!(read.types.unwrap().api_version, format!("{GROUP}/v1beta1"));
}

#[tokio::test]
async fn a_new_gateway_reads_back_pruned_and_with_its_crds_defaults() {
    let (_api, client) = started().await;
    let gws: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &resource("v1", "Gateway", "gateways"),
    );
    let mut gw = gateway();
    gw.data["spec"]["notInTheSchema"] = json!(true);
    gw.data["status"] = good_gateway_status();
    let created = gws.create(&PostParams::default(), &gw).await.unwrap();
    assert!(
        created.data["spec"].get("notInTheSchema").is_none(),
        "pruned"
    );
    // Create drops the status; the CRD's default gives the Pending conditions back.
    let conditions = &created.data["status"]["conditions"];
    assert_eq!(conditions[0]["type"], "Accepted");
    assert_eq!(conditions[0]["reason"], "Pending");
    assert_eq!(conditions[1]["type"], "Programmed");
    assert_eq!(conditions[1]["status"], "Unknown");
    // A listener's defaulted allowedRoutes.
    assert_eq!(
        created.data["spec"]["listeners"][0]["allowedRoutes"]["namespaces"]["from"],
        "Same"
    );

    // A status write: a missing supportedKinds group is defaulted, a null is pruned.
    let mut status = good_gateway_status();
    status["listeners"][0]["supportedKinds"][0]
        .as_object_mut()
        .unwrap()
        .remove("group");
    status["attachedListenerSets"] = Value::Null;
    let written = gws
        .patch_status(
            "gw",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .expect("a valid status");
    assert_eq!(
        written.data["status"]["listeners"][0]["supportedKinds"][0]["group"],
        GROUP
    );
    assert!(written.data["status"].get("attachedListenerSets").is_none());
}

/// One broken status per rule class of the schema, each refused as kube-apiserver refuses
/// it: 422 Invalid, the qualified kind in the message, the cause's reason and field.
#[tokio::test]
async fn a_status_the_real_apiserver_refuses_is_refused_with_its_422() {
    let (_api, client) = started().await;
    let gws: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &resource("v1", "Gateway", "gateways"),
    );
    gws.create(&PostParams::default(), &gateway())
        .await
        .unwrap();
    let routes: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &resource("v1", "HTTPRoute", "httproutes"),
    );
    routes
        .create(
            &PostParams::default(),
            &object(
                json!({"apiVersion": format!("{GROUP}/v1"), "kind": "HTTPRoute",
                "metadata": {"name": "r"}, "spec": {"parentRefs": [{"name": "gw"}]}}),
            ),
        )
        .await
        .unwrap();

    // Accepted as a whole first: the cases below break one thing each.
    gws.replace_status(
        "gw",
        &PostParams::default(),
        &object(
            json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Gateway",
            "metadata": {"name": "gw"}, "status": good_gateway_status()}),
        ),
    )
    .await
    .expect("a conforming Gateway status");
    routes
        .patch_status(
            "r",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": good_route_status()})),
        )
        .await
        .expect("a conforming route status");

    let long_type = "x".repeat(317);
    let cases: Vec<(&str, &str, Value, &str, &str)> = vec![
        // (what, kind, the value at a JSON pointer, the cause reason, its field)
        (
            "type",
            "/listeners/0/attachedRoutes",
            json!("two"),
            "FieldValueInvalid",
            "status.listeners[0].attachedRoutes",
        ),
        (
            "enum",
            "/conditions/0/status",
            json!("Yes"),
            "FieldValueNotSupported",
            "status.conditions[0].status",
        ),
        (
            "maxLength",
            "/conditions/0/type",
            json!(long_type),
            "FieldValueTooLong",
            "status.conditions[0].type",
        ),
        (
            "minLength",
            "/addresses/0/value",
            json!(""),
            "FieldValueInvalid",
            "status.addresses[0].value",
        ),
        (
            "pattern",
            "/conditions/0/reason",
            json!("Not Allowed"),
            "FieldValueInvalid",
            "status.conditions[0].reason",
        ),
        (
            "minimum",
            "/conditions/0/observedGeneration",
            json!(-1),
            "FieldValueInvalid",
            "status.conditions[0].observedGeneration",
        ),
        (
            "maxItems",
            "/conditions",
            json!((0..9).map(|i| cond(&format!("C{i}"))).collect::<Vec<_>>()),
            "FieldValueTooMany",
            "status.conditions",
        ),
        (
            "format date-time",
            "/conditions/0/lastTransitionTime",
            json!("yesterday"),
            "FieldValueInvalid",
            "status.conditions[0].lastTransitionTime",
        ),
        (
            "list-type map",
            "/conditions",
            json!([cond("Accepted"), cond("Accepted")]),
            "FieldValueDuplicate",
            "status.conditions[1]",
        ),
        (
            "oneOf/anyOf ipv4|ipv6",
            "/addresses/0/value",
            json!("not-an-ip"),
            "FieldValueInvalid",
            "status.addresses[0]",
        ),
        (
            "CEL Hostname",
            "/addresses/0",
            json!({"type": "Hostname", "value": "LB.Example.com"}),
            "FieldValueInvalid",
            "status.addresses[0]",
        ),
        (
            "maxItems addresses",
            "/addresses",
            json!(vec![json!({"value": "198.18.0.1"}); 17]),
            "FieldValueTooMany",
            "status.addresses",
        ),
    ];
    for (what, pointer, value, reason, field) in cases {
        let mut status = good_gateway_status();
        *status.pointer_mut(pointer).unwrap() = value;
        let r = refusal(
            gws.patch_status(
                "gw",
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
            .expect_err(what),
        );
        assert_eq!((r.code, r.reason.as_str()), (422, "Invalid"), "{what}");
        assert!(
            r.message
                .starts_with("Gateway.gateway.networking.k8s.io \"gw\" is invalid: "),
            "{what}: {}",
            r.message
        );
        assert!(
            r.causes.contains(&(reason.to_string(), field.to_string())),
            "{what}: {:?}",
            r.causes
        );
    }
    // The whole message, as kube-apiserver words it.
    let mut status = good_gateway_status();
    status["conditions"][0]["status"] = json!("Yes");
    let r = refusal(
        gws.patch_status(
            "gw",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        r.message,
        "Gateway.gateway.networking.k8s.io \"gw\" is invalid: status.conditions[0].status: \
         Unsupported value: \"Yes\": supported values: \"True\", \"False\", \"Unknown\""
    );
    // required
    let mut status = good_gateway_status();
    status["listeners"][0]
        .as_object_mut()
        .unwrap()
        .remove("attachedRoutes");
    let r = refusal(
        gws.patch_status(
            "gw",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(r.code, 422);
    assert_eq!(
        r.causes,
        [(
            "FieldValueRequired".to_string(),
            "status.listeners[0].attachedRoutes".to_string()
        )]
    );

    // A route's parents: minItems of conditions, the controllerName pattern, required.
    for (what, pointer, value, reason, field) in [
        (
            "minItems",
            "/parents/0/conditions",
            json!([]),
            "FieldValueInvalid",
            "status.parents[0].conditions",
        ),
        (
            "pattern",
            "/parents/0/controllerName",
            json!("k8slb"),
            "FieldValueInvalid",
            "status.parents[0].controllerName",
        ),
        (
            "required",
            "/parents/0/parentRef",
            json!({}),
            "FieldValueRequired",
            "status.parents[0].parentRef.name",
        ),
    ] {
        let mut status = good_route_status();
        *status.pointer_mut(pointer).unwrap() = value;
        let r = refusal(
            routes
                .patch_status(
                    "r",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"status": status})),
                )
                .await
                .expect_err(what),
        );
        assert_eq!(r.code, 422, "{what}");
        assert!(
            r.causes.contains(&(reason.to_string(), field.to_string())),
            "{what}: {:?}",
            r.causes
        );
    }
    // Two errors at once: both listed, in brackets.
    let mut status = good_route_status();
    status["parents"][0]["controllerName"] = json!("k8slb");
    status["parents"][0]["conditions"][0]["status"] = json!("Yes");
    let r = refusal(
        routes
            .patch_status(
                "r",
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(r.causes.len(), 2, "{:?}", r.causes);
    assert!(r.message.contains(": [status.parents[0]"), "{}", r.message);
}

#[tokio::test]
async fn a_spec_the_schema_refuses_is_refused_on_create_and_update() {
    let (_api, client) = started().await;
    let gws: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &resource("v1", "Gateway", "gateways"),
    );
    let mut gw = gateway();
    gw.data["spec"]["listeners"][0]["port"] = json!(70000);
    let r = refusal(gws.create(&PostParams::default(), &gw).await.unwrap_err());
    assert_eq!(r.code, 422);
    assert_eq!(
        r.causes,
        [(
            "FieldValueInvalid".to_string(),
            "spec.listeners[0].port".to_string()
        )]
    );
    let mut gw = gateway();
    gw.data["spec"]
        .as_object_mut()
        .unwrap()
        .remove("gatewayClassName");
    let r = refusal(gws.create(&PostParams::default(), &gw).await.unwrap_err());
    assert_eq!(
        r.causes,
        [(
            "FieldValueRequired".to_string(),
            "spec.gatewayClassName".to_string()
        )]
    );
    gws.create(&PostParams::default(), &gateway())
        .await
        .unwrap();
    let r = refusal(
        gws.patch(
            "gw",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}, {"name": "http", "port": 81, "protocol": "HTTP"}]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(r.code, 422);
    assert!(
        r.causes.contains(&(
            "FieldValueDuplicate".to_string(),
            "spec.listeners[1]".to_string()
        )),
        "{:?}",
        r.causes
    );
}
