//! Each primitive's rules, one case at a time.

use crate::{Batch, Command, Coord, Outcome, Owner, Value};

type C = Coord<u32>;

fn answers(c: &mut C) -> Vec<(u32, u64, Outcome<u32>)> {
    c.validate().unwrap();
    c.take_commands()
        .into_iter()
        .filter_map(|cmd| match cmd {
            Command::Answer {
                holder,
                request,
                outcome,
            } => Some((holder, request, outcome)),
            _ => None,
        })
        .collect()
}

fn val(keys: &[u32]) -> Value<u32> {
    Value {
        data: vec![1, 2],
        keys: keys.to_vec(),
    }
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn semaphore_grants_up_to_max_then_in_arrival_order() {
    let mut c = C::new();
    c.semaphore_acquire(1, 1, "s", 2, None, 0.0);
    c.semaphore_acquire(2, 1, "s", 2, None, 0.0);
    c.semaphore_acquire(3, 1, "s", 2, None, 0.0);
    c.semaphore_acquire(4, 1, "s", 2, Some(0.0), 0.0);
    assert_eq!(
        answers(&mut c),
        vec![
            (1, 1, Outcome::Granted),
            (2, 1, Outcome::Granted),
            (4, 1, Outcome::TimedOut)
        ]
    );
    c.semaphore_value(9, 1, "s", 0.0);
    assert_eq!(answers(&mut c), vec![(9, 1, Outcome::Count(2))]);
    c.semaphore_release(1, 2, "s", 1, 1.0);
    assert_eq!(
        answers(&mut c),
        vec![(3, 1, Outcome::Granted), (1, 2, Outcome::Done)]
    );
    // A second release of the same lease changes nothing.
    c.semaphore_release(1, 3, "s", 1, 1.0);
    c.semaphore_value(9, 2, "s", 1.0);
    assert_eq!(
        answers(&mut c),
        vec![(1, 3, Outcome::Done), (9, 2, Outcome::Count(2))]
    );
}

#[test]
fn semaphore_refuses_another_max_leases() {
    let mut c = C::new();
    c.semaphore_acquire(1, 1, "s", 2, None, 0.0);
    c.semaphore_acquire(1, 2, "s", 3, None, 0.0);
    let a = answers(&mut c);
    assert!(matches!(&a[1].2, Outcome::Failed(e) if e.contains("Inconsistent max leases")));
}

#[test]
fn acquire_times_out_at_its_deadline() {
    let mut c = C::new();
    c.semaphore_acquire(1, 1, "s", 1, None, 0.0);
    c.semaphore_acquire(2, 1, "s", 1, Some(0.5), 1.0);
    assert_eq!(c.next_deadline(), Some(1.5));
    c.expire(1.4);
    assert_eq!(answers(&mut c).len(), 1);
    c.expire(1.5);
    assert_eq!(answers(&mut c), vec![(2, 1, Outcome::TimedOut)]);
    assert_eq!(c.next_deadline(), None);
}

#[test]
fn a_gone_holder_gives_its_leases_back_and_its_waits_fail() {
    let mut c = C::new();
    c.semaphore_acquire(1, 1, "s", 1, None, 0.0);
    c.semaphore_acquire(1, 2, "s", 1, None, 0.0);
    c.semaphore_acquire(2, 1, "s", 1, Some(10.0), 0.0);
    answers(&mut c);
    c.holder_gone(1, 1.0);
    let a = answers(&mut c);
    assert!(matches!(a[0], (1, 2, Outcome::Failed(_))));
    assert_eq!(a[1], (2, 1, Outcome::Granted));
    assert_eq!(c.next_deadline(), None);
}

#[test]
fn closing_a_semaphore_answers_its_waiters() {
    let mut c = C::new();
    c.semaphore_acquire(1, 1, "s", 1, None, 0.0);
    c.semaphore_acquire(2, 1, "s", 1, None, 0.0);
    c.semaphore_close(3, 1, "s", 0.0);
    c.semaphore_value(3, 2, "s", 0.0);
    let a = answers(&mut c);
    assert_eq!(
        &a[1..],
        &[
            (2, 1, Outcome::TimedOut),
            (3, 1, Outcome::Done),
            (3, 2, Outcome::Count(0))
        ]
    );
}

#[test]
fn multi_lock_takes_locks_together() {
    let mut c = C::new();
    c.multi_lock_acquire(1, 1, &names(&["a", "b"]), None, None, 0.0);
    c.multi_lock_acquire(2, 1, &names(&["b", "c"]), None, None, 0.0);
    c.multi_lock_acquire(3, 1, &names(&["c"]), None, None, 0.0);
    c.multi_lock_acquire(4, 1, &names(&["a", "c"]), Some(1), Some(0.0), 0.0);
    // 2 waits for b but holds c first in line: 3 waits behind it.
    assert_eq!(
        answers(&mut c),
        vec![(1, 1, Outcome::Granted), (4, 1, Outcome::TimedOut)]
    );
    c.multi_lock_release(1, 2, 1, 1.0);
    assert_eq!(
        answers(&mut c),
        vec![(2, 1, Outcome::Granted), (1, 2, Outcome::Done)]
    );
    c.multi_lock_release(2, 2, 1, 1.0);
    assert_eq!(
        answers(&mut c),
        vec![(3, 1, Outcome::Granted), (2, 2, Outcome::Done)]
    );
}

#[test]
fn multi_lock_with_num_locks_leaves_the_lines_it_does_not_need() {
    let mut c = C::new();
    c.multi_lock_acquire(1, 1, &names(&["a"]), None, None, 0.0);
    c.multi_lock_acquire(2, 1, &names(&["a", "b"]), Some(1), None, 0.0);
    c.multi_lock_acquire(3, 1, &names(&["a"]), None, Some(2.0), 0.0);
    assert_eq!(
        answers(&mut c),
        vec![(1, 1, Outcome::Granted), (2, 1, Outcome::Granted)]
    );
    c.multi_lock_release(1, 2, 1, 1.0);
    assert_eq!(
        answers(&mut c),
        vec![(3, 1, Outcome::Granted), (1, 2, Outcome::Done)]
    );
}

#[test]
fn event_wait_set_clear() {
    let mut c = C::new();
    c.event_wait(1, 1, "e", None, 0.0);
    c.event_wait(2, 1, "e", Some(1.0), 0.0);
    c.event_is_set(3, 1, "e", 0.0);
    assert_eq!(answers(&mut c), vec![(3, 1, Outcome::Count(0))]);
    c.event_set(3, 2, "e", 0.5);
    c.event_wait(4, 1, "e", Some(0.0), 0.5);
    assert_eq!(
        answers(&mut c),
        vec![
            (1, 1, Outcome::Granted),
            (2, 1, Outcome::Granted),
            (3, 2, Outcome::Done),
            (4, 1, Outcome::Granted)
        ]
    );
    c.event_clear(3, 3, "e", 1.0);
    c.event_wait(4, 2, "e", Some(0.5), 1.0);
    c.expire(2.0);
    assert_eq!(
        answers(&mut c),
        vec![(3, 3, Outcome::Done), (4, 2, Outcome::TimedOut)]
    );
    assert!(c.events.is_empty());
}

fn holds(c: &mut C) -> Vec<Command<u32>> {
    c.validate().unwrap();
    c.take_commands()
        .into_iter()
        .filter(|cmd| !matches!(cmd, Command::Answer { .. }))
        .collect()
}

#[test]
fn variable_holds_the_keys_of_its_value() {
    let mut c = C::new();
    c.variable_get(2, 1, "v", None, 0.0);
    c.variable_set(1, 1, "v", val(&[7, 8]), 0.0);
    let cmds = c.take_commands();
    assert_eq!(
        cmds,
        vec![
            Command::Hold {
                owner: Owner::Variable("v".into()),
                keys: vec![7, 8]
            },
            Command::Answer {
                holder: 2,
                request: 1,
                outcome: Outcome::Values(vec![val(&[7, 8])])
            },
            Command::Hold {
                owner: Owner::Client(2),
                keys: vec![7, 8]
            },
            Command::Answer {
                holder: 1,
                request: 1,
                outcome: Outcome::Done
            },
        ]
    );
    c.variable_set(1, 2, "v", val(&[8, 9]), 1.0);
    assert_eq!(
        holds(&mut c),
        vec![
            Command::Hold {
                owner: Owner::Variable("v".into()),
                keys: vec![9]
            },
            Command::Release {
                owner: Owner::Variable("v".into()),
                keys: vec![7]
            },
        ]
    );
    c.variable_delete(1, 3, "v", 2.0);
    assert_eq!(
        holds(&mut c),
        vec![Command::Release {
            owner: Owner::Variable("v".into()),
            keys: vec![8, 9]
        }]
    );
    c.variable_get(2, 2, "v", Some(0.1), 2.0);
    c.expire(3.0);
    assert_eq!(answers(&mut c), vec![(2, 2, Outcome::TimedOut)]);
}

#[test]
fn queue_hands_values_over_in_order() {
    let mut c = C::new();
    c.queue_put(1, 1, "q", 0, val(&[5]), None, 0.0);
    c.queue_put(1, 2, "q", 0, val(&[]), None, 0.0);
    c.queue_size(1, 3, "q", 0, 0.0);
    c.queue_get(2, 1, "q", 0, Batch::One, None, 0.0);
    let cmds = c.take_commands();
    assert_eq!(
        cmds,
        vec![
            Command::Hold {
                owner: Owner::Queue("q".into()),
                keys: vec![5]
            },
            Command::Answer {
                holder: 1,
                request: 1,
                outcome: Outcome::Done
            },
            Command::Answer {
                holder: 1,
                request: 2,
                outcome: Outcome::Done
            },
            Command::Answer {
                holder: 1,
                request: 3,
                outcome: Outcome::Count(2)
            },
            Command::Answer {
                holder: 2,
                request: 1,
                outcome: Outcome::Values(vec![val(&[5])])
            },
            Command::Hold {
                owner: Owner::Client(2),
                keys: vec![5]
            },
            Command::Release {
                owner: Owner::Queue("q".into()),
                keys: vec![5]
            },
        ]
    );
    c.queue_get(2, 2, "q", 0, Batch::All, None, 0.0);
    c.queue_get(2, 3, "q", 0, Batch::All, None, 0.0);
    assert_eq!(
        answers(&mut c),
        vec![
            (2, 2, Outcome::Values(vec![val(&[])])),
            (2, 3, Outcome::Values(vec![]))
        ]
    );
    c.queue_get(2, 4, "q", 0, Batch::One, Some(1.0), 0.0);
    c.expire(1.0);
    assert_eq!(answers(&mut c), vec![(2, 4, Outcome::TimedOut)]);
}

#[test]
fn queue_bounded_puts_wait_and_batches_fill_up() {
    let mut c = C::new();
    c.queue_put(1, 1, "q", 1, val(&[1]), None, 0.0);
    c.queue_put(1, 2, "q", 1, val(&[2]), Some(1.0), 0.0);
    c.queue_put(1, 3, "q", 1, val(&[3]), Some(0.0), 0.0);
    assert_eq!(
        answers(&mut c),
        vec![(1, 1, Outcome::Done), (1, 3, Outcome::TimedOut)]
    );
    c.queue_get(2, 1, "q", 1, Batch::Count(3), None, 0.5);
    assert_eq!(answers(&mut c), vec![(1, 2, Outcome::Done)]);
    c.queue_get(2, 2, "q", 1, Batch::Count(1), Some(1.0), 0.5);
    assert!(matches!(answers(&mut c)[0].2, Outcome::Failed(_)));
    c.queue_put(3, 1, "q", 1, val(&[1]), None, 0.6);
    let a = answers(&mut c);
    assert_eq!(a[0], (3, 1, Outcome::Done));
    assert_eq!(
        a[1],
        (2, 1, Outcome::Values(vec![val(&[1]), val(&[2]), val(&[1])]))
    );
    assert!(c.held_keys().is_empty());
}

#[test]
fn queue_gone_batch_gives_its_values_back() {
    let mut c = C::new();
    c.queue_put(1, 1, "q", 0, val(&[1]), None, 0.0);
    c.queue_get(2, 1, "q", 0, Batch::Count(2), None, 0.0);
    c.holder_gone(2, 1.0);
    c.queue_size(1, 2, "q", 0, 1.0);
    let a = answers(&mut c);
    assert_eq!(a[2], (1, 2, Outcome::Count(1)));
    c.queue_close(1, 3, "q", 1.0);
    assert_eq!(
        holds(&mut c),
        vec![Command::Release {
            owner: Owner::Queue("q".into()),
            keys: vec![1]
        }]
    );
    assert!(c.queues.is_empty());
}
