//! Registry credentials: [`RegistryAuth`], read from a docker config JSON.

use std::collections::BTreeMap;

use base64::Engine as _;

/// Credentials for one registry.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum RegistryAuth {
    /// No credentials (public repositories).
    #[default]
    Anonymous,
    /// User name and password (or token used as a password).
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: String,
    },
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Anonymous => f.write_str("Anonymous"),
            Self::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
        }
    }
}

/// A `.dockerconfigjson` that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// Not the JSON of a docker config.
    #[error("invalid docker config json: {0}")]
    Json(#[from] serde_json::Error),
    /// The entry for the registry has an `auth` field that is not base64 of
    /// `user:password`.
    #[error("invalid `auth` of registry `{registry}` in docker config json: {detail}")]
    Auth {
        /// The registry's key in `auths`.
        registry: String,
        /// What is wrong.
        detail: String,
    },
}

#[derive(serde::Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuthEntry>,
}

#[derive(serde::Deserialize)]
struct DockerAuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// `https://index.docker.io/v1/` → `docker.io`; `ghcr.io/` → `ghcr.io`.
fn registry_key(key: &str) -> String {
    let host = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = host.split('/').next().unwrap_or(host).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_string(),
        _ => host,
    }
}

impl RegistryAuth {
    /// The credentials for `registry_host` (`host[:port]` as written in a
    /// reference) in a docker config JSON: the `.dockerconfigjson` of a
    /// `kubernetes.io/dockerconfigjson` Secret, `~/.docker/config.json`, or
    /// a containers `auth.json`. Keys may carry a scheme and path
    /// (`https://index.docker.io/v1/`). No entry for the registry:
    /// [`RegistryAuth::Anonymous`]. Credential helpers (`credsStore`,
    /// `credHelpers`) are not consulted.
    ///
    /// ```
    /// use rekon::source::oci::RegistryAuth;
    /// let json = br#"{"auths":{"ghcr.io":{"auth":"Ym90OnNlY3JldA=="}}}"#;
    /// let auth = RegistryAuth::from_docker_config_json(json, "ghcr.io").unwrap();
    /// assert_eq!(auth, RegistryAuth::Basic { username: "bot".into(), password: "secret".into() });
    /// ```
    pub fn from_docker_config_json(bytes: &[u8], registry_host: &str) -> Result<Self, AuthError> {
        let config: DockerConfig = serde_json::from_slice(bytes)?;
        let wanted = registry_key(registry_host);
        let Some((key, entry)) = config
            .auths
            .iter()
            .find(|(key, _)| registry_key(key) == wanted)
        else {
            return Ok(Self::Anonymous);
        };
        if let (Some(username), Some(password)) = (&entry.username, &entry.password) {
            return Ok(Self::Basic {
                username: username.clone(),
                password: password.clone(),
            });
        }
        let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) else {
            return Ok(Self::Anonymous);
        };
        let invalid = |detail: String| AuthError::Auth {
            registry: key.clone(),
            detail,
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|e| invalid(format!("not base64: {e}")))?;
        let decoded = String::from_utf8(decoded).map_err(|_| invalid("not UTF-8".into()))?;
        let (username, password) = decoded
            .split_once(':')
            .ok_or_else(|| invalid("no `:` between user and password".into()))?;
        Ok(Self::Basic {
            username: username.to_string(),
            password: password.to_string(),
        })
    }

    pub(crate) fn to_oci(&self) -> oci_client::secrets::RegistryAuth {
        match self {
            Self::Anonymous => oci_client::secrets::RegistryAuth::Anonymous,
            Self::Basic { username, password } => {
                oci_client::secrets::RegistryAuth::Basic(username.clone(), password.clone())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_config_json() {
        let json = br#"{"auths":{
            "https://index.docker.io/v1/":{"auth":"dXNlcjpwYTpzcw=="},
            "registry.example.com:5000":{"username":"u","password":"p"},
            "broken.example.com":{"auth":"!!!"}
        }}"#;
        let basic = |u: &str, p: &str| RegistryAuth::Basic {
            username: u.into(),
            password: p.into(),
        };
        // The password may contain `:`; docker.io's legacy key matches.
        assert_eq!(
            RegistryAuth::from_docker_config_json(json, "docker.io").unwrap(),
            basic("user", "pa:ss")
        );
        assert_eq!(
            RegistryAuth::from_docker_config_json(json, "registry.example.com:5000").unwrap(),
            basic("u", "p")
        );
        assert_eq!(
            RegistryAuth::from_docker_config_json(json, "ghcr.io").unwrap(),
            RegistryAuth::Anonymous
        );
        let err = RegistryAuth::from_docker_config_json(json, "broken.example.com").unwrap_err();
        assert!(err.to_string().contains("broken.example.com"), "{err}");
        for broken in [&b"not json"[..], br#"{"auths": 1}"#] {
            assert!(RegistryAuth::from_docker_config_json(broken, "ghcr.io").is_err());
        }
        // Debug never shows the password.
        assert!(!format!("{:?}", basic("u", "hunter2")).contains("hunter2"));
    }
}
