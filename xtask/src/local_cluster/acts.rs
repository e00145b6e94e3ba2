//! The three acts of the local cluster's demonstration, each printed as tables and checked:
//! 1. every node's kube-proxy gets only its own unit's endpoints from its grid wrapper;
//! 2. a site loses its cloud link: its nodes go Unknown, but its unit still sees them
//!    alive, so no NoExecute taint, its pods stay Ready and every node's view is unchanged;
//! 3. a node dies inside a site: its peers vote it unhealthy, it is tainted NoExecute, its
//!    pods go not ready and its endpoints leave the other nodes' views; in a unit of
//!    three its two survivors are left with one live peer each, which vouches for nobody
//!    (`nodeunhealth: "undecided"`: stock handling, were they to go Unknown).

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Result;
use kube::Client;
use tokio::time::Instant;

use super::cluster::Cluster;
use super::layout::SimNode;
use super::views::{self, NodeState, NodeView};

/// The Service the acts follow (the ServiceGrid example's).
pub const SERVICE: &str = "default/echo-svc";

/// What one act found: its tables and what was not as expected.
pub struct Outcome {
    pub problems: Vec<String>,
}

/// Every node's view, in the layout's order.
async fn views_of(cluster: &Cluster) -> Vec<(SimNode, NodeView)> {
    let mut out = Vec::new();
    for node in &cluster.nodes {
        out.push((node.clone(), views::node_view(node.addr(super::layout::WRAPPER_PORT)).await));
    }
    out
}

/// Act 1's expectation for `node`: the Service's endpoints are exactly the ready pods
/// behind it on the nodes of `node`'s unit.
fn own_unit_only(node: &SimNode, view: &NodeView, states: &[NodeState], cloud: &BTreeSet<String>) -> Option<String> {
    let NodeView::Served(services) = view else {
        return Some(format!("{}: its grid wrapper does not answer", node.name));
    };
    let unit_nodes: BTreeSet<&str> = states.iter().filter(|s| s.unit == node.unit).map(|s| s.name.as_str()).collect();
    let wanted: Vec<&String> =
        cloud.iter().filter(|e| e.rsplit_once('@').is_some_and(|(_, n)| unit_nodes.contains(n))).collect();
    let served: Vec<&String> = services.get(SERVICE).map(|e| e.iter().collect()).unwrap_or_default();
    (served != wanted || wanted.is_empty())
        .then(|| format!("{}: {SERVICE} served {served:?}, expected {wanted:?}", node.name))
}

/// The cloud's ready endpoints of [`SERVICE`], as `pod@node`.
async fn cloud_endpoints(client: &Client) -> Result<BTreeSet<String>> {
    let slices = kube::Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(client.clone(), "default")
        .list(&kube::api::ListParams::default())
        .await?;
    let served = views::served_endpoints(&slices.items);
    Ok(served.get(SERVICE).into_iter().flatten().cloned().collect())
}

/// What keeps the workloads from being settled: one problem per Deployment or StatefulSet
/// whose status does not say every replica is ready (a StatefulSet makes its pods one at a
/// time, so the nodes' pod counts alone can look settled before it is).
async fn unsettled_workloads(client: &Client) -> Result<Vec<String>> {
    use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
    let all = kube::api::ListParams::default();
    let deployments = kube::Api::<Deployment>::all(client.clone()).list(&all).await?.items;
    let sets = kube::Api::<StatefulSet>::all(client.clone()).list(&all).await?.items;
    Ok(super::workloads::unsettled(&deployments, &sets))
}

