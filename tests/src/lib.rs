//! The lab harness (see issue 5): network namespaces on a bridge, the real k8slb binaries
//! with real keepalived, HAProxy and nginx, backends that say who they are, and a client.
//!
//! - [`lab`]: namespaces, links, processes, teardown.
//! - [`traffic`]: lab-backend / lab-client, probes and loads.
//! - [`objects`]: the Kubernetes YAML the files source reads.
//! - [`system`]: a whole k8slb deployment in a lab (watcher + actors + backends).
//! - [`l7`]: HTTP statuses, served certificates and TLS Secrets for the L7 tests.
//! - [`kube`]: the fake API server and its relays, for the Kubernetes path.
//! - [`soak`]: the chaos soak and the VIP sampler (who holds which VIP, every 20 ms).
//! - [`grpc`]: a gRPC echo server and client (the conformance suite's GrpcEcho) and a
//!   WebSocket-style upgrade echo, for the gRPC and WebSocket tests through the proxies.
//! - [`container`]: the k8slb image under podman, with the manifests' security contexts.
//! - [`conformance`] and [`conformance_cases`]: the Gateway API conformance runner and its
//!   tests as data.
//! - [`ws`]: the WebSocket protocol (handshake and frames) of the suite's WebSocket test.

pub mod bgp;
pub mod bins;
pub mod conformance;
pub mod conformance_cases;
pub mod container;
pub mod gherkin;
pub mod grpc;
pub mod ingress_conformance;
pub mod kube;
pub mod l7;
pub mod lab;
pub mod traffic;
pub mod wait;
pub mod ws;

pub use lab::{Lab, ProcId, Role};
pub mod objects;
pub mod seed;
pub mod soak;
pub mod system;
