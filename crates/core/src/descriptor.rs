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

/// An ordered list of entries, matched against a domain's descriptor tree.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Descriptor {
    /// The entries, outermost first.
    pub entries: Vec<Entry>,
    /// Tokens this descriptor costs; `None` means the request-wide `hits_addend` (default 1).
    pub hits_addend: Option<u64>,
    /// A caller-supplied limit that replaces the configured one.
    pub limit_override: Option<LimitOverride>,
}

impl Descriptor {
    /// A descriptor of `(key, value)` pairs with no per-descriptor options.
    pub fn of<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        Self {
            entries: pairs.into_iter().map(|(k, v)| Entry::new(k, v)).collect(),
            hits_addend: None,
            limit_override: None,
        }
    }
}
