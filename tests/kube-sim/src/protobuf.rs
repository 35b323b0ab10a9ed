//! Decoding of Kubernetes protobuf request bodies
//! (`Content-Type: application/vnd.kubernetes.protobuf`) into JSON.
//!
//! kubectl's imperative `create` subcommands build typed objects and send
//! them as protobuf (kubectl 1.32: `create namespace`, `create configmap`,
//! `create secret generic`, `create serviceaccount`, with
//! `Accept: application/vnd.kubernetes.protobuf,application/json`, so the
//! response can stay JSON). The body is the 4-byte magic `k8s\0` followed by
//! a `runtime.Unknown`:
//!
//! ```text
//! message Unknown  { TypeMeta typeMeta = 1; bytes raw = 2; string contentEncoding = 3; string contentType = 4; }
//! message TypeMeta { string apiVersion = 1; string kind = 2; }
//! ```
//!
//! `raw` is the object's own message (without TypeMeta). The kinds decoded
//! here are a table of message descriptions with the field numbers of
//! `k8s.io/api/core/v1/generated.proto` and
//! `k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto`; other kinds get
//! 415 naming the kind.
//!
//! Why hand-written: `prost` and friends decode into generated Rust types,
//! which would mean vendoring and compiling the Kubernetes .proto tree and
//! then converting every generated struct to the JSON shape the store keeps
//! (k8s-openapi types have no protobuf support). The store works on JSON,
//! so a small table-driven wire reader that goes straight to
//! `serde_json::Value` is less code and covers exactly the kinds listed.
//! The reader checks every length and varint and never panics: malformed
//! input is an error (400).

use base64::Engine as _;
use serde_json::{Map, Value};

/// The prefix of every Kubernetes protobuf body.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// Why a protobuf body could not be turned into JSON.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtoError {
    /// The body is not a well-formed Kubernetes protobuf message (400).
    #[error("failed to decode protobuf body: {0}")]
    Malformed(String),
    /// The envelope is fine but its kind is not in the table (415).
    #[error(
        "failed to decode protobuf body: kube-sim does not decode protobuf for kind {kind:?} (apiVersion {api_version:?}); it decodes Namespace, ConfigMap, Secret and ServiceAccount only. Send JSON instead, e.g. write the object to a manifest and use `kubectl apply -f`"
    )]
    UnsupportedKind {
        /// `apiVersion` from the envelope.
        api_version: String,
        /// `kind` from the envelope.
        kind: String,
    },
    /// The envelope declares an encoding of `raw` other than none (415).
    #[error("failed to decode protobuf body: unsupported contentEncoding {0:?}")]
    UnsupportedEncoding(String),
}

fn malformed(msg: impl Into<String>) -> ProtoError {
    ProtoError::Malformed(msg.into())
}

// ----- wire format ----------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    Varint,
    Fixed64,
    Len,
    Fixed32,
}

