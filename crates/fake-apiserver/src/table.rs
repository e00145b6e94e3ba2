//! Server-side printing: the `meta.k8s.io/v1` Table a real apiserver answers when a client
//! asks for `application/json;as=Table;v=v1;g=meta.k8s.io` (what `kubectl get` asks for),
//! so `kubectl get` shows the columns a real cluster shows: a CRD's
//! `additionalPrinterColumns` evaluated on each object, and for the built-in kinds users
//! look at here the default columns of the real server's printers (Node, Service,
//! Deployment, StatefulSet, DaemonSet, ReplicaSet, ControllerRevision, Pod, EndpointSlice,
//! Event, Lease). Other kinds get
//! Name and Age, as the real server gives kinds without printers.
//!
//! Ages are rendered as the real server renders them (`5m`, `3h12m`, `2d`), from the
//! moment the Table is built.

use serde_json::{Value, json};

use crate::resources::{PrinterColumn, ResourceType};

/// Whether an `Accept` header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept.split(',').any(|part| part.contains("as=Table") && part.contains("g=meta.k8s.io"))
}

/// The Table of `objects` (all of `rt`'s kind), with the list's `resourceVersion` and
/// `continue`; `now` in seconds since the epoch.
pub fn table(rt: &ResourceType, objects: &[Value], rv: u64, continue_token: Option<&str>, now: i64) -> Value {
    let columns = columns(rt);
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let cells: Vec<Value> = columns.iter().map(|c| c.cell(object, now)).collect();
            json!({"cells": cells, "object": partial_metadata(object)})
        })
        .collect();
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(token) = continue_token {
        metadata["continue"] = json!(token);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns.iter().map(Column::definition).collect::<Vec<_>>(),
        "rows": rows,
    })
}

/// A row's object, as the real server includes it by default (`includeObject=Metadata`).
fn partial_metadata(object: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object["metadata"]})
}

/// How a column's cell is computed.
enum Cell {
    Name,
    Age,
    /// A CRD column's JSONPath, rendered by the column's type.
    Path(String),
    Builtin(fn(&Value, i64) -> Value),
}

struct Column {
    name: String,
    kind: String,
    format: String,
    description: String,
    priority: i64,
    cell: Cell,
}

impl Column {
    fn new(name: &str, kind: &str, description: &str, cell: Cell) -> Self {
        let format = if matches!(cell, Cell::Name) { "name" } else { "" };
        Self {
            name: name.into(),
            kind: kind.into(),
            format: format.into(),
            description: description.into(),
            priority: 0,
            cell,
        }
    }

    fn wide(mut self) -> Self {
        self.priority = 1;
        self
    }

    fn definition(&self) -> Value {
        json!({"name": self.name, "type": self.kind, "format": self.format, "description": self.description,
            "priority": self.priority})
    }

    fn cell(&self, object: &Value, now: i64) -> Value {
        match &self.cell {
            Cell::Name => object["metadata"]["name"].clone(),
            Cell::Age => json!(age(&object["metadata"]["creationTimestamp"], now)),
            Cell::Builtin(compute) => compute(object, now),
            Cell::Path(path) => {
                let found = json_path(object, path);
                match (self.kind.as_str(), found.as_slice()) {
                    (_, []) => Value::Null,
                    ("date", [value, ..]) => json!(age(value, now)),
                    (_, [value]) => (*value).clone(),
                    (_, values) => json!(values.iter().map(|v| text(v)).collect::<Vec<_>>().join(",")),
                }
            }
        }
    }
}

fn name() -> Column {
    Column::new("Name", "string", "Name must be unique within a namespace.", Cell::Name)
}

fn age_column() -> Column {
    Column::new("Age", "string", "CreationTimestamp is the time the object was created.", Cell::Age)
}

