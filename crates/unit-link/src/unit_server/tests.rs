//! The unit server's router, driven without a socket (`tower::ServiceExt::oneshot`).

use std::time::Duration;

use edgegrid_testing::objects::{node_object, service_object};
use http_body_util::BodyExt;
use listwatch::LogConfig;
use serde_json::Value;
use tower::ServiceExt;

use super::*;
use crate::upstream_log::UpstreamInput;

const METADATA: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

/// Answers at once before the first sync (the wait has a test of its own).
fn serve_config() -> ServeConfig {
    ServeConfig {
        watch: WatchConfig { bookmark_interval: Duration::from_secs(60), default_timeout: Duration::from_secs(60) },
        sync_wait: Duration::ZERO,
    }
}

fn json<T: serde::Serialize>(object: &T) -> Value {
    serde_json::to_value(object).expect("an object")
}

/// A log with Services `a` and `b`, nodes `n1` and `n2` (metadata) and `n1` whole.
fn synced_log() -> Arc<UpstreamLog> {
    let log = UpstreamLog::new(LogConfig { history_limit: 100, watch_buffer: 100 });
    for kind in UpstreamKind::ALL {
        let objects = match kind {
            UpstreamKind::Services => vec![json(&service_object("a", None)), json(&service_object("b", None))],
            UpstreamKind::NodeMetadata => {
                vec![json(&node_object("n1", &[("site", "x")])), json(&node_object("n2", &[("site", "y")]))]
            }
            UpstreamKind::UnitNodes => vec![json(&node_object("n1", &[("site", "x")]))],
            _ => vec![],
        };
        log.apply(UpstreamInput::Begin(kind)).expect("begin");
        for object in objects {
            log.apply(UpstreamInput::Upsert(kind, object)).expect("upsert");
        }
        log.apply(UpstreamInput::Done(kind)).expect("done");
    }
    log
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Value,
}

async fn request(app: &Router, method: Method, uri: &str, accept: Option<&str>, peer: Option<&str>) -> Response {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(accept) = accept {
        request = request.header(header::ACCEPT, accept);
    }
    let mut request = request.body(Body::empty()).expect("a request");
    if let Some(peer) = peer {
        request.extensions_mut().insert(ConnectInfo(peer.parse::<SocketAddr>().expect("a peer")));
    }
    app.clone().oneshot(request).await.expect("answered")
}

async fn answer(app: &Router, method: Method, uri: &str, accept: Option<&str>) -> Answer {
    let response = request(app, method, uri, accept, None).await;
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    let bytes = response.into_body().collect().await.expect("a body").to_bytes();
    Answer { status, headers, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null) }
}

fn item_names(list: &Value) -> Vec<&str> {
    list["items"].as_array().into_iter().flatten().filter_map(|i| i["metadata"]["name"].as_str()).collect()
}

fn app(log: Arc<UpstreamLog>) -> (Router, UnitServerMetrics, watch::Sender<bool>) {
    let metrics = UnitServerMetrics::default();
    let (stop, stopped) = watch::channel(false);
    (router(log, serve_config(), metrics.clone(), stopped), metrics, stop)
}

/// Four collections, GET only: anything else is a Status (404, or 405 naming GET).
#[tokio::test]
async fn only_list_and_watch_of_the_four_collections_is_served() {
    let (app, _, _stop) = app(synced_log());
    for path in [
        "/api/v1/namespaces/ns/services",
        "/api/v1/namespaces/ns/services/a",
        "/api/v1/pods",
        "/api/v1/nodes/n1",
        "/version",
        "/",
    ] {
        let refused = answer(&app, Method::GET, path, None).await;
        assert_eq!((refused.status, refused.body["reason"].as_str()), (404, Some("NotFound")), "{path}");
    }
    for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
        let refused = answer(&app, method.clone(), "/api/v1/services", None).await;
        assert_eq!((refused.status, refused.body["reason"].as_str()), (405, Some("MethodNotAllowed")), "{method}");
        assert_eq!(refused.headers.get(header::ALLOW).map(|v| v.as_bytes()), Some(&b"GET"[..]));
    }
    let bad = answer(&app, Method::GET, "/api/v1/services?labelSelector=a%20in%20b", None).await;
    assert_eq!((bad.status, bad.body["reason"].as_str()), (400, Some("BadRequest")));
}

