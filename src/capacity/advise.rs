//! `redline advise`: measured start-up and capacity turned into autoscaler settings — a
//! `VerticalPodAutoscaler` by the source's rules (§2.4), replicas for a target rate
//! from a sweep's knee, and the lead time a HorizontalPodAutoscaler needs — each
//! number saying which measurement it came from.
//!
//! The rules (DESIGN.md, "Capacity advice"):
//! - cold pods (`cachePolicy: cold`, the default): `minAllowed.memory` = (weights +
//!   peak activations) × 1.3, the weights and activations being the most resident
//!   memory any cold start reached;
//! - warm pods (`cachePolicy: warm`): `minAllowed.memory` = resident static memory ×
//!   1.05, the static memory being the median steady memory of the warm starts;
//! - `maxAllowed.memory` = `resourceLimits.memory` when the spec gives it, else the
//!   cold rule's figure;
//! - `updateMode: Initial` when a cold start takes over 30 s to its first token (an
//!   eviction to resize would cost a replica that long), else `Recreate`;
//! - replicas = ⌈target rate ÷ the knee⌉, within `minReplicas`…`maxReplicas`;
//! - scale-up lead time = p90 start to first token + the HPA's 15 s sync period.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::spec::{CachePolicy, SpecFile};

/// Headroom of the cold rule over the measured peak (the source's 1.3).
pub const COLD_FACTOR: f64 = 1.3;
/// Headroom of the warm rule over the static memory (the source's 1.05).
pub const WARM_FACTOR: f64 = 1.05;
/// Past this start-up to first token, pods are sized only when created.
pub const EVICTION_COST_S: f64 = 30.0;
/// The HorizontalPodAutoscaler's default sync period.
pub const HPA_SYNC_S: f64 = 15.0;

/// What the measurements say, each figure with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// Most resident memory of a cold start, bytes.
    pub cold_peak: Sourced<u64>,
    /// Median steady memory of warm starts (of cold ones when there are none), bytes.
    pub steady: Sourced<u64>,
    /// p90 time to first token of the starts the policy makes, seconds.
    pub start_p90_s: Sourced<f64>,
    /// Highest rate one replica sustained, and whether the sweep found its knee.
    pub knee: Option<(Sourced<f64>, bool)>,
}

/// A figure and the sentence saying where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Sourced<T> {
    pub value: T,
    pub from: String,
}

/// What the spec adds: names, the policy, limits and replica bounds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bounds {
    pub name: String,
    pub policy: Option<CachePolicy>,
    pub memory_limit: Option<(u64, String)>,
    pub min_replicas: Option<u32>,
    pub max_replicas: Option<u32>,
}

impl Bounds {
    pub fn of(spec: &SpecFile) -> Result<Bounds, String> {
        let model = spec.model_load.as_ref();
        let limit = model.and_then(|m| m.resource_limits.get("memory"));
        let memory_limit = match limit {
            Some(text) => Some((parse_quantity(text)?, text.clone())),
            None => None,
        };
        Ok(Bounds {
            name: spec.metadata.name.clone(),
            policy: model.and_then(|m| m.cache_policy),
            memory_limit,
            min_replicas: spec.scale.as_ref().and_then(|s| s.min_replicas),
            max_replicas: spec.scale.as_ref().and_then(|s| s.max_replicas),
        })
    }
}

/// Reads the folders: `coldstart.json` from `redline coldstart`, `summary.json` with
/// a sweep from `redline run`. The start figures follow `policy`.
pub fn measure(dirs: &[PathBuf], policy: CachePolicy) -> Result<Measured, String> {
    let mut starts = Vec::new();
    let mut knee = None;
    for dir in dirs {
        let coldstart = dir.join("coldstart.json");
        if coldstart.exists() {
            let text = std::fs::read_to_string(&coldstart)
                .map_err(|e| format!("cannot read {}: {e}", coldstart.display()))?;
            let json: Value = serde_json::from_str(&text)
                .map_err(|e| format!("{}: not JSON: {e}", coldstart.display()))?;
            let runs = json["runs"].as_array().cloned().unwrap_or_default();
            starts.extend(runs.into_iter().map(|run| (dir.clone(), run)));
        } else if crate::folder::RunFolder::new(dir).summary().exists() {
            knee = Some(knee_of(dir)?);
        } else {
            return Err(format!(
                "{}: neither coldstart.json (redline coldstart) nor summary.json (redline run) is there",
                dir.display()
            ));
        }
    }
    let cold: Vec<&(PathBuf, Value)> = starts.iter().filter(|(_, r)| r["kind"] == "cold").collect();
    let warm: Vec<&(PathBuf, Value)> = starts.iter().filter(|(_, r)| r["kind"] != "cold").collect();
    if cold.is_empty() {
        return Err(
            "no cold starts measured: run `redline coldstart --cold N` and pass its folder".into(),
        );
    }
    let cold_peak = most(&cold, "peak_rss_bytes", "peak RSS, most of");
    let steady_of = if warm.is_empty() { &cold } else { &warm };
    let steady = median(steady_of, "steady_rss_bytes", "steady RSS, median of");
    let policy_starts = match policy {
        CachePolicy::Warm if !warm.is_empty() => &warm,
        _ => &cold,
    };
    let start_p90_s = p90_first_token(policy_starts);
    Ok(Measured {
        cold_peak,
        steady,
        start_p90_s,
        knee,
    })
}

