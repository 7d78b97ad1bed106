//! `url: balanced` services and `disruptions:`, checked: replicas on this machine with
//! their commands and ready paths, the balancer's settings, and restarts that name a
//! balanced service whose replicas redline starts.

use super::*;
use crate::chaos::balance::{Balance, Ejection, Policy};
use crate::spec::replicas::{BalancePolicy, ReplicaSpec};

/// One replica of a balanced service.
#[derive(Debug, Clone, PartialEq)]
pub struct Replica {
    /// `http://host:port`, no trailing slash.
    pub url: String,
    /// Empty: already running, not restarted.
    pub command: Vec<String>,
    /// `/health` unless the spec says otherwise.
    pub ready: String,
}

/// What a run does to its services while it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Disruption {
    /// Every `every`, the next replica of `service` is stopped and started again.
    Restart {
        service: String,
        every: Duration,
        ready_within: Duration,
    },
    /// Every `every`, `command` runs (`{step}` replaced by the step's number).
    Hook {
        every: Duration,
        command: Vec<String>,
        timeout: Duration,
    },
}

impl Disruption {
    pub fn every(&self) -> Duration {
        match self {
            Disruption::Restart { every, .. } | Disruption::Hook { every, .. } => *every,
        }
    }
}

/// The endpoint of a `url: balanced` service.
pub(super) fn balanced_from_spec(
    s: &ServiceSpec,
    path: &str,
    problems: &mut Problems,
) -> Option<Endpoint> {
    if s.replicas.is_empty() {
        problems.add(
            &format!("{path}.replicas"),
            "`url: balanced` needs its replicas".into(),
            Some("add e.g. `replicas: [{ url: \"http://127.0.0.1:9101\" }, { url: \"http://127.0.0.1:9102\" }]`".into()),
        );
        return None;
    }
    let replicas: Vec<Option<Replica>> = s
        .replicas
        .iter()
        .enumerate()
        .map(|(i, r)| replica_from_spec(r, &format!("{path}.replicas[{i}]"), problems))
        .collect();
    let b = s.balance.clone().unwrap_or_default();
    let eject_after = b.eject_after.unwrap_or(3);
    if eject_after == 0 {
        problems.add(
            &format!("{path}.balance.eject_after"),
            "must be at least 1".into(),
            Some("write `eject: false` to never eject a replica".into()),
        );
    }
    let balance = Balance {
        policy: match b.policy {
            BalancePolicy::RoundRobin => Policy::RoundRobin,
            BalancePolicy::LeastInFlight => Policy::LeastInFlight,
        },
        ejection: b.eject.unwrap_or(true).then(|| Ejection {
            after: eject_after.max(1),
            base: b.eject_for.map_or(Duration::from_secs(5), |d| d.0),
        }),
        retry: b.retry.unwrap_or(true),
    };
    Some(Endpoint::Balanced {
        replicas: replicas.into_iter().collect::<Option<Vec<_>>>()?,
        balance,
    })
}

fn replica_from_spec(r: &ReplicaSpec, path: &str, problems: &mut Problems) -> Option<Replica> {
    let url = r.url.trim_end_matches('/');
    let problem = match crate::chaos::upstream_uri(url, true) {
        Err(e) => Some(e.to_string()),
        Ok(_) if crate::chaos::upstream_uri(url, false).is_err() => {
            Some(format!("`{url}` is not on loopback"))
        }
        Ok(_) => None,
    };
    if let Some(problem) = problem {
        problems.add(
            &format!("{path}.url"),
            problem,
            Some("a replica runs on this machine: e.g. `http://127.0.0.1:9101`".into()),
        );
        return None;
    }
    let ready = r.ready.clone().unwrap_or_else(|| "/health".into());
    if !ready.starts_with('/') {
        problems.add(
            &format!("{path}.ready"),
            format!("`{ready}` is not a path"),
            Some("write e.g. `/health`".into()),
        );
        return None;
    }
    if r.command.first().is_some_and(|c| c.trim().is_empty()) {
        problems.add(
            &format!("{path}.command"),
            "the program is empty".into(),
            Some(
                "one argument per item, the program first: `[redline, sim, --port, \"9101\"]`"
                    .into(),
            ),
        );
        return None;
    }
    Some(Replica {
        url: url.strip_suffix("/v1").unwrap_or(url).to_owned(),
        command: r.command.clone(),
        ready,
    })
}

/// `disruptions:`, each checked against the services it names.
pub(super) fn disruptions_from_spec(
    spec: &InferenceSpec,
    services: &BTreeMap<String, Service>,
    problems: &mut Problems,
) -> Vec<Disruption> {
    let mut out = Vec::new();
    for (i, d) in spec.disruptions.iter().enumerate() {
        let at = format!("spec.disruptions[{i}]");
        let positive = |every: Duration, field: &str, problems: &mut Problems| {
            if every.is_zero() {
                problems.add(
                    &format!("{at}.{field}.every"),
                    "must be more than 0".into(),
                    Some("e.g. `every: 30s`".into()),
                );
            }
        };
        match (&d.restart, &d.hook) {
            (Some(r), None) => {
                positive(r.every.0, "restart", problems);
                let restartable = match services.get(&r.service).map(|s| &s.endpoint) {
                    Some(Endpoint::Balanced { replicas, .. }) => {
                        replicas.iter().all(|r| !r.command.is_empty())
                    }
                    _ => false,
                };
                if !restartable {
                    problems.add(
                        &format!("{at}.restart.service"),
                        format!(
                            "`{}` is not a `url: balanced` service whose replicas all have a `command`",
                            r.service
                        ),
                        Some("name a balanced service and give each replica the command that starts it".into()),
                    );
                }
                out.push(Disruption::Restart {
                    service: r.service.clone(),
                    every: r.every.0,
                    ready_within: r.ready_within.map_or(Duration::from_secs(60), |d| d.0),
                });
            }
            (None, Some(h)) => {
                positive(h.every.0, "hook", problems);
                if h.command.first().is_none_or(|c| c.trim().is_empty()) {
                    problems.add(
                        &format!("{at}.hook.command"),
                        "the program is empty".into(),
                        Some("one argument per item, the program first".into()),
                    );
                }
                out.push(Disruption::Hook {
                    every: h.every.0,
                    command: h.command.clone(),
                    timeout: h.timeout.map_or(Duration::from_secs(60), |d| d.0),
                });
            }
            _ => problems.add(
                &at,
                "a disruption is one `restart` or one `hook`".into(),
                Some("e.g. `- restart: { service: llm, every: 30s }`".into()),
            ),
        }
    }
    out
}
