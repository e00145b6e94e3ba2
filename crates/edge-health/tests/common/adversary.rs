//! One compromised member of a unit, as the end-to-end attack tests run it against real
//! daemons: it holds everything that node holds (the unit's frame key, its own signing key,
//! a Node publishing its address and key) and nothing else, so every frame it sends is
//! sealed with the unit key and signed with its own node key, whatever name it writes in
//! it. It looks alive (a listener on its exchange address answering its peers' challenges
//! with its own key, and a check target), and it lies: about every check it makes (the
//! members it knows are dead are alive, the live ones dead), as a helper asked about a peer,
//! in other members' names (ballots, probe answers, frames numbered to mute them), with
//! replays of what honest members sent it, and at a dead member's address.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::{get, post};
use edge_health::ballot::{Ballot, SignedBallot};
use edge_health::liveness::{self, Nonce};
use edge_health::message::{HmacKey, Message, Payload, seal_message};
use edge_health::node_key::SigningKey;
use edge_health::relay::BallotsByChecker;
use edge_health::time::{Period, Timestamp};
use edgegrid_core::keys::{EDGE_HEALTH_ADDRESS_ANNOTATION, EDGE_HEALTH_PUBLIC_KEY_ANNOTATION};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::{CheckTarget, Cluster, KEY, Protocol, Target, client};

/// The attack tests' period: every probe is a liveness challenge the target's daemon
/// answers, and a flood keeps the daemons busy on two cores. Its timeouts leave a starved
/// daemon (ten processes and a flood on two cores, debug builds) a few hundred ms: at a
/// 600 ms period with 150 ms checks, 200 ms messages and a 300 ms indirect deadline, an
/// honest member stalled for about a second on a loaded machine was voted down by its two
/// honest peers' timeouts and the liar (one run in two with two more busy processes,
/// honest unhealthy ballots counted by basis; once in CI).
pub const PERIOD: Duration = Duration::from_millis(1_000);
pub const VOTE_WINDOW: u64 = 3;
/// Every member checks every other each period: with the adversary one of a unit of five,
/// it is one of every target's four checkers, and a death leaves each survivor three.
pub const PROTOCOL: Protocol = Protocol {
    period: PERIOD,
    vote_window: VOTE_WINDOW,
    probes_per_period: 4,
    indirect_helpers: 2,
    // a helper challenges the target (one message) and runs the check within it
    indirect_timeout: Duration::from_millis(500),
    message_timeout: Duration::from_millis(300),
    check_timeout: Duration::from_millis(300),
    check_retries: 0,
};

/// Posts one frame to a daemon's exchange: its status, `None` when it did not answer
/// within 500 ms.
pub async fn post_frame(address: SocketAddr, frame: Vec<u8>) -> Option<u16> {
    let post = super::http_post(address, "/exchange", &frame);
    tokio::time::timeout(Duration::from_millis(500), post).await.ok().flatten().map(|(status, _)| status)
}

pub fn now() -> Timestamp {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
    Timestamp::from_unix_millis(since.as_millis() as u64)
}

/// A probe request an honest checker sent the adversary as its helper.
#[derive(Clone, Debug)]
pub struct Asked {
    pub asker: String,
    pub id: u64,
    pub target: String,
    pub nonce: Nonce,
}

/// What the adversary's listeners share with it.
#[derive(Default)]
struct Seen {
    /// Frames honest members sent it (not challenges nor probe requests).
    frames: Vec<Vec<u8>>,
    /// Probe requests it was asked, not yet answered in other helpers' names.
    asked: Vec<Asked>,
    /// Members it knows are dead: it says they are alive.
    dead: Vec<String>,
}

pub struct Adversary {
    pub name: String,
    key: Arc<SigningKey>,
    period: Duration,
    seen: Arc<Mutex<Seen>>,
    /// Its frames' sequence numbers (its listeners' answers included).
    sequence: Arc<AtomicU64>,
    _listener: tokio::task::JoinHandle<()>,
    _target: Target,
}

