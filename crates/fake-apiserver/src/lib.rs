//! An in-repo Kubernetes API server with real list/watch semantics.
//!
//! No real kube-apiserver can run in CI here, and the project's binaries must behave on
//! the wire as they will against a real one; so this server is generic over resources,
//! stores JSON, and implements the semantics clients depend on: 409/404/422 `Status`
//! errors, admission (mutating webhooks; ValidatingAdmissionPolicies, which see the
//! identity a test registered for the request's bearer token), finalizers, garbage
//! collection, and list/watch (resourceVersions from one counter, selectors, consistent
//! pagination, watch resume, 410, bookmarks, streaming lists) through the `listwatch`
//! crate, to which every change is committed.
//! It is test support and the embedded local cluster; shipped binaries only ever reach
//! it over HTTP.
//!
//! Approximations (the real server does more): server-side apply is a JSON merge of the
//! applied object without field ownership; strategic merge patch knows the merge keys
//! of the commonly patched built-in lists by field name (custom resources get 415, as
//! from the real server);
//! field selectors accept any dotted path; `generation` is tracked for every resource;
//! TokenRequest issues unsigned tokens that only this server recognises.

mod admission;
mod admission_request;
mod builtin_types;
mod error;
mod events;
mod faults;
mod field_manager;
mod matching;
mod pod_proxy;
mod policy;
mod requests;
mod resources;
mod schema;
mod server;
mod store;
mod strategic;
mod table;
mod token_request;
mod users;

use std::net::SocketAddr;
use std::sync::Arc;

pub use error::ApiError;
pub use faults::Fault;
pub use requests::{RecordedRequest, RequestLog};
pub use resources::ResourceType;
pub use server::{ServerConfig, router};
pub use store::{ListPage, Store};
pub use users::{NODE_NAME_EXTRA, UserInfo};

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
        Self::start_at(SocketAddr::from(([127, 0, 0, 1], port)), config).await
    }

    /// Starts on `addr`: for tests whose clients live in network namespaces the test made
    /// (an address on the test's own bridge); never a host's real interface.
    pub async fn start_at(addr: SocketAddr, config: ServerConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        Ok(Self::serve(listener, addr, new_app(config)))
    }

    fn serve(listener: TcpListener, addr: SocketAddr, app: Arc<server::App>) -> Self {
        let mut server = Self { addr, app, shutdown: None, task: None };
        server.serve_on(listener);
        server
    }

    fn serve_on(&mut self, listener: TcpListener) {
        let (shutdown, stopped) = oneshot::channel::<()>();
        let router = router(self.app.clone());
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, router).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(e) = served.await {
                tracing::error!(error = %e, "fake apiserver stopped");
            }
        });
        (self.shutdown, self.task) = (Some(shutdown), Some(task));
    }

    /// Fault: the server goes away and comes back on the same port with the same
    /// objects (as an apiserver restart does); with `lose_history`, watches cannot resume.
    pub async fn restart(mut self, lose_history: bool) -> std::io::Result<Self> {
        self.go_down().await;
        self.come_back(lose_history).await?;
        Ok(self)
    }

    /// Fault, the first half of a restart: the server stops serving (connections are
    /// refused, open watches end) and keeps its objects, as etcd keeps them while the
    /// apiserver is down, until [`Self::come_back`]. Down already: nothing happens.
    pub async fn go_down(&mut self) {
        self.shutdown_and_wait().await;
    }

    /// Serves again on the same address after [`Self::go_down`]; with `lose_history`, the
    /// change history is gone (watches resuming get 410 and list again). Serving
    /// already: nothing happens.
    pub async fn come_back(&mut self, lose_history: bool) -> std::io::Result<()> {
        if self.task.is_some() {
            return Ok(());
        }
        if lose_history {
            self.app.store.compact_history();
        }
        let listener = TcpListener::bind(self.addr).await?;
        self.serve_on(listener);
        Ok(())
    }

    /// Fault: make requests for a resource plural (or `*`) fail, hang or slow down.
    pub fn set_fault(&self, resource: &str, fault: Fault) {
        self.app.faults.set(resource, fault);
    }

    pub fn clear_faults(&self) {
        self.app.faults.clear();
    }

    /// Requests carrying `Authorization: Bearer <token>` are made by `user` from now on:
    /// what admission (webhooks' `userInfo`, policies' `request.userInfo`) sees. Other
    /// tokens, and requests without one, are `system:admin`.
    pub fn add_user(&self, token: &str, user: UserInfo) {
        self.app.users.add(token, user);
    }

    /// Who a request with `Authorization: Bearer <token>` is made by: a user registered
    /// with [`Self::add_user`], the ServiceAccount a TokenRequest issued `token` for, else
    /// `system:admin`.
    pub fn user_of(&self, token: &str) -> UserInfo {
        self.app.users.authenticate(Some(token))
    }

    /// The server's router and store without a socket, e.g. for
    /// `kube::Client::new(router, "default")` in-process. Fault injection still works
    /// through the reserved HTTP paths.
    pub fn in_process(config: ServerConfig) -> (axum::Router, Arc<Store>) {
        let app = new_app(config);
        (router(app.clone()), app.store.clone())
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig that points kubectl and kube-rs clients at this server.
    pub fn kubeconfig(&self) -> String {
        kubeconfig_for(&self.url())
    }

    pub fn store(&self) -> &Store {
        &self.app.store
    }

    /// The requests this server answered (bounded to the newest 100k).
    pub fn requests(&self) -> &RequestLog {
        &self.app.requests
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
        self.shutdown_and_wait().await;
    }

    async fn shutdown_and_wait(&mut self) {
        self.drop_watches();
        // hung requests must not hold the graceful shutdown open
        self.app.faults.clear();
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(mut task) = self.task.take() {
            // a watch a client opened in between (a reconnection once the faults are gone)
            // would hold the graceful shutdown open for its whole timeout: end watches until
            // the server has stopped
            loop {
                tokio::select! {
                    _ = &mut task => break,
                    () = tokio::time::sleep(std::time::Duration::from_millis(100)) => self.drop_watches(),
                }
            }
        }
    }
}

fn new_app(config: ServerConfig) -> Arc<server::App> {
    let (watch_generation, _) = watch::channel(0);
    Arc::new(server::App {
        store: Arc::new(Store::new(config.history_limit, config.watch_buffer)),
        config,
        faults: Default::default(),
        watch_generation,
        requests: RequestLog::new(100_000),
        users: Default::default(),
    })
}

/// A kubeconfig with one context, `fake`, for the server at `url` (no credentials: the
/// fake does not authenticate).
pub fn kubeconfig_for(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\ncurrent-context: fake\nusers:\n- name: fake\n  user: {{}}\n"
    )
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.app.watch_generation.send_modify(|g| *g += 1);
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}
