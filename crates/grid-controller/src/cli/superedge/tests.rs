use controller_support::legacy_flags::testing::*;

use super::*;

/// SuperEdge's `deployment/application-grid-controller.yaml`, as shipped.
const CONTROLLER_MANIFEST: [&str; 1] = ["--feature-gates=EndpointSlice=true"];

#[test]
fn grid_controller_manifest_and_flags() {
    let gates = "SuperEdge's controller registered its EndpointSlice gate and never read it; grids need no gate";
    assert_eq!(ok(&GRID_CONTROLLER, &CONTROLLER_MANIFEST), (vec![], vec![ignored("--feature-gates", gates)]));
    let ours = [
        "--kubeconfig=/k",
        "--leader-elect=true",
        "--leader-elect-lease-duration=15s",
        "--leader-elect-renew-deadline=10s",
        "--leader-elect-retry-period=2s",
        "--leader-elect-resource-name=application-grid-controller",
        "--leader-elect-resource-namespace=edge-system",
    ];
    let (out, deprecations) = ok(
        &GRID_CONTROLLER,
        &[&ours[..], &["--leader-elect-resource-lock=endpoints", "--sync-period=30", "--worker=4", "--master="]]
            .concat(),
    );
    assert_eq!(out, ours, "the same names and meanings as ours");
    assert_eq!(flags(&deprecations), ["--leader-elect-resource-lock", "--sync-period", "--worker", "--master"]);
    for bad in ["--feature-gates=EndpointSlice", "--feature-gates=EndpointSlice=yes", "--worker=0", "--sync-period=x"] {
        assert!(matches!(error(&GRID_CONTROLLER, &[bad]), LegacyFlagError::InvalidValue { .. }), "{bad}");
    }
    assert!(run(&GRID_CONTROLLER, &["--feature-gates="]).is_ok(), "no gates");
    assert!(run(&GRID_CONTROLLER, &["--feature-gates=A=true, B=false"]).is_ok());
    assert!(matches!(error(&GRID_CONTROLLER, &["--master=https://x"]), LegacyFlagError::Unsupported { .. }));
}

#[test]
fn every_flag_is_logged_once_when_given() {
    assert_every_flag_logged_once(&GRID_CONTROLLER, &[]);
}

#[test]
fn translated_arguments_hold_no_superedge_flag() {
    assert_translation_leaves_no_superedge_flag(&GRID_CONTROLLER, &CONTROLLER_MANIFEST);
}
