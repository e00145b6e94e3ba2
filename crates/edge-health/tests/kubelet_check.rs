//! The attack on `kind=kubelet` checks: whoever answers at a peer's address (here a TLS
//! server with a self-signed certificate, as anyone can make, at every peer's kubelet
//! port) gets what the check sends. With the chart's configuration
//! (`--kubelet-check-service-account`, no `--token-file`) the shipped binary sends at most
//! a token of the kubelet-check ServiceAccount, which it asked the API server for, and
//! never its own identity (the token its API client authenticates with, a pod's
//! service-account token in the cluster).

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use common::{BINARY, CheckTarget, Cluster, Member, Protocol, common_port, metric, until};
use edgegrid_testing::RunningBinary;
use edgegrid_testing::tls::{RecordingHttpsServer, self_signed_kubelet_cert};
use fake_apiserver::{FakeApiServer, UserInfo};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use serde_json::json;

/// The release namespace and the ServiceAccounts the chart makes.
const NAMESPACE: &str = "edgegrid";
const CHECK_ACCOUNT: &str = "edge-health-kubelet-check";
/// The daemon's own identity: what its API client sends.
const OWN_TOKEN: &str = "edge-health-pod-token";

/// A kubelet check sends a token, so it runs after the proof: a period must hold the
/// proof's two attempts (300 ms), the check (150 ms) and the indirect timeout (150 ms).
const PROTOCOL: Protocol = Protocol {
    period: Duration::from_millis(700),
    vote_window: 3,
    probes_per_period: 2,
    indirect_helpers: 1,
    indirect_timeout: Duration::from_millis(150),
    message_timeout: Duration::from_millis(150),
    check_timeout: Duration::from_millis(150),
    check_retries: 0,
};

/// `args` with `--kubeconfig` and `--check` replaced and `extra` appended.
fn with(args: Vec<String>, kubeconfig: &str, check: &str, extra: &[String]) -> Vec<String> {
    let mut args = args;
    for (flag, value) in [("--kubeconfig", kubeconfig), ("--check", check)] {
        let at = args.iter().position(|a| a == flag).unwrap_or_else(|| panic!("{flag} in the cluster's arguments"));
        args[at + 1] = value.to_string();
    }
    args.extend_from_slice(extra);
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_server_at_a_peer_address_never_gets_the_daemons_own_token() {
    let ips: Vec<IpAddr> = (81..=83).map(common::loopback).collect();
    let server = FakeApiServer::start().await.expect("fake apiserver");
    server.add_user(OWN_TOKEN, UserInfo::service_account(NAMESPACE, "edge-health"));
    let admin = common::client(&server);
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    Api::<Namespace>::all(admin.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": CHECK_ACCOUNT}})).unwrap();
    Api::<ServiceAccount>::namespaced(admin, NAMESPACE).create(&PostParams::default(), &account).await.unwrap();

    let kubelet_port = common_port(&ips);
    let cluster = Cluster::new("k", server, common_port(&ips), CheckTarget::Own { port: kubelet_port }, PROTOCOL);
    let kubeconfig = cluster.dir.join("kubeconfig-with-token");
    let url = cluster.server.url();
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {url}\ncontexts:\n- name: c\n  \
             context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: {OWN_TOKEN}\n"
        ),
    )
    .unwrap();
    // the chart's kind=kubelet check and credential (tests/tests/chart.rs checks the chart
    // passes these and no --token-file)
    let check = format!("kind=kubelet,port={kubelet_port},timeout=150ms");
    let credential = [format!("--kubelet-check-service-account={NAMESPACE}/{CHECK_ACCOUNT}")];

    let mut members: Vec<Member> =
        ips.iter().enumerate().map(|(i, ip)| Member::new(format!("edge-{}", i + 1), *ip)).collect();
    let mut impostors = Vec::new();
    for member in members.iter_mut() {
        cluster.create_node(&member.name).await;
        // at the member's kubelet port: a self-signed certificate for the right names
        let cert = self_signed_kubelet_cert(&member.name, &[member.ip]);
        let impostor = RecordingHttpsServer::start(SocketAddr::new(member.ip, kubelet_port), &cert, 200).await;
        impostors.push(impostor.expect("the impostor listens"));
        let args = with(cluster.args(member), &kubeconfig.display().to_string(), &check, &credential);
        member.daemon = Some(RunningBinary::start(BINARY, &args).expect("starts"));
    }
    cluster.ready(&mut members).await;
    let names: Vec<String> = members.iter().map(|m| m.name.clone()).collect();
    // the impostors answer: everyone is checked as alive
    cluster.until_healthy(&members, &names).await;
    until("every impostor got requests with a token", Duration::from_secs(10), || async {
        impostors.iter().all(|i| i.authorizations().iter().flatten().count() >= 2).then_some(())
    })
    .await;

    let check_user = format!("system:serviceaccount:{NAMESPACE}:{CHECK_ACCOUNT}");
    for (impostor, member) in impostors.iter().zip(&members) {
        for authorization in impostor.authorizations() {
            let Some(authorization) = authorization else { continue };
            assert_ne!(
                authorization,
                format!("Bearer {OWN_TOKEN}"),
                "{}'s address got the daemon's identity",
                member.name
            );
            let token = authorization.strip_prefix("Bearer ").expect("a bearer token");
            assert_eq!(cluster.server.user_of(token).username, check_user, "{}: {authorization}", member.name);
        }
    }
    // each daemon asked for the tokens as itself, by name, for the kubelet-check account
    let path = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{CHECK_ACCOUNT}/token");
    let asked = cluster.server.requests().since(0).into_iter().filter(|r| r.path == path).collect::<Vec<_>>();
    assert!(asked.len() >= members.len(), "{asked:?}");
    assert!(asked.iter().all(|r| r.method == "POST" && r.status == 201 && r.user.as_deref() == Some(OWN_TOKEN)));
    for member in &members {
        let issued = metric(cluster.address(member), "edge_health_kubelet_check_tokens_total{result=\"issued\"}").await;
        assert!(issued >= 1.0, "{}: {issued}", member.name);
    }
    cluster.stop_all(&mut members).await;
}