/// A bounds-checked cursor over protobuf wire data.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut out: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(malformed("truncated varint"));
            };
            self.pos += 1;
            let low = u64::from(b & 0x7f);
            if i == 9 && b > 1 {
                return Err(malformed("varint overflows 64 bits"));
            }
            out |= low << (7 * i);
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err(malformed("varint longer than 10 bytes"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| malformed("length exceeds the message"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn len_delimited(&mut self) -> Result<&'a [u8], ProtoError> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| malformed("length exceeds the message"))?;
        self.take(n)
    }

    /// The next field number and wire type.
    fn key(&mut self) -> Result<(u64, Wire), ProtoError> {
        let k = self.varint()?;
        let num = k >> 3;
        if num == 0 {
            return Err(malformed("field number 0"));
        }
        let wire = match k & 7 {
            0 => Wire::Varint,
            1 => Wire::Fixed64,
            2 => Wire::Len,
            5 => Wire::Fixed32,
            w => {
                return Err(malformed(format!(
                    "unsupported wire type {w} (field {num})"
                )));
            }
        };
        Ok((num, wire))
    }

    fn skip(&mut self, wire: Wire) -> Result<(), ProtoError> {
        match wire {
            Wire::Varint => self.varint().map(drop),
            Wire::Fixed64 => self.take(8).map(drop),
            Wire::Fixed32 => self.take(4).map(drop),
            Wire::Len => self.len_delimited().map(drop),
        }
    }
}

fn utf8(b: &[u8], what: &str) -> Result<String, ProtoError> {
    std::str::from_utf8(b)
        .map(str::to_string)
        .map_err(|_| malformed(format!("{what} is not valid UTF-8")))
}

// ----- message descriptions ---------------------------------------------------

/// How one field is encoded and how it maps to JSON. Omission follows the
/// Go JSON tags of the API types: `omitempty` scalars are dropped when zero,
/// pointer fields (`Opt*`) are kept whenever present on the wire.
#[derive(Debug, Clone, Copy)]
enum Ty {
    /// `string`, `omitempty`.
    Str,
    /// `string` without `omitempty` (always emitted).
    ReqStr,
    /// `int64`, `omitempty`.
    Int64,
    /// `*int64`.
    OptInt64,
    /// `*bool`.
    OptBool,
    /// `metav1.Time` (`{seconds=1, nanos=2}`) → RFC 3339 seconds; zero
    /// time omitted (Go renders it `null`).
    Time,
    /// `map<string,string>`, `omitempty`.
    StrMap,
    /// `map<string,bytes>` → base64 values, `omitempty`.
    BytesMap,
    /// `metav1.FieldsV1` (`{bytes Raw = 1}`): the raw bytes are JSON.
    FieldsV1,
    /// An embedded message (always emitted when present).
    Msg(&'static Message),
}

#[derive(Debug)]
struct Field {
    num: u64,
    json: &'static str,
    ty: Ty,
    /// `repeated` (a JSON array, `omitempty`).
    repeated: bool,
}

#[derive(Debug)]
struct Message {
    name: &'static str,
    fields: &'static [Field],
}

const fn f(num: u64, json: &'static str, ty: Ty) -> Field {
    Field {
        num,
        json,
        ty,
        repeated: false,
    }
}

const fn rep(num: u64, json: &'static str, ty: Ty) -> Field {
    Field {
        num,
        json,
        ty,
        repeated: true,
    }
}

// k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto

static OWNER_REFERENCE: Message = Message {
    name: "OwnerReference",
    fields: &[
        f(5, "apiVersion", Ty::ReqStr),
        f(1, "kind", Ty::ReqStr),
        f(3, "name", Ty::ReqStr),
        f(4, "uid", Ty::ReqStr),
        f(6, "controller", Ty::OptBool),
        f(7, "blockOwnerDeletion", Ty::OptBool),
    ],
};

static MANAGED_FIELDS_ENTRY: Message = Message {
    name: "ManagedFieldsEntry",
    fields: &[
        f(1, "manager", Ty::Str),
        f(2, "operation", Ty::Str),
        f(3, "apiVersion", Ty::Str),
        f(4, "time", Ty::Time),
        f(6, "fieldsType", Ty::Str),
        f(7, "fieldsV1", Ty::FieldsV1),
        f(8, "subresource", Ty::Str),
    ],
};

static OBJECT_META: Message = Message {
    name: "ObjectMeta",
    fields: &[
        f(1, "name", Ty::Str),
        f(2, "generateName", Ty::Str),
        f(3, "namespace", Ty::Str),
        f(4, "selfLink", Ty::Str),
        f(5, "uid", Ty::Str),
        f(6, "resourceVersion", Ty::Str),
        f(7, "generation", Ty::Int64),
        f(8, "creationTimestamp", Ty::Time),
        f(9, "deletionTimestamp", Ty::Time),
        f(10, "deletionGracePeriodSeconds", Ty::OptInt64),
        f(11, "labels", Ty::StrMap),
        f(12, "annotations", Ty::StrMap),
        rep(13, "ownerReferences", Ty::Msg(&OWNER_REFERENCE)),
        rep(14, "finalizers", Ty::Str),
        rep(17, "managedFields", Ty::Msg(&MANAGED_FIELDS_ENTRY)),
    ],
};

// k8s.io/api/core/v1/generated.proto

static NAMESPACE_SPEC: Message = Message {
    name: "NamespaceSpec",
    fields: &[rep(1, "finalizers", Ty::Str)],
};

static NAMESPACE_CONDITION: Message = Message {
    name: "NamespaceCondition",
    fields: &[
        f(1, "type", Ty::ReqStr),
        f(2, "status", Ty::ReqStr),
        f(4, "lastTransitionTime", Ty::Time),
        f(5, "reason", Ty::Str),
        f(6, "message", Ty::Str),
    ],
};

static NAMESPACE_STATUS: Message = Message {
    name: "NamespaceStatus",
    fields: &[
        f(1, "phase", Ty::Str),
        rep(2, "conditions", Ty::Msg(&NAMESPACE_CONDITION)),
    ],
};

static NAMESPACE: Message = Message {
    name: "Namespace",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "spec", Ty::Msg(&NAMESPACE_SPEC)),
        f(3, "status", Ty::Msg(&NAMESPACE_STATUS)),
    ],
};

