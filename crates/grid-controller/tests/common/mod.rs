//! What the grid controller's end-to-end tests share: a fake apiserver with the CRDs and
//! labelled nodes, the controllers running against it over HTTP, and polling helpers.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::sync::Arc;
use std::time::Duration;

use edgegrid_core::crd::{GridCondition, GridConditionType, all_crds};
use fake_apiserver::FakeApiServer;
use grid_controller::metrics::Metrics;
use grid_controller::reconcile::Settings;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::time::Instant;

pub struct Cluster {
    pub server: FakeApiServer,
    pub client: Client,
    pub metrics: Arc<Metrics>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    controller: Option<tokio::task::JoinHandle<()>>,
}

/// The bearer token the controllers' client sends, so the request log tells their
/// requests from the test's (the fake apiserver records the token as the user).
pub const CONTROLLER_TOKEN: &str = "grid-controller";

/// A server with the CRDs and these nodes (name, labels), and the controllers running.
pub async fn cluster(nodes: &[(&str, &[(&str, &str)])]) -> Cluster {
    cluster_with(all_crds(), nodes, Settings::default()).await
}

/// [`cluster`] with these CRDs installed and these controller settings.
pub async fn cluster_with(
    crds: Vec<CustomResourceDefinition>,
    nodes: &[(&str, &[(&str, &str)])],
    settings: Settings,
) -> Cluster {
    let server = FakeApiServer::start().await.expect("bind 127.0.0.1");
    let client = Client::try_from(kube::Config::new(server.url().parse().expect("url"))).expect("client");
    let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        crd_api.create(&PostParams::default(), &crd).await.expect("create CRD");
    }
    for (name, labels) in nodes {
        node(&client, name, labels).await;
    }
    let mut config = kube::Config::new(server.url().parse().expect("url"));
    let bearer = format!("Bearer {CONTROLLER_TOKEN}").parse().expect("header value");
    config.headers.push((http::header::AUTHORIZATION, bearer));
    let controller_client = Client::try_from(config).expect("client");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let metrics = Arc::new(Metrics::default());
    let controller =
        tokio::spawn(grid_controller::reconcile::run_with(controller_client, metrics.clone(), settings, async move {
            let _ = stopped.await;
        }));
    Cluster { server, client, metrics, stop: Some(stop), controller: Some(controller) }
}

/// SuperEdge's own CRDs (tests/superedge/crds at the workspace root, copied unchanged from its
/// repository): no status subresource, no printer columns, its own schemas.
pub fn superedge_crds() -> Vec<CustomResourceDefinition> {
    ["servicegrids", "deploymentgrids", "statefulsetgrids"]
        .iter()
        .map(|plural| {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("../../tests/superedge/crds/superedge.io_{plural}.yaml"));
            let yaml = std::fs::read_to_string(&path).expect("SuperEdge CRD");
            serde_saphyr::from_str(&indent_quoted_continuations(&yaml)).expect("SuperEdge CRD parses")
        })
        .collect()
}

