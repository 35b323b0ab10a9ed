//! Server-side apply and `metadata.managedFields` recording.
//!
//! A port of the parts of structured-merge-diff's `merge.Updater` (`Apply`,
//! `Update`, `prune`) and apimachinery's field manager chain (strip of
//! server-owned metadata, "current-operation" merging of Update entries,
//! sorting of entries) that decide which fields a write owns and removes.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::fieldset::{
    FieldSet, PathElement, add_to_fields_v1, path_string, remove_from_fields_v1,
};
use super::schema::{ListKind, Schema};
use super::{ApplyConflict, Conflict, Manager, Operation, PatchError, TypeInfo};

/// Server-side apply of `applied` (the request body, already parsed from
/// YAML/JSON) onto `live` (`None` when the object does not exist yet: create).
///
/// Returns the new object with `metadata.managedFields` updated: the
/// manager's `Apply` entry owns exactly the fields of `applied` (minus
/// apiVersion, kind, metadata.name/namespace/uid/resourceVersion/...);
/// fields it applied before and omits now are removed unless another
/// manager owns them; a field another manager owns with a different value
/// is a conflict unless `force`, which takes it over. Equal values are
/// shared. For a `/status` apply the caller scopes `applied` and `live` to
/// what the subresource may change and sets `manager.subresource`.
///
/// A `null` in `applied` removes that field (and the manager owns it).
///
/// # Errors
/// [`PatchError::Conflict`] on conflicts without `force`;
/// [`PatchError::Malformed`] when `applied` is not an object or carries
/// `metadata.managedFields`; [`PatchError::Invalid`] when a map-list item
/// lacks its key or two items share one.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &Manager,
    force: bool,
    info: &TypeInfo,
) -> Result<Value, PatchError> {
    if !applied.is_object() {
        return Err(PatchError::Malformed(
            "apply patch must be a JSON or YAML object".into(),
        ));
    }
    if applied
        .pointer("/metadata/managedFields")
        .is_some_and(|v| !v.is_null())
    {
        return Err(PatchError::Malformed(
            "metadata.managedFields must be nil".into(),
        ));
    }
    let schema = &info.root;
    let mut entries = live.map(decode_entries).unwrap_or_default();
    let live_obj = match live {
        Some(v) => {
            let mut v = v.clone();
            if let Some(Value::Object(meta)) = v.get_mut("metadata") {
                meta.shift_remove("managedFields");
            }
            v
        }
        None => Value::Object(Map::new()),
    };

    let mut set = FieldSet::default();
    to_set(applied, schema, &mut Vec::new(), &mut set)?;
    strip_meta(&mut set);
    let mut merged = merge(&live_obj, applied, schema)?;

    let me = entries.iter().position(|e| e.is(manager));
    if let Some(last) = me.map(|i| &entries[i].fields).filter(|s| !s.is_empty()) {
        let mut keep = set.clone();
        for (i, e) in entries.iter().enumerate() {
            if Some(i) != me {
                keep.union_with(&e.fields);
            }
        }
        prune(&mut merged, last, Some(&keep), schema);
    }

    let mut c = Comparison::default();
    compare(
        Some(&live_obj),
        Some(&merged),
        schema,
        &mut Vec::new(),
        Level::Root,
        &mut c,
    );
    let object_changed = !c.is_empty();
    c.strip_meta();
    let changed = c.added.union(&c.modified);

    let mut conflicts = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) == me {
            continue;
        }
        for path in e.fields.intersection(&changed).paths() {
            conflicts.push(Conflict {
                manager: e.manager.clone(),
                operation: e.operation,
                api_version: e.api_version.clone(),
                subresource: e.subresource.clone(),
                field: path_string(&path),
            });
        }
    }
    if !force && !conflicts.is_empty() {
        conflicts
            .sort_by(|a, b| (a.manager_display(), &a.field).cmp(&(b.manager_display(), &b.field)));
        return Err(PatchError::Conflict(ApplyConflict { conflicts }));
    }
    for (i, e) in entries.iter_mut().enumerate() {
        if Some(i) != me {
            e.fields = e.fields.difference(&changed).difference(&c.removed);
        }
    }

    let time = format_time(manager);
    match me {
        Some(i) => {
            let e = &mut entries[i];
            if object_changed || e.fields != set || e.time.is_none() {
                e.time = Some(time);
            }
            e.fields = set;
            e.api_version.clone_from(&manager.api_version);
        }
        None => entries.push(Entry::new(manager, set, time)),
    }
    write_entries(&mut merged, entries);
    Ok(merged)
}

