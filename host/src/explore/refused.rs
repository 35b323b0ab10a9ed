//! Refused inputs: a generated step whose write the API server refuses
//! (422 Invalid, 403 Forbidden — a CRD's transition rule such as
//! `self == oldSelf`, a value its schema does not allow) is an input the
//! system does not accept. It is not a finding and not something the
//! plugin is expected to reach: the step is left out of the scenario (with
//! the settle that follows it), the reference runs again without it, and
//! the report and the written scenario say "refused by the API server:
//! <message>". Every run of the campaign and the fault-free oracles' inputs
//! then agree on what was applied.

use std::collections::BTreeMap;

use super::scenario::{Scenario, Step};

/// What [`leave_out`] did.
#[derive(Debug, Default)]
pub struct LeftOut {
    /// Steps removed (the refused ones and the settles that followed them).
    pub removed: usize,
    /// One line per refused step: what it was, and the API server's answer.
    pub described: Vec<String>,
}

/// Removes the `refused` steps (index → the API server's message) from
/// `scenario` and their notes, each with the settle right after it when
/// the step before it is a settle too (or it is the first): a generated
/// change is an apply and its settle.
pub fn leave_out(
    scenario: &mut Scenario,
    notes: &mut Vec<String>,
    refused: &BTreeMap<usize, String>,
) -> LeftOut {
    let mut out = LeftOut::default();
    let mut drop = vec![false; scenario.steps.len()];
    for (&i, message) in refused {
        let Some(step) = scenario.steps.get(i) else {
            continue;
        };
        drop[i] = true;
        let note = notes.get(i).filter(|n| !n.is_empty());
        out.described.push(format!(
            "{}{}: refused by the API server: {message}",
            step.label(),
            note.map(|n| format!(" ({n})")).unwrap_or_default()
        ));
        let settled_before = i == 0 || matches!(scenario.steps[i - 1], Step::Settle);
        if settled_before && matches!(scenario.steps.get(i + 1), Some(Step::Settle)) {
            drop[i + 1] = true;
        }
    }
    let mut i = 0;
    scenario.steps.retain(|_| {
        i += 1;
        !drop[i - 1]
    });
    let mut i = 0;
    notes.retain(|_| {
        i += 1;
        !drop.get(i - 1).copied().unwrap_or(false)
    });
    out.removed = drop.iter().filter(|d| **d).count();
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn apply(image: &str) -> Step {
        Step::Apply {
            cluster: "main".into(),
            objects: vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "default"}, "data": {"image": image}})],
        }
    }

    #[test]
    fn a_refused_change_goes_with_its_settle_and_its_note() {
        let mut scenario = Scenario {
            path: std::path::PathBuf::new(),
            clusters: vec!["main".into()],
            crds: Vec::new(),
            steps: vec![
                apply("a"),
                Step::Settle,
                apply("b"),
                Step::Settle,
                apply("c"),
                Step::Settle,
            ],
        };
        let mut notes: Vec<String> = ["create", "", "change: b", "", "change: c", ""]
            .map(str::to_owned)
            .to_vec();
        let refused = BTreeMap::from([(2, "spec is immutable".to_owned())]);
        let left = leave_out(&mut scenario, &mut notes, &refused);
        assert_eq!(left.removed, 2);
        assert_eq!(scenario.steps.len(), 4);
        assert_eq!(notes, ["create", "", "change: c", ""]);
        let Step::Apply { objects, .. } = &scenario.steps[2] else {
            panic!("{:?}", scenario.steps)
        };
        assert_eq!(objects[0]["data"]["image"], "c");
        assert_eq!(left.described.len(), 1);
        let line = &left.described[0];
        assert!(line.contains("(change: b)"), "{line}");
        assert!(
            line.ends_with("refused by the API server: spec is immutable"),
            "{line}"
        );
    }

    #[test]
    fn a_settle_that_also_settles_an_earlier_step_stays() {
        let mut scenario = Scenario {
            path: std::path::PathBuf::new(),
            clusters: vec!["main".into()],
            crds: Vec::new(),
            steps: vec![apply("a"), apply("b"), Step::Settle],
        };
        let mut notes = vec![String::new(); 3];
        let refused = BTreeMap::from([(1, "no".to_owned())]);
        let left = leave_out(&mut scenario, &mut notes, &refused);
        assert_eq!(left.removed, 1);
        assert!(matches!(
            scenario.steps[..],
            [Step::Apply { .. }, Step::Settle]
        ));
        assert_eq!(notes.len(), 2);
    }
}
