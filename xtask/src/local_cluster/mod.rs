//! `cargo xtask run`: the system on a cluster. With a kubeconfig (`--kubeconfig`, or a
//! `KUBECONFIG` that is not an earlier run's) it installs the CRDs there. Without one it
//! starts the embedded local cluster and plays the mission on it ([`acts`]): the in-repo
//! fake apiserver on loopback, six simulated edge nodes in two units ([`layout`], each a
//! [`kubelet`] stand-in on its own loopback address), the pods and EndpointSlices real
//! controllers would make ([`workloads`]), and the real components: the grid controller
//! in-process, and as child processes ([`processes`]) one grid wrapper and one edge-health
//! daemon per node (reaching the API server through their site's cuttable [`site_link`]),
//! the admission webhook (self-managed certificates, registered with the fake apiserver)
//! and the edge-aware node lifecycle controller. The chart's edge-health node restriction
//! (a ValidatingAdmissionPolicy) is installed and enforced, each edge-health daemon's
//! token naming its node as a pod's bound token does.
//!
//! Runs do not clash: each takes a free slot (a locked file under `target/edgegrid-local`),
//! which picks its node addresses, log directory and kubeconfig path.
//!
//! What the run prints is its own lines only, plain text: every component binary writes
//! its stdout and stderr into its own file of the log directory, and the in-process parts
//! (the grid controller, the stand-ins, the clients reading the nodes' views) log into
//! [`IN_PROCESS_LOG`] there; the run names the file to read when something fails.

mod acts;
pub(crate) mod cluster;
mod events;
pub(crate) mod kubeconfig;
pub(crate) mod kubelet;
pub(crate) mod layout;
pub(crate) mod partition;
mod pod_proxy_views;
pub(crate) mod processes;
mod site_link;
pub(crate) mod views;
pub(crate) mod workload_status;
pub(crate) mod workloads;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use fake_apiserver::{FakeApiServer, ServerConfig, UserInfo};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::Discovery;
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use cluster::{Cluster, GridController, IN_PROCESS_LOG, Timing, wait_ready};
use kubeconfig::{CONTEXT, kubeconfig_for};
use kubelet::Kubelet;
use layout::SimNode;
use processes::Component;
use site_link::SiteLink;

const FIELD_MANAGER: &str = "edgegrid-xtask";

const USAGE: &str = "usage: cargo xtask run [--scenario | --no-acts] [--no-build] [--port PORT]
                       [--kubeconfig-out PATH] [--kubeconfig PATH]

Without a kubeconfig: starts the embedded local cluster (the fake apiserver, six simulated
edge nodes in units unit-a and unit-b, the example grids) with every component running,
then plays three acts, printing per-node views and node states:
  1. each node's kube-proxy sees only its own unit's endpoints (from its grid wrapper);
  2. site unit-b loses its cloud link: nodes Unknown, but no NoExecute taint, pods Ready,
     views unchanged (its peers still see it alive);
  3. node edge-a-1 dies: its unit votes it unhealthy, it is tainted and its endpoints
     leave the other nodes' views; its two unit-mates, one live peer each, are left
     undecided (a unit of three protects nobody after a death).
Then it keeps running until Ctrl-C (kubectl with the printed KUBECONFIG).

  --scenario          play the acts and exit: 0 when each went as expected, 1 otherwise
  --no-acts           start the cluster, show act 1, and keep running
  --no-build          do not run `cargo build` for the component binaries first
  --port PORT         the fake apiserver's port on 127.0.0.1 (default: any free port)
  --kubeconfig-out P  where to write the kubeconfig (default: target/edgegrid-local/kubeconfig,
                      or kubeconfig-<slot> when another run holds slot 0)
  --kubeconfig PATH   a real cluster: install the CRDs there and, where the chart is installed,
                      print what each node's grid wrapper keeps (its /debug/topology through
                      the pod proxy); KUBECONFIG too, unless an earlier run of this command wrote it
Logs: target/edgegrid-local/slot-<n>/logs/, one file per component (<name>.log) and
local-cluster.log for the in-process grid controller and stand-ins (RUST_LOG sets their
level); the run itself prints only its own lines.";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acts {
    /// Play them, then keep running.
    Play,
    /// Play them and exit with their verdict.
    Scenario,
    /// Only act 1, then keep running.
    None,
}

pub struct RunArgs {
    pub kubeconfig: Option<PathBuf>,
    pub port: u16,
    pub kubeconfig_out: Option<PathBuf>,
    pub acts: Acts,
    pub build: bool,
    /// Instead of the acts: the soak (`cargo xtask soak`), on its own layout.
    pub soak: Option<crate::soak::SoakArgs>,
}

