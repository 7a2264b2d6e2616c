//! Bounded waiting.

use anyhow::{bail, Result};
use std::time::{Duration, Instant};

/// Polls `f` every 20 ms until it returns `Ok(true)` or `timeout` passes. Errors from `f`
/// are retried; the last one is reported on timeout.
pub fn until(timeout: Duration, mut f: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last_err = None;
    loop {
        match f() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_err = Some(e),
        }
        if Instant::now() >= deadline {
            match last_err {
                Some(e) => bail!("timed out after {timeout:?}; last error: {e:#}"),
                None => bail!("timed out after {timeout:?}"),
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
