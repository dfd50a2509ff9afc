//! Stand-in for `llvm-bitcode-linker` (whose rustup component is not
//! available here): rustc hands it the LLVM bitcode objects of the kernel
//! crate and it produces one `.ptx`:
//!
//! `llvm-link` the objects → `opt` internalize all but the exported kernels,
//! drop dead globals, `-O3` → `llc` for the requested SM.
//!
//! rustc calls it as
//! `--export-symbol NAME ... <objs>.o <libs>.rlib -L DIR --target T --target-cpu sm_90 [--target-feature=+ptx78,…] -o OUT.ptx -O3 [--debug]`.
//! The LLVM tools are taken from `$DECODE_ATTN_LLVM_BIN` (set by ptx-builder)
//! or from the active toolchain's `llvm-tools` component.
//!
//! Compiled by ptx-builder with plain `rustc` (std only, no dependencies).

use std::path::{Path, PathBuf};
use std::process::{exit, Command};

struct Args {
    exports: Vec<String>,
    objects: Vec<PathBuf>,
    cpu: String,
    /// `--target-feature=+a,+b`, for `llc -mattr`.
    features: Option<String>,
    output: PathBuf,
}

fn parse(raw: Vec<String>) -> Result<Args, String> {
    let mut exports = Vec::new();
    let mut objects = Vec::new();
    let mut cpu = String::from("sm_90");
    let mut features = None;
    let mut output = None;
    let mut it = raw.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--export-symbol" => exports.push(it.next().ok_or("--export-symbol needs a value")?),
            "--target-cpu" => cpu = it.next().ok_or("--target-cpu needs a value")?,
            "-o" => output = Some(PathBuf::from(it.next().ok_or("-o needs a value")?)),
            s if s.starts_with("--target-feature=") => features = Some(s["--target-feature=".len()..].to_owned()),
            "-L" | "--target" => {
                it.next();
            }
            s if s.starts_with("-O") || s == "--debug" => {}
            s if s.ends_with(".o") => objects.push(PathBuf::from(s)),
            // With fat LTO, `core` is already merged into the crate's object;
            // the rlibs rustc lists are not needed.
            s if s.ends_with(".rlib") => {}
            s => return Err(format!("unexpected linker argument `{s}`")),
        }
    }
    let output = output.ok_or("no -o given")?;
    if objects.is_empty() {
        return Err("no bitcode objects given".into());
    }
    Ok(Args { exports, objects, cpu, features, output })
}

/// Expands `@file` response-file arguments (one argument per line).
fn expand_response_files(raw: Vec<String>) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for a in raw {
        if let Some(path) = a.strip_prefix('@') {
            let text = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
            out.extend(text.lines().filter(|l| !l.is_empty()).map(str::to_owned));
        } else {
            out.push(a);
        }
    }
    Ok(out)
}

fn llvm_bin() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("DECODE_ATTN_LLVM_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = capture(Command::new(&rustc).args(["--print", "sysroot"]))?;
    let vv = capture(Command::new(&rustc).arg("-vV"))?;
    let host = vv
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .ok_or("rustc -vV printed no host line")?;
    Ok(Path::new(sysroot.trim()).join("lib/rustlib").join(host).join("bin"))
}

fn capture(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("running {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("running {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed with {status}"))
    }
}

fn link(args: &Args) -> Result<(), String> {
    let bin = llvm_bin()?;
    let tool = |name: &str| {
        let p = bin.join(name);
        if p.exists() {
            Ok(p)
        } else {
            Err(format!("{} not found: install the llvm-tools component", p.display()))
        }
    };
    let linked = args.output.with_extension("linked.bc");
    let optimized = args.output.with_extension("opt.bc");
    run(Command::new(tool("llvm-link")?).args(&args.objects).arg("-o").arg(&linked))?;
    run(Command::new(tool("opt")?)
        .arg(format!("--internalize-public-api-list={}", args.exports.join(",")))
        // Fragment arrays must live in registers: unroll every fixed-count
        // loop over them (Rust has no `#pragma unroll`).
        .arg("-unroll-threshold=4000")
        .arg("-passes=internalize,globaldce,default<O3>")
        .arg(&linked)
        .arg("-o")
        .arg(&optimized))?;
    // The target features rustc was given (the portable modules' PTX ISA
    // version, `+ptx78`) set the PTX header's `.version`.
    let mut llc = Command::new(tool("llc")?);
    if let Some(features) = &args.features {
        llc.arg(format!("-mattr={features}"));
    }
    run(llc
        .arg(format!("-mcpu={}", args.cpu))
        .arg("-O3")
        .arg(&optimized)
        .arg("-o")
        .arg(&args.output))?;
    let _ = std::fs::remove_file(&linked);
    let _ = std::fs::remove_file(&optimized);
    Ok(())
}

fn main() {
    let result = expand_response_files(std::env::args().skip(1).collect())
        .and_then(parse)
        .and_then(|a| link(&a));
    if let Err(e) = result {
        eprintln!("ptx-linker: {e}");
        exit(1);
    }
}
