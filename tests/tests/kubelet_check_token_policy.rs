//! The chart's kubelet-check token bound (a ValidatingAdmissionPolicy and its binding, from
//! `charts/edgegrid/files/kubelet-check-token-policy.yaml` as the chart renders it) enforced
//! by the in-repo API server on TokenRequests (`serviceaccounts/token`): edge-health's
//! token (on node n1) gets what the daemon asks for, the API server's own audience for 10
//! minutes, and nothing longer, for another audience or of another ServiceAccount; an
//! administrator is not bound. Without the policy, RBAC's `create` on the one
//! `serviceaccounts/token` lets a compromised node mint a year-long token for any audience.

use edgegrid_testing::chart::{KUBELET_CHECK_TOKEN_POLICY, kubelet_check_token_policy};
use fake_apiserver::{FakeApiServer, UserInfo};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

#[path = "support/policy_table.rs"]
mod policy_table;
use policy_table::{client, install};

const NAMESPACE: &str = "edgegrid";
const CHECK_ACCOUNT: &str = "edge-health-kubelet-check";
const EDGE_HEALTH_N1: &str = "edge-health-n1";
const ADMIN: &str = "";

fn refusal(account: &str, message: &str) -> String {
    policy_table::refusal("serviceaccounts", account, KUBELET_CHECK_TOKEN_POLICY, message)
}

#[tokio::test]
async fn edge_health_mints_only_short_kubelet_check_tokens_for_the_api_servers_audience() {
    let server = FakeApiServer::start().await.unwrap();
    server.add_user(EDGE_HEALTH_N1, UserInfo::service_account(NAMESPACE, "edge-health").on_node("n1"));
    let admin = client(&server, ADMIN).await;
    install(&server, kubelet_check_token_policy(NAMESPACE)).await;
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    Api::all(admin.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), NAMESPACE);
    for name in [CHECK_ACCOUNT, "edge-health"] {
        let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        accounts.create(&PostParams::default(), &account).await.unwrap();
    }

    // what the daemon asks for (edge-health's `kubelet_credential::token_request`, whose
    // unit test pins this JSON)
    let daemons = json!({"audiences": [], "expirationSeconds": 600});
    let too_long = "edge-health may create kubelet-check tokens of at most 600 seconds (expirationSeconds)";
    let audience =
        "edge-health may create kubelet-check tokens for the API server's own audience only (no spec.audiences)";
    // (what, token, account, spec, None = issued / Some(message) = refused with 403)
    let rows: Vec<(&str, &str, &str, Value, Option<String>)> = vec![
        ("the daemon's request", EDGE_HEALTH_N1, CHECK_ACCOUNT, daemons.clone(), None),
        (
            "a year-long token",
            EDGE_HEALTH_N1,
            CHECK_ACCOUNT,
            json!({"expirationSeconds": 31_536_000}),
            Some(too_long.into()),
        ),
        ("the server's default lifetime (an hour)", EDGE_HEALTH_N1, CHECK_ACCOUNT, json!({}), Some(too_long.into())),
        (
            "a token for another service",
            EDGE_HEALTH_N1,
            CHECK_ACCOUNT,
            json!({"audiences": ["vault"], "expirationSeconds": 600}),
            Some(audience.into()),
        ),
        (
            "a token of its own account",
            EDGE_HEALTH_N1,
            "edge-health",
            daemons.clone(),
            Some("edge-health may create tokens of edge-health-kubelet-check only, not edge-health".into()),
        ),
        (
            "an administrator's year-long token for vault",
            ADMIN,
            CHECK_ACCOUNT,
            json!({"audiences": ["vault"], "expirationSeconds": 31_536_000}),
            None,
        ),
    ];
    let mut failures = Vec::new();
    for (what, token, account, spec, refused) in rows {
        let api: Api<ServiceAccount> = Api::namespaced(client(&server, token).await, NAMESPACE);
        let request: TokenRequest = serde_json::from_value(json!({"spec": spec})).unwrap();
        let result = api.create_token_request(account, &PostParams::default(), &request).await;
        let outcome = match (result, &refused) {
            (Ok(issued), None) if issued.status.as_ref().is_some_and(|s| !s.token.is_empty()) => None,
            (Ok(_), None) => Some("issued without a token".to_string()),
            (Err(kube::Error::Api(status)), Some(message)) => {
                let wanted = (403, "Forbidden".to_string(), refusal(account, message));
                let got = (status.code, status.reason.clone(), status.message.clone());
                (got != wanted).then(|| format!("refused as {got:?}, wanted {wanted:?}"))
            }
            (Ok(_), Some(_)) => Some("issued; wanted a refusal".to_string()),
            (Err(error), _) => Some(format!("failed: {error}")),
        };
        if let Some(problem) = outcome {
            failures.push(format!("{what}: {problem}"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
