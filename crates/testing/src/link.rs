//! A cuttable, freezable, counting TCP link between a client and a server on loopback: a
//! node's network path to the API server, for fault injection (its link cut, or silently
//! dropping everything) and for the bytes it receives.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP link to a server (an API server, as one client's network path to it): counts the
/// bytes the server sends and can be cut (open connections closed, new ones refused),
/// frozen (nothing passes either way, no connection closed: a path that drops packets
/// without a reset) and restored.
pub struct Link {
    pub address: SocketAddr,
    cut: Arc<AtomicBool>,
    frozen: Arc<AtomicBool>,
    received: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Link {
    pub async fn to(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let (cut, received) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let frozen = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (cut, frozen, received) = (cut.clone(), frozen.clone(), received.clone());
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if cut.load(Ordering::SeqCst) {
                        continue;
                    }
                    let (cut, frozen, received) = (cut.clone(), frozen.clone(), received.clone());
                    tokio::spawn(async move {
                        // a frozen path carries no handshake either
                        thawed(&frozen).await;
                        let Ok(mut server) = TcpStream::connect(upstream).await else { return };
                        let (mut client_read, mut client_write) = client.split();
                        let (mut server_read, mut server_write) = server.split();
                        let up = async {
                            let mut buffer = vec![0u8; 64 * 1024];
                            loop {
                                let n = client_read.read(&mut buffer).await?;
                                if n == 0 {
                                    return Ok::<_, std::io::Error>(());
                                }
                                thawed(&frozen).await;
                                server_write.write_all(&buffer[..n]).await?;
                            }
                        };
                        let down = async {
                            let mut buffer = vec![0u8; 64 * 1024];
                            loop {
                                let n = server_read.read(&mut buffer).await?;
                                thawed(&frozen).await;
                                if n == 0 || cut.load(Ordering::SeqCst) {
                                    return Ok::<_, std::io::Error>(());
                                }
                                received.fetch_add(n as u64, Ordering::SeqCst);
                                client_write.write_all(&buffer[..n]).await?;
                            }
                        };
                        let cut_now = async {
                            while !cut.load(Ordering::SeqCst) {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                        };
                        tokio::select! {
                            _ = up => {}
                            _ = down => {}
                            () = cut_now => {}
                        }
                    });
                }
            }
        });
        Ok(Self { address, cut, frozen, received, task })
    }

    pub fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
    }

    /// Frozen: bytes read on either side are held (not delivered, not dropped) and new
    /// connections wait, until thawed; no connection is closed, so the only way a client
    /// can tell is that nothing arrives.
    pub fn set_frozen(&self, frozen: bool) {
        self.frozen.store(frozen, Ordering::SeqCst);
    }
}

/// Returns once `frozen` is not set.
async fn thawed(frozen: &AtomicBool) {
    while frozen.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Link {
    /// Bytes the server sent through the link so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::SeqCst)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}
