//! One compromised edge node per unit, against the shipped `edge-health` binary on
//! loopback: the attacker holds everything that node holds (the unit's frame key, its own
//! signing key, a Node publishing its address and key) and floods every honest daemon
//! with forged, future, self-claimed and replayed ballots while lying about its own
//! checks. Two units under attack at once keep voting correctly: nobody alive is voted
//! down or annotated, a member that really dies still is, and the refusals are counted.
//! And a re-imaged node (a new signing key) is taken by its running peers once it has
//! published the key, with no wrong verdict meanwhile.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::adversary::{Adversary, PERIOD, PROTOCOL, VOTE_WINDOW, post_frame};
use common::{Cluster, Member, expect, loopback, until, views, views_agree};
use edgegrid_core::keys::EDGE_HEALTH_PUBLIC_KEY_ANNOTATION;
use edgegrid_core::unit::local_verdicts::Verdict;
use tokio::time::Instant;

/// As in `binary.rs`: the window turns over, the next evaluation decides, plus slack.
const DETECTION: Duration = Duration::from_millis(PERIOD.as_millis() as u64 * (VOTE_WINDOW + 2) + 1_500);
/// The two tests run one at a time: each loads the machine (a flood, a unit's restart) and
/// the other's timing would pay for it.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// CPU seconds (user + system) process `pid` used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(") ").map(|(_, rest)| rest.split(' ').collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 11 and 12 after the command
    (ticks(11) + ticks(12)) / 100.0
}

struct Unit {
    cluster: Cluster,
    members: Vec<Member>,
    names: Vec<String>,
    attacker: Adversary,
    /// The API server's requests when the attack starts.
    mark: u64,
}

async fn unit(name: &str, first_ip: u8, seed: u8) -> Unit {
    let ips: Vec<IpAddr> = (first_ip..first_ip + 5).map(loopback).collect();
    let cluster = Cluster::on_loopback(name, &ips, PROTOCOL).await;
    let mut members: Vec<Member> =
        ips[..4].iter().enumerate().map(|(i, ip)| Member::new(format!("{name}-{}", i + 1), *ip)).collect();
    let attacker = Adversary::join(&cluster, &format!("{name}-evil"), ips[4], seed).await;
    let mut names = cluster.start_all(&mut members).await;
    cluster.ready(&mut members).await;
    names.push(attacker.name.clone());
    names.sort();
    Unit { cluster, members, names, attacker, mark: 0 }
}

/// Every honest running member's frames for a round, sent at once.
async fn attack_round(unit: &mut Unit) {
    let mut sends = Vec::new();
    for member in unit.members.iter().filter(|m| m.daemon.is_some()) {
        let address = unit.cluster.address(member);
        for frame in unit.attacker.ballot_frames(&member.name, &unit.names) {
            sends.push(post_frame(address, frame));
        }
        // and a frame it already sent, byte for byte
        if let Some(old) = unit.attacker.last_captured() {
            sends.push(post_frame(address, old));
        }
    }
    futures::future::join_all(sends).await;
}

