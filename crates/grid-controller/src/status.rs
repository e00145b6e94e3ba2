//! What a grid's status says, derived from what one reconcile found and did, and which
//! Events announce a change of it. Pure.
//!
//! Conditions follow Kubernetes conventions: `Applied` means every generated object
//! exists, is this grid's and matches the spec; `Ready` means applied AND every unit's
//! workload is available (for a ServiceGrid: applied). Transition times move only when a
//! status flips, and Events are emitted on changes, not on every resync, so a grid in
//! steady state causes no writes.

use std::collections::BTreeMap;

use edgegrid_core::crd::{
    ConditionStatus, GridCondition, GridConditionType, ServiceGridStatus, UnitWorkloadState, WorkloadGridStatus,
    set_condition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::plan::{SkipCause, SkippedUnit};

/// Something that kept a generated object from matching the grid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// `NameConflict`, `ApplyFailed`, `DeleteFailed`, `Terminating`.
    pub reason: &'static str,
    pub message: String,
}

/// What a reconcile of a workload grid found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Findings {
    /// Units whose workload is this grid's and applied, with the workload's state.
    pub states: BTreeMap<String, UnitWorkloadState>,
    /// Unit values that got no workload, with why.
    pub skipped: Vec<SkippedUnit>,
    pub problems: Vec<Problem>,
}

/// What a reconcile concluded.
#[derive(Clone, Debug, PartialEq)]
pub enum Conclusion {
    /// The grid could not be decoded or planned; nothing was written for it.
    Blocked {
        reason: &'static str,
        message: String,
    },
    Reconciled(Findings),
}

