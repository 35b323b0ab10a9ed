//! RFC 7386 JSON merge patch.
//!
//! Hand-written rather than `json_patch::merge` so the in-place variant can
//! move nothing it does not have to and the by-reference variant clones only
//! the target once.

use serde_json::Value;

/// Applies an RFC 7386 merge patch and returns the patched document.
///
/// Objects merge recursively, `null` deletes a key, anything else (arrays
/// included) replaces. A non-object patch replaces the whole target.
#[must_use]
pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    if !patch.is_object() {
        return patch.clone();
    }
    let mut out = target.clone();
    merge_patch_in_place(&mut out, patch);
    out
}

/// [`merge_patch`] in place, for callers that own the target already.
pub fn merge_patch_in_place(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::with_capacity(patch.len()));
    }
    let Value::Object(map) = target else {
        unreachable!("target was made an object above")
    };
    for (key, value) in patch {
        if value.is_null() {
            map.shift_remove(key);
        } else if value.is_object() {
            match map.get_mut(key) {
                Some(slot) => merge_patch_in_place(slot, value),
                None => {
                    let mut fresh = Value::Null;
                    merge_patch_in_place(&mut fresh, value);
                    map.insert(key.clone(), fresh);
                }
            }
        } else {
            map.insert(key.clone(), value.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The examples of RFC 7386 appendix A.
    #[test]
    fn rfc7386_appendix_a() {
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (
                json!({"a":"b","b":"c"}),
                json!({"a":null}),
                json!({"b":"c"}),
            ),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (
                json!({"a":{"b":"c"}}),
                json!({"a":{"b":"d","c":null}}),
                json!({"a":{"b":"d"}}),
            ),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a":"b"}), json!(["c"]), json!(["c"])),
            (json!({"a":"foo"}), json!(null), json!(null)),
            (json!({"a":"foo"}), json!("bar"), json!("bar")),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (
                json!({}),
                json!({"a":{"bb":{"ccc":null}}}),
                json!({"a":{"bb":{}}}),
            ),
        ];
        for (target, patch, want) in cases {
            assert_eq!(merge_patch(&target, &patch), want, "{target} + {patch}");
            let mut t = target.clone();
            merge_patch_in_place(&mut t, &patch);
            assert_eq!(t, want, "in place: {target} + {patch}");
        }
    }

    #[test]
    fn keeps_key_order_and_appends_new_keys() {
        let target = json!({"metadata":{"name":"a","labels":{"x":"1"}},"data":{"k":"v"}});
        let out = merge_patch(
            &target,
            &json!({"metadata":{"labels":{"y":"2"}},"data":{"k":"w"}}),
        );
        assert_eq!(
            serde_json::to_string(&out).unwrap(),
            r#"{"metadata":{"name":"a","labels":{"x":"1","y":"2"}},"data":{"k":"w"}}"#
        );
    }
}
