//! Rate-limit descriptors as requests carry them: an ordered list of key/value entries.

/// One `key=value` pair of a descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The descriptor key, e.g. `remote_address`.
    pub key: String,
    /// The value, e.g. `10.0.0.1`; may be empty.
    pub value: String,
}

impl Entry {
    /// An entry from anything string-like.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// A limit that the caller (Envoy's `descriptor.limit`) sets for this descriptor, overriding config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitOverride {
    /// Requests allowed per unit.
    pub requests_per_unit: u64,
    /// The unit.
    pub unit: crate::unit::Unit,
}

/// The descriptor key of the entry that makes a descriptor a hold's acquire (`sluice-hold:
/// acquire`, see [`Hold`]). Reserved: a rule may not match on it.
pub const HOLD_KEY: &str = "sluice-hold";

/// The descriptor key of the entry that makes a descriptor a hold's release (`sluice-release:
/// <token>`). A key of its own, so that a value read from a header (a client may send one) can
/// only ever name a token, never acquire. Reserved.
pub const RELEASE_KEY: &str = "sluice-release";

/// The descriptor key of an entry right before `sluice-hold: acquire` that names the request's
/// estimate for a reservation (`reserve:`), e.g. from the request's maximum tokens. Reserved.
pub const ESTIMATE_KEY: &str = "sluice-estimate";

/// The request header sluice asks Envoy to add to an admitted request that took a hold: its
/// token, which the stream-done descriptor sends back (`request_headers` action) to release it.
pub const HOLD_HEADER: &str = "x-sluice-hold";

/// What a descriptor does to the holds of its concurrency rules (`rate_limit.concurrency`).
///
/// Envoy's convention: the request-time descriptor ends with `sluice-hold: acquire`; the
/// stream-done descriptor ends with `sluice-release: <token>`, the token sluice answered with in
/// [`HOLD_HEADER`]. The entry is taken off before the descriptor is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hold {
    /// A plain descriptor: on a concurrency rule, a check (would one more request fit?).
    #[default]
    None,
    /// Take a slot on each concurrency rule the descriptor matches, until released.
    Acquire,
    /// Give back the slots the hold with this token took on the descriptor's keys; a token that
    /// holds nothing there (unknown, released, expired, another key's) changes nothing.
    Release(u64),
}

impl Hold {
    /// The hold a trailing entry asks for: `sluice-hold: acquire`, or `sluice-release: <token>`
    /// (a value that is no token, `acquire` included, is a release that finds nothing: garbage in
    /// a header must neither acquire nor fail the stream-done call that also carries post-paid
    /// usage). `None` for any other entry, `sluice-hold` with another value included.
    pub fn of_entry(key: &str, value: &str) -> Option<Self> {
        match key {
            HOLD_KEY if value == "acquire" => Some(Hold::Acquire),
            RELEASE_KEY => Some(Hold::Release(parse_token(value).unwrap_or(0))),
            _ => None,
        }
    }
}

/// A hold token as sent: 16 lowercase hex digits.
pub fn format_token(token: u64) -> String {
    format!("{token:016x}")
}

/// A token from its text, if it is one (16 hex digits, not zero).
pub fn parse_token(text: &str) -> Option<u64> {
    if text.len() != 16 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(text, 16).ok().filter(|&t| t != 0)
}

/// An ordered list of entries, matched against a domain's descriptor tree.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Descriptor {
    /// The entries, outermost first.
    pub entries: Vec<Entry>,
    /// Tokens this descriptor costs; `None` means the request-wide `hits_addend` (default 1).
    pub hits_addend: Option<u64>,
    /// A caller-supplied limit that replaces the configured one.
    pub limit_override: Option<LimitOverride>,
    /// What it does to holds (its trailing `sluice-hold` entry, taken off `entries`).
    pub hold: Hold,
    /// An acquire's estimate for reservations (a `sluice-estimate` entry before its
    /// `sluice-hold: acquire`, taken off `entries`); `None` when absent or not a whole number.
    pub estimate: Option<u64>,
}

impl Descriptor {
    /// A descriptor of `(key, value)` pairs with no per-descriptor options.
    pub fn of<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        Self {
            entries: pairs.into_iter().map(|(k, v)| Entry::new(k, v)).collect(),
            hits_addend: None,
            limit_override: None,
            hold: Hold::None,
            estimate: None,
        }
    }

    /// Takes a trailing `sluice-hold: acquire` (with a `sluice-estimate` entry before it) or
    /// `sluice-release: <token>` entry off the entries into [`hold`](Self::hold).
    pub fn take_hold_entry(&mut self) {
        let hold = self
            .entries
            .last()
            .and_then(|e| Hold::of_entry(&e.key, &e.value));
        if let Some(hold) = hold {
            self.entries.pop();
            self.hold = hold;
            if self.hold == Hold::Acquire
                && self.entries.last().is_some_and(|e| e.key == ESTIMATE_KEY)
            {
                let entry = self.entries.pop().expect("checked above");
                self.estimate = entry.value.parse().ok();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trailing_hold_entry_becomes_the_hold() {
        let mut d = Descriptor::of([("tenant", "a"), (HOLD_KEY, "acquire")]);
        d.take_hold_entry();
        assert_eq!(d.entries, vec![Entry::new("tenant", "a")]);
        assert_eq!(d.hold, Hold::Acquire);
        let mut d = Descriptor::of([("tenant", "a"), (RELEASE_KEY, "00000000000000ff")]);
        d.take_hold_entry();
        assert_eq!(d.hold, Hold::Release(255));
        // A client's header can only name a token: `acquire` there finds nothing.
        let mut d = Descriptor::of([("tenant", "a"), (RELEASE_KEY, "acquire")]);
        d.take_hold_entry();
        assert_eq!((d.entries.len(), d.hold), (1, Hold::Release(0)));
        // `sluice-hold` with anything but `acquire` is an entry like any other.
        let mut d = Descriptor::of([("tenant", "a"), (HOLD_KEY, "00000000000000ff")]);
        d.take_hold_entry();
        assert_eq!((d.entries.len(), d.hold), (2, Hold::None));
        let mut d = Descriptor::of([("t", "a"), (ESTIMATE_KEY, "4096"), (HOLD_KEY, "acquire")]);
        d.take_hold_entry();
        assert_eq!((d.entries.len(), d.estimate), (1, Some(4096)));
        let mut d = Descriptor::of([("t", "a"), (ESTIMATE_KEY, "-1"), (HOLD_KEY, "acquire")]);
        d.take_hold_entry();
        assert_eq!(
            (d.entries.len(), d.estimate),
            (1, None),
            "not a count: the default"
        );
        // Not last: an entry like any other (no rule may match on it).
        let mut d = Descriptor::of([(HOLD_KEY, "acquire"), ("tenant", "a")]);
        d.take_hold_entry();
        assert_eq!((d.entries.len(), d.hold), (2, Hold::None));
    }

    #[test]
    fn garbage_tokens_release_nothing() {
        for bad in [
            "",
            "0000000000000000",
            "xyz",
            "00000000000000ff0",
            "acquire",
            "+00000000000000f",
        ] {
            assert_eq!(
                Hold::of_entry(RELEASE_KEY, bad),
                Some(Hold::Release(0)),
                "{bad:?}"
            );
        }
        assert_eq!(parse_token(&format_token(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_token(&format_token(0xabc)), Some(0xabc));
    }
}
