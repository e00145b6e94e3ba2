//! Splitting a unit's site network: the packets between two groups of simulated nodes'
//! addresses are dropped both ways by iptables, in a chain of the run's own
//! (`EDGEGRID-SOAK-<slot>`, jumped to from OUTPUT: loopback traffic passes there) that is
//! emptied and removed when the run ends, and emptied first when a killed run left one.
//! A node's edge-health daemon speaks from its node's address (it binds one), so a rule
//! between two addresses cuts exactly that pair's exchanges and kubelet checks; the cloud
//! links (through the site link proxies on 127.0.0.1) are untouched.

use std::net::Ipv4Addr;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The run's chain, jumped to from OUTPUT while this lives.
pub struct Partitions {
    chain: String,
}

impl Partitions {
    /// Makes the chain (emptied if a killed run left it) and jumps to it from OUTPUT;
    /// an error says why partitions cannot be made here (no iptables, not root).
    pub fn new(slot: u8) -> Result<Self> {
        let partitions = Self { chain: format!("EDGEGRID-SOAK-{slot}") };
        let chain = partitions.chain.as_str();
        if iptables(&["-n", "-L", chain]).is_err() {
            iptables(&["-N", chain])?;
        }
        iptables(&["-F", chain])?;
        if iptables(&["-C", "OUTPUT", "-j", chain]).is_err() {
            iptables(&["-I", "OUTPUT", "-j", chain])?;
        }
        Ok(partitions)
    }

    /// Drops exactly the traffic between each pair of `cuts` (both ways), and nothing else.
    pub fn set(&self, cuts: &[(Ipv4Addr, Ipv4Addr)]) -> Result<()> {
        for rule in rules(&self.chain, cuts) {
            let args: Vec<&str> = rule.iter().map(String::as_str).collect();
            iptables(&args)?;
        }
        Ok(())
    }
}

impl Drop for Partitions {
    fn drop(&mut self) {
        let chain = self.chain.as_str();
        for args in [&["-D", "OUTPUT", "-j", chain][..], &["-F", chain], &["-X", chain]] {
            if let Err(error) = iptables(args) {
                eprintln!("warning: removing the soak's partition chain: {error:#}");
            }
        }
    }
}

/// The iptables commands (arguments) that make `chain` drop the traffic of `cuts`: a flush,
/// then a DROP per direction of each pair.
fn rules(chain: &str, cuts: &[(Ipv4Addr, Ipv4Addr)]) -> Vec<Vec<String>> {
    let mut rules = vec![vec!["-F".to_string(), chain.to_string()]];
    for (a, b) in cuts {
        for (from, to) in [(a, b), (b, a)] {
            rules.push(
                ["-A", chain, "-s", &from.to_string(), "-d", &to.to_string(), "-j", "DROP"].map(String::from).to_vec(),
            );
        }
    }
    rules
}

/// Whether partitions can be made on this machine: `None` when they can, else why not.
#[cfg(test)]
fn unavailable() -> Option<String> {
    match iptables(&["-n", "-L", "OUTPUT"]) {
        Ok(()) => None,
        Err(error) => Some(format!("{error:#} (a partition needs iptables and root)")),
    }
}

fn iptables(args: &[&str]) -> Result<()> {
    // -w: wait for the xtables lock rather than fail when another run holds it
    let output = Command::new("iptables").arg("-w").args(args).output().context("running iptables")?;
    if !output.status.success() {
        bail!("iptables {}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pair_across_the_cut_is_dropped_both_ways_after_a_flush() {
        let ip = |n| Ipv4Addr::new(127, 100, 1, n);
        let rules = rules("EDGEGRID-SOAK-0", &[(ip(1), ip(2)), (ip(1), ip(3))]);
        let lines: Vec<String> = rules.iter().map(|r| r.join(" ")).collect();
        assert_eq!(
            lines,
            [
                "-F EDGEGRID-SOAK-0",
                "-A EDGEGRID-SOAK-0 -s 127.100.1.1 -d 127.100.1.2 -j DROP",
                "-A EDGEGRID-SOAK-0 -s 127.100.1.2 -d 127.100.1.1 -j DROP",
                "-A EDGEGRID-SOAK-0 -s 127.100.1.1 -d 127.100.1.3 -j DROP",
                "-A EDGEGRID-SOAK-0 -s 127.100.1.3 -d 127.100.1.1 -j DROP",
            ]
        );
        assert_eq!(super::rules("C", &[]), [vec!["-F".to_string(), "C".to_string()]], "healed: nothing dropped");
    }

    /// The rules really cut the pair and only it (needs root and iptables: skipped outside
    /// CI without them, failed under CI).
    #[test]
    fn a_partition_cuts_the_pair_and_nothing_else_and_heals() {
        let test = "a_partition_cuts_the_pair_and_nothing_else_and_heals";
        if !edgegrid_testing::tools::runnable(test, unavailable()) {
            return;
        }
        // slot 99's addresses: no run of the local cluster uses it in tests
        let ip = |n| Ipv4Addr::new(127, 199, 1, n);
        let listener = std::net::TcpListener::bind((ip(2), 0)).expect("a listener");
        let port = listener.local_addr().expect("its port").port();
        let connects = |from: Ipv4Addr| connect_from(from, (ip(2), port));
        let partitions = Partitions::new(99).expect("the chain");
        partitions.set(&[(ip(1), ip(2))]).expect("the cut");
        assert!(!connects(ip(1)), "across the cut");
        assert!(connects(ip(3)), "another pair");
        partitions.set(&[]).expect("healed");
        assert!(connects(ip(1)), "healed");
        drop(partitions);
        assert!(iptables(&["-n", "-L", "EDGEGRID-SOAK-99"]).is_err(), "the chain is gone");
    }

    /// Whether a TCP connection from `from` to `to` is made within half a second.
    fn connect_from(from: Ipv4Addr, to: (Ipv4Addr, u16)) -> bool {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async {
            let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
            socket.bind((from, 0).into()).expect("bound");
            let connect = socket.connect(std::net::SocketAddr::from(to));
            matches!(tokio::time::timeout(std::time::Duration::from_millis(500), connect).await, Ok(Ok(_)))
        })
    }
}
