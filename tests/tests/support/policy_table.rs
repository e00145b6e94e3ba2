//! What the chart's admission policy tables share: a kube client of the in-repo API
//! server that authenticates with a token the server registered (a user of the test's
//! choosing: a node, a service account on a node), the policy installed, and the real
//! server's wording of a refusal. Included by path by the tests that use it.

use fake_apiserver::FakeApiServer;
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::Value;

/// A client sending `token` (none when empty: `system:admin`).
pub async fn client(server: &FakeApiServer, token: &str) -> Client {
    let user = if token.is_empty() { "{}".to_string() } else { format!("{{token: {token}}}") };
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
         contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\n\
         users:\n- name: fake\n  user: {user}\n",
        server.url()
    );
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    Client::try_from(config).unwrap()
}

/// Installs a policy and its binding (as `crates/testing`'s chart module builds them) as the
/// administrator.
pub async fn install(server: &FakeApiServer, [policy, binding]: [Value; 2]) {
    let admin = client(server, "").await;
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(policy).unwrap();
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(binding).unwrap();
    Api::all(admin.clone()).create(&PostParams::default(), &policy).await.unwrap();
    Api::all(admin).create(&PostParams::default(), &binding).await.unwrap();
}

/// The real server's message when policy `policy` (bound by a binding of the same name)
/// refuses a request on `resource` `name` with `message`.
pub fn refusal(resource: &str, name: &str, policy: &str, message: &str) -> String {
    format!(
        "{resource} \"{name}\" is forbidden: ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied \
         request: {message}"
    )
}
