//! CustomResourceDefinitions read from their YAML files (the Gateway API's, as users install
//! them): which kinds and versions a fake serves, with which status subresource and which
//! `openAPIV3Schema`. The static rows of `resources.rs` give the names the fake routes on;
//! the files decide what is served and how writes are checked ([`crate::schema`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

use crate::resources::{Resource, RESOURCES};

/// One served version of one CRD.
#[derive(Debug, Clone)]
pub(crate) struct CrdVersion {
    pub group: String,
    pub plural: String,
    pub version: String,
    pub schema: Value,
}

/// The CRDs a fake has installed, with every `pattern` of their schemas compiled once.
#[derive(Debug, Default)]
pub(crate) struct Crds {
    pub versions: Vec<CrdVersion>,
    pub patterns: HashMap<String, Regex>,
    /// The files they came from, for messages.
    pub files: Vec<PathBuf>,
}

/// Why a CRD directory could not be installed.
#[derive(Debug)]
pub enum CrdError {
    /// The directory (or a file in it) could not be read.
    Read(PathBuf, std::io::Error),
    Parse(PathBuf, String),
    /// A CRD the fake has no row for in `resources.rs` (add one), or whose row disagrees
    /// with the file (scope, status subresource).
    Unknown(PathBuf, String),
    /// A schema rule the fake cannot check: a `pattern` Rust's regex cannot compile, or a
    /// CEL rule under `status` that `schema.rs` has not transcribed.
    Unsupported(PathBuf, String),
}

