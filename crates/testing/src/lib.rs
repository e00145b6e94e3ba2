//! What the tests of the edgegrid binaries (built on `controller-support`'s runtime)
//! share: run the binary with its stderr captured, read its admin endpoints, read one
//! metric sample exactly, stop it with SIGTERM and time the exit, and stand-ins for an API
//! server that hangs or is gone. HTTPS (a CA, certificates, a client) is in [`tls`],
//! typed upstream objects in [`objects`], the chart's objects installed without helm in
//! [`chart`], what a test needs of the machine (kubectl, helm, root) in [`tools`], the
//! benchmarks' percentiles and tables in [`bench_table`].
//!
//! A dev-dependency only: no shipped crate may depend on it (`cargo xtask check` fails
//! when a binary's normal dependency tree contains it), and it depends on no edgegrid
//! crate, so any crate's own tests can use it. The one exception is behind the `cluster`
//! feature: the fake API server's two-unit cluster (`cluster`), turned on by the
//! dev-dependencies of the crates whose tests run it (grid-wrapper, unit-signer).

pub mod bench_table;
pub mod chart;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod link;
pub mod objects;
pub mod protobuf;
mod stop_on_drop;
pub mod tls;
pub mod tools;

pub use stop_on_drop::StopOnDrop;

use std::io::BufRead;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A listener on 127.0.0.1 that notes where each connection comes from and closes it at
/// once: for tests of the source address a client dials from (the request fails; where
/// it came from is the point).
pub struct SourceRecorder {
    pub addr: SocketAddr,
    sources: tokio::sync::mpsc::UnboundedReceiver<std::net::IpAddr>,
}

impl SourceRecorder {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a listener on 127.0.0.1");
        let addr = listener.local_addr().expect("its address");
        let (sender, sources) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                let _ = sender.send(peer.ip());
                drop(stream);
            }
        });
        Self { addr, sources }
    }

    /// Where the next connection came from (`None` when none came within 5 s).
    pub async fn next(&mut self) -> Option<std::net::IpAddr> {
        tokio::time::timeout(Duration::from_secs(5), self.sources.recv()).await.ok().flatten()
    }
}

/// Where [`free_port`] looks: below Linux's default ephemeral range (32768-60999), so no
/// outgoing connection and no `bind(0)` of any process can take the port between the
/// asking and the binary's own bind, and below the local cluster's node ports (30250 and
/// up on each node's loopback address), which a test may run beside.
const FREE_PORTS: std::ops::Range<u16> = 20_000..30_000;

/// A port free at the time of asking, on every address, and never handed out before in
/// this process. Why not `bind(0)`: its port comes from the ephemeral range, which the
/// kernel hands to the next outgoing connection (or another test's `bind(0)`) once the
/// asking listener is closed; CI once saw a binary refused its port that way.
pub fn free_port() -> u16 {
    static NEXT: AtomicUsize = AtomicUsize::new(usize::MAX);
    let span = usize::from(FREE_PORTS.end - FREE_PORTS.start);
    // each test process starts somewhere else in the range (a binary from a test run
    // before may still hold its ports for a moment)
    let _ = NEXT.compare_exchange(
        usize::MAX,
        std::process::id() as usize * 7919 % span,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = FREE_PORTS.start + offset as u16;
        if TcpListener::bind(("0.0.0.0", port)).is_ok() && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FREE_PORTS:?}")
}

/// A kubeconfig pointing at `server` (`http://127.0.0.1:PORT`) without credentials.
pub fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n\
         contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\ncurrent-context: test\n\
         users:\n- name: test\n  user: {{}}\n"
    )
}

/// A kubeconfig file for `server`, removed when dropped.
pub struct KubeconfigFile {
    path: PathBuf,
}

