//! `run --workers N`: N processes of this binary on this machine, the K-th with its
//! share of the run (`--segment K/N`) and its own folder under `OUT/workers/`. They
//! meet at a coordinator served from this process on loopback, so they start together
//! with one run ID and are judged as one run by the code path workers on several
//! machines use.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use anyhow::{Context, Result, bail};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use crate::coordinator::Coordinator;
use crate::report::outputs::exit;
use crate::scenario::Scenario;

/// Worker `k` of `n`: where it writes, and the coordinator it meets the others at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seat {
    pub k: u32,
    pub n: u32,
    pub dir: PathBuf,
    pub coordinator: String,
}

/// Runs `n` workers of `scenario` and waits for them all; returns their folders, for
/// the merge. `command` gives each worker's arguments for its seat. Lines for the user
/// go to `say`. When `signalled` fires (Ctrl-C, SIGTERM), every worker is sent SIGTERM
/// and drains as a run does, and their partial results are merged. A worker that fails
/// is reported; one that fails before the run has started stops the others, which
/// would otherwise wait for it at the coordinator.
pub async fn run_workers(
    n: u32,
    out_dir: &Path,
    scenario: &Scenario,
    command: impl Fn(&Seat) -> Vec<OsString>,
    say: &dyn Fn(&str),
    signalled: impl Future<Output = ()>,
) -> Result<Vec<PathBuf>> {
    if n == 0 {
        bail!("--workers 0: give at least one worker");
    }
    let exe = std::env::current_exe().context("cannot find redline's own executable")?;
    let run_id = crate::runner::new_run_id();
    let coordinator = Coordinator::new(n, scenario.slos.clone(), scenario.aggregator(), run_id);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot listen for the workers' coordinator")?;
    let url = format!("http://{}", listener.local_addr()?);
    let served = CancellationToken::new();
    let server = coordinator.serve(listener, served.clone());
    let mut children = Vec::new();
    let mut dirs = Vec::new();
    for k in 1..=n {
        let seat = Seat {
            k,
            n,
            dir: out_dir.join("workers").join(format!("{k}-of-{n}")),
            coordinator: url.clone(),
        };
        children.push(spawn(&exe, &seat, command(&seat))?);
        dirs.push(seat.dir);
    }
    say(&format!(
        "redline: {n} workers, run {run_id:016x}: {}",
        out_dir.join("workers").display()
    ));
    supervise(children, &dirs, &coordinator, say, signalled).await?;
    served.cancel();
    server.await.context("the workers' coordinator failed")??;
    Ok(dirs)
}

/// Starts one worker, its output to `worker.log` in its folder; never through a shell.
fn spawn(exe: &Path, seat: &Seat, args: Vec<OsString>) -> Result<Child> {
    std::fs::create_dir_all(&seat.dir)
        .with_context(|| format!("cannot make {}", seat.dir.display()))?;
    let log = std::fs::File::create(seat.dir.join("worker.log"))?;
    Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("cannot start a worker")
}

/// Waits for every worker; see [`run_workers`].
async fn supervise(
    children: Vec<Child>,
    dirs: &[PathBuf],
    coordinator: &Coordinator,
    say: &dyn Fn(&str),
    signalled: impl Future<Output = ()>,
) -> Result<()> {
    let n = children.len();
    let mut crew = Crew {
        pids: children.iter().map(Child::id).collect(),
        running: vec![true; n],
    };
    let mut waits = tokio::task::JoinSet::new();
    for (k, mut child) in children.into_iter().enumerate() {
        waits.spawn(async move { (k, child.wait().await) });
    }
    tokio::pin!(signalled);
    let mut stopping = false;
    loop {
        tokio::select! {
            joined = waits.join_next() => {
                let Some(joined) = joined else { break };
                let (k, status) = joined?;
                let status = status?;
                crew.running[k] = false;
                if finished(status) {
                    continue;
                }
                say(&format!(
                    "redline: worker {}/{n} ended with {status}: see {}",
                    k + 1,
                    dirs[k].join("worker.log").display()
                ));
                if !stopping && !coordinator.has_started() {
                    say("redline: the run had not started: stopping the other workers");
                    stopping = true;
                    crew.stop();
                }
            }
            _ = &mut signalled, if !stopping => {
                say("redline: stopping the workers — each drains, then the partial runs are merged");
                stopping = true;
                crew.stop();
            }
        }
    }
    Ok(())
}

/// A worker that finished its run, passed or failed: its share is merged.
fn finished(status: ExitStatus) -> bool {
    status.success() || status.code() == Some(exit::SLO_FAILED)
}

/// The workers' process IDs and which are still running.
struct Crew {
    pids: Vec<Option<u32>>,
    running: Vec<bool>,
}

impl Crew {
    /// SIGTERM to every worker still running: each drains as a run does.
    fn stop(&self) {
        let running = self.pids.iter().zip(&self.running).filter(|(_, r)| **r);
        for (pid, _) in running {
            if let Some(pid) = pid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
    }
}
