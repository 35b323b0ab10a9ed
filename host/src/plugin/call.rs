//! One call of a plugin in a fresh store: the store (memory cap, epoch
//! deadline, WASI deadline), the instance slot, and the wasmtime error
//! turned into the most specific [`CallError`].

use std::sync::Arc;
use std::time::Duration;

use wasmtime::Store;

use super::bindings::{AdmissionPluginPre, ConversionPluginPre, PluginPre};
use super::deadline::DeadlineReached;
use super::error::CallError;
use super::host_reads::HostReads;
use super::runtime::{self, PluginRuntime, RuntimeInner};
use super::sandbox::{CallDeadline, CallState};
use crate::action::Timestamp;

pub(super) fn new_store(
    runtime: &RuntimeInner,
    name: &Arc<str>,
    reads: Arc<dyn HostReads>,
    request_time: Timestamp,
    settings: Option<Arc<str>>,
) -> Store<CallState> {
    let state = CallState::new(
        name.clone(),
        reads,
        request_time,
        PluginRuntime::limits(runtime),
        settings,
    );
    let mut store = Store::new(&runtime.engine, state);
    store.limiter(|state| &mut state.limiter);
    // What the host copies out of the guest in one go (an outcome, or the
    // data of one host call) is bounded before it is copied (`bounds.rs`).
    store.set_hostcall_fuel(runtime.config.outcome_bounds.lift_bytes());
    store.epoch_deadline_trap();
    store
}

/// The next call on `store` ends `timeout` from now: running (the epoch
/// deadline) or waiting in WASI (`deadline.rs`).
pub(super) fn set_deadline(
    runtime: &RuntimeInner,
    store: &mut Store<CallState>,
    timeout: Duration,
) {
    store.set_epoch_deadline(runtime::deadline_ticks(runtime, timeout));
    store.data_mut().deadline = Some(CallDeadline::after(timeout));
}

/// What a call instantiates: the world `plugin`'s bindings, or the world
/// `admission-plugin`'s, or `conversion-plugin`'s.
pub(super) trait Instantiate {
    /// The instance's bindings.
    type Instance;
    /// A fresh instance in `store`.
    fn instantiate(&self, store: &mut Store<CallState>) -> wasmtime::Result<Self::Instance>;
}

impl Instantiate for PluginPre<CallState> {
    type Instance = super::bindings::Plugin;
    fn instantiate(&self, store: &mut Store<CallState>) -> wasmtime::Result<Self::Instance> {
        PluginPre::instantiate(self, store)
    }
}

impl Instantiate for AdmissionPluginPre<CallState> {
    type Instance = super::bindings::AdmissionPlugin;
    fn instantiate(&self, store: &mut Store<CallState>) -> wasmtime::Result<Self::Instance> {
        AdmissionPluginPre::instantiate(self, store)
    }
}

impl Instantiate for ConversionPluginPre<CallState> {
    type Instance = super::bindings::ConversionPlugin;
    fn instantiate(&self, store: &mut Store<CallState>) -> wasmtime::Result<Self::Instance> {
        ConversionPluginPre::instantiate(self, store)
    }
}

/// One call in a fresh store.
#[allow(clippy::too_many_arguments)]
pub(super) fn call<P: Instantiate, R>(
    runtime: &RuntimeInner,
    pre: &P,
    name: &Arc<str>,
    function: &'static str,
    timeout: Duration,
    reads: Arc<dyn HostReads>,
    request_time: Timestamp,
    settings: Option<Arc<str>>,
    f: impl FnOnce(&mut Store<CallState>, &P::Instance) -> wasmtime::Result<R>,
) -> Result<R, CallError> {
    let _slot = runtime
        .slots
        .take_for_call(name, timeout, &runtime.containment)?;
    let mut store = new_store(runtime, name, reads, request_time, settings);
    set_deadline(runtime, &mut store, timeout);
    let instance = pre
        .instantiate(&mut store)
        .map_err(|e| classify(name, function, &store, &e, timeout, true))?;
    let result =
        f(&mut store, &instance).map_err(|e| classify(name, function, &store, &e, timeout, false));
    let output = store.data().output_text();
    if !output.is_empty() {
        tracing::debug!(plugin = %name, function, output = %output.trim_end(), "plugin output");
    }
    result
}

