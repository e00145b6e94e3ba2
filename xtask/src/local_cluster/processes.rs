//! The real component binaries as child processes: built once by cargo (unless
//! `--no-build`), found next to the xtask binary, logging into the run directory, stopped
//! with SIGTERM as a kubelet stops a container (SIGKILL after a grace period), killed
//! outright when a simulated node dies.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

/// The binaries the local cluster runs, by package (the grid controller runs in-process).
pub const BINARIES: [(&str, &str); 5] = [
    ("grid-wrapper", "grid-wrapper"),
    ("unit-signer", "unit-signer"),
    ("edge-health", "edge-health"),
    ("edge-health-admission", "edge-health-admission"),
    ("edge-node-lifecycle", "edge-node-lifecycle"),
];

/// Builds the component binaries with the cargo that runs xtask, in its profile.
pub fn build(root: &Path) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command.current_dir(root).args(["build", "--quiet", "--locked"]);
    let packages: std::collections::BTreeSet<&str> = BINARIES.iter().map(|(package, _)| *package).collect();
    for package in packages {
        command.args(["-p", package]);
    }
    if !cfg!(debug_assertions) {
        command.arg("--release");
    }
    let status = command.status().context("running cargo build")?;
    if !status.success() {
        bail!("cargo build of the component binaries failed ({status})");
    }
    Ok(())
}

/// Where the binaries are: next to this xtask binary (cargo's profile directory).
pub fn binary_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the xtask binary")?;
    let dir = exe.parent().context("the xtask binary has no directory")?.to_path_buf();
    for (_, binary) in BINARIES {
        if !dir.join(binary).is_file() {
            bail!(
                "{} is missing: build the components first (`cargo build --workspace`) or run without --no-build",
                dir.join(binary).display()
            );
        }
    }
    Ok(dir)
}

/// The bearer token the component `name` of `binary` sends: `<binary>/<name>`, so its
/// requests can be told apart (and checked against its RBAC).
pub fn token(binary: &str, name: &str) -> String {
    format!("{binary}/{name}")
}

/// One running component.
pub struct Component {
    pub name: String,
    child: Child,
    /// Its stdout and stderr.
    pub log: PathBuf,
    /// Where `/readyz` is served over plain HTTP.
    pub admin: SocketAddr,
    /// Killed on purpose (its node died): its exit is no failure.
    killed: bool,
    /// How to start it again.
    command: (PathBuf, PathBuf, Vec<String>),
    /// When it was last started.
    pub started: std::time::Instant,
}

impl Component {
    /// Starts `binary` as `name` against the API server at `server` (a kubeconfig with the
    /// token [`token`] is written for it into `run_dir`), logging into `run_dir/logs`.
    pub fn start(
        bin_dir: &Path,
        binary: &str,
        name: &str,
        server: &str,
        args: &[String],
        admin: SocketAddr,
        run_dir: &Path,
    ) -> Result<Self> {
        let kubeconfig = run_dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&kubeconfig, super::kubeconfig::kubeconfig_with_token(server, Some(&token(binary, name))))
            .with_context(|| format!("writing {}", kubeconfig.display()))?;
        let log = run_dir.join("logs").join(format!("{name}.log"));
        let file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let command = (bin_dir.join(binary), kubeconfig, args.to_vec());
        let child = spawn(&command, file)?;
        Ok(Self {
            name: name.to_string(),
            child,
            log,
            admin,
            killed: false,
            command,
            started: std::time::Instant::now(),
        })
    }

    /// Starts it again, as a kubelet restarts a container (after it was stopped or
    /// killed); its log goes on in the same file.
    pub fn restart(&mut self) -> Result<()> {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        self.child = spawn(&self.command, file)?;
        self.killed = false;
        self.started = std::time::Instant::now();
        Ok(())
    }

    /// Its process id while it runs.
    pub fn pid(&mut self) -> Option<u32> {
        match self.child.try_wait() {
            Ok(None) => self.child.id(),
            _ => None,
        }
    }

    /// SIGTERM, as a kubelet stops a container, and how it exited within `grace` (it is
    /// killed after that, and the error says so).
    pub async fn stop(&mut self, grace: Duration) -> Result<std::process::ExitStatus> {
        self.killed = true;
        self.terminate().await;
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => {
                self.kill().await;
                bail!("{} did not exit within {grace:?} of SIGTERM", self.name)
            }
        }
    }

    /// Whether `/readyz` answers 200; an error when the process has exited.
    pub async fn ready(&mut self) -> Result<bool> {
        if let Some(status) = self.child.try_wait()? {
            bail!("{} exited ({status}); its log: {}", self.name, self.log.display());
        }
        Ok(http_status(self.admin, "/readyz").await == Some(200))
    }

    /// SIGTERM, as a kubelet stops a container.
    pub async fn terminate(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status().await;
        }
    }

    /// Waits for the process to exit, SIGKILL after `grace`.
    pub async fn wait_or_kill(&mut self, grace: Duration) {
        if tokio::time::timeout(grace, self.child.wait()).await.is_err() {
            self.kill().await;
        }
    }

    /// SIGKILL: the node it runs on died.
    pub async fn kill(&mut self) {
        self.killed = true;
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// How it exited, when it did without being stopped or killed.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        if self.killed { None } else { self.child.try_wait().ok().flatten() }
    }
}

fn spawn((binary, kubeconfig, args): &(PathBuf, PathBuf, Vec<String>), log: std::fs::File) -> Result<Child> {
    Command::new(binary)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env_remove("KUBECONFIG")
        .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))
}

/// The status code of a plain-HTTP GET, `None` when nothing answers.
pub async fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    http_get(addr, path).await.map(|(status, _)| status)
}

/// A plain-HTTP GET: the status code and the body (read to the end: `Connection: close`).
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let get = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        let response = String::from_utf8_lossy(&response);
        let status = response.split_whitespace().nth(1)?.parse().ok()?;
        let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body).to_string();
        Some((status, body))
    };
    tokio::time::timeout(Duration::from_secs(2), get).await.ok().flatten()
}
