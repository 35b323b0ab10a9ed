//! The set of loaded plugins, keyed by name, fed by a directory of `*.wasm`
//! files: an initial scan ([`PluginRegistry::load_dir`]) and a notify watcher
//! ([`PluginRegistry::watch_dir`]) for hot reload.
//!
//! # Reload state machine (per file)
//!
//! 1. An event on `x.wasm` (create, write, rename to, remove) marks the file
//!    pending; each further event restarts its quiet period (debounce). An
//!    event saying the file is complete (its writer closed it, or it was
//!    renamed into place) shortens the wait to a 20 ms settle.
//! 2. After the quiet period the file is read; if its size or mtime changed
//!    while reading it stays pending (still being written).
//! 3. Same digest as last attempt: nothing to do. Otherwise it is compiled,
//!    checked, linked and registered ([`PluginRuntime::load_file`]).
//! 4. Failure: recorded in [`PluginStatus`], logged, [`RegistryEvent::Failed`];
//!    whatever the file served before keeps serving.
//! 5. Success: if another file already serves that plugin name, refused
//!    (name conflict). Otherwise the new version atomically replaces the old
//!    one in the name map ([`RegistryEvent::Loaded`] or
//!    [`RegistryEvent::Replaced`]); calls in flight keep their clone of the
//!    old [`LoadedPlugin`] and finish on it.
//! 6. A removed file unregisters its plugin ([`RegistryEvent::Removed`]); a
//!    file refused for a name conflict with it is then retried.
//!
//! With a [`FileCheck`] ([`PluginRegistry::set_file_check`]: `rekon run
//! --require-signatures` / `--signature-key`), step 3 first hands the
//! file's bytes and its signature file `x.wasm.sig` (see
//! [`signature_file`]) to the check; a refusal is a failure of step 4,
//! before anything is compiled. A changed signature file is a new attempt.
//!
//! A file named `*.shadow.wasm` goes through the same steps but never
//! serves: it becomes the *shadow* of the plugin it registers
//! ([`PluginRegistry::shadow`], see `crate::change::shadow`), replacing the
//! previous shadow of that name; removing the file ends the shadow. No
//! [`RegistryEvent`] is sent for shadows (controllers look them up per
//! reconcile).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use notify::Watcher as _;
use parking_lot::Mutex;
use sha2::{Digest as _, Sha256};
use tokio::sync::broadcast;

use super::error::{LoadError, RegistryError};
use super::file_check::{FileCheck, plugin_file_of_signature, signature_file};
use super::loaded::{LoadOptions, LoadedPlugin};
use super::runtime::PluginRuntime;

/// A change of the registry, broadcast to subscribers (the controller
/// manager starts, restarts and stops controllers from these).
#[derive(Debug, Clone)]
pub enum RegistryEvent {
    /// A plugin name appeared.
    Loaded(LoadedPlugin),
    /// A new version of a plugin replaced the old one.
    Replaced {
        /// The version that served until now.
        old: LoadedPlugin,
        /// The version serving from now on.
        new: LoadedPlugin,
    },
    /// A plugin is gone (its file was removed or now names another plugin).
    Removed {
        /// The plugin name.
        name: String,
    },
    /// A file was refused; whatever it served before keeps serving.
    Failed {
        /// The file.
        path: PathBuf,
        /// Why, for humans.
        error: String,
    },
}

/// Why [`PluginRegistry::apply_module`] did not serve a module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// One word for a condition (`InvalidSettings`, `NameConflict`, …).
    pub reason: &'static str,
    /// For humans.
    pub message: String,
}

/// The state of one plugin file, for `status` endpoints and tests.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginStatus {
    /// The file.
    pub path: PathBuf,
    /// Name of the plugin the file serves, if any.
    pub plugin: Option<String>,
    /// Its version.
    pub version: Option<String>,
    /// sha256 of the serving version.
    pub digest: Option<String>,
    /// When the serving version was loaded.
    pub loaded_at: Option<SystemTime>,
    /// Why the latest content of the file was refused (the serving version,
    /// if any, is older).
    pub error: Option<String>,
    /// When it was refused.
    pub failed_at: Option<SystemTime>,
    /// A `*.shadow.wasm` file: runs beside the serving version, never serves.
    pub shadow: bool,
}

