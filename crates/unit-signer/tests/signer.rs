//! The unit signer against the fake API server over HTTP: its batches verify with its
//! key, and vouch for exactly the states a follower computes from the same objects (read
//! here with a kube client, as a follower reads them through its leader).

use std::sync::Arc;
use std::time::{Duration, Instant};

use edgegrid_core::vouch::{
    self, BATCH_CONFIG_MAP, BATCH_DATA_KEY, Batch, KeyedSet, SIGNATURE_DATA_KEY, SignedBatch, StateDigest, Voucher,
    VoucherConfig, hex, metadata_element, object_element,
};
// the fake API server's two-unit cluster and the waits, as grid-wrapper's tests have them
use edgegrid_testing::cluster::*;
use edgegrid_testing::objects::slice_object;
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube::core::PartialObjectMeta;
use kube::{Client, ResourceExt};
use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair};
use unit_signer::{SignerConfig, SignerMetrics};

const NAMESPACE: &str = "edgegrid";

fn signing_key() -> Ed25519KeyPair {
    let document = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("a key");
    Ed25519KeyPair::from_pkcs8(document.as_ref()).expect("the key")
}

/// The latest batch in the ConfigMap, if any.
async fn latest_batch(client: &Client) -> Option<SignedBatch> {
    let configmap = Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE).get_opt(BATCH_CONFIG_MAP).await.ok()??;
    let data = configmap.data?;
    Some(SignedBatch { batch: data.get(BATCH_DATA_KEY)?.clone(), signature: data.get(SIGNATURE_DATA_KEY)?.clone() })
}

/// What a follower computes for a stream from `objects` (name, element).
fn digest_of(elements: impl IntoIterator<Item = (String, [u8; 32])>) -> StateDigest {
    let mut set = KeyedSet::default();
    for (key, element) in elements {
        set.put(key, element);
    }
    set.digest()
}

/// Every stream's current state, as a follower reading `client` computes it (of the
/// units, `units`).
async fn expected_states(client: &Client, units: &[&str]) -> Vec<(String, StateDigest)> {
    let params = ListParams::default();
    let key = |ns: Option<String>, name: String| format!("{}/{name}", ns.unwrap_or_default());
    let services = Api::<Service>::all(client.clone()).list(&params).await.expect("services");
    let slices = Api::<EndpointSlice>::all(client.clone()).list(&params).await.expect("slices");
    let endpoints = Api::<Endpoints>::all(client.clone()).list(&params).await.expect("endpoints");
    let metadata = Api::<PartialObjectMeta<Node>>::all(client.clone()).list(&params).await.expect("metadata");
    let mut states = vec![
        (
            vouch::SERVICES.to_string(),
            digest_of(services.iter().map(|o| (key(o.namespace(), o.name_any()), object_element(vouch::SERVICES, o)))),
        ),
        (
            vouch::ENDPOINT_SLICES.to_string(),
            digest_of(
                slices.iter().map(|o| (key(o.namespace(), o.name_any()), object_element(vouch::ENDPOINT_SLICES, o))),
            ),
        ),
        (
            vouch::ENDPOINTS.to_string(),
            digest_of(
                endpoints.iter().map(|o| (key(o.namespace(), o.name_any()), object_element(vouch::ENDPOINTS, o))),
            ),
        ),
        (
            vouch::NODE_METADATA.to_string(),
            digest_of(metadata.iter().map(|o| (o.name_any(), metadata_element(vouch::NODE_METADATA, &o.metadata)))),
        ),
    ];
    for unit in units {
        let stream = vouch::unit_nodes(unit);
        let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default().labels(&format!("unit={unit}"))).await;
        let nodes = nodes.expect("unit nodes");
        states.push((stream.clone(), digest_of(nodes.iter().map(|n| (n.name_any(), object_element(&stream, n))))));
    }
    states
}

