//! Replicas of a service behind the run's own balancer, and the disruptions a run
//! puts them through (restarts, or a command of yours at each step).

use serde::{Deserialize, Serialize};

use super::values::Dur;

/// One replica of a service (`url: balanced`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplicaSpec {
    /// Its base URL, e.g. `http://127.0.0.1:9101` (on loopback).
    pub url: String,
    /// The command that starts it, one argument per item (no shell); with it, redline
    /// starts the replica before the run, restarts it under `disruptions:` and stops it
    /// after. Without it, the replica is already running and only balanced over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// The path that answers 2xx once it serves (503 while it loads); default `/health`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
}

/// How the balancer picks a replica.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum BalancePolicy {
    #[default]
    RoundRobin,
    /// The replica with the fewest requests in flight (a stream counts to its end).
    LeastInFlight,
}

/// `balance:` of a `url: balanced` service.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BalanceSpec {
    #[serde(default)]
    pub policy: BalancePolicy,
    /// Passive health checks (default on): a replica that fails `eject_after` requests
    /// in a row (refused or broken connections, 502/503/504) is left out for
    /// `eject_for`, longer each time it is ejected again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eject: Option<bool>,
    /// Default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eject_after: Option<u32>,
    /// Default 5s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eject_for: Option<Dur>,
    /// Resend a request that a replica did not take (refused connection, 503) to
    /// another replica, each once (default on; bodies up to 8 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<bool>,
}

/// One entry of `disruptions:`: a `restart` or a `hook`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DisruptionSpec {
    /// Restart the replicas of a `url: balanced` service one at a time: every `every`,
    /// the next replica is stopped (SIGTERM, SIGKILL after 10 s), started again and
    /// waited for; never two down at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartSpec>,
    /// Run a command of yours every `every` (e.g. `kubectl rollout restart …`), one
    /// argument per item, no shell; `{step}` in an argument is the step's number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<HookSpec>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestartSpec {
    /// The `url: balanced` service whose replicas restart.
    pub service: String,
    pub every: Dur,
    /// Longest a replica may take to serve again before the run says so (default 60s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_within: Option<Dur>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HookSpec {
    pub every: Dur,
    pub command: Vec<String>,
    /// Longest one run of the command may take before it is stopped (default 60s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Dur>,
}
