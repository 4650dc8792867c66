//! FNV-1a 64: a small, stable hash (unlike std's per-process seeded hasher) for config versions,
//! rule identities, store-key tags and file fingerprints. Not for anything an attacker must not
//! be able to collide: bucket keys always carry the full values next to the hash.

/// The FNV-1a 64 offset basis: the hash of nothing.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// Continues `hash` over `bytes`.
pub fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// FNV-1a 64 of `bytes` from the offset basis.
pub fn fnv1a_of(bytes: &[u8]) -> u64 {
    fnv1a(FNV_OFFSET, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_fnv1a_64_vectors() {
        assert_eq!(fnv1a_of(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_of(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_of(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a(fnv1a_of(b"foo"), b"bar"), fnv1a_of(b"foobar"));
    }
}