static CONFIG_MAP: Message = Message {
    name: "ConfigMap",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "data", Ty::StrMap),
        f(3, "binaryData", Ty::BytesMap),
        f(4, "immutable", Ty::OptBool),
    ],
};

static SECRET: Message = Message {
    name: "Secret",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "data", Ty::BytesMap),
        f(3, "type", Ty::Str),
        f(4, "stringData", Ty::StrMap),
        f(5, "immutable", Ty::OptBool),
    ],
};

static OBJECT_REFERENCE: Message = Message {
    name: "ObjectReference",
    fields: &[
        f(1, "kind", Ty::Str),
        f(2, "namespace", Ty::Str),
        f(3, "name", Ty::Str),
        f(4, "uid", Ty::Str),
        f(5, "apiVersion", Ty::Str),
        f(6, "resourceVersion", Ty::Str),
        f(7, "fieldPath", Ty::Str),
    ],
};

static LOCAL_OBJECT_REFERENCE: Message = Message {
    name: "LocalObjectReference",
    fields: &[f(1, "name", Ty::Str)],
};

static SERVICE_ACCOUNT: Message = Message {
    name: "ServiceAccount",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        rep(2, "secrets", Ty::Msg(&OBJECT_REFERENCE)),
        rep(3, "imagePullSecrets", Ty::Msg(&LOCAL_OBJECT_REFERENCE)),
        f(4, "automountServiceAccountToken", Ty::OptBool),
    ],
};

/// Top-level kinds by (apiVersion, kind).
static KINDS: &[(&str, &str, &Message)] = &[
    ("v1", "Namespace", &NAMESPACE),
    ("v1", "ConfigMap", &CONFIG_MAP),
    ("v1", "Secret", &SECRET),
    ("v1", "ServiceAccount", &SERVICE_ACCOUNT),
];

// ----- decoding -------------------------------------------------------------

/// Decodes a Kubernetes protobuf body (magic + `runtime.Unknown`) into the
/// JSON object it encodes, with `apiVersion` and `kind` from the envelope.
pub fn decode(body: &[u8]) -> Result<Value, ProtoError> {
    let Some(rest) = body.strip_prefix(MAGIC.as_slice()) else {
        return Err(malformed(
            "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]",
        ));
    };
    let mut r = Reader::new(rest);
    let (mut api_version, mut kind) = (String::new(), String::new());
    let mut raw: &[u8] = &[];
    let mut encoding = String::new();
    while !r.done() {
        let (num, wire) = r.key()?;
        match (num, wire) {
            (1, Wire::Len) => {
                let mut tm = Reader::new(r.len_delimited()?);
                while !tm.done() {
                    match tm.key()? {
                        (1, Wire::Len) => api_version = utf8(tm.len_delimited()?, "apiVersion")?,
                        (2, Wire::Len) => kind = utf8(tm.len_delimited()?, "kind")?,
                        (_, w) => tm.skip(w)?,
                    }
                }
            }
            (2, Wire::Len) => raw = r.len_delimited()?,
            (3, Wire::Len) => encoding = utf8(r.len_delimited()?, "contentEncoding")?,
            // contentType: the apiserver does not look at it either.
            (4, Wire::Len) => drop(r.len_delimited()?),
            (1..=4, _) => {
                return Err(malformed(format!(
                    "Unknown field {num} has wire type {wire:?}"
                )));
            }
            (_, w) => r.skip(w)?,
        }
    }
    if kind.is_empty() {
        return Err(malformed(
            "Object 'Kind' is missing in the protobuf envelope",
        ));
    }
    if !encoding.is_empty() {
        return Err(ProtoError::UnsupportedEncoding(encoding));
    }
    let Some((_, _, msg)) = KINDS
        .iter()
        .find(|(av, k, _)| *av == api_version && *k == kind)
    else {
        return Err(ProtoError::UnsupportedKind { api_version, kind });
    };
    let mut obj = Map::new();
    obj.insert("kind".into(), Value::String(kind));
    obj.insert("apiVersion".into(), Value::String(api_version));
    decode_into(msg, raw, &mut obj)?;
    Ok(Value::Object(obj))
}

