//! Mutating admission webhooks over real HTTPS with a self-signed CA (rcgen): patches
//! applied, rules and selectors honoured, denials, failurePolicy Ignore vs Fail,
//! timeouts and untrusted certificates.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::*;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// What the webhook saw: (path, query, operation, subResource, had oldObject).
type Seen = Arc<Mutex<Vec<(String, String, String, String, bool)>>>;

struct Pki {
    ca_pem: String,
    server: Arc<rustls::ServerConfig>,
}

fn pki() -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "test webhook CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let server_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.subject_alt_names.push(rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let cert = params.signed_by(&server_key, &ca).unwrap();
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .unwrap();
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Pki { ca_pem: ca.pem(), server: Arc::new(server) }
}

async fn review(
    State(seen): State<Seen>,
    Path(mode): Path<String>,
    RawQuery(query): RawQuery,
    Json(review): Json<Value>,
) -> Json<Value> {
    let request = &review["request"];
    seen.lock().unwrap().push((
        mode.clone(),
        query.unwrap_or_default(),
        request["operation"].as_str().unwrap_or_default().to_string(),
        request["subResource"].as_str().unwrap_or_default().to_string(),
        !request["oldObject"].is_null(),
    ));
    let uid = request["uid"].clone();
    let response = match mode.as_str() {
        "deny" => json!({"uid": uid, "allowed": false, "status": {"code": 403, "message": "no thanks"}}),
        "slow" => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            json!({"uid": uid, "allowed": true})
        }
        "wrong-uid" => json!({"uid": "someone-else", "allowed": true}),
        _ => {
            let mut ops = Vec::new();
            if request["object"]["metadata"]["labels"].is_null() {
                ops.push(json!({"op": "add", "path": "/metadata/labels", "value": {}}));
            }
            ops.push(json!({"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}));
            let patch = BASE64.encode(serde_json::to_vec(&ops).unwrap());
            json!({"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch})
        }
    };
    Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}))
}

async fn webhook_server(tls: Arc<rustls::ServerConfig>) -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let app = Router::new().route("/{mode}", post(review)).with_state(seen.clone());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let config = axum_server::tls_rustls::RustlsConfig::from_config(tls);
    tokio::spawn(axum_server::from_tcp_rustls(listener, config).unwrap().serve(app.into_make_service()));
    (addr, seen)
}

async fn register(client: &Client, name: &str, webhook: Value) {
    let config: MutatingWebhookConfiguration =
        serde_json::from_value(json!({"metadata": {"name": name}, "webhooks": [webhook]})).unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone()).create(&PostParams::default(), &config).await.unwrap();
}

fn webhook(name: &str, url: String, ca_pem: &str, resources: &[&str], extra: Value) -> Value {
    let mut hook = json!({
        "name": name,
        "clientConfig": {"url": url, "caBundle": BASE64.encode(ca_pem)},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": resources}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        hook[k] = v.clone();
    }
    hook
}

/// A fake apiserver with one webhook `<mode>.example.com` registered for `resources`,
/// served by a fresh HTTPS webhook server answering in `mode`.
async fn with_webhook(mode: &str, resources: &[&str], extra: Value) -> (fake_apiserver::FakeApiServer, Client, Seen) {
    let pki = pki();
    let (addr, seen) = webhook_server(pki.server.clone()).await;
    let (server, client) = server().await;
    let hook = webhook(&format!("{mode}.example.com"), format!("https://{addr}/{mode}"), &pki.ca_pem, resources, extra);
    register(&client, mode, hook).await;
    (server, client, seen)
}

#[tokio::test]
async fn patches_are_applied_on_create_and_update_for_matching_objects_only() {
    let selector = json!({"objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}});
    let (_server, client, seen) = with_webhook("mutate", &["configmaps"], selector).await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = maps.create(&PostParams::default(), &config_map("a", &[])).await.unwrap();
    assert_eq!(created.labels().get("mutated").map(String::as_str), Some("yes"));
    let patched = maps.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v"}}))).await.unwrap();
    assert_eq!(patched.labels().get("mutated").map(String::as_str), Some("yes"));
    assert_eq!(patched.data.unwrap()["k"], "v");

    let mut skipped = config_map("b", &[]);
    skipped.metadata.labels = Some([("skip".to_string(), "1".to_string())].into());
    let untouched = maps.create(&PostParams::default(), &skipped).await.unwrap();
    assert_eq!(untouched.labels().get("mutated"), None, "objectSelector excludes it");
    let secrets: Api<Secret> = Api::namespaced(client, "default");
    let secret = secrets
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap())
        .await
        .unwrap();
    assert_eq!(secret.labels().get("mutated"), None, "rules name configmaps only");

    let calls = seen.lock().unwrap().clone();
    assert_eq!(
        calls,
        vec![
            ("mutate".into(), "timeout=5s".into(), "CREATE".into(), String::new(), false),
            ("mutate".into(), "timeout=5s".into(), "UPDATE".into(), String::new(), true),
        ]
    );
}

#[tokio::test]
async fn denials_carry_the_webhook_message_and_code() {
    let (_server, client, _) = with_webhook("deny", &["configmaps"], json!({})).await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    match maps.create(&PostParams::default(), &config_map("a", &[])).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
            assert_eq!(status.message, "admission webhook \"deny.example.com\" denied the request: no thanks");
        }
        other => panic!("expected a denial, got {other:?}"),
    }
    assert_eq!(status_of(maps.get("a").await), (404, "NotFound".into()), "nothing stored");
}

