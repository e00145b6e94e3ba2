//! Admission of CREATE and UPDATE (patches included), in the real server's order: first
//! mutating webhooks, then validating admission policies; of DELETE (of one object),
//! validating admission policies only ([`admit_validating`]), as of a TokenRequest.
//!
//! Mutating: a resource matched by a registered `MutatingWebhookConfiguration` is sent
//! to the webhook as a real `admission.k8s.io/v1` AdmissionReview over HTTPS (trusting
//! the configured `caBundle`), and the JSON patch it returns is applied before the object
//! is stored. As the real server: webhooks run in configuration-name order, then list
//! order; the URL gets `?timeout=<n>s`; `failurePolicy` (default Fail) decides what a call
//! failure means; a denial carries the webhook's message and code. Approximations: only
//! `clientConfig.url` is supported (a `service` reference fails the call, so it follows
//! `failurePolicy`); `reinvocationPolicy` and `matchConditions` are ignored.
//!
//! Validating: the stored `ValidatingAdmissionPolicy`/`ValidatingAdmissionPolicyBinding`
//! objects are evaluated ([`crate::policy`]) on the mutated object; a denial is the
//! request's answer. `ValidatingWebhookConfiguration`s are stored but never called.
//!
//! Both see the request's user ([`crate::users`]): `system:admin` unless the bearer
//! token was registered.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use listwatch::ListOptions;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

use crate::admission_request::{Operation, Request};
use crate::error::ApiError;
use crate::matching;
use crate::policy;
use crate::resources::ResourceType;
use crate::store::Store;

const RESPONSE_LIMIT: usize = 3 * 1024 * 1024;

/// Runs every matching mutating webhook, then every validating admission policy; returns
/// the (possibly mutated) object.
pub async fn admit(store: &Store, mut request: Request<'_>) -> Result<Value, ApiError> {
    let configs = stored(store, "mutatingwebhookconfigurations")?;
    let policies = stored(store, "validatingadmissionpolicies")?;
    if configs.is_empty() && policies.is_empty() {
        return Ok(request.object);
    }
    let namespace_labels = namespace_labels(store, request.rt, request.namespace);
    for config in &configs {
        for webhook in config["webhooks"].as_array().into_iter().flatten() {
            if !matches(webhook, &request, namespace_labels.as_ref()) {
                continue;
            }
            let name = webhook["name"].as_str().unwrap_or("<unnamed>").to_string();
            let fail_closed = webhook["failurePolicy"].as_str() != Some("Ignore");
            match call(webhook, &request).await {
                Ok(Verdict::Allowed(Some(patch))) => {
                    let ops: json_patch::Patch = serde_json::from_slice(&patch).map_err(|e| {
                        ApiError::Internal(format!("admission webhook \"{name}\" returned an invalid JSON patch: {e}"))
                    })?;
                    json_patch::patch(&mut request.object, &ops).map_err(|e| {
                        ApiError::Internal(format!(
                            "admission webhook \"{name}\" returned a patch that does not apply: {e}"
                        ))
                    })?;
                }
                Ok(Verdict::Allowed(None)) => {}
                Ok(Verdict::Denied { code, message }) => {
                    return Err(ApiError::Denied { webhook: name, code, message });
                }
                Err(e) if fail_closed => {
                    return Err(ApiError::Internal(format!("failed calling webhook \"{name}\": {e}")));
                }
                Err(e) => tracing::warn!(webhook = %name, error = %e, "webhook call failed, ignored by failurePolicy"),
            }
        }
    }
    if !policies.is_empty() {
        let bindings = stored(store, "validatingadmissionpolicybindings")?;
        policy::check(&policies, &bindings, &request, namespace_labels.as_ref())
            .map_err(|denial| denied(&request, &denial))?;
    }
    Ok(request.object)
}

