//! Small helpers shared by the tasks: the workspace root and running commands.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (the folder above `xtask/`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
        .to_path_buf()
}

/// Runs `cmd`, its output going to ours; fails with the command line if it fails.
pub fn run_cmd(cmd: &mut Command) -> Result<()> {
    eprintln!("$ {}", show(cmd));
    let status = cmd
        .status()
        .with_context(|| format!("cannot start `{}`", show(cmd)))?;
    if !status.success() {
        bail!("`{}` failed ({status})", show(cmd));
    }
    Ok(())
}

/// The command line as text, for messages.
pub fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Takes the value after a flag (`--example NAME`).
pub fn flag_value<'a>(flag: &str, it: &mut impl Iterator<Item = &'a String>) -> Result<String> {
    match it.next() {
        Some(v) if !v.starts_with("--") => Ok(v.clone()),
        _ => bail!("{flag} needs a value"),
    }
}
