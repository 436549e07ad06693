//! Redis Cluster key slots: which of the 16 384 slots a key (or a shard channel) hashes to.
//!
//! CRC16 (XMODEM) of the key modulo 16 384, or of its hash tag: the part between the first
//! `{` and the first `}` after it, when that part is not empty. Pure; no I/O.

/// How many slots a Redis Cluster has.
pub(crate) const SLOTS: u16 = 16_384;

/// The slot of `key`.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key).unwrap_or(key)) % SLOTS
}

/// What of `key` is hashed when it carries a hash tag (`{tag}`), if it does.
pub(crate) fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&byte| byte == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&byte| byte == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis Cluster uses it.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_what_redis_answers_to_cluster_keyslot() {
        // The check value of CRC16/XMODEM, and answers of `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12_182);
        assert_eq!(key_slot(b"bar"), 5_061);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn a_hash_tag_decides_the_slot_and_an_empty_or_unclosed_one_does_not() {
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"redisson_lock__channel:{a}"), key_slot(b"a"));
        assert_eq!(key_slot(b"{}x"), crc16(b"{}x") % SLOTS);
        assert_eq!(key_slot(b"a{b"), crc16(b"a{b") % SLOTS);
        assert_eq!(key_slot(b"x{a}{b}"), key_slot(b"a"));
        assert_eq!(key_slot(b"{{t}:x}"), key_slot(b"{t"));
    }
}
