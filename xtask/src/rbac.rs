//! The RBAC each binary needs, as one table of its API calls. `cargo xtask gen-crds`
//! writes the chart's rule templates from it (`charts/edgegrid/templates/_rbac.tpl`, one
//! `edgegrid.rules.<set>` per rule set, included by the component templates; `cargo xtask
//! check` fails on drift), and `cargo xtask run` checks every request each component made
//! to the local cluster's API server against it ([`violations`]), so a call the code
//! gains without a rule here fails the scenario test.

use fake_apiserver::RecordedRequest;

/// Where a rule set's Role lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// A ClusterRole.
    Cluster,
    /// A Role in this namespace.
    Namespace(&'static str),
    /// A Role in the release namespace (the local cluster uses `kube-system`).
    Release,
}

/// A `resourceNames` entry: a fixed name or a chart value (with its default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Name {
    Literal(&'static str),
    Value { path: &'static str, default: &'static str },
}

impl Name {
    fn template(self) -> String {
        match self {
            Self::Literal(name) => format!("{name:?}"),
            Self::Value { path, .. } => format!("{{{{ $.Values.{path} | quote }}}}"),
        }
    }

    fn default(self) -> &'static str {
        match self {
            Self::Literal(name) | Self::Value { default: name, .. } => name,
        }
    }
}

pub struct Rule {
    /// Why the binary makes these calls (a comment in the chart).
    pub why: &'static str,
    pub group: &'static str,
    pub resources: &'static [&'static str],
    /// Empty: any object.
    pub names: &'static [Name],
    pub verbs: &'static [&'static str],
}

/// The rules one binary needs in one Role, or under one chart condition.
pub struct RuleSet {
    /// The template is `edgegrid.rules.<name>`.
    pub name: &'static str,
    /// Whose calls these are: a binary's, or one ServiceAccount's that no binary runs as
    /// (`edge-health-kubelet-check`, whose tokens edge-health sends to peer kubelets only).
    pub binary: &'static str,
    pub scope: Scope,
    /// When the chart includes it (documentation; the template holds the condition).
    pub when: &'static str,
    pub rules: &'static [Rule],
}

const READ: &[&str] = &["get", "list", "watch"];
const LIST_WATCH: &[&str] = &["list", "watch"];