impl RunArgs {
    /// `None` when `--help` was asked for (and printed).
    pub fn parse(args: &[String], root: &Path) -> Result<Option<Self>> {
        let mut out =
            Self { kubeconfig: None, port: 0, kubeconfig_out: None, acts: Acts::Play, build: true, soak: None };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--help" | "-h" => {
                    println!("{USAGE}");
                    return Ok(None);
                }
                "--kubeconfig" => out.kubeconfig = Some(PathBuf::from(value()?)),
                "--port" => out.port = value()?.parse().context("--port")?,
                "--kubeconfig-out" => out.kubeconfig_out = Some(PathBuf::from(value()?)),
                "--scenario" => out.acts = Acts::Scenario,
                "--no-acts" => out.acts = Acts::None,
                "--no-build" => out.build = false,
                other => bail!("unknown argument {other:?}\n{USAGE}"),
            }
        }
        if out.kubeconfig.is_none() {
            out.kubeconfig = kubeconfig_from_env(root);
        }
        Ok(Some(out))
    }
}

/// `KUBECONFIG`, unless it is empty or one of this command's own kubeconfigs (left
/// exported after an earlier run, whose cluster is gone).
fn kubeconfig_from_env(root: &Path) -> Option<PathBuf> {
    let (path, ignored) = kubeconfig_from(std::env::var_os("KUBECONFIG"), root);
    if let Some(ignored) = ignored {
        eprintln!(
            "note: ignoring KUBECONFIG={} (written by an earlier `cargo xtask run`); starting the local cluster",
            ignored.display()
        );
    }
    path
}

/// The kubeconfig `KUBECONFIG` = `value` names, and the path ignored because it is ours
/// (under `target/edgegrid-local`, or with our context as its current one).
fn kubeconfig_from(value: Option<std::ffi::OsString>, root: &Path) -> (Option<PathBuf>, Option<PathBuf>) {
    let Some(path) = value.filter(|v| !v.is_empty()).map(PathBuf::from) else { return (None, None) };
    let ours = lexical(&path).starts_with(lexical(&root.join("target/edgegrid-local")))
        || std::fs::read_to_string(&path).is_ok_and(|text| text.contains(&format!("current-context: {CONTEXT}")));
    if ours { (None, Some(path)) } else { (Some(path), None) }
}

/// `path` made absolute (from the working directory) with `.` and `..` resolved, without
/// touching the file system: the file may be gone.
fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let absolute = std::env::current_dir().map(|cwd| cwd.join(path)).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// A run's claim on a slot: an exclusive lock on `slot-<n>.lock` (which also names its
/// pid). The lock is the claim, not the file's content: two runs starting at once cannot
/// both take a slot (a pid file written after it was created could be read empty and
/// taken over), and a run that dies, however it dies, frees its slot with its lock.
struct Slot {
    number: u8,
    #[cfg_attr(not(test), allow(dead_code))]
    lock_file: PathBuf,
    /// Held open while the run lasts: closing it releases the lock.
    _lock: std::fs::File,
}

impl Slot {
    fn claim(dir: &Path) -> Result<Self> {
        use std::io::Write;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for number in 0..100u8 {
            let lock_file = dir.join(format!("slot-{number}.lock"));
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(false)
                .open(&lock_file)
                .with_context(|| format!("opening {}", lock_file.display()))?;
            match file.try_lock() {
                Ok(()) => {
                    file.set_len(0)?;
                    write!(file, "{}", std::process::id())?;
                    return Ok(Self { number, lock_file, _lock: file });
                }
                Err(std::fs::TryLockError::WouldBlock) => continue,
                Err(std::fs::TryLockError::Error(error)) => {
                    return Err(error).with_context(|| format!("locking {}", lock_file.display()));
                }
            }
        }
        bail!("100 local clusters are running already (locks in {})", dir.display())
    }
}

const TIMING: Timing = Timing {
    settle_within: Duration::from_secs(90),
    unknown_within: Duration::from_secs(40),
    settle: Duration::from_secs(4),
    death_within: Duration::from_secs(60),
};

