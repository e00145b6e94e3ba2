//! Protocol buffers' wire format, the few pieces the encoder and the envelope need:
//! varints, field tags and length-delimited fields. Nothing here knows a message.

use bytes::BufMut;

/// The wire types the served messages use (none of them has a double or fixed field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WireType {
    Varint = 0,
    LengthDelimited = 2,
}

pub(crate) fn put_varint(out: &mut impl BufMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// Bytes [`put_varint`] writes for `value`.
pub(crate) fn varint_len(value: u64) -> usize {
    let bits = 64 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

pub(crate) fn put_tag(out: &mut impl BufMut, field: u32, wire: WireType) {
    put_varint(out, (u64::from(field) << 3) | wire as u64);
}

/// A length-delimited field: tag, length, payload.
pub(crate) fn put_bytes_field(out: &mut impl BufMut, field: u32, payload: &[u8]) {
    put_tag(out, field, WireType::LengthDelimited);
    put_varint(out, payload.len() as u64);
    out.put_slice(payload);
}

/// The head of a length-delimited field whose `len` payload bytes follow separately.
pub(crate) fn put_bytes_head(out: &mut impl BufMut, field: u32, len: usize) {
    put_tag(out, field, WireType::LengthDelimited);
    put_varint(out, len as u64);
}

/// Bytes a length-delimited field with a payload of `len` bytes takes.
pub(crate) fn bytes_field_len(field: u32, len: usize) -> usize {
    varint_len(u64::from(field) << 3) + varint_len(len as u64) + len
}

pub(crate) fn put_varint_field(out: &mut impl BufMut, field: u32, value: u64) {
    put_tag(out, field, WireType::Varint);
    put_varint(out, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_little_endian_groups_of_seven_bits() {
        for (value, bytes) in [
            (0u64, vec![0x00]),
            (1, vec![0x01]),
            (127, vec![0x7f]),
            (128, vec![0x80, 0x01]),
            (300, vec![0xac, 0x02]),
            (u64::MAX, vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            // a negative int32/int64 is sign-extended to ten bytes, as Go's encoder writes it
            (-1i64 as u64, vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            assert_eq!(out, bytes, "{value}");
            assert_eq!(varint_len(value), bytes.len(), "{value}");
        }
    }

    #[test]
    fn fields_carry_their_number_and_wire_type() {
        let mut out = Vec::new();
        put_bytes_field(&mut out, 1, b"v1");
        put_varint_field(&mut out, 2, 150);
        put_bytes_head(&mut out, 16, 3);
        assert_eq!(out, [0x0a, 0x02, b'v', b'1', 0x10, 0x96, 0x01, 0x82, 0x01, 0x03]);
        assert_eq!(bytes_field_len(1, 2), 4);
        assert_eq!(bytes_field_len(16, 200), 2 + 2 + 200);
    }
}
