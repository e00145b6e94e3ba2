//! What the wrapper's end-to-end tests share: a fake apiserver holding a two-unit cluster
//! (`edgegrid_testing::cluster`, which the unit signer's tests share too), wrappers running
//! in-process against it over HTTP, and unmodified kube-rs clients pointed at each wrapper.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use edgegrid_testing::objects::*;
use futures::TryStreamExt;
use grid_wrapper::cache::ViewSource;
use grid_wrapper::metrics::Metrics;
use grid_wrapper::{Wrapper, WrapperConfig};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, WatchEvent};
use listwatch::{LogConfig, WatchConfig};
use serde_json::Value;

pub use edgegrid_testing::cluster::*;

pub fn config(node: &str) -> WrapperConfig {
    WrapperConfig {
        node_name: node.into(),
        rewrite_local_apiserver: false,
        log: LogConfig { history_limit: 1000, watch_buffer: 1000 },
        watch: WatchConfig { bookmark_interval: Duration::from_millis(200), default_timeout: Duration::from_secs(60) },
        cache_dir: None,
        unit_label_key: None,
    }
}

/// One wrapper serving on 127.0.0.1.
pub struct RunningWrapper {
    pub wrapper: Arc<Wrapper>,
    pub addr: SocketAddr,
    /// An unmodified kube-rs client whose API server is the wrapper.
    pub client: Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl RunningWrapper {
    /// Starts a wrapper on `upstream_url` and waits until it serves the upstream's view.
    pub async fn start(upstream_url: &str, config: WrapperConfig) -> Self {
        let running = Self::start_unsynced(upstream_url, config).await;
        running.until_serving(ViewSource::Upstream).await;
        running
    }

    pub async fn start_unsynced(upstream_url: &str, config: WrapperConfig) -> Self {
        let upstream = kube::Config::new(upstream_url.parse().expect("url"));
        let wrapper = Wrapper::new(&config, &upstream, Arc::new(Metrics::default())).expect("wrapper");
        let mut running = Self::serve(wrapper.clone()).await;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let upstream_task = tokio::spawn(grid_wrapper::upstream::run(
            wrapper,
            Client::try_from(upstream).expect("upstream client"),
            async move {
                let _ = stopped.await;
            },
        ));
        running.stop = Some(stop);
        running.tasks.push(upstream_task);
        running
    }

    /// Serves `wrapper` on 127.0.0.1 with no upstream: the test feeds it (runs its plans).
    pub async fn serve(wrapper: Arc<Wrapper>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("bound");
        let server = tokio::spawn({
            // the address of each client, as the runtime's server gives it: the debug view
            // answers loopback clients only
            let router =
                grid_wrapper::server::router(wrapper.clone(), &grid_wrapper::server::debug_readers(Vec::new()));
            async move {
                axum::serve(listener, router.into_make_service_with_connect_info::<SocketAddr>()).await.expect("serve");
            }
        });
        Self { client: client_for(&format!("http://{addr}")), wrapper, addr, stop: None, tasks: vec![server] }
    }

    pub async fn until_serving(&self, want: ViewSource) {
        let mut serving = self.wrapper.serving_changes();
        within("the wrapper to serve", serving.wait_for(|s| *s == want)).await.expect("wrapper alive");
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for RunningWrapper {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.wrapper.stop_watches();
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// `name -> addresses` of a set of served slices, sorted by name.
pub fn slice_ips(slices: &[EndpointSlice]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = slices
        .iter()
        .map(|s| {
            let value = serde_json::to_value(s).expect("serialisable");
            (s.metadata.name.clone().unwrap_or_default(), ips(&value))
        })
        .collect();
    out.sort();
    out
}

pub fn value_ips<K: serde::Serialize>(object: &K) -> Vec<String> {
    ips(&serde_json::to_value(object).expect("serialisable"))
}

pub fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// `(name, addresses)` pairs as owned strings, for comparing with [`slice_ips`].
pub fn named_ips(pairs: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
    pairs.iter().map(|(n, ips)| (n.to_string(), ips.iter().map(|s| s.to_string()).collect())).collect()
}

/// The served EndpointSlices of a wrapper (or any API server), as [`slice_ips`].
pub async fn listed_slices(client: &Client) -> Vec<(String, Vec<String>)> {
    let slices: Api<EndpointSlice> = Api::all(client.clone());
    slice_ips(&slices.list(&kube::api::ListParams::default()).await.expect("list endpointslices").items)
}

/// An HTTP response read off a raw connection.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Parses the raw bytes of an HTTP/1.0 exchange (the body is everything after the head).
    pub fn parse(raw: &[u8]) -> Self {
        let text = String::from_utf8_lossy(raw);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no HTTP head in {text:?}"));
        let mut lines = head.lines();
        let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok());
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Self { status: status.unwrap_or_else(|| panic!("no status in {head:?}")), headers, body: body.to_string() }
    }
}

/// `GET path` over HTTP/1.0 (the server closes the connection after the body): status,
/// headers and body, or `None` when nothing answers within five seconds.
pub async fn raw_get(address: SocketAddr, path: &str) -> Option<RawResponse> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes()).await.ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        Some(RawResponse::parse(&response))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange).await.ok().flatten()
}

/// The served EndpointSlice events of a raw watch: (type, name, addresses).
pub async fn next_events(
    events: &mut (impl futures::Stream<Item = Result<WatchEvent<EndpointSlice>, kube::Error>> + Unpin),
    n: usize,
) -> Vec<(String, String, Vec<String>)> {
    let mut out = Vec::new();
    while out.len() < n {
        let event = within("a watch event", events.try_next()).await.expect("watch ok").expect("stream open");
        let (kind, slice) = match event {
            WatchEvent::Added(s) => ("ADDED", s),
            WatchEvent::Modified(s) => ("MODIFIED", s),
            WatchEvent::Deleted(s) => ("DELETED", s),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        };
        out.push((kind.to_string(), slice.metadata.name.clone().unwrap_or_default(), value_ips(&slice)));
    }
    out
}

/// An expected event: (type, name, addresses).
pub fn event(kind: &str, name: &str, ips: &[&str]) -> (String, String, Vec<String>) {
    (kind.into(), name.into(), ips.iter().map(|s| s.to_string()).collect())
}

/// Nothing but bookmarks on a watch of served slices for half a second.
pub async fn no_more_events(
    events: &mut (impl futures::Stream<Item = Result<WatchEvent<EndpointSlice>, kube::Error>> + Unpin),
) {
    let quiet = tokio::time::timeout(Duration::from_millis(500), async {
        loop {
            match events.try_next().await {
                Ok(Some(WatchEvent::Bookmark(_))) => continue,
                other => return other,
            }
        }
    })
    .await;
    assert!(quiet.is_err(), "unexpected event: {quiet:?}");
}
