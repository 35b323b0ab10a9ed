//! Typed plugin settings: what an operator configures per plugin instance
//! (`spec.settings` of a Plugin object, or `NAME.settings.json` beside a
//! plugin file).
//!
//! A plugin declares its settings type in [`Registration::settings`]
//! (`Registration` = [`crate::Registration`]); the SDK then, at every load,
//! deserializes the settings the host gives into it (absent settings are
//! `Default::default()`), runs [`Settings::validate`], and refuses the load
//! with the reason when either fails, so the host reports `InvalidSettings`
//! with the plugin's own message and keeps the serving version. It hands
//! the type's JSON Schema (from schemars) to the host, which `rekon plugin
//! inspect` prints. A plugin that declares no settings refuses any.
//!
//! Read them with [`Context::settings`](crate::Context::settings) in
//! `reconcile` and `map`, or [`settings`] in `register` (to shape the
//! registration, e.g. a primary selector taken from the settings).
//!
//! ```
//! use rekon_sdk::prelude::*;
//! use rekon_sdk::schemars::JsonSchema;
//! use rekon_sdk::serde::Deserialize;
//!
//! #[derive(Debug, Deserialize, JsonSchema)]
//! #[serde(crate = "rekon_sdk::serde", rename_all = "camelCase", deny_unknown_fields)]
//! #[schemars(crate = "rekon_sdk::schemars")]
//! pub struct StamperSettings {
//!     /// The label to stamp.
//!     pub label: String,
//! }
//!
//! impl Default for StamperSettings {
//!     fn default() -> Self {
//!         Self { label: "example.com/seen".into() }
//!     }
//! }
//!
//! impl Settings for StamperSettings {
//!     fn validate(&self) -> Result<(), String> {
//!         if self.label.is_empty() {
//!             return Err("label must not be empty".into());
//!         }
//!         Ok(())
//!     }
//! }
//! ```

use std::cell::RefCell;
use std::rc::Rc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::error::Error;

/// A plugin's settings type: deserialized from the JSON the operator gave
/// (use `#[serde(deny_unknown_fields)]` to refuse typos), `Default` when
/// none were given, described by its JSON Schema.
pub trait Settings: DeserializeOwned + JsonSchema + Default + 'static {
    /// Checks beyond what the types say (ranges, formats, combinations).
    /// An error refuses the load with this message.
    ///
    /// # Errors
    /// Why the settings are not acceptable.
    fn validate(&self) -> Result<(), String> {
        Ok(())
    }
}

/// A settings type, as a [`Registration`](crate::Registration) carries it.
#[derive(Clone, Copy)]
pub(crate) struct Declared {
    pub(crate) type_name: &'static str,
    pub(crate) schema: fn() -> serde_json::Value,
    pub(crate) check: fn(Option<&str>) -> Result<(), String>,
}

impl std::fmt::Debug for Declared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.type_name)
    }
}

impl PartialEq for Declared {
    fn eq(&self, other: &Self) -> bool {
        self.type_name == other.type_name
    }
}

impl Declared {
    pub(crate) fn of<S: Settings>() -> Self {
        Self {
            type_name: std::any::type_name::<S>(),
            schema: || serde_json::to_value(schemars::schema_for!(S)).unwrap_or_default(),
            check: |text| parse::<S>(text).map(drop),
        }
    }
}

/// Parses settings text as `S` (`None`: the default) and validates it.
pub(crate) fn parse<S: Settings>(text: Option<&str>) -> Result<S, String> {
    let settings = match text {
        None => S::default(),
        Some(text) => serde_json::from_str(text).map_err(|e| e.to_string())?,
    };
    settings.validate()?;
    Ok(settings)
}

/// What `register` checks: settings given to a plugin that declares none
/// are refused; declared ones must parse and validate. The error is the
/// refusal message the host recognises (`invalid settings: …`).
pub(crate) fn check_at_register(
    declared: Option<&Declared>,
    given: Option<&str>,
) -> Result<(), String> {
    match (declared, given) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err(rekon_rules::settings::refusal(
            "this plugin takes no settings (it declares no settings type)",
        )),
        (Some(d), given) => (d.check)(given).map_err(|e| rekon_rules::settings::refusal(&e)),
    }
}

/// Reads the settings of the current call as `S`: during `register` (and
/// any call the SDK or the test kit runs). [`Context::settings`] is the
/// same inside `reconcile` and `map`.
///
/// [`Context::settings`]: crate::Context::settings
///
/// # Errors
/// Settings that do not deserialize as `S` or do not validate (terminal:
/// the same settings fail the same way every time).
pub fn settings<S: Settings>() -> Result<S, Error> {
    let text = CURRENT.with(|c| c.borrow().as_ref().and_then(|b| b.settings()));
    parse::<S>(text.as_deref()).map_err(|e| Error::terminal(rekon_rules::settings::refusal(&e)))
}

/// Where a call's settings come from: the host, or the test kit's world
/// (every context backend is one).
pub(crate) trait SettingsSource {
    /// The settings of this load (JSON), if any were given.
    fn settings(&self) -> Option<String>;
}

thread_local! {
    /// Where the settings of the call in progress come from (set by the
    /// export glue and by the test kit), so that [`settings`] works where
    /// no `Context` is passed (`register`).
    static CURRENT: RefCell<Option<Rc<dyn SettingsSource>>> = const { RefCell::new(None) };
}

/// Runs `f` with `source` giving the current call's settings.
pub(crate) fn with_source<R>(source: Rc<dyn SettingsSource>, f: impl FnOnce() -> R) -> R {
    struct Reset(Option<Rc<dyn SettingsSource>>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let previous = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = previous);
        }
    }
    let previous = CURRENT.with(|c| c.borrow_mut().replace(source));
    let _reset = Reset(previous);
    f()
}
