//! Zone disruption states and the eviction rate each state allows.

use std::collections::BTreeMap;

use edgegrid_core::keys;

use crate::lifecycle::LifecycleConfig;

/// `topology.kubernetes.io/region` + `zone` of a node (empty when unlabelled).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ZoneKey {
    pub region: String,
    pub zone: String,
}

impl ZoneKey {
    /// The zone a node's labels put it in.
    pub fn of_labels(labels: &BTreeMap<String, String>) -> Self {
        Self {
            region: labels.get(keys::TOPOLOGY_REGION_LABEL).cloned().unwrap_or_default(),
            zone: labels.get(keys::TOPOLOGY_ZONE_LABEL).cloned().unwrap_or_default(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneState {
    Initial,
    Normal,
    PartialDisruption,
    FullDisruption,
}

/// Kubernetes' `ComputeZoneState`.
pub fn zone_state(ready: usize, not_ready: usize, unhealthy_threshold: f64) -> ZoneState {
    if ready == 0 && not_ready > 0 {
        ZoneState::FullDisruption
    } else if not_ready > 2 && not_ready as f64 / (ready + not_ready) as f64 >= unhealthy_threshold {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    }
}

/// The rate kube-controller-manager's `setLimiterInZone` gives a zone entering `state`
/// with `size` nodes (`Initial` keeps the rate a new zone's queue starts with, the normal one).
pub fn zone_rate(state: ZoneState, size: usize, config: &LifecycleConfig) -> f64 {
    match state {
        ZoneState::Initial | ZoneState::Normal | ZoneState::FullDisruption => config.eviction_rate,
        ZoneState::PartialDisruption if size > config.large_cluster_threshold => config.secondary_eviction_rate,
        ZoneState::PartialDisruption => 0.0,
    }
}

/// Nodes per second a zone may be tainted NoExecute at, given every zone's state and size.
/// When all zones are fully disrupted the controller assumes it is the one cut off and
/// stops everywhere.
pub fn eviction_rate(zone: &ZoneKey, zones: &BTreeMap<ZoneKey, (ZoneState, usize)>, config: &LifecycleConfig) -> f64 {
    let all_fully_disrupted = !zones.is_empty() && zones.values().all(|(s, _)| *s == ZoneState::FullDisruption);
    if all_fully_disrupted {
        return 0.0;
    }
    match zones.get(zone) {
        None => config.eviction_rate,
        Some((state, size)) => zone_rate(*state, *size, config),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_state_table() {
        let cases = [
            ((5, 0), ZoneState::Normal),
            ((0, 0), ZoneState::Normal),
            ((0, 1), ZoneState::FullDisruption),
            ((0, 7), ZoneState::FullDisruption),
            ((1, 2), ZoneState::Normal),
            ((2, 3), ZoneState::PartialDisruption),
            ((3, 3), ZoneState::Normal),
            ((45, 55), ZoneState::PartialDisruption),
            ((46, 54), ZoneState::Normal),
        ];
        for ((ready, not_ready), want) in cases {
            assert_eq!(zone_state(ready, not_ready, 0.55), want, "{ready} ready, {not_ready} not ready");
        }
    }

    #[test]
    fn rates_per_state_size_and_global_disruption() {
        let config = LifecycleConfig::default();
        let key = |z: &str| ZoneKey { region: "r".into(), zone: z.into() };
        let zones = BTreeMap::from([
            (key("normal"), (ZoneState::Normal, 10)),
            (key("small-partial"), (ZoneState::PartialDisruption, 50)),
            (key("large-partial"), (ZoneState::PartialDisruption, 51)),
            (key("down"), (ZoneState::FullDisruption, 10)),
        ]);
        assert_eq!(eviction_rate(&key("normal"), &zones, &config), 0.1);
        assert_eq!(eviction_rate(&key("small-partial"), &zones, &config), 0.0);
        assert_eq!(eviction_rate(&key("large-partial"), &zones, &config), 0.01);
        assert_eq!(eviction_rate(&key("down"), &zones, &config), 0.1);
        let all_down =
            BTreeMap::from([(key("a"), (ZoneState::FullDisruption, 3)), (key("b"), (ZoneState::FullDisruption, 4))]);
        assert_eq!(eviction_rate(&key("a"), &all_down, &config), 0.0);
    }
}
