//! The status the Gateway API objects are told: conditions, listener and Gateway
//! statuses, a route's status per parent.

use super::*;

/// One status condition, as the API writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub type_: &'static str,
    pub status: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Condition {
    pub(super) fn new(
        type_: &'static str,
        status: bool,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Condition {
            type_,
            status,
            reason,
            message: crate::problem::printable(message.into()),
        }
    }
}

/// A listener's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerStatus {
    pub name: String,
    pub attached_routes: u32,
    pub supported_kinds: Vec<&'static str>,
    pub conditions: Vec<Condition>,
}

/// A Gateway's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayStatus {
    pub addresses: Vec<IpAddr>,
    pub conditions: Vec<Condition>,
    pub listeners: Vec<ListenerStatus>,
}

/// An HTTPRoute's status for one parent (a Gateway of ours).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentStatus {
    pub gateway: ObjectKey,
    pub section_name: Option<String>,
    pub port: Option<i32>,
    pub conditions: Vec<Condition>,
}