/// SuperEdge's CRD files continue multi-line quoted descriptions at the indentation of
/// their key (`description: 'APIVersion defines ...` then `of an object. ...` in the
/// same column). Go's YAML (kubectl) and PyYAML take that; YAML 1.2 does not
/// (s-flow-line-prefix: continuation lines are indented past the enclosing block), and
/// neither does serde-saphyr. Indenting such lines two more spaces changes no value (a
/// quoted scalar's line breaks fold and the continuation's leading spaces are dropped;
/// PyYAML 6 parses the original and the re-indented files into equal documents).
pub fn indent_quoted_continuations(yaml: &str) -> String {
    /// Whether a quoted scalar opened by `quote` ends in `rest`.
    fn closes(rest: &str, quote: char) -> bool {
        let mut chars = rest.chars().peekable();
        while let Some(c) = chars.next() {
            match (quote, c) {
                ('\'', '\'') if chars.peek() == Some(&'\'') => {
                    chars.next();
                }
                ('"', '\\') => {
                    chars.next();
                }
                (q, c) if q == c => return true,
                _ => {}
            }
        }
        false
    }
    let mut open: Option<(char, usize)> = None;
    let mut out = Vec::new();
    for line in yaml.lines() {
        let trimmed = line.trim_start_matches(' ');
        let lead = line.len() - trimmed.len();
        if let Some((quote, column)) = open {
            let pad = if !trimmed.is_empty() && lead <= column { column + 2 - lead } else { 0 };
            out.push(format!("{}{line}", " ".repeat(pad)));
            if closes(trimmed, quote) {
                open = None;
            }
            continue;
        }
        out.push(line.to_string());
        // `key: 'text` or `- key: "text` without its closing quote
        let entry = trimmed.strip_prefix("- ").unwrap_or(trimmed);
        let column = line.len() - entry.len();
        if let Some((key, value)) = entry.split_once(": ")
            && !key.is_empty()
            && !key.contains(['\'', '"', '#'])
            && let Some(quote) = value.chars().next().filter(|c| matches!(c, '\'' | '"'))
            && !closes(&value[1..], quote)
        {
            open = Some((quote, column));
        }
    }
    out.join("\n")
}

impl Cluster {
    /// Stops the controllers and checks they stop promptly.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(controller) = self.controller.take() {
            tokio::time::timeout(Duration::from_secs(10), controller)
                .await
                .expect("controllers stop on shutdown")
                .expect("controllers did not panic");
        }
    }

    /// Write requests the server answered since `mark`, except those matching `ours`
    /// (the test's own writes).
    pub fn writes_since(&self, mark: u64, ours: impl Fn(&str) -> bool) -> Vec<String> {
        self.server
            .requests()
            .since(mark)
            .into_iter()
            .filter(|r| r.is_write() && !ours(&r.path))
            .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
            .collect()
    }

    /// Requests the controllers made since `mark` (by their bearer token), as
    /// `METHOD path?query`.
    pub fn controller_requests_since(&self, mark: u64) -> Vec<String> {
        self.server
            .requests()
            .since(mark)
            .into_iter()
            .filter(|r| r.user.as_deref() == Some(CONTROLLER_TOKEN))
            .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
            .collect()
    }

    /// The count of a metric sample line (`name{labels} value`), 0 when absent.
    pub fn sample(&self, line_prefix: &str) -> f64 {
        controller_support::metrics::exposition("grid-controller", &*self.metrics)
            .lines()
            .find_map(|l| l.strip_prefix(line_prefix).and_then(|rest| rest.trim().parse().ok()))
            .unwrap_or(0.0)
    }
}

pub async fn node(client: &Client, name: &str, labels: &[(&str, &str)]) {
    let labels: serde_json::Map<String, serde_json::Value> =
        labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).expect("node");
    Api::<Node>::all(client.clone()).create(&PostParams::default(), &node).await.expect("create node");
}

pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn read_example<T: serde::de::DeserializeOwned>(file: &str) -> T {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(file);
    serde_saphyr::from_str(&std::fs::read_to_string(path).expect("example")).expect("example parses")
}

pub fn names<K: kube::Resource>(items: &[K]) -> Vec<String> {
    let mut names: Vec<String> = items.iter().map(|o| o.meta().name.clone().unwrap_or_default()).collect();
    names.sort();
    names
}

/// (reason, note) of the Events about `regarding` in `default`, oldest first.
pub async fn events_about(client: &Client, regarding: &str) -> Vec<(String, String, String)> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let mut listed = events.list(&ListParams::default()).await.expect("list events").items;
    listed.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
    listed
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding))
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

pub fn condition(conditions: &[GridCondition], type_: GridConditionType) -> Option<(String, String, String)> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (format!("{:?}", c.status), c.reason.clone(), c.message.clone()))
}

pub fn uid_of<K: kube::Resource>(object: &K) -> String {
    object.uid().unwrap_or_default()
}