/// Where the in-process parts log: into `file`, or to stderr (cluster mode), in colour
/// only on a terminal. `RUST_LOG` sets the level (default: info into a file, warnings on
/// stderr).
fn log_to(file: Option<&Path>) -> Result<()> {
    use std::io::IsTerminal;
    let default = if file.is_some() { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let installed = match file {
        Some(path) => {
            let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
            builder.with_ansi(false).with_writer(std::sync::Mutex::new(file)).try_init()
        }
        None => builder.with_ansi(std::io::stderr().is_terminal()).with_writer(std::io::stderr).try_init(),
    };
    installed.map_err(|error| anyhow::anyhow!("setting up logging: {error}"))
}

pub async fn run(args: RunArgs, root: &Path) -> Result<()> {
    if let Some(path) = &args.kubeconfig {
        log_to(None)?;
        return install_into(path).await;
    }
    // from here on SIGTERM and Ctrl-C stop the cluster cleanly, whatever it is doing
    let shutdown = shutdown_signal()?;
    let dir = root.join("target/edgegrid-local");
    let slot = Slot::claim(&dir)?;
    let kubeconfig_out = args.kubeconfig_out.clone().unwrap_or_else(|| match slot.number {
        0 => dir.join("kubeconfig"),
        n => dir.join(format!("kubeconfig-{n}")),
    });
    let run_dir = dir.join(format!("slot-{}", slot.number));
    let logs = run_dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    log_to(Some(&logs.join(IN_PROCESS_LOG)))?;
    println!(
        "logs: {} (each component's output in <component>.log, the in-process grid controller and stand-ins' in {IN_PROCESS_LOG})",
        logs.display()
    );
    if args.build {
        println!("building the component binaries (cargo build)...");
        processes::build(root)?;
    }
    let bin_dir = processes::binary_dir()?;
    if *shutdown.borrow() {
        return Ok(()); // stopped while building
    }

    let mut server = FakeApiServer::start_with(args.port, ServerConfig::default())
        .await
        .with_context(|| format!("starting the local cluster on 127.0.0.1:{}", args.port))?;
    let client = Client::try_from(kube::Config::new(server.url().parse()?))?;
    let (stop, stopped) = watch::channel(false);
    let result = run_cluster(
        &args,
        root,
        &mut server,
        client,
        slot.number,
        (&run_dir, &kubeconfig_out, &bin_dir),
        stopped,
        shutdown,
    )
    .await;
    let _ = stop.send(true);
    let _ = std::fs::remove_file(&kubeconfig_out);
    server.stop().await;
    drop(slot);
    result
}

#[allow(clippy::too_many_arguments)]
async fn run_cluster(
    args: &RunArgs,
    root: &Path,
    server: &mut FakeApiServer,
    client: Client,
    slot: u8,
    (run_dir, kubeconfig_out, bin_dir): (&Path, &Path, &Path),
    stopped: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<()> {
    let logs = run_dir.join("logs");
    let crds = install_crds(&client).await?;
    println!("local cluster: API server at {} ({crds} CRDs)", server.url());
    let nodes = match &args.soak {
        Some(soak) => layout::nodes(slot, soak.units, soak.nodes / soak.units),
        None => layout::nodes(slot, layout::UNITS, layout::NODES_PER_UNIT),
    };
    let api_addr: SocketAddr = server.url().trim_start_matches("http://").parse().context("the API server address")?;
    let mut links = Vec::new();
    for node in &nodes {
        links.push((node.name.clone(), SiteLink::start(api_addr).await?));
    }
    let mut kubelets = Vec::new();
    let version = client.apiserver_version().await.context("the API server's version")?;
    let machine = std::sync::Arc::new(kubelet::Machine::of_host(&version.git_version));
    for node in &nodes {
        let link = links.iter().find(|(n, _)| *n == node.name).map(|(_, l)| l.clone()).context("a node's link")?;
        let kubelet = Kubelet::new(node.clone(), machine.clone(), link.clone());
        kubelet.register(&client).await?;
        // the kubelet talks to the API server through its node's cloud link
        let site_client = Client::try_from(kube::Config::new(link.url().parse()?))?;
        let task = kubelet.clone();
        let stop = stopped.clone();
        tokio::spawn(async move {
            if let Err(error) = task.run(site_client, stop).await {
                eprintln!("error: the kubelet stand-in stopped: {error:#}");
            }
        });
        kubelets.push(kubelet);
    }
    println!(
        "  {} edge nodes registered: {}",
        nodes.len(),
        nodes.iter().map(|n| format!("{} ({}, {})", n.name, n.unit, n.ip)).collect::<Vec<_>>().join(", ")
    );
    tokio::spawn(workloads::run(client.clone(), stopped.clone()));
    let grid_controller = GridController::start(&server.url()).await?;

    // the soak shares each unit's upstream, vouched as the chart sets it up
    let sharing = if args.soak.is_some() { Some(Sharing::new(run_dir)?) } else { None };
    let components =
        start_components(&client, server, slot, (run_dir, bin_dir), &nodes, &links, sharing.as_ref()).await?;
    for kubelet in &kubelets {
        kubelet.register_daemon_pod(&client, "grid-wrapper", layout::WRAPPER_ADMIN_PORT).await?;
    }
    let examples = apply_examples(&client, &root.join("examples")).await?;
    println!("  {examples} example objects applied (examples/*.yaml)");
    if let Some(parent) = kubeconfig_out.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    let tmp = kubeconfig_out.with_extension("tmp");
    std::fs::write(&tmp, kubeconfig_for(&server.url()))?;
    std::fs::rename(&tmp, kubeconfig_out)?;
    println!("  export KUBECONFIG={}", kubeconfig_out.display());

    let mut cluster = Cluster {
        client,
        nodes,
        timing: TIMING,
        logs,
        kubelets,
        links,
        components,
        grid_controller,
        slot,
        partitions: None,
    };
    let result = match &args.soak {
        // the soak stops itself on a signal: its table and verdict are still due
        Some(soak) => crate::soak::run(&mut cluster, server, soak, shutdown.clone()).await,
        None => tokio::select! {
            result = play(&mut cluster, &*server, args.acts) => result,
            _ = shutdown.wait_for(|stop| *stop) => Ok(()),
        },
    };
    if result.is_ok() && args.acts != Acts::Scenario && args.soak.is_none() && !*shutdown.borrow() {
        println!("The cluster keeps running (kubectl get nodes,pods,endpointslices -A). Ctrl-C stops it.");
        let _ = shutdown.wait_for(|stop| *stop).await;
    }
    println!("stopping...");
    // all at once, as a node drain would: SIGTERM to each, then wait (SIGKILL after 5 s)
    for component in &mut cluster.components {
        component.terminate().await;
    }
    for component in &mut cluster.components {
        component.wait_or_kill(Duration::from_secs(5)).await;
    }
    if let Err(error) = cluster.grid_controller.stop().await {
        eprintln!("error: {error:#}");
    }
    result
}

/// Waits for every component, then plays the acts.
async fn play(cluster: &mut Cluster, server: &FakeApiServer, acts: Acts) -> Result<()> {
    wait_ready(cluster).await?;
    let (one, before) = acts::act_one(cluster, cluster.timing.settle_within).await?;
    let mut problems = one.problems.len();
    if acts != Acts::None {
        problems += acts::act_two(cluster, "unit-b", &before).await?.problems.len();
        problems += acts::act_three(cluster, "edge-a-1", &before).await?.problems.len();
    }
    if acts != Acts::None {
        print_webhook_reviews(cluster).await;
        problems += check_rbac(server);
    }
    problems += report_exits(cluster);
    if problems == 0 {
        println!("Every act went as expected.");
        return Ok(());
    }
    print_logs_to_read(cluster);
    if acts == Acts::Scenario {
        bail!("{problems} expectation(s) not met (see above)");
    }
    println!("{problems} expectation(s) not met (see above).");
    Ok(())
}

/// Names every component that exited without being stopped, and its log; returns how many.
pub(crate) fn report_exits(cluster: &mut Cluster) -> usize {
    let mut exited = 0;
    for component in &mut cluster.components {
        if let Some(status) = component.exited() {
            println!("{} exited ({status}): read {}", component.name, component.log.display());
            exited += 1;
        }
    }
    exited
}

/// How many lines of `log` are errors (the components' and the in-process tracing format:
/// `<time> ERROR <target>: ...`).
fn error_lines(log: &str) -> usize {
    log.lines().filter(|line| line.split_whitespace().nth(1) == Some("ERROR")).count()
}

/// After a failed act: which logs to read (the directory, then each log with ERROR lines).
fn print_logs_to_read(cluster: &Cluster) {
    let mut logs: Vec<(String, PathBuf)> = cluster.components.iter().map(|c| (c.name.clone(), c.log.clone())).collect();
    logs.push(("the in-process grid controller and stand-ins".into(), cluster.logs.join(IN_PROCESS_LOG)));
    let with_errors: Vec<String> = logs
        .iter()
        .filter_map(|(name, path)| {
            let errors = error_lines(&std::fs::read_to_string(path).ok()?);
            (errors > 0).then(|| format!("   {name}: {} ({errors} ERROR lines)", path.display()))
        })
        .collect();
    println!("Logs to read: {} (a file per component)", cluster.logs.display());
    for line in with_errors {
        println!("{line}");
    }
}

/// Checks every request each component binary made against the chart's RBAC table
/// ([`crate::rbac`]); returns how many calls it does not allow.
fn check_rbac(server: &FakeApiServer) -> usize {
    let requests = server.requests().since(0);
    let mut callers: Vec<&str> = requests.iter().filter_map(|r| r.user.as_deref()?.split('/').next()).collect();
    callers.sort_unstable();
    callers.dedup();
    let violations = crate::rbac::violations(&requests, "kube-system");
    println!(
        "API calls checked against the chart's RBAC (xtask/src/rbac.rs): {} requests from {}; {}",
        requests.iter().filter(|r| r.user.is_some()).count(),
        callers.join(", "),
        if violations.is_empty() { "all allowed".to_string() } else { format!("{} not allowed:", violations.len()) }
    );
    for violation in &violations {
        println!("   - {violation}");
    }
    violations.len()
}

/// What the admission webhook was asked and answered during the acts (from its metrics).
async fn print_webhook_reviews(cluster: &Cluster) {
    let Some(webhook) = cluster.components.iter().find(|c| c.name == "edge-health-admission") else { return };
    let Some((200, exposition)) = processes::http_get(webhook.admin, "/metrics").await else {
        println!("(the admission webhook's metrics did not answer)");
        return;
    };
    let counts = review_counts(&exposition);
    let summary: Vec<String> = counts.iter().map(|(hook, outcome, n)| format!("{hook} {outcome}: {n}")).collect();
    println!(
        "The admission webhook reviewed: {}",
        if summary.is_empty() { "nothing".to_string() } else { summary.join(", ") }
    );
}

/// `(hook, outcome, count)` of every `edge_health_admission_reviews_total` sample.
fn review_counts(exposition: &str) -> Vec<(String, String, u64)> {
    let label = |labels: &str, name: &str| {
        let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
        Some(labels[start..].split('"').next()?.to_string())
    };
    exposition
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("edge_health_admission_reviews_total{")?;
            let (labels, value) = rest.split_once("} ")?;
            let count = value.trim().parse::<f64>().ok()? as u64;
            Some((label(labels, "hook")?, label(labels, "outcome")?, count))
        })
        .collect()
}

