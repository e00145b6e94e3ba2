//! A network of hosts for multi-host tests, made of Linux network namespaces: one bridge
//! in the test's (root) namespace carrying a /24 of 10.244.0.0/16 that no interface or
//! route here uses yet, with the gateway `.1` on the bridge, and one namespace per
//! simulated host (`.10`, `.11`, ...) joined to the bridge by a veth pair. Faults are
//! iptables rules inside a host's namespace: packet loss from its peers, a cut link to a
//! port on the gateway.
//!
//! It must never touch anything but what it made: every address it uses is on its own
//! bridge or in its own namespaces, and the only rules it adds outside them are ACCEPT
//! rules for its bridge, tagged with [`RULE_COMMENT`]. Everything is removed on drop, and
//! what a crashed earlier run left (names carry the process id: a run whose process is
//! gone, or one with this very process id) is removed before anything is made.

use std::net::Ipv4Addr;
use std::process::Command;

/// Tags the rules this module adds to the root namespace.
const RULE_COMMENT: &str = "edge-health-test";
/// Root-namespace chains that must let the bridge's traffic through: with
/// `net.bridge.bridge-nf-call-iptables=1` bridged packets traverse FORWARD, and the
/// hosts reach the gateway through INPUT; a CI machine's DROP policy must not break us.
const ROOT_CHAINS: [(&str, bool); 2] = [("FORWARD", true), ("INPUT", false)];

/// Why network namespaces cannot be used here, if they cannot: what
/// [`network_check::missing`](super::network_check::missing) finds missing, or a namespace
/// (with a `statistic` rule in it) cannot be made. Found out once per process (tests
/// running side by side would race on the probe's name).
pub fn unavailable() -> Option<String> {
    static REASON: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    REASON.get_or_init(find_unavailable).clone()
}

fn find_unavailable() -> Option<String> {
    if let Some(missing) = super::network_check::missing() {
        return Some(missing);
    }
    let probe = format!("eh{}probe", std::process::id());
    let _ = run(&["ip", "netns", "del", &probe]);
    let works = run(&["ip", "netns", "add", &probe]).and_then(|()| {
        run(&[
            "ip",
            "netns",
            "exec",
            &probe,
            "iptables",
            "-A",
            "INPUT",
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            "0.5",
            "-j",
            "DROP",
        ])
    });
    let _ = run(&["ip", "netns", "del", &probe]);
    works.err().map(|e| format!("`ip netns` or iptables' `statistic` match unusable here: {e}"))
}

fn run(args: &[&str]) -> Result<(), String> {
    output(args).map(drop)
}

