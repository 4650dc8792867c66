//! Bucket keys: one per (rule, descriptor values).
//!
//! A key is the rule's fingerprint followed by every entry's key and value, length-prefixed so
//! no two different descriptors encode the same bytes. Lookups encode into a reused buffer, so a
//! decision on a known key allocates nothing.
//!
//! Values are request data of any length. In keys, a value longer than [`MAX_VALUE_IN_KEY`] bytes
//! is kept as a prefix and its SHA-256 (`<prefix>~<64 hex digits>`): every key, in this process
//! and in Redis, is then bounded in bytes, and two long values share a bucket only if SHA-256
//! collides (a keyless or weak hash would let a client forge a collision with a victim's value;
//! a keyed one would differ between sidecars sharing Redis). Matching still sees the whole value.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt::Write as _;

use sluice_core::Entry;
use sluice_core::hash::{FNV_OFFSET, fnv1a};

/// Longest value kept verbatim in a key, in bytes.
pub const MAX_VALUE_IN_KEY: usize = 128;
/// Bytes of a long value's prefix kept before its digest (fewer at a character boundary).
const LONG_VALUE_PREFIX: usize = 32;
/// The first character of every digested value. A value a client sends that starts with it is
/// digested too, whatever its length, so no value is ever kept verbatim in the form of another
/// value's digest: reaching a long value's bucket takes that value (or a SHA-256 collision), not
/// its digest as seen in a listing or a Redis key. A control character, so no HTTP header value
/// and no value Envoy builds from one starts with it.
pub const DIGEST_MARK: char = '\u{1}';

/// A value as keys hold it: itself, or, when longer than [`MAX_VALUE_IN_KEY`] or starting with
/// [`DIGEST_MARK`], the mark, a prefix and SHA-256 (`\x01<prefix>~<64 hex digits>`, at most
/// 1 + 32 + 1 + 64 bytes).
pub fn key_value(value: &str) -> Cow<'_, str> {
    use sha2::{Digest, Sha256};
    use std::fmt::Write as _;
    if value.len() <= MAX_VALUE_IN_KEY && !value.starts_with(DIGEST_MARK) {
        return Cow::Borrowed(value);
    }
    let mut cut = LONG_VALUE_PREFIX.min(value.len());
    while !value.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = String::with_capacity(cut + 66);
    out.push(DIGEST_MARK);
    // The mark of a short value that starts with it is not kept twice.
    out.push_str(value[..cut].trim_start_matches(DIGEST_MARK));
    out.push('~');
    for b in Sha256::digest(value.as_bytes()) {
        let _ = write!(out, "{b:02x}");
    }
    Cow::Owned(out)
}

/// Descriptor entries on their way into a key.
#[derive(Debug, Clone, Copy)]
pub enum Values<'a> {
    /// As a request sent them: each value goes through [`key_value`].
    Sent(&'a [Entry]),
    /// Already as keys hold them (each value went through [`key_value`] once, as a
    /// `Payee` keeps them): used as they are, since digesting a digest again would give
    /// another key.
    Keyed(&'a [Entry]),
}

impl<'a> Values<'a> {
    /// Each entry's key and value as keys hold it.
    fn pairs(self) -> impl Iterator<Item = (&'a str, Cow<'a, str>)> {
        let (entries, keyed) = match self {
            Values::Sent(e) => (e, false),
            Values::Keyed(e) => (e, true),
        };
        entries.iter().map(move |e| {
            let value = if keyed {
                Cow::Borrowed(e.value.as_str())
            } else {
                key_value(&e.value)
            };
            (e.key.as_str(), value)
        })
    }
}

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Encodes `(identity, values)` into `out` (cleared first).
pub fn encode_into(out: &mut Vec<u8>, identity: u64, values: Values<'_>) {
    out.clear();
    out.extend_from_slice(&identity.to_le_bytes());
    for (key, value) in values.pairs() {
        for part in [key, &value] {
            // Keys are bounded (1 KiB) by the server and values here (≤ 98 bytes), far below
            // u32::MAX.
            out.extend_from_slice(&(part.len() as u32).to_le_bytes());
            out.extend_from_slice(part.as_bytes());
        }
    }
}

/// Runs `f` on the encoded key, using a per-thread buffer instead of allocating.
pub fn with_encoded<T>(identity: u64, values: Values<'_>, f: impl FnOnce(&[u8]) -> T) -> T {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            encode_into(&mut buf, identity, values);
            f(&buf)
        }
        // Re-entered (f itself encodes a key): fall back to a fresh buffer.
        Err(_) => {
            let mut buf = Vec::new();
            encode_into(&mut buf, identity, values);
            f(&buf)
        }
    })
}

