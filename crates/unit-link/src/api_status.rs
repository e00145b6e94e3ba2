//! The `Status` answers both of the wrapper's servers give (the node's API for kube-proxy,
//! in `grid-wrapper`; the unit listener for followers, `unit_server`), and the
//! clock both of its list/watch logs start from. Here, in the lower of the two crates, so
//! that both answer alike without the link depending on the wrapper.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A `Status` object as the answer, with its code.
pub fn status_response(code: u16, status: &serde_json::Value) -> Response {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, [(header::CONTENT_TYPE, "application/json")], status.to_string()).into_response()
}

/// How long a client should wait before asking again what is not served yet.
const RETRY_AFTER_SECONDS: u64 = 1;

/// 503 with `Retry-After` (client-go and kube-rs retry), never an empty list: an empty
/// answer would make the client drop everything it had.
pub fn not_serving(message: &str) -> Response {
    let details = json!({"retryAfterSeconds": RETRY_AFTER_SECONDS});
    let mut response = status_response(503, &listwatch::status(503, "ServiceUnavailable", message, Some(details)));
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
    response
}

/// The first resourceVersion of a log: above anything an earlier process issued (one per
/// microsecond of uptime would be needed to catch up), so a client resuming across a
/// restart gets 410 and relists instead of a "too large resource version".
pub fn first_resource_version() -> u64 {
    let micros = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_micros();
    u64::try_from(micros).unwrap_or(u64::MAX / 2)
}