fn columns(rt: &ResourceType) -> Vec<Column> {
    if !rt.printer_columns.is_empty() {
        return std::iter::once(name()).chain(rt.printer_columns.iter().map(crd_column)).collect();
    }
    let builtin =
        |name: &str, kind: &str, compute: fn(&Value, i64) -> Value| Column::new(name, kind, "", Cell::Builtin(compute));
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Node") => vec![
            name(),
            builtin("Status", "string", node_status),
            builtin("Roles", "string", node_roles),
            age_column(),
            builtin("Version", "string", |o, _| text_or_none(&o["status"]["nodeInfo"]["kubeletVersion"])),
            builtin("Internal-IP", "string", |o, _| node_address(o, "InternalIP")).wide(),
        ],
        ("", "Service") => vec![
            name(),
            builtin("Type", "string", |o, _| json!(o["spec"]["type"].as_str().unwrap_or("ClusterIP"))),
            builtin("Cluster-IP", "string", |o, _| text_or_none(&o["spec"]["clusterIP"])),
            builtin("External-IP", "string", service_external_ips),
            builtin("Port(s)", "string", service_ports),
            age_column(),
            builtin("Selector", "string", |o, _| selector(&o["spec"]["selector"])).wide(),
        ],
        ("apps", "Deployment") => vec![
            name(),
            builtin("Ready", "string", |o, _| ready_of(o, "readyReplicas", &o["spec"]["replicas"])),
            builtin("Up-to-date", "integer", |o, _| count(&o["status"]["updatedReplicas"])),
            builtin("Available", "integer", |o, _| count(&o["status"]["availableReplicas"])),
            age_column(),
        ],
        ("apps", "StatefulSet") => vec![
            name(),
            builtin("Ready", "string", |o, _| ready_of(o, "readyReplicas", &o["spec"]["replicas"])),
            age_column(),
        ],
        ("apps", "ReplicaSet") => vec![
            name(),
            builtin("Desired", "integer", |o, _| json!(o["spec"]["replicas"].as_i64().unwrap_or(1))),
            builtin("Current", "integer", |o, _| count(&o["status"]["replicas"])),
            builtin("Ready", "integer", |o, _| count(&o["status"]["readyReplicas"])),
            age_column(),
        ],
        ("apps", "ControllerRevision") => vec![
            name(),
            builtin("Controller", "string", controller_of),
            builtin("Revision", "integer", |o, _| count(&o["revision"])),
            age_column(),
        ],
        ("apps", "DaemonSet") => vec![
            name(),
            builtin("Desired", "integer", |o, _| count(&o["status"]["desiredNumberScheduled"])),
            builtin("Current", "integer", |o, _| count(&o["status"]["currentNumberScheduled"])),
            builtin("Ready", "integer", |o, _| count(&o["status"]["numberReady"])),
            builtin("Up-to-date", "integer", |o, _| count(&o["status"]["updatedNumberScheduled"])),
            builtin("Available", "integer", |o, _| count(&o["status"]["numberAvailable"])),
            builtin("Node Selector", "string", |o, _| selector(&o["spec"]["template"]["spec"]["nodeSelector"])),
            age_column(),
        ],
        ("", "Pod") => vec![
            name(),
            builtin("Ready", "string", pod_ready),
            builtin("Status", "string", |o, _| json!(o["status"]["phase"].as_str().unwrap_or("Pending"))),
            builtin("Restarts", "string", pod_restarts),
            age_column(),
            builtin("IP", "string", |o, _| text_or_none(&o["status"]["podIP"])).wide(),
            builtin("Node", "string", |o, _| text_or_none(&o["spec"]["nodeName"])).wide(),
        ],
        ("discovery.k8s.io", "EndpointSlice") => vec![
            name(),
            builtin("AddressType", "string", |o, _| text_or_none(&o["addressType"])),
            builtin("Ports", "string", slice_ports),
            builtin("Endpoints", "string", slice_endpoints),
            age_column(),
        ],
        ("", "Event") => vec![
            builtin("Last Seen", "string", |o, now| json!(age(event_time(o), now))),
            builtin("Type", "string", |o, _| text_or_none(&o["type"])),
            builtin("Reason", "string", |o, _| text_or_none(&o["reason"])),
            builtin("Object", "string", |o, _| involved(&o["involvedObject"])),
            builtin("Message", "string", |o, _| text_or_none(&o["message"])),
        ],
        ("events.k8s.io", "Event") => vec![
            builtin("Last Seen", "string", |o, now| json!(age(event_time(o), now))),
            builtin("Type", "string", |o, _| text_or_none(&o["type"])),
            builtin("Reason", "string", |o, _| text_or_none(&o["reason"])),
            builtin("Object", "string", |o, _| involved(&o["regarding"])),
            builtin("Message", "string", |o, _| text_or_none(&o["note"])),
        ],
        ("coordination.k8s.io", "Lease") => vec![
            name(),
            builtin("Holder", "string", |o, _| json!(o["spec"]["holderIdentity"].as_str().unwrap_or(""))),
            age_column(),
        ],
        _ => vec![name(), age_column()],
    }
}