/// The namespace the chart's namespaced objects are taken to be in here (as in the RBAC
/// check).
const RELEASE_NAMESPACE: &str = "kube-system";

/// The chart's ValidatingAdmissionPolicy keeping each edge-health daemon to its own Node's
/// annotations and its peers' verdicts, and its binding.
async fn install_node_restriction(client: &Client) -> Result<()> {
    use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
    let [policy, binding] = edgegrid_testing::chart::edge_health_node_policy(RELEASE_NAMESPACE, "cloud");
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(policy).context("the chart's policy")?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(binding).context("its binding")?;
    Api::all(client.clone()).create(&PostParams::default(), &policy).await.context("installing the node policy")?;
    Api::all(client.clone()).create(&PostParams::default(), &binding).await.context("binding the node policy")?;
    Ok(())
}

/// Registers the webhook and the node restriction policy, and starts every component
/// binary.
async fn start_components(
    client: &Client,
    server: &FakeApiServer,
    slot: u8,
    (run_dir, bin_dir): (&Path, &Path),
    nodes: &[SimNode],
    links: &[(String, SiteLink)],
    sharing: Option<&Sharing>,
) -> Result<Vec<Component>> {
    let cloud_ip = Ipv4Addr::new(127, 100 + slot, 0, 1);
    let cloud = server.url();
    let key_file = run_dir.join("edge-health-hmac.key");
    std::fs::write(&key_file, random_key()?)?;
    let path = |p: &Path| p.display().to_string();
    let mut components = Vec::new();

    let webhook = SocketAddr::from((cloud_ip, 8443));
    let configuration = edge_health_admission::configuration::mutating_webhook_configuration(
        "edge-health-admission",
        &edge_health_admission::configuration::Endpoint::Url(format!("https://{webhook}")),
        None,
    );
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &configuration)
        .await
        .context("registering the admission webhook")?;
    install_node_restriction(client).await?;
    let admin = SocketAddr::from((cloud_ip, 8080));
    let args = [
        "--bind-address",
        &webhook.to_string(),
        "--metrics-bind-address",
        &admin.to_string(),
        "--self-managed-certificates",
        "--extra-san",
        &cloud_ip.to_string(),
        // edge-health's units: only the nodes it watches are protected
        "--unit-label-key",
        layout::UNIT_LABEL_KEY,
    ];
    components.push(Component::start(
        bin_dir,
        "edge-health-admission",
        "edge-health-admission",
        &cloud,
        &strings(&args),
        admin,
        run_dir,
    )?);

    let admin = SocketAddr::from((cloud_ip, 10259));
    let args = [
        "--bind-address",
        &SocketAddr::from((cloud_ip, 10258)).to_string(),
        "--metrics-bind-address",
        &admin.to_string(),
        "--node-monitor-period",
        "1s",
        "--node-monitor-grace-period",
        "8s",
        "--node-startup-grace-period",
        "20s",
        "--unit-label-key",
        layout::UNIT_LABEL_KEY,
    ];
    components.push(Component::start(
        bin_dir,
        "edge-node-lifecycle",
        "edge-node-lifecycle",
        &cloud,
        &strings(&args),
        admin,
        run_dir,
    )?);

    if let Some(sharing) = sharing {
        let admin = SocketAddr::from((cloud_ip, 10263));
        let args = [
            "--bind-address",
            &SocketAddr::from((cloud_ip, 10262)).to_string(),
            "--metrics-bind-address",
            &admin.to_string(),
            "--signing-key-file",
            &path(&sharing.signer_key),
            "--unit-label-key",
            layout::UNIT_LABEL_KEY,
            "--namespace",
            RELEASE_NAMESPACE,
            "--leader-elect-resource-namespace",
            RELEASE_NAMESPACE,
        ];
        components.push(Component::start(
            bin_dir,
            "unit-signer",
            "unit-signer",
            &cloud,
            &strings(&args),
            admin,
            run_dir,
        )?);
    }

    for node in nodes {
        // a node's components reach the API server through its cloud link
        let site = links.iter().find(|(name, _)| *name == node.name).context("a node's link")?.1.url();
        let admin = node.addr(layout::EDGE_HEALTH_METRICS_PORT);
        let check = format!("kind=http,port={},path=/healthz,timeout=300ms,retries=1", layout::KUBELET_PORT);
        // each node's own key, kept in the run directory as the chart keeps it on the node
        let signing_key = run_dir.join(format!("edge-health-{}.signing-key", node.name));
        let args = [
            "--node-name",
            &node.name,
            "--bind-address",
            &node.addr(layout::EDGE_HEALTH_PORT).to_string(),
            "--metrics-bind-address",
            &admin.to_string(),
            "--advertise-address",
            &node.ip.to_string(),
            "--unit-label-key",
            layout::UNIT_LABEL_KEY,
            "--hmac-key-file",
            &path(&key_file),
            "--signing-key-file",
            &path(&signing_key),
            // as the chart: the webhook's deployment writes the verdicts from the views
            "--verdict-writer",
            "cloud",
            "--check",
            &check,
            "--period",
            "2s",
            "--indirect-timeout",
            "1s",
            // a liveness challenge waits this long before helpers are asked
            "--message-timeout",
            "500ms",
        ];
        // its token is its pod's service account token, which names the node: what the
        // chart's node restriction policy keys on
        let name = format!("edge-health-{}", node.name);
        let identity = UserInfo::service_account(RELEASE_NAMESPACE, "edge-health").on_node(&node.name);
        server.add_user(&processes::token("edge-health", &name), identity);
        components.push(Component::start(bin_dir, "edge-health", &name, &site, &strings(&args), admin, run_dir)?);
        let admin = node.addr(layout::WRAPPER_ADMIN_PORT);
        let verdicts = format!("http://{}/verdicts", node.addr(layout::EDGE_HEALTH_PORT));
        let mut args = strings(&[
            "--node-name",
            &node.name,
            "--bind-address",
            &node.addr(layout::WRAPPER_PORT).to_string(),
            "--metrics-bind-address",
            &admin.to_string(),
            "--edge-health-url",
            &verdicts,
        ]);
        if let Some(sharing) = sharing {
            // one upstream per unit: the node's edge-health key is its identity in the unit
            args.extend(strings(&[
                "--unit-label-key",
                layout::UNIT_LABEL_KEY,
                "--node-key-file",
                &path(&signing_key),
                "--unit-upstream-bind-address",
                &node.addr(layout::UNIT_UPSTREAM_PORT).to_string(),
                "--unit-vouch-keys",
                &sharing.public_key,
                "--unit-vouch-namespace",
                RELEASE_NAMESPACE,
            ]));
        }
        components.push(Component::start(
            bin_dir,
            "grid-wrapper",
            &format!("grid-wrapper-{}", node.name),
            &site,
            &args,
            admin,
            run_dir,
        )?);
    }
    println!(
        "  started {} components: the admission webhook{}, edge-node-lifecycle, and per node a grid wrapper{} and an edge-health daemon",
        components.len(),
        if sharing.is_some() { ", the unit signer" } else { "" },
        if sharing.is_some() { " (one upstream per unit, vouched)" } else { "" },
    );
    Ok(components)
}