impl Adversary {
    /// Node `name` at `ip` in `cluster`'s unit, with signing key `[seed; 32]`: its Node
    /// (address and key published, Ready), its exchange listener and its check target.
    pub async fn join(cluster: &Cluster, name: &str, ip: IpAddr, seed: u8) -> Self {
        let key = Arc::new(SigningKey::from_seed(&[seed; 32]));
        let address = SocketAddr::new(ip, cluster.exchange_port);
        let node: Node = serde_json::from_value(json!({"metadata": {
            "name": name,
            "labels": {"site": cluster.unit},
            "annotations": {
                EDGE_HEALTH_ADDRESS_ANNOTATION: address.to_string(),
                EDGE_HEALTH_PUBLIC_KEY_ANNOTATION: key.public_key().to_annotation(),
            },
        }}))
        .expect("node");
        Api::<Node>::all(client(&cluster.server)).create(&PostParams::default(), &node).await.expect("create node");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let sequence = Arc::new(AtomicU64::new(now().as_unix_millis() * 1000));
        let router = {
            let (seen, sequence, key, me) = (seen.clone(), sequence.clone(), key.clone(), name.to_string());
            axum::Router::new()
                .route(
                    "/exchange",
                    post(move |body: axum::body::Bytes| async move {
                        let next = sequence.fetch_add(1, Ordering::SeqCst) + 1;
                        if let Some(proof) = super::answer_challenge(&body, &me, &key, next) {
                            return (axum::http::StatusCode::OK, proof);
                        }
                        if let Some(asked) = asked_of(&body) {
                            // true-but-lying: in its own name, a dead peer reachable with a
                            // "proof" it signed itself, a live one unreachable
                            let dead = seen.lock().unwrap().dead.contains(&asked.target);
                            let answer = lying_answer(&key, &asked, dead);
                            let message = message(&me, next, Some(asked.asker.clone()), answer);
                            seen.lock().unwrap().asked.push(asked);
                            return (axum::http::StatusCode::OK, seal_message(&unit_key(), &key, &message));
                        }
                        seen.lock().unwrap().frames.push(body.to_vec());
                        (axum::http::StatusCode::NO_CONTENT, Vec::new())
                    }),
                )
                .route("/healthz", get(|| async { "ok" }))
        };
        let listener = tokio::net::TcpListener::bind(address).await.expect("bind the adversary's exchange");
        let listener = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        let CheckTarget::Own { port } = cluster.check else { panic!("the attacks run with own check targets") };
        let target = Target::start(SocketAddr::new(ip, port)).await;
        let period = cluster.protocol.period;
        Self { name: name.into(), key, period, seen, sequence, _listener: listener, _target: target }
    }

    /// From now on it says `dead` is alive (and answers for it as a helper).
    pub fn knows_dead(&self, dead: &str) {
        self.seen.lock().unwrap().dead.push(dead.to_string());
    }

