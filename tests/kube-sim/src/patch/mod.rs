//! Patch algebra of kube-sim: the pure functions behind `PATCH` and the
//! field-ownership bookkeeping (`metadata.managedFields`) behind every write.
//!
//! Nothing here does I/O or knows about HTTP; the server maps [`PatchError`]
//! to a `metav1.Status` with [`PatchError::code`] (and, for apply conflicts,
//! [`ApplyConflict::causes`]).
//!
//! | Content-Type                              | function                    |
//! |-------------------------------------------|-----------------------------|
//! | `application/merge-patch+json`            | [`merge_patch`]             |
//! | `application/json-patch+json`             | [`json_patch`]              |
//! | `application/strategic-merge-patch+json`  | [`strategic_merge_patch`]   |
//! | `application/apply-patch+yaml`            | [`apply`]                   |
//! | any non-apply write (POST, PUT, PATCH)    | [`record_update`]           |
//!
//! How lists merge is described by a [`TypeInfo`]: [`TypeInfo::builtin`] for
//! the kinds kube-sim serves, [`TypeInfo::from_openapi_v3_schema`] for CRDs.
//!
//! # Caller's duties
//! - Pick the [`TypeInfo`]: [`TypeInfo::builtin`] or, for a CRD version,
//!   [`TypeInfo::from_openapi_v3_schema`] (build it once per CRD change).
//!   Strategic merge patch on a kind without a built-in `TypeInfo` is a 415
//!   the caller raises.
//! - Subresource scoping: for a main-resource write of a kind with a status
//!   subresource, restore the old `.status` (and drop `.status` from an apply
//!   body) *before* calling [`apply`]/[`record_update`]; for `/status`, keep
//!   everything but `.status` from the live object, and set
//!   `Manager::subresource`.
//! - Server-owned metadata: `uid`, `resourceVersion`, `generation`,
//!   `creationTimestamp` are never owned, so they may be set before or after
//!   the call; set `deletionTimestamp`/`deletionGracePeriodSeconds` after
//!   (or the writer would own them).
//! - No-op detection (contract 0.9) compares objects ignoring
//!   `managedFields[].time`: [`record_update`] never touches managedFields
//!   when nothing changed, [`apply`] keeps the entry's time when nothing
//!   changed.
//!
//! # Known differences from apimachinery
//! - Built-in schemas describe only what changes merging (merge keys,
//!   sets, string maps); other object keys count as declared struct fields.
//!   Creating a built-in by Update therefore owns `f:spec` with `"."` where
//!   the real apiserver (comparing with a typed zero value) does not.
//! - Container ports and Service ports merge by `containerPort` / `port`
//!   alone in server-side apply too (apimachinery adds `protocol`, which it
//!   defaults; kube-sim does no defaulting).
//! - A `null` in an apply body removes the field.
//! - `k:` entries of FieldsV1 sort by their JSON text (numbers as text).
//! - Apply conflicts are listed sorted by manager then field (Go: map order).
//! - Strategic merge patch accepts `$retainKeys` on any map; a list item
//!   without its merge key is a 422 (Go: a generic error).
//!
//! # Layout
//! - `merge`: RFC 7386 JSON merge patch.
//! - `json`: RFC 6902 JSON patch with Go (evanphx/json-patch) `test` semantics.
//! - `schema`: [`TypeInfo`], list semantics per path.
//! - `strategic`: strategic merge patch and its `$` directives.
//! - `fieldset`: structured-merge-diff field sets and the FieldsV1 encoding.
//! - `managed`: server-side apply and managedFields recording.

mod fieldset;
mod json;
mod managed;
mod merge;
mod schema;
mod strategic;

use std::fmt;

pub use json::json_patch;
pub use managed::{apply, record_update};
pub use merge::{merge_patch, merge_patch_in_place};
pub use schema::{PathSegment, TypeInfo};
pub use strategic::strategic_merge_patch;

/// Why a patch could not be applied. Each variant maps to one HTTP status.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PatchError {
    /// The patch document itself is not well formed (HTTP 400 BadRequest).
    #[error("failed to decode patch: {0}")]
    Malformed(String),
    /// The patch is well formed but cannot be applied to this object, e.g. a
    /// failed JSON-patch `test` or a `remove` of a missing path (HTTP 422 Invalid).
    #[error("failed to apply patch: {0}")]
    Invalid(String),
    /// The patch type is not supported for this object, e.g. a strategic
    /// merge patch on a custom resource (HTTP 415 UnsupportedMediaType).
    #[error("unsupported patch: {0}")]
    Unsupported(String),
    /// Server-side apply found fields owned by other managers with other
    /// values and `force` was not set (HTTP 409 Conflict).
    #[error("{0}")]
    Conflict(ApplyConflict),
}

