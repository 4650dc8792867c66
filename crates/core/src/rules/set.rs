//! The compiled [`RuleSet`]: every domain's descriptor tree, and matching a request's
//! descriptor against it (exact value, then `*` patterns, then any value).

use std::borrow::Cow;
use std::collections::HashMap as StdHashMap;

use super::rule::{Rule, RuleId};
use crate::descriptor::Entry;
use crate::schema::LimitOverrides;

/// Maps on the decision path hash with foldhash (fast, seeded per process).
pub(super) type HashMap<K, V> = StdHashMap<K, V, foldhash::fast::RandomState>;

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
    pub(super) domains: HashMap<String, usize>,
    pub(super) nodes: Vec<Node>,
    pub(super) rules: Vec<Rule>,
    /// Which caller-supplied limits apply (`limit_overrides:`).
    limit_overrides: LimitOverrides,
}

#[derive(Debug, Default)]
pub(super) struct Node {
    pub(super) rule: Option<RuleId>,
    pub(super) children: HashMap<String, KeyLevel>,
    /// `share_threshold`: the wildcard value that reaches this node, which stands for every
    /// value it matches in bucket keys (one bucket for all of them).
    pub(super) shared: Option<Box<str>>,
    /// Where this level is written (its file's line), for an error naming both places of a
    /// duplicate.
    pub(super) line: u64,
}

#[derive(Debug, Default)]
pub(super) struct KeyLevel {
    pub(super) exact: HashMap<String, usize>,
    pub(super) patterns: Vec<(String, usize)>,
    pub(super) any: Option<usize>,
}

impl KeyLevel {
    /// The node `value` leads to: an exact value first, then `*` patterns in file order, then the
    /// key without a value.
    pub(super) fn find(&self, value: &str) -> Option<usize> {
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
