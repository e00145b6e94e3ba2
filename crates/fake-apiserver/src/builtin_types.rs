//! The built-in kinds this server knows the Rust (k8s-openapi) type of: one table, used to
//! decode request bodies as the real server decodes them ([`crate::schema`]) and to publish
//! their schemas for `kubectl explain` (OpenAPI v3).

use k8s_openapi::api::{admissionregistration, apps, coordination, core, discovery, policy, rbac};
use serde::de::DeserializeOwned;

use crate::resources::ResourceType;

/// Something done with a built-in kind's type.
pub trait WithType {
    type Out;
    fn with<T: DeserializeOwned + schemars::JsonSchema>(self) -> Self::Out;
}

/// `f` applied to `rt`'s type; `None` for a kind not in the table.
pub fn with_type<F: WithType>(rt: &ResourceType, f: F) -> Option<F::Out> {
    Some(match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => f.with::<core::v1::Pod>(),
        ("", "Node") => f.with::<core::v1::Node>(),
        ("", "Service") => f.with::<core::v1::Service>(),
        ("", "Endpoints") => f.with::<core::v1::Endpoints>(),
        ("", "ConfigMap") => f.with::<core::v1::ConfigMap>(),
        ("", "Secret") => f.with::<core::v1::Secret>(),
        ("", "Namespace") => f.with::<core::v1::Namespace>(),
        ("", "ServiceAccount") => f.with::<core::v1::ServiceAccount>(),
        ("", "Event") => f.with::<core::v1::Event>(),
        ("apps", "Deployment") => f.with::<apps::v1::Deployment>(),
        ("apps", "StatefulSet") => f.with::<apps::v1::StatefulSet>(),
        ("apps", "DaemonSet") => f.with::<apps::v1::DaemonSet>(),
        ("apps", "ReplicaSet") => f.with::<apps::v1::ReplicaSet>(),
        ("apps", "ControllerRevision") => f.with::<apps::v1::ControllerRevision>(),
        ("discovery.k8s.io", "EndpointSlice") => f.with::<discovery::v1::EndpointSlice>(),
        ("coordination.k8s.io", "Lease") => f.with::<coordination::v1::Lease>(),
        ("policy", "PodDisruptionBudget") => f.with::<policy::v1::PodDisruptionBudget>(),
        ("rbac.authorization.k8s.io", "ClusterRole") => f.with::<rbac::v1::ClusterRole>(),
        ("rbac.authorization.k8s.io", "Role") => f.with::<rbac::v1::Role>(),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => f.with::<rbac::v1::ClusterRoleBinding>(),
        ("rbac.authorization.k8s.io", "RoleBinding") => f.with::<rbac::v1::RoleBinding>(),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            f.with::<admissionregistration::v1::ValidatingAdmissionPolicy>()
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            f.with::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>()
        }
        _ => return None,
    })
}
