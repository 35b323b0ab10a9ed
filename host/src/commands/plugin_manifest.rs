//! `rekon plugin manifest FILE --module REF`: a ready `Plugin` object for a
//! component, its declared permissions filled in as the grant, for an
//! operator to review before applying.

use std::path::Path;

use kube::api::ObjectMeta;

use super::inspect::PermissionView;
use crate::plugin::{LoadError, LoadOptions, PluginRuntime, RuntimeConfig, RuntimeError};
use crate::source::plugin_crd::{GrantedPermission, Plugin, PluginSpec};

/// Why no manifest could be made.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The runtime did not start.
    #[error("failed to start the plugin runtime")]
    Runtime(#[from] RuntimeError),
    /// The component did not load.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Encoding failed.
    #[error("failed to encode the Plugin manifest: {0}")]
    Encode(String),
}

/// What goes into a manifest besides the module.
#[derive(Debug, Clone, Default)]
pub struct ManifestOptions<'a> {
    /// Pin the manifest digest (`sha256:…`).
    pub digest: Option<&'a str>,
    /// `spec.settings`: the component is loaded with them first, so
    /// settings it refuses never reach a manifest.
    pub settings: Option<&'a serde_json::Value>,
    /// The Plugin object's name (an instance of the module under another
    /// name); default: the name the component registers.
    pub name: Option<&'a str>,
}

/// The Plugin object (YAML) that serves the component in `file` from
/// `module` (an OCI reference), pinned to `digest` when given, with the
/// given settings and name, granting exactly the permissions the
/// component declares (with those settings).
///
/// # Errors
/// The component does not load (or refuses the settings), or encoding
/// fails.
pub fn plugin_manifest(
    file: &Path,
    module: &str,
    options: &ManifestOptions<'_>,
) -> Result<String, ManifestError> {
    let runtime = PluginRuntime::new(RuntimeConfig {
        pooling: false,
        ..RuntimeConfig::default()
    })?;
    let bytes = std::fs::read(file).map_err(|source| LoadError::Read {
        path: file.to_path_buf(),
        source,
    })?;
    let plugin = runtime.load_bytes_with(
        &bytes,
        &file.display().to_string(),
        &LoadOptions::default()
            .with_settings(options.settings)
            .with_instance(options.name),
    )?;
    let reg = plugin.registration();
    let permissions = reg
        .permissions
        .iter()
        .map(|p| {
            serde_json::to_value(PermissionView::from(p))
                .and_then(serde_json::from_value::<GrantedPermission>)
                .map_err(|e| ManifestError::Encode(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let object = Plugin {
        metadata: ObjectMeta {
            name: Some(reg.name.clone()),
            ..ObjectMeta::default()
        },
        spec: PluginSpec {
            module: module.to_owned(),
            digest: options.digest.map(str::to_owned),
            settings: options.settings.filter(|v| !v.is_null()).cloned(),
            permissions,
            ..PluginSpec::default()
        },
        status: None,
    };
    let yaml = serde_yaml::to_string(&object).map_err(|e| ManifestError::Encode(e.to_string()))?;
    Ok(format!(
        "# Plugin {} version {}: spec.permissions is what it declares. Review the grant\n# (narrow it, or refuse the plugin) before applying; a module that declares\n# more than its grant is refused.\n{yaml}",
        reg.name, reg.version
    ))
}

#[cfg(test)]
mod tests {
    use crate::source::plugin_crd::GrantedPermission;

    #[test]
    fn inspect_views_are_grants() {
        use crate::action::{ClusterSet, Permission, Resource, Scope};
        let p = Permission {
            resource: Resource {
                group: "batch".into(),
                version: "v1".into(),
                kind: "Job".into(),
                plural: "jobs".into(),
                scope: Scope::Namespaced,
            },
            verbs: vec!["create".into(), "delete".into()],
            status: true,
            clusters: ClusterSet::Others,
        };
        let view = serde_json::to_value(super::PermissionView::from(&p)).unwrap();
        let grant: GrantedPermission = serde_json::from_value(view).unwrap();
        assert_eq!(grant.to_permission().unwrap(), p);
    }
}
