//! The Byzantine harness: a unit of real `edge-health` daemons on loopback, with the
//! cloud's verdict writer (the admission webhook's `nodes::follow` and `verdict_writer`, as
//! the chart runs them: daemons at `--verdict-writer=cloud`) against the in-repo API server,
//! and one member replaced by an adversary holding that member's signing key, the unit's
//! frame key and its kubelet's credential (`common::adversary`). It runs every attack at
//! once, round after round: its own ballots lie about every check, ballots forged in every
//! other checker's name, for future periods and in the receiver's own name, replays of the
//! honest frames it captured, frames numbered to mute each honest member sent in that
//! member's name, lying probe answers in its own name and in every other helper's, a view
//! naming every other member unhealthy on its own Node, a relabel into another unit as its
//! kubelet; and when an honest member dies (its daemon stopped, its node's check target
//! left up so every tcp/http check of it still passes, its Node's Ready turned Unknown), a
//! listener at the dead member's exchange address answering challenges in its name.
//!
//! Properties, checked between rounds all along:
//! - a unit of 5: no live honest member is ever held anything but healthy by an honest
//!   daemon, nor annotated at all (no verdict written about it under attack); the dead
//!   member is annotated `nodeunhealth: "yes"` within the bound and stays so.
//! - a unit of 3 (two honest members and the adversary): one liar is half of each target's
//!   checkers, so nothing is decided there (each honest member's verdict is a tie or a
//!   single voice): no live honest member is ever held unhealthy nor annotated "yes"; the
//!   dead member is never held healthy by the survivor nor left unannotated (unprotected:
//!   stock handling) once the bound has passed.
//! - the adversary's relabel is refused (the chart's unit-label policy), and every kind of
//!   forgery is counted as refused by the honest daemons.
//!
//! Each defence is also a unit test that failed without it (`round.rs`, `message/tests.rs`,
//! `vote/tests.rs`, `core::unit::verdict`); here they hold together, in the binaries.

mod common;

#[path = "../../../tests/tests/support/policy_table.rs"]
mod policy_table;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use common::adversary::{Adversary, PERIOD, PROTOCOL, VOTE_WINDOW, post_frame};
use common::{Cluster, Member, PROMPT_EXIT, client, loopback, until, views};
use edge_health_admission::metrics::Metrics;
use edge_health_admission::nodes::{NodeCache, follow};
use edge_health_admission::verdict_writer;
use edgegrid_core::keys::{EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION, NODE_UNHEALTH_YES};
use edgegrid_core::unit::local_verdicts::Verdict;
use edgegrid_core::unit::membership::UnitSource;
use edgegrid_core::unit::verdict::{View, members_version};
use edgegrid_testing::chart::{UNIT_LABEL_POLICY, unit_label_policy};
use fake_apiserver::UserInfo;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::time::Instant;

/// How often the cloud's verdict writer compares views and Nodes.
const WRITER_PERIOD: Duration = Duration::from_millis(200);
/// Death to verdict: the dead member's last ballots leave the window, the next evaluation
/// decides, the daemons publish their views, the writer writes; plus slack for two cores.
const DETECTION: Duration = Duration::from_millis(PERIOD.as_millis() as u64 * (VOTE_WINDOW + 2) + 200 + 2_500);
/// Periods of attack before and after the death.
const ATTACK_PERIODS: u32 = 15;
/// The tests run one at a time: each loads the machine.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The adversary's kubelet: `system:node:<name>`, by this token.
const ADVERSARY_KUBELET: &str = "kubelet-adversary";

struct Unit {
    cluster: Cluster,
    members: Vec<Member>,
    /// Every member, the adversary included.
    names: Vec<String>,
    honest: Vec<String>,
    adversary: Adversary,
    /// Dead honest members.
    dead: Vec<String>,
    _writer: tokio::task::JoinHandle<()>,
}

async fn set_ready(cluster: &Cluster, name: &str, status: &str) {
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": status}]}});
    Api::<Node>::all(client(&cluster.server))
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("set Ready");
}

