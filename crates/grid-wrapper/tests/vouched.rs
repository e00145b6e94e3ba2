//! Vouched sharing end to end, in process over HTTP and TLS on loopback addresses: the
//! fake API server as the cloud, the unit signer, and a unit of two wrappers (`n1` leads,
//! `n2` follows) whose follower checks every stream against the signer's batches. A
//! compromised leader (it holds `n1`'s key and serves what it likes) puts a forged
//! EndpointSlice into what it serves: the follower never serves it, passes the leader
//! over and serves the cloud's view.

mod common;
#[path = "common/unit_site.rs"]
mod unit_site;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use common::*;
use edgegrid_core::vouch::VoucherConfig;
use edgegrid_testing::link::Link;
use edgegrid_testing::objects::slice_object;
use ring::signature::{Ed25519KeyPair, KeyPair};
use unit_link::metrics::ResultLabel;
use unit_link::upstream_log::{UpstreamInput, UpstreamKind};
use unit_link::vouched::{VouchConfig, Vouching};
use unit_signer::{SignerConfig, SignerMetrics};
use unit_site::{Member, Running, free_unit_port, key_document, start};

const NAMESPACE: &str = "edgegrid";

struct Site {
    _server: fake_apiserver::FakeApiServer,
    cloud: kube::Client,
    leader: Running,
    follower: Running,
    /// The leader's link to the cloud (fault injection).
    leader_link: edgegrid_testing::link::Link,
    _follower_link: edgegrid_testing::link::Link,
    _signer: tokio::task::JoinHandle<()>,
}

/// The cloud with its signer, and `n1` leading `n2`, which checks (`gated`) or not.
async fn site(gated: bool) -> Site {
    site_with(gated, FollowerKeys::Signer, Duration::from_secs(2)).await
}

/// What the follower takes for the signer's key.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FollowerKeys {
    Signer,
    /// A key that is not the signer's (an operator's mistake).
    Wrong,
}

/// [`site`] with the follower's keys and the patience of both.
async fn site_with(gated: bool, follower_keys: FollowerKeys, patience: Duration) -> Site {
    let (server, cloud) = two_unit_cluster().await;
    create_namespace(&cloud, NAMESPACE).await;
    let signing = Ed25519KeyPair::from_pkcs8(&key_document()).expect("a key");
    let public: [u8; 32] = signing.public_key().as_ref().try_into().expect("32 bytes");
    let config =
        SignerConfig { namespace: NAMESPACE.into(), unit_label_key: "unit".into(), period: Duration::from_millis(200) };
    let signer = tokio::spawn(unit_signer::run(
        cloud.clone(),
        Arc::new(signing),
        config,
        SignerMetrics::default(),
        std::future::pending(),
    ));
    let vouching_with = |key: [u8; 32]| {
        Arc::new(Vouching::new(VouchConfig {
            namespace: NAMESPACE.into(),
            voucher: VoucherConfig {
                keys: vec![key],
                max_skew: Duration::from_secs(30),
                window: Duration::from_secs(3),
            },
            patience,
        }))
    };
    let wrong = Ed25519KeyPair::from_pkcs8(&key_document()).expect("a key");
    let follower_key = match follower_keys {
        FollowerKeys::Signer => public,
        FollowerKeys::Wrong => wrong.public_key().as_ref().try_into().expect("32 bytes"),
    };
    let vouching = || vouching_with(public);
    let (n1, n2) = (Member::new("n1", 71), Member::new("n2", 72));
    let peers = [n1.as_unit_member(), n2.as_unit_member()];
    let port = free_unit_port(&[&n1, &n2]);
    let (leader_link, follower_link) =
        (Link::to(server.addr()).await.expect("a link"), Link::to(server.addr()).await.expect("a link"));
    let url = |link: &Link| format!("http://{}", link.address);
    let leader = start(&n1, &peers, &url(&leader_link), port, Some(vouching())).await;
    let follower = start(&n2, &peers, &url(&follower_link), port, gated.then(|| vouching_with(follower_key))).await;
    // (a decision is made before the wrappers know their unit: they watch the cloud alone
    // until then, whatever the metrics say)
    if follower_keys == FollowerKeys::Signer {
        eventually("n2 follows n1 and serves the cloud's slices", || async {
            let following = follower.source("leader") == 1 && leader.unit.slot.current().is_some();
            let checked = !gated || taken(&follower) > 0;
            (following && checked && follower.served_slices() == ["plain-1", "web-1", "web-2"]).then_some(())
        })
        .await;
    }
    Site { _server: server, cloud, leader, follower, leader_link, _follower_link: follower_link, _signer: signer }
}

/// Batches the follower took from its leader.
fn taken(follower: &Running) -> u64 {
    follower.wrapper.metrics().link.unit_vouch_batches.get_or_create(&ResultLabel { result: "taken" }).get()
}

#[tokio::test]
async fn a_follower_serves_what_the_signer_vouched_for_through_its_leader() {
    let site = site(true).await;
    // a change in the cloud reaches the follower through the leader, once vouched for
    create_namespaced(&site.cloud, slice_object("web-3", "web", &[("10.0.0.9", "n2")])).await;
    eventually("web-3 served by the follower", || async {
        (site.follower.served_slices() == ["plain-1", "web-1", "web-2", "web-3"]).then_some(())
    })
    .await;
    assert_eq!(site.follower.source("leader"), 1, "still following");
}

