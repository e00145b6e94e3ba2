//! The soak's checker checked end to end: `cargo xtask soak --sabotage` breaks each of the
//! six invariants on purpose through the real cluster (an eviction made as the lifecycle
//! controller, a live node the observer is told died, a hung wrapper, a lost watch event,
//! a write to a foreign object made as the grid controller, an unasked SIGKILL), and the
//! run must report each under its name and subject, and fail. In a test binary of its own
//! so no other local cluster shares the two cores with it.

#[test]
fn a_sabotaged_soak_reports_each_invariant_broken() {
    let output =
        edgegrid_tests::xtask_output(&["soak", "--seed", "1", "--duration", "130s", "--no-build", "--sabotage"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a sabotaged soak must fail:\n{stdout}");
    assert!(stderr.contains("invariant violation(s)"), "{stderr}");
    for (invariant, subject) in [
        ("1 alive-node-kept", "edge-a-0: alive and owed protection, but its pods"),
        ("2 dead-node-handled", "edge-b-1: dead and judgeable"),
        ("3 wrapper-serves-unit-view", "edge-c-0: its grid wrapper has not answered"),
        ("4 watch-matches-list", "edge-a-1: "),
        ("5 grids-converge", "PATCH services default/foreign-svc: the grid controller wrote an object it does not own"),
        ("6 processes-healthy", "edge-health-edge-c-1: exited unasked"),
    ] {
        let reported = stdout
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("VIOLATION of invariant {invariant} at ")))
            .any(|rest| rest.split_once(" s: ").is_some_and(|(_, what)| what.starts_with(subject)));
        assert!(reported, "invariant {invariant} is reported for {subject:?}:\n{stdout}");
    }
}