fn crd_column(column: &PrinterColumn) -> Column {
    let mut out = Column::new(&column.name, &column.kind, &column.description, Cell::Path(column.json_path.clone()));
    out.format = column.format.clone();
    out.priority = column.priority;
    out
}

/// The values `path` (the JSONPath subset printer columns use: `.a.b`, `.a[0]`, `.a[*]`,
/// `.a[?(@.k=="v")]`) selects in `object`.
pub fn json_path<'a>(object: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut current = vec![object];
    let mut rest = path.trim().trim_start_matches('{').trim_end_matches('}').trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let field = &after[..end];
            current = current.into_iter().filter_map(|v| v.get(field)).collect();
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(end) = after.find(']') else { return Vec::new() };
            let selector = &after[..end];
            current = current.into_iter().flat_map(|v| select(v, selector)).collect();
            rest = &after[end + 1..];
        } else {
            return Vec::new();
        }
    }
    current.into_iter().filter(|v| !v.is_null()).collect()
}

fn select<'a>(value: &'a Value, selector: &str) -> Vec<&'a Value> {
    let items = value.as_array().map(Vec::as_slice).unwrap_or_default();
    if selector == "*" {
        return items.iter().collect();
    }
    if let Ok(index) = selector.parse::<usize>() {
        return items.get(index).into_iter().collect();
    }
    // ?(@.field=="value")
    let filter = selector.trim_start_matches("?(").trim_end_matches(')');
    let Some((field, wanted)) = filter.split_once("==") else { return Vec::new() };
    let field = field.trim().trim_start_matches("@.");
    let wanted = wanted.trim().trim_matches(|c| c == '"' || c == '\'');
    items.iter().filter(|item| item.get(field).map(text).as_deref() == Some(wanted)).collect()
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn text_or_none(value: &Value) -> Value {
    match value.as_str() {
        Some(s) if !s.is_empty() => json!(s),
        _ => json!("<none>"),
    }
}

fn count(value: &Value) -> Value {
    json!(value.as_i64().unwrap_or(0))
}

fn ready_of(object: &Value, ready: &str, desired: &Value) -> Value {
    json!(format!("{}/{}", object["status"][ready].as_i64().unwrap_or(0), desired.as_i64().unwrap_or(1)))
}

fn selector(map: &Value) -> Value {
    match map.as_object() {
        Some(map) if !map.is_empty() => {
            json!(map.iter().map(|(k, v)| format!("{k}={}", text(v))).collect::<Vec<_>>().join(","))
        }
        _ => json!("<none>"),
    }
}

/// `<kind>.<group>/<name>` of the controller owner, `<none>` without one.
fn controller_of(object: &Value, _: i64) -> Value {
    let owners = object["metadata"]["ownerReferences"].as_array().map(Vec::as_slice).unwrap_or_default();
    let Some(owner) = owners.iter().find(|o| o["controller"].as_bool() == Some(true)) else {
        return json!("<none>");
    };
    let kind = owner["kind"].as_str().unwrap_or_default().to_lowercase();
    let group = owner["apiVersion"].as_str().and_then(|v| v.split_once('/')).map_or("", |(group, _)| group);
    let kind = if group.is_empty() { kind } else { format!("{kind}.{group}") };
    json!(format!("{kind}/{}", owner["name"].as_str().unwrap_or_default()))
}

fn node_status(node: &Value, _: i64) -> Value {
    let conditions = node["status"]["conditions"].as_array().map(Vec::as_slice).unwrap_or_default();
    let ready = conditions.iter().find(|c| c["type"] == "Ready").and_then(|c| c["status"].as_str());
    let mut status = match ready {
        Some("True") => "Ready".to_string(),
        Some("False") => "NotReady".to_string(),
        _ => "Unknown".to_string(),
    };
    if node["spec"]["unschedulable"].as_bool() == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    json!(status)
}

fn node_roles(node: &Value, _: i64) -> Value {
    let labels = node["metadata"]["labels"].as_object();
    let mut roles: Vec<&str> = labels
        .into_iter()
        .flatten()
        .filter_map(|(key, _)| key.strip_prefix("node-role.kubernetes.io/"))
        .filter(|role| !role.is_empty())
        .collect();
    if let Some(role) = labels.and_then(|l| l.get("kubernetes.io/role")).and_then(Value::as_str) {
        roles.push(role);
    }
    roles.sort_unstable();
    roles.dedup();
    if roles.is_empty() { json!("<none>") } else { json!(roles.join(",")) }
}

