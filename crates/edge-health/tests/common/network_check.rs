//! Whether this machine has what the multi-host test's network needs, found without making
//! anything: root with CAP_SYS_ADMIN and CAP_NET_ADMIN (network namespaces, veth pairs,
//! iptables rules), and `ip` and `iptables` that run (`network::unavailable` then also
//! makes a namespace to be sure).

use std::process::Command;

/// What is missing, if anything.
pub fn missing() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| status.lines().find_map(|line| line.strip_prefix(name)).map(str::trim);
    // Uid: real, effective, saved, filesystem
    if field("Uid:").and_then(|ids| ids.split_whitespace().nth(1)) != Some("0") {
        return Some("not root (network namespaces, veth pairs and iptables need it)".into());
    }
    let capabilities = field("CapEff:").and_then(|mask| u64::from_str_radix(mask, 16).ok()).unwrap_or(0);
    for (bit, capability) in [(21, "CAP_SYS_ADMIN"), (12, "CAP_NET_ADMIN")] {
        if capabilities & (1 << bit) == 0 {
            return Some(format!(
                "root without {capability} (a container that drops it cannot make network namespaces)"
            ));
        }
    }
    for (tool, package) in [("ip", "iproute2"), ("iptables", "iptables")] {
        if !Command::new(tool).arg("-V").output().is_ok_and(|o| o.status.success()) {
            return Some(format!("`{tool}` not found (Debian package {package}; .ci/install-tools installs it)"));
        }
    }
    None
}
