//! Matching RLQS bucket ids to rules.
//!
//! Envoy's rate limit quota filter names each bucket with a map of strings (its `BucketId`), whose
//! order means nothing: `{a: A, b: B}` and `{b: B, a: A}` are one bucket. A descriptor is an
//! ordered list. So a bucket id matches the rule whose descriptor path uses exactly the id's keys,
//! in whatever order the domain's tree has them: the same rule then serves RLS and ext_authz (one
//! ordered descriptor) and RLQS (the same entries as a map), with one global bucket.
//!
//! At each level of the tree the id's unused entries are tried in key order, each matched as a
//! descriptor entry would be (exact value, then patterns, then any value). The first path that
//! uses every entry and ends on a `rate_limit` wins; a path that uses every entry but ends on a
//! level without one exempts the bucket, as it would exempt the descriptor. The search only walks
//! paths the tree has, so it costs at most one visit per tree node.

use super::set::{Match, RuleSet};
use crate::descriptor::Entry;

/// What a bucket id matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketMatch<'a> {
    /// No config for the domain.
    UnknownDomain,
    /// No rule uses exactly these keys (or an exempting level does).
    NoRule,
    /// This rule, with the id's entries in the rule's order (the descriptor RLS would send), as
    /// its bucket is keyed (a `share_threshold` pattern in place of the values it matches).
    Rule(&'a super::rule::Rule, Vec<Entry>),
}

impl RuleSet {
    /// Finds the rule for a bucket id's `entries` (any order, distinct keys) in `domain`.
    pub fn match_bucket_id(&self, domain: &str, entries: &[Entry]) -> BucketMatch<'_> {
        let Some(&root) = self.domains.get(domain) else {
            return BucketMatch::UnknownDomain;
        };
        if entries.is_empty() {
            return BucketMatch::NoRule;
        }
        let mut sorted: Vec<&Entry> = entries.iter().collect();
        sorted.sort_by(|a, b| a.key.cmp(&b.key).then_with(|| a.value.cmp(&b.value)));
        let mut used = vec![false; sorted.len()];
        let mut path = Vec::with_capacity(sorted.len());
        match self.search(root, &sorted, &mut used, &mut path) {
            Some(Match::Rule(rule)) => {
                let ordered: Vec<Entry> = path.iter().map(|&i| sorted[i].clone()).collect();
                // Keyed as RLS keys the same descriptor (`share_threshold` patterns for values).
                let keyed = self.match_keyed(domain, &ordered).1.into_owned();
                BucketMatch::Rule(rule, keyed)
            }
            _ => BucketMatch::NoRule,
        }
    }

    /// Depth-first search from `node` for a path using every unused entry: `Some(Rule)` on the
    /// first rule found (with `path` holding the order), `Some(NoRule)` if only exempting levels
    /// were found, `None` if no path uses every entry.
    fn search(
        &self,
        node: usize,
        entries: &[&Entry],
        used: &mut [bool],
        path: &mut Vec<usize>,
    ) -> Option<Match<'_>> {
        if path.len() == entries.len() {
            return Some(match self.nodes[node].rule {
                Some(id) => Match::Rule(&self.rules[id as usize]),
                None => Match::NoRule,
            });
        }
        let mut exempt = None;
        for i in 0..entries.len() {
            if used[i] {
                continue;
            }
            let entry = entries[i];
            let Some(level) = self.nodes[node].children.get(&entry.key) else {
                continue;
            };
            let Some(next) = level.find(&entry.value) else {
                continue;
            };
            used[i] = true;
            path.push(i);
            match self.search(next, entries, used, path) {
                Some(found @ Match::Rule(_)) => return Some(found),
                Some(other) => exempt = exempt.or(Some(other)),
                None => {}
            }
            path.pop();
            used[i] = false;
        }
        exempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_config;

    fn rules(yaml: &str) -> RuleSet {
        let config = parse_config(yaml).expect("config");
        config.rules
    }

    fn id(pairs: &[(&str, &str)]) -> Vec<Entry> {
        pairs.iter().map(|(k, v)| Entry::new(*k, *v)).collect()
    }

    fn matched(set: &RuleSet, pairs: &[(&str, &str)]) -> Option<(String, Vec<(String, String)>)> {
        match set.match_bucket_id("api", &id(pairs)) {
            BucketMatch::Rule(rule, entries) => Some((
                rule.path.clone(),
                entries.into_iter().map(|e| (e.key, e.value)).collect(),
            )),
            _ => None,
        }
    }

    const YAML: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: tenant
        rate_limit: { unit: second, requests_per_unit: 10 }
        descriptors:
          - key: route
            value: chat
            rate_limit: { unit: second, requests_per_unit: 5 }
          - key: route
            value: "img*"
            rate_limit: { unit: second, requests_per_unit: 3 }
          - key: route
            value: free
      - key: route
        descriptors:
          - key: method
            rate_limit: { unit: second, requests_per_unit: 7 }
"#;

    #[test]
    fn a_bucket_id_in_any_order_finds_the_rule_and_its_order() {
        let set = rules(YAML);
        let want = Some((
            "tenant > route=chat".to_string(),
            vec![
                ("tenant".to_string(), "acme".to_string()),
                ("route".to_string(), "chat".to_string()),
            ],
        ));
        assert_eq!(
            matched(&set, &[("route", "chat"), ("tenant", "acme")]),
            want
        );
        assert_eq!(
            matched(&set, &[("tenant", "acme"), ("route", "chat")]),
            want
        );
        assert_eq!(
            matched(&set, &[("route", "img-large"), ("tenant", "acme")]).map(|m| m.0),
            Some("tenant > route=img*".to_string())
        );
        assert_eq!(
            matched(&set, &[("tenant", "acme")]).map(|m| m.0),
            Some("tenant".to_string())
        );
        assert_eq!(
            matched(&set, &[("method", "GET"), ("route", "x")]).map(|m| m.0),
            Some("route > method".to_string())
        );
    }

    #[test]
    fn ids_with_other_keys_or_exempting_levels_match_nothing() {
        let set = rules(YAML);
        // An exempting level (no rate_limit) exempts the bucket.
        assert_eq!(
            matched(&set, &[("tenant", "acme"), ("route", "free")]),
            None
        );
        // A route the tree does not list under tenant, and keys the tree does not use.
        assert_eq!(
            matched(&set, &[("tenant", "acme"), ("route", "other")]),
            None
        );
        assert_eq!(matched(&set, &[("tenant", "acme"), ("user", "u")]), None);
        assert_eq!(matched(&set, &[("route", "x")]), None);
        assert_eq!(matched(&set, &[]), None);
        assert!(matches!(
            set.match_bucket_id("other", &id(&[("tenant", "a")])),
            BucketMatch::UnknownDomain
        ));
    }

    #[test]
    fn the_match_agrees_with_the_descriptor_it_returns() {
        let set = rules(YAML);
        for pairs in [
            &[("route", "chat"), ("tenant", "t")][..],
            &[("tenant", "t"), ("route", "imgx")][..],
            &[("method", "POST"), ("route", "r")][..],
        ] {
            let BucketMatch::Rule(rule, entries) = set.match_bucket_id("api", &id(pairs)) else {
                panic!("{pairs:?} matched nothing");
            };
            let Match::Rule(again) = set.match_descriptor("api", &entries) else {
                panic!("{entries:?} does not match as a descriptor");
            };
            assert_eq!(rule.id, again.id);
        }
    }
}
