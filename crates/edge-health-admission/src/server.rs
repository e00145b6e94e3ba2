//! The HTTP side: one POST route per hook, each answering an AdmissionReview.
//!
//! Built as a router tests call without a socket; the binary serves the same router over
//! TLS. Only a body that is not an AdmissionReview (wrong content type, not JSON, no uid)
//! gets an error, 400 with a message; everything else is answered `allowed`.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use edgegrid_core::protection::{ProtectionLimit, ProtectionPolicy, Timestamp};

use crate::metrics::{HookLabel, Metrics, ReviewLabels};
use crate::nodes::NodeCache;
use crate::review::{self, Decision, Hook, Policy};

/// Largest review body accepted (an apiserver sends objects of at most ~3 MiB, twice
/// with oldObject); the runtime's listener enforces it.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

pub struct Webhook {
    pub nodes: Arc<NodeCache>,
    pub metrics: Arc<Metrics>,
    /// The cluster-wide limit of protection (`--max-unreachable-protection`).
    pub max_unreachable_protection: ProtectionLimit,
    /// `--always-reachable`.
    pub always_reachable: bool,
}

impl Webhook {
    /// The rule's cluster-wide settings, from the flags.
    pub fn protection(&self) -> ProtectionPolicy {
        ProtectionPolicy { default_limit: self.max_unreachable_protection, always_reachable: self.always_reachable }
    }
}

pub fn router(webhook: Arc<Webhook>) -> Router {
    let mut router = Router::new();
    for hook in Hook::ALL {
        let webhook = webhook.clone();
        router = router.route(hook.path(), post(move |headers, body| answer(webhook.clone(), hook, headers, body)));
    }
    router
}

fn bad_request(message: String) -> Response {
    (StatusCode::BAD_REQUEST, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], message).into_response()
}

async fn answer(webhook: Arc<Webhook>, hook: Hook, headers: HeaderMap, body: Bytes) -> Response {
    let started = Instant::now();
    let label = HookLabel { hook: hook.name() };
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let malformed = |message: String| {
        webhook.metrics.reviews.get_or_create(&ReviewLabels { hook: hook.name(), outcome: "malformed" }).inc();
        tracing::warn!(hook = hook.name(), %message, "malformed admission request");
        bad_request(message)
    };
    if content_type.split(';').next().map(str::trim) != Some("application/json") {
        return malformed(format!("Content-Type must be application/json, got {content_type:?}"));
    }
    let review = match review::parse(hook, &body) {
        Ok(review) => review,
        Err(error) => return malformed(format!("not an AdmissionReview request: {error}")),
    };
    let policy = Policy { now: Timestamp::now(), protection: webhook.protection() };
    let decision = review::decide(hook, &review, webhook.nodes.as_ref(), &policy);
    match &decision {
        Decision::Skipped(skip) => {
            tracing::warn!(hook = hook.name(), uid = %review.uid, reason = ?skip, "request allowed unchanged")
        }
        Decision::Patch(patch) => {
            webhook.metrics.patch_operations.get_or_create(&label).inc_by(patch.0.len() as u64);
            tracing::info!(hook = hook.name(), uid = %review.uid, operations = patch.0.len(), "patched");
        }
        Decision::Unchanged => {}
    }
    webhook.metrics.reviews.get_or_create(&ReviewLabels { hook: hook.name(), outcome: decision.label() }).inc();
    let body = review::response(&review, &decision).to_string();
    webhook.metrics.review_duration.get_or_create(&label).observe(started.elapsed().as_secs_f64());
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}