/// The cloud's verdict writer, in process, as the webhook's deployment runs it.
fn cloud_writer(cluster: &Cluster) -> tokio::task::JoinHandle<()> {
    let client = client(&cluster.server);
    let cache = Arc::new(NodeCache::new(UnitSource::LabelKey("site".into())));
    let metrics = Arc::new(Metrics::default());
    let listed = controller_support::Readiness::default().gate("the node cache has not listed yet");
    tokio::spawn(async move {
        tokio::select! {
            () = follow(client.clone(), cache.clone(), metrics.clone(), listed, "kube-system".into()) => {}
            () = verdict_writer::run(client, cache, metrics, WRITER_PERIOD) => {}
        }
    })
}

/// A unit of `size`: `size - 1` honest daemons and the adversary, every Node Ready, the
/// chart's unit-label policy installed, the cloud writer running; returned once every
/// honest daemon is ready.
async fn unit(name: &str, size: u8, first_ip: u8, seed: u8) -> Unit {
    let ips: Vec<IpAddr> = (first_ip..first_ip + size).map(loopback).collect();
    let mut cluster = Cluster::on_loopback(name, &ips, PROTOCOL).await;
    cluster.extra_args = ["--verdict-writer", "cloud"].map(String::from).to_vec();
    let adversary_name = format!("{name}-evil");
    let kubelet = format!("system:node:{adversary_name}");
    cluster
        .server
        .add_user(ADVERSARY_KUBELET, UserInfo::new(kubelet).with_groups(&["system:nodes", "system:authenticated"]));
    policy_table::install(&cluster.server, unit_label_policy(&["site"])).await;
    let last = usize::from(size) - 1;
    let mut members: Vec<Member> =
        ips[..last].iter().enumerate().map(|(i, ip)| Member::new(format!("{name}-{}", i + 1), *ip)).collect();
    let adversary = Adversary::join(&cluster, &adversary_name, ips[last], seed).await;
    let honest = cluster.start_all(&mut members).await;
    for node in honest.iter().chain([&adversary.name]) {
        set_ready(&cluster, node, "True").await;
    }
    cluster.ready(&mut members).await;
    let mut names = honest.clone();
    names.push(adversary.name.clone());
    names.sort();
    let writer = cloud_writer(&cluster);
    Unit { cluster, members, names, honest, adversary, dead: Vec::new(), _writer: writer }
}

/// One round of every attack on every running honest member, sent at once.
async fn attack_round(unit: &Unit) {
    let running: Vec<&Member> = unit.members.iter().filter(|m| m.daemon.is_some()).collect();
    let mut sends = Vec::new();
    for member in &running {
        let address = unit.cluster.address(member);
        for frame in unit.adversary.ballot_frames(&member.name, &unit.names) {
            sends.push(post_frame(address, frame));
        }
        for other in unit.honest.iter().filter(|h| **h != member.name) {
            for frame in unit.adversary.muting_frames(other) {
                sends.push(post_frame(address, frame));
            }
        }
        if let Some(old) = unit.adversary.last_captured() {
            sends.push(post_frame(address, old));
        }
    }
    for (asker, frame) in unit.adversary.answers_in_others_names(&unit.honest) {
        if let Some(member) = running.iter().find(|m| m.name == asker) {
            sends.push(post_frame(unit.cluster.address(member), frame));
        }
    }
    futures::future::join_all(sends).await;
}