/// Records a non-apply write (create, update, any non-apply patch) in
/// `new`'s `metadata.managedFields`, in place.
///
/// The manager's `Update` entry (keyed by manager, apiVersion and
/// subresource) gains the fields that changed from `old` (`None`: create)
/// to `new`; every entry loses the fields that changed or were removed. If
/// `new` carries a non-empty `managedFields`, that list is the starting
/// point (clients may reset it with `[{}]`), otherwise `old`'s is. Entries
/// left empty are dropped; `new` ends up without `managedFields` when none
/// remain. A write that changes nothing leaves the entries as they were.
pub fn record_update(old: Option<&Value>, new: &mut Value, manager: &Manager, info: &TypeInfo) {
    let empty = Value::Object(Map::new());
    let mut c = Comparison::default();
    compare(
        Some(old.unwrap_or(&empty)),
        Some(new),
        &info.root,
        &mut Vec::new(),
        Level::Root,
        &mut c,
    );
    c.strip_meta();
    let old_fields = old.and_then(|o| o.pointer("/metadata/managedFields"));
    let sent = new
        .pointer("/metadata/managedFields")
        .filter(|v| v.as_array().is_some_and(|a| !a.is_empty()));
    match sent {
        // The client rewrote managedFields: decode (dropping what does not
        // decode), update and re-encode.
        Some(_) if c.managed_fields_changed => {
            let entries = decode_entries(new);
            let entries = record_decoded(entries, &c, manager);
            write_entries(new, entries);
            return;
        }
        Some(_) => {}
        None => {
            if let (Some(kept), Some(Value::Object(meta))) = (old_fields, new.get_mut("metadata")) {
                meta.insert("managedFields".into(), kept.clone());
            }
        }
    }
    if c.is_empty() {
        return;
    }
    // Fast path: the stored entries are ours (canonical), so edit their
    // FieldsV1 JSON in place instead of decoding and re-encoding them all.
    let Some(Value::Object(meta)) = new.get_mut("metadata") else {
        return;
    };
    let changed = c.added.union(&c.modified);
    let lost = changed.union(&c.removed);
    let own = changed.difference(&c.removed);
    let list = meta
        .entry("managedFields")
        .or_insert_with(|| Value::Array(Vec::new()));
    let Value::Array(list) = list else { return };
    for e in list.iter_mut() {
        if let Some(Value::Object(f)) = e.get_mut("fieldsV1") {
            remove_from_fields_v1(f, &lost);
        }
    }
    if !own.is_empty() {
        let time = Value::String(format_time(manager));
        let mine = list.iter_mut().find(|e| entry_is(e, manager));
        match mine.and_then(Value::as_object_mut) {
            Some(e) => {
                if let Some(Value::Object(f)) = e.get_mut("fieldsV1") {
                    add_to_fields_v1(f, &own);
                }
                match e.get_mut("time") {
                    Some(t) => *t = time,
                    None => {
                        let at = e.len().min(3);
                        e.shift_insert(at, "time".into(), time);
                    }
                }
            }
            None => {
                let Value::String(t) = time else {
                    unreachable!()
                };
                list.push(Entry::new(manager, own, t).encode());
            }
        }
    }
    list.retain(|e| {
        e.get("fieldsV1")
            .and_then(Value::as_object)
            .is_some_and(|f| !f.is_empty())
    });
    list.sort_by(|a, b| entry_order(a).cmp(&entry_order(b)));
    if list.is_empty() {
        meta.shift_remove("managedFields");
    }
}

/// [`record_update`] on decoded entries.
fn record_decoded(mut entries: Vec<Entry>, c: &Comparison, manager: &Manager) -> Vec<Entry> {
    if c.is_empty() {
        return entries;
    }
    let changed = c.added.union(&c.modified);
    for e in &mut entries {
        e.fields = e.fields.difference(&changed).difference(&c.removed);
    }
    let own = changed.difference(&c.removed);
    if !own.is_empty() {
        let time = format_time(manager);
        match entries.iter_mut().find(|e| e.is(manager)) {
            Some(e) => {
                e.fields.union_with(&own);
                e.time = Some(time);
            }
            None => entries.push(Entry::new(manager, own, time)),
        }
    }
    entries
}

/// [`Entry::is`] on an encoded entry.
fn entry_is(e: &Value, m: &Manager) -> bool {
    let s = |k: &str| e.get(k).and_then(Value::as_str);
    s("manager") == Some(m.name.as_str())
        && s("operation") == Some(m.operation.as_str())
        && s("subresource").filter(|s| !s.is_empty()) == m.subresource.as_deref()
        && (m.operation == Operation::Apply || s("apiVersion") == Some(m.api_version.as_str()))
}

/// apimachinery's managedFields order on an encoded entry.
fn entry_order(e: &Value) -> [&str; 5] {
    let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("");
    [
        s("operation"),
        s("time"),
        s("manager"),
        s("apiVersion"),
        s("subresource"),
    ]
}

fn format_time(manager: &Manager) -> String {
    manager.time.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// One `managedFields` entry, decoded.
#[derive(Debug)]
struct Entry {
    manager: String,
    operation: Operation,
    api_version: String,
    subresource: Option<String>,
    time: Option<String>,
    fields: FieldSet,
}

impl Entry {
    fn new(m: &Manager, fields: FieldSet, time: String) -> Entry {
        Entry {
            manager: m.name.clone(),
            operation: m.operation,
            api_version: m.api_version.clone(),
            subresource: m.subresource.clone(),
            time: Some(time),
            fields,
        }
    }

    /// apimachinery's manager identifier: manager, operation, subresource,
    /// and the apiVersion for Update entries only.
    fn is(&self, m: &Manager) -> bool {
        self.manager == m.name
            && self.operation == m.operation
            && self.subresource == m.subresource
            && (m.operation == Operation::Apply || self.api_version == m.api_version)
    }

    fn decode(v: &Value) -> Option<Entry> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let operation = match v.get("operation").and_then(Value::as_str) {
            Some("Apply") => Operation::Apply,
            Some("Update") => Operation::Update,
            _ => return None,
        };
        let fields = match v.get("fieldsV1") {
            Some(f) => FieldSet::from_fields_v1(f).ok()?,
            None => FieldSet::default(),
        };
        Some(Entry {
            manager: s("manager").unwrap_or_default(),
            operation,
            api_version: s("apiVersion").unwrap_or_default(),
            subresource: s("subresource").filter(|s| !s.is_empty()),
            time: s("time"),
            fields,
        })
    }

    fn encode(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), self.manager.clone().into());
        m.insert("operation".into(), self.operation.as_str().into());
        m.insert("apiVersion".into(), self.api_version.clone().into());
        if let Some(t) = &self.time {
            m.insert("time".into(), t.clone().into());
        }
        m.insert("fieldsType".into(), "FieldsV1".into());
        m.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), s.clone().into());
        }
        Value::Object(m)
    }
}

/// The decodable entries of `obj`'s `metadata.managedFields`; entries that
/// do not decode are dropped, as apimachinery resets undecodable ones.
fn decode_entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Entry::decode).collect())
        .unwrap_or_default()
}

/// Drops empty entries, sorts as apimachinery does (operation, time,
/// manager, apiVersion, subresource) and stores them in `obj`.
fn write_entries(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| {
        (
            a.operation,
            &a.time,
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                b.operation,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    let Value::Object(root) = obj else { return };
    if entries.is_empty() {
        if let Some(Value::Object(meta)) = root.get_mut("metadata") {
            meta.shift_remove("managedFields");
        }
        return;
    }
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Value::Object(meta) = meta {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(Entry::encode).collect()),
        );
    }
}