/// What the compromised leader serves: a slice the cloud does not hold, pointing the
/// unit's `web` at an address of its choosing.
fn forge(leader: &Running) {
    let log = leader.unit.slot.current().expect("n1 leads");
    let forged = serde_json::to_value(slice_object("evil-1", "web", &[("10.6.6.6", "n2")])).expect("json");
    log.apply(UpstreamInput::Upsert(UpstreamKind::EndpointSlices, forged)).expect("into the log");
}

#[tokio::test]
async fn a_follower_never_serves_what_a_compromised_leader_forged_and_leaves_it() {
    let site = site(true).await;
    forge(&site.leader);
    // the gate holds the forged state (never served meanwhile); after its patience the
    // follower gives n1 up
    eventually("n2 passes n1 over and watches the cloud", || async {
        assert_eq!(site.follower.served_slices(), ["plain-1", "web-1", "web-2"], "the forged slice served");
        (site.follower.source("cloud") == 1).then_some(())
    })
    .await;
    // meanwhile and after, never the forged slice
    for _ in 0..20 {
        assert_eq!(site.follower.served_slices(), ["plain-1", "web-1", "web-2"]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Without the check, the same forgery reaches the follower's kube-proxy: what the gate
/// guards against.
#[tokio::test]
async fn an_unchecked_follower_serves_what_its_leader_forged() {
    let site = site(false).await;
    forge(&site.leader);
    eventually("the forged slice served", || async {
        site.follower.served_slices().contains(&"evil-1".to_string()).then_some(())
    })
    .await;
}

/// A leader that withholds (here: its cloud link is cut, so it has neither the change
/// nor new batches; a compromised one could do the same on purpose): the state its
/// follower serves is no longer vouched for after the window, and after the patience the
/// follower leaves it and serves the change from the cloud itself.
#[tokio::test]
async fn a_follower_leaves_a_leader_that_withholds_what_the_signer_vouches_for() {
    let site = site(true).await;
    site.leader_link.set_cut(true);
    create_namespaced(&site.cloud, slice_object("web-3", "web", &[("10.0.0.9", "n2")])).await;
    eventually("n2 leaves n1 and serves the change from the cloud", || async {
        let served = site.follower.served_slices() == ["plain-1", "web-1", "web-2", "web-3"];
        (served && site.follower.source("cloud") == 1).then_some(())
    })
    .await;
}

/// Refused batches of the signer, by result label.
fn refused(follower: &Running, result: &'static str) -> u64 {
    follower.wrapper.metrics().link.unit_vouch_batches.get_or_create(&ResultLabel { result }).get()
}

/// A follower given a key that is not the signer's refuses every batch, and so would every
/// other member: it watches the cloud alone at once (the cloud's copy of the batch is
/// refused too), without waiting out the patience (60 s here) and without passing its
/// leader over (it does not lead instead), and says so in a metric.
#[tokio::test]
async fn a_follower_whose_keys_verify_no_batch_watches_the_cloud_at_once() {
    let site = site_with(true, FollowerKeys::Wrong, Duration::from_secs(60)).await;
    eventually("n2 refuses n1's batches and watches the cloud alone", || async {
        let metrics = &site.follower.wrapper.metrics().link;
        let alone = site.follower.source("cloud") == 1 && metrics.unit_leading.get() == 0;
        (alone && refused(&site.follower, "signature") > 0 && metrics.unit_vouch_keys_refused.get() == 1).then_some(())
    })
    .await;
    assert_eq!(site.follower.source("leader"), 0);
    create_namespaced(&site.cloud, slice_object("web-3", "web", &[("10.0.0.9", "n2")])).await;
    eventually("web-3 served from the cloud", || async {
        (site.follower.served_slices() == ["plain-1", "web-1", "web-2", "web-3"]).then_some(())
    })
    .await;
    assert_eq!(site.follower.source("cloud"), 1, "still alone: the keys' wait is 30 s");
}

/// A compromised leader serving a batch of its own making (its key is not the signer's):
/// the cloud's copy verifies, so the fault is the leader's, and the follower passes it
/// over at once (here it then leads itself, the unit's only other member); its keys are
/// not said to be refused.
#[tokio::test]
async fn a_follower_passes_over_a_leader_serving_a_batch_the_signer_did_not_sign() {
    let site = site_with(true, FollowerKeys::Signer, Duration::from_secs(60)).await;
    let log = site.leader.unit.slot.current().expect("n1 leads");
    let forged = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": edgegrid_core::vouch::BATCH_CONFIG_MAP, "namespace": NAMESPACE},
        "data": {
            (edgegrid_core::vouch::BATCH_DATA_KEY): "{}",
            (edgegrid_core::vouch::SIGNATURE_DATA_KEY): base64::engine::general_purpose::STANDARD.encode([7u8; 64]),
        },
    });
    log.apply(UpstreamInput::Upsert(UpstreamKind::Digests, forged)).expect("into the log");
    eventually("n2 passes n1 over and leads", || async {
        (site.follower.wrapper.metrics().link.unit_leading.get() == 1).then_some(())
    })
    .await;
    assert_eq!(site.follower.wrapper.metrics().link.unit_vouch_keys_refused.get(), 0);
    assert!(refused(&site.follower, "signature") > 0);
}