/// Polls `check` every 500 ms until it reports no problem or `timeout` passes; returns
/// the last problems.
async fn until<F, Fut>(timeout: Duration, mut check: F) -> Result<Vec<String>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<String>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let problems = check().await?;
        if problems.is_empty() || Instant::now() >= deadline {
            return Ok(problems);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn print_tables(views: &[(SimNode, NodeView)], states: &[NodeState]) {
    println!("What each node's kube-proxy gets from its grid wrapper:");
    print!("{}", views::views_table(views));
    println!("What the cloud says of each node:");
    print!("{}", views::states_table(states));
}

fn verdict(problems: &[String]) {
    if problems.is_empty() {
        println!("=> as expected\n");
    } else {
        println!("=> NOT as expected:");
        for problem in problems {
            println!("   - {problem}");
        }
        println!();
    }
}

/// Act 1, once the cluster has settled (waits up to `timeout` for it).
pub async fn act_one(cluster: &Cluster, timeout: Duration) -> Result<(Outcome, Vec<(SimNode, NodeView)>)> {
    println!("== Act 1: each node's kube-proxy sees only its own unit's endpoints of {SERVICE}");
    let problems = until(timeout, || async {
        let states = views::node_states(&cluster.client, &cluster.nodes).await?;
        let cloud = cloud_endpoints(&cluster.client).await?;
        let mut problems = Vec::new();
        for (node, view) in views_of(cluster).await {
            problems.extend(own_unit_only(&node, &view, &states, &cloud));
        }
        problems.extend(unsettled_workloads(&cluster.client).await?);
        for state in &states {
            if state.ready != "True" || state.pods.0 != state.pods.1 {
                problems.push(format!(
                    "{}: Ready={}, pods ready {}/{}",
                    state.name, state.ready, state.pods.0, state.pods.1
                ));
            }
            // protection is earned: until two peers vouch for a node it carries nodeunhealth
            if state.voted_unhealthy {
                problems.push(format!("{}: not yet vouched for by its unit (nodeunhealth set)", state.name));
            }
        }
        Ok(problems)
    })
    .await?;
    let views = views_of(cluster).await;
    print_tables(&views, &views::node_states(&cluster.client, &cluster.nodes).await?);
    verdict(&problems);
    Ok((Outcome { problems }, views))
}

/// Act 2: `unit` loses its cloud link; `before` is act 1's views.
pub async fn act_two(cluster: &Cluster, unit: &str, before: &[(SimNode, NodeView)]) -> Result<Outcome> {
    println!("== Act 2: site {unit} loses its cloud link (its leases stop; its nodes go Unknown)");
    cluster.set_unit_link(unit, false);
    let in_unit = |s: &NodeState| s.unit == unit;
    // first the lifecycle controller's verdict: every node of the site Unknown
    let mut problems = until(cluster.timing.unknown_within, || async {
        let states = views::node_states(&cluster.client, &cluster.nodes).await?;
        Ok(states
            .iter()
            .filter(|s| in_unit(s) && s.ready != "Unknown")
            .map(|s| format!("{}: Ready={}", s.name, s.ready))
            .collect())
    })
    .await?;
    // then some monitor passes more, in which a NoExecute taint would have come
    tokio::time::sleep(cluster.timing.settle).await;
    let views = views_of(cluster).await;
    let states = views::node_states(&cluster.client, &cluster.nodes).await?;
    for state in states.iter().filter(|s| in_unit(s)) {
        if state.taints.iter().any(|t| t.ends_with(":NoExecute")) {
            problems.push(format!("{}: tainted NoExecute ({})", state.name, state.taints.join(",")));
        }
        if state.voted_unhealthy {
            problems.push(format!("{}: voted unhealthy", state.name));
        }
        if state.pods.0 != state.pods.1 {
            problems.push(format!("{}: pods ready {}/{}", state.name, state.pods.0, state.pods.1));
        }
    }
    for ((node, now), (_, then)) in views.iter().zip(before) {
        if now != then {
            problems.push(format!("{}: its view changed: {now:?}, was {then:?}", node.name));
        }
    }
    print_tables(&views, &states);
    verdict(&problems);
    println!("   (the link comes back: the site's kubelets report Ready again)");
    cluster.set_unit_link(unit, true);
    let back = until(cluster.timing.unknown_within, || async {
        let states = views::node_states(&cluster.client, &cluster.nodes).await?;
        Ok(states
            .iter()
            .filter(|s| in_unit(s) && (s.ready != "True" || !s.taints.is_empty()))
            .map(|s| format!("{}: after the link came back: Ready={}, taints {:?}", s.name, s.ready, s.taints))
            .collect())
    })
    .await?;
    if !back.is_empty() {
        verdict(&back);
    }
    problems.extend(back);
    Ok(Outcome { problems })
}

/// Act 3: `dead` dies; `before` is act 1's views.
pub async fn act_three(cluster: &mut Cluster, dead: &str, before: &[(SimNode, NodeView)]) -> Result<Outcome> {
    println!("== Act 3: node {dead} dies (kubelet, grid wrapper and edge-health gone); its unit votes");
    cluster.kill_node(dead).await;
    let dead_suffix = format!("@{dead}");
    let expected: Vec<(String, NodeView)> = before
        .iter()
        .map(|(node, view)| {
            let view = match view {
                _ if node.name == dead => NodeView::Unreachable,
                NodeView::Served(services) => NodeView::Served(
                    services
                        .iter()
                        .map(|(s, e)| (s.clone(), e.iter().filter(|e| !e.ends_with(&dead_suffix)).cloned().collect()))
                        .collect(),
                ),
                NodeView::Unreachable => NodeView::Unreachable,
            };
            (node.name.clone(), view)
        })
        .collect();
    let problems = until(cluster.timing.death_within, || async {
        let mut problems = Vec::new();
        let states = views::node_states(&cluster.client, &cluster.nodes).await?;
        if let Some(state) = states.iter().find(|s| s.name == dead) {
            if state.unhealth.as_deref() != Some("yes") {
                problems.push(format!("{dead}: not voted unhealthy yet"));
            }
            // its unit-mates: protected while each keeps two live peers to vouch for it;
            // in a smaller unit a death leaves each a single voice, which decides nothing
            let mates: Vec<&NodeState> = states.iter().filter(|s| s.unit == state.unit && s.name != dead).collect();
            let wanted = if mates.len() > 2 { None } else { Some("undecided") };
            for mate in mates.iter().filter(|m| m.unhealth.as_deref() != wanted) {
                problems.push(format!("{}: nodeunhealth {:?}, expected {wanted:?}", mate.name, mate.unhealth));
            }
            if !state.taints.iter().any(|t| t == "unreachable:NoExecute") {
                problems.push(format!("{dead}: not tainted unreachable:NoExecute ({:?})", state.taints));
            }
            if state.pods.0 != 0 {
                problems.push(format!("{dead}: {} pods still ready", state.pods.0));
            }
        }
        for ((node, view), (_, wanted)) in views_of(cluster).await.iter().zip(&expected) {
            if view != wanted {
                problems.push(format!("{}: serves {view:?}, expected {wanted:?}", node.name));
            }
        }
        Ok(problems)
    })
    .await?;
    print_tables(&views_of(cluster).await, &views::node_states(&cluster.client, &cluster.nodes).await?);
    verdict(&problems);
    Ok(Outcome { problems })
}
