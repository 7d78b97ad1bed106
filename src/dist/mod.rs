//! A run spread over processes and machines: segment workers started and supervised
//! here, their folders merged into one run, and the Kubernetes manifests that run them
//! as pods.

pub mod k8s;
pub mod merge;
pub mod workers;
