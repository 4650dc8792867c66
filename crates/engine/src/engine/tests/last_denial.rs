//! Each key remembers its last denial on this instance and why (issue 25 item 11), for `quota
//! get`: over the limit, by the fallback while the store is down; a pass leaves it as it was.

use sluice_core::Entry;

use super::*;
use crate::decision::LastDenial;

async fn last(e: &Engine, key: &str, value: &str) -> Option<LastDenial> {
    e.quota("d", &[Entry::new(key, value)]).await.last_denial
}

#[tokio::test]
async fn a_key_remembers_when_and_why_it_was_last_denied() {
    let clock = ManualClock::at(5_000_000);
    let store = Forwarding::up(&clock);
    let e = engine_on(store.clone(), &clock, EngineSettings::default());
    let user = [d(&[("user", "u")])];
    assert_eq!(ask(&e, &user).await.overall, Code::Ok);
    assert_eq!(last(&e, "user", "u").await, None, "passed: never denied");
    assert_eq!(ask(&e, &user).await.overall, Code::Ok);
    clock.advance_micros(1_000);
    assert_eq!(ask(&e, &user).await.overall, Code::OverLimit);
    let denied = LastDenial {
        at: 5_001_000,
        reason: Denial::Empty,
        fallback: false,
    };
    assert_eq!(last(&e, "user", "u").await, Some(denied));
    // A later pass keeps it; a later denial replaces it.
    clock.advance_micros(30_000_000);
    assert_eq!(ask(&e, &user).await.overall, Code::Ok);
    assert_eq!(last(&e, "user", "u").await, Some(denied));
    // The store goes down: `deny_when_down` is denied by its fallback.
    store.set(Mode::Down);
    let down = [d(&[("deny_when_down", "z")])];
    assert_eq!(ask(&e, &down).await.overall, Code::OverLimit);
    assert_eq!(
        last(&e, "deny_when_down", "z").await,
        Some(LastDenial {
            at: clock.now_micros(),
            reason: Denial::StoreDown,
            fallback: true,
        })
    );
}
