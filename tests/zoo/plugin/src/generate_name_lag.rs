//! # `generate-name-lag` — create-if-absent with `generateName` under cache lag
//!
//! **Class:** stale state (Sieve). The Widget wants exactly one child.
//! **Buggy:** it lists its children and, when it sees none, creates one
//! named by `generateName` (`<widget>-` and five random characters). **In
//! production:** the informer lags behind the create (or a watch reconnects
//! and replays an older list); the next reconcile sees no child and creates
//! a second one under another random name. create-if-absent is only
//! idempotent when the name is.
//!
//! It records the number of children it sees in `status.children` (0 in
//! the reconcile that creates the first).
//!
//! **Found by:** `stale` on the reconcile that records 1 (its list served
//! as it was before the create), then `counts` (two creates of `<widget>-…`
//! instead of one) and `end-state` (an extra child).
//!
//! **Fix:** a deterministic name (`<widget>-child`): the second create is an
//! AlreadyExists, which create-if-absent takes as done.
//!
//! The host's create action needs `metadata.name`, so the buggy variant
//! does what the API server does with `generateName`: it keeps
//! `metadata.generateName` on the object and fills in a name from the
//! prefix and five characters of the apiserver's alphabet, drawn from the
//! request time (the plugin has no other entropy). Two reconciles at
//! different instants pick different names, like two server-side
//! generations.

use rekon_sdk::prelude::*;
use serde_json::json;

use crate::{Widget, child, children, status_of, status_patch};

/// The apiserver's `generateName` alphabet (`k8s.io/apiserver` `names`).
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The fixed twin's child name (`<widget>-child`).
pub use crate::child_name as fixed_name;

/// The buggy variant's `generateName` prefix.
#[must_use]
pub fn prefix(req: &Request) -> String {
    format!("{}-", req.name)
}

/// Five characters of the alphabet from `seed` (FNV-1a of its bytes).
fn suffix(seed: i128) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in seed.to_le_bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (0..5)
        .map(|i| {
            let index = (hash >> (i * 8)) % ALPHABET.len() as u64;
            char::from(ALPHABET[usize::try_from(index).unwrap_or(0)])
        })
        .collect()
}

/// One reconcile of a Widget.
///
/// # Errors
/// A failed cache read.
pub fn reconcile(
    ctx: &Context,
    req: &Request,
    widget: &Widget,
    fixed: bool,
) -> Result<Outcome, Error> {
    let kids = children(ctx, req, &req.cluster)?;
    let mut outcome = Outcome::done();
    if kids.is_empty() {
        let object = if fixed {
            child(req, &fixed_name(req), &[("made-by", "zoo")])
        } else {
            let prefix = prefix(req);
            let name = format!("{prefix}{}", suffix(ctx.timestamp().as_nanosecond()));
            let mut object = child(req, &name, &[("made-by", "zoo")]);
            object.metadata.generate_name = Some(prefix);
            object
        };
        outcome.push(Action::create(&req.cluster, &object));
    }
    // The children seen, recorded when it changed (0 beside the create).
    let count = u32::try_from(kids.len()).unwrap_or(u32::MAX);
    if status_of(widget).children != Some(count) {
        outcome.push(status_patch(req, json!({"children": count})));
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_look_generated_and_differ_by_instant() {
        let a = suffix(1_000);
        assert_eq!(a.len(), 5);
        assert!(a.bytes().all(|b| ALPHABET.contains(&b)), "{a}");
        assert_ne!(a, suffix(1_001));
    }
}
