//! Compiled descriptor rules and matching, with envoyproxy/ratelimit's semantics.
//!
//! For each entry of a request descriptor, in order, a level of the domain's tree is searched:
//! an exact `key`+`value` first, then `value` patterns with `*` wildcards (in file order), then a
//! `key` with no value (matching any value). A rule applies only if it sits where the request's
//! *last* entry lands; a level with no `rate_limit` exempts the request. A descriptor longer than
//! the tree matches nothing.
//!
//! A `share_threshold` level keys every value its pattern matches as the pattern
//! ([`RuleSet::match_keyed`]); a level with `rate_limits` holds several consecutive rules
//! ([`RuleSet::limits_of`]). `compile` turns one `rate_limit` into a [`Rule`] and gives it its
//! stable identity ([`fingerprint`]); `bucket_id` matches RLQS bucket ids.

use std::borrow::Cow;
use std::collections::HashMap as StdHashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::bucket::Rate;
use crate::config::model::{DescriptorConfig, DomainFile, RateLimitConfig};
use crate::config::{ConfigError, Fallback, LimitOverrides, Mode};
use crate::descriptor::Entry;
use serde_saphyr::Spanned;

mod bucket_id;
mod compile;
pub use bucket_id::BucketMatch;
use compile::compile_rule;
pub use compile::fingerprint;

/// Maps on the decision path hash with foldhash (fast, seeded per process).
type HashMap<K, V> = StdHashMap<K, V, foldhash::fast::RandomState>;

/// Index of a rule in its [`RuleSet`].
pub type RuleId = u32;

/// What a matched rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// `unlimited: true`: always OK, reported without a limit.
    Unlimited,
    /// A token bucket.
    Limited {
        /// The bucket's rate and burst.
        rate: Rate,
        /// How the bucket is shared across instances.
        mode: Mode,
        /// What happens while the global store is unavailable.
        fallback: Fallback,
        /// When hits are paid.
        payment: Payment,
    },
}

/// When a limited rule's hits are paid. Not part of the rule's identity: a bucket's state means
/// the same either way (a prepaid bucket is one that never goes below zero), so switching a
/// rule keeps its buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Payment {
    /// Before the request passes (today's semantics).
    #[default]
    Prepaid,
    /// After the fact, in full, into debt of at most `max_debt` tokens.
    PostPaid {
        /// The most debt a bucket may carry.
        max_debt: u64,
    },
}

impl Payment {
    /// The word the config uses: `prepaid` or `post_paid`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Payment::Prepaid => "prepaid",
            Payment::PostPaid { .. } => "post_paid",
        }
    }

    /// The debt bound of a post-paid rule; `None` for a prepaid one.
    pub const fn max_debt(self) -> Option<u64> {
        match self {
            Payment::PostPaid { max_debt } => Some(max_debt),
            Payment::Prepaid => None,
        }
    }
}

/// The largest `max_debt`: tokens are f64 everywhere (Rust and Lua), exact up to 2^53.
pub const MAX_DEBT: u64 = 1 << 53;

/// One `rate_limit` of a domain's descriptor tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Its index in the rule set.
    pub id: RuleId,
    /// The domain it belongs to.
    pub domain: String,
    /// The descriptor path, e.g. `remote_address` or `api_key=* > path=/upload`.
    pub path: String,
    /// `rate_limit.name` when given: reported in `current_limit.name` and used by `replaces`.
    pub explicit_name: Option<String>,
    /// The limit.
    pub limit: Limit,
    /// Decide and count, but answer OK.
    pub shadow_mode: bool,
    /// A quota: its denial makes the request OVER_LIMIT only if every quota of the request
    /// denies it (`quota_mode` on the descriptor, or at the top level).
    pub quota_mode: bool,
    /// `metadata` of its descriptor: returned in the RLS response's `dynamic_metadata` when the
    /// request passes this rule (a JSON object).
    pub metadata: Option<Arc<serde_json::Map<String, serde_json::Value>>>,
    /// Names of rules this one replaces when both match one request.
    pub replaces: Vec<String>,
    /// A `fixed_window` rule whose denials count their hits (`count_denied`, default off): a
    /// request the window denies closes it until it ends, as envoyproxy/ratelimit's counter
    /// passing the limit does.
    pub count_denied: bool,
    /// The ids of every limit of its descriptor (`rate_limits`), itself included, in file order:
    /// a request passes only if all of them can pay. One id for a single `rate_limit`.
    pub limits: std::ops::Range<RuleId>,
    /// A stable identity of (domain, path, limit): buckets of an unchanged rule survive reloads.
    pub fingerprint: u64,
    /// The name for metrics, logs and headers: the explicit name, else `domain:path`.
    pub label: String,
    /// Where the rule is written.
    pub file: PathBuf,
    /// The line of its descriptor's `key`.
    pub line: u64,
}

