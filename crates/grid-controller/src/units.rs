//! Which unit values exist, per node label key, kept incrementally from a metadata-only
//! node watch.
//!
//! Node heartbeats are by far the most frequent events in a cluster and change no label;
//! a label change that leaves every key's set of values as it was (a node joining a unit
//! that already has nodes) changes no grid's plan either. So every update answers exactly
//! which label keys had their set of values change, and only grids keyed on those are
//! requeued. The index never does I/O and is fed node labels directly in tests.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Node name -> labels, and per label key the number of nodes carrying each value.
#[derive(Debug, Default)]
pub struct NodeUnits {
    nodes: HashMap<String, BTreeMap<String, String>>,
    counts: HashMap<String, BTreeMap<String, usize>>,
    synced: bool,
}

impl NodeUnits {
    /// Whether a full list has been seen: before that, an absent unit may just be unread.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// The values of `key` that at least one node carries: the units of a grid keyed on it.
    pub fn units(&self, key: &str) -> BTreeSet<String> {
        self.counts.get(key).map(|values| values.keys().cloned().collect()).unwrap_or_default()
    }

    /// A node was added or changed. Returns the label keys whose set of values changed.
    pub fn apply(&mut self, name: &str, labels: &BTreeMap<String, String>) -> BTreeSet<String> {
        let old = self.nodes.insert(name.to_string(), labels.clone()).unwrap_or_default();
        let mut changed = BTreeSet::new();
        for (key, value) in &old {
            if labels.get(key) != Some(value) && self.decrement(key, value) {
                changed.insert(key.clone());
            }
        }
        for (key, value) in labels {
            if old.get(key) != Some(value) && self.increment(key, value) {
                changed.insert(key.clone());
            }
        }
        changed
    }

    /// A node was deleted. Returns the label keys whose set of values changed.
    pub fn delete(&mut self, name: &str) -> BTreeSet<String> {
        let Some(old) = self.nodes.remove(name) else {
            return BTreeSet::new();
        };
        old.iter().filter(|(key, value)| self.decrement(key, value)).map(|(key, _)| key.clone()).collect()
    }

    /// A full list has been applied (and the nodes it lacked deleted: the watch reports a
    /// relist as its differences).
    pub fn mark_synced(&mut self) {
        self.synced = true;
    }

    /// Counts a node carrying `key=value`; true when the value is new for the key.
    fn increment(&mut self, key: &str, value: &str) -> bool {
        let count = self.counts.entry(key.to_string()).or_default().entry(value.to_string()).or_default();
        *count += 1;
        *count == 1
    }

