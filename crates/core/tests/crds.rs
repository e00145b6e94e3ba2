//! The generated CRDs: committed YAML round-trips, schemas are structural, and the
//! SuperEdge-style manifests in `examples/` deserialise into our types.

use std::path::{Path, PathBuf};

use edgegrid_core::crd::{self, DeploymentGrid, ServiceGrid, StatefulSetGrid};
use edgegrid_core::keys;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

#[test]
fn committed_yaml_parses_back_into_the_generated_crds() {
    let crds = crd::all_crds();
    assert_eq!(crds.len(), 3);
    for generated in crds {
        let name = generated.metadata.name.clone().expect("named");
        let committed: CustomResourceDefinition =
            serde_saphyr::from_str(&read(&format!("charts/edgegrid/crds/{name}.yaml"))).expect("valid CRD YAML");
        assert_eq!(committed, generated, "{name}: run `cargo xtask gen-crds`");
    }
}

#[test]
fn names_groups_scopes_and_subresources() {
    let want = [
        ("servicegrids.superedge.io", "ServiceGrid", "sg", vec!["Key", "Service", "Age"]),
        ("deploymentgrids.superedge.io", "DeploymentGrid", "dg", vec!["Key", "Units", "Ready", "Workloads", "Age"]),
        ("statefulsetgrids.superedge.io", "StatefulSetGrid", "ssg", vec!["Key", "Units", "Ready", "Workloads", "Age"]),
    ];
    for (crd, (name, kind, short, columns)) in crd::all_crds().iter().zip(want) {
        assert_eq!(crd.metadata.name.as_deref(), Some(name));
        assert_eq!(crd.spec.group, keys::GRID_GROUP);
        assert_eq!(crd.spec.names.kind, kind);
        assert_eq!(crd.spec.names.short_names, Some(vec![short.to_string()]));
        assert_eq!(crd.spec.scope, "Namespaced");
        let [version] = crd.spec.versions.as_slice() else { panic!("{name}: exactly one version") };
        assert_eq!(version.name, keys::GRID_VERSION);
        assert!(version.served && version.storage);
        assert!(version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some(), "{name}: status subresource");
        let got: Vec<&str> = version.additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
        assert_eq!(got, columns, "{name}: printer columns");
    }
}

/// Checks the structural-schema rules the apiserver enforces on CRDs, collecting every
/// violation with its path.
fn structural_violations(schema: &JSONSchemaProps, path: &str, out: &mut Vec<String>, preserved: &mut Vec<String>) {
    let int_or_string = schema.x_kubernetes_int_or_string == Some(true);
    let preserve = schema.x_kubernetes_preserve_unknown_fields == Some(true);
    if preserve {
        preserved.push(path.to_string());
    }
    if schema.type_.as_deref().unwrap_or_default().is_empty() && !int_or_string && !preserve {
        out.push(format!("{path}: no type"));
    }
    if schema.ref_path.is_some() || schema.definitions.is_some() {
        out.push(format!("{path}: $ref/definitions are not allowed"));
    }
    if schema.properties.is_some() && matches!(schema.additional_properties, Some(JSONSchemaPropsOrBool::Schema(_))) {
        out.push(format!("{path}: properties and additionalProperties together"));
    }
    for (junctor, list) in [("allOf", &schema.all_of), ("anyOf", &schema.any_of), ("oneOf", &schema.one_of)] {
        for (i, branch) in list.iter().flatten().enumerate() {
            // inside logical junctors only value validations may appear
            if branch.type_.is_some()
                || branch.description.is_some()
                || branch.default.is_some()
                || branch.additional_properties.is_some()
                || branch.nullable.is_some()
            {
                out.push(format!("{path}.{junctor}[{i}]: junctor branch declares type/description/default"));
            }
        }
    }
    for (name, child) in schema.properties.iter().flatten() {
        structural_violations(child, &format!("{path}.{name}"), out, preserved);
    }
    match &schema.items {
        Some(JSONSchemaPropsOrArray::Schema(s)) => structural_violations(s, &format!("{path}[]"), out, preserved),
        Some(JSONSchemaPropsOrArray::Schemas(_)) => out.push(format!("{path}: tuple items are not structural")),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(s)) = &schema.additional_properties {
        structural_violations(s, &format!("{path}{{}}"), out, preserved);
    }
}

