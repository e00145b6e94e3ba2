//! The daemon's own routes on `--bind-address` (next to the runtime's `/healthz`,
//! `/readyz` and `/metrics`): `POST /exchange` takes peers' sealed frames, `GET /verdicts`
//! serves the local view as core's [`LocalVerdicts`](edgegrid_core::health::LocalVerdicts).
//!
//! Exchange answers: `204` for accepted results (and answers, and requests this node
//! declines), `200` with a sealed answer frame for a probe request it ran, `400` for a
//! malformed frame, `401` for every other refusal (bad MAC, unknown sender, misdirected,
//! clock skew, replay), the reason in the body and in
//! `edge_health_messages_rejected_total{reason}`.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use edgegrid_core::health::VERDICTS_PATH;

use super::round::{EXCHANGE_PATH, check_peer, read_token};
use super::state::{Daemon, Received, wall_clock};
use crate::message::{MAX_FRAME_BYTES, Rejection};

pub fn router(daemon: Arc<Daemon>) -> Router {
    Router::new()
        .route(EXCHANGE_PATH, post(exchange))
        .route(VERDICTS_PATH, get(verdicts))
        // larger frames reach the verifier, which refuses them as malformed (counted)
        .layer(DefaultBodyLimit::max(MAX_FRAME_BYTES * 2))
        .with_state(daemon)
}

async fn verdicts(State(daemon): State<Arc<Daemon>>) -> Response {
    axum::Json(daemon.view()).into_response()
}

async fn exchange(State(daemon): State<Arc<Daemon>>, frame: Bytes) -> Response {
    match daemon.receive(&frame, wall_clock()) {
        Received::Rejected(rejection) => {
            let status =
                if rejection == Rejection::Malformed { StatusCode::BAD_REQUEST } else { StatusCode::UNAUTHORIZED };
            tracing::debug!(reason = rejection.metric_label(), "message refused");
            (status, rejection.to_string()).into_response()
        }
        Received::Results | Received::Answer { .. } | Received::Declined => StatusCode::NO_CONTENT.into_response(),
        Received::Help { requester, id, target, host } => {
            let token = read_token(&daemon);
            let checks = &daemon.settings().checks;
            let reachable = check_peer(checks, host, token.as_deref(), &daemon).await;
            tracing::debug!(%requester, target_node = %target, reachable, "indirect probe run for a peer");
            let answer = daemon.seal_answer(&requester, id, &target, reachable, wall_clock());
            (StatusCode::OK, [(axum::http::header::CONTENT_TYPE, "application/json")], answer).into_response()
        }
    }
}