    /// Uncounts a node carrying `key=value`; true when no node carries the value any more.
    fn decrement(&mut self, key: &str, value: &str) -> bool {
        let Some(values) = self.counts.get_mut(key) else {
            return false;
        };
        let Some(count) = values.get_mut(value) else {
            return false;
        };
        *count -= 1;
        if *count > 0 {
            return false;
        }
        values.remove(value);
        if values.is_empty() {
            self.counts.remove(key);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn keys(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_changes_of_a_keys_value_set_are_reported() {
        let mut index = NodeUnits::default();
        assert_eq!(index.apply("n1", &labels(&[("zone1", "a"), ("disk", "ssd")])), keys(&["disk", "zone1"]));
        assert!(!index.is_synced());
        index.mark_synced();
        assert!(index.is_synced());
        // a heartbeat (same labels) changes nothing
        assert_eq!(index.apply("n1", &labels(&[("zone1", "a"), ("disk", "ssd")])), keys(&[]));
        // joining an existing unit changes no value set; a new value does
        assert_eq!(index.apply("n2", &labels(&[("zone1", "a")])), keys(&[]));
        assert_eq!(index.apply("n3", &labels(&[("zone1", "b")])), keys(&["zone1"]));
        assert_eq!(index.units("zone1"), keys(&["a", "b"]));
        // n1 leaves unit a (n2 remains), drops disk (the last ssd)
        assert_eq!(index.apply("n1", &labels(&[("zone1", "b")])), keys(&["disk"]));
        assert_eq!(index.units("disk"), keys(&[]));
        // the last node of unit a goes
        assert_eq!(index.delete("n2"), keys(&["zone1"]));
        assert_eq!(index.units("zone1"), keys(&["b"]));
        assert_eq!(index.delete("unknown"), keys(&[]));
        // a relist that no longer contains n3 deletes it; b stays through n1
        assert_eq!(index.apply("n1", &labels(&[("zone1", "b")])), keys(&[]));
        assert_eq!(index.delete("n3"), keys(&[]));
        assert_eq!(index.units("zone1"), keys(&["b"]));
        assert_eq!(index.delete("n1"), keys(&["zone1"]));
        assert_eq!(index.units("zone1"), keys(&[]));
    }

    #[derive(Clone, Debug)]
    enum Step {
        Apply(u8, Vec<(u8, u8)>),
        Delete(u8),
        Relist(Vec<u8>),
    }

    fn step() -> impl Strategy<Value = Step> {
        let labels = prop::collection::vec((0u8..3, 0u8..3), 0..3);
        prop_oneof![
            4 => (0u8..5, labels).prop_map(|(n, l)| Step::Apply(n, l)),
            1 => (0u8..5).prop_map(Step::Delete),
            1 => prop::collection::vec(0u8..5, 0..5).prop_map(Step::Relist),
        ]
    }

    /// The brute-force answer: every key's set of values over all nodes.
    fn value_sets(nodes: &BTreeMap<String, BTreeMap<String, String>>) -> BTreeMap<String, BTreeSet<String>> {
        let mut sets: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for labels in nodes.values() {
            for (k, v) in labels {
                sets.entry(k.clone()).or_default().insert(v.clone());
            }
        }
        sets
    }

    fn changed_keys(
        before: &BTreeMap<String, BTreeSet<String>>,
        after: &BTreeMap<String, BTreeSet<String>>,
    ) -> BTreeSet<String> {
        before.keys().chain(after.keys()).filter(|k| before.get(*k) != after.get(*k)).cloned().collect()
    }

    proptest! {
        /// After any sequence of node changes and relists, `units` equals a brute-force
        /// scan and each step reports exactly the keys whose value set changed.
        #[test]
        fn matches_a_brute_force_scan(steps in prop::collection::vec(step(), 0..40)) {
            let mut index = NodeUnits::default();
            let mut model: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
            for step in steps {
                let before = value_sets(&model);
                let reported = match step {
                    Step::Apply(n, pairs) => {
                        let labels: BTreeMap<String, String> =
                            pairs.iter().map(|(k, v)| (format!("k{k}"), format!("v{v}"))).collect();
                        model.insert(format!("n{n}"), labels.clone());
                        index.apply(&format!("n{n}"), &labels)
                    }
                    Step::Delete(n) => {
                        model.remove(&format!("n{n}"));
                        index.delete(&format!("n{n}"))
                    }
                    Step::Relist(keep) => {
                        // a relist re-applies the surviving nodes unchanged and deletes the
                        // rest, as the watch reports it
                        let mut reported = BTreeSet::new();
                        let survivors: BTreeSet<String> = keep.iter().map(|n| format!("n{n}")).collect();
                        let gone: Vec<String> = model.keys().filter(|name| !survivors.contains(*name)).cloned().collect();
                        model.retain(|name, _| survivors.contains(name));
                        for (name, labels) in &model {
                            reported.extend(index.apply(name, labels));
                        }
                        for name in gone {
                            reported.extend(index.delete(&name));
                        }
                        index.mark_synced();
                        reported
                    }
                };
                let after = value_sets(&model);
                prop_assert_eq!(reported, changed_keys(&before, &after));
                for key in ["k0", "k1", "k2"] {
                    prop_assert_eq!(index.units(key), after.get(key).cloned().unwrap_or_default());
                }
            }
        }
    }
}
