//! Descriptor matching and `*` wildcards on any entries: a rule or none, never a panic; a pattern
//! without `*` matches only itself, and a value always matches its own wildcarded forms.

use std::sync::LazyLock;

use arbitrary::{Arbitrary, Unstructured};
use sluice_core::Entry;
use sluice_core::rules::{Match, RuleSet, wildcard_match};

static RULES: LazyLock<RuleSet> = LazyLock::new(|| {
    sluice_core::parse_config(
        r#"
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: "x*y"
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: a
    value: "**"
    descriptors:
      - key: b
        value: "*z*"
        rate_limit: {unit: minute, requests_per_unit: 3}
  - key: a
    value: exact
  - key: "é"
    value: "*"
    rate_limit: {unit: hour, requests_per_unit: 4}
"#,
    )
    .expect("fuzz rules")
    .rules
});

#[derive(Debug, Arbitrary)]
struct Input {
    domain: String,
    entries: Vec<(String, String)>,
    pattern: String,
    value: String,
    cut: (u8, u8),
}

/// One input: `data` read as a [`Input`] the way libFuzzer's typed targets read it (the rest
/// of the bytes feed the last field); bytes too short for one, or that do not make one, are
/// skipped.
pub fn one(data: &[u8]) {
    if data.len() < Input::size_hint(0).0 {
        return;
    }
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let entries: Vec<Entry> = input
        .entries
        .iter()
        .take(64)
        .map(|(k, v)| Entry::new(k.as_str(), v.as_str()))
        .collect();
    if let Match::Rule(rule) = RULES.match_descriptor(&input.domain, &entries) {
        assert_eq!(rule.domain, input.domain);
        assert!(!entries.is_empty());
    }
    if !input.pattern.contains('*') {
        assert_eq!(
            wildcard_match(&input.pattern, &input.value),
            input.pattern == input.value
        );
    }
    // Replacing any slice of a value by `*` gives a pattern that matches it.
    let v = &input.value;
    let (mut lo, mut hi) = (
        input.cut.0 as usize % (v.len() + 1),
        input.cut.1 as usize % (v.len() + 1),
    );
    if lo > hi {
        std::mem::swap(&mut lo, &mut hi);
    }
    if v.is_char_boundary(lo) && v.is_char_boundary(hi) && !v.contains('*') {
        let pattern = format!("{}*{}", &v[..lo], &v[hi..]);
        assert!(wildcard_match(&pattern, v), "{pattern:?} vs {v:?}");
    }
}
