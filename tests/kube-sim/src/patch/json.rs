//! RFC 6902 JSON patch with Go (evanphx/json-patch, as used by the apiserver)
//! semantics.
//!
//! `add`, `remove`, `replace`, `move` and `copy` are the `json-patch`
//! crate's (its semantics match Go's). `test` is ours: the crate fails a
//! test of an absent path, Go passes it when the expected value is `null`
//! (contract 0.8). Operations are decoded here rather than by serde so that,
//! as in the apiserver, only a body that is not an array of objects is a 400
//! and everything else (unknown `op`, missing `path`) is a 422.

use json_patch::jsonptr::{self, PointerBuf};
use json_patch::{
    AddOperation, CopyOperation, MoveOperation, PatchOperation, RemoveOperation, ReplaceOperation,
};
use serde_json::Value;

use super::PatchError;

/// Applies an RFC 6902 JSON patch (an array of operations) and returns the
/// patched document. The target is left untouched on error.
///
/// Differences from RFC 6902, as in the apiserver: a `test` of an absent
/// path (whose parent exists) against `null` passes — kube-runtime's
/// finalizer helper relies on it.
///
/// # Errors
/// [`PatchError::Malformed`] when the patch is not a JSON array of objects;
/// [`PatchError::Invalid`] when an operation fails (failed `test`, `remove`
/// or `replace` of a missing path, unknown `op`, missing `path`/`value`).
pub fn json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let Value::Array(ops) = patch else {
        return Err(PatchError::Malformed(
            "json patch must be a JSON array of operations".into(),
        ));
    };
    if let Some(i) = ops.iter().position(|op| !op.is_object()) {
        return Err(PatchError::Malformed(format!(
            "json patch operation {i} is not a JSON object"
        )));
    }
    let mut doc = target.clone();
    for (i, raw) in ops.iter().enumerate() {
        match decode(raw).map_err(|e| PatchError::Invalid(format!("operation {i}: {e}")))? {
            Op::Test { path, value } => go_test(&doc, &path, value)
                .map_err(|e| PatchError::Invalid(format!("operation {i}: {e}")))?,
            Op::Other(op) => json_patch::patch_unsafe(&mut doc, std::slice::from_ref(&op))
                .map_err(|e| PatchError::Invalid(describe(i, raw, &e)))?,
        }
    }
    Ok(doc)
}

enum Op<'a> {
    Test { path: PointerBuf, value: &'a Value },
    Other(PatchOperation),
}

fn decode(raw: &Value) -> Result<Op<'_>, String> {
    let field = |name: &str| raw.get(name);
    let pointer = |name: &str| -> Result<PointerBuf, String> {
        let s = field(name)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("operation has no string \"{name}\""))?;
        PointerBuf::parse(s).map_err(|e| format!("invalid \"{name}\" pointer {s:?}: {e}"))
    };
    let value = || {
        field("value")
            .ok_or_else(|| "operation has no \"value\"".to_string())
            .cloned()
    };
    let op = field("op")
        .and_then(Value::as_str)
        .ok_or("operation has no string \"op\"")?;
    Ok(match op {
        "add" => Op::Other(PatchOperation::Add(AddOperation {
            path: pointer("path")?,
            value: value()?,
        })),
        "remove" => Op::Other(PatchOperation::Remove(RemoveOperation {
            path: pointer("path")?,
        })),
        "replace" => Op::Other(PatchOperation::Replace(ReplaceOperation {
            path: pointer("path")?,
            value: value()?,
        })),
        "move" => Op::Other(PatchOperation::Move(MoveOperation {
            from: pointer("from")?,
            path: pointer("path")?,
        })),
        "copy" => Op::Other(PatchOperation::Copy(CopyOperation {
            from: pointer("from")?,
            path: pointer("path")?,
        })),
        // Go treats a missing "value" of a test like null.
        "test" => Op::Test {
            path: pointer("path")?,
            value: field("value").unwrap_or(&Value::Null),
        },
        other => return Err(format!("unexpected operation {other:?}")),
    })
}

