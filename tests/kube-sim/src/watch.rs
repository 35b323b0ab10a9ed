//! Watch streams: one task per watcher turns store events into
//! newline-delimited JSON watch events, with bookmarks, timeouts, selector
//! transitions and resync from the history when the watcher falls behind.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio::time::{Instant, MissedTickBehavior};

use crate::error::ApiError;
use crate::resources::{ResourceInfo, to_served};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::server::ClusterState;
use crate::store::{EventType, WatchEvent, WatchStart};

/// Whether responses carry full objects or only their metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Full objects.
    Full,
    /// `PartialObjectMetadata`.
    Meta,
    /// `meta.k8s.io` Table (`v1beta1` when `beta`).
    Table {
        /// Table apiVersion is meta.k8s.io/v1beta1.
        beta: bool,
        /// `includeObject`: what each row carries.
        include: Include,
    },
}

/// `includeObject` of Table responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    /// No object.
    None,
    /// PartialObjectMetadata (default).
    Metadata,
    /// The full object.
    Object,
}

impl Include {
    /// Wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "None",
            Self::Metadata => "Metadata",
            Self::Object => "Object",
        }
    }
}

/// A Table of served objects.
pub(crate) fn table(
    res: &ResourceInfo,
    beta: bool,
    include: Include,
    items: &[Value],
    rv: Option<u64>,
    cont: Option<&str>,
) -> Value {
    let av = if beta {
        "meta.k8s.io/v1beta1"
    } else {
        "meta.k8s.io/v1"
    };
    crate::table::Printer::for_resource(res, res.printer_columns.as_deref()).table(
        av,
        items,
        rv,
        cont,
        include.as_str(),
    )
}

/// Renders a stored object for a response.
pub(crate) fn render(res: &ResourceInfo, shape: Shape, obj: &Value) -> Value {
    match shape {
        Shape::Full => {
            if res.needs_conversion() {
                to_served(res, obj)
            } else {
                obj.clone()
            }
        }
        Shape::Meta => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
        Shape::Table { beta, include } => {
            let served = render(res, Shape::Full, obj);
            // A one-object Table (GET, or a watch event) carries the
            // object's resourceVersion, as the apiserver's table convertors
            // do.
            let rv = obj
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .and_then(|s| s.parse().ok());
            table(res, beta, include, &[served], rv, None)
        }
    }
}

/// Everything a watcher needs besides its starting point.
pub(crate) struct WatchSpec {
    pub res: Arc<ResourceInfo>,
    pub ns: Option<String>,
    pub label: LabelSelector,
    pub field: FieldSelector,
    pub bookmarks: bool,
    pub initial_end: bool,
    pub timeout: Duration,
    pub shape: Shape,
    /// RV the watch was asked to start after (for resync), if any.
    pub from: Option<u64>,
}

/// A body that streams watch events and ends when the watch does.
pub(crate) fn body(cs: Arc<ClusterState>, spec: WatchSpec, start: WatchStart) -> Body {
    let (tx, rx) = mpsc::channel::<Bytes>(8);
    tokio::spawn(run(cs, spec, start, tx));
    Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    }))
}

/// A body with a single ERROR event (HTTP 200, as the apiserver does).
pub(crate) fn error_body(e: &ApiError) -> Body {
    let mut line =
        serde_json::to_vec(&json!({"type": "ERROR", "object": e.to_status()})).unwrap_or_default();
    line.push(b'\n');
    Body::from(line)
}

struct Watcher {
    cs: Arc<ClusterState>,
    spec: WatchSpec,
    last_rv: u64,
    buf: BytesMut,
    select_all: bool,
    /// A label selector at a version a conversion webhook converts to:
    /// it matches the converted objects (whose labels the webhook may
    /// change), so events are selected after their conversion.
    select_after: bool,
    fast: bool,
    /// The events of a watch at a version a CRD's conversion webhook
    /// converts, in order, until the next flush converts their objects
    /// in one review (`None` for other watches).
    pending: Option<Vec<Pending>>,
}