async fn series_total(unit: &Unit, series: &str) -> f64 {
    unit.cluster.total(&unit.members, series).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_units_keep_voting_correctly_with_one_attacker_in_each() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut units = vec![unit("ua", 31, 1).await, unit("ub", 41, 2).await];
    for unit in &mut units {
        unit.cluster.until_healthy(&unit.members, &unit.names).await;
        // members written "undecided" before their peers had heard from them: cleared
        for name in &unit.names {
            let (cluster, name) = (&unit.cluster, name.clone());
            until("nobody annotated", Duration::from_secs(5), || async {
                cluster.unhealth(&name).await.is_none().then_some(())
            })
            .await;
        }
        unit.mark = unit.cluster.server.requests().mark();
    }
    let cpu_before: Vec<f64> =
        units.iter().flat_map(|u| u.members.iter().map(|m| cpu_seconds(m.daemon.as_ref().unwrap().pid()))).collect();
    let started = Instant::now();
    let mut rounds = 0u64;

    // (1) twenty periods of attack, a round every 25 ms: no honest view holds an honest
    // member anything but healthy (checked between rounds), no honest member is annotated.
    // The attacker itself may lose its standing: its flood spends its own frame budget at
    // every receiver, its liveness proofs included
    while started.elapsed() < PERIOD * 20 {
        for unit in &mut units {
            attack_round(unit).await;
        }
        rounds += 1;
        if rounds.is_multiple_of(2) {
            for unit in &units {
                let views = views(&unit.cluster, &unit.members).await.expect("views");
                for (observer, view) in &views {
                    let down: Vec<&String> = view
                        .iter()
                        .filter(|(n, v)| **v != Verdict::Healthy && **n != unit.attacker.name)
                        .map(|(n, _)| n)
                        .collect();
                    if !down.is_empty() {
                        let tallies = common::not_healthy_tallies(&unit.cluster, &unit.members).await;
                        panic!("{observer} holds {down:?} other than healthy under attack:\n{tallies}");
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let attacked = started.elapsed();
    for unit in &units {
        let wrong = unit.cluster.unhealthy_ballots_by_basis(&unit.members).await;
        eprintln!("{}: unhealthy ballots the honest members cast so far, by basis: {wrong:?}", unit.cluster.unit);
    }
    let cpu_after: Vec<f64> =
        units.iter().flat_map(|u| u.members.iter().map(|m| cpu_seconds(m.daemon.as_ref().unwrap().pid()))).collect();
    for unit in &units {
        let views = views(&unit.cluster, &unit.members).await.expect("views");
        for (observer, view) in &views {
            if view.iter().any(|(n, v)| *n != unit.attacker.name && *v != Verdict::Healthy) {
                let tallies = common::not_healthy_tallies(&unit.cluster, &unit.members).await;
                panic!("{}: {observer} holds an honest member other than healthy:\n{tallies}", unit.cluster.unit);
            }
        }
        for name in unit.names.iter().filter(|n| **n != unit.attacker.name) {
            assert_eq!(unit.cluster.unhealth(name).await, None, "{name} annotated");
        }
        for (series, what) in [
            (r#"edge_health_ballots_refused_total{reason="bad_signature"}"#, "forged ballots"),
            (r#"edge_health_ballots_refused_total{reason="future"}"#, "ballots for a far period"),
            (r#"edge_health_ballots_refused_total{reason="own_ballot"}"#, "ballots claiming to be the receiver's"),
            ("edge_health_frames_dropped_for_forgeries_total", "frames cut short"),
            (r#"edge_health_messages_rejected_total{reason="replay"}"#, "replayed frames"),
        ] {
            let counted = series_total(unit, series).await;
            assert!(counted > 0.0, "{}: no {what} counted ({series})", unit.cluster.unit);
        }
        // the honest ones were all taken: every honest member's verdict has a majority
        // behind it, so nothing was written about one under attack
        for name in unit.names.iter().filter(|n| **n != unit.attacker.name) {
            let written = unit.cluster.patches(name, unit.mark).0;
            assert_eq!(
                written,
                0,
                "{name}: a verdict written under attack:\n{}",
                common::verdict_log(&unit.members, name)
            );
        }
    }
    let cpu: Vec<String> = cpu_before
        .iter()
        .zip(&cpu_after)
        .map(|(b, a)| format!("{:.0}%", (a - b) / attacked.as_secs_f64() * 100.0))
        .collect();
    eprintln!("{rounds} attack rounds in {attacked:?}; CPU of each honest daemon meanwhile: {cpu:?}");

    // (2) a member of each unit dies under the attack (which now says it is alive): it is
    // still voted down and annotated, and nobody else is
    let victims: Vec<String> = units.iter().map(|u| u.members[1].name.clone()).collect();
    for (unit, victim) in units.iter_mut().zip(&victims) {
        let member = unit.members.iter_mut().find(|m| &m.name == victim).unwrap();
        member.stop().await;
        unit.attacker.knows_dead(victim);
    }
    let died = Instant::now();
    loop {
        for unit in &mut units {
            attack_round(unit).await;
        }
        let mut annotated = 0;
        for (unit, victim) in units.iter().zip(&victims) {
            annotated += usize::from(unit.cluster.unhealth(victim).await.as_deref() == Some("yes"));
        }
        if annotated == units.len() {
            break;
        }
        assert!(died.elapsed() < DETECTION, "the dead members were not annotated under attack within {DETECTION:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    for (unit, victim) in units.iter().zip(&victims) {
        // the attacker's own standing aside (see above)
        until("the survivors' views agree", Duration::from_secs(5), || async {
            let views = views(&unit.cluster, &unit.members).await.ok()?;
            let right = views.values().all(|view| {
                view.iter().filter(|(n, _)| **n != unit.attacker.name).all(|(node, verdict)| {
                    *verdict == if node == victim { Verdict::Unhealthy } else { Verdict::Healthy }
                })
            });
            right.then_some(())
        })
        .await;
        for name in unit.names.iter().filter(|n| *n != victim && **n != unit.attacker.name) {
            assert_eq!(unit.cluster.unhealth(name).await, None, "{name} annotated");
        }
    }
    for unit in &mut units {
        unit.cluster.stop_all(&mut unit.members).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reimaged_node_is_taken_with_its_new_key_by_its_running_peers() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let ips: Vec<IpAddr> = (51..=54).map(loopback).collect();
    let cluster = Cluster::on_loopback("uk", &ips, PROTOCOL).await;
    let mut members: Vec<Member> =
        ips.iter().enumerate().map(|(i, ip)| Member::new(format!("uk-{}", i + 1), *ip)).collect();
    let names = cluster.start_all(&mut members).await;
    cluster.ready(&mut members).await;
    cluster.until_healthy(&members, &names).await;
    let old_key = cluster.annotations("uk-2").await.get(EDGE_HEALTH_PUBLIC_KEY_ANNOTATION).cloned().expect("published");
    let key_file = cluster.dir.join("uk-2.signing-key");
    assert!(key_file.exists());

    // every view is checked all along: nobody but uk-2 is ever held unhealthy (uk-2 proves
    // it is alive with its key: while its daemon is away, or its new key is not yet
    // published, its peers' challenges fail)
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let wrong: Arc<Mutex<Vec<String>>> = Arc::default();
    let addresses: Vec<(String, SocketAddr)> =
        members.iter().filter(|m| m.name != "uk-2").map(|m| (m.name.clone(), cluster.address(m))).collect();
    let watcher = {
        let (watching, wrong) = (watching.clone(), wrong.clone());
        tokio::spawn(async move {
            while watching.load(std::sync::atomic::Ordering::SeqCst) {
                for (observer, address) in &addresses {
                    if let Some(view) = common::verdicts(*address).await {
                        for (node, verdict) in view.nodes {
                            if verdict.verdict == Verdict::Unhealthy && node != "uk-2" {
                                wrong.lock().unwrap().push(format!("{observer} held {node} unhealthy"));
                            }
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    // re-imaged: the daemon stops (its node's kubelet stays up), the key is gone, the
    // daemon starts again and makes a new one
    let daemon = members[1].daemon.take().expect("running");
    daemon.terminate(Duration::from_secs(5)).await.expect("stops");
    std::fs::remove_file(&key_file).expect("remove the key");
    cluster.start_daemon(&mut members[1]);
    let new_key = until("the new key published", Duration::from_secs(10), || async {
        cluster.annotations("uk-2").await.get(EDGE_HEALTH_PUBLIC_KEY_ANNOTATION).filter(|k| **k != old_key).cloned()
    })
    .await;
    assert_ne!(new_key, old_key);
    // the peers see it through their Node watch: within a period no honest ballot is refused
    tokio::time::sleep(PERIOD * 2).await;
    let bad = r#"edge_health_ballots_refused_total{reason="bad_signature"}"#;
    let after_publication = cluster.total(&members, bad).await;
    tokio::time::sleep(PERIOD * 6).await;
    assert_eq!(cluster.total(&members, bad).await, after_publication, "an honest ballot refused after publication");
    let healthy = expect(&names, &[]);
    until("every view healthy", Duration::from_secs(5), || views_agree(&cluster, &members, &healthy)).await;
    watching.store(false, std::sync::atomic::Ordering::SeqCst);
    watcher.await.expect("watcher");
    assert_eq!(wrong.lock().unwrap().clone(), Vec::<String>::new(), "a wrong verdict during the rollover");
    eprintln!("ballots refused for a bad signature while the new key was not yet published: {after_publication}");
    cluster.stop_all(&mut members).await;
}
