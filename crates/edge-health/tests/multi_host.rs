//! The shipped `edge-health` binary on a real network: five daemons, each in a network
//! namespace of its own with its own address on a bridge the test makes in 10.244.0.0/16
//! (see [`common::network`]), sharing one fake apiserver on the bridge's gateway address.
//!
//! Each node's checks probe the daemon's own `/healthz` on its exchange port, in the
//! node's namespace: the node's kubelet stand-in is its daemon, so stopping the daemon
//! stops the node's probe target too (a separate stand-in process would need a program to
//! serve HTTP inside the namespace, which a CI machine need not have).
//!
//! The test reads each daemon's `/verdicts` from the host, over the bridge: a non-loopback
//! client, so each daemon runs with `--verdicts-allowed-from=<gateway>/32` (the host's
//! address on the bridge; its peers' addresses are not allowed).
//!
//! In order, on one network: all healthy, nobody annotated. 30% of the packets between
//! peers dropped for several vote windows: no view ever holds anyone unhealthy and nobody
//! is annotated. Every daemon's link to the apiserver cut (and only that): nobody is
//! annotated and the views stay healthy. One daemon stopped: its node alone is annotated
//! within the detection time. Started again: the annotation is removed.
//!
//! Needs root (with CAP_SYS_ADMIN and CAP_NET_ADMIN), `ip` (iproute2) and `iptables`;
//! without them the test says what is missing and returns, except under CI (`CI`
//! non-empty), where it fails (`edgegrid_testing::tools::runnable`).

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use common::network::{self, Network};
use common::{CheckTarget, Cluster, Member, Protocol, client, expect, metric, views_agree};
use edgegrid_core::keys::{EDGE_HEALTH_ADDRESS_ANNOTATION, NODE_UNHEALTH_ANNOTATION};
use fake_apiserver::{FakeApiServer, ServerConfig};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::time::Instant;

const HOSTS: usize = 5;
/// SuperEdge's port: every host has a port space of its own.
const EXCHANGE_PORT: u16 = 51005;
const PERIOD: Duration = Duration::from_secs(4);
const VOTE_WINDOW: u64 = 3;
/// A unit on a lossy network. At 30% loss a check attempt with a timeout under Linux's
/// minimum retransmission timeout (200 ms) fails whenever any of its few packets is lost,
/// about 75% of the time (150 ms attempts in 1 s periods let views flip within seconds).
/// At 250 ms a lost data packet is resent in time, but a lost SYN or SYN-ACK (resent after
/// 1 s) still fails the attempt: about half fail. So the check is tried 8 times and fails
/// under 1% of the time (tried 5 times in 2 s periods, a healthy node was voted down in
/// about one run in four on a loaded machine). A direct probe that fails goes to helpers,
/// whose own legs are lossy: with 2 helpers and 700 ms (3 s periods) 1.5-3% of all
/// ballots were unhealthy, every one of them by the indirect deadline (counted by basis),
/// and two such ballots about one node in a window make a 2-2 tie among its 4 checkers,
/// which is Undecided (CI saw it once: three views held edge-4 Undecided). Most of those
/// were the asker giving up on a helper at `--message-timeout` (fixed: it now waits until
/// its deadline, 0.7% left); every helper there is (3) with 1.5 s leaves each of them
/// time for several attempts too (none left in two runs). That leaves 500 ms of the
/// period for the results. With 3 probes per member and period every node
/// has all 4 others as checkers over a window, and 3 of them must hold an unhealthy ballot
/// at once to accuse it, 2 to leave it Undecided.
const LOSSY: Protocol = Protocol {
    period: PERIOD,
    vote_window: VOTE_WINDOW,
    probes_per_period: 3,
    indirect_helpers: 3,
    indirect_timeout: Duration::from_millis(1_500),
    message_timeout: Duration::from_millis(250),
    check_timeout: Duration::from_millis(250),
    check_retries: 7,
};
/// From a node's death to its annotation: the vote window's ballots about it turn over
/// (the assigned checkers then say unhealthy), the next evaluation decides, the writer
/// writes at once; plus one period for the death to fall on a period start, and slack for
/// a loaded machine.
const DETECTION: Duration = Duration::from_millis(PERIOD.as_millis() as u64 * (VOTE_WINDOW + 2) + 1_500);
/// How long the loss lasts: several vote windows.
const LOSS: Duration = Duration::from_secs(PERIOD.as_secs() * VOTE_WINDOW * 3);
/// How long the apiserver link is cut: a few vote windows.
const CUT: Duration = Duration::from_secs(PERIOD.as_secs() * VOTE_WINDOW * 2);
const LOSS_PERCENT: u32 = 30;
/// Unhealthy ballots a member cast, every basis (the series' prefix).
const UNHEALTHY_BALLOTS: &str = r#"edge_health_ballots_total{verdict="unhealthy""#;