/// Loaded plugins by name. Cheap to clone (shared state).
#[derive(Clone)]
pub struct PluginRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    runtime: PluginRuntime,
    state: Mutex<State>,
    events: broadcast::Sender<RegistryEvent>,
    debounce: Duration,
    /// Plugins whose controllers keep their watches and queue but do not
    /// reconcile (a Plugin object's `spec.suspend`).
    suspended: tokio::sync::watch::Sender<std::collections::BTreeSet<String>>,
    /// What every plugin file must pass before it is compiled.
    file_check: std::sync::OnceLock<FileCheck>,
}

#[derive(Default)]
struct State {
    by_name: BTreeMap<String, LoadedPlugin>,
    /// Shadow versions (from `*.shadow.wasm` files), by plugin name.
    shadows: BTreeMap<String, LoadedPlugin>,
    files: BTreeMap<PathBuf, FileEntry>,
}

#[derive(Default)]
struct FileEntry {
    /// What the file serves now.
    serving: Option<LoadedPlugin>,
    /// Digest of the last content attempted (loaded or refused).
    attempted: Option<String>,
    error: Option<(String, SystemTime)>,
    /// Refused because this plugin name is served by another file.
    conflict: Option<String>,
}

impl State {
    /// Another file of the same kind as `path` (serving, or shadow) that
    /// loaded plugin `name`.
    fn other_file_serving(&self, path: &Path, name: &str) -> Option<PathBuf> {
        let shadow = is_shadow_file(path);
        self.files
            .iter()
            .find(|(p, e)| {
                p.as_path() != path
                    && is_shadow_file(p) == shadow
                    && e.serving.as_ref().is_some_and(|s| s.name() == name)
            })
            .map(|(p, _)| p.clone())
    }
}

/// Outcome of looking at a file once.
enum Applied {
    /// Loaded, refused, unchanged or removed: nothing more to do.
    Done,
    /// Still being written: look again after another quiet period.
    Unstable,
}

