//! Byte-exact cases, written from Kubernetes' `generated.proto` field numbers and Go's
//! marshalling rules (fields in number order, sorted map entries, ten-byte negative
//! varints, IntOrString and Time writing all their fields).

use serde_json::json;

use super::*;

fn bytes(message: &'static Message, object: Value) -> Vec<u8> {
    let encoded = encode(message, &object);
    assert_eq!(encoded.dropped, Vec::<String>::new(), "nothing dropped from {object}");
    encoded.bytes
}

#[test]
fn a_service_with_a_name_and_one_port() {
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"ports": [{"port": 80}]},
    });
    assert_eq!(
        bytes(&schema::SERVICE, service),
        [
            0x0a, 0x05, // metadata = 1
            0x0a, 0x03, b'w', b'e', b'b', // name = 1
            0x12, 0x04, // spec = 2
            0x0a, 0x02, // ports = 1
            0x18, 0x50, // port = 3: 80
        ]
    );
}

#[test]
fn fields_are_written_in_field_number_order_not_json_order() {
    // addressType is field 4, after endpoints (2) and ports (3)
    let slice = json!({
        "addressType": "IPv4",
        "ports": [{"port": 8080}],
        "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": false}}],
        "metadata": {},
    });
    assert_eq!(
        bytes(&schema::ENDPOINT_SLICE, slice),
        [
            0x0a, 0x00, // metadata = 1, present and empty
            0x12, 0x0e, // endpoints = 2
            0x0a, 0x08, b'1', b'0', b'.', b'0', b'.', b'0', b'.', b'1', // addresses = 1
            0x12, 0x02, 0x08, 0x00, // conditions = 2 { ready = 1: false }, written though false
            0x1a, 0x03, 0x18, 0x90, 0x3f, // ports = 3 { port = 3: 8080 }
            0x22, 0x04, b'I', b'P', b'v', b'4', // addressType = 4
        ]
    );
}

#[test]
fn int_or_string_writes_all_three_fields_as_go_does() {
    assert_eq!(
        bytes(&schema::SERVICE_PORT, json!({"targetPort": 8080})),
        [0x22, 0x07, 0x08, 0x00, 0x10, 0x90, 0x3f, 0x1a, 0x00]
    );
    assert_eq!(
        bytes(&schema::SERVICE_PORT, json!({"targetPort": "http"})),
        [0x22, 0x0a, 0x08, 0x01, 0x10, 0x00, 0x1a, 0x04, b'h', b't', b't', b'p']
    );
}

#[test]
fn time_is_whole_unix_seconds_with_zero_nanos() {
    let at = [0x42, 0x08, 0x08, 0xa5, 0xfa, 0xcd, 0xac, 0x06, 0x10, 0x00];
    // 2024-01-02T03:04:05Z is 1704164645
    assert_eq!(bytes(&schema::OBJECT_META, json!({"creationTimestamp": "2024-01-02T03:04:05Z"})), at);
    // another offset, and a fraction metav1.Time does not keep
    assert_eq!(bytes(&schema::OBJECT_META, json!({"creationTimestamp": "2024-01-02T04:04:05.75+01:00"})), at);
    // before 1970 seconds round down, as Go's Unix() does
    assert_eq!(
        bytes(&schema::OBJECT_META, json!({"creationTimestamp": "1969-12-31T23:59:59.5Z"})),
        [0x42, 0x0d, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x10, 0x00]
    );
}

#[test]
fn map_entries_are_sorted_by_key() {
    let metadata = json!({"labels": {"b": "2", "a": "1", "": ""}});
    assert_eq!(
        bytes(&schema::OBJECT_META, metadata),
        [
            0x5a, 0x04, 0x0a, 0x00, 0x12, 0x00, // "" = "": both written
            0x5a, 0x06, 0x0a, 0x01, b'a', 0x12, 0x01, b'1', //
            0x5a, 0x06, 0x0a, 0x01, b'b', 0x12, 0x01, b'2',
        ]
    );
}

#[test]
fn quantities_are_messages_in_map_entries() {
    assert_eq!(
        bytes(&schema::NODE_STATUS, json!({"capacity": {"cpu": "4"}})),
        [0x0a, 0x0a, 0x0a, 0x03, b'c', b'p', b'u', 0x12, 0x03, 0x0a, 0x01, b'4']
    );
}

#[test]
fn fields_v1_is_its_compact_json_text() {
    let entry = json!({"fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:name": {}}}});
    let raw = br#"{"f:metadata":{"f:name":{}}}"#;
    let mut expected = vec![0x32, 0x08];
    expected.extend(b"FieldsV1");
    expected.extend([0x3a, raw.len() as u8 + 2, 0x0a, raw.len() as u8]);
    expected.extend(raw);
    assert_eq!(bytes(&schema::MANAGED_FIELDS_ENTRY, entry), expected);
}