/// evanphx/json-patch `test`: the parent must exist; an absent key equals
/// `null`; otherwise the values must be equal.
fn go_test(doc: &Value, path: &PointerBuf, expected: &Value) -> Result<(), String> {
    let found = match path.split_back() {
        None => Some(doc),
        Some((parent, last)) => match doc.pointer(parent.as_str()) {
            Some(Value::Object(map)) => map.get(last.decoded().as_ref()),
            Some(Value::Array(arr)) => match last.to_index() {
                Ok(jsonptr::index::Index::Num(n)) if n < arr.len() => arr.get(n),
                _ => {
                    return Err(format!(
                        "test operation does not apply: is missing path: {path}"
                    ));
                }
            },
            _ => {
                return Err(format!(
                    "test operation does not apply: is missing path: {path}"
                ));
            }
        },
    };
    let actual = found.unwrap_or(&Value::Null);
    if actual == expected {
        Ok(())
    } else {
        Err(format!("testing value {path} failed"))
    }
}

fn describe(i: usize, raw: &Value, e: &json_patch::PatchError) -> String {
    let op = raw.get("op").and_then(Value::as_str).unwrap_or("?");
    format!(
        "operation {i} ({op}) failed at path {:?}: {}",
        e.path.as_str(),
        e.kind
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(target: Value, patch: Value) -> Value {
        json_patch(&target, &patch).unwrap_or_else(|e| panic!("{patch}: {e}"))
    }

    /// The examples of RFC 6902 appendix A (A.1–A.16).
    #[test]
    fn rfc6902_appendix_a() {
        assert_eq!(
            ok(
                json!({"foo":"bar"}),
                json!([{"op":"add","path":"/baz","value":"qux"}])
            ),
            json!({"baz":"qux","foo":"bar"})
        );
        assert_eq!(
            ok(
                json!({"foo":["bar","baz"]}),
                json!([{"op":"add","path":"/foo/1","value":"qux"}])
            ),
            json!({"foo":["bar","qux","baz"]})
        );
        assert_eq!(
            ok(
                json!({"baz":"qux","foo":"bar"}),
                json!([{"op":"remove","path":"/baz"}])
            ),
            json!({"foo":"bar"})
        );
        assert_eq!(
            ok(
                json!({"foo":["bar","qux","baz"]}),
                json!([{"op":"remove","path":"/foo/1"}])
            ),
            json!({"foo":["bar","baz"]})
        );
        assert_eq!(
            ok(
                json!({"baz":"qux","foo":"bar"}),
                json!([{"op":"replace","path":"/baz","value":"boo"}])
            ),
            json!({"baz":"boo","foo":"bar"})
        );
        assert_eq!(
            ok(
                json!({"foo":{"bar":"baz","waldo":"fred"},"qux":{"corge":"grault"}}),
                json!([{"op":"move","from":"/foo/waldo","path":"/qux/thud"}])
            ),
            json!({"foo":{"bar":"baz"},"qux":{"corge":"grault","thud":"fred"}})
        );
        assert_eq!(
            ok(
                json!({"foo":["all","grass","cows","eat"]}),
                json!([{"op":"move","from":"/foo/1","path":"/foo/3"}])
            ),
            json!({"foo":["all","cows","eat","grass"]})
        );
        // A.8 test success
        ok(
            json!({"baz":"qux","foo":["a",2,"c"]}),
            json!([{"op":"test","path":"/baz","value":"qux"},{"op":"test","path":"/foo/1","value":2}]),
        );
        // A.9 test error
        assert!(matches!(
            json_patch(
                &json!({"baz":"qux"}),
                &json!([{"op":"test","path":"/baz","value":"bar"}])
            ),
            Err(PatchError::Invalid(_))
        ));
        assert_eq!(
            ok(
                json!({"foo":"bar"}),
                json!([{"op":"add","path":"/child","value":{"grandchild":{}}}])
            ),
            json!({"foo":"bar","child":{"grandchild":{}}})
        );
        // A.11 ignoring unrecognized elements
        assert_eq!(
            ok(
                json!({"foo":"bar"}),
                json!([{"op":"add","path":"/baz","value":"qux","xyz":123}])
            ),
            json!({"foo":"bar","baz":"qux"})
        );
        // A.12 adding to a nonexistent target
        assert!(matches!(
            json_patch(
                &json!({"foo":"bar"}),
                &json!([{"op":"add","path":"/baz/bat","value":"qux"}])
            ),
            Err(PatchError::Invalid(_))
        ));
        // A.14 ~ escape ordering
        ok(
            json!({"/":9,"~1":10}),
            json!([{"op":"test","path":"/~01","value":10}]),
        );
        // A.15 comparing strings and numbers
        assert!(
            json_patch(
                &json!({"/":9,"~1":10}),
                &json!([{"op":"test","path":"/~01","value":"10"}])
            )
            .is_err()
        );
        // A.16 adding an array value
        assert_eq!(
            ok(
                json!({"foo":["bar"]}),
                json!([{"op":"add","path":"/foo/-","value":["abc","def"]}])
            ),
            json!({"foo":["bar",["abc","def"]]})
        );
    }

    /// Contract 0.8: kube-runtime's finalizer helper on an object without finalizers.
    #[test]
    fn go_test_of_absent_path_against_null_passes() {
        let obj = json!({"metadata":{"name":"a"}});
        let patch = json!([
            {"op":"test","path":"/metadata/finalizers","value":null},
            {"op":"add","path":"/metadata/finalizers","value":["f"]}
        ]);
        assert_eq!(
            ok(obj, patch),
            json!({"metadata":{"name":"a","finalizers":["f"]}})
        );
    }

    #[test]
    fn go_test_null_fails_when_present_and_when_parent_missing() {
        let obj = json!({"metadata":{"name":"a","finalizers":["f"]}});
        let patch = json!([{"op":"test","path":"/metadata/finalizers","value":null}]);
        assert!(matches!(
            json_patch(&obj, &patch),
            Err(PatchError::Invalid(_))
        ));
        let patch = json!([{"op":"test","path":"/spec/x","value":null}]);
        assert!(matches!(
            json_patch(&obj, &patch),
            Err(PatchError::Invalid(_))
        ));
        // an explicit null equals null
        let obj = json!({"a":null});
        ok(obj, json!([{"op":"test","path":"/a","value":null}]));
    }

    /// The finalizer helper's removal: test the list, then remove one index.
    #[test]
    fn finalizer_removal_with_test() {
        let obj = json!({"metadata":{"finalizers":["a","b"]}});
        let patch = json!([
            {"op":"test","path":"/metadata/finalizers","value":["a","b"]},
            {"op":"remove","path":"/metadata/finalizers/0"}
        ]);
        assert_eq!(
            ok(obj.clone(), patch),
            json!({"metadata":{"finalizers":["b"]}})
        );
        let stale = json!([
            {"op":"test","path":"/metadata/finalizers","value":["a"]},
            {"op":"remove","path":"/metadata/finalizers/0"}
        ]);
        assert!(matches!(
            json_patch(&obj, &stale),
            Err(PatchError::Invalid(_))
        ));
    }

    #[test]
    fn remove_or_replace_missing_is_invalid_and_target_untouched() {
        let obj = json!({"a":1});
        for patch in [
            json!([{"op":"add","path":"/b","value":2},{"op":"remove","path":"/missing"}]),
            json!([{"op":"replace","path":"/missing","value":1}]),
            json!([{"op":"remove","path":"/a/0"}]),
            json!([{"op":"frobnicate","path":"/a"}]),
            json!([{"op":"add","value":1}]),
            json!([{"op":"add","path":"/x"}]),
            json!([{"op":"add","path":"x","value":1}]),
        ] {
            assert!(
                matches!(json_patch(&obj, &patch), Err(PatchError::Invalid(_))),
                "{patch}"
            );
        }
        assert_eq!(obj, json!({"a":1}));
    }

    #[test]
    fn malformed_is_400() {
        for patch in [json!({"op":"add"}), json!("x"), json!([1]), json!([[]])] {
            let err = json_patch(&json!({}), &patch).unwrap_err();
            assert!(matches!(err, PatchError::Malformed(_)), "{patch}");
            assert_eq!(err.code(), 400);
        }
    }

    #[test]
    fn copy_and_replace_root() {
        assert_eq!(
            ok(
                json!({"a":{"b":1}}),
                json!([{"op":"copy","from":"/a","path":"/c"}])
            ),
            json!({"a":{"b":1},"c":{"b":1}})
        );
        assert_eq!(
            ok(
                json!({"a":1}),
                json!([{"op":"replace","path":"","value":[1]}])
            ),
            json!([1])
        );
        assert_eq!(ok(json!({"a":1}), json!([])), json!({"a":1}));
    }
}
