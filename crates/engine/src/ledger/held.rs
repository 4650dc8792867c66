//! What a key's state keeps of each hold taken on it (the holds themselves, taking and giving
//! back, are [`crate::holds`]'s): here, in the ledger, so a key's state needs nothing above it.

/// Where a hold's slots came from, so they go back there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldFrom {
    /// The lease of this epoch (`Rare::hold_epoch`).
    Lease(u32),
    /// The local bucket (local mode, or the `local_share` fallback).
    Local,
    /// Nothing was taken (the `allow` fallback).
    Nothing,
}

/// One request's hold on one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldRecord {
    /// The token the release names (random, never 0).
    pub token: u64,
    /// Slots held.
    pub slots: u64,
    /// When it lapses (µs, engine clock): its rule's hold timeout after it was taken.
    pub until: u64,
    /// Where the slots go back to.
    pub source: HeldFrom,
}