pub const TABLE: &[RuleSet] = &[
    RuleSet {
        name: "grid-controller",
        binary: "grid-controller",
        scope: Scope::Cluster,
        when: "always",
        rules: &[
            Rule {
                why: "the grids it reconciles",
                group: "superedge.io",
                resources: &["servicegrids", "deploymentgrids", "statefulsetgrids"],
                names: &[],
                verbs: READ,
            },
            Rule {
                why: "autoDeleteUnusedTemplate removes unused templatePool entries from the grid's spec",
                group: "superedge.io",
                resources: &["deploymentgrids", "statefulsetgrids"],
                names: &[],
                verbs: &["patch"],
            },
            Rule {
                why: "status and objects are written by server-side apply (patch), never replaced",
                group: "superedge.io",
                resources: &["servicegrids/status", "deploymentgrids/status", "statefulsetgrids/status"],
                names: &[],
                verbs: &["patch"],
            },
            Rule {
                why: "the Service of each ServiceGrid: created (POST, so a same-named object created meanwhile is a conflict, not taken over), then applied",
                group: "",
                resources: &["services"],
                names: &[],
                verbs: &["get", "list", "watch", "create", "patch"],
            },
            Rule {
                why: "one workload per unit, created then applied; a unit gone takes its workload",
                group: "apps",
                resources: &["deployments", "statefulsets"],
                names: &[],
                verbs: &["get", "list", "watch", "create", "patch", "delete"],
            },
            Rule { why: "units are node label values", group: "", resources: &["nodes"], names: &[], verbs: READ },
            Rule {
                why: "its Events",
                group: "events.k8s.io",
                resources: &["events"],
                names: &[],
                verbs: &["create", "patch"],
            },
        ],
    },
    RuleSet {
        name: "grid-controller-leader",
        binary: "grid-controller",
        scope: Scope::Release,
        when: "always",
        rules: LEADER_RULES_GRID_CONTROLLER,
    },
    RuleSet {
        name: "grid-wrapper",
        binary: "grid-wrapper",
        scope: Scope::Cluster,
        when: "always",
        rules: &[
            Rule {
                why: "what it mirrors, pruned to the node's unit (list/watch only: it never writes)",
                group: "",
                resources: &["services", "endpoints", "nodes"],
                names: &[],
                verbs: LIST_WATCH,
            },
            Rule {
                why: "the EndpointSlices it prunes",
                group: "discovery.k8s.io",
                resources: &["endpointslices"],
                names: &[],
                verbs: LIST_WATCH,
            },
        ],
    },
    RuleSet {
        name: "grid-wrapper-unit-digests",
        binary: "grid-wrapper",
        scope: Scope::Release,
        when: "gridWrapper.unitUpstream.enabled and gridWrapper.unitUpstream.vouched",
        rules: &[Rule {
            why: "the unit signer's batches, which a leader passes on to its followers (who check its streams against them)",
            group: "",
            resources: &["configmaps"],
            names: &[Name::Literal("edgegrid-unit-digests")],
            verbs: LIST_WATCH,
        }],
    },
    RuleSet {
        name: "unit-signer",
        binary: "unit-signer",
        scope: Scope::Cluster,
        when: "gridWrapper.unitUpstream.enabled and gridWrapper.unitUpstream.vouched",
        rules: &[
            Rule {
                why: "what unit leaders watch, whose states it signs (list/watch only)",
                group: "",
                resources: &["services", "endpoints", "nodes"],
                names: &[],
                verbs: LIST_WATCH,
            },
            Rule {
                why: "the EndpointSlices unit leaders watch",
                group: "discovery.k8s.io",
                resources: &["endpointslices"],
                names: &[],
                verbs: LIST_WATCH,
            },
        ],
    },
    RuleSet {
        name: "unit-signer-digests",
        binary: "unit-signer",
        scope: Scope::Release,
        when: "gridWrapper.unitUpstream.enabled and gridWrapper.unitUpstream.vouched",
        rules: &[
            Rule {
                why: "its batch ConfigMap, written by server-side apply",
                group: "",
                resources: &["configmaps"],
                names: &[Name::Literal("edgegrid-unit-digests")],
                verbs: &["get", "patch"],
            },
            Rule {
                why: "the first apply creates it (create cannot be limited by name)",
                group: "",
                resources: &["configmaps"],
                names: &[],
                verbs: &["create"],
            },
            own_lease(&[Name::Literal("unit-signer")]),
            LEASE_CREATE,
        ],
    },
    RuleSet {
        name: "edge-health",
        binary: "edge-health",
        scope: Scope::Cluster,
        when: "always",
        rules: &[Rule {
            why: "Node metadata for membership (a metadata-only list/watch); patch for the nodeunhealth verdicts and its own Node's address and public-key annotations. RBAC cannot narrow patch to a node or a field: the ValidatingAdmissionPolicy edge-health-node-restriction.edgegrid.io (edgeHealth.nodeRestrictionPolicy) keeps each daemon's token to exactly these writes, keyed on the node name the token carries",
            group: "",
            resources: &["nodes"],
            names: &[],
            verbs: &["list", "watch", "patch"],
        }],
    },
    RuleSet {
        name: "edge-health-kubelet-check",
        binary: "edge-health-kubelet-check",
        scope: Scope::Cluster,
        when: "a kind=kubelet check is configured",
        rules: &[Rule {
            why: "kind=kubelet checks GET a peer kubelet's /healthz with a token of this ServiceAccount (edge-health-kubelet-check, never edge-health's own: a peer's kubelet certificate can rarely be verified, so whoever answers at a peer's address gets the token); the kubelet asks the apiserver (SubjectAccessReview) for get on nodes/healthz (KubeletFineGrainedAuthz, on by default since Kubernetes 1.33). An older kubelet asks for nodes/proxy instead, which this chart does not grant: it is far more than a health check (see docs/edge-health.md#the-kubelet-check)",
            group: "",
            resources: &["nodes/healthz"],
            names: &[],
            verbs: &["get"],
        }],
    },
    RuleSet {
        name: "edge-health-kubelet-check-token",
        binary: "edge-health",
        scope: Scope::Release,
        when: "a kind=kubelet check is configured",
        rules: &[Rule {
            why: "short-lived tokens (TokenRequest, 10 minutes, unbound) of the edge-health-kubelet-check ServiceAccount for the kubelet checks, by name",
            group: "",
            resources: &["serviceaccounts/token"],
            names: &[Name::Literal("edge-health-kubelet-check")],
            verbs: &["create"],
        }],
    },
    RuleSet {
        name: "edge-health-config",
        binary: "edge-health",
        scope: Scope::Namespace("kube-system"),
        when: "SuperEdge node units (no unitLabelKey)",
        rules: &[Rule {
            why: "SuperEdge's edge-health-config ConfigMap, watched by name (a metadata.name field selector, which resourceNames authorizes)",
            group: "",
            resources: &["configmaps"],
            names: &[Name::Literal("edge-health-config")],
            verbs: LIST_WATCH,
        }],
    },
    RuleSet {
        name: "edge-health-admission",
        binary: "edge-health-admission",
        scope: Scope::Cluster,
        when: "always",
        rules: &[
            Rule {
                why: "the node cache the endpoint reviews are decided from; patch: the remover takes an unreachable NoExecute taint that got past the webhook off a protected node (a JSON patch conditional on the resourceVersion)",
                group: "",
                resources: &["nodes"],
                names: &[],
                verbs: &["list", "watch", "patch"],
            },
            Rule {
                why: "an Event for each taint the remover takes off",
                group: "events.k8s.io",
                resources: &["events"],
                names: &[],
                verbs: &["create", "patch"],
            },
        ],
    },
    RuleSet {
        name: "edge-health-admission-webhook-configuration",
        binary: "edge-health-admission",
        scope: Scope::Cluster,
        when: "admission.certificate.mode=selfManaged",
        rules: &[Rule {
            why: "keeps the caBundle of its own configuration current",
            group: "admissionregistration.k8s.io",
            resources: &["mutatingwebhookconfigurations"],
            names: &[Name::Value { path: "admission.webhookConfigurationName", default: "edge-health-admission" }],
            verbs: &["get", "patch"],
        }],
    },
    RuleSet {
        name: "edge-health-admission-certificates",
        binary: "edge-health-admission",
        scope: Scope::Release,
        when: "admission.certificate.mode=selfManaged",
        rules: &[
            Rule {
                why: "the CA and serving certificate the replicas share, read (listed and watched by name) and replaced by name",
                group: "",
                resources: &["secrets"],
                names: &[Name::Value {
                    path: "admission.certificate.secretName",
                    default: "edge-health-admission-tls",
                }],
                verbs: &["get", "list", "watch", "update"],
            },
            Rule {
                why: "the first replica creates it (create cannot be limited by name)",
                group: "",
                resources: &["secrets"],
                names: &[],
                verbs: &["create"],
            },
        ],
    },
    RuleSet {
        name: "edge-node-lifecycle",
        binary: "edge-node-lifecycle",
        scope: Scope::Cluster,
        when: "nodeLifecycle.enabled",
        rules: &[
            Rule {
                why: "taints, conditions and pod readiness are patched, never replaced",
                group: "",
                resources: &["nodes"],
                names: &[],
                verbs: &["get", "list", "watch", "patch"],
            },
            Rule { why: "Ready=Unknown", group: "", resources: &["nodes/status"], names: &[], verbs: &["patch"] },
            Rule {
                why: "the taint manager evicts pods that do not tolerate a NoExecute taint",
                group: "",
                resources: &["pods"],
                names: &[],
                verbs: &["get", "list", "watch", "delete"],
            },
            Rule {
                why: "pods of an unreachable, unprotected node are marked not ready",
                group: "",
                resources: &["pods/status"],
                names: &[],
                verbs: &["patch"],
            },
        ],
    },
    RuleSet {
        name: "edge-node-lifecycle-node-leases",
        binary: "edge-node-lifecycle",
        scope: Scope::Namespace("kube-node-lease"),
        when: "nodeLifecycle.enabled",
        rules: &[Rule {
            why: "node heartbeats",
            group: "coordination.k8s.io",
            resources: &["leases"],
            names: &[],
            verbs: READ,
        }],
    },
    RuleSet {
        name: "edge-node-lifecycle-leader",
        binary: "edge-node-lifecycle",
        scope: Scope::Release,
        when: "nodeLifecycle.enabled",
        rules: LEADER_RULES_EDGE_NODE_LIFECYCLE,
    },
];