/// Runs `args`; its stdout, or why it failed.
fn output(args: &[&str]) -> Result<String, String> {
    let output = Command::new(args[0]).args(&args[1..]).output().map_err(|e| format!("{args:?}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!("{args:?} failed: {}", String::from_utf8_lossy(&output.stderr).trim()))
    }
}

/// The bridge and the hosts on it.
pub struct Network {
    bridge: String,
    /// Third octet of the subnet.
    subnet: u8,
    hosts: usize,
    /// Process id, in every name this network uses.
    tag: u32,
    /// The root-namespace rules added (chain, rule), removed on drop.
    root_rules: Vec<(String, Vec<String>)>,
}

impl Network {
    /// Makes the bridge and `hosts` hosts (at most 10) on it.
    pub fn new(hosts: usize) -> Result<Self, String> {
        assert!(hosts <= 10, "host names have room for one digit");
        let tag = std::process::id();
        remove_leftovers(tag);
        let subnet = free_subnet(tag)?;
        // from here on, drop removes whatever was made
        let mut network = Self { bridge: format!("ehb{tag}"), subnet, hosts: 0, tag, root_rules: Vec::new() };
        run(&["ip", "link", "add", &network.bridge, "type", "bridge"])?;
        run(&["ip", "addr", "add", &format!("{}/24", network.gateway()), "dev", &network.bridge])?;
        run(&["ip", "link", "set", &network.bridge, "up"])?;
        for (chain, forwarded) in ROOT_CHAINS {
            let mut rule = vec!["-i".to_string(), network.bridge.clone()];
            if forwarded {
                rule.extend(["-o".to_string(), network.bridge.clone()]);
            }
            rule.extend(["-m", "comment", "--comment", RULE_COMMENT, "-j", "ACCEPT"].map(String::from));
            let mut insert = vec!["iptables", "-I", chain, "1"];
            insert.extend(rule.iter().map(String::as_str));
            run(&insert)?;
            network.root_rules.push((chain.to_string(), rule));
        }
        for i in 0..hosts {
            network.add_host(i)?;
        }
        Ok(network)
    }

    /// The bridge's own address, in the test's namespace (servers the hosts share bind here).
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 244, self.subnet, 1)
    }

    /// The address of host `i` (0-based).
    pub fn address(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 244, self.subnet, 10 + i as u8)
    }

    /// The network namespace of host `i`.
    pub fn namespace(&self, i: usize) -> String {
        format!("eh{}h{i}", self.tag)
    }

    fn subnet(&self) -> String {
        format!("{}/24", Ipv4Addr::new(10, 244, self.subnet, 0))
    }

    fn veth(&self, i: usize) -> (String, String) {
        (format!("ehv{}o{i}", self.tag), format!("ehv{}i{i}", self.tag))
    }

    /// Host `i`: a namespace with loopback up and a veth pair to the bridge.
    fn add_host(&mut self, i: usize) -> Result<(), String> {
        let ns = self.namespace(i);
        let (outside, inside) = self.veth(i);
        run(&["ip", "netns", "add", &ns])?;
        self.hosts = i + 1;
        run(&["ip", "link", "add", &outside, "type", "veth", "peer", "name", &inside, "netns", &ns])?;
        run(&["ip", "link", "set", &outside, "master", &self.bridge])?;
        run(&["ip", "link", "set", &outside, "up"])?;
        let address = format!("{}/24", self.address(i));
        run(&["ip", "-n", &ns, "addr", "add", &address, "dev", &inside])?;
        run(&["ip", "-n", &ns, "link", "set", &inside, "up"])?;
        run(&["ip", "-n", &ns, "link", "set", "lo", "up"])
    }

    /// Runs `iptables` in host `i`'s namespace.
    fn iptables(&self, i: usize, rule: &[&str]) -> Result<(), String> {
        let ns = self.namespace(i);
        let mut all = vec!["ip", "netns", "exec", ns.as_str(), "iptables"];
        all.extend_from_slice(rule);
        run(&all)
    }

    /// Host `i` drops `percent`% of the packets it receives from the other hosts (at
    /// random, each on its own); the gateway's are all let through.
    pub fn lossy(&self, i: usize, percent: u32) -> Result<(), String> {
        let probability = format!("{:.2}", f64::from(percent) / 100.0);
        let (gateway, subnet) = (self.gateway().to_string(), self.subnet());
        let inside = self.veth(i).1;
        self.iptables(i, &["-A", "INPUT", "-i", &inside, "-s", &gateway, "-j", "ACCEPT"])?;
        self.iptables(
            i,
            &[
                "-A",
                "INPUT",
                "-i",
                &inside,
                "-s",
                &subnet,
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                &probability,
                "-j",
                "DROP",
            ],
        )
    }

    /// Host `i` loses its link to `port` on the gateway, both ways, and nothing else.
    pub fn cut(&self, i: usize, port: u16) -> Result<(), String> {
        let (gateway, port) = (self.gateway().to_string(), port.to_string());
        self.iptables(i, &["-A", "OUTPUT", "-d", &gateway, "-p", "tcp", "--dport", &port, "-j", "DROP"])?;
        self.iptables(i, &["-A", "INPUT", "-s", &gateway, "-p", "tcp", "--sport", &port, "-j", "DROP"])
    }

    /// Removes every rule of host `i`.
    pub fn heal(&self, i: usize) -> Result<(), String> {
        self.iptables(i, &["-F"])
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        let mut failures = Vec::new();
        for i in 0..self.hosts {
            // A namespace lives on after its name is gone while sockets in it do (closed
            // connections still sending their FIN to a peer that drops it), and its end of
            // the veth with it: the pair is deleted from here, where it is gone at once.
            let _ = run(&["ip", "link", "del", &self.veth(i).0]);
            failures.extend(run(&["ip", "netns", "del", &self.namespace(i)]).err());
        }
        failures.extend(run(&["ip", "link", "del", &self.bridge]).err());
        for (chain, rule) in &self.root_rules {
            let mut delete = vec!["iptables", "-D", chain.as_str()];
            delete.extend(rule.iter().map(String::as_str));
            failures.extend(run(&delete).err());
        }
        for failure in failures {
            eprintln!("network teardown: {failure}");
        }
    }
}