/// Vouched sharing of each unit's upstream: the unit signer's key, made for the run and
/// kept 0600 in the run directory (by the components' own `write_private`), as the chart
/// keeps it in a Secret; and its public half, which the wrappers are given.
struct Sharing {
    signer_key: PathBuf,
    public_key: String,
}

impl Sharing {
    fn new(run_dir: &Path) -> Result<Self> {
        use base64::Engine as _;
        use ring::signature::{Ed25519KeyPair, KeyPair as _};
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new())
            .map_err(|_| anyhow::anyhow!("generating the unit signer's key"))?;
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref())
            .map_err(|e| anyhow::anyhow!("reading the unit signer's key back: {e}"))?;
        let signer_key = run_dir.join("unit-signer.key");
        controller_support::state_file::write_private(&signer_key, pkcs8.as_ref())
            .with_context(|| format!("writing {}", signer_key.display()))?;
        let public_key = base64::engine::general_purpose::STANDARD.encode(pair.public_key().as_ref());
        Ok(Self { signer_key, public_key })
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// The unit's HMAC key for this run: 32 random bytes from the OS, hex-encoded.
fn random_key() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).context("reading /dev/urandom")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// `--kubeconfig` (or `KUBECONFIG`): installs the CRDs into that cluster.
async fn install_into(path: &Path) -> Result<()> {
    let hint = "(unset KUBECONFIG and leave out --kubeconfig to start the embedded local cluster)";
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading the kubeconfig {} {hint}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .with_context(|| format!("the kubeconfig {} {hint}", path.display()))?;
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config)?;
    let installed = install_crds(&client).await.with_context(|| format!("the cluster at {server} {hint}"))?;
    println!("installed {installed} CRDs into {server}");
    pod_proxy_views::print(&client).await
}

