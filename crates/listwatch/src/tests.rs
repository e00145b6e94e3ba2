//! The log and the watch protocol exercised directly, without a server.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::object::ENCODINGS;
use crate::protocol::parse_lines;
use crate::*;

type Key = &'static str;

fn log(history: usize, buffer: usize) -> Log<Key> {
    Log::new(LogConfig { history_limit: history, watch_buffer: buffer })
}

fn pod(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": labels}})
}

fn id(name: &str) -> ObjectId {
    ("ns".into(), name.into())
}

fn served() -> ServedType {
    ServedType::new("v1", "Pod")
}

const CONFIG: WatchConfig =
    WatchConfig { bookmark_interval: Duration::from_secs(5), default_timeout: Duration::from_secs(1800) };

fn watch_opts(pairs: &[(&str, &str)]) -> WatchOptions {
    let query: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    WatchOptions::from_query(&query, None).expect("valid watch options")
}

/// A watch of pods on `log` with `query`, never stopped from outside.
fn watch(
    log: &Log<Key>,
    query: &[(&str, &str)],
    shape: Shape,
) -> std::pin::Pin<Box<dyn futures::Stream<Item = Bytes> + Send>> {
    let opts = watch_opts(query);
    Box::pin(watch_stream(
        log.watch(&"pods", &opts),
        opts,
        Representation::json(served(), shape),
        CONFIG,
        futures::future::pending(),
    ))
}

/// `TYPE name` (or `TYPE @rv` for bookmarks) of each line.
fn summary(lines: &[Bytes]) -> Vec<String> {
    parse_lines(lines)
        .into_iter()
        .map(|(kind, o)| match kind.as_str() {
            "BOOKMARK" => format!("BOOKMARK @{}", o["metadata"]["resourceVersion"].as_str().unwrap_or_default()),
            "ERROR" => format!("ERROR {}", o["code"]),
            _ => format!("{kind} {}", o["metadata"]["name"].as_str().unwrap_or_default()),
        })
        .collect()
}

async fn next_lines(stream: &mut (impl futures::Stream<Item = Bytes> + Unpin), n: usize) -> Vec<Bytes> {
    let mut out = Vec::new();
    while out.len() < n {
        match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
            Ok(Some(line)) => out.push(line),
            other => panic!("stream ended or stalled after {out:?}: {other:?}"),
        }
    }
    out
}

#[test]
fn pages_come_from_one_snapshot_and_expire_with_the_history() {
    let mut log = log(100, 10);
    for name in ["a", "b", "c", "d"] {
        log.upsert("pods", id(name), pod(name, json!({}))).expect("stored");
    }
    let first = log.list(&"pods", &ListOptions { limit: Some(2), ..Default::default() }).expect("page");
    let names = |page: &ListPage| page.items.iter().map(|o| o.name().to_string()).collect::<Vec<_>>();
    assert_eq!((names(&first), first.remaining, first.rv), (vec!["a".to_string(), "b".into()], 2, 4));
    log.remove(&"pods", &id("c"));
    log.upsert("pods", id("aa"), pod("aa", json!({}))).expect("stored");
    let token = first.continue_token.clone();
    let second =
        log.list(&"pods", &ListOptions { limit: Some(2), continue_token: token.clone(), ..Default::default() });
    let second = second.expect("second page");
    assert_eq!((names(&second), second.rv, second.continue_token), (vec!["c".to_string(), "d".into()], 4, None));
    // rv=0 ignores limit; a version never issued is a Timeout; compaction expires tokens
    let whole = log.list(&"pods", &ListOptions { limit: Some(1), resource_version: Some(0), ..Default::default() });
    assert_eq!(whole.map(|p| p.items.len()).ok(), Some(4));
    let future = log.list(&"pods", &ListOptions { resource_version: Some(99), exact: true, ..Default::default() });
    assert_eq!(future.err().map(|e| e.code()), Some(504));
    log.compact();
    log.upsert("pods", id("z"), pod("z", json!({}))).expect("stored");
    let expired = log.list(&"pods", &ListOptions { limit: Some(2), continue_token: token, ..Default::default() });
    assert_eq!(expired.err(), Some(Error::Expired { requested: 4, oldest: 6 }));
    let bad = log.list(&"pods", &ListOptions { continue_token: Some("x".into()), ..Default::default() });
    assert_eq!(bad.err().map(|e| e.code()), Some(400));
}