/// Evaluates the validating admission policies only: on the DELETE of `old` (a request
/// whose `object` is null), as the real server does before deleting, and on a
/// subresource CREATE no webhook of this repository asks for (a TokenRequest).
pub fn admit_validating(store: &Store, request: &Request<'_>) -> Result<(), ApiError> {
    let policies = stored(store, "validatingadmissionpolicies")?;
    if policies.is_empty() {
        return Ok(());
    }
    let namespace_labels = namespace_labels(store, request.rt, request.namespace);
    let bindings = stored(store, "validatingadmissionpolicybindings")?;
    policy::check(&policies, &bindings, request, namespace_labels.as_ref()).map_err(|denial| denied(request, &denial))
}

/// The stored objects of an `admissionregistration.k8s.io/v1` resource.
fn stored(store: &Store, plural: &str) -> Result<Vec<Value>, ApiError> {
    match store.resolve("admissionregistration.k8s.io", "v1", plural) {
        Some(rt) => Ok(store.list(&rt, &ListOptions::default())?.items),
        None => Ok(Vec::new()),
    }
}

/// A policy's denial as the real server answers it: Forbidden's wording
/// (`nodes "n1" is forbidden: ...`) with the validation's reason and code.
fn denied(request: &Request<'_>, denial: &policy::Denial) -> ApiError {
    let rt = request.rt;
    let name = match request.name {
        "" => request.object["metadata"]["name"].as_str().unwrap_or("Unknown"),
        name => name,
    };
    ApiError::PolicyDenied {
        resource: rt.qualified_plural(),
        name: name.to_string(),
        group: rt.group.clone(),
        reason: denial.reason,
        code: denial.code(),
        message: denial.text(),
    }
}

fn namespace_labels(store: &Store, rt: &ResourceType, namespace: &str) -> Option<Value> {
    if !rt.namespaced {
        return None;
    }
    let namespaces = store.resolve("", "v1", "namespaces")?;
    store.get(&namespaces, "", namespace).ok().map(|ns| ns["metadata"]["labels"].clone())
}

/// Whether a webhook's rules and selectors select this request.
fn matches(webhook: &Value, request: &Request<'_>, namespace_labels: Option<&Value>) -> bool {
    webhook["rules"].as_array().is_some_and(|rules| rules.iter().any(|rule| matching::rule_matches(rule, request)))
        && matching::selectors_match(
            &webhook["objectSelector"],
            &webhook["namespaceSelector"],
            request,
            namespace_labels,
        )
}

enum Verdict {
    /// Allowed, with the JSON patch to apply, if any.
    Allowed(Option<Vec<u8>>),
    Denied {
        code: u16,
        message: String,
    },
}

#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("{0}")]
    Config(String),
    #[error("Post {url:?}: {reason}")]
    Transport { url: String, reason: String },
    #[error("Post {0:?}: context deadline exceeded")]
    Timeout(String),
    #[error("received invalid webhook response: {0}")]
    BadResponse(String),
}

