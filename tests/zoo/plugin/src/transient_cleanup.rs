//! # `transient-cleanup` — cleanup triggered only by observing a transient state
//!
//! **Class:** unobserved state (Sieve). The Widget has `spec.replicas`
//! numbered children `<widget>-0 … <widget>-(n-1)`. **Buggy:** scaling down
//! deletes only `<widget>-<replicas>` — the one child the step from
//! `replicas + 1` to `replicas` dropped — as if every scale-down were seen
//! one step at a time. **In production:** two changes come close together
//! (3 → 2 → 1) and the watch delivers only the last state; the controller
//! never sees `2`, deletes `<widget>-1` and leaves `<widget>-2` running
//! forever.
//!
//! **Found by:** `unobserved` on the settle between the two scale-downs (the
//! plugin held across both), then `end-state` (`<widget>-2` still there).
//!
//! **Fix:** level-based: compare the desired children with the observed
//! ones every time and delete every child numbered `>= replicas`.

use rekon_sdk::prelude::*;

use crate::{Widget, child, children};

/// The name of child `index`.
#[must_use]
pub fn child_name(req: &Request, index: u32) -> String {
    format!("{}-{index}", req.name)
}

/// One reconcile of a Widget.
///
/// # Errors
/// A failed cache read; a Widget without a uid.
pub fn reconcile(
    ctx: &Context,
    req: &Request,
    widget: &Widget,
    fixed: bool,
) -> Result<Outcome, Error> {
    let replicas = widget.spec.replicas.unwrap_or(0);
    let prefix = format!("{}-", req.name);
    let mut seen: Vec<(u32, ObjectRef)> = children(ctx, req, &req.cluster)?
        .iter()
        .filter_map(|kid| {
            let name = kid.metadata.name.as_deref()?;
            let index = name.strip_prefix(&prefix)?.parse::<u32>().ok()?;
            Some((index, ObjectRef::of(&req.cluster, kid)))
        })
        .collect();
    seen.sort_by_key(|(i, _)| *i);
    let mut outcome = Outcome::done();
    // Children are owned (both variants): when the Widget goes, garbage
    // collection takes them, whatever the last count the plugin saw.
    let mut owner = widget
        .controller_owner_ref(&())
        .ok_or_else(|| Error::retry("the widget has no uid yet"))?;
    owner.block_owner_deletion = None;
    for index in 0..replicas {
        if !seen.iter().any(|(i, _)| *i == index) {
            let name = child_name(req, index);
            let mut kid = child(req, &name, &[("index", &index.to_string())]);
            kid.metadata.owner_references = Some(vec![owner.clone()]);
            outcome.push(Action::create(&req.cluster, &kid));
        }
    }
    for (index, target) in seen {
        // Buggy: only the child the last one-step scale-down dropped.
        let extra = if fixed {
            index >= replicas
        } else {
            index == replicas
        };
        if extra {
            outcome.push(Action::delete(target));
        }
    }
    Ok(outcome)
}