#[test]
fn list_body_is_the_stored_bytes_in_an_envelope() {
    let mut log = log(10, 10);
    log.upsert("pods", id("a"), pod("a", json!({"app": "x"}))).expect("stored");
    log.upsert("pods", id("b"), pod("b", json!({}))).expect("stored");
    log.upsert("other", ("".into(), "c".into()), json!({"metadata": {"name": "c"}})).expect("stored");
    let selected =
        ListOptions { labels: LabelSelector::parse("app=x").expect("selector"), limit: Some(5), ..Default::default() };
    let page = log.list(&"pods", &selected).expect("page");
    let body: Value =
        serde_json::from_slice(&list_body(&page, &Representation::json(served(), Shape::Full))).expect("JSON");
    assert_eq!(body["kind"], "PodList");
    assert_eq!(body["metadata"], json!({"resourceVersion": "3"}));
    assert_eq!(
        body["items"],
        json!([pod("a", json!({"app": "x"})).as_object().map(|o| {
            let mut o = o.clone();
            o["metadata"]["resourceVersion"] = json!("1");
            o
        })])
    );
    let empty = log.list(&"none", &ListOptions::default()).expect("page");
    let body: Value =
        serde_json::from_slice(&list_body(&empty, &Representation::json(served(), Shape::Metadata))).expect("JSON");
    assert_eq!((body["kind"].clone(), body["items"].clone()), (json!("PartialObjectMetadataList"), json!([])));
}

#[test]
fn a_large_list_streams_in_bounded_chunks_that_concatenate_to_the_contiguous_body() {
    let mut log = log(10, 10);
    let big = "x".repeat(40 * 1024);
    for i in 0..20 {
        let name = format!("p{i:02}");
        log.upsert("pods", id(&name), json!({"metadata": {"name": name, "namespace": "ns"}, "data": big}))
            .expect("stored");
    }
    let page = log.list(&"pods", &ListOptions::default()).expect("page");
    let chunks: Vec<Bytes> = ListBody::new(page.clone(), Representation::json(served(), Shape::Full)).collect();
    // 20 items of ~40 KiB: several chunks, none far beyond the chunk size
    assert!(chunks.len() >= 3, "{} chunks", chunks.len());
    assert!(
        chunks.iter().all(|c| c.len() < 256 * 1024 + 41 * 1024),
        "{:?}",
        chunks.iter().map(Bytes::len).collect::<Vec<_>>()
    );
    let joined: Vec<u8> = chunks.concat();
    assert_eq!(joined, list_body(&page, &Representation::json(served(), Shape::Full)).to_vec());
    let body: Value = serde_json::from_slice(&joined).expect("JSON");
    let names: Vec<String> = (0..20).map(|i| format!("p{i:02}")).collect();
    assert_eq!(
        body["items"].as_array().map(|items| items.iter().map(|i| i["metadata"]["name"].clone()).collect::<Vec<_>>()),
        Some(names.iter().map(|n| json!(n)).collect())
    );
    let empty = log.list(&"none", &ListOptions::default()).expect("page");
    let chunks: Vec<Bytes> = ListBody::new(empty, Representation::json(served(), Shape::Full)).collect();
    assert_eq!(chunks.len(), 1);
    assert_eq!(
        &chunks[0][..],
        br#"{"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"20"},"items":[]}"#
    );
}

#[tokio::test]
async fn resume_replays_history_and_selectors_turn_leaving_objects_into_deletes() {
    let mut log = log(100, 10);
    log.upsert("pods", id("a"), pod("a", json!({"app": "x"}))).expect("stored");
    let mark = log.current_rv();
    log.upsert("pods", id("b"), pod("b", json!({"app": "x"}))).expect("stored");
    log.upsert("pods", id("a"), pod("a", json!({"app": "y"}))).expect("stored");
    log.upsert("nodes", id("n"), pod("n", json!({"app": "x"}))).expect("stored");
    let mark = mark.to_string();
    let mut stream = watch(&log, &[("resourceVersion", &mark), ("labelSelector", "app=x")], Shape::Full);
    log.upsert("pods", id("a"), pod("a", json!({"app": "x"}))).expect("stored");
    log.remove(&"pods", &id("b"));
    let lines = next_lines(&mut stream, 4).await;
    assert_eq!(summary(&lines), ["ADDED b", "DELETED a", "ADDED a", "DELETED b"]);
    let events = parse_lines(&lines);
    assert_eq!(events[1].1["metadata"]["resourceVersion"], "3", "a leaving object is deleted at the change's version");
    assert_eq!(events[3].1["metadata"]["resourceVersion"], "6");
    // too old and never issued versions are ERROR events
    log.compact();
    for (rv, code) in [("1", 410), ("99", 504)] {
        let mut stream = watch(&log, &[("resourceVersion", rv)], Shape::Full);
        assert_eq!(summary(&next_lines(&mut stream, 1).await), [format!("ERROR {code}")]);
        assert_eq!(stream.next().await, None);
    }
}