/// The global store's key for a bucket: `sluice:{<identity>:<values hash>}:<values>`.
///
/// The `{…}` hash tag gives each bucket a Redis Cluster slot of its own, so buckets spread across
/// the cluster while every script call touches one key. The values follow the tag verbatim
/// (escaped), so distinct descriptors never share a global bucket even if their hashes collide.
pub fn store_key(identity: u64, values: Values<'_>) -> String {
    let pairs: Vec<(&str, Cow<'_, str>)> = values.pairs().collect();
    store_key_from(identity, pairs.iter().map(|(k, v)| (*k, v.as_ref())))
}

/// The global store's key of the bucket with store identity `identity` (its
/// `LeaseBucket::identity`) and encoded key `key`: the
/// same as [`store_key`] of that identity and the entries `key` was encoded from. Buckets do not
/// keep their store key: it is made again for the rare store call, which saves its allocation on
/// every tracked key.
pub fn store_key_of(identity: u64, bytes: &[u8]) -> String {
    let mut rest = bytes.get(8..).unwrap_or_default();
    let mut next = move || {
        let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let part = std::str::from_utf8(rest.get(4..4 + len)?).ok()?;
        rest = &rest[4 + len..];
        Some(part)
    };
    let pairs = std::iter::from_fn(move || Some((next()?, next()?)));
    store_key_from(identity, pairs)
}

/// Written into one allocation, with plain values copied whole rather than char by char.
fn store_key_from<'a>(
    identity: u64,
    entries: impl Iterator<Item = (&'a str, &'a str)> + Clone,
) -> String {
    let mut values_hash = FNV_OFFSET;
    let mut len = 0;
    for (key, value) in entries.clone() {
        for part in [key, value] {
            // Each part is followed by a 0xff byte (never in UTF-8), so boundaries count.
            values_hash = fnv1a(fnv1a(values_hash, part.as_bytes()), &[0xff]);
            len += part.len() + 1;
        }
    }
    let mut out = String::with_capacity("sluice:{:}:".len() + 32 + len + 8);
    // Writing into a String cannot fail.
    let _ = write!(out, "sluice:{{{identity:016x}:{values_hash:016x}}}:");
    for (i, (key, value)) in entries.enumerate() {
        if i > 0 {
            out.push('|');
        }
        escape_into(&mut out, key);
        out.push('=');
        escape_into(&mut out, value);
    }
    out
}

/// The identity a store key was made with ([`store_key`]'s first part), if it is one.
pub fn identity_of(store_key: &str) -> Option<u64> {
    let hex = store_key.strip_prefix("sluice:{")?.get(..16)?;
    u64::from_str_radix(hex, 16).ok()
}

/// The descriptor values of a store key (`key=value|key=value`, escaped as [`store_key`] wrote them).
pub fn values_of(store_key: &str) -> &str {
    store_key.split_once("}:").map_or("", |(_, values)| values)
}

