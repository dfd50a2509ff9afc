//! `cargo xtask <command>`: build the PTX, run the tests, the GPU fuzzer and
//! the benchmark, make the GPU bundle. Every command answers `--help`.
//!
//! Nothing outside the repository is touched: binaries link against the
//! libcuda stub `host/build.rs` builds (the real driver is loaded at run
//! time where one is installed), and ptxas, when it is not on the machine,
//! is installed from PyPI into `target/tools/`.

mod bundle;
mod counts;
mod tune;

use std::path::{Path, PathBuf};
use std::process::{exit, Command};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask", about = "decode-attn developer commands")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build the kernels' PTX and print its path.
    Ptx {
        /// The module's architecture: sm_90a (Hopper, the whole set), or the
        /// portable sm_80 / sm_89 (wide and narrow kernels).
        #[arg(long, default_value = "sm_90a")]
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
    /// Write the planner's tuning table of a GPU (`host/src/tuning/<gpu>.rs`)
    /// from a `bench --sweep` run on it (no GPU needed here).
    Tune {
        /// The sweep's JSON (`<date>-<device>-sweep.json`); repeat it for
        /// several sweeps of one GPU, in order: a later sweep's thresholds
        /// replace an earlier one's.
        #[arg(long, required = true)]
        from: Vec<PathBuf>,
        /// The table's name (default: the device's, without `NVIDIA `).
        #[arg(long)]
        name: Option<String>,
        /// A candidate replaces the base table's value only when its
        /// geometric-mean time is lower by more than this (%).
        #[arg(long, default_value_t = 1.0)]
        keep_within: f64,
    },
}

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(workspace());
    c
}

/// Runs a command to completion; a failure is one line naming the program.
pub fn run(cmd: &mut Command) -> Result<(), String> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let status = cmd.status().map_err(|e| format!("could not run {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{program} failed ({status})"))
    }
}

/// How an xtask ends: a one-line error (`xtask: …`, exit 1), or a child's
/// exit code passed through (the child has already said what went wrong).
pub enum Failure {
    Message(String),
    Exit(i32),
}

impl From<String> for Failure {
    fn from(m: String) -> Self {
        Failure::Message(m)
    }
}

impl From<&str> for Failure {
    fn from(m: &str) -> Self {
        Failure::Message(m.to_owned())
    }
}

/// Builds one executable of the workspace (`cargo_args`: a `--no-run`
/// cargo command selecting it) quietly, and returns it with the native
/// library directories its build scripts named (the libcuda stub's, on a
/// machine without the driver), which cargo would put on the loader path.
fn build_executable(cargo_args: &[&str], ptxas: Option<&Path>) -> Result<(PathBuf, Vec<PathBuf>), String> {
    let mut cmd = cargo();
    cmd.args(cargo_args).args(["--quiet", "--message-format=json-render-diagnostics"]).stderr(std::process::Stdio::inherit());
    if let Some(p) = ptxas {
        // The kernels compiled ahead: the run loads them without a driver compilation.
        cmd.env("PTXAS", p);
    }
    let out = cmd.output().map_err(|e| format!("could not run cargo: {e}"))?;
    if !out.status.success() {
        return Err("the build failed (cargo's errors above)".into());
    }
    let (mut exe, mut libs) = (None, Vec::new());
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if let Some(e) = msg.get("executable").and_then(|e| e.as_str()) {
            exe = Some(PathBuf::from(e));
        }
        for p in msg.get("linked_paths").and_then(|p| p.as_array()).into_iter().flatten().filter_map(|p| p.as_str()) {
            let dir = PathBuf::from(p.rsplit('=').next().unwrap_or(p));
            if dir.starts_with(workspace().join("target")) {
                libs.push(dir);
            }
        }
    }
    Ok((exe.ok_or("cargo built no executable")?, libs))
}

