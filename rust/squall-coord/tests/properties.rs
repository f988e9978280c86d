//! Random interleavings of every primitive's events across a few holders and names,
//! with `validate()` after each event and, over the whole run: every request answered
//! exactly once, holds and releases balanced per owner and key, no lease of a
//! semaphore given beyond its `max_leases`, and the same events giving the same
//! commands.

use proptest::prelude::*;
use squall_coord::{Batch, Command, Coord, Outcome, Owner, Value};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        h: u32,
        name: u8,
        timeout: Option<u8>,
    },
    Release {
        h: u32,
        name: u8,
        pick: u8,
    },
    Value {
        h: u32,
        name: u8,
    },
    Close {
        h: u32,
        name: u8,
    },
    MultiAcquire {
        h: u32,
        names: Vec<u8>,
        num: Option<u8>,
        timeout: Option<u8>,
    },
    MultiRelease {
        h: u32,
        pick: u8,
    },
    Wait {
        h: u32,
        name: u8,
        timeout: Option<u8>,
    },
    Set {
        h: u32,
        name: u8,
    },
    Clear {
        h: u32,
        name: u8,
    },
    VarSet {
        h: u32,
        name: u8,
        keys: Vec<u8>,
    },
    VarGet {
        h: u32,
        name: u8,
        timeout: Option<u8>,
    },
    VarDelete {
        h: u32,
        name: u8,
    },
    Put {
        h: u32,
        name: u8,
        keys: Vec<u8>,
        timeout: Option<u8>,
    },
    Get {
        h: u32,
        name: u8,
        batch: u8,
        timeout: Option<u8>,
    },
    QClose {
        h: u32,
        name: u8,
    },
    Gone {
        h: u32,
    },
    Advance {
        dt: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let h = 0u32..4;
    let name = 0u8..2;
    let t = proptest::option::of(0u8..4);
    let keys = proptest::collection::vec(0u8..5, 0..3);
    prop_oneof![
        (h.clone(), name.clone(), t.clone()).prop_map(|(h, name, timeout)| Op::Acquire {
            h,
            name,
            timeout
        }),
        (h.clone(), name.clone(), any::<u8>()).prop_map(|(h, name, pick)| Op::Release {
            h,
            name,
            pick
        }),
        (h.clone(), name.clone()).prop_map(|(h, name)| Op::Value { h, name }),
        (h.clone(), name.clone()).prop_map(|(h, name)| Op::Close { h, name }),
        (
            h.clone(),
            proptest::collection::vec(0u8..3, 0..3),
            proptest::option::of(0u8..3),
            t.clone()
        )
            .prop_map(|(h, names, num, timeout)| Op::MultiAcquire {
                h,
                names,
                num,
                timeout
            }),
        (h.clone(), any::<u8>()).prop_map(|(h, pick)| Op::MultiRelease { h, pick }),
        (h.clone(), name.clone(), t.clone()).prop_map(|(h, name, timeout)| Op::Wait {
            h,
            name,
            timeout
        }),
        (h.clone(), name.clone()).prop_map(|(h, name)| Op::Set { h, name }),
        (h.clone(), name.clone()).prop_map(|(h, name)| Op::Clear { h, name }),
        (h.clone(), name.clone(), keys.clone()).prop_map(|(h, name, keys)| Op::VarSet {
            h,
            name,
            keys
        }),
        (h.clone(), name.clone(), t.clone()).prop_map(|(h, name, timeout)| Op::VarGet {
            h,
            name,
            timeout
        }),
        (h.clone(), name.clone()).prop_map(|(h, name)| Op::VarDelete { h, name }),
        (h.clone(), name.clone(), keys, t.clone()).prop_map(|(h, name, keys, timeout)| Op::Put {
            h,
            name,
            keys,
            timeout
        }),
        (h.clone(), name.clone(), 0u8..4, t).prop_map(|(h, name, batch, timeout)| Op::Get {
            h,
            name,
            batch,
            timeout
        }),
        (h.clone(), name).prop_map(|(h, name)| Op::QClose { h, name }),
        h.prop_map(|h| Op::Gone { h }),
        (0u8..3).prop_map(|dt| Op::Advance { dt }),
    ]
}

