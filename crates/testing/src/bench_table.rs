//! What the benchmarks share: percentiles, readable durations and the one table each
//! prints.

use std::time::Duration;

/// The `q` quantile (0..=1) of sorted samples, nearest rank; zero without samples.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// `147 µs`, `1.25 ms`, `2.18 s`.
pub fn duration(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{:.0} µs", d.as_secs_f64() * 1e6)
    } else if d >= Duration::from_secs(1) {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    }
}

pub fn met(ok: bool) -> &'static str {
    if ok { "**met**" } else { "**missed**" }
}

/// The 1-minute load average, printed so readers can judge the timings.
pub fn load_average() -> Option<String> {
    std::fs::read_to_string("/proc/loadavg").ok().and_then(|l| l.split(' ').next().map(str::to_string))
}

/// A markdown table: `#`, `measurement`, then five columns named by the benchmark.
pub struct Table {
    columns: [&'static str; 5],
    rows: Vec<[String; 7]>,
}

impl Table {
    pub fn new(columns: [&'static str; 5]) -> Self {
        Self { columns, rows: Vec::new() }
    }

    pub fn row(&mut self, id: &str, what: impl Into<String>, cells: [&str; 5]) {
        let [a, b, c, d, e] = cells.map(str::to_string);
        self.rows.push([id.into(), what.into(), a, b, c, d, e]);
    }

    pub fn print(&self) {
        println!("| # | measurement | {} |", self.columns.join(" | "));
        println!("|---|---|---|---|---|---|---|");
        for row in &self.rows {
            println!("| {} |", row.join(" | "));
        }
    }
}