/// The adversary's view on its own Node: every other member unhealthy.
async fn publish_lying_view(unit: &Unit) {
    let view = View {
        members: members_version(unit.names.iter().map(String::as_str)),
        unhealthy: unit.names.iter().filter(|n| **n != unit.adversary.name).cloned().collect(),
        undecided: BTreeSet::new(),
    };
    let patch = json!({"metadata": {"annotations": {EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION: view.format()}}});
    Api::<Node>::all(client(&unit.cluster.server))
        .patch(&unit.adversary.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("its own Node's view");
}

/// As its kubelet, the adversary moves its Node into another unit, and joins a SuperEdge
/// node unit: both refused by the chart's policy, the Node unchanged.
async fn relabel_is_refused(unit: &Unit) {
    let kubelet: Api<Node> = Api::all(policy_table::client(&unit.cluster.server, ADVERSARY_KUBELET).await);
    let before = unit.cluster.node(&unit.adversary.name).await.metadata.labels;
    let name = &unit.adversary.name;
    for (labels, key) in
        [(json!({"site": "another-unit"}), "site"), (json!({"another-unit": "nodeunits.superedge.io"}), "another-unit")]
    {
        let patch = json!({"metadata": {"labels": labels}});
        let message = format!(
            "system:node:{name} may not change the unit labels of Node {name} ({key}): units are set by an administrator"
        );
        match kubelet.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Err(kube::Error::Api(status)) => assert_eq!(
                (status.code, status.message),
                (403, policy_table::refusal("nodes", name, UNIT_LABEL_POLICY, &message)),
                "{labels}"
            ),
            other => panic!("the adversary's relabel {labels} was not refused: {other:?}"),
        }
    }
    assert_eq!(unit.cluster.node(&unit.adversary.name).await.metadata.labels, before, "its labels changed");
}

/// What the honest members' views and the Nodes may say at any time under attack; `Err`
/// says what broke. A unit of 5 decides every live honest member healthy (three honest
/// checkers against one liar); a unit of 3 may leave them undecided but never unhealthy.
async fn invariants(unit: &Unit) -> Result<(), String> {
    let decides = unit.names.len() >= 4;
    let views = views(&unit.cluster, &unit.members).await?;
    for (observer, view) in &views {
        for member in unit.honest.iter().filter(|h| !unit.dead.contains(h)) {
            match view.get(member) {
                Some(Verdict::Healthy) => {}
                Some(Verdict::Undecided) | None if !decides => {}
                other => return Err(format!("{observer} holds live {member} {other:?}")),
            }
        }
    }
    for member in unit.honest.iter().filter(|h| !unit.dead.contains(h)) {
        let unhealth = unit.cluster.unhealth(member).await;
        let wrong = if decides { unhealth.is_some() } else { unhealth.as_deref() == Some(NODE_UNHEALTH_YES) };
        if wrong {
            return Err(format!("live {member} annotated {unhealth:?}"));
        }
    }
    Ok(())
}

