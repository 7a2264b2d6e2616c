//! The CEL rules (`x-kubernetes-validations`) under `status` in the Gateway API CRDs,
//! transcribed one by one: a status write can break only these (the rules on `spec` are
//! not evaluated). [`crate::crd`] refuses a CRD file with a status rule not here.

use serde_json::Value;

/// A CEL rule under `status`, transcribed: true when `obj` (the value the rule is
/// attached to) satisfies it. None for a rule not transcribed.
pub(crate) fn status_rule(rule: &str) -> Option<fn(&Value) -> bool> {
    // Gateway (v1, v1beta1) .status.addresses[]:
    // self.type == 'Hostname' ? self.value.matches(r"""^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"""): true
    const HOSTNAME_ADDRESS: &str = r#"self.type == 'Hostname' ? self.value.matches(r"""^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"""): true"#;
    (rule == HOSTNAME_ADDRESS).then_some(hostname_address as fn(&Value) -> bool)
}

fn hostname_address(addr: &Value) -> bool {
    if addr.get("type").and_then(Value::as_str) != Some("Hostname") {
        return true;
    }
    let value = addr
        .get("value")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let rest = value.strip_prefix("*.").unwrap_or(value);
    !rest.is_empty()
        && rest.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}
