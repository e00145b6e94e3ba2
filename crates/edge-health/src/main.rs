//! `edge-health`: the per-node daemon that checks the nodes of its unit together with
//! their other members and writes the unit's verdict as the Node annotation
//! `nodeunhealth: "yes"`. Everything is in [`edge_health::daemon`]; see `--help`.

use clap::Parser;
use edge_health::daemon::{self, cli::Flags};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    daemon::run(Flags::parse()).await
}
