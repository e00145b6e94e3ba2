//! The fake API server's two-unit cluster, a kube client for it, and the waits: what the
//! tests of grid-wrapper and of the unit signer share (the cluster the wrappers watch and
//! the signer signs for). Behind the `cluster` feature, the one part of this crate that
//! links the fake API server: only the crates whose tests run a cluster turn it on.

use std::time::Duration;

use crate::objects::{endpoints_object, node_object, service_object, slice_object};
use fake_apiserver::FakeApiServer;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use kube::{Client, Resource};

pub fn client_for(url: &str) -> Client {
    Client::try_from(kube::Config::new(url.parse().expect("url"))).expect("client for an http url")
}

/// Waits for a future, failing the test instead of hanging it.
pub async fn within<F: std::future::Future>(what: &str, fut: F) -> F::Output {
    within_for(Duration::from_secs(15), what, fut).await
}

/// [`within`] with a bound of its own.
pub async fn within_for<F: std::future::Future>(bound: Duration, what: &str, fut: F) -> F::Output {
    tokio::time::timeout(bound, fut).await.unwrap_or_else(|_| panic!("timed out after {bound:?}: {what}"))
}

/// Polls until `probe` returns `Some`.
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    within(what, async {
        loop {
            if let Some(found) = probe().await {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

pub async fn create_namespaced<K>(client: &Client, object: K) -> K
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), "ns");
    api.create(&PostParams::default(), &object).await.expect("create upstream object")
}

pub async fn create_node(client: &Client, node: Node) -> Node {
    Api::<Node>::all(client.clone()).create(&PostParams::default(), &node).await.expect("create node")
}

/// The upstream cluster of the unit tests, over HTTP: n1 and n2 in unit a, n3 in unit b;
/// `web` is unit-scoped with endpoints in both units, `plain` has no annotation.
pub async fn two_unit_cluster() -> (FakeApiServer, Client) {
    let server = FakeApiServer::start().await.expect("bind 127.0.0.1");
    let client = client_for(&server.url());
    let namespace: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "ns"}})).expect("namespace");
    Api::all(client.clone()).create(&PostParams::default(), &namespace).await.expect("create namespace");
    for (name, unit) in [("n1", "a"), ("n2", "a"), ("n3", "b")] {
        create_node(&client, node_object(name, &[("unit", unit)])).await;
    }
    create_namespaced(&client, service_object("web", Some(r#"["unit"]"#))).await;
    create_namespaced(&client, service_object("plain", None)).await;
    create_namespaced(&client, slice_object("web-1", "web", &[("10.0.0.1", "n1"), ("10.0.0.3", "n3")])).await;
    create_namespaced(&client, slice_object("web-2", "web", &[("10.0.0.2", "n2")])).await;
    create_namespaced(&client, slice_object("plain-1", "plain", &[("10.0.0.5", "n3")])).await;
    create_namespaced(&client, endpoints_object("web", &[("10.0.0.1", "n1"), ("10.0.0.2", "n2"), ("10.0.0.3", "n3")]))
        .await;
    (server, client)
}

/// Relabels upstream node `node` into unit `unit`.
pub async fn relabel(client: &Client, node: &str, unit: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let patch = serde_json::json!({"metadata": {"labels": {"unit": unit}}});
    nodes.patch(node, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.expect("relabel");
}

/// Creates upstream namespace `name`.
pub async fn create_namespace(client: &Client, name: &str) {
    let namespace: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("namespace");
    Api::all(client.clone()).create(&PostParams::default(), &namespace).await.expect("create namespace");
}
