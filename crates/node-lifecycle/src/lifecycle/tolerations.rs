//! Taints, tolerations, and the taint manager's per-pod decision.

use std::time::Duration;

use tokio::time::Instant;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Toleration {
    pub key: Option<String>,
    /// `Exists` or `Equal` (the default).
    pub operator: Option<String>,
    pub value: Option<String>,
    pub effect: Option<String>,
    pub toleration_seconds: Option<i64>,
}

/// Kubernetes' `Toleration.ToleratesTaint`.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if toleration.effect.as_deref().is_some_and(|e| !e.is_empty() && e != taint.effect) {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => toleration.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default(),
        _ => false,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionDecision {
    /// Every NoExecute taint is tolerated forever (or there is none).
    Keep,
    /// Tolerated for a while: evict at this instant unless the taints go away first.
    EvictAt(Instant),
    /// A NoExecute taint is not tolerated: evict now.
    EvictNow,
}

/// What the taint manager does with one pod on a node carrying `taints` since `tainted_at`.
/// The shortest `tolerationSeconds` among the tolerations that match decides the
/// deadline; a negative value means "evict at once", as Kubernetes treats it.
pub fn eviction_decision(tolerations: &[Toleration], taints: &[Taint], tainted_at: Instant) -> EvictionDecision {
    let mut deadline: Option<Duration> = None;
    for taint in taints.iter().filter(|t| t.effect == "NoExecute") {
        let matching: Vec<&Toleration> = tolerations.iter().filter(|t| tolerates(t, taint)).collect();
        if matching.is_empty() {
            return EvictionDecision::EvictNow;
        }
        // the most generous matching toleration applies for this taint
        let allowed = if matching.iter().any(|t| t.toleration_seconds.is_none()) {
            None
        } else {
            matching.iter().filter_map(|t| t.toleration_seconds).max().map(|s| Duration::from_secs(s.max(0) as u64))
        };
        if let Some(allowed) = allowed {
            deadline = Some(deadline.map_or(allowed, |d| d.min(allowed)));
        }
    }
    match deadline {
        None => EvictionDecision::Keep,
        Some(d) if d.is_zero() => EvictionDecision::EvictNow,
        Some(d) => EvictionDecision::EvictAt(tainted_at + d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint { key: key.into(), value: value.map(str::to_string), effect: effect.into() }
    }

    fn tol(
        key: Option<&str>,
        op: Option<&str>,
        value: Option<&str>,
        effect: Option<&str>,
        secs: Option<i64>,
    ) -> Toleration {
        Toleration {
            key: key.map(str::to_string),
            operator: op.map(str::to_string),
            value: value.map(str::to_string),
            effect: effect.map(str::to_string),
            toleration_seconds: secs,
        }
    }

    #[test]
    fn toleration_matching_table() {
        let unreachable = taint("node.kubernetes.io/unreachable", None, "NoExecute");
        let dedicated = taint("dedicated", Some("edge"), "NoSchedule");
        let cases = [
            (
                tol(Some("node.kubernetes.io/unreachable"), Some("Exists"), None, Some("NoExecute"), Some(300)),
                &unreachable,
                true,
            ),
            (tol(Some("node.kubernetes.io/unreachable"), Some("Exists"), None, None, None), &unreachable, true),
            (
                tol(Some("node.kubernetes.io/unreachable"), Some("Exists"), None, Some("NoSchedule"), None),
                &unreachable,
                false,
            ),
            (tol(None, Some("Exists"), None, None, None), &unreachable, true),
            (tol(Some("other"), Some("Exists"), None, None, None), &unreachable, false),
            (tol(Some("dedicated"), None, Some("edge"), None, None), &dedicated, true),
            (tol(Some("dedicated"), Some("Equal"), Some("cloud"), None, None), &dedicated, false),
            (tol(Some("node.kubernetes.io/unreachable"), Some("Equal"), None, None, None), &unreachable, true),
            (tol(Some("dedicated"), Some("Bogus"), Some("edge"), None, None), &dedicated, false),
        ];
        for (i, (toleration, taint, want)) in cases.into_iter().enumerate() {
            assert_eq!(tolerates(&toleration, taint), want, "case {i}: {toleration:?} vs {taint:?}");
        }
    }

    #[test]
    fn eviction_decisions() {
        let t0 = Instant::now();
        let unreachable = taint("node.kubernetes.io/unreachable", None, "NoExecute");
        let no_schedule = taint("node.kubernetes.io/unreachable", None, "NoSchedule");
        let default_tolerations = vec![
            tol(Some("node.kubernetes.io/not-ready"), Some("Exists"), None, Some("NoExecute"), Some(300)),
            tol(Some("node.kubernetes.io/unreachable"), Some("Exists"), None, Some("NoExecute"), Some(300)),
        ];
        assert_eq!(
            eviction_decision(&[], std::slice::from_ref(&no_schedule), t0),
            EvictionDecision::Keep,
            "NoSchedule never evicts"
        );
        assert_eq!(eviction_decision(&[], std::slice::from_ref(&unreachable), t0), EvictionDecision::EvictNow);
        assert_eq!(
            eviction_decision(&default_tolerations, std::slice::from_ref(&unreachable), t0),
            EvictionDecision::EvictAt(t0 + Duration::from_secs(300))
        );
        let forever = vec![tol(Some("node.kubernetes.io/unreachable"), Some("Exists"), None, None, None)];
        assert_eq!(eviction_decision(&forever, std::slice::from_ref(&unreachable), t0), EvictionDecision::Keep);
        let mixed = vec![
            tol(Some("node.kubernetes.io/unreachable"), Some("Exists"), None, None, Some(30)),
            tol(None, Some("Exists"), None, None, Some(600)),
        ];
        assert_eq!(
            eviction_decision(&mixed, std::slice::from_ref(&unreachable), t0),
            EvictionDecision::EvictAt(t0 + Duration::from_secs(600)),
            "the most generous matching toleration wins"
        );
        let other = taint("maintenance", None, "NoExecute");
        assert_eq!(
            eviction_decision(&default_tolerations, &[unreachable.clone(), other], t0),
            EvictionDecision::EvictNow,
            "one intolerable taint is enough"
        );
        let zero = vec![tol(None, Some("Exists"), None, None, Some(-5))];
        assert_eq!(eviction_decision(&zero, &[unreachable], t0), EvictionDecision::EvictNow);
    }
}
