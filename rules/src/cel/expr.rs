//! The CEL environment every admission expression runs in: the `cel`
//! crate's standard library plus kube-cel's Kubernetes libraries (lists,
//! sets, strings, regex, quantity, url, ip, semver, format), JSON to CEL
//! values, and the error wording of cel-go where the server shows it.
//!
//! The JSON to CEL conversion is written here rather than taken from
//! kube-cel's `values` module because the server types values by their
//! schema: a `type: number` field holding `1` is a double in cel-go
//! (kube-cel would give an int, and `self.ratio > 0.5` would then fail
//! with no matching overload), and the root of a custom resource exposes
//! only `metadata.name` and `metadata.generateName`.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use kube_cel::KubeCelExt;
use kube_cel::cel::objects::{Key, Map};
use kube_cel::cel::{Context, ExecutionError, Program, Value as Cel};
use serde_json::Value;

/// The root context (standard functions and kube-cel's), built once; every
/// evaluation binds its variables in an inner scope of it.
pub fn base() -> &'static Context<'static> {
    static BASE: OnceLock<Context<'static>> = OnceLock::new();
    BASE.get_or_init(|| Context::default().with_all())
}

/// Parses an expression; the error is the parser's text.
pub fn compile(src: &str) -> Result<Program, String> {
    Program::compile(src).map_err(|e| e.to_string().trim().to_string())
}

/// Whether a program reads the variable `name`.
pub fn uses(program: &Program, name: &str) -> bool {
    program.references().has_variable(name)
}

/// Whether an expression reads the `authorizer` variable, which kube-cel
/// does not provide (no authorization library): the policies and webhook
/// match conditions using it fail closed (see their callers).
pub fn uses_authorizer(src: &str) -> bool {
    compile(src).is_ok_and(|p| uses(&p, "authorizer"))
}

/// The error an expression reading `authorizer` evaluates to in kube-sim.
pub const NO_AUTHORIZER: &str =
    "kube-sim does not evaluate the authorizer variable (kube-cel has no authorization library)";

/// An error of an evaluation in cel-go's words (the server puts them in
/// its messages): `no such key: x`, `division by zero`, `no such overload`.
pub fn error_text(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::DivisionByZero(_) => "division by zero".into(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".into(),
        ExecutionError::NoSuchOverload => "no such overload".into(),
        ExecutionError::UndeclaredReference(r) => format!("undeclared reference to '{r}'"),
        other => other.to_string(),
    }
}

/// A JSON value as CEL sees it, typed by its structural schema (if any):
/// `number` → double, `date-time` → timestamp, `duration` → duration;
/// object keys are escaped as the server escapes property names.
pub fn to_cel(v: &Value, schema: Option<&Value>) -> Cel {
    let ty = schema.and_then(|s| s.get("type")).and_then(Value::as_str);
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) if ty == Some("number") => Cel::Float(n.as_f64().unwrap_or_default()),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Cel::Int(i),
            (None, Some(u)) => Cel::UInt(u),
            _ => Cel::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => {
            let format = schema.and_then(|s| s.get("format")).and_then(Value::as_str);
            match format {
                Some("date-time") => match chrono::DateTime::parse_from_rfc3339(s) {
                    Ok(t) => Cel::Timestamp(t),
                    Err(_) => Cel::String(Arc::new(s.clone())),
                },
                Some("duration") => match go_duration(s) {
                    Some(d) => Cel::Duration(d),
                    None => Cel::String(Arc::new(s.clone())),
                },
                _ => Cel::String(Arc::new(s.clone())),
            }
        }
        Value::Array(a) => {
            let items = schema.and_then(|s| s.get("items"));
            Cel::List(Arc::new(a.iter().map(|x| to_cel(x, items)).collect()))
        }
        Value::Object(o) => {
            let props = schema
                .and_then(|s| s.get("properties"))
                .and_then(Value::as_object);
            let additional = schema
                .and_then(|s| s.get("additionalProperties"))
                .filter(|a| a.is_object());
            let mut map = HashMap::with_capacity(o.len());
            for (k, x) in o {
                let sub = props.and_then(|p| p.get(k)).or(additional);
                let key = if props.is_some() {
                    escape(k)
                } else {
                    k.clone()
                };
                map.insert(Key::String(Arc::new(key)), to_cel(x, sub));
            }
            Cel::Map(Map { map: Arc::new(map) })
        }
    }
}

/// CEL names for a structural schema's property names, as the server
/// escapes them (`model.Escape`): a reserved word `w` is `__w__`; `_`,
/// `.`, `-` and `/` become `__`, `__dot__`, `__dash__`, `__slash__`.
/// (kube-cel has the same rule but keeps it private.)
fn escape(name: &str) -> String {
    const RESERVED: &[&str] = &[
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ];
    if RESERVED.contains(&name) {
        return format!("__{name}__");
    }
    if !name.contains(['_', '.', '-', '/']) {
        return name.to_string();
    }
    let mut out = String::with_capacity(name.len() * 2);
    for c in name.chars() {
        match c {
            '_' => out.push_str("__"),
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
    }
    out
}

/// Go's `time.ParseDuration` for the units Kubernetes schemas use.
fn go_duration(s: &str) -> Option<chrono::Duration> {
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Some(chrono::Duration::zero());
    }
    if rest.is_empty() {
        return None;
    }
    let mut total_ns: f64 = 0.0;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total_ns += n * scale;
        rest = &rest[unit_end..];
    }
    let ns = total_ns as i64;
    Some(chrono::Duration::nanoseconds(if neg { -ns } else { ns }))
}

/// Runs `program` in an inner scope of [`base`] with `vars` bound.
pub fn run(program: &Program, vars: &[(&str, &Cel)]) -> Result<Cel, ExecutionError> {
    let mut ctx = base().new_inner_scope();
    for (name, v) in vars {
        ctx.add_variable_from_value(*name, (*v).clone());
    }
    program.execute(&ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_authorizer_variable_is_found_wherever_it_is_read() {
        assert!(uses_authorizer(
            "authorizer.group('apps').resource('deployments').check('create').allowed()"
        ));
        assert!(uses_authorizer(
            "object.x == 1 || authorizer.path('/x').check('get').allowed()"
        ));
        assert!(!uses_authorizer("object.authorizer == 1"));
        assert!(!uses_authorizer("'authorizer' == object.x"));
    }

    #[test]
    fn kubernetes_libraries_and_schema_typed_values() {
        let p = compile("self.ratio > 0.5 && quantity(self.mem).isGreaterThan(quantity('1Gi')) && self.tags.all(t, t.startsWith('a'))").unwrap();
        let schema = json!({"type": "object", "properties": {
            "ratio": {"type": "number"}, "mem": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}}}});
        let v = to_cel(
            &json!({"ratio": 1, "mem": "2Gi", "tags": ["ab", "ac"]}),
            Some(&schema),
        );
        assert_eq!(run(&p, &[("self", &v)]).unwrap(), Cel::Bool(true));
        let missing = compile("self.nope > 1").unwrap();
        let e = run(&missing, &[("self", &v)]).unwrap_err();
        assert_eq!(error_text(&e), "no such key: nope");
        assert_eq!(go_duration("1h30m"), Some(chrono::Duration::minutes(90)));
    }
}