impl std::fmt::Debug for PluginRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginRegistry")
            .field(
                "plugins",
                &self.inner.state.lock().by_name.keys().collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl PluginRegistry {
    /// Default quiet period before a changed file is loaded.
    pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(300);

    /// An empty registry loading through `runtime`.
    #[must_use]
    pub fn new(runtime: PluginRuntime) -> Self {
        Self::with_debounce(runtime, Self::DEFAULT_DEBOUNCE)
    }

    /// Like [`Self::new`] with another quiet period for hot reload.
    #[must_use]
    pub fn with_debounce(runtime: PluginRuntime, debounce: Duration) -> Self {
        let (events, _) = broadcast::channel(256);
        Self {
            inner: Arc::new(Inner {
                runtime,
                state: Mutex::new(State::default()),
                events,
                debounce,
                suspended: tokio::sync::watch::channel(std::collections::BTreeSet::new()).0,
                file_check: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Every plugin file must pass `check` before it is compiled (see the
    /// [module docs](self)). Set once, before the directory is loaded;
    /// `false` when a check was already set.
    pub fn set_file_check(&self, check: FileCheck) -> bool {
        self.inner.file_check.set(check).is_ok()
    }

    /// Suspend (or resume) the plugin `name`: it stays loaded, its watches
    /// and queue keep running (events are kept, deduplicated), nothing is
    /// reconciled or written until it is resumed. Applies to a plugin
    /// loaded later too.
    pub fn set_suspended(&self, name: &str, suspended: bool) {
        self.inner.suspended.send_if_modified(|set| {
            if suspended {
                set.insert(name.to_owned())
            } else {
                set.remove(name)
            }
        });
    }

    /// The suspended plugins, and their changes.
    #[must_use]
    pub fn suspensions(&self) -> tokio::sync::watch::Receiver<std::collections::BTreeSet<String>> {
        self.inner.suspended.subscribe()
    }

    /// The runtime plugins are loaded with.
    #[must_use]
    pub fn runtime(&self) -> &PluginRuntime {
        &self.inner.runtime
    }

    /// The current version of plugin `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<LoadedPlugin> {
        self.inner.state.lock().by_name.get(name).cloned()
    }

    /// The shadow version of plugin `name`, if a `*.shadow.wasm` file
    /// registering it is loaded.
    #[must_use]
    pub fn shadow(&self, name: &str) -> Option<LoadedPlugin> {
        self.inner.state.lock().shadows.get(name).cloned()
    }

    /// Every loaded shadow version, by name.
    #[must_use]
    pub fn shadows(&self) -> Vec<LoadedPlugin> {
        self.inner.state.lock().shadows.values().cloned().collect()
    }

    /// Every loaded plugin, by name.
    #[must_use]
    pub fn plugins(&self) -> Vec<LoadedPlugin> {
        self.inner.state.lock().by_name.values().cloned().collect()
    }

    /// One entry per known plugin file.
    #[must_use]
    pub fn status(&self) -> Vec<PluginStatus> {
        let state = self.inner.state.lock();
        state
            .files
            .iter()
            .map(|(path, entry)| PluginStatus {
                path: path.clone(),
                plugin: entry.serving.as_ref().map(|p| p.name().to_string()),
                version: entry.serving.as_ref().map(|p| p.version().to_string()),
                digest: entry.serving.as_ref().map(|p| p.digest().to_string()),
                loaded_at: entry.serving.as_ref().map(LoadedPlugin::loaded_at),
                error: entry.error.as_ref().map(|(e, _)| e.clone()),
                failed_at: entry.error.as_ref().map(|(_, t)| *t),
                shadow: is_shadow_file(path),
            })
            .collect()
    }

    /// Registry changes from now on.
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<RegistryEvent> {
        self.inner.events.subscribe()
    }

    /// Scans `dir` once, synchronously: loads every new or changed `*.wasm`
    /// and unregisters plugins whose files are gone. A file that fails is
    /// recorded in [`Self::status`]; only an unreadable directory is an error.
    /// Compiles on the calling thread (use `spawn_blocking` from async code).
    pub fn load_dir(&self, dir: &Path) -> Result<(), RegistryError> {
        let entries = std::fs::read_dir(dir).map_err(|source| RegistryError::ReadDir {
            dir: dir.to_path_buf(),
            source,
        })?;
        let mut present: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| is_plugin_file(p) && p.is_file())
            .collect();
        present.sort();
        let gone: Vec<PathBuf> = {
            let state = self.inner.state.lock();
            state
                .files
                .keys()
                .filter(|p| p.parent() == Some(dir) && !present.contains(p))
                .cloned()
                .collect()
        };
        for path in gone {
            self.remove_file(&path);
        }
        for path in present {
            // A file still being written is picked up by the watcher.
            let _ = self.apply_file(&path, false);
        }
        Ok(())
    }

    /// Loads `bytes` as the content of `origin`, a source other than the
    /// plugin directory (a Plugin object: `plugins.rekon.dev/NAME.wasm`, or
    /// `NAME.shadow.wasm` for its shadow), through the same steps as a file:
    /// compile, check, register, then `accept` (the caller's own conditions:
    /// a grant, a name), then swap in. On any failure whatever `origin`
    /// served before keeps serving, and the reason is returned (and logged,
    /// and announced as [`RegistryEvent::Failed`] once per change). A name
    /// already served by another origin or file is refused, whichever came
    /// first keeps it.
    ///
    /// Compiles on the calling thread (use `spawn_blocking` from async code).
    ///
    /// # Errors
    /// Why the module does not serve.
    pub fn apply_module(
        &self,
        origin: &Path,
        bytes: &[u8],
        options: &LoadOptions,
        accept: impl FnOnce(&LoadedPlugin) -> Result<(), Refusal>,
    ) -> Result<LoadedPlugin, Refusal> {
        let module = module_digest(bytes);
        let digest = attempt_digest(&module, options.settings.as_deref());
        let plugin = match self.inner.runtime.load_at(bytes, module, origin, options) {
            Ok(plugin) => plugin,
            Err(e) => {
                let error = error_chain(&e);
                self.record_failure(origin, Some(digest), error.clone(), None);
                return Err(Refusal {
                    reason: e.reason(),
                    message: error,
                });
            }
        };
        if let Err(error) = accept(&plugin) {
            self.record_failure(origin, Some(digest), error.message.clone(), None);
            return Err(error);
        }
        self.install(origin, digest, plugin.clone());
        let state = self.inner.state.lock();
        match state.files.get(origin) {
            Some(entry) if entry.serving.as_ref().is_some_and(|p| p.same_load(&plugin)) => {
                Ok(plugin)
            }
            Some(FileEntry {
                error: Some((error, _)),
                conflict,
                ..
            }) => Err(Refusal {
                reason: if conflict.is_some() {
                    "NameConflict"
                } else {
                    "LoadFailed"
                },
                message: error.clone(),
            }),
            _ => Err(Refusal {
                reason: "LoadFailed",
                message: format!("{} was not installed", origin.display()),
            }),
        }
    }

    /// Forgets `origin` (see [`Self::apply_module`]) and unregisters what it
    /// served.
    pub fn remove_module(&self, origin: &Path) {
        self.remove_file(origin);
    }

    /// What `origin` serves now, if anything.
    #[must_use]
    pub fn serving(&self, origin: &Path) -> Option<LoadedPlugin> {
        self.inner
            .state
            .lock()
            .files
            .get(origin)
            .and_then(|e| e.serving.clone())
    }

    /// Watches `dir` until `shutdown` resolves: new, changed, renamed and
    /// removed `*.wasm` files are (re)loaded or unregistered after a quiet
    /// period. Rescans the directory once the watch is established, so
    /// changes since [`Self::load_dir`] are not missed (they wait for the same
    /// quiet period).
    pub async fn watch_dir(
        &self,
        dir: PathBuf,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), RegistryError> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut watcher = notify::recommended_watcher(move |event| {
            let _ = tx.send(event);
        })
        .map_err(|source| RegistryError::Watch {
            dir: dir.clone(),
            source,
        })?;
        watcher
            .watch(&dir, notify::RecursiveMode::NonRecursive)
            .map_err(|source| RegistryError::Watch {
                dir: dir.clone(),
                source,
            })?;
        tracing::info!(dir = %dir.display(), "watching plugin directory");
        let debounce = self.inner.debounce;
        let mut pending: HashMap<PathBuf, Instant> = HashMap::new();
        // Changes since `load_dir` (or before it) go through the same quiet
        // period as watched ones: a file may be mid-write right now.
        self.mark_all(&dir, &mut pending)?;
        tokio::pin!(shutdown);
        loop {
            // `pending` holds when each file is due.
            let next_due = pending.values().min().copied();
            tokio::select! {
                () = &mut shutdown => break,
                event = rx.recv() => match event {
                    None => break,
                    Some(Ok(event)) => {
                        if event.need_rescan() {
                            tracing::debug!(dir = %dir.display(), "plugin directory events overflowed; rescanning");
                            self.mark_all(&dir, &mut pending)?;
                        }
                        // Reads (our own hashing of a file included) are no
                        // change: reacting to them would re-read the file
                        // forever. A writer closing the file is one.
                        if !is_change(&event.kind) {
                            continue;
                        }
                        // A writer that closed the file, or a file renamed
                        // into place, is complete: it is loaded after a
                        // short settle instead of the whole quiet period
                        // (half of a hot reload's time otherwise).
                        let due = Instant::now()
                            + if is_complete(&event.kind) { debounce.min(SETTLE) } else { debounce };
                        for path in event.paths {
                            if is_plugin_file(&path) {
                                tracing::debug!(path = %path.display(), kind = ?event.kind, "plugin file event");
                                pending.insert(path, due);
                            } else if let Some(plugin) = plugin_file_of_settings(&path)
                                .or_else(|| plugin_file_of_signature(&path))
                            {
                                // New settings (or a new signature) are a
                                // new load of the plugin file beside them
                                // (if there is one).
                                tracing::debug!(path = %path.display(), kind = ?event.kind, "plugin settings or signature file event");
                                if plugin.is_file() || self.inner.state.lock().files.contains_key(&plugin) {
                                    pending.insert(plugin, due);
                                }
                            }
                        }
                    }
                    Some(Err(e)) => tracing::warn!(dir = %dir.display(), error = %e, "plugin directory watch error"),
                },
                () = sleep_until(next_due), if next_due.is_some() => {
                    let now = Instant::now();
                    let due: Vec<PathBuf> = pending
                        .iter()
                        .filter(|(_, t)| **t <= now)
                        .map(|(p, _)| p.clone())
                        .collect();
                    for path in &due {
                        pending.remove(path);
                    }
                    let this = self.clone();
                    let unstable = tokio::task::spawn_blocking(move || {
                        due.into_iter()
                            .filter(|p| matches!(this.apply_file(p, false), Applied::Unstable))
                            .collect::<Vec<_>>()
                    })
                    .await
                    .unwrap_or_default();
                    for path in unstable {
                        pending.insert(path, Instant::now() + debounce);
                    }
                }
            }
        }
        tracing::debug!(dir = %dir.display(), "stopped watching plugin directory");
        Ok(())
    }

    /// Marks every plugin file present in `dir`, and every known file of
    /// `dir`, as pending (level-based rescan: unchanged files are skipped by
    /// digest, vanished ones unregistered).
    fn mark_all(
        &self,
        dir: &Path,
        pending: &mut HashMap<PathBuf, Instant>,
    ) -> Result<(), RegistryError> {
        let due = Instant::now() + self.inner.debounce;
        let entries = std::fs::read_dir(dir).map_err(|source| RegistryError::ReadDir {
            dir: dir.to_path_buf(),
            source,
        })?;
        for path in entries.filter_map(Result::ok).map(|e| e.path()) {
            if is_plugin_file(&path) {
                pending.insert(path, due);
            }
        }
        let state = self.inner.state.lock();
        for path in state.files.keys().filter(|p| p.parent() == Some(dir)) {
            pending.insert(path.clone(), due);
        }
        Ok(())
    }

    /// Looks at one file: removed → unregister; changed → load and swap.
    fn apply_file(&self, path: &Path, force: bool) -> Applied {
        let read = (|| {
            let before = std::fs::metadata(path)?;
            let bytes = std::fs::read(path)?;
            let after = std::fs::metadata(path)?;
            let stable = before.len() == after.len()
                && after.len() == bytes.len() as u64
                && before.modified().ok() == after.modified().ok();
            Ok::<_, std::io::Error>((bytes, stable))
        })();
        let bytes = match read {
            Ok((_, false)) => return Applied::Unstable,
            Ok((bytes, true)) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.remove_file(path);
                return Applied::Done;
            }
            Err(e) => {
                self.record_failure(path, None, format!("failed to read plugin file: {e}"), None);
                return Applied::Done;
            }
        };
        let module = module_digest(&bytes);
        // `x.settings.json` beside `x.wasm`: the file's settings.
        let settings = match read_settings_file(path) {
            Ok(settings) => settings,
            Err(error) => {
                self.record_failure(path, Some(module), error, None);
                return Applied::Done;
            }
        };
        let mut digest = attempt_digest(&module, settings.as_deref());
        let check = self.inner.file_check.get().cloned();
        let signature = match &check {
            None => None,
            Some(_) => match std::fs::read(signature_file(path)) {
                Ok(sig) => {
                    // A new signature is a new attempt.
                    digest = format!("{digest}+sig{}", hex::encode(Sha256::digest(&sig)));
                    Some(sig)
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => {
                    let error = format!(
                        "failed to read signature file {}: {e}",
                        signature_file(path).display()
                    );
                    self.record_failure(path, Some(digest), error, None);
                    return Applied::Done;
                }
            },
        };
        {
            let state = self.inner.state.lock();
            if !force
                && state.files.get(path).and_then(|e| e.attempted.as_deref())
                    == Some(digest.as_str())
            {
                return Applied::Done;
            }
        }
        if let Some(check) = &check
            && let Err(error) = check(path, &bytes, signature.as_deref())
        {
            self.record_failure(path, Some(digest), error, None);
            return Applied::Done;
        }
        let options = LoadOptions {
            settings,
            instance: None,
            limits: super::file_limits::beside(path),
            precompiled: super::file_precompiled::beside(
                path,
                check.as_ref(),
                self.inner.runtime.config().cache_dir.as_deref(),
                &self.inner.runtime.config().metrics,
            ),
        };
        match self.inner.runtime.load_at(&bytes, module, path, &options) {
            Err(e) => {
                self.record_failure(path, Some(digest), error_chain(&e), None);
            }
            Ok(plugin) => self.install(path, digest, plugin),
        }
        Applied::Done
    }

    fn install(&self, path: &Path, digest: String, plugin: LoadedPlugin) {
        let shadow = is_shadow_file(path);
        let name = plugin.name().to_string();
        let mut state = self.inner.state.lock();
        let other = state.other_file_serving(path, &name);
        if let Some(other) = other {
            drop(state);
            let (error, conflict) = if shadow {
                let error = format!(
                    "a shadow of plugin {name:?} is already loaded from {}; refusing {}",
                    other.display(),
                    path.display()
                );
                (error, None)
            } else {
                let error = format!(
                    "plugin name {name:?} is already served by {}; refusing {}",
                    other.display(),
                    path.display()
                );
                (error, Some(name))
            };
            self.record_failure(path, Some(digest), error, conflict);
            return;
        }
        let entry = state.files.entry(path.to_path_buf()).or_default();
        let previous = entry.serving.replace(plugin.clone());
        entry.attempted = Some(digest);
        entry.error = None;
        entry.conflict = None;
        if shadow {
            if let Some(previous) = previous.filter(|p| p.name() != name) {
                state.shadows.remove(previous.name());
            }
            let serving = state.by_name.get(&name).map(|p| p.version().to_owned());
            state.shadows.insert(name.clone(), plugin.clone());
            tracing::info!(
                plugin = %name,
                shadow.version = %plugin.version(),
                shadow.digest = %plugin.digest(),
                serving.version = serving.as_deref().unwrap_or("none"),
                path = %path.display(),
                "loaded shadow version: it runs beside the serving version and never writes"
            );
            return;
        }
        if let Some(previous) = previous.as_ref().filter(|p| p.name() != name) {
            // The file now declares another plugin: the old name is gone.
            let old_name = previous.name().to_string();
            state.by_name.remove(&old_name);
            tracing::info!(plugin = %old_name, path = %path.display(), "removed plugin (its file now declares another name)");
            let _ = self
                .inner
                .events
                .send(RegistryEvent::Removed { name: old_name });
        }
        match state.by_name.insert(name.clone(), plugin.clone()) {
            Some(old) => {
                tracing::info!(
                    plugin = %name,
                    plugin.version = %plugin.version(),
                    plugin.digest = %plugin.digest(),
                    old.version = %old.version(),
                    path = %path.display(),
                    "replaced plugin"
                );
                let _ = self
                    .inner
                    .events
                    .send(RegistryEvent::Replaced { old, new: plugin });
            }
            None => {
                tracing::info!(
                    plugin = %name,
                    plugin.version = %plugin.version(),
                    plugin.digest = %plugin.digest(),
                    path = %path.display(),
                    "loaded plugin"
                );
                let _ = self.inner.events.send(RegistryEvent::Loaded(plugin));
            }
        }
    }

    fn record_failure(
        &self,
        path: &Path,
        digest: Option<String>,
        error: String,
        conflict: Option<String>,
    ) {
        let mut state = self.inner.state.lock();
        let entry = state.files.entry(path.to_path_buf()).or_default();
        // Logged and announced once per change: the same file content
        // refused for the same reason again (a touch, a rescan) is quiet.
        let repeated =
            entry.attempted == digest && entry.error.as_ref().is_some_and(|(e, _)| *e == error);
        entry.attempted = digest;
        entry.error = Some((error.clone(), SystemTime::now()));
        entry.conflict = conflict;
        if repeated {
            tracing::debug!(path = %path.display(), "plugin file refused again for the same reason");
            return;
        }
        match entry.serving.as_ref() {
            Some(p) => tracing::warn!(
                path = %path.display(),
                error = %error,
                serving = %format!("{} {}", p.name(), p.version()),
                "refused plugin file; the version loaded before from it keeps serving"
            ),
            None => tracing::warn!(
                path = %path.display(),
                error = %error,
                "refused plugin file; nothing is served from it"
            ),
        }
        let _ = self.inner.events.send(RegistryEvent::Failed {
            path: path.to_path_buf(),
            error,
        });
    }

    /// Forgets a file and unregisters what it served; retries files refused
    /// for a name conflict with it.
    fn remove_file(&self, path: &Path) {
        let retry: Vec<PathBuf> = {
            let mut state = self.inner.state.lock();
            let Some(entry) = state.files.remove(path) else {
                return;
            };
            let Some(plugin) = entry.serving else {
                tracing::debug!(path = %path.display(), "forgot refused plugin file");
                return;
            };
            let name = plugin.name().to_string();
            if is_shadow_file(path) {
                if state
                    .shadows
                    .get(&name)
                    .is_some_and(|p| p.same_load(&plugin))
                {
                    state.shadows.remove(&name);
                }
                tracing::info!(plugin = %name, path = %path.display(), "shadow version removed (file deleted)");
                return;
            }
            if state
                .by_name
                .get(&name)
                .is_some_and(|p| p.same_load(&plugin))
            {
                state.by_name.remove(&name);
            }
            tracing::info!(plugin = %name, path = %path.display(), "removed plugin (file deleted)");
            let _ = self
                .inner
                .events
                .send(RegistryEvent::Removed { name: name.clone() });
            state
                .files
                .iter()
                .filter(|(_, e)| e.conflict.as_deref() == Some(name.as_str()))
                .map(|(p, _)| p.clone())
                .collect()
        };
        for path in retry {
            let _ = self.apply_file(&path, true);
        }
    }
}

impl PluginRuntime {
    /// Loads bytes read from `path` (the registry reads files itself to
    /// check they are not being written), whose sha256 the registry has
    /// already taken (`digest`, hex).
    pub(crate) fn load_at(
        &self,
        bytes: &[u8],
        digest: String,
        path: &Path,
        options: &LoadOptions,
    ) -> Result<LoadedPlugin, LoadError> {
        self.load_with(
            bytes,
            Some(digest),
            path.display().to_string(),
            Some(path.to_path_buf()),
            options,
        )
    }
}

/// The hex sha256 of a module's bytes (what `LoadedPlugin::digest` says).
fn module_digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// What one attempt at an origin is known by: the module's digest, and the
/// settings' when there are any (new settings are a new attempt).
fn attempt_digest(module: &str, settings: Option<&str>) -> String {
    match settings {
        None => module.to_owned(),
        Some(s) => format!("{module}+{}", hex::encode(Sha256::digest(s.as_bytes()))),
    }
}

/// The settings file of plugin file `x.wasm`: `x.settings.json` (and
/// `x.shadow.settings.json` for `x.shadow.wasm`).
#[must_use]
pub fn settings_file(plugin_file: &Path) -> Option<PathBuf> {
    let name = plugin_file.file_name()?.to_str()?.strip_suffix(".wasm")?;
    Some(plugin_file.with_file_name(format!("{name}.settings.json")))
}

/// The plugin file a settings file belongs to (see [`settings_file`]).
fn plugin_file_of_settings(settings: &Path) -> Option<PathBuf> {
    let name = settings
        .file_name()?
        .to_str()?
        .strip_suffix(".settings.json")?;
    (!name.is_empty() && !name.starts_with('.'))
        .then(|| settings.with_file_name(format!("{name}.wasm")))
}

/// The settings of `plugin_file` from its settings file: `None` when there
/// is no such file; an error naming the file when it is unreadable or not
/// JSON (the load is refused, whatever served keeps serving).
fn read_settings_file(plugin_file: &Path) -> Result<Option<Arc<str>>, String> {
    let Some(file) = settings_file(plugin_file) else {
        return Ok(None);
    };
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(format!(
                "failed to read settings file {}: {e}",
                file.display()
            ));
        }
    };
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("settings file {} is not JSON: {e}", file.display()))?;
    Ok((!value.is_null()).then(|| Arc::from(value.to_string().as_str())))
}

