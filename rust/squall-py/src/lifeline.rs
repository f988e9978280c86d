//! `--watch-stdin` on a native thread (docs/runtime.md#an-embedded-cluster): a process
//! must end once the process that started it is gone even when none of its Python
//! threads can run — one stuck while holding the GIL would stop a Python watcher from
//! ever acting on the end of file it read.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::io::{ErrorKind, Read};
use std::time::Duration;

/// Watches stdin on a native thread: at end of file (or an unreadable stdin) it sends
/// SIGTERM to this process, its graceful path, and exits it with status 1 after
/// `grace` seconds if it is still running, without needing the interpreter.
#[pyfunction]
pub fn watch_stdin(grace: f64) -> PyResult<()> {
    let grace = Duration::try_from_secs_f64(grace)
        .map_err(|e| PyValueError::new_err(format!("grace: {e}")))?;
    std::thread::Builder::new()
        .name("squall-watch-stdin".into())
        .spawn(move || {
            let mut buf = [0u8; 1 << 16];
            let mut stdin = std::io::stdin();
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            // SAFETY: plain system calls on this process; `_exit` skips atexit
            // handlers, which could wait for a stuck thread.
            unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
            std::thread::sleep(grace);
            unsafe { libc::_exit(1) };
        })?;
    Ok(())
}
