//! YAML text into the model: the parser's errors as `file:line: message` (naming the field and
//! the value where the parser does not), every error of a file in one run, and one document
//! per file.
//!
//! serde stops at a file's first error. To find the next ones, the list item holding the error
//! (a descriptor, a domain, an authz descriptor) is blanked out, keeping every line number, and
//! the file is parsed again: up to [`MOST_ERRORS`] errors, each where the user wrote it. What
//! parses is then checked as usual, so a file's type errors and its rule errors come together.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde_saphyr::budget::BudgetBreach;

use crate::error::ConfigError;

/// Errors reported from one file at most; past them, fix what is shown first.
const MOST_ERRORS: usize = 20;

/// YAML nodes (mappings, sequences, scalars) one file may hold. The parser's default (250 000)
/// refused files of more than about 22 000 descriptor values, common in envoyproxy/ratelimit
/// configs with an entry per customer. The bound stays, sized for real files (about 480 000
/// descriptor values; the file size is bounded by 64 MiB anyway), against a small file that
/// YAML aliases expand into a huge one (which the alias budgets bound too).
const MOST_NODES: usize = 4_000_000;

/// Parses YAML into `T`, turning the parser's error into `file:line: message`.
pub(crate) fn parse_yaml<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, ConfigError> {
    match parse_all_errors(path, text) {
        (Some(doc), errors) if errors.is_empty() => Ok(doc),
        (_, errors) => {
            Err(ConfigError::all(errors)
                .unwrap_or_else(|| ConfigError::at(path, 0, "invalid YAML")))
        }
    }
}

/// Parses YAML into `T`, finding every error of the file: the document made of what parses
/// (`None` if nothing can be recovered), and the errors, in the order found.
pub(crate) fn parse_all_errors<T: DeserializeOwned>(
    path: &Path,
    text: &str,
) -> (Option<T>, Vec<ConfigError>) {
    let tabs = tab_indents(path, text);
    if !tabs.is_empty() {
        // A tab in an indentation shifts the structure: what follows would be misread.
        return (None, tabs);
    }
    let mut errors = Vec::new();
    let mut text = text.to_string();
    loop {
        match parse_one(path, &text) {
            Ok(doc) => return (Some(doc), errors),
            Err(e) => {
                let line = usize::try_from(e.line).unwrap_or(0);
                errors.push(e);
                match blank_item(&text, line) {
                    Some(next) if errors.len() < MOST_ERRORS => text = next,
                    _ => return (None, errors),
                }
            }
        }
    }
}

fn parse_one<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, ConfigError> {
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_nodes: MOST_NODES,
            max_events: 2 * MOST_NODES,
        },
    };
    let docs: Vec<T> = serde_saphyr::from_multiple_with_options(text, options).map_err(|e| {
        ConfigError::at(
            path,
            e.location().map_or(0, |l| l.line()),
            message(&e, text),
        )
    })?;
    let count = docs.len();
    let mut docs = docs.into_iter();
    match (docs.next(), count) {
        (Some(doc), 1) => Ok(doc),
        (None, _) => Err(ConfigError::at(path, 0, "holds no YAML document")),
        _ => Err(ConfigError::at(
            path,
            0,
            format!(
                "holds {count} YAML documents; write one per file (envoyproxy/ratelimit would silently read only the first)"
            ),
        )),
    }
}

/// The parser's message, completed: the field and value of a type error, a duplicate key
/// without the parser's advice to its programmer, a budget explained.
fn message(e: &serde_saphyr::Error, text: &str) -> String {
    let e = e.without_snippet();
    if let serde_saphyr::Error::Budget { breach, .. } = e {
        return match breach {
            BudgetBreach::Nodes { .. } => format!(
                "more than {MOST_NODES} YAML nodes in one file (about 480 000 descriptor values): \
                 split it into several files (a directory, or `include:`); each file is counted alone"
            ),
            other => format!(
                "the YAML is larger than sluice reads in one file ({other:?}): aliases expanding \
                 into many copies, or a very large file; split it into several files"
            ),
        };
    }
    let rendered = e.to_string();
    let first = rendered.lines().next().unwrap_or("invalid YAML").trim();
    // The location goes in front (`file:line:`), not again at the end.
    let first = match first.rfind(" at line ") {
        Some(at) if first[at..].contains(", column ") => &first[..at],
        _ => first,
    };
    if first.contains("budget breached") {
        // A budget breached inside an alias's expansion comes wrapped in the alias's error.
        return "the YAML is larger than sluice reads in one file (aliases expanding into many \
                copies, or a very large file): split it into several files"
            .to_string();
    }
    if let Some(key) = first
        .strip_prefix("duplicate mapping key: ")
        .and_then(|rest| rest.split(", set DuplicateKeyPolicy").next())
    {
        return format!("`{key}` is given twice in one mapping: write each key once");
    }
    let expected = match first {
        "invalid u32" => "a whole number from 0 to 4294967295",
        "invalid u64" => "a whole number from 0 to 18446744073709551615",
        "invalid boolean" => "true or false",
        _ => return first.to_string(),
    };
    match e
        .location()
        .and_then(|l| field_at(text, l.line(), l.column()))
    {
        Some((field, value)) => format!("{field}: {value:?} is not {expected}"),
        None => format!("{first}: expected {expected}"),
    }
}

