//! Recorded reconciles as golden tests: `tests/cases/` holds two cases
//! `rekon run --record` wrote on kube-sim for the v1 build (ConfigMap
//! `ok-a`, which gets the version mark, and `calm-a`, left alone). The
//! SDK's test kit replays them natively, reads served from the recording.

use rekon_sdk::prelude::*;
use rekon_sdk::testkit::{RecordedCase, assert_cases};
use rekon_test_chaos::Chaos;

const CASES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cases");

fn case(name: &str) -> RecordedCase {
    RecordedCase::load(format!("{CASES}/{name}.json")).expect("load the recorded case")
}

#[test]
fn recorded_cases_decide_the_same_natively_unless_the_build_differs() {
    assert_eq!(case("ok-a").plugin(), "chaos");
    assert_eq!(case("ok-a").request().name, "ok-a");
    // `calm` does nothing in either build.
    assert!(case("calm-a").replay::<Chaos>().is_identical());
    let ok = case("ok-a").replay::<Chaos>();
    if cfg!(feature = "v2") {
        // The v2 build writes another mark: the recorded v1 decision differs.
        assert!(!ok.is_identical());
        assert_eq!(
            ok.replayed["ok"]["actions"][0]["patch"]["patch"]["metadata"]["annotations"]["chaos.rekon.dev/version"],
            "v2"
        );
    } else {
        assert!(ok.is_identical(), "{ok:?}");
        assert_eq!(assert_cases::<Chaos>(CASES), 2);
    }
}

/// A build that stopped marking ConfigMaps and reads something the
/// recorded one never read.
struct Drifted;

impl Plugin for Drifted {
    type Primary = ConfigMap;

    fn register() -> Result<Registration, Error> {
        Chaos::register()
    }

    fn reconcile(_ctx: &Context, _req: &Request, _: Event<ConfigMap>) -> Result<Outcome, Error> {
        Ok(Outcome::done())
    }

    // Like Chaos, it sees every request (no primary read by the SDK first).
    fn reconcile_request(ctx: &Context, req: &Request) -> Result<Outcome, Error> {
        let _ = ctx.get::<ConfigMap>(&req.cluster, req.namespace.as_deref(), "elsewhere");
        Ok(Outcome::done())
    }
}

use rekon_sdk::k8s_openapi::api::core::v1::ConfigMap;

#[test]
fn a_differing_decision_and_an_unrecorded_read_are_reported() {
    let ok = case("ok-a").replay::<Drifted>();
    assert!(!ok.is_identical());
    assert_eq!(ok.replayed, serde_json::json!({"ok": {"actions": []}}));
    assert_eq!(ok.missing_reads.len(), 1, "{:?}", ok.missing_reads);
    assert!(
        ok.missing_reads[0].contains("elsewhere"),
        "{:?}",
        ok.missing_reads
    );
    let panicked = std::panic::catch_unwind(|| assert_cases::<Drifted>(CASES));
    let message = panicked
        .expect_err("differing cases fail the golden test")
        .downcast::<String>()
        .map(|s| *s)
        .unwrap_or_default();
    assert!(
        message.contains("2 of 2 cases decide differently"),
        "{message}"
    );
}
