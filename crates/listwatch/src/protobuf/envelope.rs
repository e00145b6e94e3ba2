//! The frames around protobuf messages, byte for byte as kube-apiserver writes them
//! (apimachinery `runtime/serializer/protobuf`, `runtime/types.proto`, `apis/meta/v1/watch.go`):
//!
//! - an object or list: `k8s\0`, then `runtime.Unknown { typeMeta = 1 { apiVersion = 1,
//!   kind = 2 }, raw = 2, contentEncoding = 3, contentType = 4 }`, `raw` holding the message;
//!   Go writes the two empty strings too, so they are written here;
//! - a list's `raw`: `metadata = 1` (ListMeta) then each item as `items = 2`;
//! - a watch event: a 4-byte big-endian length, then `WatchEvent { type = 1, object = 2
//!   RawExtension { raw = 1 } }` with no `k8s\0` of its own, `raw` being the object's whole
//!   envelope.

use bytes::{BufMut, Bytes, BytesMut};

use super::wire::{bytes_field_len, put_bytes_field, put_bytes_head};

/// The first bytes of every protobuf object or list.
pub(crate) const MAGIC: &[u8; 4] = b"k8s\0";

/// `contentEncoding = ""`, `contentType = ""`: what Go writes after `raw`.
const UNKNOWN_TAIL: [u8; 4] = [0x1a, 0x00, 0x22, 0x00];

/// `TypeMeta { apiVersion, kind }`.
fn type_meta(api_version: &str, kind: &str) -> BytesMut {
    let mut type_meta = BytesMut::with_capacity(api_version.len() + kind.len() + 4);
    put_bytes_field(&mut type_meta, 1, api_version.as_bytes());
    put_bytes_field(&mut type_meta, 2, kind.as_bytes());
    type_meta
}

/// Everything of an envelope before `raw`'s `raw_len` bytes; [`tail`] follows them.
pub(crate) fn head(api_version: &str, kind: &str, raw_len: usize) -> BytesMut {
    let type_meta = type_meta(api_version, kind);
    let mut head = BytesMut::with_capacity(MAGIC.len() + type_meta.len() + 16);
    head.put_slice(MAGIC);
    put_bytes_field(&mut head, 1, &type_meta);
    put_bytes_head(&mut head, 2, raw_len);
    head
}

/// What follows `raw` in an envelope.
pub(crate) fn tail() -> &'static [u8] {
    &UNKNOWN_TAIL
}

/// A whole envelope around `raw`.
pub(crate) fn object(api_version: &str, kind: &str, raw: &[u8]) -> Bytes {
    object_and_raw(api_version, kind, raw).0
}

/// A whole envelope around `raw`, and where `raw` is in it: the envelope is what a GET
/// and each watch event carry, the raw message what a list holds, so one buffer serves
/// both (`Bytes::slice` shares it).
pub(crate) fn object_and_raw(api_version: &str, kind: &str, raw: &[u8]) -> (Bytes, std::ops::Range<usize>) {
    let mut out = head(api_version, kind, raw.len());
    let start = out.len();
    out.reserve(raw.len() + UNKNOWN_TAIL.len());
    out.put_slice(raw);
    out.put_slice(&UNKNOWN_TAIL);
    (out.freeze(), start..start + raw.len())
}

/// Bytes of a list's `raw` with `metadata` (ListMeta bytes) and items of these lengths.
pub(crate) fn list_raw_len(metadata_len: usize, item_lens: impl Iterator<Item = usize>) -> usize {
    bytes_field_len(1, metadata_len) + item_lens.map(|len| bytes_field_len(2, len)).sum::<usize>()
}

/// One list item inside a list's `raw`.
pub(crate) fn put_list_item(out: &mut impl BufMut, item: &[u8]) {
    put_bytes_field(out, 2, item);
}

/// A list's `metadata` inside its `raw`.
pub(crate) fn put_list_meta(out: &mut impl BufMut, list_meta: &[u8]) {
    put_bytes_field(out, 1, list_meta);
}

/// One watch frame: `type` and the object's whole envelope.
pub(crate) fn watch_frame(event_type: &str, object_envelope: &[u8]) -> Bytes {
    let object_len = bytes_field_len(1, object_envelope.len());
    let event_len = bytes_field_len(1, event_type.len()) + bytes_field_len(2, object_len);
    let mut frame = BytesMut::with_capacity(4 + event_len);
    // a frame is bounded by the client (16 MiB): an object never comes near 4 GiB
    frame.put_u32(u32::try_from(event_len).unwrap_or(u32::MAX));
    put_bytes_field(&mut frame, 1, event_type.as_bytes());
    put_bytes_head(&mut frame, 2, object_len);
    put_bytes_field(&mut frame, 1, object_envelope);
    frame.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frame kubernetes/kubernetes#108071 shows a watch ERROR as, up to the Status's
    /// fields: `00 00 00 71 | 0a 05 "ERROR" | 12 68 | 0a 66 | "k8s\0" 0a 0c 0a 02 "v1"
    /// 12 06 "Status" ...`.
    #[test]
    fn a_watch_frame_is_laid_out_as_kube_apiserver_writes_it() {
        // a Status message of the size in that frame: 0x66 - 4 - 14 - 4 - 2 (raw's head)
        let raw = vec![0x42u8; 0x66 - 4 - 14 - 4 - 2];
        let envelope = object("v1", "Status", &raw);
        assert_eq!(envelope.len(), 0x66);
        let frame = watch_frame("ERROR", &envelope);
        let mut expected = vec![0x00, 0x00, 0x00, 0x71, 0x0a, 0x05];
        expected.extend_from_slice(b"ERROR");
        expected.extend_from_slice(&[0x12, 0x68, 0x0a, 0x66]);
        expected.extend_from_slice(b"k8s\0");
        expected.extend_from_slice(&[0x0a, 0x0c, 0x0a, 0x02, b'v', b'1', 0x12, 0x06]);
        expected.extend_from_slice(b"Status");
        expected.extend_from_slice(&[0x12, raw.len() as u8]);
        expected.extend_from_slice(&raw);
        expected.extend_from_slice(&[0x1a, 0x00, 0x22, 0x00]);
        assert_eq!(frame.to_vec(), expected);
        assert_eq!(frame.len(), 4 + 0x71);
    }

    #[test]
    fn a_list_envelope_announces_the_exact_length_of_its_raw() {
        let meta = [0x12, 0x01, b'7'];
        let items: [&[u8]; 2] = [b"abc", &[0u8; 200]];
        let raw_len = list_raw_len(meta.len(), items.iter().map(|i| i.len()));
        let mut body = head("discovery.k8s.io/v1", "EndpointSliceList", raw_len);
        let before = body.len();
        put_list_meta(&mut body, &meta);
        for item in items {
            put_list_item(&mut body, item);
        }
        assert_eq!(body.len() - before, raw_len);
        body.put_slice(tail());
        assert_eq!(&body[..4], b"k8s\0");
        // raw = 0a 03 <meta> 12 03 "abc" 12 c8 01 <200 zeros>
        assert_eq!(raw_len, 5 + 5 + 203);
        assert_eq!(&body[before..before + 10], &[0x0a, 0x03, 0x12, 0x01, b'7', 0x12, 0x03, b'a', b'b', b'c']);
        assert_eq!(&body[body.len() - 4..], &UNKNOWN_TAIL);
    }
}