async fn call(webhook: &Value, request: &Request<'_>) -> Result<Verdict, CallError> {
    let client_config = &webhook["clientConfig"];
    let Some(url) = client_config["url"].as_str() else {
        return Err(CallError::Config("only clientConfig.url is supported by this server".into()));
    };
    let timeout = Duration::from_secs(webhook["timeoutSeconds"].as_u64().unwrap_or(10).clamp(1, 30));
    let separator = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{separator}timeout={}s", timeout.as_secs());
    let uid = format!("{:016x}-{}", rand_u64(), request.name);
    let rt = request.rt;
    let gvk = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let gvr = json!({"group": rt.group, "version": rt.version, "resource": rt.plural});
    let mut review_request = json!({
        "uid": uid,
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": request.name,
        "operation": request.operation.as_str(),
        "userInfo": request.user.to_json(),
        "object": request.object,
        "oldObject": request.old.cloned().unwrap_or(Value::Null),
        "dryRun": false,
        "options": {"apiVersion": "meta.k8s.io/v1",
                    "kind": if request.operation == Operation::Create { "CreateOptions" } else { "UpdateOptions" }},
    });
    if rt.namespaced {
        review_request["namespace"] = json!(request.namespace);
    }
    if let Some(subresource) = request.subresource {
        review_request["subResource"] = json!(subresource);
        review_request["requestSubResource"] = json!(subresource);
    }
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": review_request});
    let ca_bundle = match client_config["caBundle"].as_str() {
        Some(b64) => BASE64.decode(b64).map_err(|e| CallError::Config(format!("caBundle is not base64: {e}")))?,
        None => Vec::new(),
    };
    let body = tokio::time::timeout(timeout, post(&url, &ca_bundle, review.to_string()))
        .await
        .map_err(|_| CallError::Timeout(url.clone()))??;
    let reply: Value = serde_json::from_slice(&body).map_err(|e| CallError::BadResponse(e.to_string()))?;
    let response = &reply["response"];
    if response["uid"].as_str() != Some(uid.as_str()) {
        return Err(CallError::BadResponse(format!("expected response.uid={uid:?}, got {:?}", response["uid"])));
    }
    if response["allowed"].as_bool() != Some(true) {
        let status = &response["status"];
        return Ok(Verdict::Denied {
            code: status["code"].as_u64().and_then(|c| u16::try_from(c).ok()).filter(|c| *c >= 400).unwrap_or(400),
            message: status["message"].as_str().unwrap_or_default().to_string(),
        });
    }
    match (response["patchType"].as_str(), response["patch"].as_str()) {
        (_, None) => Ok(Verdict::Allowed(None)),
        (Some("JSONPatch"), Some(patch)) => {
            BASE64.decode(patch).map(|p| Verdict::Allowed(Some(p))).map_err(|e| CallError::BadResponse(e.to_string()))
        }
        (other, Some(_)) => Err(CallError::BadResponse(format!("unsupported patchType {other:?}"))),
    }
}

/// One HTTPS POST over a fresh connection, trusting only `ca_bundle_pem`.
async fn post(url: &str, ca_bundle_pem: &[u8], body: String) -> Result<Bytes, CallError> {
    let transport = |reason: String| CallError::Transport { url: url.to_string(), reason };
    let uri: http::Uri = url.parse().map_err(|e| CallError::Config(format!("invalid webhook url: {e}")))?;
    if uri.scheme_str() != Some("https") {
        return Err(CallError::Config(format!("webhook url must be https: {url}")));
    }
    let host = uri.host().ok_or_else(|| CallError::Config("webhook url has no host".into()))?.to_string();
    let port = uri.port_u16().unwrap_or(443);
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_bundle_pem) {
        let cert = cert.map_err(|e| CallError::Config(format!("caBundle: {e}")))?;
        roots.add(cert).map_err(|e| CallError::Config(format!("caBundle: {e}")))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| CallError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let host_for_sni = host.trim_start_matches('[').trim_end_matches(']').to_string();
    let server_name = ServerName::try_from(host_for_sni).map_err(|e| CallError::Config(format!("server name: {e}")))?;
    let tcp = tokio::net::TcpStream::connect((host.trim_start_matches('[').trim_end_matches(']'), port))
        .await
        .map_err(|e| transport(e.to_string()))?;
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(server_name, tcp)
        .await
        .map_err(|e| transport(format!("tls: {e}")))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| transport(e.to_string()))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    let request = http::Request::post(path)
        .header(http::header::HOST, format!("{host}:{port}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| CallError::Config(e.to_string()))?;
    let response = sender.send_request(request).await.map_err(|e| transport(e.to_string()))?;
    let status = response.status();
    let bytes = Limited::new(response.into_body(), RESPONSE_LIMIT)
        .collect()
        .await
        .map_err(|e| transport(format!("reading response: {e}")))?
        .to_bytes();
    if !status.is_success() {
        return Err(CallError::BadResponse(format!("HTTP {status}: {}", String::from_utf8_lossy(&bytes))));
    }
    Ok(bytes)
}

/// Request uids only need to be unique per server; no RNG dependency for that.
fn rand_u64() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    nanos ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}
