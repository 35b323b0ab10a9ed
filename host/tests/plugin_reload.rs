//! Hot reload of a plugin directory: replace, refuse broken files while the
//! old version keeps serving, unregister removed files, refuse duplicate
//! names, and never load a half-written file.

mod plugin_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use plugin_support::*;
use rekon::action::{Action, ClusterInfo, Outcome, Phase, Resource};
use rekon::plugin::{HostReads, LoadedPlugin, PluginRegistry, ReadError, RegistryEvent};
use tokio::sync::{broadcast, oneshot};

const DEADLINE: Duration = Duration::from_secs(60);
const DEBOUNCE: Duration = Duration::from_millis(200);

/// A registry over a temporary directory, with its watcher running.
struct Fixture {
    dir: tempfile::TempDir,
    registry: PluginRegistry,
    events: broadcast::Receiver<RegistryEvent>,
    stop: Option<oneshot::Sender<()>>,
    watcher: tokio::task::JoinHandle<()>,
}

impl Fixture {
    /// Copies `initial` files into a new directory, loads it, starts watching.
    async fn start(initial: &[(&str, PathBuf)]) -> Self {
        Self::start_with(initial, DEBOUNCE).await
    }

    /// [`Self::start`] with another quiet period.
    async fn start_with(initial: &[(&str, PathBuf)], debounce: Duration) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for (name, source) in initial {
            std::fs::copy(source, dir.path().join(name)).unwrap();
        }
        // Long call deadline: one test holds a call open across a reload.
        let runtime = rekon::plugin::PluginRuntime::new(rekon::plugin::RuntimeConfig {
            call_timeout: DEADLINE,
            max_concurrent_instances: 8,
            ..rekon::plugin::RuntimeConfig::default()
        })
        .expect("runtime starts");
        let registry = PluginRegistry::with_debounce(runtime, debounce);
        let events = registry.subscribe();
        let scan = registry.clone();
        let path = dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || scan.load_dir(&path))
            .await
            .unwrap()
            .expect("directory scans");
        let (stop, stopped) = oneshot::channel::<()>();
        let watch = registry.clone();
        let path = dir.path().to_path_buf();
        let watcher = tokio::spawn(async move {
            watch
                .watch_dir(path, async move {
                    let _ = stopped.await;
                })
                .await
                .expect("watcher runs");
        });
        Self {
            dir,
            registry,
            events,
            stop: Some(stop),
            watcher,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Next registry event other than the ones loading the initial files.
    async fn next_event(&mut self) -> RegistryEvent {
        tokio::time::timeout(DEADLINE, self.events.recv())
            .await
            .expect("no registry event: likely deadlocked")
            .expect("event channel open")
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(DEADLINE, self.watcher)
            .await
            .expect("watcher did not stop: likely deadlocked")
            .expect("watcher task joins");
    }
}