fn condition(
    type_: GridConditionType,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> GridCondition {
    GridCondition {
        type_,
        status: if ok { ConditionStatus::True } else { ConditionStatus::False },
        reason: reason.into(),
        message,
        last_transition_time: now.clone(),
        observed_generation: generation,
    }
}

/// The reason of `TemplatesResolved=False` (and of `Ready=False` for it), and of its Event.
pub const TEMPLATE_NOT_FOUND: &str = "TemplateNotFound";

/// A unit's workload is available when every desired replica is updated, ready and available.
pub fn is_available(state: &UnitWorkloadState) -> bool {
    state.updated_replicas >= state.replicas
        && state.ready_replicas >= state.replicas
        && state.available_replicas >= state.replicas
}

/// `Applied` for these problems: the first problem's reason, every message.
fn applied(problems: &[Problem], generation: Option<i64>, now: &Time) -> GridCondition {
    match problems.first() {
        None => condition(GridConditionType::Applied, true, "AllApplied", String::new(), generation, now),
        Some(first) => {
            let message = problems.iter().map(|p| p.message.as_str()).collect::<Vec<_>>().join("; ");
            condition(GridConditionType::Applied, false, first.reason, message, generation, now)
        }
    }
}

pub fn workload_grid_status(
    previous: Option<&WorkloadGridStatus>,
    outcome: &Conclusion,
    generation: Option<i64>,
    now: &Time,
) -> WorkloadGridStatus {
    let mut status = previous.cloned().unwrap_or_default();
    status.observed_generation = generation;
    let findings = match outcome {
        Conclusion::Blocked { reason, message } => {
            for type_ in [GridConditionType::Applied, GridConditionType::Ready] {
                set_condition(
                    &mut status.conditions,
                    condition(type_, false, reason, message.clone(), generation, now),
                );
            }
            return status;
        }
        Conclusion::Reconciled(findings) => findings,
    };
    status.states = findings.states.clone();
    status.units = findings.states.len() as i32;
    status.ready_units = findings.states.values().filter(|s| is_available(s)).count() as i32;
    status.workloads = findings.states.values().map(|s| s.workload.clone()).collect();
    status.workloads.sort();

    let skipped = |cause: SkipCause| {
        let units: Vec<String> =
            findings.skipped.iter().filter(|s| s.cause == cause).map(|s| format!("{}: {}", s.unit, s.reason)).collect();
        (units.is_empty(), units.join("; "))
    };
    let (names_ok, bad_names) = skipped(SkipCause::InvalidName);
    let names_reason = if names_ok { "AllUnitsValid" } else { "UnitsSkipped" };
    set_condition(
        &mut status.conditions,
        condition(GridConditionType::UnitNamesValid, names_ok, names_reason, bad_names, generation, now),
    );
    let (templates_ok, without_template) = skipped(SkipCause::NoTemplate);
    let templates_reason = if templates_ok { "AllTemplatesResolved" } else { TEMPLATE_NOT_FOUND };
    set_condition(
        &mut status.conditions,
        condition(
            GridConditionType::TemplatesResolved,
            templates_ok,
            templates_reason,
            without_template.clone(),
            generation,
            now,
        ),
    );
    let applied = applied(&findings.problems, generation, now);
    let ready = if applied.status != ConditionStatus::True {
        condition(GridConditionType::Ready, false, "NotApplied", applied.message.clone(), generation, now)
    } else if !templates_ok {
        // a unit with nodes and no template has no workload to be ready
        condition(GridConditionType::Ready, false, TEMPLATE_NOT_FOUND, without_template, generation, now)
    } else if findings.states.is_empty() {
        condition(
            GridConditionType::Ready,
            true,
            "NoUnits",
            "no node carries the gridUniqKey label".into(),
            generation,
            now,
        )
    } else {
        let unavailable: Vec<String> = findings
            .states
            .iter()
            .filter(|(_, s)| !is_available(s))
            .map(|(unit, s)| format!("{unit}: {}/{} available", s.available_replicas, s.replicas))
            .collect();
        if unavailable.is_empty() {
            condition(GridConditionType::Ready, true, "AllUnitsAvailable", String::new(), generation, now)
        } else {
            condition(GridConditionType::Ready, false, "UnitsUnavailable", unavailable.join("; "), generation, now)
        }
    };
    set_condition(&mut status.conditions, applied);
    set_condition(&mut status.conditions, ready);
    status
}

/// A ServiceGrid's status: the Service it controls (if any) and Applied = Ready.
pub fn service_grid_status(
    previous: Option<&ServiceGridStatus>,
    outcome: &Conclusion,
    service: Option<String>,
    generation: Option<i64>,
    now: &Time,
) -> ServiceGridStatus {
    let mut status = previous.cloned().unwrap_or_default();
    status.observed_generation = generation;
    let applied = match outcome {
        Conclusion::Blocked { reason, message } => {
            condition(GridConditionType::Applied, false, reason, message.clone(), generation, now)
        }
        Conclusion::Reconciled(findings) => {
            status.service = service;
            applied(&findings.problems, generation, now)
        }
    };
    let ok = applied.status == ConditionStatus::True;
    let reason = if ok { "ServiceApplied".to_string() } else { applied.reason.clone() };
    let ready = condition(GridConditionType::Ready, ok, &reason, applied.message.clone(), generation, now);
    set_condition(&mut status.conditions, applied);
    set_condition(&mut status.conditions, ready);
    status
}

/// An Event announcing a condition change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announcement {
    pub warning: bool,
    pub reason: String,
    pub note: String,
}