#[test]
fn schemas_are_structural_without_untyped_fields() {
    for crd in crd::all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let schema = crd.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).expect("schema");
        let (mut violations, mut preserved) = (Vec::new(), Vec::new());
        structural_violations(schema, "", &mut violations, &mut preserved);
        assert_eq!(violations, Vec::<String>::new(), "{name}");
        // No field escapes the schema: every embedded Kubernetes spec is fully typed.
        assert_eq!(preserved, Vec::<String>::new(), "{name}: x-kubernetes-preserve-unknown-fields used");
    }
}

#[test]
fn embedded_specs_are_compacted_but_our_fields_keep_their_docs() {
    let dg = &crd::all_crds()[1];
    let spec =
        &dg.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap().properties.as_ref().unwrap()
            ["spec"];
    let props = spec.properties.as_ref().unwrap();
    assert!(props["gridUniqKey"].description.is_some());
    assert!(props["template"].description.is_some(), "the embedding field keeps its own doc");
    let replicas = &props["template"].properties.as_ref().unwrap()["replicas"];
    assert_eq!((replicas.type_.as_deref(), replicas.description.as_ref()), (Some("integer"), None));
    // compact JSON stays well under client-side `kubectl apply`'s 256 KiB annotation limit
    let json = serde_json::to_vec(dg).unwrap();
    assert!(json.len() < 200 * 1024, "DeploymentGrid CRD is {} bytes", json.len());
}

#[test]
fn superedge_servicegrid_manifest_deserialises() {
    let sg: ServiceGrid = serde_saphyr::from_str(&read("examples/servicegrid.yaml")).expect("valid ServiceGrid");
    assert_eq!(sg.metadata.name.as_deref(), Some("echo"));
    assert_eq!(sg.spec.grid_uniq_key, "zone1");
    let ports = sg.spec.template.ports.as_ref().expect("ports");
    assert_eq!((ports[0].port, ports[0].target_port.clone()), (80, Some(IntOrString::Int(8080))));
    assert_eq!(sg.spec.template.selector.as_ref().unwrap()["appGrid"], "echo");
    assert_eq!(crd::service_name_for_grid(sg.metadata.name.as_deref().unwrap()), "echo-svc");
    assert!(sg.status.is_none());
}

#[test]
fn superedge_deploymentgrid_manifest_deserialises() {
    let dg: DeploymentGrid =
        serde_saphyr::from_str(&read("examples/deploymentgrid.yaml")).expect("valid DeploymentGrid");
    assert_eq!(dg.spec.grid_uniq_key, "zone1");
    let template = dg.spec.template.as_ref().expect("template");
    assert_eq!(template.replicas, Some(2));
    let pod = template.template.spec.as_ref().expect("pod spec");
    assert_eq!(pod.containers[0].image.as_deref(), Some("superedge/echoserver:2.2"));
    assert!(dg.spec.template_pool.is_empty() && dg.spec.templates.is_empty());
    assert_eq!(dg.spec.default_template_name, None);
    assert!(!dg.spec.auto_delete_unused_template);
}

/// SuperEdge's `Template ... json:"template,omitempty"`: a grid whose units all take a
/// `templatePool` entry may omit `template`, so neither kind's schema requires it.
#[test]
fn template_is_optional_in_the_workload_grid_schemas() {
    for crd in &crd::all_crds()[1..] {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let root = crd.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).expect("schema");
        let spec = &root.properties.as_ref().expect("properties")["spec"];
        assert_eq!(spec.required, Some(vec!["gridUniqKey".to_string()]), "{name}");
        let template = &spec.properties.as_ref().expect("spec properties")["template"];
        assert_eq!((template.type_.as_deref(), template.nullable), (Some("object"), Some(true)), "{name}");
        assert!(template.required.as_ref().is_some_and(|r| r.contains(&"selector".to_string())), "{name}");
    }
}

