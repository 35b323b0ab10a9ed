//! Errors of the plugin runtime. Every message names the plugin (or the file
//! it came from) so a log line or a status entry stands on its own.

use std::path::PathBuf;
use std::time::Duration;

/// Why a plugin file was refused. The previously loaded version of the same
/// plugin (if any) keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("failed to read plugin file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Not a component of the `rekon:plugin/plugin` world (garbage bytes, a
    /// core module, a component lacking the guest export or with wrong types).
    #[error("refused plugin {origin}: not a rekon plugin: {reason}")]
    WrongWorld {
        /// The file or label the bytes came from.
        origin: String,
        /// What is wrong.
        reason: String,
    },
    /// A component built for an incompatible version of the contract.
    #[error("refused plugin {origin}: plugin built for {package}@{found}; this host speaks {host}")]
    IncompatibleContract {
        /// The file or label the bytes came from.
        origin: String,
        /// `rekon:plugin`.
        package: String,
        /// The contract version the plugin was built for.
        found: String,
        /// The contract versions this host accepts (`0.1.x`).
        host: String,
    },
    /// Compilation failed (invalid WebAssembly).
    #[error("failed to compile plugin {origin}: {message}")]
    Compile {
        /// The file or label the bytes came from.
        origin: String,
        /// The compiler's message.
        message: String,
    },
    /// The component imports something the host does not provide (anything
    /// beyond the `rekon:plugin/host` and the WASI interfaces std needs).
    #[error("failed to link plugin {origin}: {message}")]
    Link {
        /// The file or label the bytes came from.
        origin: String,
        /// The linker's message (names the missing import).
        message: String,
    },
    /// Calling `register` failed (trap, timeout, ...).
    #[error("failed to register plugin {origin}")]
    Register {
        /// The file or label the bytes came from.
        origin: String,
        /// The failed call.
        #[source]
        source: Box<CallError>,
    },
    /// `register` refused the settings it was given (its error started with
    /// `invalid settings: `, see `rekon_rules::settings`).
    #[error("plugin {origin} refused its settings: {reason}")]
    InvalidSettings {
        /// The file or label the bytes came from.
        origin: String,
        /// The plugin's own reason.
        reason: String,
    },
    /// The registration cannot be made an instance under another name (see
    /// [`super::LoadOptions::instance`]).
    #[error("plugin {origin} cannot run as instance {instance:?}: {reason}")]
    Instance {
        /// The file or label the bytes came from.
        origin: String,
        /// The instance name asked for.
        instance: String,
        /// Why not.
        reason: String,
    },
    /// `register` returned an error.
    #[error("plugin {origin} refused to register: {message}")]
    Refused {
        /// The file or label the bytes came from.
        origin: String,
        /// The plugin's message.
        message: String,
    },
    /// The registration returned by `register` is invalid.
    #[error("refused plugin {origin}: invalid registration: {reason}")]
    InvalidRegistration {
        /// The file or label the bytes came from.
        origin: String,
        /// What is wrong.
        reason: String,
    },
    /// The plugins loaded and this one together would pass the host-wide
    /// memory budget (`--host-memory-budget`, or the container's limit
    /// less headroom).
    #[error("refused plugin {origin}: over the host's memory budget: {message}")]
    HostMemoryBudget {
        /// The file or label the bytes came from.
        origin: String,
        /// What it needs, what is booked, the budget and where it came from.
        message: String,
    },
    /// The operator policy refuses the plugin (it watches a resource the
    /// policy denies `list`/`watch` on).
    #[error("refused plugin {origin}: {reason}")]
    Policy {
        /// The file or label the bytes came from.
        origin: String,
        /// Which policy entry refuses what.
        reason: String,
    },
}

impl LoadError {
    /// A one-word reason for a condition or a metric label (`InvalidSettings`,
    /// `IncompatibleContract`, …).
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Read { .. } => "ReadFailed",
            Self::WrongWorld { .. } => "NotAPlugin",
            Self::IncompatibleContract { .. } => "IncompatibleContract",
            Self::Compile { .. } => "CompileFailed",
            Self::Link { .. } => "LinkFailed",
            Self::Register { .. } => "RegisterFailed",
            Self::InvalidSettings { .. } => "InvalidSettings",
            Self::Instance { .. } => "InvalidInstance",
            Self::Refused { .. } => "RegisterRefused",
            Self::InvalidRegistration { .. } => "InvalidRegistration",
            Self::Policy { .. } => "PolicyRefused",
            Self::HostMemoryBudget { .. } => "HostMemoryBudget",
        }
    }
}

