use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;

use super::*;

fn limits() -> Limits {
    Limits {
        request_bytes: 1_000,
        request_bytes_per_peer: 600,
        request_bytes_per_connection: 400,
        reflection_streams: StreamCaps {
            total: 5,
            per_peer: 3,
            per_connection: 2,
            idle: std::time::Duration::from_secs(60),
        },
        ..Limits::default()
    }
}

fn refused() -> IntCounterVec {
    IntCounterVec::new(prometheus::Opts::new("r", "r"), &["bound"]).expect("metric")
}

fn ip(n: u8) -> Option<IpAddr> {
    Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, n)))
}

/// A refusal by one scope leaves nothing taken in the others (all or nothing), names the scope,
/// and is counted under its bound.
#[test]
fn a_refusal_takes_nothing_and_is_counted() {
    let refusals = refused();
    let admission = Admission::new(&limits(), &refusals);
    let a = admission.connection(ip(1));
    let b = admission.connection(ip(1));
    let held = a.charge(400).expect("the connection's whole share");
    let err = a.charge(1).expect_err("the connection is full");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert!(err.message().contains("on this connection"), "{err}");
    // The peer's share is 600: 200 left for the second connection.
    let err = b.charge(201).expect_err("the address is full");
    assert!(err.message().contains("from this address"), "{err}");
    assert_eq!(
        b.0.connection.bytes(),
        0,
        "nothing left taken on the connection"
    );
    assert_eq!(admission.usage().bytes(), 400);
    let (other, another) = (admission.connection(ip(2)), admission.connection(ip(2)));
    let _big = (
        other.charge(400).expect("another address"),
        another.charge(200).expect("another address"),
    );
    let third = admission.connection(ip(3));
    let err = third.charge(1).expect_err("all clients are at 1 000");
    assert!(err.message().contains("on this server"), "{err}");
    let count = |b: &str| refusals.with_label_values(&[b]).get();
    assert_eq!(count("request_bytes_per_connection"), 1);
    assert_eq!(count("request_bytes_per_peer"), 1);
    assert_eq!(count("request_bytes"), 1);
    drop(held);
    assert_eq!(admission.usage().bytes(), 600);
    assert_eq!(a.0.peer.usage.bytes(), 0);
}

/// Long-lived calls are capped per connection, per address and in all, and a place comes back
/// when its call ends.
#[test]
fn long_calls_are_capped_in_each_scope() {
    let refusals = refused();
    let admission = Admission::new(&limits(), &refusals);
    let (a1, a2, b) = (
        admission.connection(ip(1)),
        admission.connection(ip(1)),
        admission.connection(ip(2)),
    );
    let kind = LongKind::Reflection;
    let mut open = vec![
        a1.open_long(kind).expect("1"),
        a1.open_long(kind).expect("2"),
    ];
    assert!(a1.open_long(kind).is_err(), "2 per connection");
    open.push(a2.open_long(kind).expect("3"));
    let err = a2.open_long(kind).expect_err("3 per address");
    assert!(
        err.message()
            .contains("reflection streams from this address"),
        "{err}"
    );
    open.push(b.open_long(kind).expect("4"));
    open.push(b.open_long(kind).expect("5"));
    let c = admission.connection(ip(3));
    assert!(c.open_long(kind).is_err(), "5 in all");
    assert!(
        c.open_long(LongKind::Rlqs).is_ok(),
        "other kinds count apart"
    );
    assert_eq!(admission.usage().long(kind), 5);
    open.pop();
    assert!(c.open_long(kind).is_ok(), "a place came back");
    assert_eq!(refusals.with_label_values(&["reflection_streams"]).get(), 1);
}

/// An address leaves the table with its last connection (and its last call), so the table does
/// not grow with every address ever seen.
#[test]
fn addresses_leave_with_their_last_connection() {
    let admission = Admission::new(&limits(), &refused());
    let scopes = admission.connection(ip(9));
    let charge = scopes.charge(10).expect("room");
    drop(scopes);
    assert_eq!(
        admission.peers.lock().expect("lock").len(),
        1,
        "a call holds it"
    );
    drop(charge);
    assert!(admission.peers.lock().expect("lock").is_empty());
    // A new connection from the same address starts afresh.
    let again = admission.connection(ip(9));
    assert_eq!(again.0.peer.usage.bytes(), 0);
}

#[derive(Debug, Clone)]
enum Op {
    /// Open a call on connection `c` costing `n`.
    Open(usize, usize),
    /// Grow call `i` (modulo the open ones) by `n`.
    Grow(usize, usize),
    /// Shrink call `i` by `n`.
    Shrink(usize, usize),
    /// End call `i`.
    End(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4usize, 0..300usize).prop_map(|(c, n)| Op::Open(c, n)),
        (any::<usize>(), 0..300usize).prop_map(|(i, n)| Op::Grow(i, n)),
        (any::<usize>(), 0..400usize).prop_map(|(i, n)| Op::Shrink(i, n)),
        any::<usize>().prop_map(Op::End),
    ]
}

proptest! {
    /// Whatever calls open, grow, shrink and end: no scope ever holds more than its bound, each
    /// holds exactly what its calls hold, and everything is given back in the end.
    #[test]
    fn bounds_hold_and_nothing_leaks(ops in prop::collection::vec(op(), 1..200)) {
        let admission = Admission::new(&limits(), &refused());
        // Connections 0 and 1 from one address, 2 and 3 from another.
        let connections: Vec<Scopes> =
            (0..4).map(|c| admission.connection(ip(1 + c as u8 / 2))).collect();
        let mut calls: Vec<(usize, Charge, usize)> = Vec::new();
        for op in ops {
            match op {
                Op::Open(c, n) => {
                    if let Ok(charge) = connections[c].charge(n) {
                        calls.push((c, charge, n));
                    }
                }
                Op::Grow(i, n) if !calls.is_empty() => {
                    let len = calls.len();
                    let (_, charge, held) = &mut calls[i % len];
                    if charge.grow(n).is_ok() {
                        *held += n;
                    }
                }
                Op::Shrink(i, n) if !calls.is_empty() => {
                    let len = calls.len();
                    let (_, charge, held) = &mut calls[i % len];
                    charge.shrink(n);
                    *held -= n.min(*held);
                }
                Op::End(i) if !calls.is_empty() => {
                    let len = calls.len();
                    calls.swap_remove(i % len);
                }
                _ => {}
            }
            let on = |c: usize| calls.iter().filter(|(k, ..)| *k == c).map(|(.., n)| n).sum::<usize>();
            for (c, scopes) in connections.iter().enumerate() {
                prop_assert_eq!(scopes.0.connection.bytes(), on(c));
                prop_assert!(on(c) <= 400);
            }
            prop_assert_eq!(connections[0].0.peer.usage.bytes(), on(0) + on(1));
            prop_assert_eq!(connections[2].0.peer.usage.bytes(), on(2) + on(3));
            prop_assert!(on(0) + on(1) <= 600 && on(2) + on(3) <= 600);
            prop_assert_eq!(admission.usage().bytes(), (0..4).map(on).sum::<usize>());
            prop_assert!(admission.usage().bytes() <= 1_000);
        }
        drop(calls);
        prop_assert_eq!(admission.usage().bytes(), 0);
    }
}