/// A watch event waiting for its object's conversion, or a line (bookmark,
/// error) that must stay behind the events before it.
enum Pending {
    Event(&'static str, Arc<Value>),
    Line(Vec<u8>),
    /// An event whose label selection waits for the conversion.
    Select(Select),
}

/// A change to select on the converted objects' labels: the field
/// selector's verdicts before and after, the old object at the event's
/// resourceVersion (for MODIFIED).
struct Select {
    etype: EventType,
    new: Arc<Value>,
    old: Option<Arc<Value>>,
    field_before: bool,
    field_now: bool,
}

enum Next {
    Continue,
    Stop,
}

impl Watcher {
    fn matches(&self, obj: &Value) -> bool {
        self.select_all
            || ((self.select_after || self.spec.label.matches(obj)) && self.spec.field.matches(obj))
    }

    fn push_line(&mut self, etype: &'static str, obj: &Value) {
        if let Some(p) = &mut self.pending {
            p.push(Pending::Event(etype, Arc::new(obj.clone())));
            return;
        }
        self.render_line(etype, obj);
    }

    fn render_line(&mut self, etype: &str, obj: &Value) {
        let rendered = render(&self.spec.res, self.spec.shape, obj);
        self.buf.extend_from_slice(b"{\"type\":\"");
        self.buf.extend_from_slice(etype.as_bytes());
        self.buf.extend_from_slice(b"\",\"object\":");
        self.buf
            .extend_from_slice(&serde_json::to_vec(&rendered).unwrap_or_default());
        self.buf.extend_from_slice(b"}\n");
    }

    fn push_bytes(&mut self, etype: &str, bytes: &[u8]) {
        self.buf.extend_from_slice(b"{\"type\":\"");
        self.buf.extend_from_slice(etype.as_bytes());
        self.buf.extend_from_slice(b"\",\"object\":");
        self.buf.extend_from_slice(bytes);
        self.buf.extend_from_slice(b"}\n");
    }