impl std::fmt::Display for CrdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CrdError::Read(p, e) => write!(f, "reading {}: {e}", p.display()),
            CrdError::Parse(p, e) => write!(f, "parsing {}: {e}", p.display()),
            CrdError::Unknown(p, e) => write!(f, "{}: {e}", p.display()),
            CrdError::Unsupported(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

impl std::error::Error for CrdError {}

impl Crds {
    /// Whether `res` is served: built-in kinds always, CRD-defined ones when an installed
    /// CRD serves that group, version and plural.
    /// The group/versions served, in discovery order (core first); CRD-defined ones only
    /// as far as the installed CRDs serve them.
    pub(crate) fn groups(&self) -> Vec<(&'static str, &'static str)> {
        let mut out: Vec<(&str, &str)> = Vec::new();
        for r in RESOURCES.iter().filter(|r| self.serves(r)) {
            if !out.contains(&(r.group, r.version)) {
                out.push((r.group, r.version));
            }
        }
        out
    }

    pub fn serves(&self, res: &Resource) -> bool {
        !res.crd || self.version(res).is_some()
    }

    pub fn version(&self, res: &Resource) -> Option<&CrdVersion> {
        self.versions
            .iter()
            .find(|v| v.group == res.group && v.version == res.version && v.plural == res.plural)
    }

    /// Reads every `CustomResourceDefinition` in the `*.yaml` files of `dir` (other kinds,
    /// such as the ValidatingAdmissionPolicy the Gateway API ships beside them, and
    /// `kustomization.yaml`, are skipped).
    pub fn load_dir(dir: &Path) -> Result<Crds, CrdError> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| CrdError::Read(dir.to_path_buf(), e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        let mut crds = Crds::default();
        for file in files {
            let text =
                std::fs::read_to_string(&file).map_err(|e| CrdError::Read(file.clone(), e))?;
            for doc in serde_yaml::Deserializer::from_str(&text) {
                let v = Value::deserialize(doc)
                    .map_err(|e| CrdError::Parse(file.clone(), e.to_string()))?;
                if v.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
                    crds.add(&file, &v)?;
                }
            }
            crds.files.push(file);
        }
        if crds.versions.is_empty() {
            return Err(CrdError::Parse(
                dir.to_path_buf(),
                "no CustomResourceDefinition in any *.yaml file".into(),
            ));
        }
        Ok(crds)
    }

    fn add(&mut self, file: &Path, crd: &Value) -> Result<(), CrdError> {
        let s = |p: &str| crd.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let (group, plural, kind) = (
            s("/spec/group"),
            s("/spec/names/plural"),
            s("/spec/names/kind"),
        );
        let namespaced = s("/spec/scope") == "Namespaced";
        let versions = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for v in versions {
            if v.get("served").and_then(Value::as_bool) != Some(true) {
                continue;
            }
            let version = v.get("name").and_then(Value::as_str).unwrap_or_default();
            let status_subresource = v.pointer("/subresources/status").is_some();
            let row = RESOURCES
                .iter()
                .find(|r| r.group == group && r.version == version && r.plural == plural)
                .ok_or_else(|| {
                    CrdError::Unknown(
                        file.to_path_buf(),
                        format!("the fake API has no row for {plural}.{group}/{version} ({kind}): add one to resources.rs"),
                    )
                })?;
            if row.kind != kind
                || row.namespaced != namespaced
                || row.status_subresource != status_subresource
                || !row.crd
            {
                return Err(CrdError::Unknown(
                    file.to_path_buf(),
                    format!("the fake API's row for {plural}.{group}/{version} disagrees with the CRD (kind {kind}, namespaced {namespaced}, status subresource {status_subresource})"),
                ));
            }
            let schema = v
                .pointer("/schema/openAPIV3Schema")
                .cloned()
                .ok_or_else(|| {
                    CrdError::Parse(
                        file.to_path_buf(),
                        format!("{kind} {version}: no openAPIV3Schema"),
                    )
                })?;
            self.compile(file, &schema, kind, version, "")?;
            self.versions.push(CrdVersion {
                group: group.into(),
                plural: plural.into(),
                version: version.into(),
                schema,
            });
        }
        Ok(())
    }

    /// Compiles every pattern of a schema, and checks that every CEL rule under `status`
    /// is one `schema.rs` evaluates.
    fn compile(
        &mut self,
        file: &Path,
        s: &Value,
        kind: &str,
        version: &str,
        path: &str,
    ) -> Result<(), CrdError> {
        if let Some(p) = s.get("pattern").and_then(Value::as_str) {
            if !self.patterns.contains_key(p) {
                let re = Regex::new(p).map_err(|e| {
                    CrdError::Unsupported(
                        file.to_path_buf(),
                        format!("{kind} {version} {path}: pattern {p:?}: {e}"),
                    )
                })?;
                self.patterns.insert(p.to_string(), re);
            }
        }
        if path.starts_with(".status") {
            for rule in s
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let text = rule.get("rule").and_then(Value::as_str).unwrap_or_default();
                if crate::cel::status_rule(text).is_none() {
                    return Err(CrdError::Unsupported(
                        file.to_path_buf(),
                        format!("{kind} {version} {path}: the CEL rule {text:?} is not transcribed in fakeapi's schema.rs"),
                    ));
                }
            }
        }
        for (k, child) in s
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            self.compile(file, child, kind, version, &format!("{path}.{k}"))?;
        }
        if let Some(items) = s.get("items") {
            self.compile(file, items, kind, version, &format!("{path}[]"))?;
        }
        if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
            self.compile(file, ap, kind, version, &format!("{path}{{}}"))?;
        }
        for key in ["oneOf", "anyOf", "allOf"] {
            for sub in s.get(key).and_then(Value::as_array).into_iter().flatten() {
                self.compile(file, sub, kind, version, path)?;
            }
        }
        if let Some(not) = s.get("not") {
            self.compile(file, not, kind, version, path)?;
        }
        Ok(())
    }
}

/// Where the Gateway API CRDs of `channel` (`standard` or `experimental`) are:
/// `$K8SLB_CONFORMANCE_DIR/gateway-api/config/crd/<channel>`, the conformance data
/// directory defaulting to `../shared/conformance` beside the repository (as the
/// conformance runner reads it). Err with the fix when the directory is not there.
pub fn gateway_api_crd_dir(channel: &str) -> Result<PathBuf, String> {
    let base = match std::env::var_os("K8SLB_CONFORMANCE_DIR") {
        Some(d) => PathBuf::from(d),
        // fakeapi/ is one level below the repository root.
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/conformance"),
    };
    let dir = base.join("gateway-api/config/crd").join(channel);
    if dir
        .join("gateway.networking.k8s.io_gateways.yaml")
        .is_file()
    {
        Ok(dir)
    } else {
        Err(format!(
            "the Gateway API v1.6.1 CRDs ({channel} channel) are not at {}: put the upstream \
             conformance data at {} or set K8SLB_CONFORMANCE_DIR to its directory",
            dir.display(),
            base.display()
        ))
    }
}
