//! What makes a plugin's conversion declaration valid, what a converted
//! object must keep (as the API server checks a conversion webhook's
//! answer), and the path the host serves a plugin's conversion on. The
//! host and the SDK's test kit (`World::convert`) apply the same checks.

use std::collections::BTreeSet;

/// One CRD a plugin declares it converts, whatever the caller's types.
#[derive(Debug, Clone, Copy)]
pub struct ConversionShape<'a> {
    /// The CRD's group.
    pub group: &'a str,
    /// Its kind.
    pub kind: &'a str,
    /// Its plural.
    pub plural: &'a str,
    /// The versions the plugin converts.
    pub versions: &'a [&'a str],
}

/// One CRD of the registration, as far as conversion cares.
#[derive(Debug, Clone, Copy)]
pub struct CrdShape<'a> {
    /// `metadata.name` (`<plural>.<group>`).
    pub name: &'a str,
    /// `spec.names.kind`.
    pub kind: &'a str,
    /// `spec.versions[].name`.
    pub versions: &'a [&'a str],
}

/// The CRD name a conversion is for: `<plural>.<group>`.
#[must_use]
pub fn crd_name(plural: &str, group: &str) -> String {
    format!("{plural}.{group}")
}

/// The problem of the first conversion that breaks a rule: a CRD the
/// registration does not declare (or of another kind), one declared twice,
/// fewer than two versions, a version repeated, or versions other than
/// exactly the CRD's (the API server converts between any two served
/// versions, so a version the plugin does not know would fail at request
/// time rather than at load).
///
/// # Errors
/// What is wrong, naming the CRD.
pub fn check_conversions(
    conversions: &[ConversionShape<'_>],
    crds: &[CrdShape<'_>],
) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for c in conversions {
        let name = crd_name(c.plural, c.group);
        if c.group.is_empty() || c.plural.is_empty() || c.kind.is_empty() {
            return Err(format!(
                "conversion of {name:?}: group, kind and plural must all be given"
            ));
        }
        if !seen.insert(name.clone()) {
            return Err(format!("conversion of {name}: declared twice"));
        }
        let Some(crd) = crds.iter().find(|d| d.name == name) else {
            return Err(format!(
                "conversion of {name}: the registration declares no CRD {name} (a plugin converts only its own CRDs)"
            ));
        };
        if crd.kind != c.kind {
            return Err(format!(
                "conversion of {name}: kind {} is not the CRD's kind {}",
                c.kind, crd.kind
            ));
        }
        let versions: BTreeSet<&str> = c.versions.iter().copied().collect();
        if versions.len() != c.versions.len() {
            return Err(format!("conversion of {name}: a version is repeated"));
        }
        if versions.len() < 2 {
            return Err(format!(
                "conversion of {name}: converts {} version(s); a conversion needs at least two",
                versions.len()
            ));
        }
        let served: BTreeSet<&str> = crd.versions.iter().copied().collect();
        if versions != served {
            return Err(format!(
                "conversion of {name}: converts versions [{}] but the CRD has versions [{}]; the API server asks a conversion between any two of them",
                join(&versions),
                join(&served)
            ));
        }
    }
    Ok(())
}

fn join(set: &BTreeSet<&str>) -> String {
    set.iter().copied().collect::<Vec<_>>().join(", ")
}

/// What a conversion must keep of an object: the fields the API server
/// compares between the object it sent and the one it got back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Identity<'a> {
    /// `apiVersion`.
    pub api_version: Option<&'a str>,
    /// `kind`.
    pub kind: Option<&'a str>,
    /// `metadata.name`.
    pub name: Option<&'a str>,
    /// `metadata.namespace`.
    pub namespace: Option<&'a str>,
    /// `metadata.uid`.
    pub uid: Option<&'a str>,
}

impl<'a> Identity<'a> {
    /// The identity of an object read through `text`, the string at a JSON
    /// pointer (`/metadata/name`) of the object, if any: the host and the
    /// SDK's test kit read it the same way from their JSON values.
    pub fn read(text: impl Fn(&str) -> Option<&'a str>) -> Self {
        Self {
            api_version: text("/apiVersion"),
            kind: text("/kind"),
            name: text("/metadata/name"),
            namespace: text("/metadata/namespace"),
            uid: text("/metadata/uid"),
        }
    }
}

