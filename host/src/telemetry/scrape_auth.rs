//! Who may read `/metrics` when it is secured: controller-runtime's
//! `filters.WithAuthenticationAndAuthorization`. Each scrape's bearer token
//! is authenticated with a `TokenReview` and the user it names is
//! authorized with a `SubjectAccessReview` for `get` on the non-resource
//! URL `/metrics`, both against the primary cluster. Answers (allowed or
//! refused, never a failed review) are cached for [`TTL`] by the token's
//! SHA-256, so a Prometheus scraping every few seconds costs the API server
//! two requests per [`TTL`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

/// How long an answer is reused.
pub const TTL: Duration = Duration::from_secs(10);
/// The most answers kept (expired ones are dropped first, then all).
const CAPACITY: usize = 4096;
/// The path and verb a scrape must be allowed.
const PATH: &str = "/metrics";
const VERB: &str = "get";

/// A review could not be made (the answer is unknown, not "no").
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The TokenReview failed (RBAC: the host needs `create` on
    /// `tokenreviews.authentication.k8s.io`).
    #[error("failed to review the scrape's token: {0}")]
    TokenReview(#[source] kube::Error),
    /// The SubjectAccessReview failed (RBAC: the host needs `create` on
    /// `subjectaccessreviews.authorization.k8s.io`).
    #[error("failed to review whether {user} may get /metrics: {source}")]
    AccessReview {
        /// The user the token named.
        user: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
}

impl ReviewError {
    /// A machine-readable reason.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TokenReview(_) => "TokenReviewFailed",
            Self::AccessReview { .. } => "AccessReviewFailed",
        }
    }
}

/// The answer for one token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// `user` may read `/metrics`.
    Allowed {
        /// Who.
        user: String,
    },
    /// The token authenticates nobody (401).
    Unauthenticated {
        /// The API server's reason, if it gave one.
        reason: String,
    },
    /// `user` may not read `/metrics` (403).
    Forbidden {
        /// Who.
        user: String,
        /// The authorizer's reason, if it gave one.
        reason: String,
    },
}

/// Answers by the token's SHA-256, with when they were given.
type Answers = HashMap<[u8; 32], (Instant, Decision)>;

/// Reviews scrapes against a cluster; cheap to clone.
#[derive(Clone)]
pub struct ScrapeAuth {
    client: kube::Client,
    cache: std::sync::Arc<Mutex<Answers>>,
}

impl std::fmt::Debug for ScrapeAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScrapeAuth")
            .field("cached", &self.cache.lock().len())
            .finish_non_exhaustive()
    }
}

impl ScrapeAuth {
    /// Reviews with `client` (the primary cluster's).
    #[must_use]
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            cache: std::sync::Arc::default(),
        }
    }

    /// Whether the holder of `token` may read `/metrics`.
    ///
    /// # Errors
    /// When a review could not be made (not cached: the next scrape asks
    /// again).
    pub async fn decide(&self, token: &str) -> Result<Decision, ReviewError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some((at, decision)) = self.cache.lock().get(&key)
            && at.elapsed() < TTL
        {
            return Ok(decision.clone());
        }
        let decision = self.review(token).await?;
        let mut cache = self.cache.lock();
        if cache.len() >= CAPACITY {
            cache.retain(|_, (at, _)| at.elapsed() < TTL);
            if cache.len() >= CAPACITY {
                cache.clear();
            }
        }
        cache.insert(key, (Instant::now(), decision.clone()));
        Ok(decision)
    }

    async fn review(&self, token: &str) -> Result<Decision, ReviewError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(ReviewError::TokenReview)?;
        let status = answer.status.unwrap_or_default();
        let user = status.user.unwrap_or_default();
        let Some(name) = user
            .username
            .clone()
            .filter(|_| status.authenticated == Some(true))
        else {
            return Ok(Decision::Unauthenticated {
                reason: status.error.unwrap_or_default(),
            });
        };
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(name.clone()),
                uid: user.uid,
                groups: user.groups,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(PATH.to_owned()),
                    verb: Some(VERB.to_owned()),
                }),
                resource_attributes: None,
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await
            .map_err(|source| ReviewError::AccessReview {
                user: name.clone(),
                source,
            })?;
        let status = answer.status.unwrap_or_default();
        Ok(if status.allowed {
            Decision::Allowed { user: name }
        } else {
            Decision::Forbidden {
                user: name,
                reason: status.reason.unwrap_or_default(),
            }
        })
    }
}