async fn install_crds(client: &Client) -> Result<usize> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crds = edgegrid_core::crd::all_crds();
    for crd in &crds {
        api.patch(&crd.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(crd))
            .await
            .with_context(|| format!("installing CRD {}", crd.name_any()))?;
    }
    Ok(crds.len())
}

/// Applies every `examples/*.yaml` document (server-side apply, default namespace).
pub(crate) async fn apply_examples(client: &Client, dir: &Path) -> Result<usize> {
    let discovery = Discovery::new(client.clone()).run().await.context("discovery")?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut applied = 0;
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        let documents: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).with_context(|| format!("parsing {}", file.display()))?;
        for document in documents.into_iter().filter(|d| !d.is_null()) {
            let object: DynamicObject = serde_json::from_value(document)?;
            let types = object.types.clone().with_context(|| format!("{}: no apiVersion/kind", file.display()))?;
            let (group, version) = types.api_version.split_once('/').unwrap_or(("", types.api_version.as_str()));
            let (resource, caps) = discovery
                .get(group)
                .and_then(|g| g.versioned_resources(version).into_iter().find(|(r, _)| r.kind == types.kind))
                .with_context(|| format!("{}: {} is not served", file.display(), types.api_version))?;
            let api: Api<DynamicObject> = if caps.scope == kube::discovery::Scope::Namespaced {
                Api::namespaced_with(client.clone(), object.namespace().as_deref().unwrap_or("default"), &resource)
            } else {
                Api::all_with(client.clone(), &resource)
            };
            api.patch(&object.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&object))
                .await
                .with_context(|| format!("applying {} {}", types.kind, object.name_any()))?;
            applied += 1;
        }
    }
    Ok(applied)
}