/// Whether `converted` is a valid conversion of `original` to
/// `desired_api_version`, checked as the API server checks a conversion
/// webhook's objects (`webhook_converter.go`): the desired apiVersion, and
/// the same kind, name, namespace and uid. The message is the API server's
/// wording after `returned invalid object: ` (`must have the same name: w
/// != renamed`).
///
/// # Errors
/// What differs.
pub fn check_converted(
    original: &Identity<'_>,
    converted: &Identity<'_>,
    desired_api_version: &str,
) -> Result<(), String> {
    let text = |v: Option<&str>| v.unwrap_or_default().to_owned();
    if converted.api_version != Some(desired_api_version) {
        return Err(format!(
            "expected apiVersion {desired_api_version:?}, got {:?}",
            text(converted.api_version)
        ));
    }
    for (field, a, b) in [
        ("kind", original.kind, converted.kind),
        ("name", original.name, converted.name),
        ("namespace", original.namespace, converted.namespace),
        ("uid", original.uid, converted.uid),
    ] {
        if a.unwrap_or_default() != b.unwrap_or_default() {
            return Err(format!(
                "must have the same {field}: {} != {}",
                text(a),
                text(b)
            ));
        }
    }
    Ok(())
}

/// The path the host serves a plugin's conversion on (the CRD's
/// `spec.conversion.webhook.clientConfig`).
#[must_use]
pub fn conversion_path(plugin: &str) -> String {
    format!("/convert/{plugin}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CRD: CrdShape<'static> = CrdShape {
        name: "widgets.widgets.rekon.dev",
        kind: "Widget",
        versions: &["v1alpha1", "v1"],
    };

    fn conversion<'a>(plural: &'a str, versions: &'a [&'a str]) -> ConversionShape<'a> {
        ConversionShape {
            group: "widgets.rekon.dev",
            kind: "Widget",
            plural,
            versions,
        }
    }

    #[test]
    fn a_conversion_covers_exactly_the_versions_of_a_declared_crd() {
        assert_eq!(
            check_conversions(&[conversion("widgets", &["v1", "v1alpha1"])], &[CRD]),
            Ok(())
        );
        assert_eq!(check_conversions(&[], &[CRD]), Ok(()));
        let err = |c: ConversionShape<'_>| check_conversions(&[c], &[CRD]).unwrap_err();
        assert!(
            err(conversion("gadgets", &["v1", "v2"]))
                .contains("declares no CRD gadgets.widgets.rekon.dev")
        );
        assert!(err(conversion("widgets", &["v1"])).contains("at least two"));
        assert!(err(conversion("widgets", &["v1", "v1"])).contains("repeated"));
        assert!(
            err(conversion("widgets", &["v1", "v2"]))
                .contains("converts versions [v1, v2] but the CRD has versions [v1, v1alpha1]")
        );
        let gadget = ConversionShape {
            kind: "Gadget",
            ..conversion("widgets", &["v1", "v1alpha1"])
        };
        assert!(err(gadget).contains("kind Gadget is not the CRD's kind Widget"));
        let twice = conversion("widgets", &["v1", "v1alpha1"]);
        assert!(
            check_conversions(&[twice, twice], &[CRD])
                .unwrap_err()
                .contains("declared twice")
        );
    }

    #[test]
    fn a_converted_object_keeps_what_the_api_server_compares() {
        let original = Identity {
            api_version: Some("widgets.rekon.dev/v1alpha1"),
            kind: Some("Widget"),
            name: Some("w"),
            namespace: Some("default"),
            uid: Some("u-1"),
        };
        let converted = Identity {
            api_version: Some("widgets.rekon.dev/v1"),
            ..original
        };
        assert_eq!(
            check_converted(&original, &converted, "widgets.rekon.dev/v1"),
            Ok(())
        );
        assert_eq!(
            check_converted(&original, &original, "widgets.rekon.dev/v1").unwrap_err(),
            "expected apiVersion \"widgets.rekon.dev/v1\", got \"widgets.rekon.dev/v1alpha1\""
        );
        let renamed = Identity {
            name: Some("renamed"),
            ..converted
        };
        assert_eq!(
            check_converted(&original, &renamed, "widgets.rekon.dev/v1").unwrap_err(),
            "must have the same name: w != renamed"
        );
        let no_uid = Identity {
            uid: None,
            ..converted
        };
        assert_eq!(
            check_converted(&original, &no_uid, "widgets.rekon.dev/v1").unwrap_err(),
            "must have the same uid: u-1 != "
        );
        assert_eq!(conversion_path("widgets"), "/convert/widgets");
    }
}
