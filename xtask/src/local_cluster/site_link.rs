//! A node's link to the cloud: everything on a node (its grid wrapper, edge-health daemon
//! and kubelet stand-in) reaches the API server through its link, a TCP proxy on loopback
//! that can be cut (open connections dropped, new ones refused) and restored. Cutting
//! every link of a unit is its site losing its uplink; the site network (the nodes'
//! own addresses) keeps working.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Clone)]
pub struct SiteLink {
    up: Arc<watch::Sender<bool>>,
    /// Where the site's clients connect.
    pub addr: SocketAddr,
}

impl SiteLink {
    /// Starts a link to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("binding a site link")?;
        let addr = listener.local_addr()?;
        let (up, _) = watch::channel(true);
        let up = Arc::new(up);
        let link = Self { up: up.clone(), addr };
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut state = up.subscribe();
                if !*state.borrow_and_update() {
                    continue; // refused: dropped at once
                }
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(upstream).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = state.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Ok(link)
    }

    pub fn is_up(&self) -> bool {
        *self.up.borrow()
    }

    pub fn set_up(&self, up: bool) {
        self.up.send_replace(up);
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}
