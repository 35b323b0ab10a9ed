//! The widgets validation as a Kubewarden policy: a widget's `spec.size` is
//! at most 10 (HTTP 422 with the message rekon's widgets plugin gives),
//! written with Kubewarden's Rust SDK as its policy template writes one.
//! Only for `tests/bench/admission_peers.py`, which serves it with
//! Kubewarden's policy-server beside rekon serving `tests/plugins/widgets`
//! and sends both the same AdmissionReviews.

use kubewarden_policy_sdk::request::ValidationRequest;
use kubewarden_policy_sdk::settings::Validatable;
use kubewarden_policy_sdk::wapc_guest::prelude::*;
use kubewarden_policy_sdk::{
    accept_request, protocol_version_guest, reject_request, validate_settings,
};
use serde::{Deserialize, Serialize};

/// The largest size a widget may have (rekon's widgets plugin: `MAX_SIZE`).
const MAX_SIZE: i64 = 10;

/// No settings.
#[derive(Serialize, Deserialize, Default, Debug)]
#[serde(default)]
pub struct Settings {}

impl Validatable for Settings {
    fn validate(&self) -> Result<(), String> {
        Ok(())
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn wapc_init() {
    register_function("validate", validate);
    register_function("validate_settings", validate_settings::<Settings>);
    register_function("protocol_version", protocol_version_guest);
}

fn validate(payload: &[u8]) -> CallResult {
    let request: ValidationRequest<Settings> = ValidationRequest::new(payload)?;
    let size = request
        .request
        .object
        .pointer("/spec/size")
        .and_then(serde_json::Value::as_i64)
        .unwrap_or(0);
    if size < 0 {
        return reject_request(
            Some("a widget's size cannot be negative".to_owned()),
            None,
            None,
            None,
        );
    }
    if size > MAX_SIZE {
        return reject_request(
            Some(format!("a widget's size is at most {MAX_SIZE}, not {size}")),
            Some(422),
            None,
            None,
        );
    }
    accept_request()
}
