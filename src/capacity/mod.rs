//! Capacity: how fast a model server comes up and how many it takes.
//!
//! # Layout
//! - [`coldstart`] — a model server's start-up, cold and warm, timed from outside to
//!   its first token, with the memory it took
//! - [`advise`] — measured start-ups and a sweep turned into autoscaler settings (a
//!   VerticalPodAutoscaler, replicas, the HPA's lead time)

pub mod advise;
pub mod coldstart;