/// The key and the value written at `line`, `column` (1-based): `requests_per_unit: ten` and
/// `{unit: second, requests_per_unit: ten}` both give `("requests_per_unit", "ten")`.
fn field_at(text: &str, line: u64, column: u64) -> Option<(String, String)> {
    let source = text
        .lines()
        .nth(usize::try_from(line).ok()?.checked_sub(1)?)?;
    let at = source
        .char_indices()
        .nth(usize::try_from(column).ok()?.checked_sub(1)?)?
        .0;
    let (before, after) = source.split_at(at);
    let key = before.trim_end().strip_suffix(':')?;
    let key = key.rsplit(['{', ',', ' ', '-']).next()?.trim();
    let value = after
        .split([',', '}', '#'])
        .next()
        .unwrap_or_default()
        .trim();
    (!key.is_empty()).then(|| (key.to_string(), value.to_string()))
}

/// Every line whose indentation holds a tab: YAML indents with spaces only, and the parser's
/// own error names the line before.
fn tab_indents(path: &Path, text: &str) -> Vec<ConfigError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            l.chars()
                .take_while(|c| c.is_whitespace())
                .any(|c| c == '\t')
        })
        .take(MOST_ERRORS)
        .map(|(i, _)| {
            ConfigError::at(
                path,
                i as u64 + 1,
                "a tab in the indentation: YAML indents with spaces only",
            )
        })
        .collect()
}

/// `text` with the block-sequence item that holds `line` (1-based) replaced by empty lines
/// (line numbers stay), or `None` if no item holds it (an error outside any list, or in a flow
/// collection of its own line that is not in one).
fn blank_item(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.split('\n').collect();
    let indent = |l: &str| l.len() - l.trim_start_matches(' ').len();
    let is_item = |l: &str| {
        let t = l.trim_start_matches(' ');
        t == "-" || t.starts_with("- ")
    };
    let skip = |l: &str| l.trim().is_empty() || l.trim_start().starts_with('#');
    let mut at = line.checked_sub(1).filter(|&i| i < lines.len())?;
    // Walk up to the item: a line less indented than the last one seen is a parent; the first
    // parent that is an item (or the line itself) holds the error.
    let mut depth = indent(lines[at]);
    while !is_item(lines[at]) {
        at = at.checked_sub(1)?;
        let l = lines[at];
        if skip(l) || indent(l) >= depth {
            continue;
        }
        if !is_item(l) {
            depth = indent(l);
        }
    }
    let start = at;
    let dash = indent(lines[start]);
    let mut end = start + 1;
    while end < lines.len() && (skip(lines[end]) || indent(lines[end]) > dash) {
        end += 1;
    }
    let mut out: Vec<&str> = lines[..start].to_vec();
    out.extend(std::iter::repeat_n("", end - start));
    out.extend_from_slice(&lines[end..]);
    Some(out.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_item_holding_a_line_is_blanked_and_lines_keep_their_numbers() {
        let text =
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: x\n  - key: b\n";
        let out = blank_item(text, 5).expect("an item holds line 5");
        assert_eq!(out, "domain: d\ndescriptors:\n\n\n\n  - key: b\n");
        // An item at the parent's own indentation, a nested item (only it goes).
        let text = "descriptors:\n- key: a\n  descriptors:\n  - key: b\n    value: x\n- key: c\n";
        assert_eq!(
            blank_item(text, 5).expect("item"),
            "descriptors:\n- key: a\n  descriptors:\n\n\n- key: c\n"
        );
        // Outside any list: nothing to blank.
        assert_eq!(blank_item("redis:\n  timeout: x\n", 2), None);
        assert_eq!(blank_item("include: [a]\nredis:\n  timeout: x\n", 3), None);
        assert_eq!(blank_item("a: 1\n", 9), None);
    }

    #[test]
    fn a_type_error_names_its_field_and_value() {
        assert_eq!(
            field_at(
                "    rate_limit: {unit: second, requests_per_unit: ten}",
                1,
                51
            ),
            Some(("requests_per_unit".into(), "ten".into()))
        );
        assert_eq!(
            field_at("  requests_per_unit: -1   # comment", 1, 22),
            Some(("requests_per_unit".into(), "-1".into()))
        );
    }
}
