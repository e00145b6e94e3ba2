//! Every member of a shared unit must serve the unit upstream on the same port: a follower
//! dials its leader's address on its own configured port. Members configured with
//! different ports never share, and the follower says why: a member edge-health sees
//! alive that refuses connections on the unit port, a second time after a whole
//! pass-over, is counted in `grid_wrapper_unit_members_not_listening` (and logged once).

mod common;
#[path = "common/unit_site.rs"]
mod unit_site;

use std::time::Duration;

use common::*;
use unit_site::{Member, free_unit_port, start_with};

/// `n1` leads on one port; `n2` dials it on another, finds nothing listening, leads
/// itself for its pass-over (1 s here), tries again, and then says so.
#[tokio::test]
async fn a_member_refusing_the_unit_port_while_alive_is_said_and_counted() {
    let (server, _cloud) = two_unit_cluster().await;
    let (n1, n2) = (Member::new("n1", 73), Member::new("n2", 74));
    let peers = [n1.as_unit_member(), n2.as_unit_member()];
    let (port_1, port_2) = (free_unit_port(&[&n1, &n2]), free_unit_port(&[&n1, &n2]));
    assert_ne!(port_1, port_2);
    let pass_over = Duration::from_secs(1);
    let url = server.url();
    let leader = start_with(&n1, &peers, &url, port_1, None, pass_over).await;
    let follower = start_with(&n2, &peers, &url, port_2, None, pass_over).await;
    // two first contacts of 5 s each and a pass-over between them
    within_for(Duration::from_secs(40), "n2 counts n1 as not listening", async {
        while follower.wrapper.metrics().link.unit_members_not_listening.get() != 1 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(leader.wrapper.metrics().link.unit_members_not_listening.get(), 0, "n1 never dials n2");
    assert_eq!(leader.wrapper.metrics().link.unit_leading.get(), 1);
}
