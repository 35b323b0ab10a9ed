//! `rekon plugin admit PLUGIN.wasm --request review.json`: one review
//! answered by a plugin on the command line, as Kubewarden's `kwctl run`
//! does for a policy, through the webhook server's own code path: the
//! review read with kube's types ([`review::parse`], [`conversion::parse`]),
//! the plugin's `validate`/`mutate`/`convert` called in a fresh sandbox
//! under the host's deadline and memory cap ([`LoadedPlugin::review`]), and
//! the answer built as the server builds it ([`review::respond`], the JSON
//! Patch from the plugin's desired object; [`conversion::answer`]).
//!
//! An AdmissionReview (or a bare AdmissionRequest) goes to the plugin's
//! webhooks whose rules match its resource and operation, in the API
//! server's order: mutating webhooks first, each given the object as the
//! previous one patched it, then validating webhooks on the patched object;
//! the first denial ends it. A ConversionReview goes to `convert`.
//!
//! Exit codes: [`EXIT_ALLOWED`], [`EXIT_DENIED`], [`EXIT_INPUT`],
//! [`EXIT_FAILED`].

pub mod reads;

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation as KubeOperation};
use serde_json::Value;

use crate::admission::matching::rule_matches;
use crate::admission::{conversion, review};
use crate::plugin::{
    AdmissionKind, AdmissionRule, Answer, FailurePolicy, HostReads, LoadOptions, LoadedPlugin,
    NoReads, Operation, PluginRuntime, RuntimeConfig,
};

/// Every webhook called allowed the request (or every object converted).
pub const EXIT_ALLOWED: i32 = 0;
/// A webhook denied the request (or `convert` refused an object).
pub const EXIT_DENIED: i32 = 1;
/// The inputs do not load (plugin, request, settings, objects), or no rule
/// of the plugin matches the request (also clap's usage errors).
pub const EXIT_INPUT: i32 = 2;
/// The plugin's call failed (trap, deadline, memory): the API server would
/// apply the webhook's failure policy.
pub const EXIT_FAILED: i32 = 3;

/// How the answers are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Output {
    /// JSON, as the webhook server answers (default).
    #[default]
    Json,
    /// YAML.
    Yaml,
}

/// `rekon plugin admit PLUGIN.wasm --request FILE`.
#[derive(Debug, clap::Args)]
pub struct AdmitArgs {
    /// The plugin component (`*.wasm`, any language).
    pub plugin: PathBuf,
    /// The review (JSON or YAML): an AdmissionReview v1, a bare
    /// AdmissionRequest, or a ConversionReview v1; `-` reads stdin.
    #[arg(long)]
    pub request: PathBuf,
    /// The plugin's settings (a JSON or YAML file), as `rekon run` gives
    /// them from the Plugin object's `spec.settings`.
    #[arg(long)]
    pub settings: Option<PathBuf>,
    /// Call only the webhook of this rule (validating or mutating), even
    /// if others match.
    #[arg(long)]
    pub rule: Option<String>,
    /// Objects (YAML or JSON files, `List`s too) the plugin reads through
    /// `get`/`list` as the host's caches, in cluster `--cluster`. Without
    /// them every read fails as `not watched`.
    #[arg(long, num_args = 1..)]
    pub objects: Vec<PathBuf>,
    /// The cluster the request comes from.
    #[arg(long, default_value = "main")]
    pub cluster: String,
    /// How the answers are printed.
    #[arg(long, short, value_enum, default_value_t = Output::Json)]
    pub output: Output,
}

/// Why a review was not answered.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    /// An input does not load ([`EXIT_INPUT`]).
    #[error("{0}")]
    Input(String),
    /// The plugin's call failed ([`EXIT_FAILED`]).
    #[error("{0}")]
    Failed(String),
}

impl AdmitError {
    /// The exit code.
    #[must_use]
    pub fn code(&self) -> i32 {
        match self {
            Self::Input(_) => EXIT_INPUT,
            Self::Failed(_) => EXIT_FAILED,
        }
    }
}