/// Host reads that hold the first `get` until released.
struct Gate {
    entered: std::sync::mpsc::Sender<()>,
    release: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Gate {
    fn new() -> (
        Arc<Self>,
        std::sync::mpsc::Receiver<()>,
        std::sync::mpsc::Sender<()>,
    ) {
        let (entered, entered_rx) = std::sync::mpsc::channel();
        let (release_tx, release) = std::sync::mpsc::channel();
        let gate = Arc::new(Self {
            entered,
            release: std::sync::Mutex::new(release),
        });
        (gate, entered_rx, release_tx)
    }
}

impl HostReads for Gate {
    fn get(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError> {
        let _ = self.entered.send(());
        let _ = self.release.lock().unwrap().recv_timeout(DEADLINE);
        FakeCache::default().get(cluster, resource, namespace, name)
    }

    fn list(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        FakeCache::default().list(cluster, resource, namespace, selector)
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        FakeCache::default().clusters()
    }
}

/// Writes `bytes` to `path` the way deploy tools do: temp file + rename.
fn replace_atomically(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("wasm.part");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The annotation value chaos's `ok` mode writes (`v1` / `v2`).
async fn mark(plugin: &LoadedPlugin) -> String {
    let outcome = tokio::time::timeout(
        DEADLINE,
        plugin.reconcile(
            request("ok"),
            Phase::Live,
            FakeCache::new(),
            SystemTime::now(),
        ),
    )
    .await
    .expect("likely deadlocked")
    .expect("ok reconciles");
    mark_of(&outcome)
}

fn mark_of(outcome: &Outcome) -> String {
    let [Action::Patch(patch)] = outcome.actions.as_slice() else {
        panic!("expected one patch, got {outcome:?}");
    };
    let body: serde_json::Value = serde_json::from_str(&patch.patch).unwrap();
    body["metadata"]["annotations"][ANNOTATION]
        .as_str()
        .unwrap()
        .to_string()
}

/// Drains the initial scan's events (they were sent before subscribers
/// could act on them).
async fn expect_loaded(fx: &mut Fixture, name: &str, version: &str) {
    match fx.next_event().await {
        RegistryEvent::Loaded(p) => {
            assert_eq!((p.name(), p.version()), (name, version));
        }
        other => panic!("expected Loaded({name}), got {other:?}"),
    }
}

/// A file its writer closed, or one renamed into place, is complete: it is
/// loaded after a short settle, not after the quiet period (an hour here)
/// that writes still going on wait for.
#[tokio::test]
async fn a_complete_file_does_not_wait_for_the_quiet_period() {
    let mut fx =
        Fixture::start_with(&[("chaos.wasm", chaos_v1())], Duration::from_secs(3600)).await;
    expect_loaded(&mut fx, "chaos", "1.0.0").await;
    // Written in place and closed, as `cp` does; again every half second
    // until the watch (set up concurrently by the fixture) sees a write.
    let v2 = std::fs::read(chaos_v2()).unwrap();
    let started = std::time::Instant::now();
    let event = loop {
        std::fs::write(fx.path("chaos.wasm"), &v2).unwrap();
        match tokio::time::timeout(Duration::from_millis(500), fx.events.recv()).await {
            Ok(event) => break event.expect("event channel open"),
            Err(_) => assert!(
                started.elapsed() < DEADLINE,
                "no reload of a closed file within {DEADLINE:?}"
            ),
        }
    };
    match event {
        RegistryEvent::Replaced { new, .. } => assert_eq!(new.version(), "2.0.0"),
        other => panic!("expected Replaced, got {other:?}"),
    }
    // Renamed into place, as an atomic publisher does.
    let staged = fx.dir.path().join(".chaos.wasm.tmp");
    std::fs::copy(chaos_v1(), &staged).unwrap();
    std::fs::rename(&staged, fx.path("chaos.wasm")).unwrap();
    match fx.next_event().await {
        RegistryEvent::Replaced { new, .. } => assert_eq!(new.version(), "1.0.0"),
        other => panic!("expected Replaced, got {other:?}"),
    }
    fx.stop().await;
}

#[tokio::test]
async fn changed_plugin_replaces_the_old_version_without_restart() {
    let mut fx = Fixture::start(&[("chaos.wasm", chaos_v1())]).await;
    expect_loaded(&mut fx, "chaos", "1.0.0").await;
    let old = fx.registry.get("chaos").expect("chaos loaded");
    assert_eq!(mark(&old).await, "v1");

    // A call in flight when the file changes finishes on the version that
    // started it: this one is held inside its first host read until the
    // new version has replaced it.
    let (gate, entered, release) = Gate::new();
    let in_flight = {
        let old = old.clone();
        tokio::spawn(async move {
            old.reconcile(request("ok"), Phase::Live, gate, SystemTime::now())
                .await
        })
    };
    tokio::task::spawn_blocking(move || entered.recv().expect("call reaches the host read"))
        .await
        .unwrap();

    replace_atomically(&fx.path("chaos.wasm"), &std::fs::read(chaos_v2()).unwrap());
    match fx.next_event().await {
        RegistryEvent::Replaced { old: was, new } => {
            assert!(was.same_load(&old));
            assert_eq!(new.version(), "2.0.0");
        }
        other => panic!("expected Replaced, got {other:?}"),
    }
    let new = fx.registry.get("chaos").expect("chaos still loaded");
    assert_eq!(new.version(), "2.0.0");
    assert_eq!(mark(&new).await, "v2");

    release.send(()).unwrap();
    let finished = tokio::time::timeout(DEADLINE, in_flight)
        .await
        .expect("likely deadlocked")
        .unwrap()
        .expect("in-flight call succeeds");
    assert_eq!(mark_of(&finished), "v1", "in-flight call finished on v1");

    let status = fx.registry.status();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].version.as_deref(), Some("2.0.0"));
    assert_eq!(status[0].error, None);
    fx.stop().await;
}

#[tokio::test]
async fn broken_files_are_refused_and_the_old_version_keeps_serving() {
    let mut fx = Fixture::start(&[("chaos.wasm", chaos_v1())]).await;
    expect_loaded(&mut fx, "chaos", "1.0.0").await;
    let path = fx.path("chaos.wasm");

    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "garbage",
            b"\x00\x01 definitely not wasm".to_vec(),
            "not a WebAssembly file",
        ),
        (
            "wrong world",
            component_of_other_world(),
            "does not export `rekon:plugin/guest@0.3.1`",
        ),
        (
            "wrong version",
            component_exporting_guest("2.0.0"),
            "plugin built for rekon:plugin@2.0.0",
        ),
        (
            "failing register",
            std::fs::read(chaos_broken_register()).unwrap(),
            REGISTER_FAILURE,
        ),
    ];
    for (case, bytes, reason) in cases {
        // In-place overwrite (not atomic): the debounce must wait for it.
        std::fs::write(&path, &bytes).unwrap();
        match fx.next_event().await {
            RegistryEvent::Failed {
                path: failed,
                error,
            } => {
                assert_eq!(failed, path, "{case}");
                assert!(error.contains(reason), "{case}: {error}");
            }
            other => panic!("{case}: expected Failed, got {other:?}"),
        }
        let serving = fx
            .registry
            .get("chaos")
            .expect("old version still registered");
        assert_eq!(serving.version(), "1.0.0", "{case}");
        assert_eq!(mark(&serving).await, "v1", "{case}: old version answers");
        let status = fx.registry.status();
        assert_eq!(status[0].version.as_deref(), Some("1.0.0"), "{case}");
        let error = status[0].error.as_deref().expect("failure recorded");
        assert!(error.contains(reason), "{case}: {error}");
        assert!(status[0].failed_at.is_some());
    }

    // A good file again clears the error.
    replace_atomically(&path, &std::fs::read(chaos_v2()).unwrap());
    assert!(matches!(
        fx.next_event().await,
        RegistryEvent::Replaced { .. }
    ));
    assert_eq!(fx.registry.status()[0].error, None);
    fx.stop().await;
}

