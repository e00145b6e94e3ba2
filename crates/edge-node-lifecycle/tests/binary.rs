//! The shipped binary against an API server over HTTP: flags, /healthz, /readyz,
//! /metrics, leadership, and a clean SIGTERM exit.

use std::process::{Command, Stdio};
use std::time::Duration;

use fake_apiserver::FakeApiServer;
use tokio::time::Instant;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn get(url: &str) -> Option<(u16, String)> {
    let (base, path) = url.rsplit_once('/')?;
    let client = kube::Client::try_from(kube::Config::new(base.parse().ok()?)).ok()?;
    let request = http::Request::get(format!("/{path}")).body(kube::client::Body::empty()).ok()?;
    let response = client.send(request).await.ok()?;
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(axum::body::Body::new(response.into_body()), 1 << 20).await.ok()?;
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_serves_probes_and_exits_cleanly_on_sigterm() {
    let server = FakeApiServer::start().await.unwrap();
    let dir = std::env::temp_dir().join(format!("edge-node-lifecycle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    let (health, metrics) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_edge-node-lifecycle"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--bind-address", &format!("127.0.0.1:{health}")])
        .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}")])
        .args(["--node-name", "instance-a", "--leader-elect-retry-period", "200ms", "--node-monitor-period", "1s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ready = get(&format!("http://127.0.0.1:{health}/readyz")).await;
        let exposition = get(&format!("http://127.0.0.1:{metrics}/metrics")).await;
        let leading = exposition.as_ref().is_some_and(|(_, body)| body.contains("edge_node_lifecycle_leader 1"));
        if ready.as_ref().is_some_and(|(code, _)| *code == 200) && leading {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "the binary exited early");
        assert!(Instant::now() < deadline, "not ready and leading in time: {ready:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(get(&format!("http://127.0.0.1:{health}/healthz")).await, Some((200, "ok".into())));
    let (_, exposition) = get(&format!("http://127.0.0.1:{metrics}/metrics")).await.unwrap();
    assert!(exposition.contains("edge_node_lifecycle_monitor_passes_total"), "{exposition}");

    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert_eq!(status.code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_flags_are_refused_with_a_message() {
    let output = Command::new(env!("CARGO_BIN_EXE_edge-node-lifecycle"))
        .args(["--kubeconfig", "/nonexistent", "--node-monitor-grace-period", "fifty"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("invalid value 'fifty' for '--node-monitor-grace-period"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
