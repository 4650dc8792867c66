use super::*;
use sluice_core::{ManualClock, Unit};

/// The embedded store holds at most `max_keys` buckets: full ones make room, and a new key is
/// refused (never a limit reset) while every bucket held is below full.
#[tokio::test]
async fn is_bounded_by_max_keys_without_resetting_a_limit() {
    let clock = ManualClock::at(1);
    let store = MemoryStore::with_max_keys(clock.clone(), 3);
    let rate = Rate::per_unit(10, Unit::Second);
    for key in ["a", "b", "c"] {
        assert_eq!(store.lease(key, rate, 10).await.map(|g| g.granted), Ok(10));
    }
    assert_eq!(store.lease("d", rate, 1).await, Err(StoreError::Full));
    assert_eq!(
        store.lease("a", rate, 1).await.map(|g| g.granted),
        Ok(0),
        "a held key keeps its state"
    );
    store.release("e", rate, 5, 0).await.expect("release");
    assert_eq!(store.len(), 3, "a release on an absent key adds nothing");
    // After a second every bucket is full again: the same as absent, so room for new keys.
    clock.advance_millis(1_000);
    assert_eq!(store.lease("d", rate, 1).await.map(|g| g.granted), Ok(1));
    assert!(store.len() <= 3);
}
