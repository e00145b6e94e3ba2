use super::*;
use crate::upstream_log::UpstreamInput;
use edgegrid_testing::objects::{node_object, service_object, slice_object};
use listwatch::WatchOptions;

const CONFIG: LogConfig = LogConfig { history_limit: 100, watch_buffer: 100 };

fn json<T: serde::Serialize>(object: &T) -> Value {
    serde_json::to_value(object).expect("an object")
}

fn service(name: &str, ip: &str) -> Value {
    let mut service = json(&service_object(name, None));
    service["spec"]["clusterIP"] = Value::from(ip);
    service
}

/// A synced leader log: two services, a slice, node metadata and a unit node.
fn leader() -> Arc<UpstreamLog> {
    let log = UpstreamLog::new(CONFIG);
    let lists: [(UpstreamKind, Vec<Value>); 6] = [
        (UpstreamKind::Services, vec![service("api", "10.96.0.1"), service("web", "10.96.0.2")]),
        (UpstreamKind::EndpointSlices, vec![json(&slice_object("web-1", "web", &[("10.1.0.1", "n1")]))]),
        (UpstreamKind::Endpoints, vec![]),
        (UpstreamKind::NodeMetadata, vec![json(&node_object("n1", &[("site", "a")]))]),
        (UpstreamKind::UnitNodes, vec![json(&node_object("n1", &[("site", "a")]))]),
        (UpstreamKind::Digests, vec![]),
    ];
    for (kind, objects) in lists {
        log.apply(UpstreamInput::Begin(kind)).expect("taken");
        for object in objects {
            log.apply(UpstreamInput::Upsert(kind, object)).expect("taken");
        }
        log.apply(UpstreamInput::Done(kind)).expect("taken");
    }
    assert!(log.synced());
    log
}

/// Every object of every kind, as stored bytes, and the log's version.
fn contents(log: &UpstreamLog) -> (u64, Vec<(UpstreamKind, Bytes)>) {
    let (rv, objects, _) = log.snapshot();
    (rv, objects.into_iter().map(|(kind, object)| (kind, object.json().clone())).collect())
}

/// The next `n` lines of `stream` (ticks included).
async fn next_lines(stream: &mut (impl Stream<Item = Bytes> + Unpin), n: usize) -> Vec<Bytes> {
    let mut lines = Vec::new();
    while lines.len() < n {
        let next = tokio::time::timeout(Duration::from_secs(5), stream.next()).await;
        lines.push(next.expect("a line within 5 s").expect("the stream goes on"));
    }
    lines
}

fn take_all(replicating: &mut Replicating, lines: &[Bytes]) {
    for line in lines {
        // each line ends with its newline, which the standby's splitter removes
        let line = line.strip_suffix(b"\n").expect("one line");
        replicating.take(line).expect("taken");
    }
}

