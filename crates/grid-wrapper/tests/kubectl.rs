//! A real kubectl pointed at a grid wrapper: `kubectl get endpointslices -A -w` shows the
//! slices pruned to the node's unit, then the change a node relabelled upstream makes.
//! kubectl comes from `.ci/install-tools` (or `$KUBECTL`). Without it the test says why
//! and returns, except under CI (`CI` non-empty), where it fails (`edgegrid_testing::tools`).

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use edgegrid_testing::KubeconfigFile;
use edgegrid_testing::objects::ips;
use edgegrid_testing::tools::tools;

/// One watch event as kubectl printed it: type, slice name, addresses.
type Printed = (String, String, Vec<String>);

fn printed(r#type: &str, name: &str, ips: &[&str]) -> Printed {
    (r#type.into(), name.into(), ips.iter().map(|s| s.to_string()).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_through_the_wrapper_shows_the_pruned_slices_and_their_changes() {
    let test = "kubectl_get_watch_through_the_wrapper_shows_the_pruned_slices_and_their_changes";
    let Some([kubectl]) = tools(test, ["kubectl"]) else { return };
    let (server, upstream) = two_unit_cluster().await;
    let wrapper = RunningWrapper::start(&server.url(), config("n1")).await;
    // kubectl's discovery passes through the wrapper to the fake apiserver
    let kubeconfig = KubeconfigFile::new(&wrapper.url()).expect("kubeconfig");

    let mut watch = Command::new(&kubectl)
        .env("KUBECONFIG", kubeconfig.path())
        .args(["get", "endpointslices", "-A", "--watch", "--output-watch-events", "-o", "json"])
        .args(["--request-timeout=20s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl starts");
    let stdout = watch.stdout.take().expect("stdout");
    let mut stderr = watch.stderr.take().expect("stderr");
    let (events, received) = tokio::sync::mpsc::unbounded_channel::<Printed>();
    // kubectl prints one JSON document per event; read them as they stream, no sleeps
    std::thread::spawn(move || {
        for event in serde_json::Deserializer::from_reader(stdout).into_iter::<serde_json::Value>() {
            let Ok(event) = event else { return };
            let object = &event["object"];
            let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
            let ips = ips(object);
            if events.send((event["type"].as_str().unwrap_or_default().to_string(), name, ips)).is_err() {
                return;
            }
        }
    });
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let mut kubectl = Watching { child: watch, received, errors: Some(errors) };
    let mut listed = vec![kubectl.next().await, kubectl.next().await, kubectl.next().await];
    listed.sort();
    assert_eq!(
        listed,
        [
            printed("ADDED", "plain-1", &["10.0.0.5"]),
            printed("ADDED", "web-1", &["10.0.0.1"]),
            printed("ADDED", "web-2", &["10.0.0.2"]),
        ],
        "n1's unit holds only 10.0.0.1 and 10.0.0.2 of web; plain is not topology-aware"
    );
    relabel(&upstream, "n3", "a").await;
    assert_eq!(kubectl.next().await, printed("MODIFIED", "web-1", &["10.0.0.1", "10.0.0.3"]));
}

/// A running `kubectl get -w` and what it printed.
struct Watching {
    child: std::process::Child,
    received: tokio::sync::mpsc::UnboundedReceiver<Printed>,
    errors: Option<std::thread::JoinHandle<String>>,
}

impl Watching {
    /// The next event it prints; a panic with its stderr when none comes.
    async fn next(&mut self) -> Printed {
        match tokio::time::timeout(Duration::from_secs(15), self.received.recv()).await {
            Ok(Some(event)) => event,
            _ => {
                let _ = self.child.kill();
                let stderr = self.errors.take().and_then(|e| e.join().ok()).unwrap_or_default();
                panic!("kubectl printed no further event; its stderr:\n{stderr}")
            }
        }
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
