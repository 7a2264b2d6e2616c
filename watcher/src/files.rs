//! The `files:<dir>` source: a directory of Kubernetes YAML (Services, EndpointSlices,
//! Nodes and the global ConfigMap), watched for changes by polling a cheap fingerprint
//! (path, size, modification time) of every file. Objects get their `metadata.generation`
//! as from an API server (1, then one more per change of their `spec`).

use k8slb_common::generations::Generations;
use k8slb_common::objects::{Objects, ReadError};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What changes when any file under the directory changes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fingerprint(Vec<(PathBuf, u64, Option<SystemTime>)>);

pub fn fingerprint(dir: &Path) -> std::io::Result<Fingerprint> {
    let mut out = Vec::new();
    walk(dir, &mut out)?;
    out.sort();
    Ok(Fingerprint(out))
}

fn walk(dir: &Path, out: &mut Vec<(PathBuf, u64, Option<SystemTime>)>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let meta = e.metadata()?;
        if meta.is_dir() {
            walk(&e.path(), out)?;
        } else {
            out.push((e.path(), meta.len(), meta.modified().ok()));
        }
    }
    Ok(())
}

/// Every object under `dir`, each with the `metadata.generation` an API server would
/// have given it by now (`generations` remembers the earlier reads; see
/// [`k8slb_common::generations`]). A read that fails leaves `generations` as it was.
pub fn read(dir: &Path, generations: &mut Generations) -> Result<Objects, ReadError> {
    let mut next = generations.clone();
    let objects = Objects::read_paths_with(&[dir.to_path_buf()], &mut |doc| next.stamp(doc))?;
    next.end_read();
    *generations = next;
    Ok(objects)
}
