//! The shipped `edge-health` binary, end to end over HTTP: five daemons, one per node of a
//! unit, each on its own loopback address (127.0.0.11..15) with a check target of its own
//! on that address, sharing one fake apiserver. All healthy: nobody is annotated and a
//! removed address annotation is put back. One daemon and its target stopped: that node
//! alone gets `nodeunhealth: "yes"` within the detection time, in exactly one write.
//! Brought back: the annotation is removed. With the API server refusing Node requests
//! the unit still votes a dead node down locally and the verdict is written once the API
//! is back. Frames a test forges (bad MAC, replay, unknown sender, skew, misdirected,
//! garbage) are refused with their status and metric, a rotated key file is used without
//! a restart; a node of the unit running SuperEdge's edge-health (no address published) is
//! no member, and SuperEdge's `PUT /result` gets 410 Gone, counted; SuperEdge node units
//! follow the `edge-health-config` ConfigMap; a configuration that cannot work is a
//! start-up error saying why.

mod common;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use common::{
    Cluster, KEY, Member, Protocol, client, expect, http_send, loopback, metric, until, verdicts, views_agree,
};
use edge_health::message::{HmacKey, Message, Payload, seal_message};
use edge_health::node_key::SigningKey;
use edge_health::time::Timestamp;
use edgegrid_core::keys::{
    EDGE_HEALTH_ADDRESS_ANNOTATION, EDGE_HEALTH_CONFIGMAP, EDGE_HEALTH_PUBLIC_KEY_ANNOTATION,
    EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION, NODE_UNIT_LABEL_VALUE,
};
use edgegrid_core::unit::local_verdicts::Verdict;
use edgegrid_core::unit::verdict::{View, members_version};
use edgegrid_testing::{RunningBinary, TempDir};
use fake_apiserver::Fault;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::time::Instant;

const PERIOD: Duration = Duration::from_millis(400);
const VOTE_WINDOW: u64 = 3;
/// From a node's death to its annotation: the vote window's ballots about it turn over
/// (all assigned checkers then say unhealthy), the next evaluation decides, the writer
/// writes at once; plus one period for the death to fall on a period start, and slack
/// for a loaded machine.
const DETECTION: Duration = Duration::from_millis(400 * (VOTE_WINDOW + 2) + 1_500);
/// Short periods on loopback, where nothing is lost.
const LOOPBACK: Protocol = Protocol {
    period: PERIOD,
    vote_window: VOTE_WINDOW,
    // every member checks every other in these units of at most five: a death never leaves
    // a survivor with one live checker in a window (with fewer, the random assignment can)
    probes_per_period: 4,
    indirect_helpers: 2,
    // a helper challenges the target (one message) and runs the check within it
    indirect_timeout: Duration::from_millis(200),
    message_timeout: Duration::from_millis(150),
    check_timeout: Duration::from_millis(100),
    check_retries: 0,
};