/// The result of matching one descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match<'a> {
    /// No config for the request's domain.
    UnknownDomain,
    /// The domain is known but no rule applies (or an exempting level matched).
    NoRule,
    /// This rule applies.
    Rule(&'a Rule),
}

/// Every domain's compiled descriptor tree.
#[derive(Debug, Default)]
pub struct RuleSet {
    domains: HashMap<String, usize>,
    nodes: Vec<Node>,
    rules: Vec<Rule>,
    /// Which caller-supplied limits apply (`limit_overrides:`).
    limit_overrides: LimitOverrides,
}

#[derive(Debug, Default)]
struct Node {
    rule: Option<RuleId>,
    children: HashMap<String, KeyLevel>,
    /// `share_threshold`: the wildcard value that reaches this node, which stands for every
    /// value it matches in bucket keys (one bucket for all of them).
    shared: Option<Box<str>>,
}

#[derive(Debug, Default)]
struct KeyLevel {
    exact: HashMap<String, usize>,
    patterns: Vec<(String, usize)>,
    any: Option<usize>,
}

impl KeyLevel {
    /// The node `value` leads to: an exact value first, then `*` patterns in file order, then the
    /// key without a value.
    fn find(&self, value: &str) -> Option<usize> {
        self.exact
            .get(value)
            .or_else(|| {
                self.patterns
                    .iter()
                    .find(|(p, _)| wildcard_match(p, value))
                    .map(|(_, n)| n)
            })
            .or(self.any.as_ref())
            .copied()
    }
}

impl RuleSet {
    /// Compiles and validates domain files (each with the file it came from).
    pub fn compile(domains: &[(PathBuf, DomainFile)]) -> Result<Self, ConfigError> {
        let mut set = RuleSet::default();
        let mut seen: HashMap<&str, (&Path, u64)> = HashMap::default();
        for (file, domain) in domains {
            let name = domain.domain.value.as_str();
            let line = domain.domain.referenced.line();
            if name.is_empty() {
                return Err(ConfigError::at(
                    file,
                    line,
                    "config file cannot have empty domain",
                ));
            }
            if let Some((other, other_line)) = seen.insert(name, (file, line)) {
                return Err(ConfigError::at(
                    file,
                    line,
                    format!(
                        "duplicate domain '{name}' (also at {}:{other_line})",
                        other.display()
                    ),
                ));
            }
            let root = set.new_node();
            set.domains.insert(name.to_string(), root);
            set.add_level(file, name, "", root, &domain.descriptors)?;
        }
        Ok(set)
    }

    fn new_node(&mut self) -> usize {
        self.nodes.push(Node::default());
        self.nodes.len() - 1
    }