/// Decodes the fields of `msg` from `buf` into `out`. A repeated embedded
/// message merges into the one already decoded, as protobuf specifies.
fn decode_into(msg: &Message, buf: &[u8], out: &mut Map<String, Value>) -> Result<(), ProtoError> {
    let mut r = Reader::new(buf);
    while !r.done() {
        let (num, wire) = r.key()?;
        // Unknown fields are skipped, as the generated Go decoders do.
        let Some(field) = msg.fields.iter().find(|fl| fl.num == num) else {
            r.skip(wire)?;
            continue;
        };
        let want = match field.ty {
            Ty::Int64 | Ty::OptInt64 | Ty::OptBool => Wire::Varint,
            _ => Wire::Len,
        };
        if wire != want {
            return Err(malformed(format!(
                "{}.{} (field {num}) has wire type {wire:?}, expected {want:?}",
                msg.name, field.json
            )));
        }
        let at = |what: &str| format!("{}.{}: {what}", msg.name, field.json);
        match field.ty {
            Ty::Str | Ty::ReqStr => {
                let s = utf8(r.len_delimited()?, &at("string"))?;
                if field.repeated {
                    push(out, field.json, Value::String(s));
                } else if matches!(field.ty, Ty::ReqStr) || !s.is_empty() {
                    out.insert(field.json.into(), Value::String(s));
                } else {
                    out.remove(field.json);
                }
            }
            Ty::Int64 | Ty::OptInt64 => {
                // int64 is two's complement in a 64-bit varint.
                let v = r.varint()? as i64;
                if matches!(field.ty, Ty::OptInt64) || v != 0 {
                    out.insert(field.json.into(), Value::from(v));
                } else {
                    out.remove(field.json);
                }
            }
            Ty::OptBool => {
                let v = r.varint()? != 0;
                out.insert(field.json.into(), Value::Bool(v));
            }
            Ty::Time => match time(r.len_delimited()?).map_err(|e| malformed(at(&e)))? {
                Some(t) => {
                    out.insert(field.json.into(), Value::String(t));
                }
                None => {
                    out.remove(field.json);
                }
            },
            Ty::StrMap | Ty::BytesMap => {
                let (k, v) = map_entry(r.len_delimited()?, matches!(field.ty, Ty::BytesMap))
                    .map_err(|e| malformed(at(&e)))?;
                let m = out
                    .entry(field.json)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(m) = m {
                    m.insert(k, v);
                }
            }
            Ty::FieldsV1 => {
                let v = fields_v1(r.len_delimited()?).map_err(|e| malformed(at(&e)))?;
                out.insert(field.json.into(), v);
            }
            Ty::Msg(inner) => {
                let b = r.len_delimited()?;
                if field.repeated {
                    let mut m = Map::new();
                    decode_into(inner, b, &mut m)?;
                    push(out, field.json, Value::Object(m));
                } else {
                    let slot = out
                        .entry(field.json)
                        .or_insert_with(|| Value::Object(Map::new()));
                    if let Value::Object(m) = slot {
                        decode_into(inner, b, m)?;
                    }
                }
            }
        }
    }
    Ok(())
}

fn push(out: &mut Map<String, Value>, key: &str, v: Value) {
    if let Value::Array(a) = out.entry(key).or_insert_with(|| Value::Array(Vec::new())) {
        a.push(v);
    }
}

