//! `POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`: the TokenRequest
//! subresource, as far as a client asking for a short-lived token goes. The real server's
//! checks that a client can trip over are kept (kubernetes
//! `pkg/registry/core/serviceaccount/storage/token.go`, `TokenREST.Create`, and
//! `pkg/apis/authentication/validation`): the ServiceAccount must exist (404), the
//! expiration must be at least 10 minutes (422), and a token bound to a Pod only for a Pod
//! running under that ServiceAccount (400). The token is an opaque string registered as
//! that ServiceAccount's identity (so admission, and a test, can tell who presents it);
//! nothing is signed, and Secret- or Node-bound tokens are not supported (400).

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use crate::error::{ApiError, FieldCause};
use crate::store::Store;
use crate::users::{UserInfo, Users};

/// The shortest lifetime the real server issues (`MinTokenAgeSec`).
const MIN_EXPIRATION_SECONDS: i64 = 600;
/// The lifetime when none is asked for.
const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// What the real server's `--api-audiences` usually is.
const DEFAULT_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// Numbers the tokens handed out, so no two are alike.
static ISSUED: AtomicU64 = AtomicU64::new(0);

/// `(namespace, service account)` when `segments` address the subresource.
pub fn target<'a>(segments: &[&'a str]) -> Option<(&'a str, &'a str)> {
    match segments {
        ["api", "v1", "namespaces", namespace, "serviceaccounts", name, "token"] => Some((namespace, name)),
        _ => None,
    }
}

/// Issues a token for `namespace/name` from the TokenRequest `body`: the TokenRequest with
/// its status filled in.
pub fn create(store: &Store, users: &Users, namespace: &str, name: &str, body: &[u8]) -> Result<Value, ApiError> {
    let mut request: Value = serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let invalid = |field: &str, message: String| ApiError::Invalid {
        kind: "TokenRequest".into(),
        name: String::new(),
        group: "authentication.k8s.io".into(),
        causes: vec![FieldCause::invalid(field, message)],
    };
    let expiration = match &request["spec"]["expirationSeconds"] {
        Value::Null => DEFAULT_EXPIRATION_SECONDS,
        value => value.as_i64().ok_or_else(|| invalid("spec.expirationSeconds", format!("{value}")))?,
    };
    if expiration < MIN_EXPIRATION_SECONDS {
        return Err(invalid("spec.expirationSeconds", "may not specify a duration less than 10 minutes".into()));
    }
    let accounts = store.resolve("", "v1", "serviceaccounts").ok_or(ApiError::NoSuchResource)?;
    store.get(&accounts, namespace, name)?;
    match &request["spec"]["boundObjectRef"] {
        Value::Null => {}
        bound if bound["kind"] == "Pod" => {
            let pods = store.resolve("", "v1", "pods").ok_or(ApiError::NoSuchResource)?;
            let pod = store.get(&pods, namespace, bound["name"].as_str().unwrap_or_default())?;
            let runs_as = pod["spec"]["serviceAccountName"].as_str().unwrap_or("default");
            if runs_as != name {
                return Err(ApiError::BadRequest(format!(
                    "cannot bind token for serviceaccount {name:?} to pod running with different serviceaccount name."
                )));
            }
        }
        bound => {
            return Err(ApiError::BadRequest(format!(
                "cannot bind token to object of type {} (this API server binds tokens to Pods only)",
                bound["kind"]
            )));
        }
    }
    let serial = ISSUED.fetch_add(1, Ordering::Relaxed);
    let token = format!("fake-token.{namespace}.{name}.{serial}");
    users.add(&token, UserInfo::service_account(namespace, name));
    let now = jiff::Timestamp::now();
    let expires = now.checked_add(jiff::SignedDuration::from_secs(expiration)).unwrap_or(now);
    if request["spec"]["audiences"].as_array().is_none_or(Vec::is_empty) {
        request["spec"]["audiences"] = json!([DEFAULT_AUDIENCE]);
    }
    request["spec"]["expirationSeconds"] = json!(expiration);
    request["apiVersion"] = json!("authentication.k8s.io/v1");
    request["kind"] = json!("TokenRequest");
    request["metadata"] = json!({"name": name, "namespace": namespace, "creationTimestamp": crate::store::now()});
    request["status"] = json!({
        "token": token,
        "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    });
    Ok(request)
}
