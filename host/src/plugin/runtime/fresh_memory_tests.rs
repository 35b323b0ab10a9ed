//! The pool's reset of a freed instance's memory (`build_engine`,
//! [`MemoryReset`]): whatever a call wrote, the next instance in the slot
//! starts from the module's initial memory, in both reset modes.

use wasmtime::Store;
use wasmtime::component::{Component, Linker};

use super::*;

/// A component whose `bump` increments a counter initialized by a data
/// segment (41) and adds a word of a page that starts zeroed, then
/// dirties that page: only an instance starting from the pristine
/// initial memory answers 42.
const BUMP: &str = r#"
    (component
      (core module $m
        (memory 4)
        (data (i32.const 1024) "\29\00\00\00")
        (func (export "bump") (result i32) (local $r i32)
          (i32.store (i32.const 1024) (i32.add (i32.load (i32.const 1024)) (i32.const 1)))
          (local.set $r (i32.add (i32.load (i32.const 1024)) (i32.load (i32.const 200000))))
          (i32.store (i32.const 200000) (i32.const 7))
          (local.get $r)))
      (core instance $i (instantiate $m))
      (func (export "bump") (result u32) (canon lift (core func $i "bump"))))
"#;

/// A guest that writes 300 separate runs of pages (every other 4 KiB
/// page of 2.4 MiB) and returns the sum of what it read there first:
/// more runs than wasmtime's dirty-page scan collects at once (32), so
/// a reset must also cover what the scan did not reach.
const SCATTER: &str = r#"
    (component
      (core module $m
        (memory 40)
        (data (i32.const 8192) "\05")
        (data (i32.const 2449408) "\02")
        (func (export "scatter") (result i32) (local $i i32) (local $a i32) (local $sum i32)
          (loop $next
            (local.set $a (i32.mul (local.get $i) (i32.const 8192)))
            (local.set $sum (i32.add (local.get $sum) (i32.load8_u (local.get $a))))
            (i32.store8 (local.get $a) (i32.add (i32.load8_u (local.get $a)) (i32.const 1)))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br_if $next (i32.lt_u (local.get $i) (i32.const 300))))
          (local.get $sum)))
      (core instance $i (instantiate $m))
      (func (export "scatter") (result u32) (canon lift (core func $i "scatter"))))
"#;

/// Fresh instances after calls that wrote more runs of pages than the
/// scan collects: every one sees the initial memory (5 + 2), in both
/// reset modes.
#[test]
fn scattered_writes_do_not_reach_the_next_call() {
    every_fresh_call_returns(SCATTER, "scatter", 10, 7);
}

/// Pool slots are reused with their dirtied pages kept resident: every
/// fresh instance must still see the initial memory, not the last call's,
/// whichever way the memory is reset.
#[test]
fn fresh_instances_start_from_the_initial_memory() {
    every_fresh_call_returns(BUMP, "bump", 20, 42);
}

/// `calls` fresh instances of `wat` in a row, in each reset mode, each
/// returning `expected` from `export`: what a call returns when it starts
/// from the initial memory.
fn every_fresh_call_returns(wat: &str, export: &str, calls: usize, expected: u32) {
    for reset in [MemoryReset::DirtyPages, MemoryReset::Whole] {
        let (engine, pooling) = build_engine(&RuntimeConfig {
            memory_reset: reset,
            ..RuntimeConfig::default()
        })
        .expect("engine");
        assert!(
            pooling,
            "the pool could not be reserved: the test would not test it"
        );
        let component = Component::new(&engine, wat).expect("compile");
        let pre = Linker::<()>::new(&engine)
            .instantiate_pre(&component)
            .expect("link");
        for call in 0..calls {
            let mut store = Store::new(&engine, ());
            store.set_epoch_deadline(u64::MAX / 2);
            let instance = pre.instantiate(&mut store).expect("instantiate");
            let func = instance
                .get_typed_func::<(), (u32,)>(&mut store, export)
                .expect("the export");
            let (value,) = func.call(&mut store, ()).expect("call");
            assert_eq!(
                value, expected,
                "call {call} of {export} ({reset:?}) saw a previous call's memory"
            );
        }
    }
}
