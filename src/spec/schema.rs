//! The spec's JSON Schema (for editors and linters) and a Kubernetes
//! CustomResourceDefinition per kind, so a spec file can be applied to a cluster as is.

use schemars::SchemaGenerator;
use serde_json::{Value, json};

use super::{API_VERSION, InferenceSpec, Metadata, ModelLoadSpec, ScaleSpec};

/// The group of `apiVersion: redline.dev/v1alpha1`.
const GROUP: &str = "redline.dev";

/// The JSON Schema of one document of a spec file: any of its kinds.
pub fn spec_schema() -> Value {
    let mut generator = SchemaGenerator::default();
    let metadata = generator.subschema_for::<Metadata>();
    let kinds = [
        ("InferenceSpec", generator.subschema_for::<InferenceSpec>()),
        ("ScaleSpec", generator.subschema_for::<ScaleSpec>()),
        ("ModelLoadSpec", generator.subschema_for::<ModelLoadSpec>()),
    ];
    let documents: Vec<Value> = kinds
        .into_iter()
        .map(|(kind, spec)| {
            json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["apiVersion", "kind", "spec"],
                "properties": {
                    "apiVersion": { "const": API_VERSION },
                    "kind": { "const": kind },
                    "metadata": metadata,
                    "spec": spec,
                }
            })
        })
        .collect();
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "redline spec document",
        "description": "One YAML document of a redline spec file; a file holds one InferenceSpec and at most one ScaleSpec and one ModelLoadSpec.",
        "oneOf": documents,
        "$defs": generator.take_definitions(true),
    })
}

/// A CustomResourceDefinition for each kind, and for `TestRun`, as a multi-document
/// YAML stream.
///
/// Kubernetes wants structural schemas, and several spec fields take more than one
/// shape (durations as strings or numbers, token lengths as numbers or ranges), so
/// the spec kinds' CRDs keep `spec` open (`x-kubernetes-preserve-unknown-fields`) and
/// leave the checking to `redline validate`, which reports every problem with its line.
pub fn crds() -> String {
    let open = json!({
        "type": "object",
        "description": "Checked by `redline validate` (see `redline schema spec`).",
        "x-kubernetes-preserve-unknown-fields": true,
    });
    let mut out = String::new();
    for (kind, plural, description, spec) in [
        (
            "InferenceSpec",
            "inferencespecs",
            "The load: services, what one session sends, the arrival plan.",
            open.clone(),
        ),
        (
            "ScaleSpec",
            "scalespecs",
            "The gate: SLO thresholds (sloThresholds) and replica bounds.",
            open.clone(),
        ),
        (
            "ModelLoadSpec",
            "modelloadspecs",
            "The model a test loads: modelRef, resourceLimits, cachePolicy.",
            open,
        ),
        (
            "TestRun",
            "testruns",
            "A segmented run on the cluster: `redline k8s render` prints its Jobs from it.",
            test_run_spec(),
        ),
    ] {
        out.push_str("---\n");
        out.push_str(
            &yaml_serde::to_string(&crd(kind, plural, description, spec))
                .expect("a CRD serializes"),
        );
    }
    out
}

fn crd(kind: &str, plural: &str, description: &str, spec: Value) -> Value {
    let (_, version) = API_VERSION.split_once('/').expect("group/version");
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{plural}.{GROUP}") },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "plural": plural,
                "singular": kind.to_lowercase(),
                "listKind": format!("{kind}List"),
            },
            "versions": [{
                "name": version,
                "served": true,
                "storage": true,
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "description": description,
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": { "type": "string" },
                        "kind": { "type": "string" },
                        "metadata": { "type": "object" },
                        "spec": spec,
                    },
                }},
            }],
        },
    })
}

/// `TestRun.spec`: what `redline k8s render` takes as flags, and the spec file's text.
/// Structural (every field typed), so the API server itself refuses a malformed one.
fn test_run_spec() -> Value {
    let text = |description: &str| json!({ "type": "string", "description": description });
    json!({
        "type": "object",
        "required": ["workers", "image", "scenario"],
        "properties": {
            "workers": { "type": "integer", "minimum": 1, "maximum": 4096, "description": "Worker pods: the run's N equal segments." },
            "image": text("The redline image (built from the repository's Containerfile)."),
            "resultsClaim": text("A ReadWriteMany PersistentVolumeClaim for the workers' folders and the merge."),
            "cpu": text("CPU of each worker (requests and limits); default 2."),
            "memory": text("Memory of each worker (requests and limits); default 1Gi."),
            "coordinator": { "type": "boolean", "description": "Also run `redline coordinate`: a start barrier and the whole run's abort_on_fail gate." },
            "scenario": text("The spec file's text (an InferenceSpec and its ScaleSpec), as `redline run` reads it."),
        },
    })
}
