//! `cargo xtask run`: the system on a cluster. With a kubeconfig (`--kubeconfig` or
//! `KUBECONFIG`) it installs the CRDs there. Without one it starts the embedded local
//! cluster: the in-repo fake apiserver on 127.0.0.1, demo edge nodes in two units, the
//! CRDs and the examples applied, and the grid controller running against it over HTTP;
//! a kubeconfig for kubectl is written; Ctrl-C or SIGTERM stops it.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use fake_apiserver::{FakeApiServer, ServerConfig};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::Discovery;
use kube::{Client, ResourceExt};

const FIELD_MANAGER: &str = "edgegrid-xtask";

pub struct RunArgs {
    pub kubeconfig: Option<PathBuf>,
    pub port: u16,
    pub kubeconfig_out: PathBuf,
}

impl RunArgs {
    pub fn parse(args: &[String], root: &Path) -> Result<Self> {
        let mut out = Self {
            kubeconfig: std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()).map(PathBuf::from),
            port: 0,
            kubeconfig_out: root.join("target/edgegrid-local/kubeconfig"),
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--kubeconfig" => out.kubeconfig = Some(PathBuf::from(value()?)),
                "--port" => out.port = value()?.parse().context("--port")?,
                "--kubeconfig-out" => out.kubeconfig_out = PathBuf::from(value()?),
                other => bail!("unknown argument {other:?} (expected --kubeconfig, --port, --kubeconfig-out)"),
            }
        }
        Ok(out)
    }
}

pub async fn run(args: RunArgs, root: &Path) -> Result<()> {
    if let Some(path) = &args.kubeconfig {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        let server = config.cluster_url.to_string();
        let client = Client::try_from(config)?;
        let installed = install_crds(&client).await?;
        println!("installed {installed} CRDs into {server}");
        return Ok(());
    }

    let server = FakeApiServer::start_with(args.port, ServerConfig::default())
        .await
        .with_context(|| format!("starting the local cluster on 127.0.0.1:{}", args.port))?;
    let config = kube::Config::new(server.url().parse()?);
    let client = Client::try_from(config)?;
    let crds = install_crds(&client).await?;
    let nodes = create_demo_nodes(&client).await?;
    let (stop_controllers, controllers_stopped) = tokio::sync::oneshot::channel::<()>();
    let metrics = std::sync::Arc::new(grid_controller::metrics::Metrics::default());
    let controllers = tokio::spawn(grid_controller::reconcile::run(client.clone(), metrics, async move {
        let _ = controllers_stopped.await;
    }));
    let examples = apply_examples(&client, &root.join("examples")).await?;
    if let Some(dir) = args.kubeconfig_out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tmp = args.kubeconfig_out.with_extension("tmp");
    std::fs::write(&tmp, server.kubeconfig())?;
    std::fs::rename(&tmp, &args.kubeconfig_out)?;
    println!(
        "local cluster running at {} ({crds} CRDs, {nodes} edge nodes, {examples} example objects, grid controller)",
        server.url()
    );
    println!("  export KUBECONFIG={}", args.kubeconfig_out.display());
    println!(
        "  kubectl get nodes -L zone1; kubectl get servicegrids,deploymentgrids,statefulsetgrids,services,deployments"
    );
    println!("Ctrl-C stops it.");
    wait_for_shutdown().await?;
    let _ = stop_controllers.send(());
    let _ = controllers.await;
    server.stop().await;
    let _ = std::fs::remove_file(&args.kubeconfig_out);
    Ok(())
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

/// Edge nodes in two units of the examples' `zone1` key (a real cluster's kubelets
/// register nodes; the local cluster has none of its own).
const DEMO_NODES: [(&str, &str); 3] = [("edge-a-0", "unit-a"), ("edge-a-1", "unit-a"), ("edge-b-0", "unit-b")];

async fn create_demo_nodes(client: &Client) -> Result<usize> {
    let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    for (name, unit) in DEMO_NODES {
        let node = serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"zone1": unit, "kubernetes.io/hostname": name}},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}
        });
        api.patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&node))
            .await
            .with_context(|| format!("creating node {name}"))?;
    }
    Ok(DEMO_NODES.len())
}

/// Applies every `examples/*.yaml` document (server-side apply, default namespace).
async fn apply_examples(client: &Client, dir: &Path) -> Result<usize> {
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

async fn wait_for_shutdown() -> Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        result = tokio::signal::ctrl_c() => result?,
    }
    Ok(())
}
