//! Where a run's files go. By default each run gets a folder of its own under
//! `out/NAME/` named by its UTC start time, with `out/NAME/latest` pointing at it, so
//! no run overwrites another. A folder given with `--out` is the user's: the files an
//! earlier run left there are removed first, so none is taken for this run's.

use std::path::{Path, PathBuf};

/// Every file or folder a run writes into its output folder.
pub const RUN_FILES: &[&str] = &["records.jsonl", "summary.json", "junit.xml", "collect"];

/// A run's output folder, made ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    pub path: PathBuf,
    /// `out/NAME/latest`, when the folder is a new one under it.
    pub latest: Option<PathBuf>,
    /// Files of an earlier run that were removed from a reused `--out` folder.
    pub replaced: Vec<String>,
}

/// Makes the output folder: `explicit` as given (emptied of an earlier run's files),
/// else a new `root/NAME/<UTC time>` and its `latest` link.
pub fn prepare(explicit: Option<&Path>, root: &Path, name: &str) -> std::io::Result<RunDir> {
    if let Some(dir) = explicit {
        std::fs::create_dir_all(dir)?;
        let mut replaced = Vec::new();
        for file in RUN_FILES {
            let path = dir.join(file);
            if path.is_dir() {
                std::fs::remove_dir_all(&path)?;
            } else if path.exists() {
                std::fs::remove_file(&path)?;
            } else {
                continue;
            }
            replaced.push((*file).to_owned());
        }
        return Ok(RunDir {
            path: dir.to_owned(),
            latest: None,
            replaced,
        });
    }
    let parent = root.join(name);
    std::fs::create_dir_all(&parent)?;
    let stamp = utc_stamp(time::OffsetDateTime::now_utc());
    // Two runs started in the same second get -2, -3, …
    let mut path = parent.join(&stamp);
    let mut n = 1;
    while let Err(e) = std::fs::create_dir(&path) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(e);
        }
        n += 1;
        path = parent.join(format!("{stamp}-{n}"));
    }
    let latest = parent.join("latest");
    link_latest(&latest, &path)?;
    Ok(RunDir {
        path,
        latest: Some(latest),
        replaced: Vec::new(),
    })
}

/// `2026-12-01T09-54-03Z`: sortable, and a valid file name everywhere.
fn utc_stamp(at: time::OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02}T{:02}-{:02}-{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

/// Points `latest` at the run's folder (by its name, so the tree can be moved).
#[cfg(unix)]
fn link_latest(latest: &Path, target: &Path) -> std::io::Result<()> {
    let name = target.file_name().expect("a run folder has a name");
    // A link left by an earlier run is replaced; anything else named `latest` is not
    // ours to remove.
    if latest
        .symlink_metadata()
        .is_ok_and(|m| m.file_type().is_symlink())
    {
        std::fs::remove_file(latest)?;
    }
    std::os::unix::fs::symlink(name, latest)
}

#[cfg(not(unix))]
fn link_latest(_: &Path, _: &Path) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_run_gets_its_own_folder_and_a_reused_one_loses_the_old_files() {
        let root = std::env::temp_dir().join(format!("redline-outputs-{}", std::process::id()));
        let first = prepare(None, &root, "quickstart").unwrap();
        let second = prepare(None, &root, "quickstart").unwrap();
        assert_ne!(
            first.path, second.path,
            "runs in the same second get their own"
        );
        assert!(first.path.starts_with(root.join("quickstart")));
        let latest = second.latest.unwrap();
        assert_eq!(
            std::fs::canonicalize(&latest).unwrap(),
            std::fs::canonicalize(&second.path).unwrap()
        );

        let reused = root.join("mine");
        std::fs::create_dir_all(reused.join("collect")).unwrap();
        std::fs::write(reused.join("junit.xml"), "<old/>").unwrap();
        std::fs::write(reused.join("notes.txt"), "the user's").unwrap();
        let dir = prepare(Some(&reused), &root, "ignored").unwrap();
        assert_eq!(dir.replaced, ["junit.xml", "collect"]);
        assert!(!reused.join("junit.xml").exists() && !reused.join("collect").exists());
        assert!(
            reused.join("notes.txt").exists(),
            "only redline's own files go"
        );
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn stamps_sort_and_name_files() {
        let at = time::OffsetDateTime::from_unix_timestamp(1_764_582_843).unwrap();
        assert_eq!(utc_stamp(at), "2025-12-01T09-54-03Z");
    }
}
