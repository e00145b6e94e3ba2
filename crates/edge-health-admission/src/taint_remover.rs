//! The cloud-side removal of an unreachable NoExecute taint from a node the edge rule
//! protects, for clusters that keep kube-controller-manager's node lifecycle controller.
//!
//! The webhook strips that taint from the controller's Node UPDATEs, but a taint written
//! while no replica could answer (the configuration's failurePolicy is Ignore) stays until
//! some later UPDATE passes through, and meanwhile the taint manager evicts the node's pods.
//! SuperEdge's daemons removed it from the edge; here a cloud component does, so no edge
//! identity needs to write taints.
//!
//! Every period, every cached node carrying the taint is judged by the same rule as the
//! reviews; a protected one is patched, the patch conditional on the resourceVersion it was
//! computed from (a replica that lost the race, or a node changed since, gets a failed
//! test and judges again from the next event). Each removal is an Event on the node and
//! `edge_health_admission_unreachable_taint_removals_total{outcome}`.

use std::sync::Arc;
use std::time::Duration;

use edgegrid_core::admission;
use edgegrid_core::protection::{ProtectionLimit, ProtectionPolicy, Timestamp};
use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::metrics::{Metrics, RemovalLabel};
use crate::nodes::NodeCache;
use crate::review::NodeVerdicts;

/// How the remover judges and how often it looks.
#[derive(Clone, Copy, Debug)]
pub struct RemoverConfig {
    pub period: Duration,
    /// `--max-unreachable-protection`.
    pub default: ProtectionLimit,
    /// `--always-reachable`.
    pub always_reachable: bool,
}

impl RemoverConfig {
    /// The rule's cluster-wide settings, from the flags: the same as the reviews'.
    pub fn protection(&self) -> ProtectionPolicy {
        ProtectionPolicy { default_limit: self.default, always_reachable: self.always_reachable }
    }
}

/// Runs until dropped.
pub async fn run(client: kube::Client, nodes: Arc<NodeCache>, metrics: Arc<Metrics>, config: RemoverConfig) {
    let reporter = Reporter { controller: "edge-health-admission".into(), instance: std::env::var("POD_NAME").ok() };
    let recorder = Recorder::new(client.clone(), reporter);
    let api: Api<Node> = Api::all(client);
    let mut ticker = tokio::time::interval(config.period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if !nodes.synced() {
            continue;
        }
        let now = Timestamp::now();
        let removals = nodes.unreachable_taint_removals(|facts, tainted| {
            let taints = tainted.taints.iter().map(|(k, e)| (k.as_deref(), e.as_deref()));
            admission::taints_patch(taints, facts, now, config.protection())
        });
        for (name, patch) in removals {
            let outcome = match api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch)).await {
                Ok(node) => {
                    tracing::info!(node = %name, "unreachable NoExecute taint removed: its unit's peers see it alive");
                    let event = Event {
                        type_: EventType::Normal,
                        reason: "UnreachableTaintRemoved".into(),
                        note: Some(
                            "Ready=Unknown but its unit's edge-health peers see it alive (not voted unhealthy): \
                             the unreachable NoExecute taint was removed"
                                .into(),
                        ),
                        action: "RemoveTaint".into(),
                        secondary: None,
                    };
                    if let Err(error) = recorder.publish(&event, &node.object_ref(&())).await {
                        tracing::warn!(node = %name, %error, "publishing the event failed");
                    }
                    "removed"
                }
                // the test of the resourceVersion failed (another replica, or a newer node)
                Err(kube::Error::Api(status)) if matches!(status.code, 409 | 422) => "conflict",
                Err(error) => {
                    tracing::warn!(node = %name, %error, "removing the unreachable taint failed; retried next period");
                    "error"
                }
            };
            metrics.unreachable_taint_removals.get_or_create(&RemovalLabel { outcome }).inc();
        }
    }
}