/// Nothing is answered before the log has synced, nor without a log: 503 with
/// Retry-After, never an empty list.
#[tokio::test]
async fn nothing_is_served_before_the_log_has_synced() {
    let log = UpstreamLog::new(LogConfig { history_limit: 10, watch_buffer: 10 });
    for kind in &UpstreamKind::ALL[..4] {
        log.apply(UpstreamInput::Begin(*kind)).expect("begin");
        log.apply(UpstreamInput::Done(*kind)).expect("done");
    }
    let (app, _, _stop) = app(log);
    let (_stop, stopped) = watch::channel(false);
    let no_log = router(LogSlot::default(), serve_config(), UnitServerMetrics::default(), stopped);
    for app in [&app, &no_log] {
        for uri in ["/api/v1/services", "/api/v1/services?watch=true", "/api/v1/endpoints", "/api/v1/nodes"] {
            let refused = answer(app, Method::GET, uri, None).await;
            assert_eq!((refused.status, refused.body["reason"].as_str()), (503, Some("ServiceUnavailable")), "{uri}");
            assert_eq!(refused.headers.get(header::RETRY_AFTER).map(|v| v.as_bytes()), Some(&b"1"[..]));
        }
    }
}

/// A new leader's followers relist while it syncs: their requests wait for its first sync
/// and are answered from it, rather than 503 (which their backoff would turn into seconds).
#[tokio::test]
async fn requests_wait_for_a_new_leaders_first_sync() {
    let log = UpstreamLog::new(LogConfig { history_limit: 10, watch_buffer: 10 });
    let (_stop, stopped) = watch::channel(false);
    let config = ServeConfig { sync_wait: Duration::from_secs(30), ..serve_config() };
    let app = router(log.clone(), config, UnitServerMetrics::default(), stopped);
    let waiting = tokio::spawn({
        let app = app.clone();
        async move { answer(&app, Method::GET, "/api/v1/services", None).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "answered before the sync");
    for kind in UpstreamKind::ALL {
        log.apply(UpstreamInput::Begin(kind)).expect("begin");
        if kind == UpstreamKind::Services {
            log.apply(UpstreamInput::Upsert(kind, json(&service_object("a", None)))).expect("upsert");
        }
        log.apply(UpstreamInput::Done(kind)).expect("done");
    }
    let answered =
        tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("answered once synced").expect("ran");
    assert_eq!((answered.status, item_names(&answered.body)), (200, vec!["a"]));
}

/// Metadata-only requests for nodes get every node's metadata, whole-object ones the
/// unit's Nodes; lists count their bytes under their kind.
#[tokio::test]
async fn nodes_are_served_by_the_shape_asked_for() {
    let (app, metrics, _stop) = app(synced_log());
    let metadata = answer(&app, Method::GET, "/api/v1/nodes", Some(METADATA)).await;
    assert_eq!((metadata.status, metadata.body["kind"].as_str()), (200, Some("PartialObjectMetadataList")));
    assert_eq!(item_names(&metadata.body), ["n1", "n2"]);
    assert_eq!(metadata.body["items"][1]["metadata"]["labels"], serde_json::json!({"site": "y"}));
    let whole = answer(&app, Method::GET, "/api/v1/nodes?fieldSelector=metadata.name%3Dn1", None).await;
    assert_eq!((whole.status, whole.body["kind"].as_str()), (200, Some("NodeList")));
    assert_eq!(item_names(&whole.body), ["n1"]);
    let none = answer(&app, Method::GET, "/api/v1/nodes?fieldSelector=metadata.name%3Dn2", None).await;
    assert_eq!(item_names(&none.body), Vec::<&str>::new());

    let response = request(&app, Method::GET, "/api/v1/services", None, None).await;
    let bytes = response.into_body().collect().await.expect("a body").to_bytes();
    let sent = |resource| metrics.served_bytes.get_or_create(&ResourceLabel { resource }).get();
    assert_eq!(sent("services"), bytes.len() as u64);
    assert!(sent("nodemetadata") > 0 && sent("unitnodes") > 0);
    assert_eq!(sent("endpoints"), 0);
}

/// Followers are counted by address while they watch; a closed log ends its watches and
/// answers 503.
#[tokio::test]
async fn followers_are_the_addresses_watching_and_a_closed_log_ends_their_watches() {
    let log = synced_log();
    let (app, metrics, _stop) = app(log.clone());
    let watch = |peer| request(&app, Method::GET, "/api/v1/services?watch=true", None, Some(peer));
    let first = watch("10.0.0.2:40000").await;
    let second = watch("10.0.0.2:40001").await;
    let third = watch("10.0.0.3:40000").await;
    assert_eq!(metrics.followers.get(), 2);
    drop(first);
    assert_eq!(metrics.followers.get(), 2, "10.0.0.2 still watches");
    drop(third);
    assert_eq!(metrics.followers.get(), 1);
    // the initial events arrive, then the stream ends when the log is closed
    let mut body = second.into_body();
    let mut received = Vec::new();
    while received.len() < 2 {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame()).await.expect("an event in time");
        let data = frame.expect("an event").expect("readable").into_data().expect("data");
        received.extend(data.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(|l| l.to_vec()));
    }
    log.close();
    let end = tokio::time::timeout(Duration::from_secs(5), body.frame()).await.expect("ended in time");
    assert!(end.is_none(), "the watch ended");
    drop(body);
    assert_eq!(metrics.followers.get(), 0);
    let refused = answer(&app, Method::GET, "/api/v1/services", None).await;
    assert_eq!(refused.status, 503);
}

/// The first line of a watch answered to `uri` with the term header `term`, and the term
/// the answer names.
async fn first_watch_line(app: &Router, uri: &str, term: Option<String>) -> (Option<String>, Value) {
    let mut request = Request::builder().uri(uri);
    if let Some(term) = term {
        request = request.header(TERM_HEADER, term);
    }
    let response = app.clone().oneshot(request.body(Body::empty()).expect("a request")).await.expect("answered");
    let named = response.headers().get(TERM_HEADER).and_then(|t| t.to_str().ok()).map(str::to_string);
    let mut body = response.into_body();
    let frame = tokio::time::timeout(Duration::from_secs(5), body.frame()).await.expect("a line in time");
    let bytes = frame.expect("a line").expect("readable").into_data().expect("data");
    (named, serde_json::from_slice(&bytes).expect("a JSON line"))
}

/// A watch resuming from a version of this log's term (or of no term named) is served and
/// names the term; one naming another term gets 410 in the stream and no term (a client cut
/// off before the 410 must not take the version for this log's); a promoted replica takes
/// its source's versions up to its last one only.
#[tokio::test]
async fn resumes_are_taken_only_from_the_logs_own_versions() {
    let log = synced_log();
    let (app, _, _stop) = app(log.clone());
    // services a and b, then three node changes: from a's version, b is next
    let rv = log.read(|log| log.current_rv());
    let uri = format!("/api/v1/services?watch=true&resourceVersion={}", rv - 4);
    let own = log.term().to_string();
    for term in [Some(own.clone()), None] {
        let (named, line) = first_watch_line(&app, &uri, term).await;
        assert_eq!((named.as_deref(), line["type"].as_str()), (Some(own.as_str()), Some("ADDED")));
    }
    let other = log.term().wrapping_add(1).to_string();
    let (named, line) = first_watch_line(&app, &uri, Some(other.clone())).await;
    assert_eq!((named, line["type"].as_str(), line["object"]["code"].as_u64()), (None, Some("ERROR"), Some(410)));
    // "any version" and a list are no resumes
    let (named, line) = first_watch_line(&app, "/api/v1/services?watch=true&resourceVersion=0", Some(other)).await;
    assert_eq!((named.as_deref(), line["type"].as_str()), (Some(own.as_str()), Some("ADDED")));

    // promoted: the old term's versions up to the last, then only its own
    log.promote();
    let new_term = log.term().to_string();
    let (named, line) = first_watch_line(&app, &uri, Some(own.clone())).await;
    assert_eq!((named.as_deref(), line["type"].as_str()), (Some(new_term.as_str()), Some("ADDED")));
    log.apply(UpstreamInput::Upsert(UpstreamKind::Services, json(&service_object("c", None)))).expect("upsert");
    let after = format!("/api/v1/services?watch=true&resourceVersion={}", rv + 1);
    let (named, line) = first_watch_line(&app, &after, Some(own)).await;
    assert_eq!((named, line["object"]["code"].as_u64()), (None, Some(410)));
    let at_promotion = format!("/api/v1/services?watch=true&resourceVersion={rv}");
    let (named, line) = first_watch_line(&app, &at_promotion, Some(new_term.clone())).await;
    assert_eq!((named, line["object"]["metadata"]["name"].as_str()), (Some(new_term), Some("c")));
}
