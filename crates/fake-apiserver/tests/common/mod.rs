//! What the conformance tests share: a server, a real kube client for it, fixtures.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::collections::BTreeMap;
use std::time::Duration;

use fake_apiserver::{FakeApiServer, ServerConfig};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;

pub async fn server() -> (FakeApiServer, Client) {
    server_with(ServerConfig::default()).await
}

pub async fn server_with(config: ServerConfig) -> (FakeApiServer, Client) {
    let server = FakeApiServer::start_with(0, config).await.expect("bind 127.0.0.1");
    let config = kube::Config::new(server.url().parse().expect("valid url"));
    let client = Client::try_from(config).expect("client for http url");
    (server, client)
}

pub fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        data: Some(data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
        ..Default::default()
    }
}

pub fn pod(name: &str, labels: &[(&str, &str)]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The `Status` a failed call carried: (code, reason).
pub fn status_of<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub fn rv(meta: &ObjectMeta) -> u64 {
    meta.resource_version.as_deref().and_then(|v| v.parse().ok()).expect("numeric resourceVersion")
}

/// Waits for a future, failing the test instead of hanging it.
pub async fn within<F: std::future::Future>(what: &str, fut: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), fut).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// Drives a kube-runtime watcher until it produced `n` events, rendered as
/// `Init`, `InitApply <name>`, `InitDone`, `Apply <name> <data>`, `Delete <name>` or
/// `Error <message>`.
pub async fn watcher_events<S>(stream: &mut S, n: usize) -> Vec<String>
where
    S: futures::Stream<Item = Result<kube::runtime::watcher::Event<ConfigMap>, kube::runtime::watcher::Error>> + Unpin,
{
    use futures::StreamExt;
    use kube::ResourceExt;
    use kube::runtime::watcher::Event;
    let mut out = Vec::new();
    while out.len() < n {
        let event = within("watcher event", stream.next()).await.expect("watcher stream ended");
        out.push(match event {
            Ok(Event::Init) => "Init".to_string(),
            Ok(Event::InitApply(o)) => format!("InitApply {}", o.name_any()),
            Ok(Event::InitDone) => "InitDone".to_string(),
            Ok(Event::Apply(o)) => format!("Apply {} {:?}", o.name_any(), o.data.unwrap_or_default()),
            Ok(Event::Delete(o)) => format!("Delete {}", o.name_any()),
            Err(e) => format!("Error {e}"),
        });
    }
    out
}