fn sources(starts: &[&(PathBuf, Value)]) -> String {
    let mut dirs: Vec<String> = starts
        .iter()
        .map(|(d, _)| d.display().to_string())
        .collect();
    dirs.dedup();
    let kind = starts[0].1["kind"].as_str().unwrap_or("?");
    format!("{} {kind} starts in {}", starts.len(), dirs.join(", "))
}

fn most(starts: &[&(PathBuf, Value)], field: &str, what: &str) -> Sourced<u64> {
    let value = starts
        .iter()
        .filter_map(|(_, r)| r[field].as_u64())
        .max()
        .unwrap_or(0);
    Sourced {
        value,
        from: format!("{what} {}", sources(starts)),
    }
}

fn median(starts: &[&(PathBuf, Value)], field: &str, what: &str) -> Sourced<u64> {
    let mut values: Vec<u64> = starts
        .iter()
        .filter_map(|(_, r)| r[field].as_u64())
        .collect();
    values.sort_unstable();
    Sourced {
        value: values
            .get(values.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or(0),
        from: format!("{what} {}", sources(starts)),
    }
}

fn p90_first_token(starts: &[&(PathBuf, Value)]) -> Sourced<f64> {
    let mut values: Vec<f64> = starts
        .iter()
        .filter_map(|(_, r)| r["first_token_ms"].as_f64().or(r["ready_ms"].as_f64()))
        .collect();
    values.sort_by(f64::total_cmp);
    Sourced {
        value: crate::report::compare::quantile(&values, 0.9) / 1e3,
        from: format!("p90 start to first token of {}", sources(starts)),
    }
}

fn knee_of(dir: &Path) -> Result<(Sourced<f64>, bool), String> {
    let summary = crate::report::read_summary(dir).map_err(|e| format!("{e:#}"))?;
    let sweep = summary.sweep.ok_or_else(|| {
        format!(
            "{}: not a sweep: replicas need a sweep's knee (`load: [{{ sweep: … }}]`)",
            dir.display()
        )
    })?;
    Ok(match sweep.knee_rate_per_s {
        Some(rate) if !sweep.every_rate_sustained => (
            Sourced {
                value: rate,
                from: format!("the sweep's knee in {}", dir.display()),
            },
            true,
        ),
        _ => (
            Sourced {
                value: sweep.highest_rate_per_s,
                from: format!(
                    "the highest rate of {}, which held: the knee is above it",
                    dir.display()
                ),
            },
            false,
        ),
    })
}

/// The advice: a VPA object and the lines that explain it.
#[derive(Debug, Clone, PartialEq)]
pub struct Advice {
    pub vpa: Value,
    pub min_allowed: u64,
    pub max_allowed: u64,
    pub replicas: Option<u32>,
    pub lead_time_s: f64,
    /// Why each number is what it is, and what to watch.
    pub notes: Vec<String>,
}

/// Applies the rules to the measurements.
pub fn advise(measured: &Measured, bounds: &Bounds, target_rate: Option<f64>) -> Advice {
    let policy = bounds.policy.unwrap_or(CachePolicy::Cold);
    let cold_need = (measured.cold_peak.value as f64 * COLD_FACTOR).ceil() as u64;
    let mut notes = Vec::new();
    let min_allowed = match policy {
        CachePolicy::Cold => {
            notes.push(format!(
                "minAllowed.memory {} = {} × {COLD_FACTOR}, rounded up (cold pods: weights + peak activations, {})",
                quantity(cold_need),
                mib(measured.cold_peak.value),
                measured.cold_peak.from
            ));
            cold_need
        }
        CachePolicy::Warm => {
            let warm = (measured.steady.value as f64 * WARM_FACTOR).ceil() as u64;
            notes.push(format!(
                "minAllowed.memory {} = {} × {WARM_FACTOR}, rounded up (warm pods: resident static memory, {})",
                quantity(warm),
                mib(measured.steady.value),
                measured.steady.from
            ));
            warm
        }
    };
    let max_allowed = match &bounds.memory_limit {
        Some((limit, text)) => {
            notes.push(format!(
                "maxAllowed.memory {} = resourceLimits.memory {text}",
                quantity(*limit)
            ));
            if *limit < cold_need {
                notes.push(format!(
                    "WARNING: resourceLimits.memory {text} is below a cold start's need {}: a cold pod would be OOM-killed while loading",
                    quantity(cold_need)
                ));
            }
            (*limit).max(min_allowed)
        }
        None => {
            notes.push(format!(
                "maxAllowed.memory {} = the cold rule's figure (give resourceLimits.memory in the ModelLoadSpec to let VPA go higher)",
                quantity(cold_need)
            ));
            cold_need.max(min_allowed)
        }
    };
    let start = &measured.start_p90_s;
    let update_mode = if start.value > EVICTION_COST_S {
        notes.push(format!(
            "updateMode Initial: a start takes {:.1} s to its first token ({}), over {EVICTION_COST_S:.0} s; evicting a pod to resize it would cost a replica that long, so pods are sized when created",
            start.value, start.from
        ));
        "Initial"
    } else {
        notes.push(format!(
            "updateMode Recreate: a start takes {:.1} s to its first token ({}), under {EVICTION_COST_S:.0} s, so evicting to resize is cheap",
            start.value, start.from
        ));
        "Recreate"
    };
    let lead_time_s = start.value + HPA_SYNC_S;
    notes.push(format!(
        "HPA scale-up lead time {lead_time_s:.1} s = {:.1} s to first token + the HPA's {HPA_SYNC_S:.0} s sync period: scale on a signal that rises at least this long before the load does",
        start.value
    ));
    let replicas = target_rate.and_then(|rate| replicas(rate, measured, bounds, &mut notes));
    let name = if bounds.name.is_empty() {
        "model-server"
    } else {
        &bounds.name
    };
    let vpa = json!({
        "apiVersion": "autoscaling.k8s.io/v1",
        "kind": "VerticalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "updatePolicy": {"updateMode": update_mode},
            "resourcePolicy": {"containerPolicies": [{
                "containerName": "*",
                "controlledResources": ["memory"],
                "minAllowed": {"memory": quantity(min_allowed)},
                "maxAllowed": {"memory": quantity(max_allowed)},
            }]},
        },
    });
    Advice {
        vpa,
        min_allowed,
        max_allowed,
        replicas,
        lead_time_s,
        notes,
    }
}

