//! The request admission decides on, on its own below admission, the admission policies
//! and the rule matching they share: all three read it, so none imports another for it.

use serde_json::Value;

use crate::resources::ResourceType;
use crate::users::UserInfo;

/// What is being admitted.
pub struct Request<'a> {
    pub rt: &'a ResourceType,
    pub operation: Operation,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The subresource written (`status`, or `token` for a TokenRequest), if any.
    pub subresource: Option<&'a str>,
    pub object: Value,
    pub old: Option<&'a Value>,
    /// Who makes the request.
    pub user: &'a UserInfo,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    /// `object` is null and `old` the object deleted (validating policies only: no
    /// configuration of this repository's webhooks asks for DELETE).
    Delete,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
        }
    }
}