    fn push_event(&mut self, ev: &WatchEvent) {
        if ev.rv <= self.last_rv {
            return;
        }
        self.last_rv = ev.rv;
        if let Some(ns) = &self.spec.ns
            && self.spec.res.namespaced
            && ev.key.0 != *ns
        {
            return;
        }
        if self.select_after
            && let Some(p) = &mut self.pending
        {
            let field_now = self.spec.field.matches(&ev.obj);
            let (field_before, old) = match (ev.etype, &ev.old) {
                (EventType::Modified, Some(old)) => {
                    let mut o = (**old).clone();
                    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                        m.insert("resourceVersion".into(), Value::String(ev.rv.to_string()));
                    }
                    (self.spec.field.matches(old), Some(Arc::new(o)))
                }
                _ => (false, None),
            };
            if field_now || field_before {
                p.push(Pending::Select(Select {
                    etype: ev.etype,
                    new: ev.obj.clone(),
                    old,
                    field_before,
                    field_now,
                }));
            }
            return;
        }
        let (etype, use_new) = match ev.etype {
            EventType::Added => {
                if !self.matches(&ev.obj) {
                    return;
                }
                ("ADDED", true)
            }
            EventType::Deleted => {
                if !self.matches(&ev.obj) {
                    return;
                }
                ("DELETED", true)
            }
            EventType::Modified => {
                let now = self.matches(&ev.obj);
                let before = self.select_all || ev.old.as_deref().is_some_and(|o| self.matches(o));
                match (before, now) {
                    (true, true) => ("MODIFIED", true),
                    (false, true) => ("ADDED", true),
                    (true, false) => ("DELETED", false),
                    (false, false) => return,
                }
            }
        };
        if use_new {
            if self.fast {
                self.push_bytes(etype, &ev.bytes);
            } else {
                self.push_line(etype, &ev.obj);
            }
        } else if let Some(old) = &ev.old {
            // Stops matching: DELETED with the previous content at the new RV.
            let mut o = (**old).clone();
            if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                m.insert("resourceVersion".into(), Value::String(ev.rv.to_string()));
            }
            self.push_line(etype, &o);
        }
    }

    fn push_bookmark(&mut self, rv: u64, initial_end: bool) {
        let (kind, av) = match self.spec.shape {
            Shape::Full | Shape::Table { .. } => {
                (self.spec.res.kind.clone(), self.spec.res.api_version())
            }
            Shape::Meta => (
                "PartialObjectMetadata".to_string(),
                "meta.k8s.io/v1".to_string(),
            ),
        };
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": kind, "apiVersion": av, "metadata": metadata});
        let mut line = b"{\"type\":\"BOOKMARK\",\"object\":".to_vec();
        line.extend_from_slice(&serde_json::to_vec(&obj).unwrap_or_default());
        line.extend_from_slice(b"}\n");
        self.push_raw(line);
    }

    fn push_error(&mut self, e: &ApiError) {
        let mut line = serde_json::to_vec(&json!({"type": "ERROR", "object": e.to_status()}))
            .unwrap_or_default();
        line.push(b'\n');
        self.push_raw(line);
    }

    fn push_raw(&mut self, line: Vec<u8>) {
        match &mut self.pending {
            Some(p) => p.push(Pending::Line(line)),
            None => self.buf.extend_from_slice(&line),
        }
    }

    /// Converts the pending events' objects (one ConversionReview) and
    /// renders them in order. A failed conversion ends the watch with an
    /// ERROR event carrying the server's message; returns false then.
    async fn convert_pending(&mut self) -> bool {
        let Some(p) = self.pending.as_mut().filter(|p| !p.is_empty()) else {
            return true;
        };
        let pending = std::mem::take(p);
        let objects: Vec<Arc<Value>> = pending
            .iter()
            .flat_map(|x| match x {
                Pending::Event(_, o) => vec![o.clone()],
                Pending::Select(s) => std::iter::once(s.new.clone())
                    .chain(s.old.clone())
                    .collect(),
                Pending::Line(_) => Vec::new(),
            })
            .collect();
        let converted =
            crate::admission::webhook::conversion::served(&self.cs, &self.spec.res, objects).await;
        let mut converted = match converted {
            Ok(c) => c.into_iter(),
            Err(e) => {
                let mut line =
                    serde_json::to_vec(&json!({"type": "ERROR", "object": e.to_status()}))
                        .unwrap_or_default();
                line.push(b'\n');
                self.buf.extend_from_slice(&line);
                return false;
            }
        };
        for x in pending {
            match x {
                Pending::Event(etype, _) => {
                    if let Some(o) = converted.next()
                        && (!self.select_after || self.spec.label.matches(&o))
                    {
                        self.render_line(etype, &o);
                    }
                }
                Pending::Select(s) => {
                    let Some(new) = converted.next() else {
                        continue;
                    };
                    let old = if s.old.is_some() {
                        converted.next()
                    } else {
                        None
                    };
                    let label = &self.spec.label;
                    let now = s.field_now && label.matches(&new);
                    let before = s.field_before && old.as_deref().is_some_and(|o| label.matches(o));
                    let line = match s.etype {
                        EventType::Added if now => Some(("ADDED", new)),
                        EventType::Deleted if now => Some(("DELETED", new)),
                        EventType::Modified => match (before, now) {
                            (true, true) => Some(("MODIFIED", new)),
                            (false, true) => Some(("ADDED", new)),
                            (true, false) => old.map(|o| ("DELETED", o)),
                            (false, false) => None,
                        },
                        _ => None,
                    };
                    if let Some((etype, o)) = line {
                        self.render_line(etype, &o);
                    }
                }
                Pending::Line(l) => self.buf.extend_from_slice(&l),
            }
        }
        true
    }

    /// Re-subscribes from the history after falling behind.
    fn resync(&mut self, rx: &mut broadcast::Receiver<Arc<WatchEvent>>) -> Next {
        let sk = self.spec.res.storage_key();
        let last = self.last_rv;
        match self.cs.store.read(|i| i.resync(&sk, last)) {
            Ok((events, new_rx)) => {
                *rx = new_rx;
                for ev in events {
                    self.push_event(&ev);
                }
                Next::Continue
            }
            Err(e) => {
                self.push_error(&e);
                Next::Stop
            }
        }
    }

    /// Takes everything already queued plus the current RV, atomically
    /// with respect to writers (they send under the store lock).
    fn drain_with_rv(
        &mut self,
        rx: &mut broadcast::Receiver<Arc<WatchEvent>>,
    ) -> (Vec<Arc<WatchEvent>>, u64, bool) {
        self.cs.store.read(|i| {
            let mut evs = Vec::new();
            let mut lagged = false;
            loop {
                match rx.try_recv() {
                    Ok(ev) => evs.push(ev),
                    Err(broadcast::error::TryRecvError::Lagged(_)) => {
                        lagged = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            (evs, i.rv, lagged)
        })
    }

    async fn flush(&mut self, tx: &mpsc::Sender<Bytes>) -> bool {
        let converted = self.convert_pending().await;
        if self.buf.is_empty() {
            return converted;
        }
        let chunk = self.buf.split().freeze();
        tx.send(chunk).await.is_ok() && converted
    }
}

async fn run(cs: Arc<ClusterState>, spec: WatchSpec, start: WatchStart, tx: mpsc::Sender<Bytes>) {
    let select_all = spec.label.is_empty() && spec.field.is_empty();
    let fast = spec.shape == Shape::Full && !spec.res.needs_conversion();
    let deadline = Instant::now() + spec.timeout;
    let mut epoch = cs.watch_epoch.subscribe();
    epoch.borrow_and_update();
    let mut shutdown = cs.shutdown.subscribe();
    let interval = cs.bookmark_interval();
    let mut tick = tokio::time::interval_at(Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let WatchStart {
        initial,
        replay,
        rv,
        mut rx,
    } = start;
    let mut w = Watcher {
        last_rv: spec.from.unwrap_or(rv),
        cs: cs.clone(),
        spec,
        buf: BytesMut::with_capacity(8192),
        select_all,
        select_after: false,
        fast,
        pending: None,
    };
    if w.spec.res.webhook_converted() {
        w.pending = Some(Vec::new());
        w.select_after = !w.spec.label.is_empty();
    }
    for obj in &initial {
        if w.fast {
            let bytes = serde_json::to_vec(&**obj).unwrap_or_default();
            w.push_bytes("ADDED", &bytes);
        } else {
            w.push_line("ADDED", obj);
        }
        if w.buf.len() > 64 * 1024 && !w.flush(&tx).await {
            return;
        }
    }
    if w.spec.initial_end {
        w.push_bookmark(rv, true);
    }
    for ev in &replay {
        w.push_event(ev);
    }
    if !w.flush(&tx).await {
        return;
    }
    drop(initial);
    drop(replay);
    loop {
        let next = tokio::select! {
            biased;
            _ = tx.closed() => Next::Stop,
            _ = epoch.changed() => Next::Stop,
            _ = shutdown.changed() => Next::Stop,
            _ = tokio::time::sleep_until(deadline) => {
                if w.spec.bookmarks {
                    let (evs, rv, lagged) = w.drain_with_rv(&mut rx);
                    for ev in &evs {
                        w.push_event(ev);
                    }
                    if !lagged {
                        w.push_bookmark(rv.max(w.last_rv), false);
                    }
                }
                Next::Stop
            }
            _ = tick.tick(), if w.spec.bookmarks => {
                let (evs, rv, lagged) = w.drain_with_rv(&mut rx);
                for ev in &evs {
                    w.push_event(ev);
                }
                if lagged {
                    w.resync(&mut rx)
                } else {
                    w.last_rv = w.last_rv.max(rv);
                    w.push_bookmark(w.last_rv, false);
                    Next::Continue
                }
            }
            r = rx.recv() => match r {
                Ok(ev) => {
                    w.push_event(&ev);
                    // Let writers run once before draining: under load this
                    // batches many events into one chunk (fewer wakeups and
                    // syscalls per event); when idle it costs one yield.
                    tokio::task::yield_now().await;
                    let mut next = Next::Continue;
                    while w.buf.len() < 256 * 1024 {
                        match rx.try_recv() {
                            Ok(ev) => w.push_event(&ev),
                            Err(broadcast::error::TryRecvError::Lagged(_)) => {
                                next = w.resync(&mut rx);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    next
                }
                Err(broadcast::error::RecvError::Lagged(_)) => w.resync(&mut rx),
                Err(broadcast::error::RecvError::Closed) => Next::Stop,
            },
        };
        let sent = tokio::select! {
            biased;
            _ = epoch.changed() => false,
            _ = shutdown.changed() => false,
            ok = w.flush(&tx) => ok,
        };
        if !sent || matches!(next, Next::Stop) {
            return;
        }
    }
}
