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
//!
//! # Layout
//! - `rule`: what a compiled rule is: [`Rule`], its [`Limit`] and [`Payment`].
//! - `set`: the [`RuleSet`] (every domain's tree) and matching a descriptor against it.
//! - `tree`: [`RuleSet::compile`]: domain files into trees, with upstream's checks.
//! - `compile`: one `rate_limit` into a [`Rule`], and its [`fingerprint`].
//! - `bucket_id`: matching RLQS bucket ids ([`RuleSet::match_bucket_id`]).

mod bucket_id;
mod compile;
mod rule;
mod set;
mod tree;

pub use bucket_id::BucketMatch;
pub use compile::fingerprint;
pub use rule::{Limit, MAX_DEBT, Payment, Reserve, Rule, RuleId};
pub use set::{Match, RuleSet, wildcard_match};

#[cfg(test)]
mod tests;