/// `POST path` with `body`: the status and body (the daemon must answer).
async fn http_post(address: SocketAddr, path: &str, body: &[u8]) -> (u16, String) {
    common::http_post(address, path, body).await.expect("an answer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_alone_is_annotated_once_and_cleared_when_back() {
    let ips: Vec<IpAddr> = (11..=15).map(loopback).collect();
    let cluster = Cluster::on_loopback("a", &ips, LOOPBACK).await;
    let mut members: Vec<Member> =
        ips.iter().enumerate().map(|(i, ip)| Member::new(format!("edge-{}", i + 1), *ip)).collect();
    let names = cluster.start_all(&mut members).await;
    cluster.ready(&mut members).await;

    // (1) all healthy: every daemon publishes its address, every view says healthy, and
    // nobody is annotated (a member its peers had not yet heard from a whole window after
    // their start may have been written "undecided" meanwhile, then cleared)
    cluster.until_healthy(&members, &names).await;
    let healthy = expect(&names, &[]);
    until("nobody annotated", Duration::from_secs(5), || async {
        for name in &names {
            cluster.unhealth(name).await.is_none().then_some(())?;
        }
        Some(())
    })
    .await;
    for member in &members {
        let annotations = cluster.annotations(&member.name).await;
        let address = cluster.address(member).to_string();
        assert_eq!(annotations.get(EDGE_HEALTH_ADDRESS_ANNOTATION), Some(&address), "{}", member.name);
    }
    // an address annotation someone removes is put back
    let nodes: Api<Node> = Api::all(client(&cluster.server));
    let removal = json!({"metadata": {"annotations": {EDGE_HEALTH_ADDRESS_ANNOTATION: null}}});
    nodes.patch("edge-5", &PatchParams::default(), &Patch::Merge(&removal)).await.expect("remove the address");
    let edge5 = cluster.address(&members[4]).to_string();
    until("edge-5's address re-published", Duration::from_secs(5), || async {
        (cluster.annotations("edge-5").await.get(EDGE_HEALTH_ADDRESS_ANNOTATION) == Some(&edge5)).then_some(())
    })
    .await;
    // without its address it left the unit; back, it is undecided (and may be written so)
    // until two peers vouch for it again: every view healthy, then a write in flight
    // landed and cleared
    until("every view healthy again", Duration::from_secs(10), || views_agree(&cluster, &members, &healthy)).await;
    tokio::time::sleep(PERIOD * 2).await;
    until("edge-5 vouched for again", DETECTION, || async { cluster.unhealth("edge-5").await.is_none().then_some(()) })
        .await;
    let view = verdicts(cluster.address(&members[0])).await.expect("view");
    let tally = &view.nodes["edge-3"];
    assert!(tally.healthy >= 2 && tally.unhealthy == 0, "two agreeing ballots, nobody against: {tally:?}");
    // the identities it serves (the grid wrappers' unit membership) are the Nodes' own
    let mut published = std::collections::BTreeMap::new();
    for member in &members {
        let annotations = cluster.annotations(&member.name).await;
        let identity = edgegrid_core::unit::local_verdicts::PeerIdentity {
            public_key: annotations
                .get(edgegrid_core::keys::EDGE_HEALTH_PUBLIC_KEY_ANNOTATION)
                .cloned()
                .expect("a key"),
            address: annotations.get(EDGE_HEALTH_ADDRESS_ANNOTATION).cloned().expect("an address"),
        };
        published.insert(member.name.clone(), identity);
    }
    let first = cluster.address(&members[0]);
    until("edge-1 serving every member's published identity", Duration::from_secs(10), || async {
        (verdicts(first).await?.identities == published).then_some(())
    })
    .await;

    // (2) edge-3's daemon and its target stop: it alone is annotated, in one write (or two,
    // when the vote passed through a tie on the way: "undecided", then "yes")
    let verdict_writes = r#"edge_health_writes_total{target="verdict",outcome="written"}"#;
    let writes_before = cluster.total(&members, verdict_writes).await;
    let mark = cluster.server.requests().mark();
    members[2].stop().await;
    let stopped = Instant::now();
    until("edge-3 annotated", DETECTION, || async {
        (cluster.unhealth("edge-3").await.as_deref() == Some("yes")).then_some(())
    })
    .await;
    let detected = stopped.elapsed();
    let down = expect(&names, &["edge-3"]);
    until("the survivors' views agree", Duration::from_secs(5), || views_agree(&cluster, &members, &down)).await;
    // a few more periods: nobody writes it again, nobody else is accused
    tokio::time::sleep(PERIOD * 4).await;
    let (written, refused) = cluster.patches("edge-3", mark);
    assert!((1..=2).contains(&written) && refused == 0, "{written} writes, {refused} refused");
    for name in names.iter().filter(|n| *n != "edge-3") {
        assert_eq!(cluster.unhealth(name).await, None, "{name} accused");
        assert_eq!(cluster.patches(name, mark), (0, 0), "{name} written");
    }
    let writers = cluster.total(&members, verdict_writes).await - writes_before;
    assert_eq!(writers, written as f64, "one writer");
    let survivor = cluster.address(&members[0]);
    assert!(metric(survivor, r#"edge_health_verdict_changes_total{verdict="unhealthy"}"#).await >= 1.0);
    assert!(metric(survivor, "edge_health_vote_latency_seconds_count").await >= 1.0);
    assert!(metric(survivor, r#"edge_health_probes_total{check="http",result="failure"}"#).await >= 1.0);

    // (3) back: the annotation is removed
    let back = Instant::now();
    cluster.start(&mut members[2]).await;
    until("edge-3's annotation removed", DETECTION + Duration::from_secs(2), || async {
        cluster.unhealth("edge-3").await.is_none().then_some(())
    })
    .await;
    until("every view healthy again", Duration::from_secs(10), || views_agree(&cluster, &members, &healthy)).await;
    eprintln!("detected in {detected:?} (limit {DETECTION:?}), cleared in {:?}", back.elapsed());
    cluster.stop_all(&mut members).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_cloud_link_down_the_unit_votes_locally_and_writes_when_back() {
    // four members: after one death each survivor still has two live peers to vouch for it
    let ips: Vec<IpAddr> = (31..=34).map(loopback).collect();
    let cluster = Cluster::on_loopback("c", &ips, LOOPBACK).await;
    let mut members: Vec<Member> =
        ips.iter().enumerate().map(|(i, ip)| Member::new(format!("site-c-{}", i + 1), *ip)).collect();
    let names = cluster.start_all(&mut members).await;
    cluster.until_healthy(&members, &names).await;

    // the API server stops answering for Nodes; then site-c-3 dies
    cluster.server.set_fault("nodes", Fault::Error(503));
    let mark = cluster.server.requests().mark();
    members[2].stop().await;
    let down = expect(&names, &["site-c-3"]);
    until("voted down locally", DETECTION, || views_agree(&cluster, &members, &down)).await;
    let writer = cluster.address(&members[0]);
    let failed = r#"edge_health_writes_total{target="verdict",outcome="failed"}"#;
    until("the writer tries again each period", Duration::from_secs(5), || async {
        (metric(writer, failed).await >= 2.0).then_some(())
    })
    .await;
    assert_eq!(cluster.patches("site-c-3", mark).0, 0, "nothing written while the API server refuses");

    // the link is back: the verdict lands, once
    cluster.server.clear_faults();
    until("site-c-3 annotated", PERIOD * 3 + Duration::from_secs(2), || async {
        (cluster.unhealth("site-c-3").await.as_deref() == Some("yes")).then_some(())
    })
    .await;
    tokio::time::sleep(PERIOD * 2).await;
    assert_eq!(cluster.patches("site-c-3", mark).0, 1, "one successful write");
    assert_eq!(cluster.unhealth("site-c-2").await, None);
    cluster.stop_all(&mut members).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_replayed_and_stray_frames_are_refused() {
    let ip = loopback(21);
    let cluster = Cluster::on_loopback("b", &[ip], LOOPBACK).await;
    // "ghost" is a member whose daemon the test plays (it forges its frames): it publishes
    // an address on solo's host, whose check target answers for it, and its node key
    let ghost = SigningKey::from_seed(&[21; 32]);
    let ghost_address = json!({EDGE_HEALTH_ADDRESS_ANNOTATION: format!("{ip}:1"),
        EDGE_HEALTH_PUBLIC_KEY_ANNOTATION: ghost.public_key().to_annotation()});
    cluster.create_node_annotated("ghost", json!({"site": "b"}), ghost_address).await;
    // "legacy" runs SuperEdge's edge-health: same unit, no address published
    cluster.create_node("legacy").await;
    cluster.create_node("solo").await;
    let mut solo = Member::new("solo", ip);
    cluster.start(&mut solo).await;
    let address = cluster.address(&solo);
    // once its view lists ghost, the daemon knows it as a peer; legacy is no member (a
    // unit of two decides nothing: ghost stays undecided)
    until("ghost in the view", Duration::from_secs(15), || async {
        let view = verdicts(address).await?;
        (view.node == "solo" && view.nodes.get("ghost").map(|v| v.verdict) == Some(Verdict::Undecided)).then_some(view)
    })
    .await;
    // for periods on end: legacy is never in the view, never probed, nobody is accused
    let since = metric(address, r#"edge_health_probes_total{check="http",result="success"}"#).await;
    until("3 more periods of probes", Duration::from_secs(5), || async {
        let now = metric(address, r#"edge_health_probes_total{check="http",result="success"}"#).await;
        (now >= since + 3.0).then_some(())
    })
    .await;
    let view = verdicts(address).await.expect("view");
    assert_eq!(view.nodes.keys().map(String::as_str).collect::<Vec<_>>(), ["ghost", "solo"], "legacy is no member");
    assert_eq!(metric(address, "edge_health_probes_skipped_total").await, 0.0);
    assert_eq!(metric(address, r#"edge_health_probes_total{check="http",result="failure"}"#).await, 0.0);
    assert_eq!(cluster.unhealth("legacy").await, None, "nothing written about legacy");
    // legacy's SuperEdge daemon sends its results (`PUT /result`, SuperEdge's
    // CommunicateData): 410 Gone saying why, counted, and nothing taken from it
    let result = json!({"sourceIP": "127.0.0.22", "resultDetail": {ip.to_string(): {"normal": false, "time": 1}},
        "hmac": "00"});
    for attempt in 1..=3 {
        let (status, body) = http_send(address, "PUT", "/result", result.to_string().as_bytes()).await.expect("answer");
        assert_eq!(status, 410, "{body}");
        assert!(body.contains("runs edgegrid's edge-health, not SuperEdge's"), "{body}");
        let counted = metric(address, r#"edge_health_superedge_requests_total{path="/result"}"#).await;
        assert_eq!(counted, f64::from(attempt));
    }
    let (status, _) = http_send(address, "GET", "/localinfo", b"").await.expect("answer");
    assert_eq!(status, 410, "SuperEdge's grid wrapper reading the local view");
    assert_eq!(metric(address, r#"edge_health_superedge_requests_total{path="/localinfo"}"#).await, 1.0);
    assert_eq!(metric(address, r#"edge_health_messages_rejected_total{reason="malformed"}"#).await, 0.0);

    let key = HmacKey::new(KEY).expect("key");
    let now = || {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
        Timestamp::from_unix_millis(since.as_millis() as u64)
    };
    let message = |sender: &str, timestamp: Timestamp, sequence: u64, recipient: Option<&str>| Message {
        sender: sender.into(),
        timestamp,
        sequence,
        recipient: recipient.map(String::from),
        payload: Payload::Results { ballots: BTreeMap::new() },
    };
    let valid = seal_message(&key, &ghost, &message("ghost", now(), 1, None));
    assert_eq!(http_post(address, "/exchange", &valid).await.0, 204, "a member's sealed results are taken");
    let other_key = HmacKey::new(&[7; 32]).expect("key");
    let hour = Duration::from_secs(3600);
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("replay", valid.clone(), 401, "replay"),
        ("bad MAC", seal_message(&other_key, &ghost, &message("ghost", now(), 2, None)), 401, "bad_mac"),
        // a holder of the unit key writing in ghost's name: not ghost's signature
        (
            "another node's signature",
            seal_message(&key, &SigningKey::from_seed(&[22; 32]), &message("ghost", now(), 2, None)),
            401,
            "bad_signature",
        ),
        ("unknown sender", seal_message(&key, &ghost, &message("stranger", now(), 3, None)), 401, "unknown_sender"),
        // a node of the unit not running this daemon is no member: its frames are a stranger's
        ("no member", seal_message(&key, &ghost, &message("legacy", now(), 3, None)), 401, "unknown_sender"),
        (
            "old timestamp",
            seal_message(&key, &ghost, &message("ghost", now().saturating_sub(hour), 4, None)),
            401,
            "skew",
        ),
        (
            "for another node",
            seal_message(&key, &ghost, &message("ghost", now(), 5, Some("edge-9"))),
            401,
            "misdirected",
        ),
        // a holder of the unit key silencing a member: refused, the member's frames still count
        (
            "sequence ahead of the clock",
            seal_message(&key, &ghost, &message("ghost", now(), u64::MAX, None)),
            401,
            "future_sequence",
        ),
        ("garbage", b"{not a frame".to_vec(), 400, "malformed"),
    ];
    for (what, frame, status, reason) in cases {
        let series = format!(r#"edge_health_messages_rejected_total{{reason="{reason}"}}"#);
        let before = metric(address, &series).await;
        let (got, body) = http_post(address, "/exchange", &frame).await;
        assert_eq!(got, status, "{what}: {body}");
        assert_eq!(metric(address, &series).await, before + 1.0, "{what} counted as {reason}");
    }
    assert_eq!(metric(address, r#"edge_health_messages_accepted_total{kind="results"}"#).await, 1.0);

    // the Secret rotates: the new key is used without a restart, the old one refused
    let new_key = b"the unit's next key, also thirty-two bytes or more";
    let rotate = |contents: &[u8]| {
        let (temporary, path) = (cluster.dir.join(".key.new"), cluster.dir.join("key"));
        std::fs::write(&temporary, contents).expect("write");
        std::fs::rename(temporary, path).expect("rename");
    };
    rotate(new_key);
    let sequence = std::sync::atomic::AtomicU64::new(100);
    let next = || sequence.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let rotated = HmacKey::new(new_key).expect("key");
    until("frames under the new key accepted", Duration::from_secs(5), || async {
        let frame = seal_message(&rotated, &ghost, &message("ghost", now(), next(), None));
        (http_post(address, "/exchange", &frame).await.0 == 204).then_some(())
    })
    .await;
    assert_eq!(metric(address, r#"edge_health_key_reloads_total{result="loaded"}"#).await, 1.0);
    let rotated_at = Instant::now();
    let old = seal_message(&key, &ghost, &message("ghost", now(), next(), None));
    assert_eq!(http_post(address, "/exchange", &old).await.0, 204, "the old key within --key-rotation-overlap");
    until("the old key refused after the overlap", Duration::from_secs(5), || async {
        let old = seal_message(&key, &ghost, &message("ghost", now(), next(), None));
        (http_post(address, "/exchange", &old).await.0 == 401).then_some(())
    })
    .await;
    let overlap = rotated_at.elapsed();
    assert!(overlap >= Duration::from_millis(1000), "refused after only {overlap:?} of a 1.5 s overlap");
    // a key too short to use is reported and the key in use kept
    rotate(b"short");
    until("the short key refused", Duration::from_secs(5), || async {
        (metric(address, r#"edge_health_key_reloads_total{result="invalid"}"#).await == 1.0).then_some(())
    })
    .await;
    let frame = seal_message(&rotated, &ghost, &message("ghost", now(), next(), None));
    assert_eq!(http_post(address, "/exchange", &frame).await.0, 204, "still the rotated key");

    solo.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_units_follow_the_edge_health_config_config_map() {
    let ip = loopback(41);
    // no unit label key: SuperEdge node units
    let cluster = Cluster::on_loopback("", &[ip], LOOPBACK).await;
    let unit = |name: &str| json!({name: NODE_UNIT_LABEL_VALUE});
    cluster.create_node_labelled("solo", unit("u1")).await;
    // members whose daemons the test does not run: they publish an address (on solo's
    // host, so they read as alive), else they would be no members at all
    let address = json!({EDGE_HEALTH_ADDRESS_ANNOTATION: format!("{ip}:1")});
    cluster.create_node_annotated("ghost", unit("u1"), address.clone()).await;
    cluster.create_node_annotated("other", unit("u2"), address).await;
    // kube-system exists from the start, as in a real cluster
    let config_maps: Api<ConfigMap> = Api::namespaced(client(&cluster.server), "kube-system");
    let u1_only: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": EDGE_HEALTH_CONFIGMAP},
        "data": {"unit-internal-check": "true", "check-units": "u1"},
    }))
    .expect("config map");
    config_maps.create(&PostParams::default(), &u1_only).await.expect("config map");
    let mut solo = Member::new("solo", ip);
    cluster.start(&mut solo).await;
    let address = cluster.address(&solo);
    let members = |names: &'static [&'static str]| async move {
        let view = verdicts(address).await?;
        view.nodes.keys().map(String::as_str).eq(names.iter().copied()).then_some(())
    };
    until("u1 only, as listed", Duration::from_secs(15), || members(&["ghost", "solo"])).await;
    config_maps.delete(EDGE_HEALTH_CONFIGMAP, &Default::default()).await.expect("delete");
    until("no ConfigMap: the whole cluster", Duration::from_secs(5), || members(&["ghost", "other", "solo"])).await;
    config_maps.create(&PostParams::default(), &u1_only).await.expect("config map");
    until("u1 only, as created", Duration::from_secs(5), || members(&["ghost", "solo"])).await;
    let off = json!({"data": {"unit-internal-check": "false"}});
    config_maps.patch(EDGE_HEALTH_CONFIGMAP, &PatchParams::default(), &Patch::Merge(&off)).await.expect("patch");
    until("unit checking off: the whole cluster", Duration::from_secs(5), || members(&["ghost", "other", "solo"]))
        .await;
    solo.stop().await;
}

#[tokio::test]
async fn configurations_that_cannot_work_are_start_up_errors() {
    let dir = TempDir::new("edge-health-config").expect("temp dir");
    std::fs::write(dir.join("short"), b"sixteen byte key").expect("key");
    std::fs::write(dir.join("key"), KEY).expect("key");
    let check = "kind=tcp,port=10250,timeout=1s".to_string();
    let signing = dir.join("signing-key").display().to_string();
    let base = |key: &str| -> Vec<String> {
        [
            "--node-name",
            "n1",
            "--advertise-address",
            "10.244.0.1",
            "--hmac-key-file",
            key,
            "--signing-key-file",
            &signing,
        ]
        .map(String::from)
        .to_vec()
    };
    let missing = dir.join("missing").display().to_string();
    let short = dir.join("short").display().to_string();
    let good = dir.join("key").display().to_string();
    let cases: Vec<(&str, Vec<String>, &[&str])> = vec![
        (
            "missing key",
            [base(&missing), vec!["--check".into(), check.clone()]].concat(),
            &["--hmac-key-file", "missing"],
        ),
        ("short key", [base(&short), vec!["--check".into(), check.clone()]].concat(), &["16 bytes", "at least 32"]),
        ("no check", base(&good), &["no check configured"]),
        (
            "checks slower than the period",
            [base(&good), vec!["--check".into(), check.clone(), "--period".into(), "1s".into()]].concat(),
            &["not less than the period"],
        ),
    ];
    for (what, args, says) in cases {
        let exit = RunningBinary::start(common::BINARY, &args)
            .expect("starts")
            .wait(Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(!exit.status.success(), "{what}: exited {:?}", exit.status);
        for words in says {
            assert!(exit.logs.contains(words), "{what}: {words:?} not in\n{}", exit.logs);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_restarted_while_the_api_server_is_away_resumes_from_its_peer_cache() {
    let ips: Vec<IpAddr> = (51..=53).map(loopback).collect();
    let cluster = Cluster::on_loopback("d", &ips, LOOPBACK).await;
    let mut members: Vec<Member> =
        ips.iter().enumerate().map(|(i, ip)| Member::new(format!("site-d-{}", i + 1), *ip)).collect();
    let names = cluster.start_all(&mut members).await;
    cluster.until_healthy(&members, &names).await;
    let healthy = expect(&names, &[]);
    // the cache holds the unit with every address once the addresses are published
    let cache = cluster.peer_cache(&members[0]);
    until("site-d-1's peer cache lists the unit with addresses", Duration::from_secs(5), || async {
        let cache: serde_json::Value = serde_json::from_slice(&std::fs::read(&cache).ok()?).ok()?;
        let nodes = cache["nodes"].as_array()?;
        let addressed = nodes.iter().filter(|n| n["annotations"][EDGE_HEALTH_ADDRESS_ANNOTATION].is_string()).count();
        (nodes.len() == 3 && addressed == 3).then_some(())
    })
    .await;

    // the cloud link goes; site-d-1's daemon restarts (a reboot, an upgrade) meanwhile
    cluster.server.set_fault("nodes", Fault::Error(503));
    members[0].stop().await;
    cluster.start(&mut members[0]).await;
    let address = cluster.address(&members[0]);
    // it cannot list a single Node, yet it knows, probes and votes on its unit
    until("the restarted daemon's view lists the unit", Duration::from_secs(10), || async {
        verdicts(address).await.filter(|v| v.nodes.len() == 3).map(|_| ())
    })
    .await;
    until("every view healthy again", DETECTION, || views_agree(&cluster, &members, &healthy)).await;
    members[2].stop().await;
    let down = expect(&names, &["site-d-3"]);
    until("voted down, the restarted daemon included", DETECTION, || views_agree(&cluster, &members, &down)).await;
    cluster.server.clear_faults();
    until("site-d-3 annotated once the link is back", PERIOD * 3 + Duration::from_secs(2), || async {
        (cluster.unhealth("site-d-3").await.as_deref() == Some("yes")).then_some(())
    })
    .await;
    cluster.stop_all(&mut members).await;
}

/// A peer cache saved for cluster A found by a daemon of cluster B (a node re-joined
/// elsewhere, a disk image copied from another cluster's node) while B's API server
/// refuses Node requests: A's members are not restored, the refusal is counted and logged
/// once naming both clusters, and the file stays until B's Nodes list and the next save
/// replaces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_cache_saved_for_another_cluster_is_not_restored_and_the_next_save_replaces_it() {
    let ips: Vec<IpAddr> = (71..=73).map(loopback).collect();
    let a = Cluster::on_loopback("e", &ips, LOOPBACK).await;
    let mut members: Vec<Member> =
        ips.iter().enumerate().map(|(i, ip)| Member::new(format!("site-e-{}", i + 1), *ip)).collect();
    let names = a.start_all(&mut members).await;
    a.until_healthy(&members, &names).await;
    let a_cache = a.peer_cache(&members[0]);
    until("site-e-1's peer cache lists the unit with addresses", Duration::from_secs(5), || async {
        let cache: serde_json::Value = serde_json::from_slice(&std::fs::read(&a_cache).ok()?).ok()?;
        let nodes = cache["nodes"].as_array()?;
        let addressed = nodes.iter().filter(|n| n["annotations"][EDGE_HEALTH_ADDRESS_ANNOTATION].is_string()).count();
        (nodes.len() == 3 && addressed == 3).then_some(())
    })
    .await;
    a.stop_all(&mut members).await;
    let saved_by_a = std::fs::read(&a_cache).expect("the peer cache");

    let b = Cluster::on_loopback("e", &ips[..1], LOOPBACK).await;
    b.create_node(&members[0].name).await;
    b.server.set_fault("nodes", Fault::Error(503));
    let b_cache = b.peer_cache(&members[0]);
    std::fs::copy(&a_cache, &b_cache).expect("the node's disk");
    b.start(&mut members[0]).await;
    let address = b.address(&members[0]);
    let refused = r#"edge_health_peer_cache_refused_total{reason="other_cluster"}"#;
    until("the peer cache refused", Duration::from_secs(10), || async {
        let (_, exposition) = edgegrid_testing::http_get(address, "/metrics").await?;
        (edgegrid_testing::sample(&exposition, refused) == Some("1")).then_some(())
    })
    .await;
    // periods pass: none of cluster A's members is known
    tokio::time::sleep(PERIOD * 4).await;
    let view = verdicts(address).await.expect("the view");
    assert!(view.nodes.keys().all(|node| node == "site-e-1"), "{view:?}");
    assert_eq!(metric(address, "edge_health_peers").await, 0.0);
    assert_eq!(std::fs::read(&b_cache).expect("still there"), saved_by_a, "kept, not rewritten");

    // B's Nodes list: the next save records cluster B
    b.server.clear_faults();
    let b_server = format!("{}/", b.server.url());
    until("cluster B's peer cache saved", Duration::from_secs(10), || async {
        let cache: serde_json::Value = serde_json::from_slice(&std::fs::read(&b_cache).ok()?).ok()?;
        (cache["cluster"]["server"] == b_server.as_str() && cache["nodes"].as_array()?.len() == 1).then_some(())
    })
    .await;
    let exit = members[0].stop().await;
    let refusals: Vec<&str> = exit.logs.lines().filter(|line| line.contains("was saved for another cluster")).collect();
    assert_eq!(refusals.len(), 1, "logged once:\n{}", exit.logs);
    let a_server = format!("{}/", a.server.url());
    assert!(refusals[0].contains(&a_server) && refusals[0].contains(&b_server), "{}", refusals[0]);
}

/// `--verdict-writer=cloud` (the chart's choice): each daemon writes only its own Node,
/// publishing the members it holds unhealthy once per change of its view, and nobody
/// writes the dead node (the admission webhook's deployment does, from the views).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_cloud_writing_verdicts_each_daemon_publishes_only_its_own_view() {
    let ips: Vec<IpAddr> = (61..=64).map(loopback).collect();
    let mut cluster = Cluster::on_loopback("v", &ips, LOOPBACK).await;
    cluster.extra_args = vec!["--verdict-writer".into(), "cloud".into()];
    let mut members: Vec<Member> =
        ips.iter().enumerate().map(|(i, ip)| Member::new(format!("v-{}", i + 1), *ip)).collect();
    let names = cluster.start_all(&mut members).await;
    cluster.ready(&mut members).await;
    cluster.until_healthy(&members, &names).await;
    let view = |name: String| {
        let cluster = &cluster;
        async move {
            let value = cluster.annotations(&name).await.get(EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION).cloned()?;
            Some(View::parse(&value).expect("a readable view"))
        }
    };
    let all = View {
        members: members_version(names.iter().map(String::as_str)),
        unhealthy: Default::default(),
        undecided: Default::default(),
    };
    until("every daemon publishes a view holding everyone healthy", Duration::from_secs(5), || async {
        for name in &names {
            if view(name.clone()).await.as_ref() != Some(&all) {
                return None;
            }
        }
        Some(())
    })
    .await;
    let views_before = cluster.total(&members, r#"edge_health_writes_total{target="view",outcome="written"}"#).await;
    let mark = cluster.server.requests().mark();
    members[2].stop().await;
    let survivors: Vec<String> = names.iter().filter(|n| *n != "v-3").cloned().collect();
    let down = View { unhealthy: ["v-3".to_string()].into(), ..all.clone() };
    until("every survivor's view holds v-3", DETECTION, || async {
        for name in &survivors {
            if view(name.clone()).await.as_ref() != Some(&down) {
                return None;
            }
        }
        Some(())
    })
    .await;
    tokio::time::sleep(PERIOD * 4).await;
    let mut total = 0;
    for name in &survivors {
        // one write, or two when its vote passed through a tie ("undecided", then down)
        let (written, refused) = cluster.patches(name, mark);
        assert!((1..=2).contains(&written) && refused == 0, "{name}: {written} writes of its own view");
        total += written;
    }
    assert_eq!(cluster.patches("v-3", mark), (0, 0), "no daemon writes another Node");
    assert_eq!(cluster.unhealth("v-3").await, None, "the verdict is the cloud's to write");
    let views = cluster.total(&members, r#"edge_health_writes_total{target="view",outcome="written"}"#).await;
    assert!(views > views_before, "the survivors' views were written ({total} patches)");
    cluster.stop_all(&mut members).await;
}
