//! What to explore and how, and why an exploration could not start.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::scenario::ScenarioError;
use super::world;

/// Called after each plan: (plans done, plans in all, findings, time
/// spent on plans).
pub type Progress = Arc<dyn Fn(usize, usize, usize, Duration) + Send + Sync>;

/// What to explore and how.
#[derive(Clone)]
pub struct ExploreOptions {
    /// The component.
    pub plugin: PathBuf,
    /// The scenario file (none: a scenario is generated from the plugin's
    /// registration and its primary's schema, and written to
    /// `out/scenario.yaml`).
    pub scenario: Option<PathBuf>,
    /// A directory of recorded cases (`rekon run --record`) turned into
    /// the scenario instead (`recording.rs`), written to
    /// `out/scenario.yaml`.
    pub from_recording: Option<PathBuf>,
    /// Generated steps (changes, each followed by a settle) appended to
    /// the scenario's; with no scenario, ignored (the whole scenario is
    /// generated).
    pub generate: usize,
    /// The plugin's settings (a JSON file).
    pub settings: Option<PathBuf>,
    /// Time for the plans (the reference is not counted).
    pub budget: Duration,
    /// At most this many plans, the first in schedule order (none: every
    /// plan the budget allows). A campaign bounded by count, not by time,
    /// runs the same plans on any machine.
    pub max_plans: Option<usize>,
    /// Seed of the plans' order and of shuffled lists.
    pub seed: u64,
    /// Where plans, findings and reproducers are written.
    pub out: PathBuf,
    /// Run only this plan file (after the reference).
    pub replay: Option<PathBuf>,
    /// Called after each plan: (plans done, plans in all, findings).
    pub progress: Option<Progress>,
    /// How the pool makes a freed instance's memory fresh (`rekon plugin
    /// explore --memory-reset`).
    pub memory_reset: crate::plugin::MemoryReset,
}

impl std::fmt::Debug for ExploreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExploreOptions")
            .field("plugin", &self.plugin)
            .field("scenario", &self.scenario)
            .field("budget", &self.budget)
            .field("seed", &self.seed)
            .field("generate", &self.generate)
            .finish_non_exhaustive()
    }
}

/// Why an exploration could not start (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum ExploreError {
    /// The scenario is wrong.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The recording gives no scenario.
    #[error(transparent)]
    Recording(#[from] super::recording::RecordingError),
    /// The settings file is not JSON.
    #[error("failed to read settings {path}: {message}")]
    Settings {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The plugin does not load.
    #[error("failed to load plugin {path}: {message}")]
    Load {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The plan file to replay is wrong.
    #[error("failed to read plan {path}: {message}")]
    Plan {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The reference run could not perform the scenario.
    #[error("the fault-free reference run failed: {0}")]
    Reference(#[source] world::WorldError),
    /// The output directory.
    #[error("failed to write {path}: {source}")]
    Write {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The explorer's runtime.
    #[error("failed to start the explorer's runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

impl ExploreError {
    /// A machine-readable reason.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Scenario(e) => e.reason(),
            Self::Recording(_) => "RecordingInvalid",
            Self::Settings { .. } => "SettingsInvalid",
            Self::Load { .. } => "LoadFailed",
            Self::Plan { .. } => "PlanInvalid",
            Self::Reference(_) => "ReferenceFailed",
            Self::Write { .. } => "WriteFailed",
            Self::Runtime(_) => "RuntimeFailed",
        }
    }
}