/// Whether a notify event can change what a plugin file holds: creation,
/// modification, removal, renames, and a writer closing the file. Opens and
/// reads are not (the registry itself opens files to hash them).
fn is_change(kind: &notify::EventKind) -> bool {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// How long a complete file (see [`is_complete`]) waits before it is loaded:
/// enough to coalesce the events of one `cp` or `mv`.
const SETTLE: Duration = Duration::from_millis(20);

/// Whether an event says the file's content is complete: its writer closed
/// it, or it was renamed into place (the atomic way to publish a file).
/// Other changes (writes still going on, removals) wait for the whole
/// quiet period.
fn is_complete(kind: &notify::EventKind) -> bool {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
    matches!(
        kind,
        EventKind::Access(AccessKind::Close(AccessMode::Write))
            | EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Both))
    )
}

/// `x.shadow.wasm`: a shadow version, never serving.
#[must_use]
pub fn is_shadow_file(path: &Path) -> bool {
    is_plugin_file(path)
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".shadow.wasm"))
}

/// `x.wasm`, not hidden (editors and `cp --backup` leave dot files).
fn is_plugin_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "wasm")
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| !n.starts_with('.'))
}

/// `error: source: source` in one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_or_renamed_file_is_complete_other_changes_are_not() {
        use notify::EventKind;
        use notify::event::{
            AccessKind, AccessMode, CreateKind, DataChange, ModifyKind, RemoveKind, RenameMode,
        };
        assert!(is_complete(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(is_complete(&EventKind::Modify(ModifyKind::Name(
            RenameMode::To
        ))));
        assert!(is_complete(&EventKind::Modify(ModifyKind::Name(
            RenameMode::Both
        ))));
        assert!(!is_complete(&EventKind::Modify(ModifyKind::Name(
            RenameMode::From
        ))));
        assert!(!is_complete(&EventKind::Create(CreateKind::File)));
        assert!(!is_complete(&EventKind::Modify(ModifyKind::Data(
            DataChange::Any
        ))));
        assert!(!is_complete(&EventKind::Remove(RemoveKind::File)));
        assert!(!is_complete(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
    }

    #[test]
    fn reads_are_not_changes_but_writes_are() {
        use notify::EventKind;
        use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RemoveKind};
        assert!(!is_change(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!is_change(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(!is_change(&EventKind::Access(AccessKind::Read)));
        assert!(is_change(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(is_change(&EventKind::Create(CreateKind::File)));
        assert!(is_change(&EventKind::Modify(ModifyKind::Any)));
        assert!(is_change(&EventKind::Remove(RemoveKind::File)));
    }
}
