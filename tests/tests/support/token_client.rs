//! A kube client of the in-repo API server that authenticates with a token the server
//! has registered (a user of the test's choosing: a node, a service account on a node),
//! for the admission policy tables. Included by path by the tests that use it.

use fake_apiserver::FakeApiServer;
use kube::Client;

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