/// `metav1.Time` → RFC 3339 with seconds (the JSON form drops fractions);
/// `None` for the zero time.
fn time(buf: &[u8]) -> Result<Option<String>, String> {
    let mut r = Reader::new(buf);
    let (mut secs, mut nanos) = (0i64, 0i64);
    while !r.done() {
        match r.key().map_err(|e| e.to_string())? {
            (1, Wire::Varint) => secs = r.varint().map_err(|e| e.to_string())? as i64,
            (2, Wire::Varint) => nanos = r.varint().map_err(|e| e.to_string())? as i64,
            (_, w) => r.skip(w).map_err(|e| e.to_string())?,
        }
    }
    if secs == 0 && nanos == 0 {
        return Ok(None);
    }
    let nanos = u32::try_from(nanos)
        .ok()
        .filter(|n| *n < 1_000_000_000)
        .ok_or("time nanos out of range")?;
    let t = chrono::DateTime::from_timestamp(secs, nanos).ok_or("time out of range")?;
    Ok(Some(t.format("%Y-%m-%dT%H:%M:%SZ").to_string()))
}

/// One `map<string, string|bytes>` entry: `{key = 1, value = 2}`.
fn map_entry(buf: &[u8], bytes: bool) -> Result<(String, Value), String> {
    let mut r = Reader::new(buf);
    let mut key = String::new();
    let mut val: &[u8] = &[];
    while !r.done() {
        match r.key().map_err(|e| e.to_string())? {
            (1, Wire::Len) => {
                key = utf8(r.len_delimited().map_err(|e| e.to_string())?, "map key")
                    .map_err(|e| e.to_string())?;
            }
            (2, Wire::Len) => val = r.len_delimited().map_err(|e| e.to_string())?,
            (n @ (1 | 2), w) => return Err(format!("map entry field {n} has wire type {w:?}")),
            (_, w) => r.skip(w).map_err(|e| e.to_string())?,
        }
    }
    let v = if bytes {
        base64::engine::general_purpose::STANDARD.encode(val)
    } else {
        utf8(val, "map value").map_err(|e| e.to_string())?
    };
    Ok((key, Value::String(v)))
}