/// Turns true on the first SIGTERM or Ctrl-C (the handlers are in place when this returns).
fn shutdown_signal() -> Result<watch::Receiver<bool>> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tx.send_replace(true);
        // keep the channel open for the receivers
        tx.closed().await;
    });
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubeconfig_left_by_an_earlier_run_is_ignored_and_others_are_used() {
        let root = std::env::temp_dir().join(format!("xtask-kubeconfig-{}", std::process::id()));
        std::fs::create_dir_all(&root).expect("dir");
        let gone = root.join("target/edgegrid-local/kubeconfig");
        assert_eq!(kubeconfig_from(Some(gone.clone().into()), &root), (None, Some(gone)));
        let roundabout = root.join("xtask/../target/./edgegrid-local/kubeconfig-3");
        assert_eq!(kubeconfig_from(Some(roundabout.clone().into()), &root), (None, Some(roundabout)));
        let copied = root.join("elsewhere");
        std::fs::write(&copied, kubeconfig_for("http://127.0.0.1:1")).expect("write");
        assert_eq!(kubeconfig_from(Some(copied.clone().into()), &root), (None, Some(copied)));
        let real = root.join("real");
        std::fs::write(&real, "apiVersion: v1\nkind: Config\ncurrent-context: prod\n").expect("write");
        assert_eq!(kubeconfig_from(Some(real.clone().into()), &root), (Some(real.clone()), None));
        let missing = root.join("missing");
        assert_eq!(kubeconfig_from(Some(missing.clone().into()), &root), (Some(missing), None));
        assert_eq!(kubeconfig_from(Some("".into()), &root), (None, None));
        assert_eq!(kubeconfig_from(None, &root), (None, None));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn flags_are_read_and_help_asked_for_is_no_run() {
        let root = Path::new("/nonexistent-root");
        let parse = |args: &[&str]| RunArgs::parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>(), root);
        assert!(parse(&["--help"]).expect("help").is_none());
        assert!(parse(&["-h"]).expect("help").is_none());
        let args =
            parse(&["--scenario", "--no-build", "--port", "7", "--kubeconfig", "/k"]).expect("ok").expect("a run");
        assert_eq!(
            (args.acts, args.build, args.port, args.kubeconfig.as_deref()),
            (Acts::Scenario, false, 7, Some(Path::new("/k")))
        );
        let error = parse(&["--bogus"]).err().expect("refused").to_string();
        assert!(error.starts_with("unknown argument \"--bogus\"\nusage: cargo xtask run"), "{error}");
        assert!(parse(&["--port"]).is_err(), "a flag without its value");
    }

    #[test]
    fn error_lines_are_counted_in_the_log_format() {
        let log = "2026-11-25T15:07:15.355353Z ERROR kube_client::client::builder: failed with error client error\n\
            2026-11-25T15:07:15.355402Z  WARN edge_health::daemon::api: node watch failed; ERROR in the text\n\
            2026-11-25T15:07:16.006066Z ERROR kube_client::client::builder: failed\n";
        assert_eq!(error_lines(log), 2);
        assert_eq!(error_lines(""), 0);
    }

    #[test]
    fn review_counts_are_read_from_the_exposition() {
        let exposition = "# HELP edge_health_admission_reviews AdmissionReviews answered\n\
            edge_health_admission_reviews_total{hook=\"endpointslice\",outcome=\"unchanged\"} 12\n\
            edge_health_admission_reviews_total{hook=\"node-taint\",outcome=\"patched\"} 3\n\
            edge_health_admission_patch_operations_total{hook=\"node-taint\"} 3\n";
        assert_eq!(
            review_counts(exposition),
            [("endpointslice".into(), "unchanged".into(), 12), ("node-taint".into(), "patched".into(), 3)]
        );
    }

    #[test]
    fn concurrent_runs_take_different_slots_and_a_dead_runs_slot_is_taken_back() {
        let dir = std::env::temp_dir().join(format!("xtask-slots-{}", std::process::id()));
        let first = Slot::claim(&dir).expect("a slot");
        let second = Slot::claim(&dir).expect("a slot");
        assert_eq!((first.number, second.number), (0, 1));
        assert_eq!(std::fs::read_to_string(&first.lock_file).expect("pid"), std::process::id().to_string());
        drop(first);
        let again = Slot::claim(&dir).expect("a slot");
        assert_eq!(again.number, 0, "a stopped run's slot is free");
        // a run that died left its file behind, with a pid that is no process: no lock, free
        std::fs::write(dir.join("slot-2.lock"), "4294967295").expect("write");
        let reclaimed = Slot::claim(&dir).expect("a slot");
        assert_eq!(reclaimed.number, 2);
        assert_eq!(std::fs::read_to_string(&reclaimed.lock_file).expect("pid"), std::process::id().to_string());
        drop((second, again, reclaimed));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Runs claiming slots all at once (threads here; the lock is per open file, so they
    /// contend as processes do) each get a slot of their own.
    #[test]
    fn simultaneous_claims_never_share_a_slot() {
        let dir = std::env::temp_dir().join(format!("xtask-slots-race-{}", std::process::id()));
        let start = std::sync::Barrier::new(8);
        let slots: Vec<Slot> = std::thread::scope(|scope| {
            let claims: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| {
                        start.wait();
                        Slot::claim(&dir).expect("a slot")
                    })
                })
                .collect();
            claims.into_iter().map(|claim| claim.join().expect("claimed")).collect()
        });
        let mut numbers: Vec<u8> = slots.iter().map(|slot| slot.number).collect();
        numbers.sort_unstable();
        assert_eq!(numbers, (0..8).collect::<Vec<u8>>());
        drop(slots);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