/// Runs attack rounds for `duration` (a round every 25 ms), checking [`invariants`] every
/// eighth round and `done` after each check; returns when `done` holds, or at the end.
async fn attack<F: std::future::Future<Output = bool>>(
    unit: &Unit,
    duration: Duration,
    mut done: impl FnMut() -> F,
) -> Option<Duration> {
    let started = Instant::now();
    let mut rounds = 0u64;
    while started.elapsed() < duration {
        attack_round(unit).await;
        rounds += 1;
        if rounds.is_multiple_of(8) {
            if let Err(broken) = invariants(unit).await {
                panic!("{}: under attack, after {:?}: {broken}", unit.cluster.unit, started.elapsed());
            }
            if done().await {
                return Some(started.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    None
}

/// The writer's Events (one per verdict written), by the node they are about.
async fn verdicts_written(unit: &Unit) -> BTreeMap<String, usize> {
    let events = Api::<Event>::all(client(&unit.cluster.server)).list(&Default::default()).await.expect("events");
    let mut about = BTreeMap::new();
    for event in events.items {
        if let Some(node) = event.regarding.and_then(|r| r.name) {
            *about.entry(node).or_default() += 1;
        }
    }
    about
}

async fn series_total(unit: &Unit, series: &str) -> f64 {
    unit.cluster.total(&unit.members, series).await
}

/// The whole run for one unit: settle, attack with everyone alive, kill an honest member
/// under attack, keep attacking; the refusals counted.
async fn byzantine(name: &str, size: u8, first_ip: u8, seed: u8) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut unit = unit(name, size, first_ip, seed).await;
    let decides = size >= 4;
    // settled: every honest daemon has published its view, every honest view has every
    // honest member (a unit of 5: healthy), and no live honest member is annotated (the
    // verdicts the writer wrote while the first daemons published alone are cleared)
    let published = || async {
        for member in &unit.honest {
            unit.cluster.annotations(member).await.get(EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION)?;
        }
        Some(())
    };
    until("every honest view published", Duration::from_secs(30), published).await;
    tokio::time::sleep(WRITER_PERIOD * 3).await;
    until("the unit settled", Duration::from_secs(30), || async { invariants(&unit).await.ok() }).await;
    let written_before = verdicts_written(&unit).await;

    // (1) everyone alive, every attack
    publish_lying_view(&unit).await;
    relabel_is_refused(&unit).await;
    attack(&unit, PERIOD * ATTACK_PERIODS, || async { false }).await;
    if decides {
        // not even for a moment between two checks
        assert_eq!(verdicts_written(&unit).await, written_before, "a verdict written about a live member");
    }

    // (2) an honest member dies: its daemon stops, its node's check target stays up (every
    // tcp/http check of it passes), its Ready turns Unknown as the node lifecycle
    // controller would make it; the adversary says it is alive and answers at its address
    let victim = unit.members[1].name.clone();
    let victim_address = unit.cluster.address(&unit.members[1]);
    let daemon = unit.members[1].daemon.take().expect("running");
    let exit = daemon.terminate(PROMPT_EXIT).await.expect("stops");
    assert!(exit.status.success(), "{victim}: {:?}", exit.status);
    set_ready(&unit.cluster, &victim, "Unknown").await;
    unit.adversary.knows_dead(&victim);
    unit.dead.push(victim.clone());
    let _impostor = unit.adversary.impersonate(&victim, victim_address).await;
    let judged = || async {
        let Ok(views) = views(&unit.cluster, &unit.members).await else { return false };
        let unhealth = unit.cluster.unhealth(&victim).await;
        if decides {
            views.values().all(|v| v.get(&victim) == Some(&Verdict::Unhealthy))
                && unhealth.as_deref() == Some(NODE_UNHEALTH_YES)
        } else {
            views.values().all(|v| v.get(&victim).is_some_and(|v| *v != Verdict::Healthy)) && unhealth.is_some()
        }
    };
    let detected = attack(&unit, DETECTION, judged).await;
    let Some(detected) = detected else {
        let views = views(&unit.cluster, &unit.members).await;
        panic!("{name}: dead {victim} not judged within {DETECTION:?}: views {views:?}");
    };
    // ... and stays so, under attack
    attack(&unit, PERIOD * (ATTACK_PERIODS / 3), || async { false }).await;
    assert!(judged().await, "{name}: dead {victim} no longer judged so");
    eprintln!("{name}: the dead member judged {detected:?} after its death, under attack");

    // every kind of forgery was refused and counted by the honest daemons
    for (series, what) in [
        (r#"edge_health_ballots_refused_total{reason="bad_signature"}"#, "ballots forged in others' names"),
        (r#"edge_health_ballots_refused_total{reason="future"}"#, "ballots for a far period"),
        (r#"edge_health_ballots_refused_total{reason="own_ballot"}"#, "ballots in the receiver's own name"),
        (r#"edge_health_messages_rejected_total{reason="bad_signature"}"#, "frames in others' names"),
        (r#"edge_health_messages_rejected_total{reason="future_sequence"}"#, "frames numbered far ahead"),
        (r#"edge_health_messages_rejected_total{reason="replay"}"#, "replayed frames"),
        (r#"edge_health_liveness_proofs_total{result="bad_signature"}"#, "liveness proofs not the target's"),
    ] {
        let counted = series_total(&unit, series).await;
        assert!(counted > 0.0, "{name}: no {what} counted ({series})");
    }
    unit.cluster.stop_all(&mut unit.members).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_of_five_holds_against_an_adversary_running_every_attack() {
    byzantine("bz5", 5, 61, 7).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_of_three_decides_nothing_wrong_under_every_attack() {
    byzantine("bz3", 3, 71, 8).await;
}