fn node_address(node: &Value, kind: &str) -> Value {
    let addresses = node["status"]["addresses"].as_array().map(Vec::as_slice).unwrap_or_default();
    addresses.iter().find(|a| a["type"] == kind).map_or(json!("<none>"), |a| text_or_none(&a["address"]))
}

fn service_external_ips(service: &Value, _: i64) -> Value {
    let mut ips: Vec<String> =
        service["spec"]["externalIPs"].as_array().into_iter().flatten().map(text).collect::<Vec<_>>();
    let ingress = service["status"]["loadBalancer"]["ingress"].as_array();
    ips.extend(
        ingress.into_iter().flatten().filter_map(|i| i["ip"].as_str().or(i["hostname"].as_str())).map(String::from),
    );
    match (ips.is_empty(), service["spec"]["type"].as_str()) {
        (false, _) => json!(ips.join(",")),
        (true, Some("LoadBalancer")) => json!("<pending>"),
        (true, _) => json!("<none>"),
    }
}

fn service_ports(service: &Value, _: i64) -> Value {
    let ports = service["spec"]["ports"].as_array().map(Vec::as_slice).unwrap_or_default();
    if ports.is_empty() {
        return json!("<none>");
    }
    let shown: Vec<String> = ports
        .iter()
        .map(|p| {
            let protocol = p["protocol"].as_str().unwrap_or("TCP");
            match p["nodePort"].as_i64() {
                Some(node_port) => format!("{}:{node_port}/{protocol}", p["port"]),
                None => format!("{}/{protocol}", p["port"]),
            }
        })
        .collect();
    json!(shown.join(","))
}

fn pod_ready(pod: &Value, _: i64) -> Value {
    let total = pod["spec"]["containers"].as_array().map_or(0, Vec::len);
    let statuses = pod["status"]["containerStatuses"].as_array().map(Vec::as_slice).unwrap_or_default();
    let ready = statuses.iter().filter(|s| s["ready"].as_bool() == Some(true)).count();
    json!(format!("{ready}/{total}"))
}

fn pod_restarts(pod: &Value, _: i64) -> Value {
    let statuses = pod["status"]["containerStatuses"].as_array().map(Vec::as_slice).unwrap_or_default();
    json!(statuses.iter().map(|s| s["restartCount"].as_i64().unwrap_or(0)).sum::<i64>().to_string())
}

