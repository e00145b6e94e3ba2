//! The shipped binary against an API server over HTTP: it leads, reconciles a
//! ServiceGrid, serves /healthz /readyz /metrics, and exits 0 on SIGTERM.

use std::process::{Command, Stdio};
use std::time::Duration;

use edgegrid_core::crd::{ServiceGrid, all_crds};
use fake_apiserver::FakeApiServer;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::time::Instant;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let client = Client::try_from(kube::Config::new(format!("http://127.0.0.1:{port}").parse().ok()?)).ok()?;
    let response = client.send(http::Request::get(path).body(kube::client::Body::empty()).ok()?).await.ok()?;
    let status = response.status().as_u16();
    let body = axum_body(response).await?;
    Some((status, body))
}

async fn axum_body(response: http::Response<kube::client::Body>) -> Option<String> {
    use http_body_util::BodyExt;
    let bytes = response.into_body().collect().await.ok()?.to_bytes();
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_leads_reconciles_and_stops_cleanly() {
    let server = FakeApiServer::start().await.unwrap();
    let client = Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    for crd in all_crds() {
        Api::<CustomResourceDefinition>::all(client.clone()).create(&PostParams::default(), &crd).await.unwrap();
    }
    let dir = std::env::temp_dir().join(format!("grid-controller-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_grid-controller"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--bind-address", &format!("127.0.0.1:{port}"), "--metrics-bind-address", &format!("127.0.0.1:{port}")])
        .args(["--node-name", "instance-a", "--leader-elect-retry-period", "200ms"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let grid: ServiceGrid = serde_json::from_value(json!({
        "apiVersion": "superedge.io/v1", "kind": "ServiceGrid", "metadata": {"name": "web"},
        "spec": {"gridUniqKey": "zone1", "template": {"ports": [{"port": 8080}]}}
    }))
    .unwrap();
    Api::<ServiceGrid>::namespaced(client.clone(), "default").create(&PostParams::default(), &grid).await.unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(20);
    let service = loop {
        if let Ok(service) = services.get("web-svc").await {
            break service;
        }
        assert!(child.try_wait().unwrap().is_none(), "the binary exited early");
        assert!(Instant::now() < deadline, "web-svc not created in time");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(service.metadata.annotations.unwrap()["topologyKeys"], r#"["zone1"]"#);
    assert_eq!(get(port, "/readyz").await, Some((200, "ok".into())));
    assert_eq!(get(port, "/healthz").await, Some((200, "ok".into())));
    let (_, exposition) = get(port, "/metrics").await.unwrap();
    assert!(exposition.contains("grid_controller_reconciles_total{kind=\"ServiceGrid\"}"), "{exposition}");

    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert_eq!(status.code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}
