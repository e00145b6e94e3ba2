//! What the daemon's in-crate tests share: a unit's member Nodes, a daemon built from
//! flags, and a "kubelet" port that accepts and holds connections.

use std::collections::BTreeMap;
use std::sync::Arc;

use clap::Parser;
use edgegrid_core::keys::{EDGE_HEALTH_ADDRESS_ANNOTATION, EDGE_HEALTH_PUBLIC_KEY_ANNOTATION};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::cli::Flags;
use super::clock::wall_clock;
use super::metrics::Metrics;
use super::state::Daemon;
use crate::node_key::SigningKey;

pub const KEY: &[u8] = b"a unit key of at least thirty-two bytes, for tests only";

/// Node `name`'s signing key: derived from its name, so every test daemon knows every
/// member's public key.
pub fn signing_key(name: &str) -> SigningKey {
    let mut seed = [0x5a; 32];
    for (i, byte) in name.bytes().enumerate() {
        seed[i % 32] ^= byte.rotate_left(i as u32);
    }
    SigningKey::from_seed(&seed)
}

/// A member of unit `site=a`, publishing its public key, reachable at `address` when it
/// has one.
pub fn member(name: &str, address: Option<&str>) -> ObjectMeta {
    let mut annotations = BTreeMap::from([(
        EDGE_HEALTH_PUBLIC_KEY_ANNOTATION.to_string(),
        signing_key(name).public_key().to_annotation(),
    )]);
    if let Some(address) = address {
        annotations.insert(EDGE_HEALTH_ADDRESS_ANNOTATION.to_string(), address.to_string());
    }
    ObjectMeta {
        name: Some(name.into()),
        labels: Some(BTreeMap::from([("site".to_string(), "a".to_string())])),
        annotations: Some(annotations),
        ..ObjectMeta::default()
    }
}

/// The daemon of node `name` with this `--check` and further flags, knowing `nodes`.
pub fn daemon(name: &str, check: &str, flags: &[&str], nodes: &[ObjectMeta]) -> Arc<Daemon> {
    let base = [
        "edge-health",
        "--node-name",
        name,
        "--advertise-address",
        "127.0.0.1",
        "--hmac-key-file",
        "/unused",
        "--signing-key-file",
        "/unused",
    ];
    let args = [&base[..], &["--unit-label-key", "site", "--check", check], flags].concat();
    let settings = Flags::try_parse_from(args).unwrap().settings(name.into()).unwrap();
    let daemon =
        Arc::new(Daemon::new(settings, Arc::new(Metrics::default()), KEY, signing_key(name), wall_clock()).unwrap());
    daemon.replace_nodes(nodes);
    daemon
}

/// A port on 127.0.0.1 that accepts connections and never answers (a probe that
/// connects succeeds; one that waits for an answer times out), open while the task runs.
pub async fn holding_port() -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    (port, task)
}
