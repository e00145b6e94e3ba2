//! The table a soak ends with: faults by kind, checks made and failed per invariant, how
//! long the system took to converge after each kind of fault ended (p50/p99), and every
//! process's peak resident memory.

use std::collections::BTreeMap;

use crate::local_cluster::views::table;

pub struct Table {
    /// Fault kind -> how many started.
    pub faults: BTreeMap<String, usize>,
    /// Invariant -> (checks made, failed).
    pub checks: BTreeMap<&'static str, (u64, u64)>,
    /// Fault kind -> seconds from each fault's end to the first converged sample.
    pub converge: BTreeMap<String, Vec<f64>>,
    /// Seconds from each dead node turning judgeable to its stock handling.
    pub handled_after: Vec<f64>,
    /// Faults after which the system had not converged when the run ended.
    pub unconverged: Vec<String>,
    /// Process -> peak RSS in KiB.
    pub peak_rss: BTreeMap<String, u64>,
    /// Samples taken, and skipped (the API server did not answer the observer).
    pub samples: (u64, u64),
}

/// The `p`th percentile (0..=100) of `values` by the nearest-rank method.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied()
}

impl Table {
    pub fn render(&self) -> String {
        let mut out = String::new();
        let rows: Vec<Vec<String>> = self
            .faults
            .iter()
            .map(|(kind, n)| {
                let times = self.converge.get(kind).map(Vec::as_slice).unwrap_or_default();
                let at = |p| percentile(times, p).map_or("-".to_string(), |s| format!("{s:.1}"));
                vec![kind.clone(), n.to_string(), times.len().to_string(), at(50.0), at(99.0)]
            })
            .collect();
        out.push_str(&table(&["FAULT", "STARTED", "CONVERGED AFTER", "P50 S", "P99 S"], &rows));
        let at = |p| percentile(&self.handled_after, p).map_or("-".to_string(), |s| format!("{s:.1} s"));
        out.push_str(&format!(
            "dead nodes handled (tainted NoExecute, pods unready): {}, after p50 {} p99 {} from when their unit could tell\n",
            self.handled_after.len(),
            at(50.0),
            at(99.0)
        ));
        let rows: Vec<Vec<String>> = self
            .checks
            .iter()
            .map(|(invariant, (made, failed))| vec![invariant.to_string(), made.to_string(), failed.to_string()])
            .collect();
        out.push_str(&table(&["INVARIANT", "CHECKS", "FAILED"], &rows));
        let rows: Vec<Vec<String>> = self
            .peak_rss
            .iter()
            .map(|(process, kib)| vec![process.clone(), format!("{:.1}", *kib as f64 / 1024.0)])
            .collect();
        out.push_str(&table(&["PROCESS", "PEAK RSS MIB"], &rows));
        out.push_str(&format!(
            "samples: {} ({} skipped: the API server did not answer the observer)\n",
            self.samples.0, self.samples.1
        ));
        if !self.unconverged.is_empty() {
            out.push_str(&format!("not converged by the end after: {}\n", self.unconverged.join(", ")));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), Some(50.0));
        assert_eq!(percentile(&values, 99.0), Some(99.0));
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn the_table_names_every_kind_invariant_and_process() {
        let table = Table {
            faults: BTreeMap::from([("node death".into(), 2), ("relabel".into(), 1)]),
            checks: BTreeMap::from([("1 alive-node-kept", (120, 0))]),
            converge: BTreeMap::from([("node death".into(), vec![4.0, 12.5])]),
            handled_after: vec![9.0, 11.0],
            unconverged: vec![],
            peak_rss: BTreeMap::from([("edge-health-edge-a-0".into(), 20 * 1024)]),
            samples: (300, 2),
        };
        assert_eq!(
            table.render(),
            "FAULT        STARTED   CONVERGED AFTER   P50 S   P99 S\n\
             node death   2         2                 4.0     12.5\n\
             relabel      1         0                 -       -\n\
             dead nodes handled (tainted NoExecute, pods unready): 2, after p50 9.0 s p99 11.0 s from when their unit could tell\n\
             INVARIANT           CHECKS   FAILED\n\
             1 alive-node-kept   120      0\n\
             PROCESS                PEAK RSS MIB\n\
             edge-health-edge-a-0   20.0\n\
             samples: 300 (2 skipped: the API server did not answer the observer)\n"
        );
    }
}
