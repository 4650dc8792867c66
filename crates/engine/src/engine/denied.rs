//! The engine's part of `quota top` ([`crate::top`]): sending this instance's denied counts to
//! the store, and reading the fleet's.

use super::{Engine, KeyFilter, StoreError};

impl Engine {
    /// Adds the hits this instance denied since the last flush to the store's count
    /// ([`crate::top`]). Counts the store did not take are lost (logged): `quota top` is a
    /// view for operators, never a limit.
    pub async fn flush_denied(&self) {
        let mut counts = self.denied.take();
        if counts.is_empty() {
            return;
        }
        // A slot keeps its heaviest members only: lighter ones would be dropped on arrival.
        if counts.len() > crate::top::KEEP_PER_SLOT {
            counts.select_nth_unstable_by(crate::top::KEEP_PER_SLOT, |a, b| b.1.cmp(&a.1));
            counts.truncate(crate::top::KEEP_PER_SLOT);
        }
        let slot = crate::top::slot_of(self.now());
        if let Err(error) = self.store().add_denied(slot, &counts).await {
            tracing::debug!(%error, keys = counts.len(), "denied counts not added to the store");
        }
    }

    /// The keys with the most hits denied over about the last minute, fleet-wide, most first
    /// (at most `n`, of the rules `filter`'s domain and rule select; its prefix is ignored).
    /// This instance's latest counts are flushed first; other instances' are up to
    /// [`FLUSH_EVERY`](crate::top::FLUSH_EVERY) late.
    pub async fn top_denied(
        &self,
        filter: &KeyFilter,
        n: usize,
    ) -> Result<Vec<crate::top::TopRow>, StoreError> {
        use crate::top::{TopRow, WINDOW_SLOTS, slot_of};
        // One of the operator reads of the store: a caller looping on it cannot crowd out the
        // decisions' calls.
        let Some(_place) = self.leaser.operator_read() else {
            return Err(StoreError::Unavailable(
                "too many quota reads in flight; try again".into(),
            ));
        };
        self.flush_denied().await;
        let to = slot_of(self.now());
        let counts = self
            .store()
            .top_denied(to.saturating_sub(WINDOW_SLOTS - 1), to)
            .await?;
        let rules = self.rules();
        let by_identity: std::collections::HashMap<u64, &sluice_core::rules::Rule> =
            rules.rules().iter().map(|r| (r.fingerprint, r)).collect();
        let mut rows: Vec<TopRow> = counts
            .into_iter()
            .filter_map(|(member, denied)| {
                // Every member this code writes is a store key with its values escaped: anything
                // else (written by hand into Redis) is not shown.
                let identity = crate::key::identity_of(&member)?;
                if member.chars().any(char::is_control) {
                    return None;
                }
                let rule = by_identity.get(&identity);
                let (domain, label) = rule.map_or(("", "(a rule not loaded here)"), |r| {
                    (r.domain.as_str(), r.label.as_str())
                });
                filter.matches_rule(domain, label).then(|| TopRow {
                    domain: domain.into(),
                    rule: label.into(),
                    values: crate::key::values_of(&member).into(),
                    denied,
                })
            })
            .collect();
        rows.sort_by(|a, b| {
            b.denied
                .cmp(&a.denied)
                .then_with(|| a.values.cmp(&b.values))
        });
        rows.truncate(n);
        Ok(rows)
    }
}