/// What the run has seen, checked as commands come out.
#[derive(Default)]
struct World {
    next: u64,
    open: BTreeSet<(u32, u64)>,
    /// Granted semaphore acquires not yet released: (holder, name) → lease ids.
    leases: BTreeMap<(u32, u8), Vec<u64>>,
    acquires: BTreeMap<(u32, u64), u8>,
    multi: BTreeMap<u32, Vec<u64>>,
    multi_open: BTreeSet<(u32, u64)>,
    held: BTreeMap<Owner, BTreeSet<u8>>,
    log: Vec<Command<u8>>,
}

fn timeout(t: Option<u8>) -> Option<f64> {
    t.map(|t| f64::from(t) * 0.5)
}

fn run(ops: &[Op]) -> Result<Vec<Command<u8>>, TestCaseError> {
    let mut c: Coord<u8> = Coord::new();
    let mut w = World::default();
    let mut now = 0.0;
    let maxes = [1u32, 2];
    for op in ops {
        w.next += 1;
        let r = w.next;
        let asked = |w: &mut World, h: u32| {
            w.open.insert((h, r));
        };
        match op.clone() {
            Op::Acquire {
                h,
                name,
                timeout: t,
            } => {
                asked(&mut w, h);
                w.acquires.insert((h, r), name);
                c.semaphore_acquire(
                    h,
                    r,
                    &format!("s{name}"),
                    maxes[name as usize],
                    timeout(t),
                    now,
                );
            }
            Op::Release { h, name, pick } => {
                asked(&mut w, h);
                let lease = w
                    .leases
                    .get_mut(&(h, name))
                    .filter(|l| !l.is_empty())
                    .map(|l| l.remove(pick as usize % l.len()))
                    .unwrap_or(u64::MAX);
                c.semaphore_release(h, r, &format!("s{name}"), lease, now);
            }
            Op::Value { h, name } => {
                asked(&mut w, h);
                c.semaphore_value(h, r, &format!("s{name}"), now);
            }
            Op::Close { h, name } => {
                asked(&mut w, h);
                w.leases.retain(|(_, n), _| *n != name);
                c.semaphore_close(h, r, &format!("s{name}"), now);
            }
            Op::MultiAcquire {
                h,
                names,
                num,
                timeout: t,
            } => {
                asked(&mut w, h);
                w.multi_open.insert((h, r));
                let names: Vec<String> = names.iter().map(|n| format!("m{n}")).collect();
                c.multi_lock_acquire(h, r, &names, num.map(usize::from), timeout(t), now);
            }
            Op::MultiRelease { h, pick } => {
                asked(&mut w, h);
                let lease = w
                    .multi
                    .get_mut(&h)
                    .filter(|l| !l.is_empty())
                    .map(|l| l.remove(pick as usize % l.len()))
                    .unwrap_or(u64::MAX);
                c.multi_lock_release(h, r, lease, now);
            }
            Op::Wait {
                h,
                name,
                timeout: t,
            } => {
                asked(&mut w, h);
                c.event_wait(h, r, &format!("e{name}"), timeout(t), now);
            }
            Op::Set { h, name } => {
                asked(&mut w, h);
                c.event_set(h, r, &format!("e{name}"), now);
            }
            Op::Clear { h, name } => {
                asked(&mut w, h);
                c.event_clear(h, r, &format!("e{name}"), now);
            }
            Op::VarSet { h, name, keys } => {
                asked(&mut w, h);
                c.variable_set(
                    h,
                    r,
                    &format!("v{name}"),
                    Value {
                        data: vec![name],
                        keys,
                    },
                    now,
                );
            }
            Op::VarGet {
                h,
                name,
                timeout: t,
            } => {
                asked(&mut w, h);
                c.variable_get(h, r, &format!("v{name}"), timeout(t), now);
            }
            Op::VarDelete { h, name } => {
                asked(&mut w, h);
                c.variable_delete(h, r, &format!("v{name}"), now);
            }
            Op::Put {
                h,
                name,
                keys,
                timeout: t,
            } => {
                asked(&mut w, h);
                c.queue_put(
                    h,
                    r,
                    &format!("q{name}"),
                    usize::from(name) * 2,
                    Value { data: vec![], keys },
                    timeout(t),
                    now,
                );
            }
            Op::Get {
                h,
                name,
                batch,
                timeout: t,
            } => {
                asked(&mut w, h);
                let (batch, t) = match batch {
                    0 => (Batch::One, t),
                    1 => (Batch::All, t),
                    n => (Batch::Count(usize::from(n) - 1), None),
                };
                c.queue_get(
                    h,
                    r,
                    &format!("q{name}"),
                    usize::from(name) * 2,
                    batch,
                    timeout(t),
                    now,
                );
            }
            Op::QClose { h, name } => {
                asked(&mut w, h);
                c.queue_close(h, r, &format!("q{name}"), now);
            }
            Op::Gone { h } => {
                w.leases.retain(|(holder, _), _| *holder != h);
                w.multi.remove(&h);
                c.holder_gone(h, now);
            }
            Op::Advance { dt } => {
                now += f64::from(dt) * 0.3;
                if c.next_deadline().is_some_and(|d| d <= now) {
                    c.expire(now);
                }
            }
        }
        c.validate().map_err(TestCaseError::fail)?;
        observe(&mut w, c.take_commands())?;
        // No deadline is left in the past.
        let future = c.next_deadline().is_none_or(|d| d > now);
        prop_assert!(future, "a deadline left in the past");
        let held: BTreeMap<Owner, BTreeSet<u8>> = c.held_keys();
        let mine: BTreeMap<Owner, BTreeSet<u8>> = w
            .held
            .iter()
            .filter(|(_, k)| !k.is_empty())
            .map(|(o, k)| (o.clone(), k.clone()))
            .collect();
        prop_assert_eq!(held, mine);
    }
    // Every holder leaves: every request still waiting is answered.
    for h in 0..4 {
        w.leases.retain(|(holder, _), _| *holder != h);
        w.multi.remove(&h);
        c.holder_gone(h, now);
        c.validate().map_err(TestCaseError::fail)?;
        observe(&mut w, c.take_commands())?;
    }
    prop_assert!(w.open.is_empty(), "unanswered: {:?}", w.open);
    prop_assert_eq!(c.next_deadline(), None);
    Ok(w.log)
}