/// One webhook call's answer.
#[derive(Debug, Clone)]
pub struct Called {
    /// The webhook's name (`<rule>.<plugin>.rekon.dev`), or `convert`.
    pub webhook: String,
    /// The review JSON the webhook server would send.
    pub review: Value,
    /// Whether it denied (or refused to convert).
    pub denied: bool,
}

/// Runs the command; returns the exit code.
#[must_use]
pub fn run(args: AdmitArgs) -> i32 {
    match admit(&args) {
        Ok(called) => {
            for c in &called {
                eprintln!("{}: {}", c.webhook, summary(&c.review));
                let text = match args.output {
                    Output::Json => serde_json::to_string_pretty(&c.review).unwrap_or_default(),
                    Output::Yaml => format!(
                        "---\n{}",
                        serde_yaml::to_string(&c.review).unwrap_or_default()
                    ),
                };
                println!("{text}");
            }
            if called.iter().any(|c| c.denied) {
                EXIT_DENIED
            } else {
                EXIT_ALLOWED
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            e.code()
        }
    }
}

/// One line for stderr: the verdict, the message, and a patch decoded.
fn summary(review: &Value) -> String {
    use base64::Engine as _;
    let response = &review["response"];
    if let Some(result) = response.get("result") {
        return match result["status"].as_str() {
            Some("Success") => "converted".to_owned(),
            _ => format!("refused: {}", result["message"].as_str().unwrap_or("")),
        };
    }
    if response["allowed"] == false {
        return format!(
            "denied ({}): {}",
            response["status"]["code"],
            response["status"]["message"].as_str().unwrap_or("")
        );
    }
    let patch = response["patch"]
        .as_str()
        .and_then(|p| base64::engine::general_purpose::STANDARD.decode(p).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    match patch {
        Some(p) => format!("allowed, patched: {p}"),
        None => "allowed".to_owned(),
    }
}

/// Answers the review of `args.request`; the calls made, in order.
///
/// # Errors
/// [`AdmitError`]: an input that does not load, no matching rule, a call
/// that failed.
pub fn admit(args: &AdmitArgs) -> Result<Vec<Called>, AdmitError> {
    let input = |m: String| AdmitError::Input(m);
    let body = read_request(&args.request)?;
    let settings = args.settings.as_deref().map(read_settings).transpose()?;
    let mut objects = Vec::new();
    for path in &args.objects {
        objects.extend(
            crate::explore::scenario::read_objects(path).map_err(|e| input(e.to_string()))?,
        );
    }
    let reads: Arc<dyn HostReads> = if args.objects.is_empty() {
        Arc::new(NoReads)
    } else {
        Arc::new(reads::ObjectReads::new(&args.cluster, objects))
    };
    let plugin = load(&args.plugin, settings.as_ref())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| AdmitError::Failed(format!("failed to start a runtime: {e}")))?;
    if body["kind"] == "ConversionReview" {
        if args.rule.is_some() {
            return Err(input(
                "--rule picks an admission webhook; a ConversionReview goes to convert".to_owned(),
            ));
        }
        let bytes = body.to_string();
        let request = conversion::parse(bytes.as_bytes()).map_err(|e| input(e.to_string()))?;
        converts_all(&plugin, &request)?;
        let (json, outcome) = rt.block_on(conversion::answer(
            request,
            plugin.name(),
            Some(&plugin),
            |_| Arc::clone(&reads),
        ));
        return match outcome {
            conversion::Outcome::Failed => Err(AdmitError::Failed(format!(
                "{}; the API server fails the request",
                json["response"]["result"]["message"]
                    .as_str()
                    .unwrap_or("conversion failed")
            ))),
            outcome => Ok(vec![Called {
                webhook: "convert".to_owned(),
                review: json,
                denied: outcome == conversion::Outcome::Refused,
            }]),
        };
    }
    let body = if body["kind"] == "AdmissionReview" {
        body
    } else if body.get("uid").is_some() && body.get("operation").is_some() {
        serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body})
    } else {
        return Err(input(format!(
            "{} is neither an AdmissionReview, an AdmissionRequest (uid, operation, ...) nor a ConversionReview",
            shown(&args.request)
        )));
    };
    let mut request =
        review::parse(body.to_string().as_bytes()).map_err(|e| input(e.to_string()))?;
    let rules = matching(&plugin, &request, args.rule.as_deref())?;
    let mut called = Vec::new();
    for rule in rules {
        let webhook = rekon_rules::admission::webhook_name(&rule.name, plugin.name());
        let answer = rt
            .block_on(plugin.review(
                rule.kind,
                review::to_review(&request, &args.cluster),
                Arc::clone(&reads),
            ))
            .map_err(|e| {
                AdmitError::Failed(format!(
                    "admission by plugin {} failed: {e}; the API server applies the failure policy of {webhook}: {}",
                    plugin.name(),
                    match rule.failure_policy {
                        FailurePolicy::Fail => "Fail (the request is refused)",
                        FailurePolicy::Ignore => "Ignore (the request goes on)",
                    }
                ))
            })?;
        // What the next webhook sees: the object as this one patched it.
        let patched = match &answer {
            Answer::Mutated(m) if m.denied.is_none() => m.object.clone(),
            _ => None,
        };
        let denied = review::verdict_label(&answer) == "denied";
        let json = review::respond(&request, plugin.name(), answer)
            .map_err(|e| AdmitError::Failed(e.to_string()))?;
        called.push(Called {
            webhook,
            review: json,
            denied,
        });
        if denied {
            break;
        }
        if let Some(text) = patched {
            request.object = Some(serde_json::from_str::<DynamicObject>(&text).map_err(|e| {
                AdmitError::Failed(format!("the mutated object is no object: {e}"))
            })?);
        }
    }
    Ok(called)
}

