//! The cloud-side writer of the `nodeunhealth` verdicts (see
//! `edgegrid_core::unit::verdict`): every period, the verdict the unit members' published
//! views call for is compared with each cached node's annotation, and a node that differs
//! is patched, conditional on the resourceVersion it was judged at (a replica that lost
//! the race, or a node changed since, gets a failed test and is judged again from the next
//! event). With the edge-health daemons at `--verdict-writer=cloud` this is the only
//! writer of the verdicts, so no edge identity writes another node. Each write is an Event
//! on the node and `edge_health_admission_verdict_writes_total{verdict,outcome}`.
//!
//! Nodes whose home unit's members publish no views (daemons at `--verdict-writer=edge`,
//! SuperEdge's) get no verdict here, so nothing is written over their own writers.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use edgegrid_core::unit::local_verdicts::Verdict;

use crate::metrics::{Metrics, VerdictWriteLabels};
use crate::nodes::NodeCache;
use crate::review::NodeVerdicts;

/// Runs until dropped.
pub async fn run(client: kube::Client, nodes: Arc<NodeCache>, metrics: Arc<Metrics>, period: Duration) {
    let reporter = Reporter { controller: "edge-health-admission".into(), instance: std::env::var("POD_NAME").ok() };
    let recorder = Recorder::new(client.clone(), reporter);
    let api: Api<Node> = Api::all(client);
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if !nodes.synced() {
            continue;
        }
        for write in nodes.verdict_patches() {
            let verdict = write.verdict.as_str();
            let outcome = match api.patch(&write.node, &PatchParams::default(), &Patch::<()>::Json(write.patch)).await {
                Ok(node) => {
                    tracing::info!(node = %write.node, verdict, "verdict written from its unit's published views");
                    let (reason, note) = match write.verdict {
                        Verdict::Unhealthy => (
                            "VotedUnhealthy",
                            "at least two of its unit's edge-health members, a strict majority of those counted, hold it unhealthy: nodeunhealth=yes",
                        ),
                        Verdict::Healthy => (
                            "VotedHealthy",
                            "at least two of its unit's edge-health members, a strict majority of those counted, hold it healthy: nodeunhealth removed",
                        ),
                        Verdict::Undecided => (
                            "VoteUndecided",
                            "its unit's edge-health members reach no verdict (a tie, a single voice or none): protection withheld, nodeunhealth=undecided",
                        ),
                    };
                    let event = Event {
                        type_: EventType::Normal,
                        reason: reason.into(),
                        note: Some(note.into()),
                        action: "WriteVerdict".into(),
                        secondary: None,
                    };
                    if let Err(error) = recorder.publish(&event, &node.object_ref(&())).await {
                        tracing::warn!(node = %write.node, %error, "publishing the event failed");
                    }
                    "written"
                }
                Err(kube::Error::Api(status)) if matches!(status.code, 409 | 422) => "conflict",
                Err(error) => {
                    tracing::warn!(node = %write.node, %error, "writing the verdict failed; retried next period");
                    "error"
                }
            };
            metrics.verdict_writes.get_or_create(&VerdictWriteLabels { verdict, outcome }).inc();
        }
    }
}