/// `metav1.FieldsV1{Raw = 1}`: the raw bytes are a JSON document.
fn fields_v1(buf: &[u8]) -> Result<Value, String> {
    let mut r = Reader::new(buf);
    let mut raw: &[u8] = &[];
    while !r.done() {
        match r.key().map_err(|e| e.to_string())? {
            (1, Wire::Len) => raw = r.len_delimited().map_err(|e| e.to_string())?,
            (_, w) => r.skip(w).map_err(|e| e.to_string())?,
        }
    }
    if raw.is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    serde_json::from_slice(raw).map_err(|e| format!("fieldsV1 is not JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Bodies captured from kubectl 1.32.4 against kube-sim (see the module docs).
    const NS: &str = "6b3873000a0f0a02763112094e616d657370616365121b0a130a03666f6f12001a0022002a0032003800420012001a020a001a002200";
    const CM: &str = "6b3873000a0f0a0276311209436f6e6669674d6170121b0a110a017812001a0022002a0032003800420012060a01611201621a002200";
    const SECRET: &str = "6b3873000a0c0a0276311206536563726574121d0a110a017312001a0022002a0032003800420012060a016b1201761a001a002200";
    const SA: &str = "6b3873000a140a027631120e536572766963654163636f756e7412140a120a02736112001a0022002a003200380042001a002200";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    // ----- a tiny encoder for the tests ----------------------------------

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn ld(num: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        varint(num << 3 | 2, &mut out);
        varint(payload.len() as u64, &mut out);
        out.extend_from_slice(payload);
        out
    }

    fn vi(num: u64, v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        varint(num << 3, &mut out);
        varint(v, &mut out);
        out
    }

    fn entry(k: &[u8], v: &[u8]) -> Vec<u8> {
        [ld(1, k), ld(2, v)].concat()
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let tm = [ld(1, api_version.as_bytes()), ld(2, kind.as_bytes())].concat();
        [
            MAGIC.to_vec(),
            ld(1, &tm),
            ld(2, raw),
            ld(3, b""),
            ld(4, b""),
        ]
        .concat()
    }

    #[test]
    fn kubectl_create_bodies() {
        assert_eq!(
            decode(&hex(NS)).unwrap(),
            json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "foo"}, "spec": {}, "status": {}})
        );
        assert_eq!(
            decode(&hex(CM)).unwrap(),
            json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x"}, "data": {"a": "b"}})
        );
        assert_eq!(
            decode(&hex(SECRET)).unwrap(),
            json!({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "s"}, "data": {"k": "dg=="}})
        );
        assert_eq!(
            decode(&hex(SA)).unwrap(),
            json!({"kind": "ServiceAccount", "apiVersion": "v1", "metadata": {"name": "sa"}})
        );
    }

    #[test]
    fn full_object_meta_and_every_field_type() {
        let time = [vi(1, 1_700_000_000), vi(2, 5)].concat();
        let owner = [
            ld(5, b"apps/v1"),
            ld(1, b"Deployment"),
            ld(3, b"web"),
            ld(4, b"u-1"),
            vi(6, 1),
            vi(7, 0),
        ]
        .concat();
        let mf = [
            ld(1, b"kubectl"),
            ld(2, b"Update"),
            ld(3, b"v1"),
            ld(4, &time),
            ld(6, b"FieldsV1"),
            ld(7, &ld(1, br#"{"f:data":{}}"#)),
        ]
        .concat();
        let meta = [
            ld(2, b"gen-"),
            ld(3, b"ns1"),
            ld(5, b"uid-1"),
            ld(6, b"42"),
            vi(7, 3),
            ld(8, &time),
            vi(10, u64::MAX), // -1 as int64
            ld(11, &entry(b"app", b"web")),
            ld(11, &entry(b"tier", b"db")),
            ld(12, &entry(b"note", b"x")),
            ld(13, &owner),
            ld(14, b"a/b"),
            ld(14, b"c/d"),
            ld(17, &mf),
            ld(99, b"unknown fields are skipped"),
        ]
        .concat();
        let raw = [
            ld(1, &meta),
            ld(3, &entry(b"bin", &[0, 255, 1])),
            ld(2, &entry(b"txt", b"hello")),
            vi(4, 1),
        ]
        .concat();
        let v = decode(&envelope("v1", "ConfigMap", &raw)).unwrap();
        assert_eq!(
            v,
            json!({
                "kind": "ConfigMap", "apiVersion": "v1",
                "metadata": {
                    "generateName": "gen-", "namespace": "ns1", "uid": "uid-1",
                    "resourceVersion": "42", "generation": 3,
                    "creationTimestamp": "2023-11-14T22:13:20Z",
                    "deletionGracePeriodSeconds": -1,
                    "labels": {"app": "web", "tier": "db"},
                    "annotations": {"note": "x"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                        "uid": "u-1", "controller": true, "blockOwnerDeletion": false}],
                    "finalizers": ["a/b", "c/d"],
                    "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                        "time": "2023-11-14T22:13:20Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}}],
                },
                "data": {"txt": "hello"},
                "binaryData": {"bin": "AP8B"},
                "immutable": true,
            })
        );
    }

    #[test]
    fn secret_service_account_and_namespace_fields() {
        let raw = [
            ld(1, &ld(1, b"s")),
            ld(2, &entry(b"k", b"\x00\x01")),
            ld(3, b"kubernetes.io/tls"),
            ld(4, &entry(b"plain", b"text")),
            vi(5, 0),
        ]
        .concat();
        assert_eq!(
            decode(&envelope("v1", "Secret", &raw)).unwrap(),
            json!({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "s"}, "data": {"k": "AAE="},
                "type": "kubernetes.io/tls", "stringData": {"plain": "text"}, "immutable": false})
        );
        let objref = [ld(1, b"Secret"), ld(3, b"tok"), ld(2, b"default")].concat();
        let raw = [
            ld(1, &ld(1, b"sa")),
            ld(2, &objref),
            ld(3, &ld(1, b"pull")),
            vi(4, 0),
        ]
        .concat();
        assert_eq!(
            decode(&envelope("v1", "ServiceAccount", &raw)).unwrap(),
            json!({"kind": "ServiceAccount", "apiVersion": "v1", "metadata": {"name": "sa"},
                "secrets": [{"kind": "Secret", "name": "tok", "namespace": "default"}],
                "imagePullSecrets": [{"name": "pull"}], "automountServiceAccountToken": false})
        );
        let cond = [ld(1, b"T"), ld(2, b"True"), ld(5, b"r")].concat();
        let raw = [
            ld(1, &ld(1, b"n")),
            ld(2, &ld(1, b"kubernetes")),
            ld(3, &[ld(1, b"Active"), ld(2, &cond)].concat()),
        ]
        .concat();
        assert_eq!(
            decode(&envelope("v1", "Namespace", &raw)).unwrap(),
            json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "n"},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active", "conditions": [{"type": "T", "status": "True", "reason": "r"}]}})
        );
    }

    #[test]
    fn unsupported_kinds_and_encodings() {
        let e = decode(&envelope("apps/v1", "Deployment", &[])).unwrap_err();
        assert_eq!(
            e,
            ProtoError::UnsupportedKind {
                api_version: "apps/v1".into(),
                kind: "Deployment".into()
            }
        );
        let msg = e.to_string();
        assert!(
            msg.contains("\"Deployment\"") && msg.contains("kubectl apply"),
            "{msg}"
        );
        let mut body = envelope("v1", "ConfigMap", &[]);
        body.extend(ld(3, b"gzip"));
        assert_eq!(
            decode(&body).unwrap_err(),
            ProtoError::UnsupportedEncoding("gzip".into())
        );
    }

    #[test]
    fn malformed_input_is_an_error_never_a_panic() {
        let good = hex(SECRET);
        // Every truncation and every single-byte corruption of a real body.
        for n in 0..good.len() {
            let _ = decode(&good[..n]);
            for b in [0x00, 0x02, 0x07, 0x0a, 0x7f, 0x80, 0xff] {
                let mut bad = good.clone();
                bad[n] = b;
                let _ = decode(&bad);
            }
        }
        assert!(matches!(decode(b"{}"), Err(ProtoError::Malformed(_))));
        assert!(matches!(decode(b"k8s"), Err(ProtoError::Malformed(_))));
        assert!(matches!(
            decode(&hex(SECRET)[..20]),
            Err(ProtoError::Malformed(_))
        ));
        // A length far past the end, an 11-byte varint, a group wire type.
        let huge = [MAGIC.to_vec(), vec![0x12, 0xff, 0xff, 0xff, 0xff, 0x0f]].concat();
        assert!(matches!(decode(&huge), Err(ProtoError::Malformed(_))));
        let long = [MAGIC.to_vec(), vec![0x08], vec![0xff; 10], vec![0x01]].concat();
        assert!(matches!(decode(&long), Err(ProtoError::Malformed(_))));
        let group = [MAGIC.to_vec(), vec![0x0b]].concat();
        assert!(matches!(decode(&group), Err(ProtoError::Malformed(_))));
        // Known field with the wrong wire type; invalid UTF-8; bad time.
        let wrong = envelope("v1", "ConfigMap", &vi(1, 7));
        assert!(matches!(decode(&wrong), Err(ProtoError::Malformed(_))));
        let bad_utf8 = envelope("v1", "ConfigMap", &ld(1, &ld(1, &[0xff, 0xfe])));
        assert!(matches!(decode(&bad_utf8), Err(ProtoError::Malformed(_))));
        let bad_time = envelope(
            "v1",
            "ConfigMap",
            &ld(1, &ld(8, &[vi(1, 1), vi(2, 2_000_000_000)].concat())),
        );
        assert!(matches!(decode(&bad_time), Err(ProtoError::Malformed(_))));
        // No kind in the envelope.
        let no_kind = [MAGIC.to_vec(), ld(2, b"")].concat();
        assert!(matches!(decode(&no_kind), Err(ProtoError::Malformed(_))));
        // Pseudo-random garbage after the magic.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..400 {
            let mut body = MAGIC.to_vec();
            for _ in 0..len % 97 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                body.push((x >> 24) as u8);
            }
            let _ = decode(&body);
        }
    }
}