fn replicas(
    rate: f64,
    measured: &Measured,
    bounds: &Bounds,
    notes: &mut Vec<String>,
) -> Option<u32> {
    let Some((knee, found)) = &measured.knee else {
        notes.push("replicas: no sweep given (pass a `redline run` folder of a sweep)".into());
        return None;
    };
    let needed = (rate / knee.value).ceil().max(1.0) as u32;
    let bounded = needed
        .max(bounds.min_replicas.unwrap_or(1))
        .min(bounds.max_replicas.unwrap_or(u32::MAX));
    let at_most = if *found { "" } else { "at most " };
    notes.push(format!(
        "replicas {at_most}{needed} = ⌈{rate} /s ÷ {:.2} /s per replica⌉ ({})",
        knee.value, knee.from
    ));
    if bounded != needed {
        notes.push(format!(
            "replicas {bounded}: held within minReplicas…maxReplicas ({}…{}){}",
            bounds.min_replicas.unwrap_or(1),
            bounds.max_replicas.map_or("∞".into(), |m| m.to_string()),
            if bounded < needed {
                " — too few for the target rate"
            } else {
                ""
            }
        ));
    }
    Some(bounded)
}

/// A Kubernetes quantity (`24Gi`, `512Mi`, `4G`, `1000`) in bytes.
pub fn parse_quantity(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale: f64 = match unit {
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(format!(
                "resourceLimits.memory `{text}`: write a quantity such as 24Gi, 512Mi or 4G"
            ));
        }
    };
    let value: f64 = number.parse().map_err(|_| {
        format!("resourceLimits.memory `{text}`: write a quantity such as 24Gi, 512Mi or 4G")
    })?;
    Ok((value * scale).round() as u64)
}

/// Bytes as a quantity in whole MiB, rounded up (never below the figure).
pub fn quantity(bytes: u64) -> String {
    format!("{}Mi", bytes.div_ceil(1 << 20))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// The YAML: the explanations as comments, then the VPA.
pub fn render(advice: &Advice) -> String {
    let mut out = String::new();
    for note in &advice.notes {
        out.push_str(&format!("# {note}\n"));
    }
    out.push_str(&yaml_serde::to_string(&advice.vpa).expect("a JSON value renders as YAML"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_and_write_as_kubernetes_does() {
        assert_eq!(parse_quantity("24Gi").unwrap(), 24 << 30);
        assert_eq!(parse_quantity("512Mi").unwrap(), 512 << 20);
        assert_eq!(parse_quantity("4G").unwrap(), 4_000_000_000);
        assert_eq!(parse_quantity("1000").unwrap(), 1000);
        assert!(parse_quantity("4 gigs").unwrap_err().contains("24Gi"));
        assert_eq!(quantity(1), "1Mi");
        assert_eq!(quantity(512 << 20), "512Mi");
        assert_eq!(quantity((512 << 20) + 1), "513Mi");
    }
}
