//! Names the compiler and target the extension was built with, for `squall._core.BUILD`
//! (docs/install.md#versions).

use std::process::Command;

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|v| v.trim().to_owned())
        .unwrap_or_else(|| "rustc (unknown version)".into());
    println!("cargo:rustc-env=SQUALL_RUSTC={version}");
    println!(
        "cargo:rustc-env=SQUALL_TARGET={}",
        std::env::var("TARGET").unwrap_or_default()
    );
    println!("cargo:rerun-if-changed=build.rs");
}
