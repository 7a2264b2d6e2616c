//! Writing files whole (feature `fs`): the binaries' one way to replace a file that a
//! reader may open at any moment (the state file, a health file, a daemon's config).

use std::io::Write;
use std::path::Path;

/// `bytes` as `path`: a hidden temporary file (`.k8slb-*`) in the same directory, synced,
/// renamed over `path`. A reader sees the old file or the new one, never half of it; on
/// error the old file is untouched. The directory must exist.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = tempfile::Builder::new()
        .prefix(".k8slb-")
        .tempfile_in(dir_of(path))?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The directory `path` is in: `.` for a bare file name (whose parent is `""`).
fn dir_of(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_whole_and_leaves_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        std::fs::write(&p, "old").unwrap();
        write_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["state.json"]);
    }

    #[test]
    fn a_missing_directory_is_an_error_and_writes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("no/such/dir/state.json");
        assert!(write_atomic(&p, b"x").is_err());
        assert!(!d.path().join("no").exists());
    }

    #[test]
    fn a_bare_file_name_is_in_the_current_directory() {
        assert_eq!(dir_of(Path::new("state.json")), Path::new("."));
        assert_eq!(
            dir_of(Path::new("/run/k8slb/state.json")),
            Path::new("/run/k8slb")
        );
    }
}