#[tokio::test(start_paused = true)]
async fn streaming_list_ends_with_the_initial_events_bookmark_then_bookmarks_and_timeout() {
    let mut log = log(100, 10);
    log.upsert("pods", id("a"), pod("a", json!({}))).expect("stored");
    let streaming = [
        ("sendInitialEvents", "true"),
        ("allowWatchBookmarks", "true"),
        ("resourceVersionMatch", "NotOlderThan"),
        ("timeoutSeconds", "12"),
    ];
    let mut stream = watch(&log, &streaming, Shape::Metadata);
    let lines = next_lines(&mut stream, 2).await;
    assert_eq!(summary(&lines), ["ADDED a", "BOOKMARK @1"]);
    let end = &parse_lines(&lines)[1].1;
    assert_eq!(end["kind"], "PartialObjectMetadata");
    assert_eq!(end["metadata"]["annotations"][INITIAL_EVENTS_END_ANNOTATION], "true");
    log.upsert("pods", id("b"), pod("b", json!({}))).expect("stored");
    let lines = next_lines(&mut stream, 3).await;
    assert_eq!(summary(&lines), ["ADDED b", "BOOKMARK @2", "BOOKMARK @2"]);
    assert_eq!(stream.next().await, None, "timeoutSeconds=12 ends the watch after two 5s bookmarks");
}

#[tokio::test]
async fn a_watcher_that_cannot_keep_up_gets_410_and_is_closed() {
    let mut log = log(100, 4);
    let opts = watch_opts(&[]);
    let start = log.watch(&"pods", &opts);
    // the feed overflows before the watch task ever runs
    for i in 0..10 {
        log.upsert("pods", id(&format!("p{i}")), pod("p", json!({}))).expect("stored");
    }
    let mut stream = Box::pin(watch_stream(
        start,
        opts,
        Representation::json(served(), Shape::Full),
        CONFIG,
        futures::future::pending(),
    ));
    let lines = next_lines(&mut stream, 1).await;
    assert_eq!(summary(&lines), ["ERROR 410"]);
    assert_eq!(stream.next().await, None);
}

#[tokio::test]
async fn stop_ends_the_watch() {
    let log = log(10, 10);
    let opts = watch_opts(&[]);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut stream = Box::pin(watch_stream(
        log.watch(&"pods", &opts),
        opts,
        Representation::json(served(), Shape::Full),
        CONFIG,
        async {
            let _ = stopped.await;
        },
    ));
    let _ = stop.send(());
    assert_eq!(stream.next().await, None);
}

#[tokio::test]
async fn each_version_is_encoded_once_for_lists_and_all_watchers() {
    let mut log = log(100, 100);
    let opts = watch_opts(&[]);
    let watchers: Vec<_> = (0..20)
        .map(|_| {
            let start = log.watch(&"pods", &opts);
            Box::pin(watch_stream(
                start,
                opts.clone(),
                Representation::json(served(), Shape::Full),
                CONFIG,
                futures::future::pending(),
            ))
        })
        .collect();
    let before = ENCODINGS.with(|n| n.get());
    let stored = log.upsert("pods", id("a"), pod("a", json!({"big": "x".repeat(1000)}))).expect("stored");
    assert_eq!(ENCODINGS.with(|n| n.get()) - before, 1);
    for mut watcher in watchers {
        let line = next_lines(&mut watcher, 1).await.remove(0);
        assert!(
            line.windows(stored.json().len()).any(|w| w == &stored.json()[..]),
            "the event carries the stored bytes"
        );
    }
    let page = log.list(&"pods", &ListOptions::default()).expect("page");
    let _ = list_body(&page, &Representation::json(served(), Shape::Full));
    assert_eq!(page.items[0].json().as_ptr(), stored.json().as_ptr());
    assert_eq!(ENCODINGS.with(|n| n.get()) - before, 1, "neither 20 watchers nor a list encoded it again");
}

#[test]
fn a_continuing_log_expires_every_version_before_it() {
    let config = LogConfig { history_limit: 10, watch_buffer: 10 };
    let mut log: Log<Key> = Log::continuing(config, 1_000);
    assert_eq!(log.current_rv(), 1_000);
    let stored = log.upsert("pods", id("a"), pod("a", json!({}))).expect("stored");
    assert_eq!(stored.resource_version(), 1_001);
    assert_eq!(log.watch(&"pods", &watch_opts(&[("resourceVersion", "999")])).err().map(|e| e.code()), Some(410));
    assert_eq!(log.watch(&"pods", &watch_opts(&[("resourceVersion", "1000")])).map(|s| s.backlog.len()).ok(), Some(1));
}