    fn add_level(
        &mut self,
        file: &Path,
        domain: &str,
        parent_path: &str,
        parent: usize,
        descriptors: &[Spanned<DescriptorConfig>],
    ) -> Result<(), ConfigError> {
        for spanned in descriptors {
            let d = &spanned.value;
            let (key, line) = match &d.key {
                Some(k) => (k.value.as_str(), k.referenced.line()),
                None => ("", spanned.referenced.line()),
            };
            if key.is_empty() {
                return Err(ConfigError::at(file, line, "descriptor has empty key"));
            }
            let value = d.value.as_deref().filter(|v| !v.is_empty());
            let step = match value {
                Some(v) => format!("{key}={v}"),
                None => key.to_string(),
            };
            let path = if parent_path.is_empty() {
                step
            } else {
                format!("{parent_path} > {step}")
            };
            let node = self.new_node();
            let level = self.nodes[parent]
                .children
                .entry(key.to_string())
                .or_default();
            let duplicate = match value {
                None => level.any.replace(node).is_some(),
                Some(v) if v.contains('*') => {
                    let dup = level.patterns.iter().any(|(p, _)| p == v);
                    level.patterns.push((v.to_string(), node));
                    dup
                }
                Some(v) => level.exact.insert(v.to_string(), node).is_some(),
            };
            if duplicate {
                return Err(ConfigError::at(
                    file,
                    line,
                    format!("duplicate descriptor composite key '{domain}: {path}'"),
                ));
            }
            if d.share_threshold {
                match value {
                    Some(v) if v.contains('*') => self.nodes[node].shared = Some(v.into()),
                    _ => {
                        return Err(ConfigError::at(
                            file,
                            line,
                            format!(
                                "share_threshold can only be used with wildcard values \
                                 (containing '*'), but '{domain}: {path}' has none"
                            ),
                        ));
                    }
                }
            }
            let metadata = match &d.metadata {
                None => None,
                Some(serde_json::Value::Object(map)) => Some(Arc::new(map.clone())),
                Some(_) => {
                    return Err(ConfigError::at(
                        file,
                        line,
                        "error parsing metadata: metadata must be a mapping of names to values",
                    ));
                }
            };
            let limits: &[RateLimitConfig] = match (&d.rate_limit, &d.rate_limits) {
                (Some(_), Some(_)) => {
                    return Err(ConfigError::at(
                        file,
                        line,
                        "give either `rate_limit` or `rate_limits`, not both",
                    ));
                }
                (Some(one), None) => std::slice::from_ref(one),
                (None, Some(many)) if many.is_empty() => {
                    return Err(ConfigError::at(
                        file,
                        line,
                        "rate_limits needs at least one limit (leave it out to exempt the descriptor)",
                    ));
                }
                (None, Some(many)) => many,
                (None, None) => &[],
            };
            let first = RuleId::try_from(self.rules.len())
                .map_err(|_| ConfigError::at(file, line, "too many rules"))?;
            let end = u32::try_from(limits.len())
                .ok()
                .and_then(|n| first.checked_add(n))
                .ok_or_else(|| ConfigError::at(file, line, "too many rules"))?;
            for (i, rl) in limits.iter().enumerate() {
                let id = first + i as RuleId;
                let mut rule = compile_rule(file, line, domain, &path, d.shadow_mode, rl, id)?;
                if limits.len() > 1 {
                    if rule.limit == Limit::Unlimited {
                        return Err(ConfigError::at(
                            file,
                            line,
                            "an unlimited rate_limit cannot stand with other limits",
                        ));
                    }
                    if self.rules[first as usize..]
                        .iter()
                        .any(|r| r.fingerprint == rule.fingerprint)
                    {
                        return Err(ConfigError::at(
                            file,
                            line,
                            format!("rate_limits of '{domain}: {path}' holds the same limit twice"),
                        ));
                    }
                    if rule.explicit_name.is_none() && i > 0 {
                        // Unnamed limits of one descriptor still need labels of their own.
                        rule.label = format!("{}#{}", rule.label, i + 1);
                    }
                }
                rule.quota_mode = d.quota_mode;
                rule.metadata = metadata.clone();
                rule.limits = first..end;
                self.rules.push(rule);
                self.nodes[node].rule = Some(first);
            }
            self.add_level(file, domain, &path, node, &d.descriptors)?;
        }
        Ok(())
    }

