//! The conversion side of a loaded plugin (`wit/conversion.wit`): the CRDs
//! it converts, asked once at load (after `register`, checked against the
//! CRDs its registration declares) and kept with that load, and its
//! `convert` calls, each in a fresh sandbox under the plugin's memory cap,
//! instance slot and fair share, with its call deadline (at most the API
//! server's 30 s for a conversion webhook). A call reads through the
//! [`HostReads`] it is given and cannot write.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::admission::AdmitError;
use super::bindings::ConversionPluginPre;
use super::call::call;
use super::error::LoadError;
use super::host_reads::{HostReads, NoReads};
use super::runtime::RuntimeInner;
use super::sandbox::CallState;
use crate::action::{Registration, timestamp};

/// The API server's timeout for a conversion webhook call (conversion
/// webhooks have no `timeoutSeconds`; the webhook client's default).
pub const CONVERSION_TIMEOUT: Duration = Duration::from_secs(30);

/// One CRD a plugin converts (`conversion-rule` in `wit/conversion.wit`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConversionRule {
    /// The CRD's group.
    pub group: String,
    /// Its kind.
    pub kind: String,
    /// Its plural (the CRD is `<plural>.<group>`).
    pub plural: String,
    /// The versions converted (exactly the CRD's).
    pub versions: Vec<String>,
}

impl ConversionRule {
    /// The CRD's name, `<plural>.<group>`.
    #[must_use]
    pub fn crd_name(&self) -> String {
        rekon_rules::conversion::crd_name(&self.plural, &self.group)
    }

    /// Whether it converts objects of `api_version` (`group/version`) and `kind`.
    #[must_use]
    pub fn covers(&self, api_version: &str, kind: &str) -> bool {
        api_version.split_once('/').is_some_and(|(group, version)| {
            group == self.group && kind == self.kind && self.versions.iter().any(|v| v == version)
        })
    }
}

/// What a loaded plugin converts: its linked conversion export and the
/// CRDs it declares (never empty: a plugin declaring none has no
/// `PluginConversion`).
pub(crate) struct PluginConversion {
    pre: ConversionPluginPre<CallState>,
    rules: Vec<ConversionRule>,
}

/// The name, kind and version names of a CRD manifest (JSON); `None` for
/// a text that is no CRD (the registration's own check refuses those).
fn crd_shape(text: &str) -> Option<(String, String, Vec<String>)> {
    let crd: serde_json::Value = serde_json::from_str(text).ok()?;
    let name = crd.pointer("/metadata/name")?.as_str()?.to_owned();
    let kind = crd.pointer("/spec/names/kind")?.as_str()?.to_owned();
    let versions = crd
        .pointer("/spec/versions")?
        .as_array()?
        .iter()
        .filter_map(|v| v.get("name")?.as_str().map(str::to_owned))
        .collect();
    Some((name, kind, versions))
}

fn check(rules: &[ConversionRule], registration: &Registration) -> Result<(), String> {
    let crds: Vec<_> = registration
        .crds
        .iter()
        .filter_map(|c| crd_shape(c))
        .collect();
    let crd_versions: Vec<Vec<&str>> = crds
        .iter()
        .map(|(_, _, v)| v.iter().map(String::as_str).collect())
        .collect();
    let crd_shapes: Vec<_> = crds
        .iter()
        .zip(&crd_versions)
        .map(
            |((name, kind, _), versions)| rekon_rules::conversion::CrdShape {
                name,
                kind,
                versions,
            },
        )
        .collect();
    let versions: Vec<Vec<&str>> = rules
        .iter()
        .map(|r| r.versions.iter().map(String::as_str).collect())
        .collect();
    let shapes: Vec<_> = rules
        .iter()
        .zip(&versions)
        .map(|(r, versions)| rekon_rules::conversion::ConversionShape {
            group: &r.group,
            kind: &r.kind,
            plural: &r.plural,
            versions,
        })
        .collect();
    rekon_rules::conversion::check_conversions(&shapes, &crd_shapes)
}

