//! A renderer stand-in for the applier's tests, shared by apply.rs's unit tests and
//! `apply_after_failures` (both include this file with `#[path]`; the includer brings
//! `NodeRenderer`, `Desired`, `NodeContext`, `State`, `ViewError` and `RenderError` into scope).
//!
//! Its view is (keepalived part, two server slots), set by the test. The proxy config is
//! `eps [a, b]`; a change of slots only is a Runtime API change (`set s<i> <value>`), a
//! change of the keepalived part is not.

use super::{Desired, NodeContext, NodeRenderer, RenderError, State, ViewError};
use std::cell::Cell;

pub struct Eps {
    /// What the next `view` returns.
    pub view: Cell<(u8, [u16; 2])>,
    /// While set, `render` fails (stands in for any sync failure: ENOSPC, EIO).
    pub fail_render: Cell<bool>,
}

impl Eps {
    pub fn new(view: (u8, [u16; 2])) -> Self {
        Eps {
            view: Cell::new(view),
            fail_render: Cell::new(false),
        }
    }
}

impl NodeRenderer for Eps {
    type View = (u8, [u16; 2]);
    fn view(
        &self,
        _: &State,
        _: &NodeContext,
        _: Option<&Self::View>,
    ) -> Result<Self::View, ViewError> {
        Ok(self.view.get())
    }
    fn render(&self, v: &Self::View) -> Result<Desired, RenderError> {
        if self.fail_render.get() {
            return Err(RenderError::Render {
                name: "stand-in",
                detail: "render failed (stands in for any sync failure: ENOSPC, EIO)".into(),
            });
        }
        Ok(Desired {
            keepalived: format!("ka {}", v.0),
            proxy: Some(format!("eps {:?}", v.1)),
            files: Default::default(),
        })
    }
    fn runtime_diff(&self, old: &Self::View, new: &Self::View) -> Option<Vec<String>> {
        Some(
            (0..2)
                .filter(|&i| old.1[i] != new.1[i])
                .map(|i| format!("set s{i} {}", new.1[i]))
                .collect(),
        )
    }
    fn same_outside_proxy(&self, old: &Self::View, new: &Self::View) -> bool {
        old.0 == new.0
    }
}
