//! Plugin settings: how a plugin refuses them, and how an instance of a
//! module is named apart from another instance of the same module.
//!
//! The SDKs (Rust here; the TypeScript and Python SDKs carry the same
//! literal, checked by their own tests against `wit/host.wit`'s text) refuse
//! invalid settings from `register` with [`refusal`]; the host recognises it
//! with [`refused_settings`] and reports `InvalidSettings` instead of a
//! generic load failure.

/// The start of a `register` error that refuses the settings.
pub const REFUSAL_PREFIX: &str = "invalid settings: ";

/// The `register` error refusing settings for `reason`.
#[must_use]
pub fn refusal(reason: &str) -> String {
    format!("{REFUSAL_PREFIX}{reason}")
}

/// The plugin's own reason when a `register` error refuses the settings.
#[must_use]
pub fn refused_settings(message: &str) -> Option<&str> {
    message.strip_prefix(REFUSAL_PREFIX)
}

/// The finalizer of instance `instance` of a module whose registration
/// declares `finalizer` (`prefix/name`, or a `name` without a prefix,
/// which Kubernetes accepts too): `prefix/name.instance`, so that two
/// instances of one module never release each other's finalizer. `None`
/// when the result is not a valid qualified name (the name part would
/// exceed 63 characters).
#[must_use]
pub fn instance_finalizer(finalizer: &str, instance: &str) -> Option<String> {
    let (prefix, name) = match finalizer.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, finalizer),
    };
    let name = format!("{name}.{instance}");
    (name.len() <= 63).then(|| match prefix {
        Some(prefix) => format!("{prefix}/{name}"),
        None => name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_recognised_with_the_plugins_reason() {
        let message = refusal("prefix must end with '/'");
        assert_eq!(message, "invalid settings: prefix must end with '/'");
        assert_eq!(refused_settings(&message), Some("prefix must end with '/'"));
        assert_eq!(refused_settings("no registration"), None);
    }

    #[test]
    fn instance_finalizers_stay_qualified_and_apart() {
        assert_eq!(
            instance_finalizer("nodepool.rekon.dev/cleanup", "gpu").as_deref(),
            Some("nodepool.rekon.dev/cleanup.gpu")
        );
        assert_ne!(
            instance_finalizer("a.dev/x", "one"),
            instance_finalizer("a.dev/x", "two")
        );
        assert_eq!(instance_finalizer("a.dev/x", &"y".repeat(62)), None);
        assert_eq!(
            instance_finalizer("unqualified", "y").as_deref(),
            Some("unqualified.y")
        );
    }
}