impl PatchError {
    /// The HTTP status code the server answers with.
    #[must_use]
    pub fn code(&self) -> u16 {
        match self {
            Self::Malformed(_) => 400,
            Self::Invalid(_) => 422,
            Self::Unsupported(_) => 415,
            Self::Conflict(_) => 409,
        }
    }

    /// The `metav1.Status.reason` the server answers with.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "BadRequest",
            Self::Invalid(_) => "Invalid",
            Self::Unsupported(_) => "UnsupportedMediaType",
            Self::Conflict(_) => "Conflict",
        }
    }
}

/// One field another manager owns with a different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The owning manager's `manager` name.
    pub manager: String,
    /// The owning manager's operation; `Update` managers are printed with
    /// their API version (`"m" using v1`), `Apply` managers are not.
    pub operation: Operation,
    /// The owning manager's API version.
    pub api_version: String,
    /// The owning manager's subresource (`"status"`), if any.
    pub subresource: Option<String>,
    /// The field in structured-merge-diff path syntax, e.g. `.data.k` or
    /// `.spec.containers[name="app"].image`.
    pub field: String,
}

impl Conflict {
    /// The manager as apimachinery prints it: `"m"`, `"m" using v1`,
    /// `"m" with subresource "status" using v1`.
    #[must_use]
    pub fn manager_display(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            s.push_str(&format!(" with subresource {sub:?}"));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

/// A rejected server-side apply (HTTP 409, reason `Conflict`).
///
/// `Display` renders apimachinery's message
/// (`managedfields/internal/conflict.go`), e.g.
/// `Apply failed with 1 conflict: conflict with "m" using v1: .data.k`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyConflict {
    /// The conflicts, sorted by manager then field.
    pub conflicts: Vec<Conflict>,
}

impl ApplyConflict {
    /// `details.causes` of the Status:
    /// `[{"reason":"FieldManagerConflict","message":"conflict with \"m\" using v1","field":".data.k"}]`.
    #[must_use]
    pub fn causes(&self) -> Vec<serde_json::Value> {
        self.conflicts
            .iter()
            .map(|c| {
                serde_json::json!({
                    "reason": "FieldManagerConflict",
                    "message": format!("conflict with {}", c.manager_display()),
                    "field": c.field,
                })
            })
            .collect()
    }
}

impl fmt::Display for ApplyConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let [c] = self.conflicts.as_slice() {
            return write!(
                f,
                "Apply failed with 1 conflict: conflict with {}: {}",
                c.manager_display(),
                c.field
            );
        }
        // Grouped by manager (sorted by the printed identifier, as Go sorts
        // the encoded manager keys), one "- path" line per field.
        let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
        for c in &self.conflicts {
            let m = c.manager_display();
            match groups.iter_mut().find(|(k, _)| *k == m) {
                Some((_, paths)) => paths.push(&c.field),
                None => groups.push((m, vec![&c.field])),
            }
        }
        groups.sort_by(|a, b| a.0.cmp(&b.0));
        let mut lines = Vec::new();
        for (m, paths) in groups {
            lines.push(format!("conflicts with {m}:"));
            lines.extend(paths.into_iter().map(|p| format!("- {p}")));
        }
        write!(
            f,
            "Apply failed with {} conflicts: {}",
            self.conflicts.len(),
            lines.join("\n")
        )
    }
}

/// `managedFields[].operation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// Server-side apply.
    Apply,
    /// Any other write (create, update, non-apply patch).
    Update,
}

impl Operation {
    /// The wire spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Apply => "Apply",
            Self::Update => "Update",
        }
    }
}

/// The writer of a request, as recorded in `metadata.managedFields`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manager {
    /// `fieldManager` query parameter, else the User-Agent up to the first `/`.
    pub name: String,
    /// `Apply` for server-side apply, `Update` for everything else.
    pub operation: Operation,
    /// `apiVersion` of the request (`v1`, `apps/v1`, `example.com/v1`).
    pub api_version: String,
    /// `Some("status")` for writes through the status subresource.
    pub subresource: Option<String>,
    /// Time of the write; recorded (RFC 3339, seconds) on this manager's entry.
    pub time: chrono::DateTime<chrono::Utc>,
}