/// A failed call into a plugin. Fails that call only: the host, other calls
/// and other plugins are unaffected.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The plugin returned a `reconcile-error`.
    #[error("plugin {plugin} failed to reconcile: {message}")]
    Plugin {
        /// Plugin name.
        plugin: String,
        /// The plugin's message.
        message: String,
        /// Whether to retry with backoff (false: terminal).
        retryable: bool,
    },
    /// The guest trapped (unreachable, out-of-bounds access, exit, ...).
    #[error("plugin {plugin} trapped in {function}: {message}")]
    Trap {
        /// Plugin name.
        plugin: String,
        /// The export being called.
        function: &'static str,
        /// The trap.
        message: String,
        /// The top guest frames, if wasmtime captured a backtrace.
        backtrace: Option<String>,
    },
    /// The call ran past its deadline (epoch interruption).
    #[error("plugin {plugin} timed out in {function} after {timeout:?}")]
    Timeout {
        /// Plugin name.
        plugin: String,
        /// The export being called.
        function: &'static str,
        /// The deadline.
        timeout: Duration,
    },
    /// The guest tried to grow its memory beyond the cap.
    #[error("plugin {plugin} ran out of memory in {function} (limit {limit_bytes} bytes)")]
    OutOfMemory {
        /// Plugin name.
        plugin: String,
        /// The export being called.
        function: &'static str,
        /// The memory cap.
        limit_bytes: usize,
    },
    /// The guest panicked (Rust panics abort; the message comes from the
    /// guest's captured stderr).
    #[error("plugin {plugin} panicked in {function}: {message}")]
    Panic {
        /// Plugin name.
        plugin: String,
        /// The export being called.
        function: &'static str,
        /// The panic message.
        message: String,
    },
    /// The outcome broke one of the host's bounds (too many actions, a body
    /// too large, too deep or not JSON: `plugin::OutcomeBounds`). Nothing
    /// of that outcome is written; the reconcile is retried with backoff.
    #[error("plugin {plugin} returned an outcome out of bounds ({}): {bound}", bound.reason())]
    Contained {
        /// Plugin name.
        plugin: String,
        /// The bound it broke.
        bound: super::bounds::Contained,
    },
    /// The plugin returned an action outside its declared permissions, or
    /// one the operator policy refuses (`reason` then starts with `refused
    /// by operator policy`). Nothing of that outcome is written.
    #[error(
        "plugin {plugin} returned a forbidden action: {action} of {resource} in cluster {cluster}: {reason}"
    )]
    Forbidden {
        /// Plugin name.
        plugin: String,
        /// The action (`apply`, `status patch`, `delete`, ...).
        action: String,
        /// The resource (`Node`, `Job.batch`).
        resource: String,
        /// The target cluster.
        cluster: String,
        /// Which permission is missing.
        reason: String,
    },
    /// A fresh instance could not be created (instance pool exhausted, start
    /// function failure, ...).
    #[error("failed to instantiate plugin {plugin}: {message}")]
    Instantiate {
        /// Plugin name.
        plugin: String,
        /// Why.
        message: String,
    },
    /// The host side of the call failed (a host read implementation panicked).
    #[error("failed to run plugin {plugin} call {function}: {message}")]
    Host {
        /// Plugin name.
        plugin: String,
        /// The export being called.
        function: &'static str,
        /// Why.
        message: String,
    },
}

impl CallError {
    /// The plugin the failed call was made to.
    #[must_use]
    pub fn plugin(&self) -> &str {
        match self {
            Self::Plugin { plugin, .. }
            | Self::Trap { plugin, .. }
            | Self::Timeout { plugin, .. }
            | Self::OutOfMemory { plugin, .. }
            | Self::Panic { plugin, .. }
            | Self::Forbidden { plugin, .. }
            | Self::Contained { plugin, .. }
            | Self::Instantiate { plugin, .. }
            | Self::Host { plugin, .. } => plugin,
        }
    }

    /// Whether retrying (with backoff) may help. A plugin error says so
    /// itself; a forbidden action is terminal (the same code would return it
    /// again); runtime failures are retried with backoff.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Plugin { retryable, .. } => *retryable,
            Self::Forbidden { .. } => false,
            _ => true,
        }
    }

    /// A short stable label for metrics (`plugin_error`, `trap`, `timeout`,
    /// `out_of_memory`, `panic`, `forbidden`, `instantiate`, `host`).
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Plugin { .. } => "plugin_error",
            Self::Trap { .. } => "trap",
            Self::Timeout { .. } => "timeout",
            Self::OutOfMemory { .. } => "out_of_memory",
            Self::Panic { .. } => "panic",
            Self::Forbidden { .. } => "forbidden",
            Self::Contained { .. } => "contained",
            Self::Instantiate { .. } => "instantiate",
            Self::Host { .. } => "host",
        }
    }
}

/// Errors of the plugin registry itself (not of one plugin file: those are
/// kept as data in [`super::PluginStatus`]).
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The plugin directory could not be read.
    #[error("failed to read plugin directory {dir}")]
    ReadDir {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file watcher could not be started.
    #[error("failed to watch plugin directory {dir}")]
    Watch {
        /// The directory.
        dir: PathBuf,
        /// The notify error.
        #[source]
        source: notify::Error,
    },
}
