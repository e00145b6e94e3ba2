//! CI's short soak: `cargo xtask soak` with a fixed seed whose two and a half minutes hold
//! nine kinds of fault (node deaths, node and unit link cuts, a 2 | 2 partition inside a
//! unit for 41 s, SIGKILL and SIGTERM of components (the unit signer's among them),
//! relabels, cut watches, grid churn), on the default 12 nodes in 3 units, each unit sharing
//! one vouched upstream.
//! It fails on any invariant violation. In a test binary of its own so no other local
//! cluster shares the two cores with it.

#[test]
fn a_short_seeded_soak_breaks_no_invariant() {
    let output = edgegrid_tests::xtask_output(&["soak", "--seed", "6", "--duration", "150s", "--no-build"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the soak failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("No invariant was broken (seed 6)."), "{stdout}");
    // every invariant was checked, none failed
    for invariant in [
        "1 alive-node-kept",
        "2 dead-node-handled",
        "3 wrapper-serves-unit-view",
        "4 watch-matches-list",
        "5 grids-converge",
        "6 processes-healthy",
    ] {
        let line = stdout.lines().find(|l| l.starts_with(invariant)).unwrap_or_else(|| panic!("{invariant}: {stdout}"));
        let counts: Vec<u64> =
            line[invariant.len()..].split_whitespace().map(|n| n.parse().expect("a count")).collect();
        assert!(counts.len() == 2 && counts[0] > 0 && counts[1] == 0, "{line}");
    }
    for fault in
        ["node death", "node link cut", "unit link cut", "unit partition", "process SIGKILL", "relabel", "grid churn"]
    {
        assert!(stdout.lines().any(|l| l.starts_with(fault)), "{fault} was injected: {stdout}");
    }
}
