//! A ValidatingAdmissionPolicy's checks evaluated as the API server's
//! validating policy plugin evaluates them (`plugin/policy/validating`),
//! for one (policy, binding, param): `matchConditions` (a false one skips
//! the policy; errors, with no false, fail it under `failurePolicy: Fail`),
//! `variables` in order, then `validations` (`message`,
//! `messageExpression`, `reason`), with the server's wording of every
//! error and denial. kube-sim runs it for the policies stored in it (with
//! matching, params and audit annotations around it); the SDK's test kit
//! for the policies a plugin declares. Moved unchanged from kube-sim.

use std::collections::HashMap;
use std::sync::Arc;

use kube_cel::cel::objects::{Key, Map};
use kube_cel::cel::{Program, Value as Cel};
use serde_json::{Value, json};

use super::expr;

/// One CEL expression of a policy, compiled once.
#[derive(Debug)]
pub struct Expr {
    /// The expression as written.
    pub source: String,
    program: Result<Program, String>,
}

impl Expr {
    /// Compiles `source` (an error is kept and returned by each [`Expr::eval`]).
    #[must_use]
    pub fn new(source: &str) -> Self {
        Self {
            source: source.to_string(),
            program: expr::compile(source),
        }
    }

    /// Evaluates; the error in the server's words.
    ///
    /// # Errors
    /// `compilation error: …` or `expression '…' resulted in error: …`.
    pub fn eval(&self, vars: &[(&str, &Cel)]) -> Result<Cel, String> {
        let p = self
            .program
            .as_ref()
            .map_err(|e| format!("compilation error: {e}"))?;
        if expr::uses(p, "authorizer") {
            return Err(format!(
                "expression '{}' resulted in error: {}",
                self.source,
                expr::NO_AUTHORIZER
            ));
        }
        expr::run(p, vars).map_err(|e| {
            format!(
                "expression '{}' resulted in error: {}",
                self.source,
                expr::error_text(&e)
            )
        })
    }
}

/// One `validations[]` entry.
#[derive(Debug)]
pub struct Validation {
    /// `expression`.
    pub expr: Expr,
    /// `message`.
    pub message: Option<String>,
    /// `messageExpression`.
    pub message_expression: Option<Expr>,
    /// `reason`.
    pub reason: Option<String>,
}

/// One failed validation (or configuration error) of a binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What the client is told after `denied request: `.
    pub message: String,
    /// The validation's reason (`Invalid` unless it names another); `None`
    /// for an error.
    pub reason: Option<String>,
}

/// The checks of one policy.
#[derive(Debug)]
pub struct Checks {
    /// `failurePolicy` is not `Ignore` (errors deny).
    pub fail: bool,
    /// `matchConditions`: (name, expression).
    pub match_conditions: Vec<(String, Expr)>,
    /// `variables`: (name, expression).
    pub variables: Vec<(String, Expr)>,
    /// `validations`.
    pub validations: Vec<Validation>,
}

/// What [`Checks::check`] found.
#[derive(Debug)]
pub struct Checked {
    /// A match condition was false or failed: nothing after it ran.
    pub skipped: bool,
    /// Failed validations (or the conditions' error) by index.
    pub decisions: Vec<(usize, Decision)>,
    /// The `variables` map (for expressions evaluated after, such as
    /// audit annotations).
    pub variables: Cel,
    failed: HashMap<String, String>,
}

impl Checked {
    /// An error of an expression that read a variable that failed, as the
    /// server words it where the variable is used.
    #[must_use]
    pub fn explain(&self, e: String) -> String {
        match self
            .failed
            .iter()
            .find(|(n, _)| e.ends_with(&format!("no such key: {n}")))
        {
            Some((n, cause)) => format!("composited variable \"{n}\" fails to evaluate: {cause}"),
            None => e,
        }
    }
}

