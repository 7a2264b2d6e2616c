//! The translation layer: Kubernetes objects (Ingresses, Gateway API) into the route
//! model of [`crate::routes`], with every condition and problem that says what is not
//! served and why. Pure: the plan calls it once per round, on the addresses it
//! allocated, and the statuses it decides come back with the state
//! ([`crate::plan::plan_round`]).
//!
//! - [`refs`]: references between objects, one implementation each: a backend to a
//!   Service's port and its endpoints, a TLS reference to a Secret's certificate, and
//!   ReferenceGrants;
//! - [`ingress`]: Ingresses and IngressClasses;
//! - [`gateway`]: GatewayClasses, Gateways and their routes (classes, listeners,
//!   attachment, rules, backends, status).

pub mod gateway;
pub mod ingress;
pub mod refs;