#[test]
fn negative_integers_are_sign_extended_to_ten_bytes() {
    // deletionGracePeriodSeconds (int64) = 10
    assert_eq!(
        bytes(&schema::OBJECT_META, json!({"deletionGracePeriodSeconds": -86400})),
        [0x50, 0x80, 0xdd, 0xfa, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
    );
    // port (int32) = 3
    assert_eq!(
        bytes(&schema::SERVICE_PORT, json!({"port": -1})),
        [0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
    );
    assert_eq!(bytes(&schema::SERVICE_PORT, json!({"port": i32::MAX})), [0x18, 0xff, 0xff, 0xff, 0xff, 0x07]);
}

#[test]
fn absent_null_and_empty_write_nothing_but_zero_values_are_written() {
    let spec = json!({
        "ports": [], "selector": {}, "clusterIP": null,
        "type": "", "publishNotReadyAddresses": false, "healthCheckNodePort": 0,
    });
    assert_eq!(bytes(&schema::SERVICE_SPEC, spec), [0x22, 0x00, 0x60, 0x00, 0x68, 0x00]);
}

#[test]
fn unknown_members_and_wrong_types_are_dropped_with_their_paths() {
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "bogus": 1, "labels": {"ok": "1", "n": 2, "z": null}},
        "spec": {
            "ports": [{"port": "eighty", "foo": true}, null, {"port": 4_294_967_296_i64, "targetPort": 1.5}],
            "clusterIPs": "10.0.0.1",
        },
        "status": {"conditions": [{"lastTransitionTime": "yesterday"}]},
        "extra": {},
    });
    let encoded = encode(&schema::SERVICE, &service);
    assert_eq!(
        encoded.dropped,
        [
            "metadata.labels[n]",
            "metadata.labels[z]",
            "metadata.bogus",
            "spec.ports[0].port",
            "spec.ports[0].foo",
            "spec.ports[1]",
            "spec.ports[2].port",
            "spec.ports[2].targetPort",
            "spec.clusterIPs",
            "status.conditions[0].lastTransitionTime",
            "extra",
        ]
    );
    // what is kept is still written: the name, the good label, the emptied ports, the condition
    assert_eq!(
        encoded.bytes,
        [
            0x0a, 0x0e, 0x0a, 0x03, b'w', b'e', b'b', // metadata { name
            0x5a, 0x07, 0x0a, 0x02, b'o', b'k', 0x12, 0x01, b'1', // labels[ok] }
            0x12, 0x04, 0x0a, 0x00, 0x0a, 0x00, // spec { ports: {}, {} }
            0x1a, 0x02, 0x12, 0x00, // status { conditions: {} }
        ]
    );
}

#[test]
fn a_non_object_is_dropped_whole() {
    let encoded = encode(&schema::SERVICE, &json!([1]));
    assert!(encoded.bytes.is_empty());
    assert_eq!(encoded.dropped, ["."]);
}

#[test]
fn status_and_list_meta() {
    let Some(status) = message_for("v1", "Status") else { panic!("v1 Status has a message") };
    let status = bytes(
        status,
        json!({
            "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "reason": "Expired", "code": 410,
            "details": {"causes": [{"field": "f"}], "uid": "u"},
        }),
    );
    assert_eq!(
        status,
        [
            0x0a, 0x00, // metadata
            0x12, 0x07, b'F', b'a', b'i', b'l', b'u', b'r', b'e', // status
            0x22, 0x07, b'E', b'x', b'p', b'i', b'r', b'e', b'd', // reason = 4
            0x2a, 0x08, 0x22, 0x03, 0x1a, 0x01, b'f', 0x32, 0x01, b'u', // details { causes = 4, uid = 6 }
            0x30, 0x9a, 0x03, // code = 6: 410
        ]
    );
    assert_eq!(
        list_meta(&json!({"resourceVersion": "42", "continue": "c", "remainingItemCount": 3})),
        [0x12, 0x02, b'4', b'2', 0x1a, 0x01, b'c', 0x20, 0x03]
    );
}

#[test]
fn messages_for_the_served_kinds_only() {
    let name = |api_version, kind| message_for(api_version, kind).map(|message| message.name);
    assert_eq!(name("v1", "Service"), Some("core/v1 Service"));
    assert_eq!(name("v1", "Endpoints"), Some("core/v1 Endpoints"));
    assert_eq!(name("v1", "Node"), Some("core/v1 Node"));
    assert_eq!(name("discovery.k8s.io/v1", "EndpointSlice"), Some("discovery/v1 EndpointSlice"));
    assert_eq!(name("v1", "Status"), Some("meta/v1 Status"));
    assert_eq!(name("discovery.k8s.io/v1beta1", "EndpointSlice"), None);
    assert_eq!(name("v1", "ConfigMap"), None);
}