fn slice_ports(slice: &Value, _: i64) -> Value {
    let ports = slice["ports"].as_array().map(Vec::as_slice).unwrap_or_default();
    if ports.is_empty() {
        return json!("<unset>");
    }
    json!(
        ports
            .iter()
            .map(|p| p["port"].as_i64().map_or("<unset>".to_string(), |n| n.to_string()))
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// The first three addresses and "+ N more...", as the real printer shows them.
fn slice_endpoints(slice: &Value, _: i64) -> Value {
    let addresses: Vec<String> = slice["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["addresses"].as_array().into_iter().flatten().map(text))
        .collect();
    if addresses.is_empty() {
        return json!("<unset>");
    }
    let shown = addresses.iter().take(3).cloned().collect::<Vec<_>>().join(",");
    if addresses.len() > 3 { json!(format!("{shown} + {} more...", addresses.len() - 3)) } else { json!(shown) }
}

fn event_time(event: &Value) -> &Value {
    ["lastTimestamp", "eventTime", "deprecatedLastTimestamp", "firstTimestamp"]
        .iter()
        .map(|field| &event[*field])
        .find(|v| v.is_string())
        .unwrap_or(&event["metadata"]["creationTimestamp"])
}

fn involved(reference: &Value) -> Value {
    let kind = reference["kind"].as_str().unwrap_or_default().to_lowercase();
    json!(format!("{kind}/{}", reference["name"].as_str().unwrap_or_default()))
}

/// A timestamp's age as the real server prints it; `<unknown>` without one.
fn age(timestamp: &Value, now: i64) -> String {
    let Some(then) = timestamp.as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    human_duration(now - then.as_second())
}

/// Kubernetes' short human duration (`apimachinery`'s `HumanDuration`).
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{days}d", hours / 24 / 365) };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kubectl_prints_them() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 120, "3h2m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (48 * 3600, "2d"),
            (50 * 3600, "2d2h"),
            (8 * 86400, "8d"),
            (400 * 86400, "400d"),
            (730 * 86400, "2y"),
            (735 * 86400, "2y5d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (seconds, want) in cases {
            assert_eq!(human_duration(seconds), want, "{seconds} s");
        }
    }

    fn rt(group: &str, kind: &str) -> ResourceType {
        ResourceType::new(group, "v1", "things", kind, true, false)
    }

    /// Header names and the one row's cells.
    fn printed(rt: &ResourceType, object: Value, now: i64) -> (Vec<String>, Vec<Value>) {
        let table = table(rt, &[object], 7, None, now);
        let names = table["columnDefinitions"].as_array().unwrap().iter().map(|c| text(&c["name"])).collect();
        (names, table["rows"][0]["cells"].as_array().unwrap().clone())
    }

    const T0: &str = "2026-01-01T00:00:00Z";
    const NOW: i64 = 1_767_225_600 + 3 * 3600 + 125; // T0 + 3h2m5s

    #[test]
    fn builtin_kinds_print_the_real_servers_columns() {
        let node = json!({"metadata": {"name": "edge-1", "creationTimestamp": T0,
                "labels": {"node-role.kubernetes.io/edge": "", "node-role.kubernetes.io/worker": ""}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}], "nodeInfo": {"kubeletVersion": "v1.33.1"},
                "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}]}});
        assert_eq!(
            printed(&rt("", "Node"), node, NOW),
            (
                ["Name", "Status", "Roles", "Age", "Version", "Internal-IP"].map(String::from).to_vec(),
                vec![
                    json!("edge-1"),
                    json!("Unknown,SchedulingDisabled"),
                    json!("edge,worker"),
                    json!("3h2m"),
                    json!("v1.33.1"),
                    json!("10.0.0.7")
                ]
            )
        );
        let service = json!({"metadata": {"name": "web", "creationTimestamp": T0},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.9", "selector": {"app": "web"},
                "ports": [{"port": 80, "nodePort": 30080}, {"port": 53, "protocol": "UDP"}]}});
        assert_eq!(
            printed(&rt("", "Service"), service, NOW).1,
            [
                json!("web"),
                json!("NodePort"),
                json!("10.96.0.9"),
                json!("<none>"),
                json!("80:30080/TCP,53/UDP"),
                json!("3h2m"),
                json!("app=web")
            ]
        );
        let slice = json!({"metadata": {"name": "web-abc"}, "addressType": "IPv4", "ports": [{"port": 8080}],
            "endpoints": (1..=5).map(|i| json!({"addresses": [format!("10.1.0.{i}")]})).collect::<Vec<_>>()});
        assert_eq!(
            printed(&rt("discovery.k8s.io", "EndpointSlice"), slice, NOW).1,
            [
                json!("web-abc"),
                json!("IPv4"),
                json!("8080"),
                json!("10.1.0.1,10.1.0.2,10.1.0.3 + 2 more..."),
                json!("<unknown>")
            ]
        );
        let pod = json!({"metadata": {"name": "p", "creationTimestamp": T0},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "edge-1"},
            "status": {"phase": "Running", "podIP": "10.1.0.4",
                "containerStatuses": [{"ready": true, "restartCount": 2}, {"ready": false, "restartCount": 1}]}});
        assert_eq!(
            printed(&rt("", "Pod"), pod, NOW).1,
            [json!("p"), json!("1/2"), json!("Running"), json!("3"), json!("3h2m"), json!("10.1.0.4"), json!("edge-1")]
        );
        let core_event = json!({"metadata": {"name": "e"}, "lastTimestamp": T0, "type": "Warning", "reason": "Drift",
            "involvedObject": {"kind": "DeploymentGrid", "name": "echo"}, "message": "fixed"});
        let (names, cells) = printed(&rt("", "Event"), core_event, NOW);
        assert_eq!(names, ["Last Seen", "Type", "Reason", "Object", "Message"]);
        assert_eq!(
            cells,
            [json!("3h2m"), json!("Warning"), json!("Drift"), json!("deploymentgrid/echo"), json!("fixed")]
        );
        let new_event = json!({"metadata": {"name": "e"}, "eventTime": T0, "type": "Normal", "reason": "Synced",
            "regarding": {"kind": "Node", "name": "edge-1"}, "note": "ok"});
        assert_eq!(
            printed(&rt("events.k8s.io", "Event"), new_event, NOW).1,
            [json!("3h2m"), json!("Normal"), json!("Synced"), json!("node/edge-1"), json!("ok")]
        );
        let lease = json!({"metadata": {"name": "l", "creationTimestamp": T0}, "spec": {"holderIdentity": "a_1"}});
        assert_eq!(
            printed(&rt("coordination.k8s.io", "Lease"), lease, NOW).1,
            [json!("l"), json!("a_1"), json!("3h2m")]
        );
        let other = json!({"metadata": {"name": "cm", "creationTimestamp": T0}});
        assert_eq!(
            printed(&rt("", "ConfigMap"), other, NOW),
            (vec!["Name".into(), "Age".into()], vec![json!("cm"), json!("3h2m")])
        );
    }

    #[test]
    fn replica_sets_and_controller_revisions_print_their_controllers_columns() {
        let rs = json!({"metadata": {"name": "echo-6b7f9", "creationTimestamp": T0},
            "spec": {"replicas": 2}, "status": {"replicas": 2, "readyReplicas": 1}});
        let (names, cells) = printed(&rt("apps", "ReplicaSet"), rs, NOW);
        assert_eq!(names, ["Name", "Desired", "Current", "Ready", "Age"]);
        assert_eq!(cells, [json!("echo-6b7f9"), json!(2), json!(2), json!(1), json!("3h2m")]);
        let revision = json!({"metadata": {"name": "cache-5d8c", "creationTimestamp": T0, "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "cache", "uid": "u", "controller": true}]},
            "revision": 1});
        let (names, cells) = printed(&rt("apps", "ControllerRevision"), revision, NOW);
        assert_eq!(names, ["Name", "Controller", "Revision", "Age"]);
        assert_eq!(cells, [json!("cache-5d8c"), json!("statefulset.apps/cache"), json!(1), json!("3h2m")]);
        let orphan = json!({"metadata": {"name": "x"}, "revision": 3});
        assert_eq!(printed(&rt("apps", "ControllerRevision"), orphan, NOW).1[1], json!("<none>"));
    }

    #[test]
    fn crd_columns_follow_their_paths_and_types() {
        let mut grid = rt("superedge.io", "DeploymentGrid");
        let column = |name: &str, kind: &str, path: &str, priority: i64| PrinterColumn {
            name: name.into(),
            kind: kind.into(),
            format: String::new(),
            description: String::new(),
            priority,
            json_path: path.into(),
        };
        grid.printer_columns = vec![
            column("Key", "string", ".spec.gridUniqKey", 0),
            column("Units", "integer", ".status.units", 0),
            column("Workloads", "string", ".status.workloads", 1),
            column("Age", "date", ".metadata.creationTimestamp", 0),
        ];
        let object = json!({"metadata": {"name": "echo", "creationTimestamp": T0}, "spec": {"gridUniqKey": "zone1"},
            "status": {"units": 2}});
        let table = table(&grid, &[object], 9, Some("next"), NOW);
        assert_eq!(table["metadata"], json!({"resourceVersion": "9", "continue": "next"}));
        assert_eq!(table["columnDefinitions"][3]["priority"], 1);
        assert_eq!(table["columnDefinitions"][0]["format"], "name");
        assert_eq!(table["rows"][0]["cells"], json!(["echo", "zone1", 2, null, "3h2m"]));
        assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(table["rows"][0]["object"]["metadata"]["name"], "echo");
    }

    #[test]
    fn only_a_meta_k8s_io_table_is_a_table() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
        assert!(!wants_table("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"));
    }

    #[test]
    fn json_paths_select_as_printer_columns_use_them() {
        let object = json!({"status": {"units": 3, "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "Synced", "status": "False"}]},
            "spec": {"list": ["a", "b"]}});
        assert_eq!(json_path(&object, ".status.units"), [&json!(3)]);
        assert_eq!(json_path(&object, ".status.conditions[?(@.type==\"Synced\")].status"), [&json!("False")]);
        assert_eq!(json_path(&object, ".spec.list[1]"), [&json!("b")]);
        assert_eq!(json_path(&object, ".spec.list[*]"), [&json!("a"), &json!("b")]);
        assert!(json_path(&object, ".status.missing").is_empty());
        assert!(json_path(&object, ".spec.list[7]").is_empty());
    }
}