/// apimachinery's `stripmeta`: fields nobody owns.
fn strip_meta(set: &mut FieldSet) {
    let f = |s: &str| PathElement::Field(s.to_string());
    set.remove_member(&[f("apiVersion")]);
    set.remove_member(&[f("kind")]);
    set.remove_member(&[f("metadata")]);
    for m in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "resourceVersion",
    ] {
        set.remove_member(&[f("metadata"), f(m)]);
    }
    set.remove_subtree(&[f("metadata"), f("managedFields")]);
}

// ---------------------------------------------------------------------------
// Field sets of values.

/// The list item path elements of `items`, or `None` when an item does not
/// fit the list kind. Repeated elements are kept (callers decide).
fn item_elements(items: &[Value], kind: &ListKind) -> Option<Vec<PathElement>> {
    let keys = match kind {
        ListKind::Map(keys) => Some(keys.as_slice()),
        ListKind::Set => None,
        ListKind::Atomic => return None,
    };
    items
        .iter()
        .map(|i| PathElement::for_item(i, keys))
        .collect()
}

/// structured-merge-diff `ToFieldSet` of an applied configuration.
fn to_set(
    v: &Value,
    schema: &Schema,
    path: &mut Vec<PathElement>,
    out: &mut FieldSet,
) -> Result<(), PatchError> {
    match v {
        Value::Object(m) if !schema.is_atomic_map() => {
            for (k, child) in m {
                let (cs, declared) = schema.field(k);
                path.push(PathElement::Field(k.clone()));
                to_set(child, cs, path, out)?;
                if !declared || child.is_null() || child.as_object().is_some_and(Map::is_empty) {
                    out.insert(path);
                }
                path.pop();
            }
        }
        Value::Array(items) => {
            let (kind, item_schema) = schema.list();
            if *kind == ListKind::Atomic {
                out.insert(path);
                return Ok(());
            }
            let pes = item_elements(items, kind).ok_or_else(|| {
                PatchError::Invalid(format!(
                    "{}: list items must {}",
                    path_string(path),
                    match kind {
                        ListKind::Map(keys) => format!("be objects with key fields {keys:?}"),
                        _ => "be scalars".to_string(),
                    }
                ))
            })?;
            for (i, (pe, item)) in pes.iter().zip(items).enumerate() {
                if pes[..i].contains(pe) {
                    return Err(PatchError::Invalid(format!(
                        "{}: duplicate entries for key {}",
                        path_string(path),
                        path_string(std::slice::from_ref(pe))
                    )));
                }
                path.push(pe.clone());
                to_set(item, item_schema, path, out)?;
                out.insert(path);
                path.pop();
            }
        }
        _ => out.insert(path),
    }
    Ok(())
}

#[derive(Default, Debug)]
struct Comparison {
    added: FieldSet,
    modified: FieldSet,
    removed: FieldSet,
    /// `metadata.managedFields` differs (it is never part of the sets).
    managed_fields_changed: bool,
}

impl Comparison {
    fn is_empty(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty()
    }

    fn strip_meta(&mut self) {
        strip_meta(&mut self.added);
        strip_meta(&mut self.modified);
        strip_meta(&mut self.removed);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Metadata,
    Inner,
}

fn leaf(old: Option<&Value>, new: Option<&Value>, path: &[PathElement], c: &mut Comparison) {
    match (old, new) {
        (None, Some(_)) => c.added.insert(path),
        (Some(_), None) => c.removed.insert(path),
        (Some(a), Some(b)) if a != b => c.modified.insert(path),
        _ => {}
    }
}

/// Finds the item with path element `pe`: linear for short lists.
fn find<'a>(
    pes: &[PathElement],
    items: &'a [Value],
    index: Option<&HashMap<&PathElement, usize>>,
    pe: &PathElement,
) -> Option<&'a Value> {
    match index {
        Some(ix) => ix.get(pe).map(|&i| &items[i]),
        None => pes.iter().position(|p| p == pe).map(|i| &items[i]),
    }
}

fn index_of(pes: &[PathElement]) -> Option<HashMap<&PathElement, usize>> {
    (pes.len() > 16).then(|| {
        let mut m = HashMap::with_capacity(pes.len());
        for (i, pe) in pes.iter().enumerate() {
            m.entry(pe).or_insert(i);
        }
        m
    })
}