/// Turns a wasmtime error into the most specific [`CallError`].
pub(super) fn classify(
    name: &str,
    function: &'static str,
    store: &Store<CallState>,
    error: &wasmtime::Error,
    timeout: Duration,
    instantiating: bool,
) -> CallError {
    let plugin = name.to_string();
    let state = store.data();
    if state.limiter.hit() {
        return CallError::OutOfMemory {
            plugin,
            function,
            limit_bytes: state.limiter.memory_bytes,
        };
    }
    if is_lift_too_large(error) {
        return CallError::Contained {
            plugin,
            bound: super::bounds::Contained::LiftTooLarge {
                max: store.hostcall_fuel(),
            },
        };
    }
    if matches!(
        error.downcast_ref::<wasmtime::Trap>(),
        Some(wasmtime::Trap::Interrupt)
    ) || error.downcast_ref::<DeadlineReached>().is_some()
    {
        return CallError::Timeout {
            plugin,
            function,
            timeout,
        };
    }
    let output = state.output_text();
    if let Some(message) = panic_message(&output) {
        return CallError::Panic {
            plugin,
            function,
            message,
        };
    }
    if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return CallError::Trap {
            plugin,
            function,
            message: format!("plugin exited with status {}", exit.0),
            backtrace: None,
        };
    }
    if instantiating && error.downcast_ref::<wasmtime::Trap>().is_none() {
        return CallError::Instantiate {
            plugin,
            message: format!("{error:#}"),
        };
    }
    let message = match error.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => trap.to_string(),
        None => format!("{error:#}"),
    };
    CallError::Trap {
        plugin,
        function,
        message,
        backtrace: error
            .downcast_ref::<wasmtime::WasmBacktrace>()
            .map(backtrace_summary),
    }
}

/// The panic message from what a Rust guest wrote before aborting
/// (`thread '<unnamed>' panicked at src/lib.rs:1:2:\nmessage`).
fn panic_message(output: &str) -> Option<String> {
    let start = output.find("panicked at")?;
    let text = &output[start + "panicked at".len()..];
    let text = text.trim_start();
    // "src/lib.rs:10:5:\nthe message\nnote: run with RUST_BACKTRACE..."
    let (location, rest) = text.split_once('\n').unwrap_or((text, ""));
    let message: Vec<&str> = rest
        .lines()
        .take_while(|l| !l.starts_with("note: "))
        .collect();
    let message = message.join("\n");
    let location = location.trim_end_matches(':');
    Some(if message.trim().is_empty() {
        format!("at {location}")
    } else {
        format!("{} (at {location})", message.trim())
    })
}

/// The first few guest frames.
fn backtrace_summary(bt: &wasmtime::WasmBacktrace) -> String {
    bt.frames()
        .iter()
        .take(5)
        .map(|frame| {
            let func = frame
                .func_name()
                .map(String::from)
                .unwrap_or_else(|| format!("func[{}]", frame.func_index()));
            match frame
                .symbols()
                .first()
                .and_then(|s| Some((s.file()?, s.line()?)))
            {
                Some((file, line)) => format!("{func} ({file}:{line})"),
                None => func,
            }
        })
        .collect::<Vec<_>>()
        .join(" <- ")
}

pub(super) fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string())
}

/// Whether wasmtime refused to copy more data out of the guest than the
/// store's hostcall fuel allows. Its error type (`HostcallFuelExhausted`)
/// is private to wasmtime, so its message is matched (wasmtime is pinned;
/// `tests::lift_too_large_is_recognised` fails if the wording changes).
fn is_lift_too_large(error: &wasmtime::Error) -> bool {
    error.chain().any(|e| {
        e.to_string()
            .contains("fuel allocated for hostcalls has been exhausted")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_message_from_rust_abort_output() {
        let out = "thread '<unnamed>' panicked at src/lib.rs:42:9:\nchaos: asked to panic\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            panic_message(out).as_deref(),
            Some("chaos: asked to panic (at src/lib.rs:42:9)")
        );
        assert_eq!(panic_message("just some log line\n"), None);
    }
}
