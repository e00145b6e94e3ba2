//! Where the local cluster's simulated edge nodes live: two units of three nodes, each node
//! on its own loopback address (`127.<slot>.<unit>.<node>`), so every node's grid wrapper,
//! edge-health daemon and kubelet stand-in use the real ports of a node without clashing,
//! and two runs on one machine (different slots) do not clash either.

use std::net::{Ipv4Addr, SocketAddr};

/// The node label key units are made of (the examples' `gridUniqKey`).
pub const UNIT_LABEL_KEY: &str = "zone1";
pub const UNITS: [&str; 2] = ["unit-a", "unit-b"];
pub const NODES_PER_UNIT: u8 = 3;

/// The kubelet stand-in's `/healthz` (edge-health's peer check target).
pub const KUBELET_PORT: u16 = 30250;
/// edge-health's exchange port and its metrics port.
pub const EDGE_HEALTH_PORT: u16 = 30505;
pub const EDGE_HEALTH_METRICS_PORT: u16 = 30508;
/// The grid wrapper kube-proxy would read, and its admin port.
pub const WRAPPER_PORT: u16 = 30506;
pub const WRAPPER_ADMIN_PORT: u16 = 30507;

/// One simulated edge node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimNode {
    pub name: String,
    pub unit: &'static str,
    /// Index of the unit in [`UNITS`] and of the node in its unit.
    pub unit_index: u8,
    pub index: u8,
    pub ip: Ipv4Addr,
}

impl SimNode {
    pub fn addr(&self, port: u16) -> SocketAddr {
        SocketAddr::from((self.ip, port))
    }

    /// The pod network of this node (`10.244.<unit>.<node * 16 + n>`).
    pub fn pod_ip(&self, n: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 244, self.unit_index + 1, self.index * 16 + 1 + n % 15)
    }
}

/// Every simulated node of a run in `slot` (0..=99), sorted by unit then name.
pub fn nodes(slot: u8) -> Vec<SimNode> {
    UNITS
        .iter()
        .enumerate()
        .flat_map(|(u, unit)| {
            let u = u as u8;
            (0..NODES_PER_UNIT).map(move |n| SimNode {
                name: format!("edge-{}-{n}", unit.trim_start_matches("unit-")),
                unit,
                unit_index: u,
                index: n,
                ip: Ipv4Addr::new(127, 100 + slot, u + 1, n + 1),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_units_of_three_nodes_each_on_its_own_address() {
        let nodes = nodes(3);
        let names: Vec<_> = nodes.iter().map(|n| (n.name.as_str(), n.unit, n.ip.to_string())).collect();
        assert_eq!(
            names,
            [
                ("edge-a-0", "unit-a", "127.103.1.1".to_string()),
                ("edge-a-1", "unit-a", "127.103.1.2".to_string()),
                ("edge-a-2", "unit-a", "127.103.1.3".to_string()),
                ("edge-b-0", "unit-b", "127.103.2.1".to_string()),
                ("edge-b-1", "unit-b", "127.103.2.2".to_string()),
                ("edge-b-2", "unit-b", "127.103.2.3".to_string()),
            ]
        );
        assert_eq!(nodes[4].pod_ip(0).to_string(), "10.244.2.17");
        assert_ne!(nodes[0].pod_ip(0), nodes[1].pod_ip(0));
    }
}