/// Whether `test` can make its network here (see `edgegrid_testing::tools::runnable` for
/// when it cannot: under CI that fails the test).
fn network_runnable(test: &str) -> bool {
    edgegrid_testing::tools::runnable(test, network::unavailable())
}

/// Asserts `check` (a description of what is wrong, or `None`) each 250 ms for `length`.
async fn throughout<F: std::future::Future<Output = Option<String>>>(length: Duration, mut check: impl FnMut() -> F) {
    let end = Instant::now() + length;
    while Instant::now() < end {
        if let Some(wrong) = check().await {
            panic!("{wrong}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_on_a_real_network_rides_out_loss_and_a_cut_apiserver_link_and_votes_a_dead_node_down() {
    if !network_runnable("a_unit_on_a_real_network_rides_out_loss_and_a_cut_apiserver_link_and_votes_a_dead_node_down")
    {
        return;
    }
    // declared first, dropped last: the daemons are gone before their namespaces
    let network = Network::new(HOSTS).unwrap_or_else(|e| panic!("making the test network: {e}"));
    let gateway = SocketAddr::new(IpAddr::V4(network.gateway()), 0);
    let server = FakeApiServer::start_at(gateway, ServerConfig::default()).await.expect("fake apiserver");
    let api_port = server.addr().port();
    let mut cluster = Cluster::new("site-n", server, EXCHANGE_PORT, CheckTarget::DaemonHealthz, LOSSY);
    // the host reads the views: its address on the bridge may, the peers' may not
    cluster.extra_args = vec![format!("--verdicts-allowed-from={}/32", network.gateway())];
    let mut members: Vec<Member> = (0..HOSTS)
        .map(|i| Member::in_namespace(format!("edge-{}", i + 1), network.address(i).into(), network.namespace(i)))
        .collect();
    let names = cluster.start_all(&mut members).await;
    cluster.ready(&mut members).await;

    // (1) all healthy: every view, from every namespace, says so; nobody is annotated
    let healthy = expect(&names, &[]);
    common::until("every view healthy", Duration::from_secs(20), || views_agree(&cluster, &members, &healthy)).await;
    for member in &members {
        let annotations = cluster.annotations(&member.name).await;
        let address = cluster.address(member).to_string();
        assert_eq!(annotations.get(EDGE_HEALTH_ADDRESS_ANNOTATION), Some(&address), "{}", member.name);
        assert_eq!(annotations.get(NODE_UNHEALTH_ANNOTATION), None, "{}", member.name);
    }
    let unhealthy_changes = r#"edge_health_verdict_changes_total{verdict="unhealthy"}"#;
    let failed_probes = r#"edge_health_probes_total{check="http",result="failure"}"#;
    let written = r#"edge_health_writes_total{target="verdict",outcome="written"}"#;
    assert_eq!(cluster.total(&members, unhealthy_changes).await, 0.0);

    // (2) 30% of the packets between peers lost, for several vote windows: nobody is
    // accused, in any view or on any Node
    let mark = cluster.server.requests().mark();
    let failed_before = cluster.total(&members, failed_probes).await;
    let accusations_before = cluster.total_of_prefix(&members, UNHEALTHY_BALLOTS).await;
    for i in 0..HOSTS {
        network.lossy(i, LOSS_PERCENT).expect("loss");
    }
    throughout(LOSS, || async {
        match common::views(&cluster, &members).await {
            Ok(v) if v.values().any(|view| view != &healthy) => {
                Some(format!("under loss: {}", common::not_healthy_tallies(&cluster, &members).await))
            }
            Ok(_) => None,
            Err(error) => Some(error),
        }
    })
    .await;
    for i in 0..HOSTS {
        network.heal(i).expect("heal");
    }
    let failed = cluster.total(&members, failed_probes).await - failed_before;
    let accusations = cluster.total_of_prefix(&members, UNHEALTHY_BALLOTS).await - accusations_before;
    let by_basis = cluster.unhealthy_ballots_by_basis(&members).await;
    eprintln!(
        "under {LOSS_PERCENT}% loss for {LOSS:?}: {failed} check attempts failed, {accusations} unhealthy ballots cast \
         (since the start, by basis: {by_basis:?})"
    );
    assert!(failed > 0.0, "the loss is real: check attempts fail");
    assert_eq!(cluster.total(&members, unhealthy_changes).await, 0.0, "no view ever held anyone unhealthy");
    for name in &names {
        assert_eq!(cluster.unhealth(name).await, None, "{name} accused under loss");
        assert_eq!(cluster.patches(name, mark), (0, 0), "{name} written under loss");
    }

    // (3) every daemon's apiserver link cut, only that: the peers still see each other
    // and nobody is annotated. An address annotation removed meanwhile stays removed
    // (the cut is real) and is put back once the link is back.
    let mark = cluster.server.requests().mark();
    for i in 0..HOSTS {
        network.cut(i, api_port).expect("cut");
    }
    let nodes: Api<Node> = Api::all(client(&cluster.server));
    let removal = json!({"metadata": {"annotations": {EDGE_HEALTH_ADDRESS_ANNOTATION: null}}});
    nodes.patch("edge-1", &PatchParams::default(), &Patch::Merge(&removal)).await.expect("remove the address");
    throughout(CUT, || async {
        match common::views(&cluster, &members).await {
            Ok(views) if views.values().any(|view| view != &healthy) => {
                return Some(format!("with the apiserver link cut: {views:#?}"));
            }
            Ok(_) => {}
            Err(error) => return Some(error),
        }
        let annotations = cluster.annotations("edge-1").await;
        annotations.contains_key(EDGE_HEALTH_ADDRESS_ANNOTATION).then(|| "edge-1 reached the apiserver".to_string())
    })
    .await;
    // the test's own reads aside, the apiserver heard nothing but the test's PATCH
    let heard: Vec<String> = (cluster.server.requests().since(mark).into_iter())
        .filter(|r| !(r.method == "GET" && r.path == "/api/v1/nodes/edge-1" && r.query.is_empty()))
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect();
    assert_eq!(heard, ["PATCH /api/v1/nodes/edge-1?"], "requests while every daemon's link is cut");
    let healed = Instant::now();
    for i in 0..HOSTS {
        network.heal(i).expect("heal");
    }
    let edge1 = cluster.address(&members[0]).to_string();
    common::until("edge-1's address re-published", Duration::from_secs(30), || async {
        (cluster.annotations("edge-1").await.get(EDGE_HEALTH_ADDRESS_ANNOTATION) == Some(&edge1)).then_some(())
    })
    .await;
    eprintln!("the link back: edge-1's address re-published after {:?}", healed.elapsed());
    // without its address edge-1 left the unit; back, it is undecided (and may be written
    // so) until two peers vouch for it again. Nobody else was written.
    common::until("every view healthy again", Duration::from_secs(20), || views_agree(&cluster, &members, &healthy))
        .await;
    tokio::time::sleep(PERIOD * 2).await;
    common::until("edge-1 vouched for again", DETECTION, || async {
        cluster.unhealth("edge-1").await.is_none().then_some(())
    })
    .await;
    for name in &names {
        assert_eq!(cluster.unhealth(name).await, None, "{name} accused with the apiserver link cut");
    }
    assert_eq!(cluster.total(&members, unhealthy_changes).await, 0.0, "no view ever held anyone unhealthy");
    for name in names.iter().filter(|n| *n != "edge-1") {
        assert_eq!(cluster.patches(name, mark).0, 0, "{name}: a verdict written");
    }
    let written_before = cluster.total(&members, written).await;

    // (4) edge-3's daemon, and with it its probe target, stops: it alone is annotated
    let mark = cluster.server.requests().mark();
    members[2].stop().await;
    let stopped = Instant::now();
    common::until("edge-3 annotated", DETECTION, || async {
        (cluster.unhealth("edge-3").await.as_deref() == Some("yes")).then_some(())
    })
    .await;
    let detected = stopped.elapsed();
    let down = expect(&names, &["edge-3"]);
    common::until("the survivors' views agree", Duration::from_secs(5), || views_agree(&cluster, &members, &down))
        .await;
    tokio::time::sleep(PERIOD * 2).await;
    // one write, or two when the vote passed through a tie ("undecided", then "yes")
    let (writes, refused) = cluster.patches("edge-3", mark);
    assert!((1..=2).contains(&writes) && refused == 0, "{writes} writes, {refused} refused");
    for name in names.iter().filter(|n| *n != "edge-3") {
        assert_eq!(cluster.unhealth(name).await, None, "{name} accused");
        assert_eq!(cluster.patches(name, mark), (0, 0), "{name} written");
    }
    assert_eq!(cluster.total(&members, written).await, written_before + writes as f64, "one writer");
    let survivor = cluster.address(&members[0]);
    assert_eq!(metric(survivor, unhealthy_changes).await, 1.0, "edge-3, once");

    // (5) back: the annotation is removed
    let back = Instant::now();
    cluster.start(&mut members[2]).await;
    common::until("edge-3's annotation removed", DETECTION + Duration::from_secs(2), || async {
        cluster.unhealth("edge-3").await.is_none().then_some(())
    })
    .await;
    let cleared = back.elapsed();
    common::until("every view healthy again", Duration::from_secs(10), || views_agree(&cluster, &members, &healthy))
        .await;
    eprintln!("edge-3 detected in {detected:?} (limit {DETECTION:?}), cleared in {cleared:?}");
    cluster.stop_all(&mut members).await;
}

/// What a crashed run left (a bridge, a namespace, a FORWARD rule, named for a process
/// that is gone) is removed before a network is made.
#[test]
fn a_crashed_runs_leftovers_are_removed() {
    if !network_runnable("a_crashed_runs_leftovers_are_removed") {
        return;
    }
    let mut gone = std::process::Command::new("true").spawn().expect("spawn");
    gone.wait().expect("wait");
    let pid = gone.id();
    let (bridge, namespace) = (format!("ehb{pid}"), format!("eh{pid}h0"));
    let run = |args: &[&str]| {
        let status = std::process::Command::new(args[0]).args(&args[1..]).status().expect("runs");
        assert!(status.success(), "{args:?}");
    };
    run(&["ip", "link", "add", &bridge, "type", "bridge"]);
    run(&["ip", "netns", "add", &namespace]);
    let rule = ["-i", &bridge, "-o", &bridge, "-m", "comment", "--comment", "edge-health-test", "-j", "ACCEPT"];
    run(&[&["iptables", "-I", "FORWARD", "1"][..], &rule].concat());
    network::remove_leftovers(pid);
    let links = std::process::Command::new("ip").args(["-o", "link", "show"]).output().expect("ip").stdout;
    let namespaces = std::process::Command::new("ip").args(["netns", "list"]).output().expect("ip").stdout;
    let rules = std::process::Command::new("iptables").args(["-S", "FORWARD"]).output().expect("ip").stdout;
    assert!(!String::from_utf8_lossy(&links).contains(&format!("{bridge}:")), "the bridge is left");
    assert!(!String::from_utf8_lossy(&namespaces).contains(&namespace), "the namespace is left");
    assert!(!String::from_utf8_lossy(&rules).contains(&bridge), "the rule is left");
}