#[tokio::test]
async fn removing_a_file_unregisters_its_plugin() {
    let mut fx = Fixture::start(&[("chaos.wasm", chaos_v1())]).await;
    expect_loaded(&mut fx, "chaos", "1.0.0").await;
    std::fs::remove_file(fx.path("chaos.wasm")).unwrap();
    match fx.next_event().await {
        RegistryEvent::Removed { name } => assert_eq!(name, "chaos"),
        other => panic!("expected Removed, got {other:?}"),
    }
    assert!(fx.registry.get("chaos").is_none());
    assert!(fx.registry.plugins().is_empty());
    assert!(fx.registry.status().is_empty());

    // And a new file is picked up.
    replace_atomically(&fx.path("again.wasm"), &std::fs::read(chaos_v2()).unwrap());
    expect_loaded(&mut fx, "chaos", "2.0.0").await;
    fx.stop().await;
}

#[tokio::test]
async fn a_second_file_with_the_same_plugin_name_is_refused() {
    let mut fx = Fixture::start(&[("a.wasm", chaos_v1())]).await;
    expect_loaded(&mut fx, "chaos", "1.0.0").await;
    replace_atomically(&fx.path("b.wasm"), &std::fs::read(chaos_v2()).unwrap());
    match fx.next_event().await {
        RegistryEvent::Failed { path, error } => {
            assert_eq!(path, fx.path("b.wasm"));
            assert!(error.contains("already served by"), "{error}");
            assert!(error.contains("a.wasm"), "{error}");
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    assert_eq!(fx.registry.get("chaos").unwrap().version(), "1.0.0");

    // Once a.wasm is gone, b.wasm takes over.
    std::fs::remove_file(fx.path("a.wasm")).unwrap();
    assert!(matches!(
        fx.next_event().await,
        RegistryEvent::Removed { .. }
    ));
    expect_loaded(&mut fx, "chaos", "2.0.0").await;
    fx.stop().await;
}

#[tokio::test]
async fn a_half_written_file_is_not_loaded_half_written() {
    let mut fx = Fixture::start(&[]).await;
    let bytes = std::fs::read(chaos_v1()).unwrap();
    let path = fx.path("slow.wasm");
    // Written in four parts, each gap well inside the quiet period.
    let quarter = bytes.len() / 4;
    {
        use std::io::Write as _;
        let mut file = std::fs::File::create(&path).unwrap();
        for part in bytes.chunks(quarter) {
            file.write_all(part).unwrap();
            file.flush().unwrap();
            tokio::time::sleep(DEBOUNCE / 4).await;
        }
    }
    // The first event is the complete plugin, not a failure of a prefix.
    expect_loaded(&mut fx, "chaos", "1.0.0").await;
    assert_eq!(fx.registry.status()[0].error, None);
    fx.stop().await;
}

#[tokio::test]
async fn initial_scan_reports_every_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(chaos_v1(), dir.path().join("chaos.wasm")).unwrap();
    std::fs::write(dir.path().join("junk.wasm"), b"junk").unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"not a plugin").unwrap();
    let registry = PluginRegistry::new(runtime(None));
    let scan = registry.clone();
    let path = dir.path().to_path_buf();
    tokio::time::timeout(
        DEADLINE,
        tokio::task::spawn_blocking(move || scan.load_dir(&path)),
    )
    .await
    .expect("likely deadlocked")
    .unwrap()
    .unwrap();
    let status = registry.status();
    assert_eq!(status.len(), 2, "{status:?}");
    assert_eq!(status[0].plugin.as_deref(), Some("chaos"));
    assert!(
        status[1]
            .error
            .as_deref()
            .unwrap()
            .contains("not a WebAssembly file")
    );
    assert_eq!(registry.plugins().len(), 1);
    assert!(registry.load_dir(Path::new("/nonexistent/rekon")).is_err());
}
