//! The benches' floors (`benches/common/floor.rs`) send the crate's scripts by hand, with the
//! arguments the crate gives them: these tests run each once, beside the library, so that a
//! change to a script or its arguments that the floors miss fails here instead of leaving
//! the benches broken until someone runs them.

use crate::common;

#[path = "../../benches/common/floor.rs"]
mod floor;

use std::time::Duration;

#[test]
fn the_lock_floor_takes_and_gives_the_lock_as_the_library_sees_it() {
    let server = common::server();
    let manager = common::manager(&server, Duration::from_secs(30));
    let mut connection = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let lock = floor::PlainLock::new(&mut connection).unwrap();
    let (answer, token): (i64, i64) = lock
        .acquire("floor", "floor-holder")
        .invoke(&mut connection)
        .unwrap();
    assert_eq!((answer, token), (1, 1), "taken, with the first token");
    assert!(manager.lock("floor").is_locked().unwrap());
    assert!(manager.lock("floor").try_lock().unwrap().is_none());

    let released: i64 = lock
        .release("floor", "floor-holder", 1)
        .invoke(&mut connection)
        .unwrap();
    assert_eq!(released, 1);
    assert!(!manager.lock("floor").is_locked().unwrap());

    // The packed form the fan-out floor sends, on a loaded script.
    lock.load(&mut connection).unwrap();
    let taken: (i64, i64) = lock
        .acquire("floor", "floor-holder")
        .evalsha()
        .query(&mut connection)
        .unwrap();
    assert_eq!(taken, (1, 2));
    let released: i64 = lock
        .release("floor", "floor-holder", 2)
        .evalsha()
        .query(&mut connection)
        .unwrap();
    assert_eq!(released, 1);
    assert!(!manager.lock("floor").is_locked().unwrap());
}

#[test]
fn the_semaphore_floor_takes_and_adds_permits_as_the_library_counts_them() {
    let server = common::server();
    let manager = common::manager(&server, Duration::from_secs(30));
    let semaphore = manager.semaphore("floor");
    assert!(semaphore.try_set_permits(1).unwrap());
    let mut connection = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let floor = floor::Semaphore::new(&mut connection).unwrap();
    let request = |verb: &str| format!("redlease_request:{{floor}}:{verb}");
    let taken: i64 = floor
        .take("floor", 1, &request("take"))
        .invoke(&mut connection)
        .unwrap();
    assert_eq!(taken, 1);
    assert_eq!(semaphore.available_permits().unwrap(), 0);
    let _: (i64, i64) = floor
        .add("floor", 1, &request("add"))
        .invoke(&mut connection)
        .unwrap();
    assert_eq!(semaphore.available_permits().unwrap(), 1);
}
