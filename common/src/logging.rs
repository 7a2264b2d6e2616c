//! One logging setup for both binaries (feature `logging`): the same level map, the same
//! formats, the same writer.
//!
//! - `LOG_LEVEL` (k8slb's): `0` off, `1` error, `2` warn, `3` info, `4` debug (`5` and more:
//!   trace), a level name, or a tracing filter such as `info,k8slb_actor=debug`. `0` turns
//!   logging off in both binaries (the Perl actor could not: it parsed the level with `||`).
//!   A bare word that is not a level name is refused: as a tracing filter it would mean
//!   "everything of the target `<word>`, nothing else", which is never what was meant.
//! - `LOG_FORMAT`: `plain` (one human line per event) or `json` (one JSON object per line).
//! - Logs go to stderr, with ANSI colours only when stderr is a terminal: a pod's log file
//!   gets plain text.
//!
//! This is the one place in `k8slb-common` that touches a process-wide resource (the global
//! tracing subscriber); it does no file or network I/O of its own.

use std::io::IsTerminal;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Plain,
    /// One JSON object per line (`timestamp`, `level`, `target`, `fields`).
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = LoggingError;
    fn from_str(s: &str) -> Result<Self, LoggingError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "plain" => Ok(LogFormat::Plain),
            "json" => Ok(LogFormat::Json),
            _ => Err(LoggingError::Format(s.to_string())),
        }
    }
}

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LogFormat::Plain => "plain",
            LogFormat::Json => "json",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoggingError {
    #[error("unknown log format {0:?}: expected plain or json")]
    Format(String),
    #[error(
        "invalid log level {level:?}: expected 0 (off) to 4 (debug), a level name \
         (off, error, warn, info, debug, trace) or a filter like info,k8slb_watcher=debug ({why})"
    )]
    Level { level: String, why: String },
}

const LEVEL_NAMES: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];

/// The tracing filter for a `LOG_LEVEL` value (the one level map of both binaries).
pub fn level_filter(level: &str) -> Result<String, LoggingError> {
    let t = level.trim();
    let bad = |why: &str| LoggingError::Level {
        level: level.to_string(),
        why: why.to_string(),
    };
    if t.is_empty() {
        return Ok("info".into());
    }
    if let Ok(n) = t.parse::<u64>() {
        return Ok(match n {
            0 => "off",
            1 => "error",
            2 => "warn",
            3 => "info",
            4 => "debug",
            _ => "trace",
        }
        .into());
    }
    if t.starts_with('-') && t[1..].chars().all(|c| c.is_ascii_digit()) {
        return Err(bad("a negative number"));
    }
    let lower = t.to_ascii_lowercase();
    let lower = if lower == "warning" {
        "warn".into()
    } else {
        lower
    };
    if LEVEL_NAMES.contains(&lower.as_str()) {
        return Ok(lower);
    }
    if !t.contains('=') && !t.contains(',') {
        return Err(bad("not a level name"));
    }
    tracing_subscriber::EnvFilter::try_new(t).map_err(|e| bad(&e.to_string()))?;
    Ok(t.to_string())
}

/// Installs the global subscriber: `level` through [`level_filter`], `format`, to stderr,
/// ANSI colours only if stderr is a terminal; a line that cannot be written is dropped, never
/// a panic. A second call (tests) leaves the first in
/// place.
pub fn init_logging(format: LogFormat, level: &str) -> Result<(), LoggingError> {
    let filter = tracing_subscriber::EnvFilter::try_new(level_filter(level)?).map_err(|e| {
        LoggingError::Level {
            level: level.to_string(),
            why: e.to_string(),
        }
    })?;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        // A log line that cannot be written (stderr on a full disk, a closed pipe) is
        // lost, not reported with `eprintln!`, which panics when stderr fails too and
        // would end the actor before it stops its daemons.
        .log_internal_errors(false);
    let _ = match format {
        LogFormat::Plain => b.try_init(),
        LogFormat::Json => b.json().try_init(),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k8slb_numbers_map_to_levels_and_zero_is_off() {
        for (n, want) in [
            ("0", "off"),
            ("1", "error"),
            ("2", "warn"),
            ("3", "info"),
            ("4", "debug"),
            ("5", "trace"),
            (" 3 ", "info"),
            ("", "info"),
        ] {
            assert_eq!(level_filter(n).unwrap(), want, "{n:?}");
        }
    }

    #[test]
    fn level_names_and_filters_are_accepted() {
        assert_eq!(level_filter("DEBUG").unwrap(), "debug");
        assert_eq!(level_filter("warning").unwrap(), "warn");
        assert_eq!(
            level_filter("info,k8slb_actor=debug").unwrap(),
            "info,k8slb_actor=debug"
        );
    }

    #[test]
    fn a_bare_word_or_negative_number_is_refused_with_the_value() {
        for bad in ["verbose", "-1", "info,k8slb_actor=loud"] {
            let e = level_filter(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn formats_parse_case_insensitively_and_refuse_others() {
        assert_eq!("plain".parse::<LogFormat>().unwrap(), LogFormat::Plain);
        assert_eq!("JSON".parse::<LogFormat>().unwrap(), LogFormat::Json);
        assert_eq!(
            "xml".parse::<LogFormat>().unwrap_err().to_string(),
            "unknown log format \"xml\": expected plain or json"
        );
    }
}
