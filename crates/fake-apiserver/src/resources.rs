//! The resource types the server serves: built-ins registered at start-up, plus CRDs.

use std::sync::Arc;

use serde_json::{Value, json};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// Empty for the core group.
    pub group: String,
    pub version: String,
    /// Lower-case plural, the path segment (`pods`).
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub status_subresource: bool,
    /// Serves `/scale` (`autoscaling/v1` Scale of `spec.replicas`).
    pub scale_subresource: bool,
    pub short_names: Vec<String>,
    /// The categories it belongs to (`kubectl get all`, `kubectl get grids`).
    pub categories: Vec<String>,
    /// A CRD version's `additionalPrinterColumns` (server-side printing).
    pub printer_columns: Vec<PrinterColumn>,
    /// A CRD version's `openAPIV3Schema` (objects are checked against it).
    pub schema: Option<Arc<Value>>,
}

/// One of a CRD's `additionalPrinterColumns`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: String,
    /// integer, number, string, boolean, date
    pub kind: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

impl PrinterColumn {
    fn from_crd(column: &Value) -> Option<Self> {
        let text = |field: &str| column[field].as_str().unwrap_or_default().to_string();
        Some(Self {
            name: column["name"].as_str()?.to_string(),
            kind: text("type"),
            format: text("format"),
            description: text("description"),
            priority: column["priority"].as_i64().unwrap_or(0),
            json_path: column["jsonPath"].as_str()?.to_string(),
        })
    }
}

impl ResourceType {
    pub fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool, status: bool) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            kind: kind.into(),
            namespaced,
            status_subresource: status,
            scale_subresource: false,
            short_names: Vec::new(),
            categories: Vec::new(),
            printer_columns: Vec::new(),
            schema: None,
        }
    }

    fn short(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    fn scalable(mut self) -> Self {
        self.scale_subresource = true;
        self
    }

    /// In the `all` category, as a real apiserver puts its workload and Service kinds.
    fn in_all(mut self) -> Self {
        self.categories = vec!["all".to_string()];
        self
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The type objects of this version are served as.
    pub fn served(&self) -> listwatch::ServedType {
        listwatch::ServedType::new(self.api_version(), self.kind.clone())
    }

    /// `pods` or `deployments.apps`, as error messages name resources.
    pub fn qualified_plural(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }

    /// The `APIResource` entries (resource and its status subresource) for discovery.
    pub fn discovery_entries(&self) -> Vec<Value> {
        let verbs = json!(["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]);
        let mut resource = json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": verbs,
            "shortNames": self.short_names,
        });
        if !self.categories.is_empty() {
            resource["categories"] = json!(self.categories);
        }
        let mut out = vec![resource];
        if self.scale_subresource {
            out.push(json!({
                "name": format!("{}/scale", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
        if self.status_subresource {
            out.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        out
    }
}

/// What a fresh server serves.
pub fn builtin() -> Vec<ResourceType> {
    use ResourceType as R;
    vec![
        R::new("", "v1", "namespaces", "Namespace", false, true).short(&["ns"]),
        R::new("", "v1", "nodes", "Node", false, true).short(&["no"]),
        R::new("", "v1", "pods", "Pod", true, true).short(&["po"]).in_all(),
        R::new("", "v1", "services", "Service", true, true).short(&["svc"]).in_all(),
        R::new("", "v1", "endpoints", "Endpoints", true, false).short(&["ep"]),
        R::new("", "v1", "configmaps", "ConfigMap", true, false).short(&["cm"]),
        R::new("", "v1", "secrets", "Secret", true, false),
        R::new("", "v1", "events", "Event", true, false).short(&["ev"]),
        R::new("", "v1", "serviceaccounts", "ServiceAccount", true, false).short(&["sa"]),
        R::new("events.k8s.io", "v1", "events", "Event", true, false).short(&["ev"]),
        R::new("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", true, false),
        R::new("coordination.k8s.io", "v1", "leases", "Lease", true, false),
        R::new("apps", "v1", "deployments", "Deployment", true, true).short(&["deploy"]).in_all().scalable(),
        R::new("apps", "v1", "statefulsets", "StatefulSet", true, true).short(&["sts"]).in_all().scalable(),
        R::new("apps", "v1", "daemonsets", "DaemonSet", true, true).short(&["ds"]).in_all(),
        R::new("apps", "v1", "replicasets", "ReplicaSet", true, true).short(&["rs"]).in_all().scalable(),
        R::new("apps", "v1", "controllerrevisions", "ControllerRevision", true, false),
        R::new("networking.k8s.io", "v1", "servicecidrs", "ServiceCIDR", false, true),
        R::new("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", true, true).short(&["pdb"]),
        R::new("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", false, false),
        R::new("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", false, false),
        R::new("rbac.authorization.k8s.io", "v1", "roles", "Role", true, false),
        R::new("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", true, false),
        R::new(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            false,
            false,
        ),
        R::new(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            false,
            false,
        ),
        // enforced on writes ([`crate::policy`])
        R::new(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicies",
            "ValidatingAdmissionPolicy",
            false,
            true,
        ),
        R::new(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicybindings",
            "ValidatingAdmissionPolicyBinding",
            false,
            false,
        ),
        R::new("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", false, true)
            .short(&["crd", "crds"]),
    ]
}

/// The resource types a `CustomResourceDefinition` object declares (one per served version).
pub fn from_crd(crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let (Some(group), Some(plural), Some(kind)) =
        (spec["group"].as_str(), spec["names"]["plural"].as_str(), spec["names"]["kind"].as_str())
    else {
        return Vec::new();
    };
    let namespaced = spec["scope"].as_str() == Some("Namespaced");
    let singular = spec["names"]["singular"].as_str().map_or_else(|| kind.to_lowercase(), str::to_string);
    let strings = |field: &str| -> Vec<String> {
        spec["names"][field]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let (short_names, categories) = (strings("shortNames"), strings("categories"));
    spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["served"].as_bool().unwrap_or(false))
        .filter_map(|v| {
            Some(ResourceType {
                group: group.to_string(),
                version: v["name"].as_str()?.to_string(),
                plural: plural.to_string(),
                singular: singular.clone(),
                kind: kind.to_string(),
                namespaced,
                status_subresource: v["subresources"]["status"].is_object(),
                // a CRD's scale paths are not served: only the built-ins' spec.replicas
                scale_subresource: false,
                short_names: short_names.clone(),
                categories: categories.clone(),
                printer_columns: v["additionalPrinterColumns"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(PrinterColumn::from_crd)
                    .collect(),
                schema: v["schema"]["openAPIV3Schema"]
                    .is_object()
                    .then(|| Arc::new(v["schema"]["openAPIV3Schema"].clone())),
            })
        })
        .collect()
}