/// The objects of every key, as their stored bytes.
fn stored_bytes(log: &Log<Key>) -> Vec<(Key, ObjectId, Bytes)> {
    log.all().flat_map(|(key, objects)| objects.iter().map(|(id, o)| (*key, id.clone(), o.json().clone()))).collect()
}

/// A replica restored from a snapshot of its source and replaying the source's later
/// changes holds the same objects under the same versions, and a watch resumed from any
/// version since the snapshot gets the same events on both: a client of the source can
/// resume on the replica.
#[tokio::test]
async fn a_replica_replaying_its_source_serves_the_same_versions_and_resumes() {
    let config = LogConfig { history_limit: 100, watch_buffer: 100 };
    let mut source: Log<Key> = Log::continuing(config, 5_000);
    source.upsert("pods", id("a"), pod("a", json!({"app": "x"}))).expect("stored");
    source.upsert("pods", id("b"), pod("b", json!({"app": "x"}))).expect("stored");
    source.upsert("nodes", id("n"), pod("n", json!({}))).expect("stored");
    // the snapshot, and the source's feed from that instant
    let snapshot_rv = source.current_rv();
    let mut feed = source.watch(&"pods", &WatchOptions::default()).expect("a feed").live;
    let mut replica: Log<Key> = Log::continuing(config, snapshot_rv);
    for (key, id, _) in stored_bytes(&source) {
        let object = source.get(&key, &id).expect("stored").value();
        replica.restore(key, id, object).expect("restored");
    }
    assert_eq!(stored_bytes(&replica), stored_bytes(&source));
    source.upsert("pods", id("a"), pod("a", json!({"app": "y"}))).expect("stored");
    source.remove(&"pods", &id("b"));
    source.upsert("nodes", id("m"), pod("m", json!({}))).expect("stored");
    source.upsert("pods", id("c"), pod("c", json!({"app": "x"}))).expect("stored");
    while let Ok(change) = feed.try_recv() {
        let (key, id, kind, object) = (change.key, change.id.clone(), change.kind, change.object.value());
        replica.replay(key, id, kind, object, change.rv).expect("replayed");
    }
    assert_eq!(stored_bytes(&replica), stored_bytes(&source));
    assert_eq!(replica.current_rv(), source.current_rv());
    // a leaves the selector (DELETED), b is deleted, c added; from two changes later, c
    for (since, events) in [(snapshot_rv, 3), (snapshot_rv + 2, 1)] {
        let since = since.to_string();
        let query = [("resourceVersion", since.as_str()), ("labelSelector", "app=x")];
        let (mut from_source, mut from_replica) =
            (watch(&source, &query, Shape::Full), watch(&replica, &query, Shape::Full));
        let expected = next_lines(&mut from_source, events).await;
        let resumed = next_lines(&mut from_replica, events).await;
        assert_eq!(parse_lines(&resumed), parse_lines(&expected), "resumed from {since}");
    }
    // what came before the snapshot is not the replica's to replay
    let before = (snapshot_rv - 1).to_string();
    assert_eq!(replica.watch(&"pods", &watch_opts(&[("resourceVersion", &before)])).err().map(|e| e.code()), Some(410));
    // versions only go up, and a restored object cannot be newer than the snapshot
    let stale = replica.replay("pods", id("z"), ChangeKind::Added, pod("z", json!({})), snapshot_rv);
    assert!(matches!(stale, Err(Error::Internal(_))), "{stale:?}");
    let mut newer = pod("z", json!({}));
    newer["metadata"]["resourceVersion"] = json!((replica.current_rv() + 1).to_string());
    assert!(matches!(replica.restore("pods", id("z"), newer), Err(Error::Internal(_))));
    assert_eq!(stored_bytes(&replica), stored_bytes(&source), "refused input changes nothing");
    // a change is committed under the source's version, whatever the replica's was
    let ahead = replica.current_rv() + 10;
    replica.replay("pods", id("z"), ChangeKind::Added, pod("z", json!({})), ahead).expect("replayed");
    let z = replica
        .get(&"pods", &id("z"))
        .map(|z| (z.resource_version(), z.value()["metadata"]["resourceVersion"].clone()));
    assert_eq!((replica.current_rv(), z), (ahead, Some((ahead, json!(ahead.to_string())))));
}
