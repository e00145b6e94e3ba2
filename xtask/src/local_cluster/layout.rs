//! Where the local cluster's simulated edge nodes live: two units of three nodes (the
//! soak asks for others), each node on its own loopback address (`127.<slot>.<unit>.<node>`), so every node's grid wrapper,
//! edge-health daemon and kubelet stand-in use the real ports of a node without clashing,
//! and two runs on one machine (different slots) do not clash either.

use std::net::{Ipv4Addr, SocketAddr};

/// The node label key units are made of (the examples' `gridUniqKey`).
pub const UNIT_LABEL_KEY: &str = "zone1";
/// The run command's units: two of three nodes.
pub const UNITS: u8 = 2;
pub const NODES_PER_UNIT: u8 = 3;

/// The kubelet stand-in's `/healthz` (edge-health's peer check target).
pub const KUBELET_PORT: u16 = 30250;
/// edge-health's exchange port and its metrics port.
pub const EDGE_HEALTH_PORT: u16 = 30505;
pub const EDGE_HEALTH_METRICS_PORT: u16 = 30508;
/// The grid wrapper kube-proxy would read, and its admin port.
pub const WRAPPER_PORT: u16 = 30506;
pub const WRAPPER_ADMIN_PORT: u16 = 30507;
/// Where a grid wrapper serves its unit when it leads the unit's shared upstream (every
/// member's the same, as the chart's).
pub const UNIT_UPSTREAM_PORT: u16 = 30510;

/// One simulated edge node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimNode {
    pub name: String,
    pub unit: String,
    /// Index of the unit (`unit-a` is 0) and of the node in its unit.
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

/// The name of unit `index`: `unit-a`, `unit-b`, ... (`index` < 26).
pub fn unit_name(index: u8) -> String {
    format!("unit-{}", char::from(b'a' + index))
}

/// Every simulated node of a run in `slot` (0..=99) with `units` (at most 26) of
/// `per_unit` nodes (at most 15: the pod network gives each node 15 addresses), sorted
/// by unit then name.
pub fn nodes(slot: u8, units: u8, per_unit: u8) -> Vec<SimNode> {
    (0..units)
        .flat_map(|u| {
            (0..per_unit).map(move |n| SimNode {
                name: format!("edge-{}-{n}", char::from(b'a' + u)),
                unit: unit_name(u),
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
        let nodes = nodes(3, UNITS, NODES_PER_UNIT);
        let names: Vec<_> = nodes.iter().map(|n| (n.name.as_str(), n.unit.as_str(), n.ip.to_string())).collect();
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
        let soak = super::nodes(0, 3, 4);
        assert_eq!(soak.len(), 12);
        assert_eq!(
            (soak[11].name.as_str(), soak[11].unit.as_str(), soak[11].ip),
            ("edge-c-3", "unit-c", Ipv4Addr::new(127, 100, 3, 4))
        );
    }
}
