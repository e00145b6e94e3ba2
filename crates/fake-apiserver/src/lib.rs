//! An in-repo Kubernetes API server with real list/watch semantics.
//!
//! No real kube-apiserver can run in CI here, and the project's binaries must behave on
//! the wire as they will against a real one; so this server is generic over resources,
//! stores JSON, and implements the semantics clients depend on: resourceVersions from
//! one counter, 409/404/422 `Status` errors, selectors, pagination with consistent
//! snapshots, watch resume from a bounded history (410 when too old), bookmarks, and
//! streaming lists (`sendInitialEvents`). It is test support and the embedded local
//! cluster; shipped binaries only ever reach it over HTTP.
//!
//! Approximations (the real server does more): server-side apply is a JSON merge of the
//! applied object without field ownership; strategic merge patch is refused with 415;
//! field selectors accept any dotted path; `generation` is tracked for every resource.

mod error;
mod resources;
mod selectors;
mod server;
mod store;

use std::net::SocketAddr;
use std::sync::Arc;

pub use error::ApiError;
pub use resources::ResourceType;
pub use server::{ServerConfig, router};
pub use store::Store;

use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// A running server on `127.0.0.1`. Dropping it stops it.
pub struct FakeApiServer {
    addr: SocketAddr,
    app: Arc<server::App>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl FakeApiServer {
    /// Starts on an ephemeral port with default settings.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_with(0, ServerConfig::default()).await
    }

    /// Starts on `port` (0 = ephemeral) of 127.0.0.1.
    pub async fn start_with(port: u16, config: ServerConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let (watch_generation, _) = watch::channel(0);
        let app = Arc::new(server::App {
            store: Arc::new(Store::new(config.history_limit, config.watch_buffer)),
            config,
            watch_generation,
        });
        let (shutdown, stopped) = oneshot::channel::<()>();
        let router = router(app.clone());
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, router).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(e) = served.await {
                tracing::error!("fake apiserver stopped: {e}");
            }
        });
        Ok(Self {
            addr,
            app,
            shutdown: Some(shutdown),
            task: Some(task),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn store(&self) -> &Store {
        &self.app.store
    }

    /// Fault: forget the change history, as etcd compaction does. Watches resuming from
    /// an older resourceVersion get 410 Expired and must relist.
    pub fn compact_history(&self) {
        self.app.store.compact_history();
    }

    /// Fault: close every open watch stream (clients must resume from their last version).
    pub fn drop_watches(&self) {
        self.app.watch_generation.send_modify(|g| *g += 1);
    }

    /// Stops serving and waits until the listener is closed.
    pub async fn stop(mut self) {
        self.drop_watches();
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.app.watch_generation.send_modify(|g| *g += 1);
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}