    /// Finds the rule for `entries` in `domain`.
    pub fn match_descriptor(&self, domain: &str, entries: &[Entry]) -> Match<'_> {
        self.walk(domain, entries, |_, _| {})
    }

    /// Finds the rule for `entries` in `domain`, with the entries its bucket is keyed by: the
    /// same entries, except that a value matched by a `share_threshold` pattern is replaced by
    /// the pattern (so every value it matches shares one bucket). Borrowed unless a pattern
    /// shares: nothing is copied on the common path.
    pub fn match_keyed<'e>(
        &self,
        domain: &str,
        entries: &'e [Entry],
    ) -> (Match<'_>, Cow<'e, [Entry]>) {
        let mut keyed = Cow::Borrowed(entries);
        let found = self.walk(domain, entries, |i, pattern| {
            keyed.to_mut()[i].value = pattern.to_string();
        });
        (found, keyed)
    }

    /// Walks the tree along `entries`, calling `shared(index, pattern)` for each entry matched
    /// by a `share_threshold` pattern.
    fn walk(
        &self,
        domain: &str,
        entries: &[Entry],
        mut shared: impl FnMut(usize, &str),
    ) -> Match<'_> {
        let Some(&root) = self.domains.get(domain) else {
            return Match::UnknownDomain;
        };
        let mut node = &self.nodes[root];
        let last = entries.len().saturating_sub(1);
        for (i, entry) in entries.iter().enumerate() {
            let Some(level) = node.children.get(&entry.key) else {
                break;
            };
            let Some(next) = level.find(&entry.value) else {
                break;
            };
            node = &self.nodes[next];
            if let Some(pattern) = &node.shared {
                shared(i, pattern);
            }
            if i == last {
                return match node.rule {
                    Some(id) => Match::Rule(&self.rules[id as usize]),
                    None => Match::NoRule,
                };
            }
        }
        Match::NoRule
    }

    /// The same rules, honouring caller-supplied limits as `overrides` says.
    pub fn with_limit_overrides(self, overrides: LimitOverrides) -> Self {
        Self {
            limit_overrides: overrides,
            ..self
        }
    }

    /// The same rules, every one a quota when `all` (the top-level `quota_mode`).
    pub fn with_quota_mode(mut self, all: bool) -> Self {
        if all {
            for rule in &mut self.rules {
                rule.quota_mode = true;
            }
        }
        self
    }

    /// Whether a caller-supplied limit applies to `entries` in `domain` (a known domain).
    pub fn honours_override(&self, domain: &str, entries: &[Entry]) -> bool {
        match self.limit_overrides {
            LimitOverrides::Any => true,
            LimitOverrides::Ignore => false,
            LimitOverrides::RulesOnly => {
                matches!(self.match_descriptor(domain, entries), Match::Rule(_))
            }
        }
    }

    /// Every rule, in file order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Every limit of `rule`'s descriptor, `rule` first among them (see [`Rule::limits`]).
    pub fn limits_of<'a>(&'a self, rule: &'a Rule) -> &'a [Rule] {
        let (start, end) = (rule.limits.start as usize, rule.limits.end as usize);
        self.rules
            .get(start..end)
            .unwrap_or(std::slice::from_ref(rule))
    }

    /// The rule with this id.
    pub fn rule(&self, id: RuleId) -> Option<&Rule> {
        self.rules.get(id as usize)
    }

    /// Whether `domain` has a config.
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// The configured domains, sorted.
    pub fn domains(&self) -> Vec<&str> {
        let mut d: Vec<&str> = self.domains.keys().map(String::as_str).collect();
        d.sort_unstable();
        d
    }
}

/// Whether `value` matches `pattern`, where each `*` matches any run of characters (even none).
pub fn wildcard_match(pattern: &str, value: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = value.strip_prefix(first) else {
        return false;
    };
    let pieces: Vec<&str> = parts.collect();
    let Some((last, middle)) = pieces.split_last() else {
        return rest.is_empty();
    };
    for piece in middle {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests;