impl KubeconfigFile {
    pub fn new(server: &str) -> std::io::Result<Self> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let unique = format!("kubeconfig-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = std::env::temp_dir().join(unique);
        std::fs::write(&path, kubeconfig(server))?;
        Ok(Self { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path as a command-line argument.
    pub fn arg(&self) -> String {
        self.path.display().to_string()
    }
}

impl Drop for KubeconfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A directory of its own under the temporary directory, removed with its contents when
/// dropped.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(prefix: &str) -> std::io::Result<Self> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let unique = format!("{prefix}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = std::env::temp_dir().join(unique);
        std::fs::create_dir_all(&path)?;
        Ok(Self { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` in the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The value of the unlabelled sample `name` on the `/metrics` served at `admin`.
pub async fn metric(admin: SocketAddr, name: &str) -> Option<String> {
    let (_, exposition) = http_get(admin, "/metrics").await?;
    sample(&exposition, name).map(str::to_string)
}

/// `GET path` over plain HTTP/1.0: the status and body, or `None` when nothing answers.
pub async fn http_get(address: SocketAddr, path: &str) -> Option<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes()).await.ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        let response = String::from_utf8_lossy(&response).into_owned();
        let (head, body) = response.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, body.to_string()))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange).await.ok().flatten()
}

/// The value of the unlabelled sample `name` in an OpenMetrics exposition, matched on the
/// whole sample line (never on `# HELP` text that happens to contain it).
pub fn sample<'a>(exposition: &'a str, name: &str) -> Option<&'a str> {
    exposition.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
}

/// The values of `field` on the log lines that carry `message`, in order (tracing's text
/// format, as the binaries log to a pipe: `message field="value"`): e.g. the `flag` of each
/// deprecation line. A line without the field gives nothing.
pub fn logged_values(logs: &str, message: &str, field: &str) -> Vec<String> {
    let key = format!(" {field}=\"");
    logs.lines()
        .filter(|line| line.contains(message))
        .filter_map(|line| {
            let value = &line[line.find(&key)? + key.len()..];
            // the value ends at the first quote not escaped by a backslash
            let mut escaped = false;
            let end = value.char_indices().find_map(|(at, c)| match (c, escaped) {
                ('"', false) => Some(at),
                ('\\', false) => {
                    escaped = true;
                    None
                }
                _ => {
                    escaped = false;
                    None
                }
            })?;
            Some(value[..end].to_string())
        })
        .collect()
}

/// A listener that accepts connections and never answers: an API server that hangs.
/// Connections are held until it is dropped.
pub struct HangingServer {
    address: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl HangingServer {
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let accepting = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((connection, _)) = listener.accept().await {
                held.push(connection);
            }
        });
        Ok(Self { address, accepting })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }
}

impl Drop for HangingServer {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// The URL of a port nothing listens on: an API server that is gone. Port 1 (tcpmux),
/// not a free port: a port free now can be bound by another test's server running in
/// parallel (seen: a wrapper's `/version` pass-through answered 404 by one), and nothing
/// binds a privileged port this low here.
pub fn unreachable_url() -> String {
    "http://127.0.0.1:1".to_string()
}

/// A binary under test; killed if dropped while running.
pub struct RunningBinary {
    child: Child,
    /// stderr so far, appended by a reader thread until the binary closes it.
    logs: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// How a binary ended.
#[derive(Debug)]
pub struct Exit {
    pub status: ExitStatus,
    /// From the signal to the exit.
    pub took: Duration,
    /// Everything it wrote to stderr.
    pub logs: String,
}

impl RunningBinary {
    /// Starts `program` with `args`, stdout discarded and stderr captured.
    pub fn start(program: impl AsRef<Path>, args: &[String]) -> std::io::Result<Self> {
        let mut child =
            Command::new(program.as_ref()).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?;
        let logs = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let reader = child.stderr.take().map(|stderr| {
            let logs = std::sync::Arc::clone(&logs);
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                    let mut logs = logs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    logs.push_str(&line);
                    logs.push('\n');
                }
            })
        });
        Ok(Self { child, logs, reader })
    }

    /// What it wrote to stderr so far.
    pub fn logs_so_far(&self) -> String {
        self.logs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Everything it wrote to stderr, once it has exited.
    fn all_logs(&mut self) -> String {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.logs_so_far()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running (panics with its logs if it exited, as that is never
    /// what a waiting test expects).
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            let logs = self.all_logs();
            panic!("the binary exited early ({status}):\n{logs}");
        }
    }

    /// Sends SIGTERM (as the kubelet does) and waits up to `limit` for the exit; a binary
    /// still running then is killed and reported as an error with its logs.
    pub async fn terminate(self, limit: Duration) -> Result<Exit, String> {
        self.signal_and_wait("-TERM", limit).await
    }

    /// Waits up to `limit` for the binary to exit by itself.
    pub async fn wait(self, limit: Duration) -> Result<Exit, String> {
        self.signal_and_wait("", limit).await
    }

    async fn signal_and_wait(mut self, signal: &str, limit: Duration) -> Result<Exit, String> {
        let start = Instant::now();
        if !signal.is_empty() {
            let sent = Command::new("kill").args([signal, &self.child.id().to_string()]).status();
            if !sent.is_ok_and(|s| s.success()) {
                return Err(format!("could not send {signal} to {}", self.child.id()));
            }
        }
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    let took = start.elapsed();
                    let logs = self.all_logs();
                    return Ok(Exit { status, took, logs });
                }
                Ok(None) if start.elapsed() < limit => tokio::time::sleep(Duration::from_millis(50)).await,
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    let logs = self.all_logs();
                    return Err(format!("still running {limit:?} after {signal}; killed. Logs:\n{logs}"));
                }
            }
        }
    }
}

impl Drop for RunningBinary {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logged_values_read_one_field_of_the_lines_with_a_message() {
        let logs = "2026-01-01T00:00:00Z  WARN x: deprecated flag=\"--v\" replacement=\"RUST_LOG=info\"\n\
                    2026-01-01T00:00:00Z  INFO x: started flag=\"--no\"\n\
                    2026-01-01T00:00:00Z  WARN x: deprecated ignored=\"a \\\"quoted\\\" word\" flag=\"--debug\"\n\
                    2026-01-01T00:00:00Z  WARN x: deprecated\n";
        assert_eq!(logged_values(logs, "deprecated", "flag"), ["--v", "--debug"]);
        assert_eq!(logged_values(logs, "deprecated", "ignored"), [r#"a \"quoted\" word"#]);
    }

    #[test]
    fn free_ports_are_outside_the_ephemeral_range_and_never_handed_out_twice() {
        let ports: Vec<u16> = (0..200).map(|_| free_port()).collect();
        assert!(ports.iter().all(|port| FREE_PORTS.contains(port)), "{ports:?}");
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        // one taken meanwhile is passed over
        let next = free_port() + 1;
        let _held = TcpListener::bind(("127.0.0.1", next)).unwrap();
        assert_ne!(free_port(), next);
    }

    #[test]
    fn samples_match_whole_lines_only() {
        let exposition = "# HELP x_leader 1 while leading.\n# TYPE x_leader gauge\nx_leader 0\nx_leader_other 1\n";
        assert_eq!(sample(exposition, "x_leader"), Some("0"));
        assert_eq!(sample("# HELP x_leader 1 while leading.\n", "x_leader"), None);
    }
}
