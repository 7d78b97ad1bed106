//! `redline k8s render`'s manifests: a spec run as N segment workers on Kubernetes, an
//! Indexed Job whose completion index picks each pod's segment, and the Job that
//! merges their folders. Users `kubectl apply` them; redline runs no controller of its
//! own.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::scenario::Scenario;
use crate::schedule::segment::Segment;
use crate::spec;

/// What `redline k8s render` is given.
#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// The spec file (YAML), or a `TestRun` resource (`redline crd` defines it) that
    /// holds the spec's text and the settings below; flags given override it.
    pub spec: PathBuf,
    /// How many worker pods (segments). Required unless a TestRun says.
    #[arg(long)]
    pub workers: Option<u32>,
    /// The redline image (built from the repository's Containerfile). Required unless
    /// a TestRun says.
    #[arg(long)]
    pub image: Option<String>,
    /// The namespace of every object (default: the TestRun's, else `default`).
    #[arg(long)]
    pub namespace: Option<String>,
    /// A PersistentVolumeClaim (ReadWriteMany) the workers write their folders to and
    /// the merge reads; without it the results stay in each pod's emptyDir and are lost
    /// with it.
    #[arg(long, value_name = "PVC")]
    pub results_claim: Option<String>,
    /// CPU for each worker (requests and limits); default 2.
    #[arg(long)]
    pub cpu: Option<String>,
    /// Memory for each worker (requests and limits); default 1Gi.
    #[arg(long)]
    pub memory: Option<String>,
    /// Print the merge Job instead: apply it after `kubectl wait --for=condition=complete
    /// job/NAME-workers`. Needs --results-claim.
    #[arg(long)]
    pub merge: bool,
    /// Also print a coordinator (`redline coordinate`, a Job and its Service): the
    /// workers wait for each other and start together, and are all stopped once the
    /// whole run is certain to fail an `abort_on_fail` SLO.
    #[arg(long, conflicts_with = "merge")]
    pub coordinator: bool,
}

/// The port the coordinator listens on in its pod, and its Service's.
const COORDINATOR_PORT: u16 = 9470;

/// What the manifests are rendered from: the flags, over a TestRun's settings.
pub struct Render {
    spec_text: String,
    workers: u32,
    image: String,
    namespace: String,
    results_claim: Option<String>,
    cpu: String,
    memory: String,
    merge: bool,
    coordinator: bool,
}

/// A `TestRun` resource: `redline k8s render`'s flags, and the spec's text.
#[derive(Debug, serde::Deserialize)]
struct TestRun {
    #[serde(default)]
    metadata: TestRunMetadata,
    spec: TestRunSpec,
}

