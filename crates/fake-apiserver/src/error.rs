//! API errors, answered as `Status` objects with the reason and code the real server uses.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    #[error("{resource} \"{name}\" not found")]
    NotFound { resource: String, name: String, group: String, kind: String },
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists { resource: String, name: String, group: String, kind: String },
    #[error(
        "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
    )]
    Conflict { resource: String, name: String, group: String, kind: String },
    /// Server-side apply met fields other managers own: one cause (message, field) each.
    #[error("{message}")]
    ApplyConflict { message: String, causes: Vec<(String, String)> },
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": {message}")]
    PreconditionFailed { resource: String, name: String, group: String, kind: String, message: String },
    /// 422 with one cause per field, in the real server's words.
    #[error("{}", invalid_message(kind, group, name, causes))]
    Invalid { kind: String, name: String, group: String, causes: Vec<FieldCause> },
    #[error("{0}")]
    BadRequest(String),
    #[error("the server could not find the requested resource")]
    NoSuchResource,
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("too old resource version: {requested} ({oldest})")]
    Expired { requested: u64, oldest: u64 },
    #[error("the request body is larger than the {limit} byte limit")]
    TooLarge { limit: usize },
    #[error("Internal error occurred: {0}")]
    Internal(String),
    #[error("the server is currently unable to handle the request: {0}")]
    Unavailable(String),
    #[error("admission webhook \"{webhook}\" denied the request: {message}")]
    Denied { webhook: String, code: u16, message: String },
    /// A ValidatingAdmissionPolicy refused the request: worded as Forbidden
    /// (`nodes "n1" is forbidden: ValidatingAdmissionPolicy '...' denied request: ...`),
    /// with the validation's reason and its code (Invalid, 422, unless it names another).
    #[error("{resource} \"{name}\" is forbidden: {message}")]
    PolicyDenied { resource: String, name: String, group: String, reason: &'static str, code: u16, message: String },
    #[error("Too many requests: {0}")]
    TooManyRequests(String),
    #[error("Timeout: {0}")]
    Timeout(String),
    /// A list/watch failure, answered as `listwatch` words it.
    #[error(transparent)]
    ListWatch(#[from] listwatch::Error),
}

impl ApiError {
    pub fn code(&self) -> u16 {
        match self {
            Self::NotFound { .. } | Self::NoSuchResource => 404,
            Self::AlreadyExists { .. }
            | Self::Conflict { .. }
            | Self::ApplyConflict { .. }
            | Self::PreconditionFailed { .. } => 409,
            Self::Invalid { .. } => 422,
            Self::BadRequest(_) => 400,
            Self::MethodNotAllowed => 405,
            Self::UnsupportedMediaType(_) => 415,
            Self::Expired { .. } => 410,
            Self::TooLarge { .. } => 413,
            Self::Internal(_) => 500,
            Self::Unavailable(_) => 503,
            Self::TooManyRequests(_) => 429,
            Self::Denied { code, .. } | Self::PolicyDenied { code, .. } => *code,
            Self::Timeout(_) => 504,
            Self::ListWatch(e) => e.code(),
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotFound { .. } | Self::NoSuchResource => "NotFound",
            Self::AlreadyExists { .. } => "AlreadyExists",
            Self::Conflict { .. } | Self::ApplyConflict { .. } | Self::PreconditionFailed { .. } => "Conflict",
            Self::Invalid { .. } => "Invalid",
            Self::BadRequest(_) => "BadRequest",
            Self::MethodNotAllowed => "MethodNotAllowed",
            Self::UnsupportedMediaType(_) => "UnsupportedMediaType",
            Self::Expired { .. } => "Expired",
            Self::TooLarge { .. } => "RequestEntityTooLarge",
            Self::Internal(_) => "InternalError",
            Self::Unavailable(_) => "ServiceUnavailable",
            Self::TooManyRequests(_) => "TooManyRequests",
            Self::Denied { code: 403, .. } => "Forbidden",
            Self::Denied { code: 422, .. } => "Invalid",
            Self::Denied { code: 409, .. } => "Conflict",
            Self::Denied { .. } => "BadRequest",
            Self::PolicyDenied { reason, .. } => reason,
            Self::Timeout(_) => "Timeout",
            Self::ListWatch(e) => e.reason(),
        }
    }

    /// The `Status` object, as in responses and in watch ERROR events.
    pub fn status(&self) -> Value {
        let details = match self {
            Self::ListWatch(e) => return e.status(),
            Self::NotFound { resource, name, group, .. }
            | Self::AlreadyExists { resource, name, group, .. }
            | Self::Conflict { resource, name, group, .. }
            | Self::PreconditionFailed { resource, name, group, .. } => {
                Some(json!({"name": name, "group": group, "kind": resource_plural(resource)}))
            }
            Self::PolicyDenied { resource, name, group, message, .. } => Some(json!({
                "name": name, "group": group, "kind": resource_plural(resource),
                "causes": [{"message": message}],
            })),
            Self::ApplyConflict { causes, .. } => Some(json!({
                "causes": causes.iter().map(|(message, field)| json!({"type": "FieldManagerConflict", "message": message, "field": field}))
                    .collect::<Vec<_>>(),
            })),
            Self::Invalid { kind, name, group, causes } => Some(json!({
                "name": name, "group": group, "kind": kind,
                "causes": causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect::<Vec<_>>(),
            })),
            _ => None,
        };
        listwatch::status(self.code(), self.reason(), &self.to_string(), details)
    }
}

/// One field's problem in an `Invalid` error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldCause {
    /// FieldValueInvalid, FieldValueRequired, FieldValueNotSupported
    pub reason: &'static str,
    /// `spec.template.replicas`; empty for the object as a whole.
    pub field: String,
    /// Without the field: `Required value`.
    pub message: String,
}

impl FieldCause {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { reason: "FieldValueInvalid", field: field.into(), message: message.into() }
    }

    fn shown(&self) -> String {
        if self.field.is_empty() { self.message.clone() } else { format!("{}: {}", self.field, self.message) }
    }
}

/// `Deployment.apps "x" is invalid: spec.replicas: ...` (several causes in brackets).
fn invalid_message(kind: &str, group: &str, name: &str, causes: &[FieldCause]) -> String {
    let kind = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
    let causes = match causes {
        [one] => one.shown(),
        many => format!("[{}]", many.iter().map(FieldCause::shown).collect::<Vec<_>>().join(", ")),
    };
    format!("{kind} \"{name}\" is invalid: {causes}")
}

/// `deployments.apps` -> `deployments`: details.kind carries the bare plural.
fn resource_plural(resource: &str) -> &str {
    resource.split('.').next().unwrap_or(resource)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (code, [(axum::http::header::CONTENT_TYPE, "application/json")], self.status().to_string()).into_response()
    }
}
