//! Request limits, and Envoy's descriptors turned into the engine's.
//!
//! Bad requests get `INVALID_ARGUMENT` with a message saying what is wrong; they never reach the
//! engine, so a hostile caller cannot make sluice track unbounded keys or values.

use sluice_core::descriptor::{Hold, LimitOverride};
use sluice_core::{Descriptor, Entry, Unit};
use sluice_proto::envoy::common_ratelimit::RateLimitDescriptor;
use tonic::Status;

/// Most descriptors in one request.
pub const MAX_DESCRIPTORS: usize = 64;
/// Most entries in one descriptor.
pub const MAX_ENTRIES: usize = 64;
/// Longest entry key, in bytes. Values may be longer: the engine keeps a long value in its keys
/// as a prefix and a digest, so each still has a bucket of its own at a bounded size.
pub const MAX_ENTRY_BYTES: usize = 1024;

/// Checks a request domain.
pub fn domain(domain: &str) -> Result<(), Status> {
    if domain.is_empty() {
        return Err(Status::invalid_argument(
            "rate limit domain must not be empty",
        ));
    }
    if domain.len() > MAX_ENTRY_BYTES {
        return Err(Status::invalid_argument(format!(
            "rate limit domain is {} bytes; the limit is {MAX_ENTRY_BYTES}",
            domain.len()
        )));
    }
    Ok(())
}

/// Converts and checks Envoy's descriptors.
pub fn descriptors(descriptors: &[RateLimitDescriptor]) -> Result<Vec<Descriptor>, Status> {
    if descriptors.is_empty() {
        return Err(Status::invalid_argument(
            "rate limit descriptor list must not be empty",
        ));
    }
    if descriptors.len() > MAX_DESCRIPTORS {
        return Err(Status::invalid_argument(format!(
            "{} descriptors in one request; the limit is {MAX_DESCRIPTORS}",
            descriptors.len()
        )));
    }
    descriptors
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if d.is_negative_hits {
                return Err(Status::invalid_argument(format!(
                    "descriptor {i}: is_negative_hits is not supported"
                )));
            }
            let entries = d
                .entries
                .iter()
                .map(|e| Entry::new(e.key.as_str(), e.value.as_str()))
                .collect::<Vec<_>>();
            check_entries(&format_args!("descriptor {i}"), &entries)?;
            let limit_override = match &d.limit {
                None => None,
                Some(l) => Some(LimitOverride {
                    requests_per_unit: u64::from(l.requests_per_unit),
                    unit: Unit::from_envoy_code(l.unit).ok_or_else(|| {
                        Status::invalid_argument(format!(
                            "descriptor {i}: limit override has unknown unit {}",
                            l.unit
                        ))
                    })?,
                }),
            };
            let mut descriptor = Descriptor {
                entries,
                hits_addend: d.hits_addend.map(|h| h.value),
                limit_override,
                hold: Hold::None,
                estimate: None,
            };
            // A trailing `sluice-hold` entry acquires or releases (docs/concurrency.md).
            descriptor.take_hold_entry();
            Ok(descriptor)
        })
        .collect()
}

/// Checks one descriptor's entries (also used for descriptors built by ext_authz and for RLQS
/// bucket ids); `what` names it in errors (`descriptor 2`, `bucket_id`).
pub fn check_entries(what: &dyn std::fmt::Display, entries: &[Entry]) -> Result<(), Status> {
    if entries.is_empty() {
        return Err(Status::invalid_argument(format!("{what} has no entries")));
    }
    if entries.len() > MAX_ENTRIES {
        return Err(Status::invalid_argument(format!(
            "{what} has {} entries; the limit is {MAX_ENTRIES}",
            entries.len()
        )));
    }
    for (j, e) in entries.iter().enumerate() {
        if e.key.is_empty() {
            return Err(Status::invalid_argument(format!(
                "{what} entry {j} has an empty key"
            )));
        }
        if e.key.len() > MAX_ENTRY_BYTES {
            return Err(Status::invalid_argument(format!(
                "{what} entry {j} ('{}…'): key is {} bytes; the limit is {MAX_ENTRY_BYTES}",
                truncate(&e.key, 64),
                e.key.len()
            )));
        }
    }
    Ok(())
}

/// The first `max` characters of `s` (for echoing client input in errors).
pub fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((at, _)) => &s[..at],
        None => s,
    }
}