/// Escapes `|`, `=`, `\` and control bytes so the tail parses back unambiguously.
fn escape_into(out: &mut String, s: &str) {
    let plain = |b: u8| b.is_ascii() && !b.is_ascii_control() && !matches!(b, b'|' | b'=' | b'\\');
    if s.bytes().all(plain) {
        out.push_str(s);
        return;
    }
    for c in s.chars() {
        match c {
            '|' | '=' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent_key(identity: u64, entries: &[Entry]) -> String {
        store_key(identity, Values::Sent(entries))
    }

    fn encoded_sent<T>(identity: u64, entries: &[Entry], f: impl FnOnce(&[u8]) -> T) -> T {
        with_encoded(identity, Values::Sent(entries), f)
    }

    fn entries(pairs: &[(&str, &str)]) -> Vec<Entry> {
        pairs.iter().map(|(k, v)| Entry::new(*k, *v)).collect()
    }

    #[test]
    fn different_descriptors_never_share_a_key() {
        let a = entries(&[("ab", "c")]);
        let b = entries(&[("a", "bc")]);
        let c = entries(&[("a", "b"), ("c", "")]);
        let keys: Vec<Vec<u8>> = [&a, &b, &c]
            .iter()
            .map(|e| encoded_sent(7, e, <[u8]>::to_vec))
            .collect();
        assert_ne!(keys[0], keys[1]);
        assert_ne!(keys[1], keys[2]);
        assert_ne!(
            encoded_sent(7, &a, <[u8]>::to_vec),
            encoded_sent(8, &a, <[u8]>::to_vec)
        );
        assert_ne!(
            sent_key(1, &entries(&[("a", "b|c=d")])),
            sent_key(1, &entries(&[("a", "b"), ("c", "d")]))
        );
    }

    #[test]
    fn store_keys_are_made_again_from_encoded_keys() {
        for pairs in [
            &[][..],
            &[("remote_address", "10.0.0.1")][..],
            &[("a", "b|c=d"), ("", "\u{e9}\n"), ("k", "")][..],
        ] {
            let e = entries(pairs);
            let encoded = encoded_sent(0xfeed, &e, <[u8]>::to_vec);
            assert_eq!(store_key_of(0xfeed, &encoded), sent_key(0xfeed, &e));
        }
    }

    #[test]
    fn store_keys_are_stable_across_versions() {
        // Sidecars of different versions share Redis during a rollout: the key format is fixed.
        assert_eq!(
            sent_key(0xabc, &entries(&[("remote_address", "10.0.0.1")])),
            "sluice:{0000000000000abc:723389bca147b62a}:remote_address=10.0.0.1"
        );
        assert_eq!(
            sent_key(
                u64::MAX,
                &entries(&[("a|b", "c=d\\e"), ("k", "\u{e9}\n\u{85}x")])
            ),
            "sluice:{ffffffffffffffff:7bde8828b4406b39}:a\\|b=c\\=d\\\\e|k=\u{e9}\\x0a\\x85x"
        );
    }

    /// A value of any length is kept in a bounded key; long values sharing a prefix still get
    /// keys of their own, the same in this process and in the store.
    #[test]
    fn long_values_are_bounded_and_distinct() {
        let a = "a".repeat(5_000);
        let b = format!("{}b", "a".repeat(4_999));
        let exactly = "v".repeat(MAX_VALUE_IN_KEY);
        let (ka, kb) = (
            sent_key(1, &entries(&[("k", &a)])),
            sent_key(1, &entries(&[("k", &b)])),
        );
        assert_ne!(ka, kb);
        assert!(ka.len() < 200, "{} bytes", ka.len());
        let (_, value) = ka.split_once("}:k=").expect("values");
        let (prefix, digest) = value.split_once('~').expect("a digest");
        assert_eq!(
            prefix,
            format!("\\x01{}", "a".repeat(32)),
            "marked, then the prefix"
        );
        assert!(digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(sent_key(1, &entries(&[("k", &exactly)])).ends_with(&exactly));
        for v in [&a, &b, &exactly, &"é".repeat(100)] {
            let e = entries(&[("k", v)]);
            let encoded = encoded_sent(1, &e, <[u8]>::to_vec);
            // Identity, two length prefixes, the key `k`, at most 128 value bytes.
            assert!(encoded.len() <= 8 + 2 * 4 + 1 + MAX_VALUE_IN_KEY);
            assert_eq!(store_key_of(1, &encoded), sent_key(1, &e), "{v:.10}");
        }
        assert_eq!(
            key_value(&"é".repeat(100)).len(),
            1 + 32 + 1 + 64,
            "the prefix ends at a character boundary"
        );
    }

    /// Values a client may send to reach another value's bucket: the digested form of a long
    /// value as a listing or a Redis key shows it, that form with or without the mark, and any
    /// value starting with the mark. None reaches it, in this process or in the store.
    fn forgeries(long: &str) -> Vec<String> {
        let digested = key_value(long).into_owned();
        let unmarked = digested.trim_start_matches(DIGEST_MARK).to_string();
        vec![
            digested.clone(),
            unmarked.clone(),
            format!("{DIGEST_MARK}{digested}"),
            key_value(&digested).into_owned(),
            key_value(&unmarked).into_owned(),
        ]
    }

    #[test]
    fn the_digested_form_of_a_value_is_not_a_way_into_its_bucket() {
        let long = format!("victim-{}", "k".repeat(200));
        let victim = entries(&[("api_key", &long)]);
        for forged in forgeries(&long) {
            let sent = entries(&[("api_key", &forged)]);
            assert_ne!(sent_key(1, &sent), sent_key(1, &victim), "{forged:?}");
            assert_ne!(
                encoded_sent(1, &sent, <[u8]>::to_vec),
                encoded_sent(1, &victim, <[u8]>::to_vec),
                "{forged:?}"
            );
        }
        // Short values that do not start with the mark keep their keys (the golden test above).
        assert_eq!(key_value("~x"), "~x");
        assert!(key_value(&format!("{DIGEST_MARK}x")).starts_with(DIGEST_MARK));
        // A payee's values, already keyed, make the key the sent values make.
        let keyed: Vec<Entry> = victim
            .iter()
            .map(|e| Entry::new(e.key.as_str(), key_value(&e.value)))
            .collect();
        assert_eq!(store_key(1, Values::Keyed(&keyed)), sent_key(1, &victim));
    }

    proptest::proptest! {
        /// Two different values never share a key, in this process or in the store, whatever
        /// they are: short, long, marked, or the digested form of one another.
        #[test]
        fn different_values_never_share_a_key(
            a in "\\PC{0,40}|.{120,300}|\\x01.{0,140}",
            b in "\\PC{0,40}|.{120,300}|\\x01.{0,140}",
            digest_a in proptest::bool::ANY,
        ) {
            let a = if digest_a { key_value(&a).into_owned() } else { a };
            proptest::prop_assume!(a != b);
            let (ea, eb) = (entries(&[("k", &a)]), entries(&[("k", &b)]));
            proptest::prop_assert_ne!(sent_key(1, &ea), sent_key(1, &eb));
            proptest::prop_assert_ne!(
                encoded_sent(1, &ea, <[u8]>::to_vec),
                encoded_sent(1, &eb, <[u8]>::to_vec)
            );
        }
    }

    #[test]
    fn store_keys_carry_one_hash_tag() {
        let k = sent_key(0xabc, &entries(&[("remote_address", "10.0.0.1")]));
        assert!(k.starts_with("sluice:{0000000000000abc:"), "{k}");
        assert_eq!(k.matches('{').count(), 1);
        assert!(k.ends_with("}:remote_address=10.0.0.1"), "{k}");
    }
}
