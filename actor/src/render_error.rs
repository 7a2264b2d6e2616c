//! Why a config could not be rendered: one type for the Service configs
//! ([`crate::render`]) and the routes ([`crate::render_http`]), in a leaf module so that
//! neither renderer imports the other for it.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("reading template {path:?}")]
    ReadTemplate {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing template {name}: {detail}")]
    ParseTemplate { name: String, detail: String },
    #[error("rendering {name}: {detail}")]
    Render { name: &'static str, detail: String },
    #[error("the view has no {0} part (proxy kind mismatch)")]
    MissingPart(&'static str),
}

impl RenderError {
    pub fn category(&self) -> &'static str {
        match self {
            RenderError::ReadTemplate { .. } => "ReadTemplate",
            RenderError::ParseTemplate { .. } => "ParseTemplate",
            RenderError::Render { .. } => "Render",
            RenderError::MissingPart(_) => "MissingPart",
        }
    }
}
