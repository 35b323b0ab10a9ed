//! Compiling never threatens the host (issue 39): at most one compile at a
//! time in this process, and, with a [`CompileBound`] (`rekon run
//! --compile-memory-limit`), each compile in a child process (`rekon
//! plugin compile-apart`) whose writable memory the kernel caps
//! (`RLIMIT_DATA`): Cranelift takes hundreds of MiB for an interpreter
//! component (377 MiB peak for the Python port), which in a Pod with a
//! memory limit kills the host and every plugin it serves. A compile that
//! needs more fails with a reason naming the bound; the registry keeps the
//! serving version, as for any load failure.
//!
//! A child process rather than a bounded thread: no allocator can cap one
//! thread's share of the heap, and a failed allocation inside Cranelift
//! aborts the process it runs in. `RLIMIT_DATA` rather than `RLIMIT_AS`:
//! it counts what the compile writes (heap, anonymous mappings, thread
//! stacks), not the address space the binary and glibc's arenas reserve.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use parking_lot::Mutex;
use wasmtime::{Config, Engine};

/// Compiles one at a time, whatever the runtime (a compile's memory is
/// the host's largest spike; two at once would double it).
static COMPILING: Mutex<()> = Mutex::new(());

/// How compiles are bounded: run in a child process with a memory cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileBound {
    /// The rekon binary that compiles (`rekon plugin compile-apart`): the
    /// host's own (`std::env::current_exe`).
    pub program: PathBuf,
    /// The most memory the compile may write (its `RLIMIT_DATA`).
    pub memory_limit_bytes: u64,
}

/// The engine configuration apart from the instance allocator: what
/// compiled artifacts depend on.
pub(super) fn base_config() -> Config {
    let mut base = Config::new();
    base.epoch_interruption(true)
        .wasm_component_model(true)
        .parallel_compilation(true);
    // Measured and not taken (issue 39; release build, `tests/bench/ports.py`,
    // mean of the host's reconcile calls; one run each on the loaded 2-core
    // dev machine): `table_lazy_init(false)` (Python port 10.5 → 12.0 ms,
    // TypeScript 0.64 → 0.75 ms) and `memory_guaranteed_dense_image_size`
    // of 256 MiB (8.5 ms, 0.42 ms, but the Rust seeds, whose images it
    // cannot change, moved as much: noise), both (15.6 ms, 0.67 ms).
    base
}

/// The serialized artifact of `bytes` for an engine of `config`: compiled
/// one at a time, in a child process under `bound` when there is one, else
/// in this process.
///
/// # Errors
/// Why it did not compile (the bound's reason when it was exceeded).
pub(super) fn compile(
    config: &Config,
    bound: Option<&CompileBound>,
    bytes: &[u8],
) -> Result<Vec<u8>, String> {
    let _one_at_a_time = COMPILING.lock();
    match bound {
        None => compile_apart(config, bytes).map_err(|e| format!("{e:#}")),
        Some(bound) => compile_in_child(bound, bytes),
    }
}

/// Compiles `bytes` into a serialized artifact on an engine of its own,
/// dropped when done: compiler state an engine keeps after compiling would
/// otherwise stay alive in the serving engine for good (the freed rest
/// stays in glibc's arenas: the runtime's `release_compile_memory`). The
/// serving engine then maps the artifact as it maps a cached one, and a
/// host that compiled at start uses as much memory as one that found the
/// component cached (ARCHITECTURE.md, "Measurements behind the code").
fn compile_apart(config: &Config, bytes: &[u8]) -> wasmtime::Result<Vec<u8>> {
    let compiler = Engine::new(config)?;
    compiler.precompile_component(bytes)
}

/// `rekon plugin compile-apart`'s work: caps this process's writable
/// memory at `memory_limit_bytes` (when given), reads a component from
/// stdin, writes its artifact for this build's engine to stdout.
///
/// # Errors
/// The limit cannot be set, the input is not read, it does not compile.
pub fn compile_stdio(memory_limit_bytes: Option<u64>) -> Result<(), String> {
    if let Some(limit) = memory_limit_bytes {
        set_data_limit(limit)?;
    }
    let mut bytes = Vec::new();
    std::io::stdin()
        .read_to_end(&mut bytes)
        .map_err(|e| format!("failed to read the component from stdin: {e}"))?;
    let artifact = compile_apart(&base_config(), &bytes).map_err(|e| format!("{e:#}"))?;
    std::io::stdout()
        .write_all(&artifact)
        .map_err(|e| format!("failed to write the artifact: {e}"))
}

#[cfg(target_os = "linux")]
fn set_data_limit(limit: u64) -> Result<(), String> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    setrlimit(
        Resource::Data,
        Rlimit {
            current: Some(limit),
            maximum: Some(limit),
        },
    )
    .map_err(|e| format!("failed to set the compile memory limit (RLIMIT_DATA): {e}"))
}

#[cfg(not(target_os = "linux"))]
fn set_data_limit(_limit: u64) -> Result<(), String> {
    Err("a compile memory limit needs Linux (RLIMIT_DATA)".to_owned())
}

/// Runs `bound.program plugin compile-apart` on `bytes`.
fn compile_in_child(bound: &CompileBound, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let limit_mib = bound.memory_limit_bytes >> 20;
    let mut child = Command::new(&bound.program)
        .args(["plugin", "compile-apart", "--memory-limit-bytes"])
        .arg(bound.memory_limit_bytes.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "failed to start the bounded compile ({} plugin compile-apart): {e}",
                bound.program.display()
            )
        })?;
    let mut stdin = child.stdin.take();
    // Written from a thread while the output is read: a pipe holds less
    // than a component.
    let output = std::thread::scope(|scope| {
        let writer = scope.spawn(move || match stdin.as_mut() {
            Some(pipe) => pipe.write_all(bytes),
            None => Ok(()),
        });
        let output = child.wait_with_output();
        let _ = writer.join();
        output
    })
    .map_err(|e| format!("the bounded compile failed: {e}"))?;
    if output.status.success() {
        return Ok(output.stdout);
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stderr = stderr.trim();
    let mut start = stderr.len().saturating_sub(400);
    while !stderr.is_char_boundary(start) {
        start += 1;
    }
    let tail = &stderr[start..];
    let out_of_memory = stderr.contains("memory allocation of")
        || stderr.contains("out of memory")
        || stderr.contains("Cannot allocate memory")
        || signal_of(&output.status).is_some();
    if out_of_memory {
        Err(format!(
            "compiling needs more memory than the compile memory limit ({limit_mib} MiB, rekon run --compile-memory-limit) allows; raise it, or ship precompiled code with the module (rekon plugin push --precompile): {}",
            if tail.is_empty() {
                format!("the compile ended with {}", output.status)
            } else {
                tail.to_owned()
            }
        ))
    } else {
        Err(tail.to_owned())
    }
}

#[cfg(unix)]
fn signal_of(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt as _;
    status.signal()
}

#[cfg(not(unix))]
fn signal_of(_status: &std::process::ExitStatus) -> Option<i32> {
    None
}