/// Runs a built executable from `dir` with the library directories cargo
/// would add; its exit code is the xtask's.
fn run_executable(exe: &Path, libs: &[PathBuf], args: &[String], dir: &Path) -> Result<(), Failure> {
    let mut path: Vec<PathBuf> = libs.to_vec();
    path.extend(std::env::var_os("LD_LIBRARY_PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default());
    let joined = std::env::join_paths(path).map_err(|e| e.to_string())?;
    let status = Command::new(exe).args(args).current_dir(dir).env("LD_LIBRARY_PATH", joined).status().map_err(|e| format!("could not run {}: {e}", exe.display()))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => Err(Failure::Exit(code)),
        None => Err(Failure::Message(format!("{} was killed ({status})", exe.display()))),
    }
}

fn main() {
    let result: Result<(), Failure> = match Cli::parse().command {
        Cmd::Ptx { arch, report } => ptx(&arch, report).map_err(Failure::from),
        Cmd::Test { cargo_args } => test(&cargo_args).map_err(Failure::from),
        Cmd::Bench { bench_args } => bench(&bench_args),
        Cmd::Fuzz { fuzz_args } => fuzz(&fuzz_args),
        Cmd::QuantError => run(cargo().args(["run", "--quiet", "--release", "-p", "decode-attn", "--example", "quant_error"])).map_err(Failure::from),
        Cmd::Bundle => bundle::bundle().map_err(Failure::from),
        Cmd::Tune { from, name, keep_within } => tune::tune(&from, name.as_deref(), keep_within).map_err(Failure::from),
    };
    match result {
        Ok(()) => {}
        Err(Failure::Message(e)) => {
            eprintln!("xtask: {e}");
            exit(1);
        }
        Err(Failure::Exit(code)) => exit(code),
    }
}

fn ptx(arch: &str, report: bool) -> Result<(), String> {
    let ws = workspace();
    let arch = ptx_builder::Arch::from_name(arch).ok_or_else(|| format!("--arch: expected sm_80, sm_89 or sm_90a, got `{arch}`"))?;
    let path = ptx_builder::PtxBuild::for_workspace(&ws, &ws.join("target"), arch).build()?;
    println!("{}", path.display());
    if !report {
        return Ok(());
    }
    let ptxas = ensure_ptxas().ok_or("--report needs ptxas: pip could not install nvidia-cuda-nvcc==13.0.88; set PTXAS")?;
    let out = Command::new(&ptxas).args([&format!("-arch={}", arch.name()), "-v"]).arg(&path).args(["-o", "/dev/null"]).output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("ptxas rejected the PTX:\n{text}"));
    }
    // ptxas's C7520: it serialized the kernel's wgmma (an MMA sequence
    // with a register access or a branch between its steps and no
    // `wgmma.fence` after it; docs/perf.md, "MLA kernel").
    let serialized: Vec<&str> = text.lines().filter(|l| l.contains("(C7520)")).filter_map(|l| l.split("in the function '").nth(1)?.split('\'').next()).collect();
    println!("{:<32} {:>5} {:>10} {:>7} {:>12} {:>6}", "kernel", "regs", "stack (B)", "spills", "static smem", "wgmma");
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
            let wgmma = if serialized.contains(&name.as_str()) { "serial" } else { "" };
            println!("{name:<32} {regs:>5} {stack:>10} {spills:>7} {smem:>12} {wgmma:>6}");
        }
    }
    if !serialized.is_empty() {
        println!("ptxas serialized the wgmma of {} kernel(s) (C7520)", serialized.len());
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
    // The Python package's extension module is tested through pytest (below).
    cmd.args(["test", "--workspace", "--exclude", "decode-attn-python"]).args(extra);
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
    if std::env::var_os("DECODE_ATTN_SKIP_PYTHON").is_some() {
        eprintln!("xtask: DECODE_ATTN_SKIP_PYTHON is set: the Python package is not built or tested");
    } else {
        total.add(&python_tests(ptxas.as_deref())?);
    }
    println!("cargo xtask test: {} passed, {} failed, {} skipped", total.passed, total.failed, total.skipped);
    if total.failed > 0 || !total.success {
        return Err("tests failed".into());
    }
    Ok(())
}

/// The Python package, as a user gets it: `pip install ./python` (the
/// README's command) into a virtual environment under `target/`, then its
/// pytest suite from outside the source tree. CPU tests run everywhere;
/// the GPU and model tests need torch and a GPU and report themselves
/// skipped without them.
fn python_tests(ptxas: Option<&Path>) -> Result<counts::Counts, String> {
    let root = workspace();
    let venv = root.join("target/py-venv");
    let python = venv.join("bin/python");
    if !python.is_file() {
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    let pip = |args: &[&str]| {
        let mut cmd = Command::new(&python);
        cmd.args(["-m", "pip", "install", "-q", "--disable-pip-version-check"]).args(args).current_dir(&root);
        if let Some(p) = ptxas {
            cmd.env("PTXAS", p);
        }
        run(&mut cmd)
    };
    pip(&["pytest"])?;
    eprintln!("xtask: pip install ./python (the wheel: a release build of the extension)");
    pip(&["--force-reinstall", "--no-deps", "./python"])?;
    let mut cmd = Command::new(&python);
    cmd.args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]).arg(root.join("python/tests")).current_dir(root.join("target"));
    counts::run_counting(&mut cmd)
}

fn bench(args: &[String]) -> Result<(), Failure> {
    let here = std::env::current_dir().map_err(|e| e.to_string())?;
    let (exe, libs) = build_executable(&["bench", "--no-run", "-p", "decode-attn", "--bench", "decode"], ensure_ptxas().as_deref())?;
    // Relative paths of the arguments (`--out`, `--compare`) are the caller's.
    run_executable(&exe, &libs, args, &here)
}

fn fuzz(args: &[String]) -> Result<(), Failure> {
    let mut fuzz_args = args.to_vec();
    if !fuzz_args.iter().any(|a| a == "--cases" || a.starts_with("--cases=") || a == "--help" || a == "-h") {
        fuzz_args.extend(["--cases".to_string(), "10000".to_string()]);
    }
    fuzz_args.push("--require-gpu".into());
    let (exe, libs) = build_executable(&["test", "--no-run", "--release", "-p", "decode-attn", "--test", "fuzz"], ensure_ptxas().as_deref())?;
    run_executable(&exe, &libs, &fuzz_args, &workspace())
}