impl PluginConversion {
    /// Calls `conversions` (under the `register` deadline, reading
    /// nothing) and checks them against the CRDs of `registration`: `None`
    /// when there is no conversion export or it declares no CRD.
    pub(crate) fn load(
        runtime: &RuntimeInner,
        pre: Option<ConversionPluginPre<CallState>>,
        name: &Arc<str>,
        origin: &str,
        registration: &Registration,
        settings: Option<Arc<str>>,
    ) -> Result<Option<Self>, LoadError> {
        let Some(pre) = pre else {
            return Ok(None);
        };
        let rules: Vec<ConversionRule> = call(
            runtime,
            &pre,
            name,
            "conversions",
            runtime.config.register_timeout,
            Arc::new(NoReads),
            timestamp(SystemTime::UNIX_EPOCH),
            settings,
            |store, plugin| plugin.rekon_plugin_conversion().call_conversions(store),
        )
        .map_err(|source| LoadError::Register {
            origin: origin.to_owned(),
            source: Box::new(source),
        })?
        .into_iter()
        .map(|r| ConversionRule {
            group: r.group,
            kind: r.kind,
            plural: r.plural,
            versions: r.versions,
        })
        .collect();
        check(&rules, registration).map_err(|reason| LoadError::InvalidRegistration {
            origin: origin.to_owned(),
            reason,
        })?;
        Ok((!rules.is_empty()).then_some(Self { pre, rules }))
    }
}

impl super::LoadedPlugin {
    /// The CRDs this load converts (empty when it converts none).
    #[must_use]
    pub fn conversion_rules(&self) -> &[ConversionRule] {
        self.conversion().map_or(&[], |c| &c.rules)
    }

    /// Calls `convert` on `object` (JSON) for `desired_api_version` in a
    /// fresh sandbox on a blocking thread, reading `reads`: the converted
    /// object's JSON, or the plugin's refusal (`Ok(Err(message))`).
    ///
    /// # Errors
    /// No conversion declared, backed off, or the call failed.
    pub async fn convert(
        &self,
        object: String,
        desired_api_version: String,
        reads: Arc<dyn HostReads>,
    ) -> Result<Result<String, String>, AdmitError> {
        let this = self.clone();
        self.blocking("convert", move || {
            Ok(this.convert_blocking(&object, &desired_api_version, reads))
        })
        .await?
    }

    /// [`Self::convert`] on the current thread.
    ///
    /// # Errors
    /// As [`Self::convert`].
    pub fn convert_blocking(
        &self,
        object: &str,
        desired_api_version: &str,
        reads: Arc<dyn HostReads>,
    ) -> Result<Result<String, String>, AdmitError> {
        let conversion = self.conversion().ok_or_else(|| AdmitError::NoWebhook {
            plugin: self.name().to_owned(),
            kind: "conversion",
        })?;
        // The same fair share as its reconciles and admission calls.
        self.admit().map_err(|wait| AdmitError::BackedOff {
            plugin: self.name().to_owned(),
            wait,
        })?;
        let timeout = self.call_timeout().min(CONVERSION_TIMEOUT);
        Ok(self.call_fresh_with(
            &conversion.pre,
            "convert",
            timeout,
            reads,
            |store, plugin| {
                plugin
                    .rekon_plugin_conversion()
                    .call_convert(store, object, desired_api_version)
            },
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_covers_its_group_kind_and_versions() {
        let rule = ConversionRule {
            group: "widgets.rekon.dev".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            versions: vec!["v1alpha1".into(), "v1".into()],
        };
        assert_eq!(rule.crd_name(), "widgets.widgets.rekon.dev");
        assert!(rule.covers("widgets.rekon.dev/v1alpha1", "Widget"));
        assert!(!rule.covers("widgets.rekon.dev/v2", "Widget"));
        assert!(!rule.covers("widgets.rekon.dev/v1", "Gadget"));
        assert!(!rule.covers("other.dev/v1", "Widget"));
        assert!(!rule.covers("v1", "Widget"));
    }

    #[test]
    fn crds_are_read_from_the_registrations_manifests() {
        let crd = serde_json::json!({
            "metadata": {"name": "widgets.widgets.rekon.dev"},
            "spec": {"names": {"kind": "Widget"},
                     "versions": [{"name": "v1alpha1"}, {"name": "v1"}]}
        });
        assert_eq!(
            crd_shape(&crd.to_string()),
            Some((
                "widgets.widgets.rekon.dev".to_owned(),
                "Widget".to_owned(),
                vec!["v1alpha1".to_owned(), "v1".to_owned()]
            ))
        );
        assert_eq!(crd_shape("not json"), None);
    }
}