/// Whether `plugin` converts every object of `request` to its desired
/// version (what the API server asks only of the CRD's converter).
///
/// # Errors
/// No conversion declared, or an object it does not convert.
fn converts_all(
    plugin: &LoadedPlugin,
    request: &kube::core::conversion::ConversionRequest,
) -> Result<(), AdmitError> {
    let rules = plugin.conversion_rules();
    let name = plugin.name();
    if rules.is_empty() {
        return Err(AdmitError::Input(format!(
            "plugin {name} converts no CRD (it declares no conversion)"
        )));
    }
    let desired = &request.desired_api_version;
    for o in &request.objects {
        let api_version = o["apiVersion"].as_str().unwrap_or_default();
        let kind = o["kind"].as_str().unwrap_or_default();
        if !rules
            .iter()
            .any(|r| r.covers(api_version, kind) && r.covers(desired, kind))
        {
            return Err(AdmitError::Input(format!(
                "plugin {name} does not convert {kind} from {api_version} to {desired}"
            )));
        }
    }
    Ok(())
}

/// The rules of `plugin` whose webhooks the API server would call for
/// `request` (group and resource, any version as `matchPolicy:
/// Equivalent` does, and operation; `only`: that rule alone), mutating
/// first, each kind in declared order. Match conditions (CEL) are not
/// evaluated: a rule that has them is called, with a note on stderr.
///
/// # Errors
/// No rule matches (naming the request and the rules), or `only` names none.
pub fn matching(
    plugin: &LoadedPlugin,
    request: &AdmissionRequest<DynamicObject>,
    only: Option<&str>,
) -> Result<Vec<AdmissionRule>, AdmitError> {
    let rules = plugin.admission_rules();
    let name = plugin.name();
    if rules.is_empty() {
        return Err(AdmitError::Input(format!(
            "plugin {name} declares no admission rule"
        )));
    }
    if let Some(only) = only
        && !rules.iter().any(|r| r.name == only)
    {
        return Err(AdmitError::Input(format!(
            "plugin {name} has no rule {only:?} (its rules: {})",
            rules.iter().map(describe).collect::<Vec<_>>().join("; ")
        )));
    }
    let resource = match request.sub_resource.as_deref().filter(|s| !s.is_empty()) {
        Some(sub) => format!("{}/{sub}", request.resource.resource),
        None => request.resource.resource.clone(),
    };
    let operation = match request.operation {
        KubeOperation::Create => Operation::Create,
        KubeOperation::Update => Operation::Update,
        KubeOperation::Delete => Operation::Delete,
        KubeOperation::Connect => Operation::Connect,
    };
    let mut found: Vec<AdmissionRule> = rules
        .iter()
        .filter(|r| only.is_none_or(|o| r.name == o))
        .filter(|r| rule_matches(r, &request.resource.group, &resource, operation))
        .cloned()
        .collect();
    if found.is_empty() {
        let group = if request.resource.group.is_empty() {
            String::new()
        } else {
            format!(".{}", request.resource.group)
        };
        return Err(AdmitError::Input(format!(
            "no admission rule of plugin {name} matches {} of {resource}{group} (its rules: {})",
            operation_name(operation),
            rules.iter().map(describe).collect::<Vec<_>>().join("; ")
        )));
    }
    found.sort_by_key(|r| !r.mutating());
    for r in found.iter().filter(|r| !r.match_conditions.is_empty()) {
        eprintln!(
            "note: rule {} has match conditions, not evaluated here: {}",
            r.name,
            r.match_conditions
                .iter()
                .map(|c| c.expression.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(found)
}

fn operation_name(o: Operation) -> &'static str {
    match o {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// `size (validating CREATE, UPDATE of widgets.widgets.rekon.dev)`.
fn describe(r: &AdmissionRule) -> String {
    let kind = match r.kind {
        AdmissionKind::Validate => "validating",
        AdmissionKind::Mutate => "mutating",
    };
    let ops: Vec<&str> = r.operations.iter().copied().map(operation_name).collect();
    let resources: Vec<String> = r
        .resources
        .iter()
        .map(|t| {
            if t.group.is_empty() {
                t.plural.clone()
            } else {
                format!("{}.{}", t.plural, t.group)
            }
        })
        .collect();
    format!(
        "{} ({kind} {} of {})",
        r.name,
        ops.join(", "),
        resources.join(", ")
    )
}

fn shown(path: &Path) -> String {
    if path == Path::new("-") {
        "stdin".to_owned()
    } else {
        path.display().to_string()
    }
}

/// The review as JSON: the file (or stdin) parsed as JSON, or as YAML when
/// it is not JSON and does not look like JSON.
fn read_request(path: &Path) -> Result<Value, AdmitError> {
    let mut text = String::new();
    let read = if path == Path::new("-") {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(path).map(|t| text = t)
    };
    read.map_err(|e| AdmitError::Input(format!("failed to read {}: {e}", shown(path))))?;
    let value = match serde_json::from_str::<Value>(&text) {
        Ok(v) => v,
        Err(e) if text.trim_start().starts_with(['{', '[']) => {
            return Err(AdmitError::Input(format!(
                "{} is not JSON: {e}",
                shown(path)
            )));
        }
        Err(_) => serde_yaml::from_str(&text)
            .map_err(|e| AdmitError::Input(format!("{} is not JSON or YAML: {e}", shown(path))))?,
    };
    if !value.is_object() {
        return Err(AdmitError::Input(format!(
            "{} holds no review (not an object)",
            shown(path)
        )));
    }
    Ok(value)
}

fn read_settings(path: &Path) -> Result<Value, AdmitError> {
    let bad = |m: String| AdmitError::Input(format!("settings {}: {m}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    serde_yaml::from_str(&text).map_err(|e| bad(format!("not JSON or YAML: {e}")))
}

/// The plugin loaded as `rekon run` loads it (the default runtime: its
/// memory cap and call deadline), with `settings`.
fn load(path: &Path, settings: Option<&Value>) -> Result<LoadedPlugin, AdmitError> {
    let bad =
        |m: String| AdmitError::Input(format!("failed to load plugin {}: {m}", path.display()));
    let runtime = PluginRuntime::new(RuntimeConfig {
        pooling: false,
        ..RuntimeConfig::default()
    })
    .map_err(|e| bad(e.to_string()))?;
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    runtime
        .load_bytes_with(
            &bytes,
            &path.display().to_string(),
            &LoadOptions::default().with_settings(settings),
        )
        .map_err(|e| bad(e.to_string()))
}
