//! `redline advise`: autoscaler settings from measured start-ups and a sweep.

use std::path::PathBuf;

use anyhow::Result;

use super::exit;
use super::output::{errln, out};
use crate::capacity::advise::{self, Bounds};
use crate::spec::CachePolicy;

#[derive(Debug, clap::Args)]
pub struct AdviseArgs {
    /// Folders of `redline coldstart` (coldstart.json) and of a `redline run` sweep
    /// (summary.json).
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// The spec whose ModelLoadSpec (cachePolicy, resourceLimits.memory) and ScaleSpec
    /// (minReplicas, maxReplicas) bound the advice; its name names the objects.
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Requests per second the deployment must serve: replicas from the sweep's knee.
    #[arg(long, value_name = "PER_S")]
    pub target_rate: Option<f64>,
}

pub(super) fn advise_command(args: AdviseArgs) -> Result<i32> {
    let bounds = match &args.spec {
        Some(path) => match crate::spec::load(&path.display().to_string()) {
            Ok(spec) => match Bounds::of(&spec) {
                Ok(bounds) => bounds,
                Err(e) => {
                    errln!("{}: {e}", path.display());
                    return Ok(exit::USAGE);
                }
            },
            Err(errors) => {
                errln!("{errors}");
                return Ok(exit::USAGE);
            }
        },
        None => Bounds::default(),
    };
    if args
        .target_rate
        .is_some_and(|r| !(r.is_finite() && r > 0.0))
    {
        errln!("redline advise: --target-rate must be a positive number of requests per second");
        return Ok(exit::USAGE);
    }
    let policy = bounds.policy.unwrap_or(CachePolicy::Cold);
    let measured = match advise::measure(&args.dirs, policy) {
        Ok(measured) => measured,
        Err(e) => {
            errln!("redline advise: {e}");
            return Ok(exit::USAGE);
        }
    };
    let advice = advise::advise(&measured, &bounds, args.target_rate);
    out(&advise::render(&advice));
    Ok(exit::OK)
}