/// Waits until a batch verified by `voucher` names, as each stream's current state, what
/// a follower computes now.
async fn until_vouched(client: &Client, voucher: &mut Voucher, what: &str) -> Batch {
    until_vouched_units(client, voucher, &["a", "b"], what).await
}

/// [`until_vouched`] for the units `units` (each unit's state may be in another batch:
/// the signer names unchanged units in turns).
async fn until_vouched_units(client: &Client, voucher: &mut Voucher, units: &[&str], what: &str) -> Batch {
    let expected = expected_states(client, units).await;
    let mut latest = std::collections::BTreeMap::new();
    within(what, async {
        loop {
            if let Some(signed) = latest_batch(client).await
                // a batch seen before is no news (and refused as not newer)
                && voucher.receive(&signed, Instant::now(), jiff::Timestamp::now().as_second()).is_ok()
            {
                let batch: Batch = serde_json::from_str(&signed.batch).expect("a verified batch parses");
                for (stream, states) in &batch.states {
                    latest.insert(stream.clone(), states.last().cloned());
                }
                if expected.iter().all(|(stream, digest)| latest.get(stream) == Some(&Some(hex(digest)))) {
                    return batch;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

#[tokio::test]
async fn the_signer_vouches_for_the_states_a_follower_computes_and_follows_every_change() {
    let (server, client) = two_unit_cluster().await;
    create_namespace(&client, NAMESPACE).await;
    // a node of no unit: in the metadata stream, in no unit's
    create_node(&client, edgegrid_testing::objects::node_object("cloud-1", &[])).await;
    let key = Arc::new(signing_key());
    let public: [u8; 32] = key.public_key().as_ref().try_into().expect("32 bytes");
    let config =
        SignerConfig { namespace: NAMESPACE.into(), unit_label_key: "unit".into(), period: Duration::from_millis(100) };
    let metrics = SignerMetrics::default();
    let signer = tokio::spawn(unit_signer::run(client.clone(), key, config, metrics.clone(), std::future::pending()));
    let mut voucher = Voucher::new(VoucherConfig {
        keys: vec![public],
        max_skew: Duration::from_secs(30),
        window: Duration::from_secs(10),
    });

    let first = until_vouched(&client, &mut voucher, "the listed state vouched for").await;
    let streams: Vec<&str> = first.states.keys().map(String::as_str).collect();
    assert_eq!(streams, ["endpoints", "endpointslices", "nodes-metadata", "services", "unit-nodes/a", "unit-nodes/b"]);

    // a change: the next batches name the new state
    create_namespaced(&client, slice_object("web-3", "web", &[("10.0.0.9", "n2")])).await;
    until_vouched(&client, &mut voucher, "the state with web-3 vouched for").await;

    // a relabel moves the node from one unit's stream to the other's
    relabel(&client, "n2", "b").await;
    until_vouched(&client, &mut voucher, "n2 vouched for in unit b, not a").await;
    // a unit that appears after the signer listed the Nodes is vouched for too
    relabel(&client, "n1", "c").await;
    until_vouched_units(&client, &mut voucher, &["b", "c"], "the new unit c vouched for").await;

    // a batch is refused by a follower trusting another key
    let mut stranger = Voucher::new(VoucherConfig {
        keys: vec![signing_key().public_key().as_ref().try_into().expect("32 bytes")],
        max_skew: Duration::from_secs(30),
        window: Duration::from_secs(10),
    });
    let signed = latest_batch(&client).await.expect("a batch");
    assert!(stranger.receive(&signed, Instant::now(), jiff::Timestamp::now().as_second()).is_err());
    signer.abort();
    drop(server);
}

#[tokio::test]
async fn a_batch_is_written_by_the_signers_field_manager_and_counted() {
    let (_server, client) = two_unit_cluster().await;
    create_namespace(&client, NAMESPACE).await;
    let config =
        SignerConfig { namespace: NAMESPACE.into(), unit_label_key: "unit".into(), period: Duration::from_millis(100) };
    let metrics = SignerMetrics::default();
    let signer = tokio::spawn(unit_signer::run(
        client.clone(),
        Arc::new(signing_key()),
        config,
        metrics.clone(),
        std::future::pending(),
    ));
    let configmap = eventually("the batch ConfigMap", || async {
        Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE).get_opt(BATCH_CONFIG_MAP).await.ok()?
    })
    .await;
    let managers: Vec<String> = configmap.managed_fields().iter().filter_map(|entry| entry.manager.clone()).collect();
    assert_eq!(managers, [unit_signer::FIELD_MANAGER]);
    eventually("two batches written", || async {
        (metrics.batches.get_or_create(&unit_signer::ResultLabel { result: "written" }).get() >= 2).then_some(())
    })
    .await;
    signer.abort();
}

/// The binary as the chart runs it: a PEM key (as `openssl genpkey -algorithm ed25519`
/// writes, PKCS#8 v1), the public key it prints verifies its batches, SIGTERM exits 0.
#[tokio::test]
async fn the_unit_signer_binary_signs_with_its_key_file_and_stops_on_sigterm() {
    let (server, client) = two_unit_cluster().await;
    create_namespace(&client, NAMESPACE).await;
    let dir = edgegrid_testing::TempDir::new("unit-signer").expect("a directory");
    // PKCS#8 v1 of an Ed25519 seed: the fixed prefix, then the 32 seed bytes
    let mut der = vec![0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];
    der.extend((1..=32u8).collect::<Vec<_>>());
    let pem = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &der)
    );
    let key_path = dir.join("signing.key");
    std::fs::write(&key_path, pem).expect("write the key");
    let kubeconfig = edgegrid_testing::KubeconfigFile::new(&server.url()).expect("a kubeconfig");
    let binary = env!("CARGO_BIN_EXE_unit-signer");
    let printed = std::process::Command::new(binary)
        .args(["--signing-key-file", &key_path.display().to_string(), "--print-public-key"])
        .output()
        .expect("runs");
    assert!(printed.status.success(), "{}", String::from_utf8_lossy(&printed.stderr));
    let public = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        String::from_utf8(printed.stdout).expect("text").trim(),
    )
    .expect("base64");
    let expected: [u8; 32] = Ed25519KeyPair::from_seed_unchecked(&der[16..]).expect("a seed").public_key().as_ref()[..]
        .try_into()
        .expect("32 bytes");
    assert_eq!(public, expected);

    let (health, metrics) = (edgegrid_testing::free_port(), edgegrid_testing::free_port());
    let args: Vec<String> = [
        "--kubeconfig",
        &kubeconfig.path().display().to_string(),
        "--signing-key-file",
        &key_path.display().to_string(),
        "--namespace",
        NAMESPACE,
        "--unit-label-key",
        "unit",
        "--period",
        "100ms",
        "--bind-address",
        &format!("127.0.0.1:{health}"),
        "--metrics-bind-address",
        &format!("127.0.0.1:{metrics}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let running = edgegrid_testing::RunningBinary::start(binary, &args).expect("starts");
    let mut voucher = Voucher::new(VoucherConfig {
        keys: vec![expected],
        max_skew: Duration::from_secs(30),
        window: Duration::from_secs(10),
    });
    until_vouched(&client, &mut voucher, "the binary's batch verified with the printed key").await;
    let exit = running.terminate(Duration::from_secs(10)).await.expect("exits on SIGTERM");
    assert!(exit.status.success(), "{:?}\n{}", exit.status, exit.logs);
}

#[test]
fn the_unit_signer_refuses_a_key_file_that_is_no_ed25519_key() {
    let dir = edgegrid_testing::TempDir::new("unit-signer").expect("a directory");
    let path = dir.join("signing.key");
    std::fs::write(&path, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n").expect("write");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_unit-signer"))
        .args(["--signing-key-file", &path.display().to_string(), "--print-public-key"])
        .output()
        .expect("runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not an Ed25519 PKCS#8 key"), "{stderr}");
}
