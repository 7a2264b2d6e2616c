//! k8slb-common: what the watcher and the actor share, and nothing that does I/O.
//!
//! - [`names`]: validated names (the only strings that reach a config file);
//! - [`ipam`]: address ranges and range sets with 128-bit arithmetic;
//! - [`bgp`]: BGP mode's typed settings (pools announced through FRR);
//! - [`config`]: the global config (k8slb's JSON), parsed and checked as a whole;
//! - [`objects`]: the Kubernetes objects the plan reads, and how files of them are read;
//! - [`generations`]: `metadata.generation` as the API server keeps it, for the files source;
//! - [`plan`]: the pure allocation: objects + config + previous state -> state;
//! - [`problem`]: typed problems (reason, object) as the state, Events and metrics carry them;
//! - [`state`]: the published state document;
//! - [`routes`]: the L7 route model (listeners, hosts, rules, backends), source-neutral;
//! - [`ingress`]: Ingresses -> routes, pure;
//! - [`gateway`]: Gateway API objects -> routes and their status conditions, pure;
//! - [`owners`]: which object contributed each part of a state (the actor's quarantine);
//! - [`report`]: an actor's node report (what its proxy refuses) as the watcher reads it;
//! - [`features`]: the optional features an actor renders (version skew), and the fleet's;
//! - [`tenancy`]: which namespace owns a host;
//! - [`app_protocol`]: the protocol a proxy speaks to a backend (`appProtocol` h2c);
//! - [`endpoints`]: EndpointSlices -> backends (the plan's Services and the routes);
//! - [`certs`]: how TLS Secrets reach the nodes apart from the state;
//! - [`scale`]: N addresses per pool (`loadbalancer/scale`);
//! - [`publish`]: how the state is compressed and sharded for ConfigMaps;
//! - [`debounce`]: bursts of changes joined, as a pure timing state machine (both binaries);
//! - `logging` (feature `logging`): the one log setup of both binaries;
//! - `fs` (feature `fs`): atomic file writes, the binaries' only way to replace a file;
//! - `admin` (feature `admin`): the admin HTTP server (`/livez`, `/readyz`, `/metrics`).

#[cfg(feature = "admin")]
pub mod admin;
pub mod annotations;
pub mod app_protocol;
pub mod bgp;
pub mod certs;
pub mod config;
pub mod debounce;
pub mod endpoints;
pub mod features;
#[cfg(feature = "fs")]
pub mod fs;
pub mod generations;
pub mod ipam;
#[cfg(feature = "logging")]
pub mod logging;
pub mod names;
pub mod objects;
pub mod owners;
pub mod plan;
pub mod problem;
pub mod publish;
pub mod report;
pub mod routes;
pub mod scale;
pub mod state;
pub mod tenancy;
pub mod translate;
/// The Gateway API translation ([`translate::gateway`]), at its historical path.
pub use translate::gateway;
/// The Ingress translation ([`translate::ingress`]), at its historical path.
pub use translate::ingress;
#[cfg(feature = "testing")]
pub mod testing;
