//! The files a proxy config names (HAProxy's route map and crt-list files, and for
//! both proxies the CA bundles of verified backends and client certificates), staged with
//! the config: written to a staging directory, checked with the config, and moved into
//! the live directory only when the config is installed (issue 22 item 4).
//!
//! The config names the live directory (`<work-dir>/routes/…`): that is the path HAProxy
//! loads at a reload or a restart and the name its Runtime API knows a map by (`set map
//! <path>`), so it never changes. The checker reads a copy of the config in which the
//! live directory's path is replaced by the staging directory's; the staging directory is
//! a sibling (same file system, so a file moves into place with a rename) whose path has
//! the same length as the live one (`routes` → `.route`), so the copy the checker reads
//! has every line and token exactly as long as the installed one (HAProxy's line and
//! word limits, nginx's token size). Paths are validated by the render (`safe_path`); a
//! user string that happens to contain the live path is rewritten in the checked copy to
//! a string of the same length and the same characters class, which the checker judges
//! the same way.
//!
//! Installing moves each staged file over its live name (one rename each) and removes
//! live files the config no longer names. The proxy reads these files only when it
//! starts or reloads, which the actor does after the install, from the same thread.
//! A refused or deferred config leaves the live directory as it was.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// The files a proxy config names: full path (inside `dir`) → content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigFiles {
    /// The live directory (empty: no files, nothing to do).
    pub dir: PathBuf,
    pub files: BTreeMap<String, String>,
}

/// Why files could not be staged or installed.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("file {path} is not in {dir}")]
    OutsideDir { path: String, dir: String },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: io::Error,
    },
}

fn io_err<'a>(op: &'static str, p: &'a Path) -> impl FnOnce(io::Error) -> StageError + 'a {
    move |source| StageError::Io {
        op,
        path: p.display().to_string(),
        source,
    }
}

/// Files written to the staging directory, to be installed with their config.
#[derive(Debug)]
pub struct Staged {
    files: ConfigFiles,
    /// `None`: nothing was staged ([`ConfigFiles::is_noop`]).
    staging: Option<PathBuf>,
}

impl ConfigFiles {
    pub fn new(dir: impl Into<PathBuf>, files: BTreeMap<String, String>) -> Self {
        ConfigFiles {
            dir: dir.into(),
            files,
        }
    }

    /// Nothing to stage or install: no files, and no live directory to empty.
    pub fn is_noop(&self) -> bool {
        self.dir.as_os_str().is_empty() || (self.files.is_empty() && !self.dir.exists())
    }

    /// The staging directory: a sibling of the live one, with a path of the same length.
    pub fn staging_dir(&self) -> PathBuf {
        let name = self
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let staged = match name.char_indices().last() {
            Some((last, _)) if last > 0 && !name.starts_with('.') => {
                format!(".{}", &name[..last])
            }
            // `.x`, `x`: no same-length name that cannot be the live one; the length
            // then differs by a few bytes.
            _ => format!("{name}.staging"),
        };
        self.dir.with_file_name(staged)
    }

    /// `text` as the checker must read it: naming the staging directory instead of the
    /// live one.
    pub fn for_check(&self, text: &str) -> String {
        if self.is_noop() {
            return text.to_string();
        }
        let live = format!("{}/", self.dir.display());
        let staging = format!("{}/", self.staging_dir().display());
        text.replace(&live, &staging)
    }

    fn check_paths(&self) -> Result<(), StageError> {
        for path in self.files.keys() {
            if Path::new(path).parent() != Some(self.dir.as_path()) {
                return Err(StageError::OutsideDir {
                    path: path.clone(),
                    dir: self.dir.display().to_string(),
                });
            }
        }
        Ok(())
    }

    /// Write every file into a fresh staging directory (the live one is not touched).
    pub fn stage(&self) -> Result<Staged, StageError> {
        self.check_paths()?;
        if self.is_noop() {
            return Ok(Staged {
                files: self.clone(),
                staging: None,
            });
        }
        let staging = self.staging_dir();
        if staging.exists() {
            std::fs::remove_dir_all(&staging).map_err(io_err("removing", &staging))?;
        }
        std::fs::create_dir_all(&staging).map_err(io_err("creating", &staging))?;
        for (path, text) in &self.files {
            let p = staging.join(Path::new(path).file_name().unwrap_or_default());
            std::fs::write(&p, text).map_err(io_err("writing", &p))?;
        }
        Ok(Staged {
            files: self.clone(),
            staging: Some(staging),
        })
    }