fn observe(w: &mut World, cmds: Vec<Command<u8>>) -> Result<(), TestCaseError> {
    for cmd in cmds {
        match &cmd {
            Command::Answer {
                holder,
                request,
                outcome,
            } => {
                prop_assert!(
                    w.open.remove(&(*holder, *request)),
                    "answered twice or unasked: {:?}",
                    cmd
                );
                if *outcome == Outcome::Granted {
                    if let Some(name) = w.acquires.get(&(*holder, *request)) {
                        w.leases.entry((*holder, *name)).or_default().push(*request);
                        let total: usize = w
                            .leases
                            .iter()
                            .filter(|((_, n), _)| n == name)
                            .map(|(_, l)| l.len())
                            .sum();
                        prop_assert!(
                            total <= [1, 2][*name as usize],
                            "semaphore {} over its max",
                            name
                        );
                    }
                    if w.multi_open.remove(&(*holder, *request)) {
                        w.multi.entry(*holder).or_default().push(*request);
                    }
                }
            }
            Command::Hold {
                owner: Owner::Client(_),
                keys,
            } => prop_assert!(!keys.is_empty()),
            Command::Hold { owner, keys } => {
                let set = w.held.entry(owner.clone()).or_default();
                for k in keys {
                    prop_assert!(set.insert(*k), "{:?} held twice by {:?}", k, owner);
                }
            }
            Command::Release { owner, keys } => {
                let pseudo = !matches!(owner, Owner::Client(_));
                prop_assert!(pseudo, "a client's hold released");
                let set = w.held.entry(owner.clone()).or_default();
                for k in keys {
                    prop_assert!(
                        set.remove(k),
                        "{:?} released by {:?} without a hold",
                        k,
                        owner
                    );
                }
            }
        }
        w.log.push(cmd);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold(ops in proptest::collection::vec(op(), 1..80)) {
        run(&ops)?;
    }

    #[test]
    fn deterministic(ops in proptest::collection::vec(op(), 1..60)) {
        prop_assert_eq!(run(&ops)?, run(&ops)?);
    }
}
