//! SuperEdge's `application-grid-controller` flags, as the binary reads them: their table
//! for `controller_support::legacy_flags` (the translation engine, with klog's flags every
//! table has).

use controller_support::legacy_flags::{
    Check, LegacyTable, MASTER_URL, NO_CLIENT_RATE_LIMIT, Takes, Translation, flag, ignore, no_custom,
};

/// `application-grid-controller` (`cmd/application-grid-controller/app/options`). Its
/// `--kubeconfig` and `--leader-elect*` flags are ours too (same names and meanings),
/// but for the lock kind.
pub static GRID_CONTROLLER: LegacyTable = LegacyTable {
    binary: "grid-controller",
    flags: &[
        flag("master", Takes::Value, Translation::Unsupported { reason: MASTER_URL }),
        flag("kube-qps", Takes::Value, ignore(Check::Float, NO_CLIENT_RATE_LIMIT)),
        flag("kube-burst", Takes::Value, ignore(Check::Int, NO_CLIENT_RATE_LIMIT)),
        flag(
            "feature-gates",
            Takes::Value,
            ignore(
                Check::FeatureGates,
                "SuperEdge's controller registered its EndpointSlice gate and never read it; grids need no gate",
            ),
        ),
        flag(
            "sync-period",
            Takes::Value,
            ignore(
                Check::Positive,
                "each grid is checked again every 5 minutes, and at once when it or what it owns changes",
            ),
        ),
        flag("worker", Takes::Value, ignore(Check::Positive, "grids are reconciled concurrently, each one at a time")),
        flag(
            "leader-elect-resource-lock",
            Takes::Value,
            ignore(Check::Any, "the leader lock is always a coordination.k8s.io Lease"),
        ),
    ],
    accumulated: &[],
    custom: no_custom,
};

#[cfg(test)]
mod tests;
