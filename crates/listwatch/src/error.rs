//! The errors of the list/watch protocol, answered as Kubernetes `Status` objects with
//! the code and reason kube-apiserver uses. This module only describes failures; it
//! never decides how they reach a client (an HTTP response or a watch ERROR event is the
//! caller's choice).

use serde_json::{Value, json};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A malformed parameter (selector, resourceVersion, continue token): 400.
    #[error("{0}")]
    BadRequest(String),
    /// A well-formed but contradictory `ListOptions` (the streaming-list rules): 422.
    #[error("ListOptions \"\" is invalid: {message}")]
    InvalidOptions { field: String, message: String },
    /// The requested version is older than the history: 410, the client relists.
    #[error("too old resource version: {requested} ({oldest})")]
    Expired { requested: u64, oldest: u64 },
    /// A version this log never issued (state restored from elsewhere): the real server
    /// times out with this message, and client-go relists.
    #[error("Timeout: Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion { requested: u64, current: u64 },
    /// `Accept` names nothing this server can answer with: 406.
    #[error("only the following media types are accepted: application/json, application/vnd.kubernetes.protobuf")]
    NotAcceptable,
    /// An object that is not a JSON object with `metadata` cannot be stored: 500.
    #[error("Internal error occurred: {0}")]
    Internal(String),
}

impl Error {
    pub fn code(&self) -> u16 {
        match self {
            Self::BadRequest(_) => 400,
            Self::InvalidOptions { .. } => 422,
            Self::Expired { .. } => 410,
            Self::TooLargeResourceVersion { .. } => 504,
            Self::NotAcceptable => 406,
            Self::Internal(_) => 500,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => "BadRequest",
            Self::InvalidOptions { .. } => "Invalid",
            Self::Expired { .. } => "Expired",
            Self::TooLargeResourceVersion { .. } => "Timeout",
            Self::NotAcceptable => "NotAcceptable",
            Self::Internal(_) => "InternalError",
        }
    }

    /// The `Status` object, as in responses and in watch ERROR events.
    pub fn status(&self) -> Value {
        let details = match self {
            Self::InvalidOptions { field, message } => Some(json!({
                "name": "", "group": "meta.k8s.io", "kind": "ListOptions",
                "causes": [{"reason": "FieldValueInvalid", "message": message, "field": field}],
            })),
            _ => None,
        };
        status(self.code(), self.reason(), &self.to_string(), details)
    }
}

/// A failure `Status` object (`metav1.Status`), for this crate's errors and its users'.
pub fn status(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let Some(details) = details {
        status["details"] = details;
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_carry_the_real_servers_code_reason_and_message() {
        let expired = Error::Expired { requested: 3, oldest: 7 };
        assert_eq!(
            expired.status(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "too old resource version: 3 (7)", "reason": "Expired", "code": 410})
        );
        let invalid = Error::InvalidOptions { field: "resourceVersionMatch".into(), message: "m".into() };
        assert_eq!((invalid.code(), invalid.reason()), (422, "Invalid"));
        assert_eq!(invalid.status()["details"]["causes"][0]["field"], "resourceVersionMatch");
        assert_eq!(invalid.to_string(), "ListOptions \"\" is invalid: m");
    }
}