/// structured-merge-diff `Compare`: leaves that differ are Added, Removed
/// or Modified; maps and list items present on one side only are Added or
/// Removed themselves, with everything under them. `metadata.managedFields`
/// is skipped.
fn compare(
    old: Option<&Value>,
    new: Option<&Value>,
    schema: &Schema,
    path: &mut Vec<PathElement>,
    level: Level,
    c: &mut Comparison,
) {
    if old.is_none() && new.is_none() {
        return;
    }
    let all = |f: fn(&Value) -> bool| old.is_none_or(f) && new.is_none_or(f);
    if all(Value::is_object) && !schema.is_atomic_map() {
        let empty = Map::new();
        let o = old.and_then(Value::as_object).unwrap_or(&empty);
        let n = new.and_then(Value::as_object).unwrap_or(&empty);
        if o.is_empty() && n.is_empty() {
            leaf(old, new, path, c);
            return;
        }
        let child_level = |k: &str| match (level, k) {
            (Level::Root, "metadata") => Level::Metadata,
            _ => Level::Inner,
        };
        for (k, ov) in o {
            let nv = n.get(k);
            // Equal subtrees hold no change: one deep comparison instead
            // of a walk that allocates paths.
            if nv == Some(ov) {
                continue;
            }
            if level == Level::Metadata && k == "managedFields" {
                c.managed_fields_changed = true;
                continue;
            }
            path.push(PathElement::Field(k.clone()));
            compare(Some(ov), nv, schema.field(k).0, path, child_level(k), c);
            path.pop();
        }
        for (k, nv) in n {
            if o.contains_key(k) {
                continue;
            }
            if level == Level::Metadata && k == "managedFields" {
                c.managed_fields_changed = true;
                continue;
            }
            path.push(PathElement::Field(k.clone()));
            compare(None, Some(nv), schema.field(k).0, path, child_level(k), c);
            path.pop();
        }
    } else if all(Value::is_array) {
        let (kind, item_schema) = schema.list();
        let o = old.and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        let n = new.and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        if *kind == ListKind::Atomic || (o.is_empty() && n.is_empty()) {
            leaf(old, new, path, c);
            return;
        }
        let (Some(opes), Some(npes)) = (item_elements(o, kind), item_elements(n, kind)) else {
            // Items that do not fit the schema: compare the list as a whole.
            leaf(old, new, path, c);
            return;
        };
        let (oix, nix) = (index_of(&opes), index_of(&npes));
        for (i, (pe, ov)) in opes.iter().zip(o).enumerate() {
            let nv = find(&npes, n, nix.as_ref(), pe);
            if nv == Some(ov) || opes[..i].contains(pe) {
                continue;
            }
            path.push(pe.clone());
            compare(Some(ov), nv, item_schema, path, Level::Inner, c);
            path.pop();
        }
        for (i, (pe, nv)) in npes.iter().zip(n).enumerate() {
            if npes[..i].contains(pe) || find(&opes, o, oix.as_ref(), pe).is_some() {
                continue;
            }
            path.push(pe.clone());
            compare(None, Some(nv), item_schema, path, Level::Inner, c);
            path.pop();
        }
    } else {
        leaf(old, new, path, c);
        return;
    }
    // A map or list present on one side only is itself added or removed.
    if !path.is_empty() {
        if old.is_none() {
            c.added.insert(path);
        } else if new.is_none() {
            c.removed.insert(path);
        }
    }
}

/// A configuration value taken as is: `null` fields dropped.
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// structured-merge-diff `Merge` of an applied configuration into the live
/// object: the configuration wins on leaves; maps merge key by key;
/// associative lists and sets merge item by item in structured-merge-diff's
/// interleaved order; atomic lists are replaced.
fn merge(live: &Value, config: &Value, schema: &Schema) -> Result<Value, PatchError> {
    match (live, config) {
        (Value::Object(l), Value::Object(c)) if !schema.is_atomic_map() => {
            if l.is_empty() && c.is_empty() {
                return Ok(config.clone());
            }
            let mut out = Map::with_capacity(l.len() + c.len());
            for (k, lv) in l {
                match c.get(k) {
                    None => {
                        out.insert(k.clone(), lv.clone());
                    }
                    Some(Value::Null) => {}
                    Some(cv) => {
                        out.insert(k.clone(), merge(lv, cv, schema.field(k).0)?);
                    }
                }
            }
            for (k, cv) in c {
                if !l.contains_key(k) && !cv.is_null() {
                    out.insert(k.clone(), without_nulls(cv));
                }
            }
            Ok(Value::Object(out))
        }
        (Value::Array(l), Value::Array(c)) => {
            let (kind, item_schema) = schema.list();
            if *kind == ListKind::Atomic || (l.is_empty() && c.is_empty()) {
                return Ok(without_nulls(config));
            }
            let Some(cpes) = item_elements(c, kind) else {
                return Err(PatchError::Invalid(
                    "list items do not fit their list type".into(),
                ));
            };
            let Some(lpes) = item_elements(l, kind) else {
                return Ok(without_nulls(config));
            };
            merge_list(l, &lpes, c, &cpes, item_schema).map(Value::Array)
        }
        _ => Ok(without_nulls(config)),
    }
}

/// The list-merging walk of structured-merge-diff (`visitListItems` of the
/// merging walker): shared items follow the configuration's order, live-only
/// items stay where they were relative to them.
fn merge_list(
    l: &[Value],
    lpes_all: &[PathElement],
    c: &[Value],
    cpes_all: &[PathElement],
    item_schema: &Schema,
) -> Result<Vec<Value>, PatchError> {
    // Ignore repeated occurrences of an element (the first one wins).
    let dedup = |pes: &[PathElement]| -> Vec<(PathElement, usize)> {
        let mut seen = std::collections::HashSet::with_capacity(pes.len());
        pes.iter()
            .enumerate()
            .filter(|(_, pe)| seen.insert(*pe))
            .map(|(i, pe)| (pe.clone(), i))
            .collect()
    };
    let lhs = dedup(lpes_all);
    let rhs = dedup(cpes_all);
    let lix: HashMap<&PathElement, usize> = lhs.iter().map(|(p, i)| (p, *i)).collect();
    let rix: HashMap<&PathElement, usize> = rhs.iter().map(|(p, i)| (p, *i)).collect();
    let in_l = |pe: &PathElement| lix.get(pe).map(|&i| &l[i]);
    let in_r = |pe: &PathElement| rix.contains_key(pe);
    let mut shared = rhs
        .iter()
        .filter(|(p, _)| in_l(p).is_some())
        .map(|(p, _)| p);
    let mut next_shared = shared.next();
    let mut out = Vec::with_capacity(lhs.len().max(rhs.len()));
    let (mut li, mut ri) = (0, 0);
    while li < lhs.len() || ri < rhs.len() {
        let before = (li, ri);
        if li < lhs.len() && ri < rhs.len() {
            let pe = &lhs[li].0;
            if *pe == rhs[ri].0 {
                out.push(merge(&l[lhs[li].1], &c[rhs[ri].1], item_schema)?);
                li += 1;
                ri += 1;
                next_shared = shared.next();
                continue;
            }
            if in_r(pe) && next_shared.is_some_and(|n| n != pe) {
                li += 1;
                continue;
            }
        }
        if li < lhs.len() && !in_r(&lhs[li].0) {
            out.push(l[lhs[li].1].clone());
            li += 1;
            continue;
        }
        if ri < rhs.len() {
            let (pe, i) = &rhs[ri];
            out.push(match in_l(pe) {
                Some(lv) => merge(lv, &c[*i], item_schema)?,
                None => without_nulls(&c[*i]),
            });
            ri += 1;
            if next_shared == Some(pe) {
                next_shared = shared.next();
            }
        }
        if (li, ri) == before {
            // A live item also in the configuration, already emitted.
            li += 1;
        }
    }
    Ok(out)
}