/// The process id in a name this module gave (`eh<pid>...`, `ehb<pid>`, `ehv<pid>...`).
fn owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("ehb").or_else(|| name.strip_prefix("ehv")).or_else(|| name.strip_prefix("eh"))?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Whether `name` is a leftover to remove now: made by a process that is gone, or by one
/// with this process's id (a crashed run whose id came round again).
fn left_over(name: &str, tag: u32) -> bool {
    owner(name).is_some_and(|pid| pid == tag || !std::path::Path::new(&format!("/proc/{pid}")).exists())
}

/// Removes the namespaces, links and root-namespace rules of crashed runs (best effort:
/// whatever cannot be listed or removed is left, and a clash shows when it is made).
pub fn remove_leftovers(tag: u32) {
    for ns in output(&["ip", "netns", "list"]).unwrap_or_default().lines() {
        let name = ns.split_whitespace().next().unwrap_or_default();
        if name.starts_with("eh") && left_over(name, tag) {
            let _ = run(&["ip", "netns", "del", name]);
        }
    }
    for line in output(&["ip", "-o", "link", "show"]).unwrap_or_default().lines() {
        // "12: ehb123: <BROADCAST,...", "13: ehv123o0@if2: <..."
        let Some(name) = line.split(": ").nth(1).and_then(|n| n.split('@').next()) else { continue };
        if (name.starts_with("ehb") || name.starts_with("ehv")) && left_over(name, tag) {
            let _ = run(&["ip", "link", "del", name]);
        }
    }
    for (chain, _) in ROOT_CHAINS {
        for rule in output(&["iptables", "-S", chain]).unwrap_or_default().lines() {
            // "-A FORWARD -i ehb123 -o ehb123 -m comment --comment edge-health-test -j ACCEPT"
            let words: Vec<&str> = rule.split_whitespace().collect();
            let tagged = words.windows(2).any(|w| w == ["--comment", RULE_COMMENT]);
            let bridge = words.windows(2).find(|w| w[0] == "-i").map(|w| w[1]);
            if tagged && bridge.is_some_and(|b| b.starts_with("ehb") && left_over(b, tag)) && words[0] == "-A" {
                let mut delete = vec!["iptables", "-D"];
                delete.extend_from_slice(&words[1..]);
                let _ = run(&delete);
            }
        }
    }
}

/// The third octet of a 10.244.x.0/24 that no address or route of this namespace is in,
/// starting from one the process id picks (so concurrent runs start apart).
fn free_subnet(tag: u32) -> Result<u8, String> {
    let addresses = output(&["ip", "-4", "-o", "addr", "show"])?;
    let routes = output(&["ip", "-4", "route", "show", "table", "all"])?;
    let taken = |octet: u32| {
        let prefix = format!("10.244.{octet}.");
        addresses.contains(&prefix) || routes.contains(&prefix)
    };
    let start = tag % 200;
    (0..200)
        .map(|n| (start + n) % 200 + 20)
        .find(|octet| !taken(*octet))
        .map(|octet| octet as u8)
        .ok_or_else(|| "no 10.244.x.0/24 free".to_string())
}