const LEADER_RULES_GRID_CONTROLLER: &[Rule] = &[own_lease(&[Name::Literal("grid-controller")]), LEASE_CREATE];
const LEADER_RULES_EDGE_NODE_LIFECYCLE: &[Rule] = &[own_lease(&[Name::Literal("edge-node-lifecycle")]), LEASE_CREATE];

/// A leader-elected binary's own Lease.
const fn own_lease(names: &'static [Name]) -> Rule {
    Rule {
        why: "its own Lease only",
        group: "coordination.k8s.io",
        resources: &["leases"],
        names,
        verbs: &["get", "update"],
    }
}

const LEASE_CREATE: Rule = Rule {
    why: "the first replica creates it (create cannot be limited by name)",
    group: "coordination.k8s.io",
    resources: &["leases"],
    names: &[],
    verbs: &["create"],
};

const HEADER: &str = "{{/* Generated by `cargo xtask gen-crds` from xtask/src/rbac.rs; do not edit. */}}\n";

fn list(items: impl IntoIterator<Item = String>) -> String {
    format!("[{}]", items.into_iter().collect::<Vec<_>>().join(", "))
}

/// `charts/edgegrid/templates/_rbac.tpl`.
pub fn rules_template() -> String {
    let mut out = String::from(HEADER);
    for set in TABLE {
        out.push_str(&format!(
            "{{{{- /* {} ({}; {}) */}}}}\n{{{{- define \"edgegrid.rules.{}\" -}}}}\n",
            set.binary,
            match set.scope {
                Scope::Cluster => "ClusterRole".to_string(),
                Scope::Namespace(namespace) => format!("Role in {namespace}"),
                Scope::Release => "Role in the release namespace".to_string(),
            },
            set.when,
            set.name
        ));
        for (i, rule) in set.rules.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&format!("# {}\n", rule.why));
            out.push_str(&format!("- apiGroups: [{:?}]\n", rule.group));
            out.push_str(&format!("  resources: {}\n", list(rule.resources.iter().map(|r| format!("{r:?}")))));
            if !rule.names.is_empty() {
                out.push_str(&format!("  resourceNames: {}\n", list(rule.names.iter().map(|n| n.template()))));
            }
            out.push_str(&format!("  verbs: {}", list(rule.verbs.iter().map(|v| format!("{v:?}")))));
        }
        out.push_str("\n{{- end }}\n");
    }
    out
}

