//! Who a request is made by: the identities tests register for bearer tokens, which
//! admission (webhooks' `userInfo`, ValidatingAdmissionPolicy's `request.userInfo`) sees.
//!
//! Nothing is authenticated or authorized here: a token nobody registered is
//! `system:admin` (as every request was before identities existed), and so is a request
//! without one, so clients that only name themselves with a token keep working.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use serde_json::{Value, json};

/// The user extra a projected service-account token's pod node is carried in
/// (`ServiceAccountTokenPodNodeInfo`, GA in Kubernetes 1.32).
pub const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";

/// `authentication.k8s.io/v1` UserInfo.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with a name and no groups.
    pub fn new(username: impl Into<String>) -> Self {
        Self { username: username.into(), ..Self::default() }
    }

    /// The cluster administrator: what requests with an unregistered token (or none) are.
    pub fn admin() -> Self {
        Self::new("system:admin").with_groups(&["system:masters", "system:authenticated"])
    }

    /// A service account's token, as the real server names it, with its groups.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        Self::new(format!("system:serviceaccount:{namespace}:{name}")).with_groups(&[
            "system:serviceaccounts",
            &format!("system:serviceaccounts:{namespace}"),
            "system:authenticated",
        ])
    }

    pub fn with_groups(mut self, groups: &[&str]) -> Self {
        self.groups = groups.iter().map(|g| g.to_string()).collect();
        self
    }

    pub fn with_extra(mut self, key: &str, values: &[&str]) -> Self {
        self.extra.insert(key.to_string(), values.iter().map(|v| v.to_string()).collect());
        self
    }

    /// A pod-bound token of a pod on `node`: the node's name in [`NODE_NAME_EXTRA`].
    pub fn on_node(self, node: &str) -> Self {
        self.with_extra(NODE_NAME_EXTRA, &[node])
    }

    /// As an AdmissionRequest's `userInfo` is converted for CEL: empty fields are absent
    /// (`omitempty`), so a policy must test them with `has()` as on a real server.
    pub fn to_json(&self) -> Value {
        let mut out = json!({"username": self.username});
        if !self.uid.is_empty() {
            out["uid"] = json!(self.uid);
        }
        if !self.groups.is_empty() {
            out["groups"] = json!(self.groups);
        }
        if !self.extra.is_empty() {
            out["extra"] = json!(self.extra);
        }
        out
    }
}

/// The registered identities, by bearer token.
#[derive(Default)]
pub struct Users {
    by_token: Mutex<HashMap<String, UserInfo>>,
}

impl Users {
    pub fn add(&self, token: &str, user: UserInfo) {
        self.by_token.lock().unwrap_or_else(|e| e.into_inner()).insert(token.to_string(), user);
    }

    /// The user a request with `token` (the `Bearer` credential, if any) is made by.
    pub fn authenticate(&self, token: Option<&str>) -> UserInfo {
        let users = self.by_token.lock().unwrap_or_else(|e| e.into_inner());
        token.and_then(|t| users.get(t)).cloned().unwrap_or_else(UserInfo::admin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_tokens_name_their_user_and_others_are_the_admin() {
        let users = Users::default();
        let daemon = UserInfo::service_account("edgegrid", "edge-health").on_node("n1");
        users.add("edge-health-n1", daemon.clone());
        assert_eq!(users.authenticate(Some("edge-health-n1")), daemon);
        assert_eq!(users.authenticate(Some("grid-controller/0")), UserInfo::admin());
        assert_eq!(users.authenticate(None), UserInfo::admin());
    }

    #[test]
    fn empty_fields_are_absent_for_cel() {
        assert_eq!(UserInfo::new("alice").to_json(), json!({"username": "alice"}));
        assert_eq!(
            UserInfo::service_account("ns", "sa").on_node("n1").to_json(),
            json!({
                "username": "system:serviceaccount:ns:sa",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/node-name": ["n1"]},
            })
        );
    }
}
