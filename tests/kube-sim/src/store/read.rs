//! Reads: lists at a resourceVersion (from the history), watch starts,
//! resyncs and compaction.

use super::*;

pub(super) fn too_old(rv: u64, oldest: u64) -> ApiError {
    ApiError::expired(format!("too old resource version: {rv} ({oldest})"))
}

impl Inner {
    // ----- reads ---------------------------------------------------------

    /// The objects of a table as they were at `rv` (reconstructed from the
    /// history), restricted to keys in `(after, ns)`.
    pub(super) fn snapshot_overlay(
        &self,
        sk: &StorageKey,
        rv: u64,
    ) -> ApiResult<BTreeMap<ObjKey, Option<Arc<Value>>>> {
        let mut overlay = BTreeMap::new();
        let compacted = self.compacted_rv(sk);
        if rv < compacted {
            return Err(ApiError::expired(format!(
                "The resourceVersion for the provided list is too old. (requested {rv}, oldest {})",
                compacted + 1
            )));
        }
        let Some(t) = self.tables.get(sk) else {
            return Ok(overlay);
        };
        for ev in t.history.iter().rev() {
            if ev.rv <= rv {
                break;
            }
            overlay.insert(ev.key.clone(), ev.old.clone());
        }
        Ok(overlay)
    }

    pub(crate) fn list(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        label: &LabelSelector,
        field: &FieldSelector,
        opts: &ListOpts,
    ) -> ApiResult<ListResult> {
        let sk = res.storage_key();
        let (snap_rv, start) = match &opts.cont {
            Some(tok) => {
                let (rv, key) = decode_continue(tok).ok_or_else(|| {
                    ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
                })?;
                if rv < self.compacted_rv(&sk) {
                    return Err(ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                    ));
                }
                (rv, Some(key))
            }
            None => match opts.exact_rv {
                Some(rv) if rv > self.rv => {
                    let mut e = ApiError::new(
                        504,
                        "Timeout",
                        format!("Too large resource version: {rv}, current: {}", self.rv),
                    );
                    e.details = Some(Box::new(
                        json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
                    ));
                    return Err(e);
                }
                Some(rv) => (rv, None),
                None => (self.rv, None),
            },
        };
        let overlay = if snap_rv < self.rv {
            self.snapshot_overlay(&sk, snap_rv)?
        } else {
            BTreeMap::new()
        };
        let empty = BTreeMap::new();
        let objects = self.tables.get(&sk).map_or(&empty, |t| &t.objects);
        let ns_filter: Option<&str> = if res.namespaced { ns } else { None };
        let lower: Bound<ObjKey> = match (&start, ns_filter) {
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(n)) => Bound::Included((n.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let mut cur = objects.range((lower.clone(), Bound::Unbounded)).peekable();
        let mut ov = overlay.range((lower, Bound::Unbounded)).peekable();
        let limit = opts.limit.filter(|l| *l > 0);
        let mut items = Vec::new();
        let mut last_key: Option<ObjKey> = None;
        let mut more = false;
        loop {
            // Merge the two ordered sequences; the overlay wins on equal keys.
            let next: Option<(ObjKey, Option<Arc<Value>>)> = match (cur.peek(), ov.peek()) {
                (None, None) => None,
                (Some((ck, _)), Some((ok, _))) => {
                    if ck < ok {
                        cur.next().map(|(k, v)| (k.clone(), Some(v.clone())))
                    } else if ok < ck {
                        ov.next().map(|(k, v)| (k.clone(), v.clone()))
                    } else {
                        cur.next();
                        ov.next().map(|(k, v)| (k.clone(), v.clone()))
                    }
                }
                (Some(_), None) => cur.next().map(|(k, v)| (k.clone(), Some(v.clone()))),
                (None, Some(_)) => ov.next().map(|(k, v)| (k.clone(), v.clone())),
            };
            let Some((key, val)) = next else { break };
            if let Some(n) = ns_filter
                && key.0 != n
            {
                break;
            }
            let Some(obj) = val else { continue };
            if !label.matches(&obj) || !field.matches(&obj) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                more = true;
                break;
            }
            last_key = Some(key);
            items.push(obj);
        }
        let cont = match (more, last_key) {
            (true, Some(k)) => Some(encode_continue(snap_rv, &k)),
            _ => None,
        };
        Ok(ListResult {
            items,
            rv: snap_rv,
            cont,
        })
    }

    pub(crate) fn watch_start(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        label: &LabelSelector,
        field: &FieldSelector,
        from: Option<u64>,
    ) -> ApiResult<WatchStart> {
        let sk = res.storage_key();
        let current = self.rv;
        let ns_filter = if res.namespaced { ns } else { None };
        let t = self.table(&sk);
        let rx = t.tx.subscribe();
        match from {
            None => {
                let initial: Vec<Arc<Value>> = t
                    .objects
                    .iter()
                    .filter(|((o, _), _)| ns_filter.is_none_or(|n| n == o))
                    .filter(|(_, v)| label.matches(v) && field.matches(v))
                    .map(|(_, v)| v.clone())
                    .collect();
                Ok(WatchStart {
                    initial,
                    replay: Vec::new(),
                    rv: current,
                    rx,
                })
            }
            Some(rv) => {
                if rv < t.compacted_rv {
                    return Err(too_old(rv, t.compacted_rv + 1));
                }
                let replay = t.history.iter().filter(|e| e.rv > rv).cloned().collect();
                Ok(WatchStart {
                    initial: Vec::new(),
                    replay,
                    rv: current,
                    rx,
                })
            }
        }
    }

    /// Replays history after `rv` for a watcher that fell behind its channel.
    pub(crate) fn resync(
        &mut self,
        sk: &StorageKey,
        rv: u64,
    ) -> ApiResult<(Vec<Arc<WatchEvent>>, EventReceiver)> {
        let t = self.table(sk);
        if rv < t.compacted_rv {
            return Err(too_old(rv, t.compacted_rv + 1));
        }
        let rx = t.tx.subscribe();
        Ok((
            t.history.iter().filter(|e| e.rv > rv).cloned().collect(),
            rx,
        ))
    }

    /// Forgets the history: every resourceVersion issued so far becomes too
    /// old to watch from (the counter skips one so that a fresh list's RV
    /// is watchable again).
    pub(crate) fn compact(&mut self) -> u64 {
        self.rv += 1;
        let rv = self.rv;
        self.compacted_floor = rv;
        self.dropped.clear();
        for t in self.tables.values_mut() {
            t.history.clear();
            t.compacted_rv = rv;
        }
        rv
    }

    /// The serialization of `obj` if it is the object persisted last.
    pub(crate) fn cached_bytes(&mut self, obj: &Arc<Value>) -> Option<Bytes> {
        match self.last_written.take() {
            Some((o, b)) if Arc::ptr_eq(&o, obj) => Some(b),
            _ => None,
        }
    }

    pub(crate) fn object_count(&self) -> usize {
        self.tables.values().map(|t| t.objects.len()).sum()
    }
}