#[derive(Debug, Default, serde::Deserialize)]
struct TestRunMetadata {
    namespace: Option<String>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TestRunSpec {
    workers: u32,
    image: String,
    results_claim: Option<String>,
    cpu: Option<String>,
    memory: Option<String>,
    #[serde(default)]
    coordinator: bool,
    scenario: String,
}

impl Render {
    /// The file's spec text and settings: a TestRun's, or a spec file's with the flags.
    pub fn of(args: RenderArgs) -> Result<(String, Render)> {
        let text = std::fs::read_to_string(&args.spec)
            .with_context(|| format!("cannot read {}", args.spec.display()))?;
        let path = args.spec.display().to_string();
        let first: Option<Value> = yaml_serde::Deserializer::from_str(&text)
            .next()
            .and_then(|doc| serde::Deserialize::deserialize(doc).ok());
        let is_test_run = first.is_some_and(|doc| doc["kind"] == "TestRun");
        let (name, run) = if is_test_run {
            let run: TestRun = yaml_serde::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{path}: a TestRun, but {e}"))?;
            (
                format!("{path} (its spec.scenario; lines counted from the scenario's first)"),
                Some(run),
            )
        } else {
            (path, None)
        };
        let (file_spec, namespace) = match run {
            Some(run) => (Some(run.spec), run.metadata.namespace),
            None => (None, None),
        };
        let needed =
            |flag: &str| anyhow::anyhow!("--{flag} is required (or render a TestRun that sets it)");
        let render = Render {
            workers: args
                .workers
                .or(file_spec.as_ref().map(|s| s.workers))
                .ok_or_else(|| needed("workers"))?,
            image: args
                .image
                .or(file_spec.as_ref().map(|s| s.image.clone()))
                .ok_or_else(|| needed("image"))?,
            namespace: args
                .namespace
                .or(namespace)
                .unwrap_or_else(|| "default".into()),
            results_claim: args
                .results_claim
                .or(file_spec.as_ref().and_then(|s| s.results_claim.clone())),
            cpu: args
                .cpu
                .or(file_spec.as_ref().and_then(|s| s.cpu.clone()))
                .unwrap_or_else(|| "2".into()),
            memory: args
                .memory
                .or(file_spec.as_ref().and_then(|s| s.memory.clone()))
                .unwrap_or_else(|| "1Gi".into()),
            merge: args.merge,
            coordinator: args.coordinator || file_spec.as_ref().is_some_and(|s| s.coordinator),
            spec_text: match file_spec {
                Some(spec) => spec.scenario,
                None => text,
            },
        };
        if render.merge && render.results_claim.is_none() {
            bail!("--merge reads the workers' folders from a claim: give --results-claim");
        }
        if render.workers == 0 {
            bail!("--workers 0: give at least one worker");
        }
        Ok((name, render))
    }
}

/// The manifests `render` means, or the problem with its spec (its located errors, or
/// a share of the run it cannot split), which is the user's to fix.
pub fn documents(spec_name: &str, render: &Render) -> Result<Vec<Value>, String> {
    let mut scenario = spec::parse(spec_name, &render.spec_text)
        .and_then(|file| Scenario::from_spec(&file, &render.spec_text))
        .map_err(|errors| errors.to_string())?;
    let segment = Segment::parse(&format!("1/{}", render.workers))?;
    scenario.take_segment(segment)?;
    let name = object_name(&scenario.name);
    Ok(if render.merge {
        vec![merge_job(&name, render)]
    } else if render.coordinator {
        let url = format!(
            "http://{name}-coordinator.{}.svc:{COORDINATOR_PORT}",
            render.namespace
        );
        vec![
            spec_config_map(&name, &render.namespace, &render.spec_text),
            coordinator_job(&name, render),
            coordinator_service(&name, &render.namespace),
            workers_job(&name, render, &["--coordinator".to_owned(), url]),
        ]
    } else {
        let run_id = format!("{:016x}", crate::runner::new_run_id());
        vec![
            spec_config_map(&name, &render.namespace, &render.spec_text),
            workers_job(&name, render, &["--run-id".to_owned(), run_id]),
        ]
    })
}

/// A DNS-1123 label from the scenario's name (lower case, digits and `-`), leaving room
/// for the `-workers` suffix and the pods' own.
fn object_name(scenario: &str) -> String {
    let name: String = scenario
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let name = name.trim_matches('-');
    let name: String = name.chars().take(40).collect();
    match name.trim_end_matches('-') {
        "" => "redline".to_owned(),
        name => format!("redline-{name}"),
    }
}

fn labels(name: &str, component: &str) -> Value {
    json!({
        "app.kubernetes.io/name": "redline",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
    })
}

fn spec_config_map(name: &str, namespace: &str, spec: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": format!("{name}-spec"), "namespace": namespace, "labels": labels(name, "spec") },
        "data": { "spec.yaml": spec },
    })
}

/// The results volume: the claim when given, else an emptyDir.
fn results_volume(args: &Render) -> Value {
    match &args.results_claim {
        Some(claim) => {
            json!({ "name": "results", "persistentVolumeClaim": { "claimName": claim } })
        }
        None => json!({ "name": "results", "emptyDir": {} }),
    }
}