impl Checks {
    /// Runs the match conditions, the variables and the validations with
    /// `vars` (`object`, `oldObject`, `request`, `params`,
    /// `namespaceObject`) bound.
    #[must_use]
    pub fn check(&self, vars: &[(&str, &Cel)]) -> Checked {
        let mut out = Checked {
            skipped: false,
            decisions: Vec::new(),
            variables: Cel::Null,
            failed: HashMap::new(),
        };
        let fail = |out: &mut Checked, i: usize, message: String| {
            if self.fail {
                out.decisions.push((
                    i,
                    Decision {
                        message,
                        reason: None,
                    },
                ));
            }
        };
        // matchConditions: any false skips the policy; errors (with no
        // false) fail it.
        let mut errors = Vec::new();
        for (_, m) in &self.match_conditions {
            match m.eval(vars) {
                Ok(Cel::Bool(true)) => {}
                Ok(Cel::Bool(false)) => {
                    out.skipped = true;
                    return out;
                }
                Ok(_) => errors.push(format!(
                    "expression '{}' resulted in error: no such overload",
                    m.source
                )),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            let msg = if errors.len() == 1 {
                errors.remove(0)
            } else {
                format!("[{}]", errors.join(", "))
            };
            fail(&mut out, 0, msg);
            out.skipped = true;
            return out;
        }
        // variables, in order; one may use the ones before it.
        let mut values = HashMap::new();
        for (name, v) in &self.variables {
            let current = Cel::Map(Map {
                map: Arc::new(values.clone()),
            });
            let mut with = vars.to_vec();
            with.push(("variables", &current));
            match v.eval(&with) {
                Ok(x) => {
                    values.insert(Key::String(Arc::new(name.clone())), x);
                }
                Err(e) => {
                    out.failed.insert(name.clone(), e);
                }
            }
        }
        out.variables = Cel::Map(Map {
            map: Arc::new(values),
        });
        let mut vars = vars.to_vec();
        let variables = out.variables.clone();
        vars.push(("variables", &variables));
        for (i, v) in self.validations.iter().enumerate() {
            match v.expr.eval(&vars) {
                Ok(Cel::Bool(true)) => {}
                Ok(Cel::Bool(false)) => {
                    let from_expr = v
                        .message_expression
                        .as_ref()
                        .and_then(|m| match m.eval(&vars) {
                            Ok(Cel::String(s)) => Some(s.trim().to_string()),
                            _ => None,
                        })
                        .filter(|m| !m.is_empty() && !m.contains('\n') && m.len() <= 5 * 1024);
                    let message = from_expr
                        .or_else(|| {
                            v.message
                                .as_ref()
                                .map(|m| m.trim().to_string())
                                .filter(|m| !m.is_empty())
                        })
                        .unwrap_or_else(|| format!("failed expression: {}", v.expr.source.trim()));
                    out.decisions.push((
                        i,
                        Decision {
                            message,
                            reason: Some(v.reason.clone().unwrap_or_else(|| "Invalid".into())),
                        },
                    ));
                }
                Ok(_) => fail(
                    &mut out,
                    i,
                    format!(
                        "expression '{}' resulted in error: no such overload",
                        v.expr.source
                    ),
                ),
                Err(e) => {
                    let e = out.explain(e);
                    fail(&mut out, i, e);
                }
            }
        }
        out
    }
}

/// The message of a denial by `policy` (through `binding`, none for a
/// configuration error of the policy itself).
#[must_use]
pub fn denial_message(policy: &str, binding: Option<&str>, message: &str) -> String {
    match binding {
        Some(b) => {
            format!(
                "ValidatingAdmissionPolicy '{policy}' with binding '{b}' denied request: {message}"
            )
        }
        None => format!("ValidatingAdmissionPolicy '{policy}' denied request: {message}"),
    }
}

/// The HTTP code of a denial with `reason` (`Invalid`, 422, unless the
/// validation names another).
#[must_use]
pub fn denial_code(reason: &str) -> u16 {
    match reason {
        "Unauthorized" => 401,
        "Forbidden" => 403,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

/// What the `request` variable is built from.
#[derive(Debug, Clone)]
pub struct RequestAttributes<'a> {
    /// The request's uid.
    pub uid: &'a str,
    /// Group, version, kind and plural of the resource.
    pub group: &'a str,
    /// See `group`.
    pub version: &'a str,
    /// See `group`.
    pub kind: &'a str,
    /// See `group`.
    pub plural: &'a str,
    /// `status`, `scale`, or empty.
    pub subresource: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// Its namespace (empty for cluster-scoped).
    pub namespace: &'a str,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub operation: &'a str,
    /// `userInfo` (`username`, `uid`, `groups`, `extra`).
    pub user: Value,
    /// `dryRun`.
    pub dry_run: bool,
}

/// The `request` variable: the AdmissionRequest the server builds.
#[must_use]
pub fn request(a: &RequestAttributes<'_>) -> Value {
    let gvk = json!({"group": a.group, "version": a.version, "kind": a.kind});
    let gvr = json!({"group": a.group, "version": a.version, "resource": a.plural});
    let options = match a.operation {
        "CREATE" => json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}),
        "UPDATE" => json!({"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}),
        _ => json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}),
    };
    json!({
        "uid": a.uid,
        "kind": gvk, "resource": gvr, "subResource": a.subresource,
        "requestKind": gvk, "requestResource": gvr, "requestSubResource": a.subresource,
        "name": a.name, "namespace": a.namespace, "operation": a.operation,
        "userInfo": a.user,
        "dryRun": a.dry_run, "options": options,
    })
}