/// What RBAC authorizes a request by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    pub group: String,
    /// `resource` or `resource/subresource`.
    pub resource: String,
    pub namespace: Option<String>,
    /// The object's name, or the `metadata.name` a list/watch selects.
    pub name: Option<String>,
}

/// The attributes of a resource request; `None` for a non-resource URL (discovery,
/// `/version`, `/openapi`: every authenticated user may read those).
pub fn attributes(method: &str, path: &str, query: &str) -> Option<Attributes> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match segments.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        // a Namespace itself: RBAC sees it in itself
        ["namespaces", namespace] => (Some(namespace.to_string()), rest.to_vec()),
        ["namespaces", namespace, resource, rest @ ..] => (Some(namespace.to_string()), [&[*resource], rest].concat()),
        _ => (None, rest.to_vec()),
    };
    let (resource, name, subresource) = match rest.as_slice() {
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some(name.to_string()), None),
        [resource, name, subresource] => (*resource, Some(name.to_string()), Some(*subresource)),
        _ => return None,
    };
    let param = |key: &str| {
        query.split('&').find_map(|pair| pair.strip_prefix(key)?.strip_prefix('=').map(|v| v.replace("%3D", "=")))
    };
    let watching = param("watch").is_some_and(|v| v == "true" || v == "1");
    let verb = match (method, name.is_some()) {
        ("GET" | "HEAD", true) => "get",
        ("GET" | "HEAD", false) if watching => "watch",
        ("GET" | "HEAD", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    };
    // a list/watch of one object by name is authorized by resourceNames
    let name = name.or_else(|| {
        param("fieldSelector")?.split(',').find_map(|s| s.strip_prefix("metadata.name=").map(str::to_string))
    });
    Some(Attributes {
        verb: verb.to_string(),
        group: group.to_string(),
        resource: match subresource {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_string(),
        },
        namespace,
        name,
    })
}

