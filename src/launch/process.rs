//! The server under test as a process: started in a process group of its own (so a
//! server that forks workers is measured and stopped as a whole), its output kept in
//! a log file, its memory read from procfs, stopped by SIGTERM and then SIGKILL.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::process::{Child, Command};

/// How long a server may take to stop on SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Bytes of a server's log quoted in an error.
const LOG_TAIL_BYTES: u64 = 2 << 10;

/// A started server.
pub struct Server {
    child: Child,
    group: Pid,
    log: PathBuf,
}

impl Server {
    /// Starts `argv` (no shell) with stdout and stderr appended to `log`.
    pub fn start(argv: &[String], log: &Path) -> Result<Server, String> {
        let (program, args) = argv.split_first().ok_or("the server command is empty")?;
        let out = File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("cannot share {}: {e}", log.display()))?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start `{program}`: {e}"))?;
        let group = child
            .id()
            .and_then(|id| Pid::from_raw(id as i32))
            .ok_or("the server exited as it started")?;
        Ok(Server {
            child,
            group,
            log: log.to_owned(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.group.as_raw_nonzero().get() as u32
    }

    /// `Some(why)` once the server has exited, with the end of its log.
    pub fn exited(&mut self) -> Option<String> {
        let status = self.child.try_wait().ok()??;
        Some(format!(
            "the server exited ({status}) before it was ready; the end of its log ({}):\n{}",
            self.log.display(),
            log_tail(&self.log)
        ))
    }

    /// SIGTERM to the group, SIGKILL after the grace period; waits for the leader.
    pub async fn stop(mut self) {
        let _ = rustix::process::kill_process_group(self.group, Signal::TERM);
        if tokio::time::timeout(STOP_GRACE, self.child.wait())
            .await
            .is_err()
        {
            let _ = rustix::process::kill_process_group(self.group, Signal::KILL);
            let _ = self.child.wait().await;
        }
        // Workers the leader left behind go with the group.
        let _ = rustix::process::kill_process_group(self.group, Signal::KILL);
    }

    /// The group's process IDs (for matching GPU processes).
    pub fn members(&self) -> Vec<u32> {
        group_members(self.pid())
    }
}

/// Resident memory of a process group now, bytes, and its leader's own high-water
/// mark (the kernel's `VmHWM`, which no sampling can miss).
pub fn memory_of(group: u32) -> Memory {
    let resident = group_members(group)
        .into_iter()
        .map(|pid| status_kib(pid, "VmRSS:").unwrap_or(0) * 1024)
        .sum();
    Memory {
        resident,
        leader_peak: status_kib(group, "VmHWM:").unwrap_or(0) * 1024,
    }
}

/// A memory reading of the server.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub resident: u64,
    pub leader_peak: u64,
}

/// Processes whose process group is `group` (field 5 of `/proc/PID/stat`).
fn group_members(group: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![group];
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| process_group_of(pid) == Some(group))
        .collect()
}

fn process_group_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields follow the last.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(2)?.parse().ok()
}

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].split_whitespace().next()?.parse().ok()
}

/// The last bytes of a log, as text.
pub fn log_tail(log: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = File::open(log) else {
        return String::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)));
    let mut tail = Vec::new();
    let _ = file.read_to_end(&mut tail);
    String::from_utf8_lossy(&tail).trim_end().to_owned()
}

/// GPU memory used by these processes, bytes, from `nvidia-smi`; `Err` says why it
/// could not be read (no GPU, no nvidia-smi).
pub fn gpu_memory(pids: &[u32]) -> Result<u64, String> {
    let output = std::process::Command::new("nvidia-smi")
        .args([
            "--query-compute-apps=pid,used_memory",
            "--format=csv,noheader,nounits",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                "no GPU memory measured: nvidia-smi is not on PATH".to_owned()
            }
            _ => format!("no GPU memory measured: nvidia-smi could not run ({e})"),
        })?;
    if !output.status.success() {
        return Err(format!(
            "no GPU memory measured: nvidia-smi failed ({})",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let mib: u64 = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let (pid, used) = line.split_once(',')?;
            let pid: u32 = pid.trim().parse().ok()?;
            pids.contains(&pid)
                .then(|| used.trim().parse::<u64>().ok())
                .flatten()
        })
        .sum();
    Ok(mib << 20)
}
