//! Typed status conditions shared by the grid kinds.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a grid condition reports on.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum GridConditionType {
    /// Every generated object exists, is controlled by this grid and matches its spec.
    /// False names what is in the way: `NameConflict` (an object with a generated name
    /// that another owner controls), `ApplyFailed`, `DeleteFailed`, `InvalidSpec`, ...
    Applied,
    /// Applied, and every unit's workload is available (all replicas updated, ready and
    /// available); for a ServiceGrid, the Service is applied.
    Ready,
    /// Every unit value yields a valid DNS-1123 object name; when False, the message
    /// lists the unit values that were skipped (SuperEdge produced invalid names silently).
    UnitNamesValid,
    /// Workload grids: every unit's template name resolves, to `template` (name `default`
    /// or empty) or to a `templatePool` entry. When False, the message lists the units
    /// left without a workload and why (an absent `template`, a name the pool lacks).
    TemplatesResolved,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GridCondition {
    #[serde(rename = "type")]
    pub type_: GridConditionType,
    pub status: ConditionStatus,
    /// One CamelCase word a machine can switch on.
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    pub last_transition_time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Puts `new` into `conditions`, replacing the condition of the same type. The
/// transition time only moves when the status flips, as Kubernetes conditions do;
/// otherwise `kubectl wait` and alerting would see a "transition" on every reconcile.
/// Returns whether anything visible changed.
pub fn set_condition(conditions: &mut Vec<GridCondition>, new: GridCondition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        None => {
            conditions.push(new);
            true
        }
        Some(existing) => {
            let transition_time = if existing.status == new.status {
                existing.last_transition_time.clone()
            } else {
                new.last_transition_time.clone()
            };
            let updated = GridCondition { last_transition_time: transition_time, ..new };
            if *existing == updated {
                return false;
            }
            *existing = updated;
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).expect("valid timestamp"))
    }

    fn cond(type_: GridConditionType, status: ConditionStatus, reason: &str, t: i64) -> GridCondition {
        GridCondition {
            type_,
            status,
            reason: reason.to_string(),
            message: String::new(),
            last_transition_time: at(t),
            observed_generation: Some(1),
        }
    }

    #[test]
    fn adds_a_missing_condition() {
        let mut conditions = vec![];
        let ready = cond(GridConditionType::Ready, ConditionStatus::True, "Synced", 10);
        assert!(set_condition(&mut conditions, ready.clone()));
        assert_eq!(conditions, vec![ready]);
    }

    #[test]
    fn same_status_keeps_transition_time_but_takes_new_reason() {
        let mut conditions = vec![cond(GridConditionType::Ready, ConditionStatus::True, "Synced", 10)];
        assert!(set_condition(
            &mut conditions,
            cond(GridConditionType::Ready, ConditionStatus::True, "AllUnitsSynced", 20)
        ));
        assert_eq!(conditions, vec![cond(GridConditionType::Ready, ConditionStatus::True, "AllUnitsSynced", 10)]);
    }

    #[test]
    fn identical_condition_is_not_a_change() {
        let mut conditions = vec![cond(GridConditionType::Ready, ConditionStatus::True, "Synced", 10)];
        assert!(!set_condition(&mut conditions, cond(GridConditionType::Ready, ConditionStatus::True, "Synced", 99)));
        assert_eq!(conditions, vec![cond(GridConditionType::Ready, ConditionStatus::True, "Synced", 10)]);
    }

    #[test]
    fn status_flip_moves_transition_time_and_leaves_other_types_alone() {
        let names = cond(GridConditionType::UnitNamesValid, ConditionStatus::True, "AllValid", 5);
        let mut conditions = vec![names.clone(), cond(GridConditionType::Ready, ConditionStatus::True, "Synced", 10)];
        assert!(set_condition(
            &mut conditions,
            cond(GridConditionType::Ready, ConditionStatus::False, "CreateFailed", 30)
        ));
        assert_eq!(conditions, vec![names, cond(GridConditionType::Ready, ConditionStatus::False, "CreateFailed", 30)]);
    }
}
