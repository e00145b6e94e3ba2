//! The kubeconfigs this command writes: kubectl's, and each component's with its own token.
//! A module of its own because the run, the component processes, the in-process grid
//! controller and the soak all write them, and none of those needs the others for it.

/// The context name of the kubeconfigs this command writes: a `KUBECONFIG` naming it is an
/// earlier run's, never a cluster to install into.
pub(super) const CONTEXT: &str = "edgegrid-local";

/// A kubeconfig for `server` under this command's context name.
pub(super) fn kubeconfig_for(server: &str) -> String {
    kubeconfig_with_token(server, None)
}

/// The same, with a bearer token: the fake apiserver authenticates nobody, but records
/// the token, so each component's requests can be told apart (and checked against RBAC).
pub(crate) fn kubeconfig_with_token(server: &str, token: Option<&str>) -> String {
    let user = token.map_or("{}".to_string(), |token| format!("{{token: {token:?}}}"));
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {CONTEXT}\n  cluster:\n    server: {server}\n\
         contexts:\n- name: {CONTEXT}\n  context:\n    cluster: {CONTEXT}\n    user: {CONTEXT}\n    namespace: default\n\
         current-context: {CONTEXT}\nusers:\n- name: {CONTEXT}\n  user: {user}\n"
    )
}
