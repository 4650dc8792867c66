//! Building the descriptor trees: [`RuleSet::compile`] checks every domain file as
//! envoyproxy/ratelimit does (empty and duplicate domains and keys, `share_threshold` without a
//! wildcard, `metadata`, `rate_limit` or `rate_limits`) and adds a node per level, with the rules
//! `compile` makes of its limits.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_saphyr::Spanned;

use super::compile::compile_rule;
use super::rule::{Limit, RuleId};
use super::set::{HashMap, Node, RuleSet};
use crate::error::ConfigError;
use crate::schema::{DescriptorConfig, DomainFile, RateLimitConfig};

impl RuleSet {
    /// Compiles and validates domain files (each with the file it came from).
    pub fn compile(domains: &[(PathBuf, DomainFile)]) -> Result<Self, ConfigError> {
        let mut set = RuleSet::default();
        let mut seen: HashMap<&str, (&Path, u64)> = HashMap::default();
        // Every error of every file, not only the first: one run shows them all.
        let mut errors = Vec::new();
        for (file, domain) in domains {
            let name = domain.domain.value.as_str();
            let line = domain.domain.referenced.line();
            if name.is_empty() {
                errors.push(ConfigError::at(
                    file,
                    line,
                    "config file cannot have empty domain",
                ));
                continue;
            }
            if let Some((other, other_line)) = seen.insert(name, (file, line)) {
                errors.push(ConfigError::at(
                    file,
                    line,
                    format!(
                        "duplicate domain '{name}' (also at {}:{other_line})",
                        other.display()
                    ),
                ));
                continue;
            }
            let root = set.new_node();
            set.domains.insert(name.to_string(), root);
            set.add_level(file, name, "", root, &domain.descriptors, &mut errors);
        }
        match ConfigError::all(errors) {
            Some(e) => Err(e),
            None => Ok(set),
        }
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
        errors: &mut Vec<ConfigError>,
    ) {
        for spanned in descriptors {
            if let Err(e) = self.add_descriptor(file, domain, parent_path, parent, spanned, errors)
            {
                errors.push(e);
            }
        }
    }

    /// Adds one descriptor level (and, through [`add_level`](Self::add_level), the levels below
    /// it). Its first error is returned; errors below it go to `errors`.
    fn add_descriptor(
        &mut self,
        file: &Path,
        domain: &str,
        parent_path: &str,
        parent: usize,
        spanned: &Spanned<DescriptorConfig>,
        errors: &mut Vec<ConfigError>,
    ) -> Result<(), ConfigError> {
        let d = &spanned.value;
        let (key, line) = match &d.key {
            Some(k) => (k.value.as_str(), k.referenced.line()),
            None => ("", spanned.referenced.line()),
        };
        if key.is_empty() {
            return Err(ConfigError::at(file, line, "descriptor has empty key"));
        }
        use crate::descriptor::{ESTIMATE_KEY, HOLD_KEY, RELEASE_KEY};
        if [HOLD_KEY, RELEASE_KEY, ESTIMATE_KEY].contains(&key) {
            return Err(ConfigError::at(
                file,
                line,
                format!(
                    "descriptor key '{key}' is reserved: it marks holds and their estimates (docs/concurrency.md)"
                ),
            ));
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
        let previous = match value {
            None => level.any.replace(node),
            Some(v) if v.contains('*') => {
                let previous = level.patterns.iter().find(|(p, _)| p == v).map(|(_, n)| *n);
                level.patterns.push((v.to_string(), node));
                previous
            }
            Some(v) => level.exact.insert(v.to_string(), node),
        };
        self.nodes[node].line = line;
        if let Some(previous) = previous {
            return Err(ConfigError::at(
                file,
                line,
                format!(
                    "duplicate descriptor composite key '{domain}: {path}' (first at line {})",
                    self.nodes[previous].line
                ),
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
            rule.detailed_metric = d.detailed_metric || d.value_to_metric;
            rule.metadata = metadata.clone();
            rule.limits = first..end;
            self.rules.push(rule);
            self.nodes[node].rule = Some(first);
        }
        self.add_level(file, domain, &path, node, &d.descriptors, errors);
        Ok(())
    }
}