#[tokio::test]
async fn failure_policy_decides_on_unreachable_slow_untrusted_or_broken_webhooks() {
    let pki = pki();
    let (addr, _) = webhook_server(pki.server.clone()).await;
    let other_ca = rcgen::CertifiedIssuer::self_signed(
        {
            let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            p
        },
        rcgen::KeyPair::generate().unwrap(),
    )
    .unwrap()
    .pem();
    let closed = std::net::SocketAddr::from(([127, 0, 0, 1], edgegrid_testing::free_port()));
    let cases = [
        ("unreachable", format!("https://{closed}/mutate"), pki.ca_pem.clone(), 5, "failed calling webhook"),
        ("slow", format!("https://{addr}/slow"), pki.ca_pem.clone(), 1, "context deadline exceeded"),
        ("untrusted", format!("https://{addr}/mutate"), other_ca, 5, "tls"),
        ("wrong-uid", format!("https://{addr}/wrong-uid"), pki.ca_pem.clone(), 5, "invalid webhook response"),
    ];
    for (case, url, ca, timeout, message) in cases {
        for policy in ["Fail", "Ignore"] {
            let (_server, client) = server().await;
            let extra = json!({"failurePolicy": policy, "timeoutSeconds": timeout});
            register(&client, case, webhook(&format!("{case}.example.com"), url.clone(), &ca, &["configmaps"], extra))
                .await;
            let maps: Api<ConfigMap> = Api::namespaced(client, "default");
            let result = maps.create(&PostParams::default(), &config_map("a", &[])).await;
            match (policy, result) {
                ("Ignore", Ok(created)) => assert_eq!(created.labels().get("mutated"), None, "{case}: unmutated"),
                ("Fail", Err(kube::Error::Api(status))) => {
                    assert_eq!((status.code, status.reason.as_str()), (500, "InternalError"), "{case}");
                    assert!(status.message.contains(message), "{case}: {}", status.message);
                    assert!(status.message.contains(&format!("\"{case}.example.com\"")), "{case}: names the webhook");
                }
                (policy, other) => panic!("{case} with {policy}: {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn status_subresource_rules() {
    let (_server, client, seen) = with_webhook("mutate", &["nodes/status"], json!({})).await;
    let nodes: Api<Node> = Api::all(client);
    let node = nodes
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap())
        .await
        .unwrap();
    assert_eq!(node.labels().get("mutated"), None, "nodes (main resource) are not selected");
    nodes
        .patch_status("n1", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Running"}})))
        .await
        .unwrap();
    assert_eq!(
        seen.lock().unwrap().clone(),
        vec![("mutate".into(), "timeout=5s".into(), "UPDATE".into(), "status".into(), true)]
    );
}