/// Every redline pod's user and group: 65532, the distroless image's `nonroot`.
fn pod_security() -> Value {
    json!({ "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532 })
}

/// What every redline container runs with: no root, no privilege, a read-only root.
fn container_security() -> Value {
    json!({
        "runAsNonRoot": true,
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "capabilities": { "drop": ["ALL"] },
    })
}

/// The Indexed Job of the workers; `joined` says how they share one run: a run ID
/// given here, or a coordinator's URL.
fn workers_job(name: &str, args: &Render, joined: &[String]) -> Value {
    let n = args.workers;
    let mut command: Vec<String> = [
        "run",
        "/etc/redline/spec.yaml",
        "--segment-of",
        &n.to_string(),
        "--out",
        "/results/$(JOB_COMPLETION_INDEX)",
    ]
    .map(str::to_owned)
    .to_vec();
    command.extend_from_slice(joined);
    command.push("--quiet".to_owned());
    let resources = json!({ "cpu": args.cpu, "memory": args.memory });
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": format!("{name}-workers"), "namespace": args.namespace, "labels": labels(name, "worker") },
        "spec": {
            "completionMode": "Indexed",
            "completions": n,
            "parallelism": n,
            // A worker that fails is not run again: its share is reported missing by
            // the merge rather than sent twice.
            "backoffLimit": 0,
            "template": {
                "metadata": { "labels": labels(name, "worker") },
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": pod_security(),
                    "containers": [{
                        "name": "worker",
                        "image": args.image,
                        "args": command,
                        "resources": { "requests": resources, "limits": resources },
                        "securityContext": container_security(),
                        "volumeMounts": [
                            { "name": "spec", "mountPath": "/etc/redline", "readOnly": true },
                            { "name": "results", "mountPath": "/results" },
                            { "name": "tmp", "mountPath": "/tmp" },
                        ],
                    }],
                    "volumes": [
                        { "name": "spec", "configMap": { "name": format!("{name}-spec") } },
                        results_volume(args),
                        { "name": "tmp", "emptyDir": {} },
                    ],
                },
            },
        },
    })
}

/// A Job of one pod that is not run again (`backoffLimit: 0`): the coordinator's and
/// the merge's. `container` is the pod's one container, given its name, the image and
/// the security context here.
fn one_pod_job(
    name: &str,
    component: &str,
    args: &Render,
    mut container: Value,
    volumes: Value,
) -> Value {
    container["name"] = component.into();
    container["image"] = args.image.clone().into();
    container["securityContext"] = container_security();
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": format!("{name}-{component}"), "namespace": args.namespace, "labels": labels(name, component) },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": { "labels": labels(name, component) },
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": pod_security(),
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    })
}

/// The coordinator: a Job (it ends when the workers are done; a Deployment would start
/// it again), one pod, reached through [`coordinator_service`].
fn coordinator_job(name: &str, args: &Render) -> Value {
    let resources = json!({ "cpu": "500m", "memory": "256Mi" });
    let container = json!({
        "args": [
            "coordinate", "/etc/redline/spec.yaml",
            "--workers", args.workers.to_string(),
            "--listen", format!("0.0.0.0:{COORDINATOR_PORT}"),
            "--allow-remote",
        ],
        "ports": [{ "name": "coordinator", "containerPort": COORDINATOR_PORT }],
        "resources": { "requests": resources, "limits": resources },
        "volumeMounts": [{ "name": "spec", "mountPath": "/etc/redline", "readOnly": true }],
    });
    let volumes = json!([{ "name": "spec", "configMap": { "name": format!("{name}-spec") } }]);
    one_pod_job(name, "coordinator", args, container, volumes)
}

fn coordinator_service(name: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": format!("{name}-coordinator"), "namespace": namespace, "labels": labels(name, "coordinator") },
        "spec": {
            "selector": {
                "app.kubernetes.io/instance": name,
                "app.kubernetes.io/component": "coordinator",
            },
            "ports": [{ "name": "coordinator", "port": COORDINATOR_PORT, "targetPort": "coordinator" }],
        },
    })
}

fn merge_job(name: &str, args: &Render) -> Value {
    let folders: Vec<String> = (0..args.workers).map(|i| format!("/results/{i}")).collect();
    let mut command = vec!["merge".to_owned()];
    command.extend(folders);
    command.extend([
        "--out".to_owned(),
        "/results/merged".to_owned(),
        "--quiet".to_owned(),
    ]);
    let container = json!({
        "args": command,
        "volumeMounts": [
            { "name": "results", "mountPath": "/results" },
            { "name": "tmp", "mountPath": "/tmp" },
        ],
    });
    let volumes = json!([results_volume(args), { "name": "tmp", "emptyDir": {} }]);
    one_pod_job(name, "merge", args, container, volumes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_dns_labels() {
        assert_eq!(object_name("quickstart"), "redline-quickstart");
        assert_eq!(object_name("My Test_1"), "redline-my-test-1");
        assert_eq!(object_name("--"), "redline");
        assert!(object_name(&"x".repeat(100)).len() <= 48);
    }
}