    fn next_sequence(&self) -> u64 {
        self.sequence.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn current_period(&self) -> Period {
        Period(now().as_unix_millis() / self.period.as_millis() as u64)
    }

    /// A frame in its own name.
    fn seal(&self, recipient: Option<String>, payload: Payload) -> Vec<u8> {
        seal_message(&unit_key(), &self.key, &message(&self.name, self.next_sequence(), recipient, payload))
    }

    /// The signed ballots honest members sent it.
    fn captured_ballots(&self) -> BallotsByChecker {
        let mut out = BallotsByChecker::new();
        for frame in &self.seen.lock().unwrap().frames {
            let Ok(frame) = serde_json::from_slice::<serde_json::Value>(frame) else { continue };
            let Ok(message) = serde_json::from_value::<Message>(frame["body"].clone()) else { continue };
            if let Payload::Results { ballots } = message.payload {
                for (checker, by_target) in ballots {
                    out.entry(checker).or_default().extend(by_target);
                }
            }
        }
        out
    }

    /// The last frame an honest member sent it, byte for byte.
    pub fn last_captured(&self) -> Option<Vec<u8>> {
        self.seen.lock().unwrap().frames.last().cloned()
    }

    /// Its ballot frames for `receiver` (of the unit's `members`), each ballot the opposite
    /// of the truth: in every other checker's name (forged), for the next period (future)
    /// and a far one, in the receiver's own name (claimed), in its own name (its lies), and
    /// the honest ballots it captured (replayed).
    pub fn ballot_frames(&self, receiver: &str, members: &[String]) -> Vec<Vec<u8>> {
        let period = self.current_period();
        let dead = self.seen.lock().unwrap().dead.clone();
        let lie = |target: &String, period: Period| Ballot { period, healthy: dead.contains(target) };
        let others: Vec<&String> = members.iter().filter(|m| **m != self.name).collect();
        let (mut forged, mut future, mut claimed) =
            (BallotsByChecker::new(), BallotsByChecker::new(), BallotsByChecker::new());
        let (mut own, mut far) = (BallotsByChecker::new(), BallotsByChecker::new());
        let sign =
            |checker: &str, target: &str, ballot: Ballot| -> SignedBallot { self.key.sign(checker, target, ballot) };
        for target in members {
            for checker in others.iter().filter(|c| **c != target) {
                let by = |b: &mut BallotsByChecker, ballot: Ballot| {
                    b.entry((*checker).clone()).or_default().insert(target.clone(), sign(checker, target, ballot));
                };
                by(&mut forged, lie(target, period));
                by(&mut future, lie(target, period.next()));
                if checker.as_str() == receiver {
                    by(&mut claimed, lie(target, period));
                }
            }
            if *target != self.name {
                let signed = sign(&self.name, target, lie(target, period));
                own.entry(self.name.clone()).or_default().insert(target.clone(), signed);
                let ahead = sign(&self.name, target, lie(target, Period(period.0 + 5)));
                far.entry(self.name.clone()).or_default().insert(target.clone(), ahead);
            }
        }
        let replayed = self.captured_ballots();
        [forged, future, far, claimed, own, replayed]
            .into_iter()
            .filter(|b| !b.is_empty())
            .map(|ballots| self.seal(None, Payload::Results { ballots }))
            .collect()
    }

    /// Frames in `victim`'s name numbered ahead of its own (in its daemon's numbering,
    /// microseconds since the epoch: 2 s ahead, within the clock skew a receiver allows, so
    /// only the signature refuses it; a minute ahead; the last sequence there is): accepted,
    /// one would make every real frame of the victim's a replay.
    pub fn muting_frames(&self, victim: &str) -> Vec<Vec<u8>> {
        let ahead = |ms: u64| (now().as_unix_millis() + ms) * 1000;
        [ahead(2_000), ahead(60_000), u64::MAX - 1]
            .into_iter()
            .map(|sequence| {
                let payload = Payload::Results { ballots: BallotsByChecker::new() };
                seal_message(&unit_key(), &self.key, &message(victim, sequence, None, payload))
            })
            .collect()
    }

    /// For each probe request it was asked since the last call, the same lie in the name of
    /// every other helper (`helpers`), addressed to the asker: `(asker, frame)`.
    pub fn answers_in_others_names(&self, helpers: &[String]) -> Vec<(String, Vec<u8>)> {
        let (asked, dead) = {
            let mut seen = self.seen.lock().unwrap();
            (std::mem::take(&mut seen.asked), seen.dead.clone())
        };
        let mut out = Vec::new();
        for asked in asked {
            for helper in helpers.iter().filter(|h| **h != self.name && **h != asked.asker && **h != asked.target) {
                let answer = lying_answer(&self.key, &asked, dead.contains(&asked.target));
                let message = message(helper, self.next_sequence(), Some(asked.asker.clone()), answer);
                out.push((asked.asker.clone(), seal_message(&unit_key(), &self.key, &message)));
            }
        }
        out
    }

    /// Binds the exchange address of dead member `dead` (its daemon stopped, its node's
    /// kubelet maybe still up) and answers every challenge there in the dead member's name
    /// with a "proof" it signed itself.
    pub async fn impersonate(&self, dead: &str, address: SocketAddr) -> tokio::task::JoinHandle<()> {
        let (key, sequence, as_dead) = (self.key.clone(), self.sequence.clone(), dead.to_string());
        let router = axum::Router::new().route(
            "/exchange",
            post(move |body: axum::body::Bytes| async move {
                let next = sequence.fetch_add(1, Ordering::SeqCst) + 1;
                match super::answer_challenge(&body, &as_dead, &key, next) {
                    Some(proof) => (axum::http::StatusCode::OK, proof),
                    None => (axum::http::StatusCode::NO_CONTENT, Vec::new()),
                }
            }),
        );
        // the dead daemon's socket may linger a moment
        let listener = super::until("the dead member's address free", Duration::from_secs(5), || async {
            tokio::net::TcpListener::bind(address).await.ok()
        })
        .await;
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        })
    }
}

fn unit_key() -> HmacKey {
    HmacKey::new(KEY).expect("key")
}

fn message(sender: &str, sequence: u64, recipient: Option<String>, payload: Payload) -> Message {
    Message { sender: sender.into(), timestamp: now(), sequence, recipient, payload }
}

/// The probe request in `frame`, if it is one.
fn asked_of(frame: &[u8]) -> Option<Asked> {
    let value: serde_json::Value = serde_json::from_slice(frame).ok()?;
    let body = &value["body"];
    let request = &body["payload"]["probeRequest"];
    Some(Asked {
        asker: body["sender"].as_str()?.into(),
        id: request["id"].as_u64()?,
        target: request["target"].as_str()?.into(),
        nonce: serde_json::from_value(request["nonce"].clone()).ok()?,
    })
}

/// A helper's answer saying the opposite of the truth: a dead target reachable, with a
/// "proof" over the asker's nonce signed with `key` (the liar's: it has no other).
fn lying_answer(key: &SigningKey, asked: &Asked, dead: bool) -> Payload {
    Payload::ProbeAnswer {
        id: asked.id,
        target: asked.target.clone(),
        reachable: dead,
        proof: dead.then(|| liveness::prove(key, &asked.target, &asked.asker, asked.nonce)),
    }
}
