//! The controller's command line: the runtime's and leader election's flags (SuperEdge's
//! `--kubeconfig` and `--leader-elect*` among them; its other flags are translated by
//! [`superedge::GRID_CONTROLLER`]).

pub mod superedge;

use clap::Parser;
use controller_support::{LeaderFlags, RuntimeFlags, legacy_flags};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Reconciles ServiceGrid, DeploymentGrid and StatefulSetGrid",
    after_help = legacy_flags::HELP_NOTE,
    // SuperEdge's application-grid-controller elected no leader unless asked, and the
    // RBAC its manifest grants has no Leases: its one-replica Deployment must keep working
    // with our image. The chart, which runs two replicas, asks for the election.
    mut_arg("leader_elect", |arg| arg.default_value("false"))
)]
pub struct Flags {
    #[command(flatten)]
    pub runtime: RuntimeFlags<8081, 8080>,
    #[command(flatten)]
    pub leader: LeaderFlags,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_election_is_off_unless_asked_for_as_in_superedge() {
        let elect =
            |args: &[&str]| Flags::try_parse_from([&["grid-controller"], args].concat()).map(|f| f.leader.leader_elect);
        assert_eq!(elect(&[]).ok(), Some(false));
        assert_eq!(elect(&["--leader-elect"]).ok(), Some(true));
        assert_eq!(elect(&["--leader-elect=true"]).ok(), Some(true));
        assert_eq!(elect(&["--leader-elect=false"]).ok(), Some(false));
    }
}
