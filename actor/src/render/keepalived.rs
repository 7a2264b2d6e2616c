//! keepalived.conf: its template context (the view's [`crate::view::KeepalivedView`] as is).

use crate::render::chain;
use crate::render_error::RenderError;
use crate::view::{KeepalivedView, NodeView};
use serde::Serialize;
use tera::Context;

pub(crate) const KEEPALIVED: &str = "keepalived.conf.tera";

#[derive(Serialize)]
pub(crate) struct KeepalivedCtx<'a> {
    ka: &'a KeepalivedView,
}

impl crate::render::Renderer {
    pub fn render_keepalived(&self, view: &NodeView) -> Result<String, RenderError> {
        let ctx = Context::from_serialize(KeepalivedCtx {
            ka: &view.keepalived,
        })
        .map_err(|e| RenderError::Render {
            name: KEEPALIVED,
            detail: chain(&e),
        })?;
        self.one(KEEPALIVED, &ctx)
    }
}