/// Whether `binary`'s rule sets allow `request` (Roles in the release namespace taken to be
/// `release_namespace`).
pub fn allows(binary: &str, request: &Attributes, release_namespace: &str) -> bool {
    TABLE.iter().filter(|set| set.binary == binary).any(|set| {
        let in_scope = match set.scope {
            Scope::Cluster => true,
            Scope::Namespace(namespace) => request.namespace.as_deref() == Some(namespace),
            Scope::Release => request.namespace.as_deref() == Some(release_namespace),
        };
        in_scope
            && set.rules.iter().any(|rule| {
                rule.group == request.group
                    && rule.resources.contains(&request.resource.as_str())
                    && rule.verbs.contains(&request.verb.as_str())
                    && (rule.names.is_empty()
                        || request.name.as_deref().is_some_and(|n| rule.names.iter().any(|r| r.default() == n)))
            })
    })
}

/// The requests that no rule of their caller's binary allows, described; the caller is the
/// request's bearer token, `<binary>/<instance>`. Requests without a token are not checked.
pub fn violations(requests: &[RecordedRequest], release_namespace: &str) -> Vec<String> {
    let mut out: Vec<String> = requests
        .iter()
        .filter_map(|request| {
            let user = request.user.as_deref()?;
            let binary = user.split('/').next().unwrap_or(user);
            let attributes = attributes(&request.method, &request.path, &request.query)?;
            (!allows(binary, &attributes, release_namespace)).then(|| {
                format!(
                    "{binary}: {} {}{} ({} {}{})",
                    attributes.verb,
                    if attributes.group.is_empty() { "core" } else { &attributes.group },
                    format_args!("/{}", attributes.resource),
                    request.method,
                    request.path,
                    if request.query.is_empty() { String::new() } else { format!("?{}", request.query) }
                )
            })
        })
        .collect();
    out.sort();
    out.dedup_by(|a, b| a.split(" (").next() == b.split(" (").next());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, path: &str, query: &str, user: &str) -> RecordedRequest {
        RecordedRequest {
            seq: 0,
            method: method.into(),
            path: path.into(),
            query: query.into(),
            status: 200,
            user: Some(user.into()),
            impersonating: None,
        }
    }

    #[test]
    fn requests_are_read_as_rbac_reads_them() {
        let cases = [
            ("GET", "/api/v1/nodes", "", ("list", "", "nodes", None, None)),
            ("GET", "/api/v1/nodes", "watch=true&resourceVersion=5", ("watch", "", "nodes", None, None)),
            ("GET", "/api/v1/nodes/n1", "", ("get", "", "nodes", None, Some("n1"))),
            ("PATCH", "/api/v1/nodes/n1/status", "", ("patch", "", "nodes/status", None, Some("n1"))),
            (
                "GET",
                "/api/v1/namespaces/kube-system/secrets",
                "fieldSelector=metadata.name%3Dtls&watch=1",
                ("watch", "", "secrets", Some("kube-system"), Some("tls")),
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x",
                "",
                ("update", "coordination.k8s.io", "leases", Some("kube-system"), Some("x")),
            ),
            (
                "POST",
                "/apis/events.k8s.io/v1/namespaces/default/events",
                "",
                ("create", "events.k8s.io", "events", Some("default"), None),
            ),
            ("DELETE", "/api/v1/namespaces/a/pods", "", ("deletecollection", "", "pods", Some("a"), None)),
            ("GET", "/api/v1/namespaces/a", "", ("get", "", "namespaces", Some("a"), Some("a"))),
        ];
        for (method, path, query, (verb, group, resource, namespace, name)) in cases {
            let expected = Attributes {
                verb: verb.into(),
                group: group.into(),
                resource: resource.into(),
                namespace: namespace.map(str::to_string),
                name: name.map(str::to_string),
            };
            assert_eq!(attributes(method, path, query), Some(expected), "{method} {path}?{query}");
        }
        for path in ["/api", "/apis", "/apis/apps/v1", "/version", "/openapi/v2"] {
            assert_eq!(attributes("GET", path, ""), None, "{path}");
        }
    }

    #[test]
    fn the_table_allows_exactly_what_it_says() {
        let check = |req: RecordedRequest| violations(&[req], "kube-system");
        assert!(check(request("PATCH", "/api/v1/nodes/n1", "", "edge-health/n1")).is_empty());
        assert_eq!(
            check(request("PUT", "/api/v1/nodes/n1", "", "edge-health/n1")),
            ["edge-health: update core/nodes (PUT /api/v1/nodes/n1)"]
        );
        // names: by resourceNames, a list/watch only with the name's field selector
        let secrets = "/api/v1/namespaces/kube-system/secrets";
        let by_name = "fieldSelector=metadata.name%3Dedge-health-admission-tls&watch=true";
        assert!(check(request("GET", secrets, by_name, "edge-health-admission/0")).is_empty());
        assert_eq!(check(request("GET", secrets, "watch=true", "edge-health-admission/0")).len(), 1);
        assert_eq!(check(request("GET", &format!("{secrets}/other"), "", "edge-health-admission/0")).len(), 1);
        // scope: the release namespace, and nowhere else
        let elsewhere = "/api/v1/namespaces/default/secrets/edge-health-admission-tls";
        assert_eq!(check(request("GET", elsewhere, "", "edge-health-admission/0")).len(), 1);
        let node_leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
        assert!(check(request("GET", node_leases, "watch=true", "edge-node-lifecycle/0")).is_empty());
        assert_eq!(check(request("GET", node_leases, "watch=true", "grid-wrapper/n1")).len(), 1);
        // the kubelet-check token: created for its ServiceAccount only, in the release
        // namespace; nodes/healthz is not edge-health's own
        let tokens = "/api/v1/namespaces/kube-system/serviceaccounts";
        let token = format!("{tokens}/edge-health-kubelet-check/token");
        assert!(check(request("POST", &token, "", "edge-health/n1")).is_empty());
        assert_eq!(check(request("POST", &format!("{tokens}/edge-health/token"), "", "edge-health/n1")).len(), 1);
        let elsewhere = "/api/v1/namespaces/default/serviceaccounts/edge-health-kubelet-check/token";
        assert_eq!(check(request("POST", elsewhere, "", "edge-health/n1")).len(), 1);
        assert_eq!(check(request("GET", "/api/v1/nodes/n2/healthz", "", "edge-health/n1")).len(), 1);
        // one binary's rules are not another's; untagged requests are not checked
        assert_eq!(check(request("PATCH", "/api/v1/nodes/n1", "", "grid-wrapper/n1")).len(), 1);
        let mut anonymous = request("DELETE", "/api/v1/nodes/n1", "", "");
        anonymous.user = None;
        assert!(check(anonymous).is_empty());
    }

    #[test]
    fn the_template_says_what_the_table_says() {
        let template = rules_template();
        let start =
            template.find("{{- define \"edgegrid.rules.edge-health-admission-certificates\" -}}").expect("a define");
        let end = start + template[start..].find("{{- end }}").expect("its end");
        assert_eq!(
            &template[start..end],
            "{{- define \"edgegrid.rules.edge-health-admission-certificates\" -}}\n\
             # the CA and serving certificate the replicas share, read (listed and watched by name) and replaced by name\n\
             - apiGroups: [\"\"]\n  resources: [\"secrets\"]\n\
             \x20 resourceNames: [{{ $.Values.admission.certificate.secretName | quote }}]\n\
             \x20 verbs: [\"get\", \"list\", \"watch\", \"update\"]\n\
             # the first replica creates it (create cannot be limited by name)\n\
             - apiGroups: [\"\"]\n  resources: [\"secrets\"]\n  verbs: [\"create\"]\n"
        );
        assert_eq!(template.matches("{{- define ").count(), TABLE.len());
    }
}
