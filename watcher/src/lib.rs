//! k8slb watcher library.
