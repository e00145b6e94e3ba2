//! The TokenRequest subresource: a token for an existing ServiceAccount, registered as
//! its identity, with the real server's refusals (no such account, too short a lifetime,
//! a Pod running under another account).

mod common;

use common::*;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};

fn request(expiration_seconds: Option<i64>, bound_pod: Option<&str>) -> TokenRequest {
    TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds,
            bound_object_ref: bound_pod.map(|name| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name.into()),
                uid: None,
            }),
        },
        ..TokenRequest::default()
    }
}

#[tokio::test]
async fn tokens_are_issued_for_existing_service_accounts_as_their_identity() {
    let (server, client) = server().await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    assert_eq!(status_of(accounts.create_token_request("checker", &pp, &request(Some(600), None)).await).0, 404);
    let account: ServiceAccount = serde_json::from_value(serde_json::json!({"metadata": {"name": "checker"}})).unwrap();
    accounts.create(&pp, &account).await.unwrap();

    let before = jiff::Timestamp::now();
    let issued = accounts.create_token_request("checker", &pp, &request(Some(600), None)).await.unwrap();
    let status = issued.status.expect("a status");
    let lifetime = status.expiration_timestamp.0.duration_since(before).as_secs();
    assert!((599..=601).contains(&lifetime), "{lifetime}");
    assert_eq!(server.user_of(&status.token).username, "system:serviceaccount:default:checker");
    assert_eq!(issued.spec.audiences, ["https://kubernetes.default.svc.cluster.local"]);
    let again = accounts.create_token_request("checker", &pp, &request(None, None)).await.unwrap();
    assert_ne!(again.status.as_ref().unwrap().token, status.token, "a new token each time");
    assert_eq!(again.spec.expiration_seconds, Some(3600));

    assert_eq!(status_of(accounts.create_token_request("checker", &pp, &request(Some(599), None)).await).0, 422);
    // bound to a Pod: only one running under that account
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let mut other = pod("daemon", &[]);
    other.spec = Some(k8s_openapi::api::core::v1::PodSpec {
        service_account_name: Some("edge-health".into()),
        ..Default::default()
    });
    pods.create(&pp, &other).await.unwrap();
    let bound = accounts.create_token_request("checker", &pp, &request(Some(600), Some("daemon"))).await;
    assert_eq!(status_of(bound), (400, "BadRequest".into()));
}
