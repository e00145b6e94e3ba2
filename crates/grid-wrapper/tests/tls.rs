//! The shipped binary serving its API over HTTPS with client-certificate authentication:
//! a client with a certificate from the configured CA lists the pruned view, one without a
//! certificate or with another CA's is refused at the handshake.

mod common;

use std::time::Duration;

use common::*;
use edgegrid_testing::objects::ips;
use edgegrid_testing::tls::{TestCa, https_get};
use edgegrid_testing::{KubeconfigFile, RunningBinary, TempDir, free_port};
use tokio::time::Instant;

#[tokio::test]
async fn only_clients_with_a_certificate_from_the_client_ca_are_served() {
    let (server, _upstream) = two_unit_cluster().await;
    let kubeconfig = KubeconfigFile::new(&server.url()).expect("kubeconfig");
    let (serving_ca, client_ca, other_ca) = (TestCa::new("serving"), TestCa::new("clients"), TestCa::new("other"));
    let dir = TempDir::new("grid-wrapper-tls").expect("temp dir");
    let serving = serving_ca.server_cert(1);
    for (name, contents) in
        [("tls.crt", &serving.cert_pem), ("tls.key", &serving.key_pem), ("clients.pem", &client_ca.cert_pem())]
    {
        std::fs::write(dir.join(name), contents).expect("write");
    }
    let port = free_port();
    let file = |name: &str| dir.join(name).display().to_string();
    let args: Vec<String> = vec![
        "--kubeconfig".into(),
        kubeconfig.arg(),
        "--node-name".into(),
        "n1".into(),
        "--bind-address".into(),
        format!("127.0.0.1:{port}"),
        "--metrics-bind-address".into(),
        format!("127.0.0.1:{}", free_port()),
        "--tls-cert-file".into(),
        file("tls.crt"),
        "--tls-private-key-file".into(),
        file("tls.key"),
        "--client-ca-file".into(),
        file("clients.pem"),
    ];
    let mut binary = RunningBinary::start(env!("CARGO_BIN_EXE_grid-wrapper"), &args).expect("starts");
    let addr = ([127, 0, 0, 1], port).into();
    let kube_proxy = client_ca.client_cert("system:kube-proxy", 7);
    let trusted = || serving_ca.client_config(Some(&kube_proxy));
    let path = "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/web-1";
    let deadline = Instant::now() + Duration::from_secs(15);
    let served = loop {
        if let Ok(response) = https_get(addr, path, trusted()).await
            && response.status == 200
        {
            break response;
        }
        binary.assert_running();
        assert!(Instant::now() < deadline, "never served over HTTPS");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(ips(&json(&served.body)), vec!["10.0.0.1"], "the pruned slice");
    let other = other_ca.client_cert("intruder", 8);
    for (who, client) in
        [("no certificate", serving_ca.client_config(None)), ("another CA", serving_ca.client_config(Some(&other)))]
    {
        let refused = https_get(addr, path, client).await;
        assert!(!matches!(&refused, Ok(r) if r.status == 200), "{who}: {refused:?}");
    }
    let exit = binary.terminate(Duration::from_secs(5)).await.expect("exits");
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
}