/// The canary example of SuperEdge's docs (docs/components/serviceGroup.md), without the
/// docs' `template` placeholder: only `templatePool` + `defaultTemplateName` + `templates`.
#[test]
fn superedge_docs_template_pool_only_deploymentgrid_deserialises() {
    let dg: DeploymentGrid = serde_saphyr::from_str(&read("tests/superedge/docs/deploymentgrid-templatepool.yaml"))
        .expect("valid DeploymentGrid");
    assert_eq!(dg.spec.template, None);
    assert_eq!(dg.spec.default_template_name.as_deref(), Some("test1"));
    assert_eq!(dg.spec.template_pool.keys().collect::<Vec<_>>(), ["test1", "test2"]);
    assert_eq!((dg.spec.template_pool["test1"].replicas, dg.spec.template_pool["test2"].replicas), (Some(2), Some(3)));
    assert_eq!(dg.spec.templates["zone2"], "test2");
    let json = serde_json::to_value(&dg.spec).expect("serialise");
    assert!(json.get("template").is_none(), "an absent template is not written back as null");
    let nulled: crd::DeploymentGridSpec =
        serde_json::from_value(serde_json::json!({"gridUniqKey": "zone", "template": null})).expect("null template");
    assert_eq!(nulled.template, None);
}

#[test]
fn statefulsetgrid_manifest_with_template_pool_deserialises() {
    let ssg: StatefulSetGrid = serde_saphyr::from_str(&read("examples/statefulsetgrid.yaml")).expect("valid");
    assert_eq!(ssg.spec.template_pool["large"].replicas, Some(3));
    assert_eq!(ssg.spec.templates["unit-b"], "large");
}

#[test]
fn status_round_trips_with_typed_conditions() {
    let status_json = serde_json::json!({
        "states": {"unit-a": {"workload": "echo-unit-a", "replicas": 2, "readyReplicas": 1, "availableReplicas": 1,
            "updatedReplicas": 2, "conditions": [{"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"}]}},
        "units": 1, "readyUnits": 0, "workloads": ["echo-unit-a"], "observedGeneration": 3,
        "conditions": [{"type": "UnitNamesValid", "status": "False", "reason": "InvalidUnitValue",
            "message": "unit value \"Bad_Value\" is not a DNS-1123 label", "lastTransitionTime": "2026-11-21T10:00:00Z",
            "observedGeneration": 3}]
    });
    let status: crd::WorkloadGridStatus = serde_json::from_value(status_json.clone()).expect("valid status");
    assert_eq!(status.conditions[0].type_, crd::GridConditionType::UnitNamesValid);
    assert_eq!(status.conditions[0].status, crd::ConditionStatus::False);
    assert_eq!(status.states["unit-a"].ready_replicas, 1);
    assert_eq!(serde_json::to_value(&status).unwrap(), status_json);
    let bad = serde_json::json!({"conditions": [{"type": "Sideways", "status": "True", "reason": "X", "lastTransitionTime": "2026-11-21T10:00:00Z"}]});
    assert!(serde_json::from_value::<crd::WorkloadGridStatus>(bad).is_err(), "unknown condition types are rejected");
}

#[test]
fn structural_checker_flags_untyped_and_preserved_fields() {
    let schema: JSONSchemaProps = serde_json::from_value(serde_json::json!({
        "type": "object",
        "properties": {
            "untyped": {},
            "port": {"x-kubernetes-int-or-string": true},
            "blob": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "list": {"type": "array", "items": {"properties": {}}},
            "either": {"type": "string", "anyOf": [{"type": "string"}]}
        }
    }))
    .unwrap();
    let (mut violations, mut preserved) = (Vec::new(), Vec::new());
    structural_violations(&schema, "", &mut violations, &mut preserved);
    assert_eq!(
        violations,
        vec![
            ".either.anyOf[0]: junctor branch declares type/description/default".to_string(),
            ".list[]: no type".to_string(),
            ".untyped: no type".to_string(),
        ]
    );
    assert_eq!(preserved, vec![".blob".to_string()]);
}