/// The Events a status change deserves: a Warning when `Applied` turns False or its
/// reason/message changes while False (e.g. a new `NameConflict`), a Normal `Applied`
/// when it recovers, a Warning `UnitSkipped` when the set of units with invalid names
/// changes, and a Warning `TemplateNotFound` when the set of units without a template (or
/// why) changes. Nothing when the conditions are unchanged, so resyncs stay silent.
pub fn announcements(previous: &[GridCondition], next: &[GridCondition]) -> Vec<Announcement> {
    let find = |conditions: &[GridCondition], type_| conditions.iter().find(|c| c.type_ == type_).cloned();
    let mut out = Vec::new();
    if let Some(now) = find(next, GridConditionType::Applied) {
        let before = find(previous, GridConditionType::Applied);
        let same = before
            .as_ref()
            .is_some_and(|b| b.status == now.status && b.reason == now.reason && b.message == now.message);
        match now.status {
            ConditionStatus::False if !same => {
                out.push(Announcement { warning: true, reason: now.reason.clone(), note: now.message.clone() })
            }
            ConditionStatus::True if before.is_some_and(|b| b.status != ConditionStatus::True) => {
                out.push(Announcement {
                    warning: false,
                    reason: "Applied".into(),
                    note: "every generated object is applied".into(),
                })
            }
            _ => {}
        }
    }
    if let Some(now) = find(next, GridConditionType::UnitNamesValid)
        && now.status == ConditionStatus::False
        && find(previous, GridConditionType::UnitNamesValid).is_none_or(|b| b.message != now.message)
    {
        out.push(Announcement {
            warning: true,
            reason: "UnitSkipped".into(),
            note: format!("units skipped: {}", now.message),
        });
    }
    if let Some(now) = find(next, GridConditionType::TemplatesResolved)
        && now.status == ConditionStatus::False
        && find(previous, GridConditionType::TemplatesResolved).is_none_or(|b| b.message != now.message)
    {
        out.push(Announcement {
            warning: true,
            reason: TEMPLATE_NOT_FOUND.into(),
            note: format!("units without a template get no workload: {}", now.message),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Time {
        Time(jiff::Timestamp::from_second(seconds).expect("valid"))
    }

    fn state(workload: &str, replicas: i32, available: i32) -> UnitWorkloadState {
        UnitWorkloadState {
            workload: workload.into(),
            replicas,
            ready_replicas: available,
            available_replicas: available,
            updated_replicas: replicas,
            ..Default::default()
        }
    }

    fn summary(conditions: &[GridCondition]) -> Vec<(GridConditionType, ConditionStatus, String, String, i64)> {
        conditions
            .iter()
            .map(|c| (c.type_, c.status, c.reason.clone(), c.message.clone(), c.last_transition_time.0.as_second()))
            .collect()
    }

    use ConditionStatus::{False, True};
    use GridConditionType::{Applied, Ready, TemplatesResolved, UnitNamesValid};

    #[test]
    fn ready_only_when_every_unit_is_available() {
        let findings = Findings {
            states: BTreeMap::from([("a".to_string(), state("web-a", 2, 2)), ("b".to_string(), state("web-b", 2, 1))]),
            skipped: vec![],
            problems: vec![],
        };
        let first = workload_grid_status(None, &Conclusion::Reconciled(findings.clone()), Some(3), &at(10));
        assert_eq!((first.units, first.ready_units, first.observed_generation), (2, 1, Some(3)));
        assert_eq!(first.workloads, ["web-a", "web-b"]);
        assert_eq!(
            summary(&first.conditions),
            vec![
                (UnitNamesValid, True, "AllUnitsValid".into(), String::new(), 10),
                (TemplatesResolved, True, "AllTemplatesResolved".into(), String::new(), 10),
                (Applied, True, "AllApplied".into(), String::new(), 10),
                (Ready, False, "UnitsUnavailable".into(), "b: 1/2 available".into(), 10),
            ]
        );
        let mut all = findings;
        all.states.insert("b".into(), state("web-b", 2, 2));
        let second = workload_grid_status(Some(&first), &Conclusion::Reconciled(all), Some(3), &at(20));
        assert_eq!(second.ready_units, 2);
        assert_eq!(
            summary(&second.conditions),
            vec![
                (UnitNamesValid, True, "AllUnitsValid".into(), String::new(), 10),
                (TemplatesResolved, True, "AllTemplatesResolved".into(), String::new(), 10),
                (Applied, True, "AllApplied".into(), String::new(), 10),
                (Ready, True, "AllUnitsAvailable".into(), String::new(), 20),
            ]
        );
        // nothing changed: the identical status (no write, no event)
        let third = workload_grid_status(
            Some(&second),
            &Conclusion::Reconciled(Findings { states: second.states.clone(), ..Default::default() }),
            Some(3),
            &at(30),
        );
        assert_eq!(third, second);
        assert_eq!(announcements(&second.conditions, &third.conditions), vec![]);
    }

    #[test]
    fn problems_and_skips_make_applied_false_and_announce_once() {
        let findings = Findings {
            states: BTreeMap::from([("a".to_string(), state("web-a", 1, 1))]),
            skipped: vec![SkippedUnit {
                unit: "Bad_Unit".into(),
                cause: SkipCause::InvalidName,
                reason: "invalid name".into(),
            }],
            problems: vec![
                Problem {
                    reason: "NameConflict",
                    message: "Deployment default/web-d is controlled by DeploymentGrid/web-unit".into(),
                },
                Problem { reason: "DeleteFailed", message: "deleting Deployment default/web-old: forbidden".into() },
            ],
        };
        let status = workload_grid_status(None, &Conclusion::Reconciled(findings.clone()), Some(1), &at(5));
        let both = "Deployment default/web-d is controlled by DeploymentGrid/web-unit; deleting Deployment default/web-old: forbidden";
        assert_eq!(
            summary(&status.conditions),
            vec![
                (UnitNamesValid, False, "UnitsSkipped".into(), "Bad_Unit: invalid name".into(), 5),
                (TemplatesResolved, True, "AllTemplatesResolved".into(), String::new(), 5),
                (Applied, False, "NameConflict".into(), both.into(), 5),
                (Ready, False, "NotApplied".into(), both.into(), 5),
            ]
        );
        assert_eq!(
            announcements(&[], &status.conditions),
            vec![
                Announcement { warning: true, reason: "NameConflict".into(), note: both.into() },
                Announcement {
                    warning: true,
                    reason: "UnitSkipped".into(),
                    note: "units skipped: Bad_Unit: invalid name".into()
                },
            ]
        );
        let again = workload_grid_status(Some(&status), &Conclusion::Reconciled(findings), Some(1), &at(9));
        assert_eq!(again, status);
        assert_eq!(announcements(&status.conditions, &again.conditions), vec![]);
        // resolved: Normal Applied, Ready follows availability
        let fixed = workload_grid_status(
            Some(&again),
            &Conclusion::Reconciled(Findings { states: again.states.clone(), ..Default::default() }),
            Some(2),
            &at(12),
        );
        assert_eq!(
            announcements(&again.conditions, &fixed.conditions),
            vec![Announcement {
                warning: false,
                reason: "Applied".into(),
                note: "every generated object is applied".into()
            }]
        );
        assert_eq!(summary(&fixed.conditions)[3], (Ready, True, "AllUnitsAvailable".into(), String::new(), 12));
    }

    #[test]
    fn a_blocked_grid_is_not_ready_with_the_reason() {
        let blocked =
            Conclusion::Blocked { reason: "InvalidSpec", message: "spec.template.replicas: invalid type".into() };
        let status = workload_grid_status(None, &blocked, Some(4), &at(1));
        assert_eq!(
            summary(&status.conditions),
            vec![
                (Applied, False, "InvalidSpec".into(), "spec.template.replicas: invalid type".into(), 1),
                (Ready, False, "InvalidSpec".into(), "spec.template.replicas: invalid type".into(), 1),
            ]
        );
        assert_eq!(status.observed_generation, Some(4));
        let service = service_grid_status(None, &blocked, Some("x-svc".into()), Some(4), &at(1));
        assert_eq!(service.service, None, "a blocked grid claims no Service");
        assert_eq!(summary(&service.conditions), summary(&status.conditions));
    }

    #[test]
    fn units_without_a_template_make_templates_resolved_and_ready_false_and_announce_once() {
        let no_template =
            |unit: &str, why: &str| SkippedUnit { unit: unit.into(), cause: SkipCause::NoTemplate, reason: why.into() };
        let findings = Findings {
            states: BTreeMap::from([("a".to_string(), state("web-a", 1, 1))]),
            skipped: vec![
                no_template("b", "its templates entry \"x\" is not in templatePool"),
                SkippedUnit { unit: "B_".into(), cause: SkipCause::InvalidName, reason: "invalid name".into() },
            ],
            problems: vec![],
        };
        let status = workload_grid_status(None, &Conclusion::Reconciled(findings.clone()), Some(2), &at(5));
        let why = "b: its templates entry \"x\" is not in templatePool";
        assert_eq!(
            summary(&status.conditions),
            vec![
                (UnitNamesValid, False, "UnitsSkipped".into(), "B_: invalid name".into(), 5),
                (TemplatesResolved, False, "TemplateNotFound".into(), why.into(), 5),
                (Applied, True, "AllApplied".into(), String::new(), 5),
                (Ready, False, "TemplateNotFound".into(), why.into(), 5),
            ]
        );
        assert_eq!((status.units, status.workloads.clone()), (1, vec!["web-a".to_string()]));
        assert_eq!(
            announcements(&[], &status.conditions),
            vec![
                Announcement {
                    warning: true,
                    reason: "UnitSkipped".into(),
                    note: "units skipped: B_: invalid name".into()
                },
                Announcement {
                    warning: true,
                    reason: "TemplateNotFound".into(),
                    note: format!("units without a template get no workload: {why}"),
                },
            ]
        );
        let again = workload_grid_status(Some(&status), &Conclusion::Reconciled(findings), Some(2), &at(9));
        assert_eq!(again, status);
        assert_eq!(announcements(&status.conditions, &again.conditions), vec![], "a resync is silent");
        // another unit loses its template: announced again, with both
        let more = Findings {
            states: BTreeMap::from([("a".to_string(), state("web-a", 1, 1))]),
            skipped: vec![
                no_template("b", "its templates entry \"x\" is not in templatePool"),
                no_template("c", "defaultTemplateName \"y\" is not in templatePool"),
            ],
            problems: vec![],
        };
        let worse = workload_grid_status(Some(&again), &Conclusion::Reconciled(more), Some(3), &at(12));
        let both = format!("{why}; c: defaultTemplateName \"y\" is not in templatePool");
        assert_eq!(
            summary(&worse.conditions)[1],
            (TemplatesResolved, False, "TemplateNotFound".into(), both.clone(), 5)
        );
        assert_eq!(
            announcements(&again.conditions, &worse.conditions),
            vec![Announcement {
                warning: true,
                reason: "TemplateNotFound".into(),
                note: format!("units without a template get no workload: {both}"),
            }]
        );
        // resolved: True, and Ready follows availability
        let fixed = workload_grid_status(
            Some(&worse),
            &Conclusion::Reconciled(Findings { states: worse.states.clone(), ..Default::default() }),
            Some(4),
            &at(20),
        );
        assert_eq!(
            summary(&fixed.conditions)[1],
            (TemplatesResolved, True, "AllTemplatesResolved".into(), String::new(), 20)
        );
        assert_eq!(summary(&fixed.conditions)[3], (Ready, True, "AllUnitsAvailable".into(), String::new(), 20));
    }

    #[test]
    fn no_units_is_ready() {
        let status = workload_grid_status(None, &Conclusion::Reconciled(Findings::default()), None, &at(1));
        assert_eq!(
            summary(&status.conditions)[3],
            (Ready, True, "NoUnits".into(), "no node carries the gridUniqKey label".into(), 1)
        );
    }

    #[test]
    fn service_grid_ready_means_applied() {
        let ok = service_grid_status(
            None,
            &Conclusion::Reconciled(Findings::default()),
            Some("web-svc".into()),
            Some(1),
            &at(1),
        );
        assert_eq!(ok.service.as_deref(), Some("web-svc"));
        assert_eq!(
            summary(&ok.conditions),
            vec![
                (Applied, True, "AllApplied".into(), String::new(), 1),
                (Ready, True, "ServiceApplied".into(), String::new(), 1)
            ]
        );
        let conflict = Findings {
            problems: vec![Problem {
                reason: "NameConflict",
                message: "Service default/db-svc is not controlled by this grid".into(),
            }],
            ..Default::default()
        };
        let bad = service_grid_status(Some(&ok), &Conclusion::Reconciled(conflict), None, Some(1), &at(2));
        assert_eq!(bad.service, None);
        assert_eq!(bad.conditions[1].reason, "NameConflict");
        assert_eq!(bad.conditions[1].status, False);
    }
}
