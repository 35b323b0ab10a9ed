//! `NAME.limits.json` beside a plugin file: the limits that plugin asks for
//! (`{"callTimeoutMillis": 500, "memoryBudgetMiB": 128}`, either field
//! optional), only ever narrower than the host's (`limits.rs`). Read when
//! the plugin file is loaded (a change of the limits file alone takes
//! effect at the plugin's next load). A file that does not parse is
//! logged and the host's limits apply: they are the wider ones, and the
//! operator's bound still holds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::limits::PluginLimits;

/// The limits file of `plugin_file` (`pools.wasm` → `pools.limits.json`).
#[must_use]
pub fn limits_file(plugin_file: &Path) -> Option<PathBuf> {
    let stem = plugin_file.file_stem()?.to_str()?;
    Some(plugin_file.with_file_name(format!("{stem}.limits.json")))
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LimitsFile {
    call_timeout_millis: Option<u64>,
    #[serde(rename = "memoryBudgetMiB")]
    memory_budget_mib: Option<u64>,
}

/// The limits `plugin_file` asks for (none: the host's).
pub(crate) fn beside(plugin_file: &Path) -> PluginLimits {
    let Some(file) = limits_file(plugin_file) else {
        return PluginLimits::default();
    };
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return PluginLimits::default(),
        Err(e) => {
            tracing::warn!(file = %file.display(), error = %e, "failed to read a plugin's limits file; the host's limits apply");
            return PluginLimits::default();
        }
    };
    match serde_json::from_str::<LimitsFile>(&text) {
        Ok(l) => PluginLimits {
            call_timeout: l.call_timeout_millis.map(Duration::from_millis),
            memory_budget_bytes: l
                .memory_budget_mib
                .map(|m| usize::try_from(m << 20).unwrap_or(usize::MAX)),
        },
        Err(e) => {
            tracing::warn!(file = %file.display(), error = %e, "a plugin's limits file does not parse; the host's limits apply");
            PluginLimits::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_beside_a_plugin_file_are_read_and_a_bad_file_is_no_limit() {
        let dir = tempfile::tempdir().expect("a directory");
        let wasm = dir.path().join("pools.wasm");
        assert_eq!(beside(&wasm), PluginLimits::default(), "no file");
        std::fs::write(
            dir.path().join("pools.limits.json"),
            r#"{"callTimeoutMillis": 500, "memoryBudgetMiB": 128}"#,
        )
        .expect("written");
        assert_eq!(
            beside(&wasm),
            PluginLimits {
                call_timeout: Some(Duration::from_millis(500)),
                memory_budget_bytes: Some(128 << 20),
            }
        );
        std::fs::write(dir.path().join("pools.limits.json"), r#"{"memory": 1}"#).expect("written");
        assert_eq!(beside(&wasm), PluginLimits::default(), "unknown field");
    }
}
