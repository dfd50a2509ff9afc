//! `cargo xtask <command>`: build the PTX, run the tests, the GPU fuzzer and
//! the benchmark, make the GPU bundle. Every command answers `--help`.
//!
//! Nothing outside the repository is touched: binaries link against the
//! libcuda stub `host/build.rs` builds (the real driver is loaded at run
//! time where one is installed), and ptxas, when it is not on the machine,
//! is installed from PyPI into `target/tools/`.

mod bundle;
mod counts;

use std::path::{Path, PathBuf};
use std::process::{exit, Command};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "decode-attn developer commands")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build the kernels' PTX and print its path.
    Ptx {
        /// SM architecture (sm_90a, the one supported).
        #[arg(long, default_value = ptx_builder::DEFAULT_ARCH)]
        arch: String,
        /// Also print ptxas's registers / stack / spills per kernel.
        #[arg(long)]
        report: bool,
    },
    /// Every test: CPU tests (the hardening proptest in debug and release),
    /// and, when a GPU is present, the GPU tests and a short fuzz run that
    /// replays the committed regressions; otherwise those report "skipped".
    Test {
        /// Extra arguments for `cargo test`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        cargo_args: Vec<String>,
    },
    /// The benchmark grids against the copy roofline (needs a GPU); every
    /// flag goes to the benchmark (`cargo xtask bench --help` lists them).
    #[command(disable_help_flag = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        bench_args: Vec<String>,
    },
    /// GPU fuzzing against the f64 reference (needs a GPU); every flag goes
    /// to the fuzzer (`cargo xtask fuzz --help` lists them; `--cases`
    /// defaults to 10000 per format here).
    #[command(disable_help_flag = true)]
    Fuzz {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        fuzz_args: Vec<String>,
    },
    /// Quantization error of the quantized formats against the bf16 cache
    /// (K, V and the attention output; CPU only).
    QuantError,
    /// Release test, fuzz and bench binaries, the PTX and `run.sh` in
    /// `target/bundle/`, for GPU machines without Rust.
    Bundle,
}

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(workspace());
    c
}

pub fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("running {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed with {status}"))
    }
}

fn main() {
    let result = match Cli::parse().command {
        Cmd::Ptx { arch, report } => ptx(&arch, report),
        Cmd::Test { cargo_args } => test(&cargo_args),
        Cmd::Bench { bench_args } => bench(&bench_args),
        Cmd::Fuzz { fuzz_args } => fuzz(&fuzz_args),
        Cmd::QuantError => run(cargo().args(["run", "--quiet", "--release", "-p", "decode-attn", "--example", "quant_error"])),
        Cmd::Bundle => bundle::bundle(),
    };
    if let Err(e) = result {
        eprintln!("xtask: {e}");
        exit(1);
    }
}

fn ptx(arch: &str, report: bool) -> Result<(), String> {
    let ws = workspace();
    let path = ptx_builder::PtxBuild::for_workspace(&ws, &ws.join("target"), arch).build()?;
    println!("{}", path.display());
    if !report {
        return Ok(());
    }
    let ptxas = ensure_ptxas().ok_or("--report needs ptxas: pip could not install nvidia-cuda-nvcc==13.0.88; set PTXAS")?;
    let out = Command::new(&ptxas).args([&format!("-arch={arch}"), "-v"]).arg(&path).args(["-o", "/dev/null"]).output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("ptxas rejected the PTX:\n{text}"));
    }
    println!("{:<32} {:>5} {:>10} {:>7} {:>12}", "kernel", "regs", "stack (B)", "spills", "static smem");
    let mut name = String::new();
    let (mut stack, mut spills) = (String::new(), String::new());
    for line in text.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            name = rest.split('\'').next().unwrap_or("").to_owned();
        } else if line.contains("bytes stack frame") {
            let w: Vec<&str> = line.split_whitespace().collect();
            stack = w[0].to_owned();
            spills = format!("{}+{}", w.get(4).unwrap_or(&"?"), w.get(8).unwrap_or(&"?"));
        } else if let Some(rest) = line.split("Used ").nth(1) {
            let regs = rest.split_whitespace().next().unwrap_or("?");
            let smem = line.split(", ").find(|p| p.contains("smem")).map(|p| p.split_whitespace().next().unwrap_or("0")).unwrap_or("0");
            println!("{name:<32} {regs:>5} {stack:>10} {spills:>7} {smem:>12}");
        }
    }
    Ok(())
}

/// Where `ensure_ptxas` installs ptxas when the machine has none.
fn tools_dir() -> PathBuf {
    workspace().join("target/tools/nvcc")
}

/// ptxas from $PTXAS, PATH, `target/tools/`, or installed from PyPI into
/// `target/tools/` (never into the user's Python environment).
pub fn ensure_ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PTXAS") {
        return Some(PathBuf::from(p));
    }
    if Command::new("ptxas").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Some(PathBuf::from("ptxas"));
    }
    let local = tools_dir().join("nvidia/cu13/bin/ptxas");
    if local.is_file() {
        return Some(local);
    }
    eprintln!("xtask: installing ptxas (PyPI nvidia-cuda-nvcc==13.0.88) into {}", tools_dir().display());
    let _ = Command::new("python3")
        .args(["-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--target"])
        .arg(tools_dir())
        .arg("nvidia-cuda-nvcc==13.0.88")
        .status();
    local.is_file().then_some(local)
}

fn test(extra: &[String]) -> Result<(), String> {
    let mut total = counts::Counts::default();
    let ptxas = ensure_ptxas();
    let mut cmd = cargo();
    cmd.args(["test", "--workspace"]).args(extra);
    if let Some(p) = &ptxas {
        // Also what host/build.rs compiles the kernels ahead with.
        cmd.env("PTXAS", p);
    }
    // The only ignored test is the ptxas check: run it when ptxas is here,
    // otherwise libtest reports it ignored (counted as skipped).
    if ptxas.is_some() {
        cmd.args(["--", "--include-ignored"]);
    } else {
        eprintln!("xtask: no ptxas available; the ptxas acceptance test is skipped");
    }
    total.add(&counts::run_counting(&mut cmd)?);
    // Overflow wraps silently in release builds: the hardening proptest runs there too.
    total.add(&counts::run_counting(cargo().args(["test", "--release", "-p", "decode-attn", "--test", "hardening"]))?);
    println!("cargo xtask test: {} passed, {} failed, {} skipped", total.passed, total.failed, total.skipped);
    if total.failed > 0 || !total.success {
        return Err("tests failed".into());
    }
    Ok(())
}

fn bench(args: &[String]) -> Result<(), String> {
    let here = std::env::current_dir().map_err(|e| e.to_string())?;
    let mut cmd = cargo();
    if let Some(ptxas) = ensure_ptxas() {
        // The kernels compiled ahead: the run loads them without a driver compilation.
        cmd.env("PTXAS", ptxas);
    }
    run(cmd.args(["bench", "-p", "decode-attn", "--bench", "decode", "--"]).args(args).env("DECODE_ATTN_CALLER_DIR", here))
}

fn fuzz(args: &[String]) -> Result<(), String> {
    let mut fuzz_args = args.to_vec();
    if !fuzz_args.iter().any(|a| a == "--cases" || a.starts_with("--cases=") || a == "--help" || a == "-h") {
        fuzz_args.extend(["--cases".to_string(), "10000".to_string()]);
    }
    fuzz_args.push("--require-gpu".into());
    run(cargo().args(["test", "--release", "-p", "decode-attn", "--test", "fuzz", "--"]).args(fuzz_args))
}
