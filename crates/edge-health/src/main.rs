//! `edge-health`: the per-node daemon that checks the nodes of its unit together with
//! their other members and writes the unit's verdict as the Node annotation
//! `nodeunhealth: "yes"`. Everything is in [`edge_health::daemon`]; see `--help`.

use controller_support::legacy_flags;
use edge_health::daemon::cli::superedge::EDGE_HEALTH;
use edge_health::daemon::{self, cli::Flags};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // SuperEdge's DaemonSet arguments work too (translated, logged once running)
    let (flags, legacy) = legacy_flags::parse::<Flags>(&EDGE_HEALTH);
    daemon::run(flags, legacy).await
}
