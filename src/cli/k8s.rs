//! `redline k8s render`: parse, render (`dist::k8s`), print.

use super::*;
use crate::dist::k8s::{Render, RenderArgs, documents};

/// `redline k8s …`
#[derive(Debug, Subcommand)]
pub enum K8sCommand {
    /// Print the manifests for a segmented run: a ConfigMap with the spec and an
    /// Indexed Job of N workers (`--segment-of N`: the pod's completion index picks its
    /// segment), each writing its folder to the results volume; with --merge, the Job
    /// that merges those folders once the workers have completed.
    Render(RenderArgs),
}

pub(super) fn k8s(command: K8sCommand) -> Result<i32> {
    let K8sCommand::Render(args) = command;
    let (spec_name, render) = Render::of(args)?;
    match documents(&spec_name, &render) {
        Ok(documents) => {
            for document in documents {
                outln!("---");
                out(&yaml_serde::to_string(&document).expect("a JSON value renders as YAML"));
            }
            Ok(exit::OK)
        }
        Err(problem) => {
            errln!("{}", problem.trim_end());
            Ok(exit::USAGE)
        }
    }
}