/// The snapshot, then each change as the leader commits it: the replica holds the leader's
/// objects under the leader's versions and term, and a watch resumed on it from a version
/// of the leader gets what the leader would have sent.
#[tokio::test]
async fn a_replica_holds_the_leaders_log_under_its_versions_and_resumes_its_watches() {
    let log = leader();
    let mut stream = Box::pin(stream(log.clone(), TICK, futures::future::pending()));
    let slot = ReplicaSlot::default();
    let mut replicating = Replicating::new(CONFIG, slot.clone());
    // SNAPSHOT, 6 objects, SYNCED
    take_all(&mut replicating, &next_lines(&mut stream, 8).await);
    let replica = slot.current().expect("a replica once the snapshot is complete");
    assert_eq!((replica.term(), contents(&replica)), (log.term(), contents(&log)));
    assert!(replica.synced());
    let resume_from = log.read(|log| log.current_rv());

    log.apply(UpstreamInput::Upsert(UpstreamKind::Services, service("web", "10.96.0.9"))).expect("taken");
    log.apply(UpstreamInput::Delete(UpstreamKind::Services, ("ns".into(), "api".into()))).expect("taken");
    let slice = json(&slice_object("web-1", "web", &[("10.1.0.2", "n1")]));
    log.apply(UpstreamInput::Upsert(UpstreamKind::EndpointSlices, slice)).expect("taken");
    take_all(&mut replicating, &next_lines(&mut stream, 3).await);
    assert_eq!(contents(&replica), contents(&log));

    let opts = WatchOptions::from_query(&[("resourceVersion".to_string(), resume_from.to_string())].into(), None)
        .expect("options");
    let backlog = |log: &UpstreamLog| {
        let start = log.read(|log| log.watch(&UpstreamKind::Services, &opts)).expect("resumed");
        start.backlog.iter().map(|c| (c.rv, c.kind, c.object.json().clone())).collect::<Vec<_>>()
    };
    assert_eq!(backlog(&replica).len(), 2);
    assert_eq!(backlog(&replica), backlog(&log));
    // what came before the snapshot is not the replica's to replay
    let before =
        WatchOptions::from_query(&[("resourceVersion".to_string(), "1".to_string())].into(), None).expect("options");
    let expired = replica.read(|log| log.watch(&UpstreamKind::Services, &before).err().map(|e| e.code()));
    assert_eq!(expired, Some(410));

    // the leader's log closed: the stream ends, the replica stays
    log.close();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(line) = stream.next().await {
            assert_eq!(line, Bytes::from_static(b"{\"type\":\"TICK\"}\n"));
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream ends with the log");
    assert_eq!(slot.current().map(|r| contents(&r)), Some(contents(&log)));
}

/// An idle stream ticks (the standby's read timeout tells a live leader from a dead one).
#[tokio::test]
async fn an_idle_stream_ticks() {
    let log = leader();
    let mut stream = Box::pin(stream(log.clone(), TICK, futures::future::pending()));
    let lines = next_lines(&mut stream, 10).await;
    assert_eq!(
        lines[8..],
        [Bytes::from_static(b"{\"type\":\"TICK\"}\n"), Bytes::from_static(b"{\"type\":\"TICK\"}\n")]
    );
}

/// A standby that falls behind is cut off; it keeps its replica until a new snapshot
/// completes on the next stream, which replaces it.
#[tokio::test]
async fn a_standby_that_falls_behind_is_cut_off_and_keeps_its_replica_until_a_new_snapshot() {
    let log = UpstreamLog::new(LogConfig { history_limit: 100, watch_buffer: 2 });
    for kind in UpstreamKind::ALL {
        log.apply(UpstreamInput::Done(kind)).expect("taken");
    }
    let mut stream = Box::pin(stream(log.clone(), TICK, futures::future::pending()));
    let slot = ReplicaSlot::default();
    let mut replicating = Replicating::new(CONFIG, slot.clone());
    take_all(&mut replicating, &next_lines(&mut stream, 2).await);
    let first = slot.current().expect("a replica");
    for n in 0..5 {
        log.apply(UpstreamInput::Upsert(UpstreamKind::Services, service(&format!("s{n}"), "10.96.0.1")))
            .expect("taken");
    }
    let rest: Vec<Bytes> = tokio::time::timeout(Duration::from_secs(5), stream.collect()).await.expect("ends");
    assert!(rest.is_empty(), "cut off without a change: {rest:?}");
    // a new stream: the old replica stays until the new snapshot completes
    replicating.restart();
    let mut again = Box::pin(super::stream(log.clone(), TICK, futures::future::pending()));
    let lines = next_lines(&mut again, 7).await;
    take_all(&mut replicating, &lines[..6]);
    assert!(Arc::ptr_eq(&slot.current().expect("a replica"), &first));
    take_all(&mut replicating, &lines[6..]);
    let second = slot.current().expect("a replica");
    assert!(!Arc::ptr_eq(&second, &first));
    assert_eq!(contents(&second), contents(&log));
}

/// Lines out of order or malformed are refused and change nothing.
#[test]
fn lines_out_of_order_or_malformed_are_refused() {
    let slot = ReplicaSlot::default();
    let mut replicating = Replicating::new(CONFIG, slot.clone());
    let object = r#"{"type":"OBJECT","kind":"services","object":{"metadata":{"name":"a","resourceVersion":"5"}}}"#;
    let change = r#"{"type":"CHANGE","kind":"services","change":"ADDED","resourceVersion":"6","object":{"metadata":{"name":"a"}}}"#;
    for line in [object, change, r#"{"type":"SYNCED"}"#] {
        assert!(matches!(replicating.take(line.as_bytes()), Err(ReplicationError::OutOfOrder(_))), "{line}");
    }
    assert!(matches!(replicating.take(b"{\"type\":\"NEW\"}"), Err(ReplicationError::Malformed(_))));
    replicating.take(br#"{"type":"SNAPSHOT","term":"7","resourceVersion":"9"}"#).expect("a snapshot");
    let unknown = r#"{"type":"OBJECT","kind":"pods","object":{"metadata":{"name":"a","resourceVersion":"5"}}}"#;
    assert!(matches!(replicating.take(unknown.as_bytes()), Err(ReplicationError::UnknownKind(_))));
    let newer = r#"{"type":"OBJECT","kind":"services","object":{"metadata":{"name":"a","resourceVersion":"10"}}}"#;
    assert!(matches!(replicating.take(newer.as_bytes()), Err(ReplicationError::NotStored(_))));
    replicating.take(object.as_bytes()).expect("an object of the snapshot");
    replicating.take(b"{\"type\":\"SYNCED\"}").expect("the end of the snapshot");
    let replica = slot.current().expect("a replica");
    let old = r#"{"type":"CHANGE","kind":"services","change":"ADDED","resourceVersion":"9","object":{"metadata":{"name":"b"}}}"#;
    assert!(matches!(replicating.take(old.as_bytes()), Err(ReplicationError::NotStored(_))));
    let (rv, objects, _) = replica.snapshot();
    assert_eq!((replica.term(), rv, objects.len()), (7, 9, 1));
}

#[test]
fn lines_are_split_across_and_within_chunks() {
    let mut lines = Lines::default();
    assert_eq!(lines.push(b"{\"a\""), Vec::<Bytes>::new());
    assert_eq!(
        lines.push(b":1}\n{\"b\":2}\n{\"c\""),
        [Bytes::from_static(b"{\"a\":1}"), Bytes::from_static(b"{\"b\":2}")]
    );
    assert_eq!(lines.push(b":3}\n"), [Bytes::from_static(b"{\"c\":3}")]);
}
