//! A subscriber's inbox: cache events coalesced per object, so memory stays
//! bounded under an event storm and a slow consumer never blocks a watch.
//!
//! Each pending entry is keyed by (subscription tag, object key) and holds the
//! first event not yet taken and the latest one: a storm of updates to one
//! object collapses into at most two events (its state before and after), so
//! mappings that depend on an object's labels still see where it came from
//! (the old owner is woken) and where it is now. The inbox therefore never
//! holds more than two events per watched object, however fast they arrive.
//!
//! Hand-written because tokio's channels either grow without bound or push
//! back on the sender (the watch task, which must never stall), and
//! kube-runtime's reflector/`debounce` work on one typed stream, not on the
//! many (cluster, resource) subscriptions of a controller.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::event::CacheEvent;
use super::store::ObjectKey;

#[derive(Debug)]
struct Pending {
    first: Arc<CacheEvent>,
    latest: Option<Arc<CacheEvent>>,
}

#[derive(Debug, Default)]
struct State {
    order: VecDeque<(u64, ObjectKey)>,
    pending: HashMap<(u64, ObjectKey), Pending>,
    closed: bool,
}

/// Coalescing event inbox of one consumer (a controller). Cheap to share.
#[derive(Debug, Default)]
pub struct Inbox {
    state: Mutex<State>,
    notify: Notify,
}

impl Inbox {
    /// An empty inbox.
    #[must_use]
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Deliver `event` of subscription `tag`. Never blocks; an event for an
    /// object that already has one pending replaces the latest of them.
    pub fn push(&self, tag: u64, event: Arc<CacheEvent>) {
        let key = (tag, event.object.key.clone());
        let mut state = self.state.lock();
        if state.closed {
            return;
        }
        match state.pending.get_mut(&key) {
            Some(p) => p.latest = Some(event),
            None => {
                state.order.push_back(key.clone());
                state.pending.insert(
                    key,
                    Pending {
                        first: event,
                        latest: None,
                    },
                );
            }
        }
        drop(state);
        self.notify.notify_one();
    }

    /// Take the oldest pending object: its tag and one or two events
    /// (first, then latest), or `None` when nothing is pending.
    pub fn try_take(&self) -> Option<(u64, Vec<Arc<CacheEvent>>)> {
        let mut state = self.state.lock();
        let key = state.order.pop_front()?;
        let p = state.pending.remove(&key)?;
        let mut events = vec![p.first];
        events.extend(p.latest);
        Some((key.0, events))
    }

    /// Wait for the next pending object; `None` once closed and drained.
    pub async fn take(&self) -> Option<(u64, Vec<Arc<CacheEvent>>)> {
        loop {
            // Registered before the checks, so neither a push (`notify_one`)
            // nor a close (`notify_waiters`, which wakes every consumer)
            // between the checks and the await is missed.
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(next) = self.try_take() {
                return Some(next);
            }
            if self.state.lock().closed {
                return None;
            }
            notified.await;
        }
    }

    /// Objects pending.
    #[must_use]
    pub fn len(&self) -> usize {
        self.state.lock().pending.len()
    }

    /// Whether nothing is pending.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drop what is pending of subscription `tag` (it was released).
    pub fn forget(&self, tag: u64) {
        let mut state = self.state.lock();
        state.pending.retain(|(t, _), _| *t != tag);
        state.order.retain(|(t, _)| *t != tag);
    }

    /// Stop accepting events; [`Inbox::take`] drains what is pending, then
    /// returns `None`.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::store::tests::obj;
    use crate::cache::{Change, ResourceId};

    fn event(name: &str, rv: &str) -> Arc<CacheEvent> {
        Arc::new(CacheEvent {
            cluster: Arc::from("main"),
            resource: Arc::new(ResourceId {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
                plural: "configmaps".into(),
                namespaced: true,
            }),
            change: Change::Applied,
            object: obj("ns", name, rv, &[]),
            old: None,
        })
    }

    fn rvs(events: &[Arc<CacheEvent>]) -> Vec<String> {
        events
            .iter()
            .map(|e| e.object.resource_version.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn a_storm_on_one_object_keeps_first_and_latest() {
        let inbox = Inbox::new();
        for rv in 1..=10_000 {
            inbox.push(1, event("hot", &rv.to_string()));
        }
        inbox.push(1, event("cold", "1"));
        inbox.push(2, event("hot", "1")); // other subscription: its own entry
        assert_eq!(inbox.len(), 3);
        let (tag, events) = inbox.try_take().unwrap();
        assert_eq!((tag, rvs(&events)), (1, vec!["1".into(), "10000".into()]));
        let (tag, events) = inbox.try_take().unwrap();
        assert_eq!((tag, rvs(&events)), (1, vec!["1".into()]));
        let (tag, _) = inbox.try_take().unwrap();
        assert_eq!(tag, 2);
        assert!(inbox.try_take().is_none());
    }

    #[test]
    fn forget_and_close() {
        let inbox = Inbox::new();
        inbox.push(1, event("a", "1"));
        inbox.push(2, event("b", "1"));
        inbox.forget(1);
        assert_eq!(inbox.try_take().map(|(t, _)| t), Some(2));
        inbox.close();
        inbox.push(3, event("c", "1"));
        assert!(inbox.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn close_ends_every_consumer() {
        let inbox = Inbox::new();
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let rx = Arc::clone(&inbox);
                tokio::spawn(async move { while rx.take().await.is_some() {} })
            })
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        inbox.close();
        for r in readers {
            tokio::time::timeout(std::time::Duration::from_secs(5), r)
                .await
                .expect("a consumer never saw the close: likely deadlocked")
                .unwrap();
        }
    }

    #[tokio::test]
    async fn take_wakes_on_push_and_ends_on_close() {
        let inbox = Inbox::new();
        let rx = Arc::clone(&inbox);
        let reader = tokio::spawn(async move {
            let mut n = 0;
            while rx.take().await.is_some() {
                n += 1;
            }
            n
        });
        tokio::task::yield_now().await;
        inbox.push(1, event("a", "1"));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        inbox.close();
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), reader)
            .await
            .expect("inbox reader likely deadlocked")
            .unwrap();
        assert_eq!(n, 1);
    }
}
