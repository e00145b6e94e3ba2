//! The registry `/metrics` serves is the runtime's, prefixed with the binary's name
//! (`grid-wrapper` -> `grid_wrapper_...`); each component registers its own families into
//! it ([`Register`]) and keeps only the handles it updates.

use prometheus_client::registry::Registry;

/// Metric families a component registers into the runtime's registry (they are shared
/// handles: the component keeps updating its own clones).
pub trait Register {
    fn register(&self, registry: &mut Registry);
}

/// The registry of binary `name`: its metrics are prefixed `name` with `-` as `_`.
pub fn registry(name: &str) -> Registry {
    Registry::with_prefix(name.replace('-', "_"))
}

/// The OpenMetrics text of `metrics` as binary `name` serves them on `/metrics` (for
/// tests and tools that read a component's metrics without its runtime).
pub fn exposition(name: &str, metrics: &dyn Register) -> String {
    let mut registry = registry(name);
    metrics.register(&mut registry);
    let mut out = String::new();
    // writing into a String cannot fail
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    struct Things(Counter);

    impl Register for Things {
        fn register(&self, registry: &mut Registry) {
            registry.register("things", "Things seen", self.0.clone());
        }
    }

    #[test]
    fn a_components_families_are_prefixed_with_the_binarys_name() {
        let things = Things(Counter::default());
        things.0.inc();
        let text = exposition("grid-wrapper", &things);
        assert!(text.lines().any(|line| line == "grid_wrapper_things_total 1"), "{text}");
        things.0.inc();
        assert!(exposition("x", &things).lines().any(|line| line == "x_things_total 2"), "the handles are shared");
    }
}
