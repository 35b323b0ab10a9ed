//! A call's deadline also while the guest waits in WASI.
//!
//! The epoch deadline (`runtime.rs`) stops a guest that *runs*: wasm code
//! checks the epoch at loop heads and function entries. A guest that
//! *waits* runs no wasm code: `std::thread::sleep` in Rust, a timer in
//! JavaScript or `time.sleep` in Python subscribe to the monotonic clock and
//! block in `wasi:io/poll` (`poll`, or `pollable.block`), and wasmtime-wasi
//! waits for the timer on the calling thread, however long it was asked to
//! (a duration too large to represent waits forever). So the host serves
//! those two functions itself: the same wait as wasmtime-wasi's
//! (wasmtime-wasi-io's async implementation on the same resource table,
//! driven the way its synchronous bindings drive it), bounded by the call's
//! deadline, and a wait still pending at the deadline traps with
//! [`DeadlineReached`], which the call reports as a timeout.
//!
//! Nothing else in the sandbox can wait: stdin is empty and closed, stdout
//! and stderr are in-memory pipes that are always ready, there is no
//! filesystem and no socket (`sandbox.rs`), and the host imports read the
//! cache without blocking.

use std::time::Duration;

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::p2::DynPollable;
// The async `wasi:io/poll` host traits (wasmtime-wasi re-exports
// wasmtime-wasi-io's): what its synchronous bindings block on.
use wasmtime_wasi::p2::bindings::io::poll as async_poll;

use super::sandbox::{CallDeadline, CallState};

/// The `wasi:io/poll` interface as wasmtime-wasi links it (semver matching
/// serves every 0.2.x a guest imports from it). Redefining the functions of
/// another version would leave `pollable` undefined there, and every guest
/// would fail to link: the runtime's tests would say so at once.
const POLL_INTERFACE: &str = "wasi:io/poll@0.2.12";

/// A wait in WASI reached the call's deadline: the guest is stopped (the
/// host function traps) and the call fails as a timeout.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the plugin was still waiting in wasi:io/poll at its deadline ({timeout:?})")]
pub(crate) struct DeadlineReached {
    /// The call's time limit.
    pub(crate) timeout: Duration,
}

/// Replaces `poll` and `pollable.block` of `wasi:io/poll` in `linker`
/// (which must hold wasmtime-wasi's) with waits bounded by the call's
/// deadline.
pub(crate) fn bound_wasi_waits(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut poll = linker.instance(POLL_INTERFACE)?;
    poll.func_wrap(
        "poll",
        |mut store: StoreContextMut<'_, CallState>, (pollables,): (Vec<Resource<DynPollable>>,)| {
            let deadline = store.data().deadline;
            let table = store.data_mut().table_mut();
            until(deadline, async_poll::Host::poll(table, pollables)).map(|ready| (ready,))
        },
    )?;
    poll.func_wrap(
        "[method]pollable.block",
        |mut store: StoreContextMut<'_, CallState>, (pollable,): (Resource<DynPollable>,)| {
            let deadline = store.data().deadline;
            let table = store.data_mut().table_mut();
            until(deadline, async_poll::HostPollable::block(table, pollable))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Runs `wait` on the calling thread as wasmtime-wasi's synchronous
/// bindings do (`in_tokio`), giving up at `deadline`.
fn until<R>(
    deadline: Option<CallDeadline>,
    wait: impl Future<Output = wasmtime::Result<R>>,
) -> wasmtime::Result<R> {
    let Some(deadline) = deadline else {
        return wasmtime_wasi::runtime::in_tokio(wait);
    };
    wasmtime_wasi::runtime::in_tokio(async move {
        match tokio::time::timeout_at(deadline.at, wait).await {
            Ok(result) => result,
            Err(_) => Err(DeadlineReached {
                timeout: deadline.timeout,
            }
            .into()),
        }
    })
}
