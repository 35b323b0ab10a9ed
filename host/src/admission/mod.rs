//! The API side of plugins: one HTTPS server answering the AdmissionReviews
//! the API server sends to the webhooks plugins declare (`wit/admission.wit`).
//!
//! `/validate/<plugin>` and `/mutate/<plugin>` call the plugin's current
//! load (the registry's: a new version's admission takes over with its
//! reconcile) in a fresh sandbox, reading the caches through what
//! [`Admitters`] gives, and never writing. A plugin that is unknown or
//! declares no webhook of that kind answers 404; a call that fails (trap,
//! timeout, memory, backed off) answers 500, so that the API server applies
//! the webhook's failure policy.
//!
//! `/convert/<plugin>` answers the ConversionReviews of the CRDs a plugin
//! converts (`wit/conversion.wit`): every object through the plugin's
//! `convert`, checked as the API server checks it; a failure is the
//! review's `Failure` result, which the API server shows to the client.
//!
//! # Layout
//! | module | what |
//! |---|---|
//! | `admitters` | [`Admitters`]: where the server finds plugins and their reads |
//! | [`matching`] | which of a plugin's webhooks the API server calls for a request |
//! | [`conversion`] | a ConversionReview answered by a plugin's `convert`, each object checked |
//! | [`review`] | an AdmissionReview to a plugin's review, its answer to the response |
//! | [`server`] | the HTTPS server, its routes and metrics; its serving certificate |
//! | [`shadow`] | a shadow version's verdicts, beside the serving one's, compared and counted |

mod admitters;
pub mod conversion;
pub mod matching;
pub mod review;
pub mod server;
pub mod shadow;

pub use admitters::Admitters;
pub use server::{WebhookConfig, WebhookServer, webhook_cert};
