//! Our GatewayClasses: which are ours, and the pool their parameters name.

use super::*;

/// The key of a `parametersRef` ConfigMap that names the pool of a class's Gateways.
pub const POOL_PARAMETER: &str = "pool";

/// The pools that exist (to check a class's parameters against), or `None` to take any
/// valid pool name.
pub type KnownPools<'a> = Option<&'a BTreeSet<crate::names::PoolName>>;

/// The pool a GatewayClass of ours gives its Gateways (`Ok(None)`: no `parametersRef`,
/// the default pool), or why its parameters are invalid. The parameters are a ConfigMap
/// (core group), conventionally in k8slb's namespace, whose `data.pool` names a pool.
pub fn class_pool(
    c: &GatewayClass,
    configmaps: &[k8s_openapi::api::core::v1::ConfigMap],
    pools: KnownPools<'_>,
) -> Result<Option<crate::names::PoolName>, String> {
    let Some(p) = &c.spec.parameters_ref else {
        return Ok(None);
    };
    let shown = |s: &str| crate::problem::cut(s, 63);
    if !p.group.is_empty() || p.kind != "ConfigMap" {
        return Err(format!(
            "parametersRef {}/{} is not a ConfigMap (group \"\"), the only parameters k8slb reads",
            shown(&p.group),
            shown(&p.kind)
        ));
    }
    let Some(ns) = p.namespace.as_deref() else {
        return Err(
            "parametersRef needs the namespace of its ConfigMap (k8slb's namespace)".into(),
        );
    };
    let Some(cm) = configmaps.iter().find(|m| {
        m.metadata.namespace.as_deref() == Some(ns)
            && m.metadata.name.as_deref() == Some(p.name.as_str())
    }) else {
        return Err(format!(
            "ConfigMap {}/{} does not exist",
            shown(ns),
            shown(&p.name)
        ));
    };
    let Some(text) = cm.data.as_ref().and_then(|d| d.get(POOL_PARAMETER)) else {
        return Err(format!(
            "ConfigMap {}/{} has no data.{POOL_PARAMETER}",
            shown(ns),
            shown(&p.name)
        ));
    };
    let pool: crate::names::PoolName = text.parse().map_err(|e| {
        format!(
            "ConfigMap {}/{}: data.{POOL_PARAMETER}: {e}",
            shown(ns),
            shown(&p.name)
        )
    })?;
    if pools.is_some_and(|known| !known.contains(&pool)) {
        return Err(format!(
            "ConfigMap {}/{}: pool {pool} does not exist",
            shown(ns),
            shown(&p.name)
        ));
    }
    Ok(Some(pool))
}

/// The names of our GatewayClasses, with their conditions.
pub fn our_classes(
    classes: &[GatewayClass],
    configmaps: &[k8s_openapi::api::core::v1::ConfigMap],
    pools: KnownPools<'_>,
) -> BTreeMap<String, Vec<Condition>> {
    classes
        .iter()
        .filter(|c| c.spec.controller_name == CONTROLLER)
        .filter_map(|c| {
            let name = c.metadata.name.clone()?;
            let cond = match class_pool(c, configmaps, pools) {
                Ok(None) => Condition::accepted(true, ConditionReason::Accepted,
                    "k8slb serves this class; its Gateways use the default pool unless they name one",
                ),
                Ok(Some(pool)) => Condition::accepted(true, ConditionReason::Accepted,
                    format!("k8slb serves this class; its Gateways use pool {pool} unless they name one"),
                ),
                Err(why) => Condition::accepted(false, ConditionReason::InvalidParameters, why),
            };
            Some((name, vec![cond]))
        })
        .collect()
}