/// Removes from `v` what `last` (the manager's previous apply) has as a
/// member and `keep` (everyone's current sets) does not.
fn prune(v: &mut Value, last: &FieldSet, keep: Option<&FieldSet>, schema: &Schema) {
    match v {
        Value::Object(m) => {
            for (pe, lc) in last.children() {
                let PathElement::Field(name) = pe else {
                    continue;
                };
                let kc = keep.and_then(|k| k.child(pe));
                // Kept when anything at or under it is owned (an empty map
                // applied before, fields of it applied now: structured-
                // merge-diff adds owned items back with their parents).
                if lc.is_member() && kc.is_none_or(FieldSet::is_empty) {
                    m.shift_remove(name);
                } else if let Some(child) = m.get_mut(name) {
                    prune(child, lc, kc, schema.field(name).0);
                }
            }
        }
        Value::Array(items) => {
            let (kind, item_schema) = schema.list();
            let Some(pes) = item_elements(items, kind) else {
                return;
            };
            let mut remove = vec![false; items.len()];
            for (i, (pe, item)) in pes.iter().zip(items.iter_mut()).enumerate() {
                let Some(lc) = last.child(pe) else { continue };
                let kc = keep.and_then(|k| k.child(pe));
                if lc.is_member() && kc.is_none_or(FieldSet::is_empty) {
                    remove[i] = true;
                } else {
                    prune(item, lc, kc, item_schema);
                }
            }
            let mut it = remove.into_iter();
            items.retain(|_| !it.next().unwrap_or(false));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::merge_patch_in_place;
    use chrono::TimeZone as _;
    use serde_json::json;

    fn mgr(name: &str, op: Operation, minute: u32) -> Manager {
        Manager {
            name: name.into(),
            operation: op,
            api_version: "v1".into(),
            subresource: None,
            time: chrono::Utc
                .with_ymd_and_hms(2026, 1, 1, 0, minute, 0)
                .single()
                .unwrap(),
        }
    }

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "c", "namespace": "default"}, "data": data})
    }

    fn cm_info() -> TypeInfo {
        TypeInfo::builtin("v1", "ConfigMap").unwrap()
    }

    fn ssa(live: Option<&Value>, applied: &Value, m: &Manager) -> Value {
        apply(live, applied, m, false, &cm_info()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn managers(obj: &Value) -> Vec<(String, String, Value)> {
        obj["metadata"]["managedFields"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| {
                        (
                            e["manager"].as_str().unwrap().to_string(),
                            e["operation"].as_str().unwrap().to_string(),
                            e["fieldsV1"].clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn created_by_update(obj: &Value, name: &str) -> Value {
        let mut obj = obj.clone();
        record_update(None, &mut obj, &mgr(name, Operation::Update, 0), &cm_info());
        obj
    }

    /// `record_update`'s in-place fast path against the decoded path.
    #[test]
    fn record_update_fast_path_matches_decoded_path() {
        let info = TypeInfo::builtin("apps/v1", "Deployment").unwrap();
        let slow = |old: &Value, new: &Value, m: &Manager| -> Value {
            let mut new = new.clone();
            let mut c = Comparison::default();
            compare(
                Some(old),
                Some(&new),
                &info.root,
                &mut Vec::new(),
                Level::Root,
                &mut c,
            );
            c.strip_meta();
            let entries = record_decoded(decode_entries(old), &c, m);
            write_entries(&mut new, entries);
            new
        };
        let d = |containers: Value, extra: Value| {
            let mut o = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "d", "labels": {"a": "1"}},
                "spec": {"replicas": 1, "template": {"spec": {"containers": containers}}}});
            merge_patch_in_place(&mut o, &extra);
            o
        };
        let mut apply_m = mgr("ap", Operation::Apply, 1);
        apply_m.api_version = "apps/v1".into();
        let mut start = apply(
            None,
            &d(json!([{"name": "a", "image": "1"}]), json!({})),
            &apply_m,
            false,
            &info,
        )
        .unwrap();
        record_update(
            None,
            &mut start,
            &mgr("create", Operation::Update, 0),
            &info,
        );
        let steps = [
            d(json!([{"name": "a", "image": "2"}]), json!({})),
            d(
                json!([{"name": "a", "image": "2"}, {"name": "b", "image": "1", "env": [{"name": "E"}]}]),
                json!({}),
            ),
            d(
                json!([{"name": "b", "image": "1"}]),
                json!({"metadata": {"labels": null}}),
            ),
            d(
                json!([{"name": "b", "image": "1"}]),
                json!({"spec": {"replicas": 3, "paused": true}, "status": {"x": 1}}),
            ),
            d(json!([]), json!({"spec": {"replicas": null}})),
            d(
                json!([{"name": "a", "image": "1"}]),
                json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
            ),
        ];
        let mut cur = start;
        for (i, step) in steps.iter().enumerate() {
            for who in ["create", "other"] {
                let m = mgr(who, Operation::Update, 10 + u32::try_from(i).unwrap());
                let mut fast = step.clone();
                if who == "other" {
                    fast["metadata"]["annotations"] = json!({"step": i});
                }
                fast["metadata"]["managedFields"] = cur["metadata"]["managedFields"].clone();
                let expected = slow(&cur, &fast, &m);
                record_update(Some(&cur), &mut fast, &m, &info);
                assert_eq!(fast, expected, "step {i} by {who}");
                cur = fast;
            }
        }
        let ms = managers(&cur);
        let names: Vec<&str> = ms.iter().map(|m| m.0.as_str()).collect();
        assert_eq!(names, ["create", "other"]);
        assert_eq!(
            ms[1].2,
            json!({"f:metadata": {"f:annotations": {".": {}, "f:step": {}}}})
        );
    }

    #[test]
    fn apply_creates_with_exact_managed_fields() {
        let mut applied = cm(json!({"k": "v"}));
        applied["metadata"]["labels"] = json!({"app": "x"});
        let out = ssa(None, &applied, &mgr("m", Operation::Apply, 1));
        assert_eq!(out["data"], json!({"k": "v"}));
        assert_eq!(
            out["metadata"]["managedFields"],
            json!([{
                "manager": "m", "operation": "Apply", "apiVersion": "v1",
                "time": "2026-01-01T00:01:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {"f:app": {}}}}
            }])
        );
    }

    #[test]
    fn an_empty_map_applied_then_filled_keeps_the_map() {
        let m = mgr("m", Operation::Apply, 1);
        let first = ssa(None, &cm(json!({})), &m);
        let second = ssa(Some(&first), &cm(json!({"k": "v"})), &m);
        assert_eq!(second["data"], json!({"k": "v"}));
        // ... and emptied again: the key goes, the map stays.
        let third = ssa(Some(&second), &cm(json!({})), &m);
        assert_eq!(third["data"], json!({}));
    }

    #[test]
    fn reapplying_the_same_config_changes_nothing() {
        let applied = cm(json!({"k": "v"}));
        let first = ssa(None, &applied, &mgr("m", Operation::Apply, 1));
        let second = ssa(Some(&first), &applied, &mgr("m", Operation::Apply, 2));
        assert_eq!(first, second, "time kept when nothing changed");
    }

    #[test]
    fn fields_dropped_from_the_config_are_removed() {
        let m = mgr("m", Operation::Apply, 1);
        let first = ssa(None, &cm(json!({"a": "1", "b": "2"})), &m);
        let second = ssa(Some(&first), &cm(json!({"a": "1"})), &m);
        assert_eq!(second["data"], json!({"a": "1"}));
        assert_eq!(managers(&second)[0].2, json!({"f:data": {"f:a": {}}}));
    }

    #[test]
    fn equal_values_are_shared_and_survive_one_owner_leaving() {
        let (m1, m2) = (
            mgr("m1", Operation::Apply, 1),
            mgr("m2", Operation::Apply, 2),
        );
        let obj = ssa(None, &cm(json!({"k": "v", "x": "1"})), &m1);
        let obj = ssa(Some(&obj), &cm(json!({"k": "v"})), &m2);
        assert_eq!(managers(&obj).len(), 2);
        let obj = ssa(Some(&obj), &cm(json!({"x": "1"})), &m1);
        assert_eq!(obj["data"], json!({"k": "v", "x": "1"}), "m2 still owns k");
        let mut bare = cm(json!({}));
        bare.as_object_mut().unwrap().shift_remove("data");
        let obj = ssa(Some(&obj), &bare, &m2);
        assert_eq!(obj["data"], json!({"x": "1"}), "nobody owns k any more");
        let names: Vec<String> = managers(&obj).into_iter().map(|m| m.0).collect();
        assert_eq!(names, ["m1"], "m2's empty entry dropped");
    }

    #[test]
    fn conflict_with_an_update_manager_has_apimachinerys_message() {
        let live = created_by_update(&cm(json!({"k": "v"})), "m");
        let err = apply(
            Some(&live),
            &cm(json!({"k": "w"})),
            &mgr("a", Operation::Apply, 1),
            false,
            &cm_info(),
        )
        .unwrap_err();
        assert_eq!(err.code(), 409);
        let PatchError::Conflict(c) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(
            err.to_string(),
            r#"Apply failed with 1 conflict: conflict with "m" using v1: .data.k"#
        );
        assert_eq!(
            c.causes(),
            vec![json!({"reason": "FieldManagerConflict",
                        "message": "conflict with \"m\" using v1", "field": ".data.k"})]
        );
    }

    #[test]
    fn several_conflicts_are_grouped_by_manager() {
        let live = created_by_update(&cm(json!({"a": "1", "b": "2"})), "m");
        let live = ssa(
            Some(&live),
            &cm(json!({"c": "3"})),
            &mgr("other", Operation::Apply, 1),
        );
        let err = apply(
            Some(&live),
            &cm(json!({"a": "x", "b": "y", "c": "z"})),
            &mgr("a", Operation::Apply, 2),
            false,
            &cm_info(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 3 conflicts: conflicts with \"m\" using v1:\n- .data.a\n- .data.b\nconflicts with \"other\":\n- .data.c"
        );
    }

    #[test]
    fn force_takes_ownership() {
        let live = created_by_update(&cm(json!({"k": "v", "keep": "1"})), "m");
        let out = apply(
            Some(&live),
            &cm(json!({"k": "w"})),
            &mgr("a", Operation::Apply, 1),
            true,
            &cm_info(),
        )
        .unwrap();
        assert_eq!(out["data"], json!({"k": "w", "keep": "1"}));
        let ms = managers(&out);
        assert_eq!(
            ms[0],
            ("a".into(), "Apply".into(), json!({"f:data": {"f:k": {}}}))
        );
        assert_eq!(
            ms[1],
            (
                "m".into(),
                "Update".into(),
                json!({"f:data": {".": {}, "f:keep": {}}})
            )
        );
    }

    #[test]
    fn update_records_changed_fields_and_takes_them_from_others() {
        let m = mgr("u", Operation::Update, 3);
        let obj = ssa(
            None,
            &cm(json!({"k": "v", "x": "1"})),
            &mgr("a", Operation::Apply, 1),
        );
        let mut new = obj.clone();
        new["data"]["k"] = json!("changed");
        record_update(Some(&obj), &mut new, &m, &cm_info());
        let ms = managers(&new);
        assert_eq!(
            ms[0],
            ("a".into(), "Apply".into(), json!({"f:data": {"f:x": {}}}))
        );
        assert_eq!(
            ms[1],
            ("u".into(), "Update".into(), json!({"f:data": {"f:k": {}}}))
        );
        assert_eq!(
            new["metadata"]["managedFields"][1]["time"],
            "2026-01-01T00:03:00Z"
        );
        // the applier may take it back only with force
        let err = apply(
            Some(&new),
            &cm(json!({"k": "v", "x": "1"})),
            &mgr("a", Operation::Apply, 4),
            false,
            &cm_info(),
        );
        assert!(matches!(err, Err(PatchError::Conflict(_))));
        // an unchanged write records nothing, not even a time
        let mut same = new.clone();
        record_update(
            Some(&new),
            &mut same,
            &mgr("u", Operation::Update, 9),
            &cm_info(),
        );
        assert_eq!(same, new);
        // the same manager's entries merge
        let mut more = new.clone();
        more["data"]["y"] = json!("2");
        record_update(
            Some(&new),
            &mut more,
            &mgr("u", Operation::Update, 5),
            &cm_info(),
        );
        assert_eq!(
            managers(&more)[1].2,
            json!({"f:data": {"f:k": {}, "f:y": {}}})
        );
        // removing a field takes it from its owner
        let mut less = more.clone();
        less["data"].as_object_mut().unwrap().shift_remove("x");
        record_update(
            Some(&more),
            &mut less,
            &mgr("u", Operation::Update, 6),
            &cm_info(),
        );
        assert_eq!(managers(&less).len(), 1, "the applier owned only x");
    }

    #[test]
    fn create_by_update_owns_maps_as_members() {
        let mut obj = cm(json!({"k": "v"}));
        obj["metadata"]["labels"] = json!({"app": "x"});
        let obj = created_by_update(&obj, "kubectl-create");
        assert_eq!(
            obj["metadata"]["managedFields"],
            json!([{"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1",
                    "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {".": {}, "f:k": {}},
                                 "f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}])
        );
    }

    #[test]
    fn client_may_reset_managed_fields() {
        let obj = created_by_update(&cm(json!({"k": "v"})), "m");
        let mut new = obj.clone();
        new["metadata"]["managedFields"] = json!([{}]);
        record_update(
            Some(&obj),
            &mut new,
            &mgr("m", Operation::Update, 1),
            &cm_info(),
        );
        assert!(new["metadata"].get("managedFields").is_none());
        // omitting managedFields keeps the stored ones
        let mut new = obj.clone();
        new["metadata"]
            .as_object_mut()
            .unwrap()
            .shift_remove("managedFields");
        record_update(
            Some(&obj),
            &mut new,
            &mgr("m", Operation::Update, 1),
            &cm_info(),
        );
        assert_eq!(new, obj);
    }

    #[test]
    fn status_subresource_is_recorded() {
        let info = TypeInfo::builtin("apps/v1", "Deployment").unwrap();
        let mut m = mgr("ctl", Operation::Apply, 1);
        m.api_version = "apps/v1".into();
        m.subresource = Some("status".into());
        let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "status": {"conditions": [{"type": "Available", "status": "True"}]}});
        let out = apply(None, &applied, &m, false, &info).unwrap();
        let e = &out["metadata"]["managedFields"][0];
        assert_eq!(e["subresource"], "status");
        assert_eq!(
            e["fieldsV1"],
            json!({"f:status": {"f:conditions": {"k:{\"type\":\"Available\"}":
                {".": {}, "f:status": {}, "f:type": {}}}}})
        );
        // a status-apply conflict names the subresource
        let mut other = m.clone();
        other.name = "other".into();
        let mut changed = applied.clone();
        changed["status"]["conditions"][0]["status"] = json!("False");
        let err = apply(Some(&out), &changed, &other, false, &info).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"Apply failed with 1 conflict: conflict with "ctl" with subresource "status": .status.conditions[type="Available"].status"#
        );
    }

    fn deployment(containers: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
               "spec": {"template": {"spec": {"containers": containers}}}})
    }

    #[test]
    fn containers_merge_by_name_and_conflict_per_field() {
        let info = TypeInfo::builtin("apps/v1", "Deployment").unwrap();
        let mut upd = mgr("kubectl-create", Operation::Update, 0);
        upd.api_version = "apps/v1".into();
        let mut live = deployment(json!([{"name": "app", "image": "app:1"},
                                         {"name": "sidecar", "image": "side:1"}]));
        record_update(None, &mut live, &upd, &info);
        let mut a = mgr("ci", Operation::Apply, 1);
        a.api_version = "apps/v1".into();
        let applied = deployment(json!([{"name": "app", "image": "app:2"}]));
        let err = apply(Some(&live), &applied, &a, false, &info).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"Apply failed with 1 conflict: conflict with "kubectl-create" using apps/v1: .spec.template.spec.containers[name="app"].image"#
        );
        let out = apply(Some(&live), &applied, &a, true, &info).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "app", "image": "app:2"}, {"name": "sidecar", "image": "side:1"}])
        );
        // a new container from the applier is appended; dropping it later removes it
        let applied2 =
            deployment(json!([{"name": "app", "image": "app:2"}, {"name": "new", "image": "n:1"}]));
        let out2 = apply(Some(&out), &applied2, &a, false, &info).unwrap();
        let names = |o: &Value| -> Vec<String> {
            o["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names(&out2), ["app", "sidecar", "new"]);
        let out3 = apply(Some(&out2), &applied, &a, false, &info).unwrap();
        assert_eq!(names(&out3), ["app", "sidecar"]);
    }

    #[test]
    fn list_merge_follows_structured_merge_diff_order() {
        let info = TypeInfo::builtin("v1", "Pod").unwrap();
        let c = |names: &[&str]| -> Value {
            Value::Array(names.iter().map(|n| json!({"name": n})).collect())
        };
        let live = json!({"spec": {"containers": c(&["a", "x", "b"])}});
        let cfg = json!({"spec": {"containers": c(&["b", "a"])}});
        let out = merge(&live, &cfg, &info.root).unwrap();
        assert_eq!(out["spec"]["containers"], c(&["x", "b", "a"]));
    }

    #[test]
    fn node_labels_from_two_appliers_coexist_and_taints_are_atomic() {
        let info = TypeInfo::builtin("v1", "Node").unwrap();
        let node = |labels: Value, taints: Option<Value>| {
            let mut n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": labels}});
            if let Some(t) = taints {
                n["spec"] = json!({"taints": t});
            }
            n
        };
        let (a, b) = (mgr("a", Operation::Apply, 1), mgr("b", Operation::Apply, 2));
        let obj = apply(
            None,
            &node(
                json!({"x": "1"}),
                Some(json!([{"key": "k", "effect": "NoSchedule"}])),
            ),
            &a,
            false,
            &info,
        )
        .unwrap();
        let obj = apply(Some(&obj), &node(json!({"y": "2"}), None), &b, false, &info).unwrap();
        assert_eq!(obj["metadata"]["labels"], json!({"x": "1", "y": "2"}));
        let err = apply(
            Some(&obj),
            &node(json!({"y": "2"}), Some(json!([]))),
            &b,
            false,
            &info,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"Apply failed with 1 conflict: conflict with "a": .spec.taints"#
        );
    }

    #[test]
    fn finalizers_are_a_set_and_pruned_per_item() {
        let info = TypeInfo::builtin("v1", "ConfigMap").unwrap();
        let with = |f: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "finalizers": f}});
        let (a, b) = (mgr("a", Operation::Apply, 1), mgr("b", Operation::Apply, 2));
        let obj = apply(None, &with(json!(["x", "y"])), &a, false, &info).unwrap();
        let obj = apply(Some(&obj), &with(json!(["z"])), &b, false, &info).unwrap();
        assert_eq!(obj["metadata"]["finalizers"], json!(["x", "y", "z"]));
        assert_eq!(
            obj["metadata"]["managedFields"][1]["fieldsV1"],
            json!({"f:metadata": {"f:finalizers": {"v:\"z\"": {}}}})
        );
        let obj = apply(Some(&obj), &with(json!(["y"])), &a, false, &info).unwrap();
        assert_eq!(obj["metadata"]["finalizers"], json!(["y", "z"]));
    }

    #[test]
    fn crd_list_map_keys_and_null_removal() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "routes": {"type": "array", "x-kubernetes-list-type": "map",
                       "x-kubernetes-list-map-keys": ["host", "port"],
                       "items": {"type": "object", "properties": {
                           "host": {"type": "string"}, "port": {"type": "integer"}, "to": {"type": "string"}}}},
            "note": {"type": "string"}}}}});
        let info = TypeInfo::from_openapi_v3_schema(&schema);
        let obj = |spec: Value| json!({"apiVersion": "ex.com/v1", "kind": "R", "metadata": {"name": "r"}, "spec": spec});
        let (a, b) = (mgr("a", Operation::Apply, 1), mgr("b", Operation::Apply, 2));
        let o = apply(
            None,
            &obj(json!({"note": "n", "routes": [{"host": "h", "port": 80, "to": "x"}]})),
            &a,
            false,
            &info,
        )
        .unwrap();
        let o = apply(
            Some(&o),
            &obj(json!({"routes": [{"host": "h", "port": 443, "to": "y"}]})),
            &b,
            false,
            &info,
        )
        .unwrap();
        assert_eq!(o["spec"]["routes"].as_array().unwrap().len(), 2);
        assert_eq!(
            o["metadata"]["managedFields"][1]["fieldsV1"]["f:spec"]["f:routes"],
            json!({"k:{\"host\":\"h\",\"port\":443}": {".": {}, "f:host": {}, "f:port": {}, "f:to": {}}})
        );
        let o = apply(
            Some(&o),
            &obj(json!({"note": null, "routes": [{"host": "h", "port": 80, "to": "x"}]})),
            &a,
            false,
            &info,
        )
        .unwrap();
        assert!(o["spec"].get("note").is_none());
        let bad = obj(json!({"routes": [{"host": "h", "to": "x"}]}));
        assert!(matches!(
            apply(Some(&o), &bad, &a, false, &info),
            Err(PatchError::Invalid(_))
        ));
        let dup = obj(json!({"routes": [{"host": "h", "port": 1}, {"host": "h", "port": 1}]}));
        assert!(matches!(
            apply(Some(&o), &dup, &a, false, &info),
            Err(PatchError::Invalid(_))
        ));
    }

    #[test]
    fn apply_rejects_managed_fields_and_non_objects() {
        let mut applied = cm(json!({}));
        applied["metadata"]["managedFields"] = json!([]);
        let m = mgr("a", Operation::Apply, 1);
        assert!(matches!(
            apply(None, &applied, &m, false, &cm_info()),
            Err(PatchError::Malformed(_))
        ));
        assert!(matches!(
            apply(None, &json!([1]), &m, false, &cm_info()),
            Err(PatchError::Malformed(_))
        ));
    }

    #[test]
    fn updates_by_other_api_versions_are_separate_entries_and_sorted() {
        let obj = created_by_update(&cm(json!({"k": "v"})), "m");
        let mut new = obj.clone();
        new["data"]["j"] = json!("w");
        let mut m2 = mgr("m", Operation::Update, 1);
        m2.api_version = "v2".into();
        record_update(Some(&obj), &mut new, &m2, &cm_info());
        let new = ssa(
            Some(&new),
            &cm(json!({"z": "1"})),
            &mgr("zz", Operation::Apply, 2),
        );
        let order: Vec<(String, String)> = new["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["manager"].as_str().unwrap().into(),
                    e["apiVersion"].as_str().unwrap().into(),
                )
            })
            .collect();
        assert_eq!(
            order,
            [
                ("zz".into(), "v1".into()),
                ("m".into(), "v1".into()),
                ("m".into(), "v2".into())
            ]
        );
    }
}