    /// Make the live directory hold exactly these files, each written atomically, with
    /// no check (the Runtime API path, which only follows what HAProxy already runs, and
    /// putting the last good files back).
    pub fn write_live(&self) -> Result<(), StageError> {
        self.check_paths()?;
        if self.is_noop() {
            return Ok(());
        }
        let dir = &self.dir;
        std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
        for (path, text) in &self.files {
            let p = Path::new(path);
            if std::fs::read(p).ok().as_deref() != Some(text.as_bytes()) {
                k8slb_common::fs::write_atomic(p, text.as_bytes()).map_err(io_err("writing", p))?;
            }
        }
        self.remove_others()
    }

    /// Remove the live files that are not in `files`.
    fn remove_others(&self) -> Result<(), StageError> {
        let dir = &self.dir;
        for e in std::fs::read_dir(dir).map_err(io_err("listing", dir))? {
            let p = e.map_err(io_err("listing", dir))?.path();
            if !self.files.contains_key(p.to_string_lossy().as_ref()) {
                std::fs::remove_file(&p).map_err(io_err("removing", &p))?;
            }
        }
        Ok(())
    }
}

impl Staged {
    /// Move the staged files into the live directory (a rename each), remove the live
    /// files the config no longer names, and the staging directory.
    pub fn install(self) -> Result<(), StageError> {
        let Some(staging) = self.staging.as_deref() else {
            return Ok(());
        };
        let dir = &self.files.dir;
        std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
        for path in self.files.files.keys() {
            let live = Path::new(path);
            let staged = staging.join(live.file_name().unwrap_or_default());
            std::fs::rename(&staged, live).map_err(io_err("renaming", &staged))?;
        }
        self.files.remove_others()?;
        std::fs::remove_dir_all(staging).map_err(io_err("removing", staging))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        // Refused, deferred or installed: the staging directory does not outlive it.
        if let Some(s) = self.staging.as_deref().filter(|s| s.exists()) {
            let _ = std::fs::remove_dir_all(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path, entries: &[(&str, &str)]) -> ConfigFiles {
        ConfigFiles::new(
            dir,
            entries
                .iter()
                .map(|(n, t)| (dir.join(n).display().to_string(), t.to_string()))
                .collect(),
        )
    }

    fn listing(dir: &Path) -> BTreeMap<String, String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                (
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    std::fs::read_to_string(&p).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn the_staging_dir_is_a_sibling_with_a_path_of_the_same_length() {
        let f = files(
            Path::new("/var/lib/k8slb/routes"),
            &[("h.map", "a.example 1\n")],
        );
        assert_eq!(f.staging_dir(), Path::new("/var/lib/k8slb/.route"));
        let text = "use_backend x if { req.hdr(host),map(/var/lib/k8slb/routes/h.map) -m found }";
        let checked = f.for_check(text);
        assert_eq!(checked.len(), text.len());
        assert!(checked.contains("map(/var/lib/k8slb/.route/h.map)"));
    }

    #[test]
    fn staging_leaves_the_live_dir_as_it_was_until_installed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("routes");
        files(&dir, &[("a.map", "old a\n"), ("gone.map", "old\n")])
            .write_live()
            .unwrap();
        let before = listing(&dir);
        let new = files(&dir, &[("a.map", "new a\n"), ("b.lst", "new b\n")]);
        let staged = new.stage().unwrap();
        assert_eq!(listing(&dir), before, "staging touched the live dir");
        assert_eq!(
            listing(&new.staging_dir()).keys().collect::<Vec<_>>(),
            ["a.map", "b.lst"]
        );
        drop(staged); // refused: nothing installed, the staging dir is gone
        assert_eq!(listing(&dir), before);
        assert!(!new.staging_dir().exists());
        new.stage().unwrap().install().unwrap();
        assert_eq!(
            listing(&dir),
            BTreeMap::from([
                ("a.map".to_string(), "new a\n".to_string()),
                ("b.lst".to_string(), "new b\n".to_string())
            ])
        );
        assert!(!new.staging_dir().exists());
    }

    #[test]
    fn a_file_outside_the_dir_is_refused() {
        let f = ConfigFiles::new(
            "/tmp/x/routes",
            BTreeMap::from([("/tmp/x/other/a.map".to_string(), String::new())]),
        );
        assert!(matches!(f.stage(), Err(StageError::OutsideDir { .. })));
    }
}
