//! `cargo xtask <command>`:
//!
//! - `ptx [--arch sm_90|sm_80] [--report]`: build the kernels' PTX, print its
//!   path; `--report` adds ptxas's registers / shared memory / spills.
//! - `test`: set up (libcuda to link against, ptxas if pip can get it), then
//!   every test; GPU tests run when a GPU is present, else report skipped.
//! - `bench [flags]`: the benchmark grids (`--quick`, `--grid A,C`,
//!   `--format bf16`, `--compare OLD.json`, `--device N`).
//! - `bundle`: release test + bench binaries, PTX and `run.sh` in
//!   `target/bundle/`, for GPU machines without Rust.

use std::path::{Path, PathBuf};
use std::process::{exit, Command};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(workspace());
    c
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("running {cmd:?}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{cmd:?} failed with {status}")) }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ptx") => ptx(&args[1..]),
        Some("test") => test(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("bundle") => bundle(),
        _ => Err("usage: cargo xtask <ptx [--arch sm_90|sm_80] [--report] | test | bench [flags] | bundle>".into()),
    };
    if let Err(e) = result {
        eprintln!("xtask: {e}");
        exit(1);
    }
}

fn ptx(args: &[String]) -> Result<(), String> {
    let arch = args.iter().position(|a| a == "--arch").and_then(|i| args.get(i + 1)).map(String::as_str).unwrap_or(ptx_builder::DEFAULT_ARCH);
    let ws = workspace();
    let path = ptx_builder::PtxBuild::for_workspace(&ws, &ws.join("target"), arch).build()?;
    println!("{}", path.display());
    if args.iter().any(|a| a == "--report") {
        let Some(ptxas) = find_ptxas() else {
            return Err("--report needs ptxas: pip install nvidia-cuda-nvcc==13.0.88, or set PTXAS".into());
        };
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
                spills = format!("{}+{}", w[4], w[8]);
            } else if let Some(rest) = line.split("Used ").nth(1) {
                let regs = rest.split_whitespace().next().unwrap_or("?");
                let smem = line.split(", ").find(|p| p.contains("smem")).map(|p| p.split_whitespace().next().unwrap_or("0")).unwrap_or("0");
                println!("{name:<32} {regs:>5} {stack:>10} {spills:>7} {smem:>12}");
            }
        }
    }
    Ok(())
}

/// ptxas from $PTXAS, PATH, or the PyPI nvidia-cuda-nvcc package.
fn find_ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PTXAS") {
        return Some(PathBuf::from(p));
    }
    if Command::new("ptxas").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Some(PathBuf::from("ptxas"));
    }
    let out = Command::new("python3")
        .args(["-c", "import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], 'cu13', 'bin', 'ptxas'))"])
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    p.is_file().then_some(p)
}

/// Makes sure `-lcuda` links: the NVIDIA driver's libcuda, or on machines
/// without one Debian's non-free `libcuda1` (needs contrib + non-free).
fn ensure_libcuda() -> Result<(), String> {
    let have = |p: &str| Path::new(p).exists();
    if ["/usr/lib/x86_64-linux-gnu/libcuda.so", "/usr/lib64/libcuda.so", "/usr/local/cuda/lib64/stubs/libcuda.so"].iter().any(|p| have(p)) {
        return Ok(());
    }
    let ldconfig = Command::new("ldconfig").arg("-p").output().map(|o| String::from_utf8_lossy(&o.stdout).contains("libcuda.so ")).unwrap_or(false);
    if ldconfig {
        return Ok(());
    }
    eprintln!("xtask: no libcuda.so to link against; installing Debian's libcuda1 (contrib, non-free)");
    let sources = "/etc/apt/sources.list.d/debian.sources";
    if let Ok(text) = std::fs::read_to_string(sources) {
        if !text.contains("non-free") {
            std::fs::write(sources, text.replace("Components: main\n", "Components: main contrib non-free\n")).map_err(|e| format!("{sources}: {e}"))?;
        }
    }
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get").args(["install", "-y", "-qq", "--no-install-recommends", "libcuda1"]).env("DEBIAN_FRONTEND", "noninteractive"))
        .map_err(|e| format!("{e}\ninstall the NVIDIA driver or a libcuda.so (Debian: libcuda1 from non-free) and retry"))
}

fn test(args: &[String]) -> Result<(), String> {
    ensure_libcuda()?;
    let mut ptxas = find_ptxas();
    if ptxas.is_none() {
        eprintln!("xtask: installing ptxas (pip nvidia-cuda-nvcc==13.0.88) for the PTX check");
        let _ = Command::new("python3").args(["-m", "pip", "install", "-q", "nvidia-cuda-nvcc==13.0.88"]).status();
        ptxas = find_ptxas();
    }
    let mut cmd = cargo();
    cmd.args(["test", "--workspace"]).args(args);
    let mut skipped_here = 0;
    if let Some(p) = ptxas {
        cmd.env("PTXAS", p);
    } else {
        eprintln!("xtask: no ptxas available; skipping the ptxas acceptance test");
        cmd.args(["--", "--skip", "ptxas_accepts_it_without_spills"]);
        skipped_here = 1;
    }
    let summary = run_counting(&mut cmd)?;
    println!(
        "cargo xtask test: {} passed, {} failed, {} skipped",
        summary.passed,
        summary.failed,
        summary.skipped + skipped_here
    );
    if summary.failed > 0 || !summary.success {
        return Err("tests failed".into());
    }
    Ok(())
}

#[derive(Default)]
struct Counts {
    passed: u64,
    failed: u64,
    skipped: u64,
    success: bool,
}

/// Runs cargo test, echoing its output, and adds up the counts of every
/// libtest summary and of the GPU harness's own line (whose skipped cases
/// must be reported as skipped, not passed).
fn run_counting(cmd: &mut Command) -> Result<Counts, String> {
    use std::io::{BufRead, BufReader};
    let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().map_err(|e| format!("running {cmd:?}: {e}"))?;
    let mut counts = Counts::default();
    let number_before = |line: &str, word: &str| -> u64 {
        line.split([';', ',']).find(|p| p.trim_end().ends_with(word)).and_then(|p| p.split_whitespace().rev().nth(1)).and_then(|n| n.parse().ok()).unwrap_or(0)
    };
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.map_err(|e| e.to_string())?;
        println!("{line}");
        if line.starts_with("test result:") || line.starts_with("gpu tests:") {
            counts.passed += number_before(&line, "passed");
            counts.failed += number_before(&line, "failed");
            counts.skipped += number_before(&line, "ignored");
            if let Some(n) = line.strip_prefix("gpu tests: ").and_then(|r| r.split_whitespace().next()).filter(|_| line.contains(" skipped")) {
                counts.skipped += n.parse::<u64>().unwrap_or(0);
            }
        }
    }
    counts.success = child.wait().map_err(|e| e.to_string())?.success();
    Ok(counts)
}

fn bench(args: &[String]) -> Result<(), String> {
    ensure_libcuda()?;
    run(cargo().args(["bench", "-p", "decode-attn", "--bench", "decode", "--"]).args(args))
}

/// Executables cargo built, from its JSON messages.
fn built_executables(cmd: &mut Command) -> Result<Vec<PathBuf>, String> {
    let out = cmd.arg("--message-format=json-render-diagnostics").stderr(std::process::Stdio::inherit()).output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed"));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split("\"executable\":\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .map(PathBuf::from)
        .collect())
}

fn bundle() -> Result<(), String> {
    ensure_libcuda()?;
    let dir = workspace().join("target/bundle");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let tests = built_executables(cargo().args(["test", "--release", "--no-run", "-p", "decode-attn", "--test", "gpu"]))?;
    let benches = built_executables(cargo().args(["bench", "--no-run", "-p", "decode-attn", "--bench", "decode"]))?;
    let copy = |src: &Path, name: &str| std::fs::copy(src, dir.join(name)).map(|_| ()).map_err(|e| format!("{}: {e}", src.display()));
    copy(tests.first().ok_or("no gpu test executable built")?, "gpu-tests")?;
    copy(benches.first().ok_or("no bench executable built")?, "bench")?;
    let ws = workspace();
    let ptx = ptx_builder::PtxBuild::for_workspace(&ws, &ws.join("target"), ptx_builder::DEFAULT_ARCH).build()?;
    copy(&ptx, "decode_attn.ptx")?;
    let script = r#"#!/usr/bin/env bash
# Runs every GPU test and the benchmark; needs only the NVIDIA driver.
# Usage: run.sh [--quick] [more bench flags]   Logs: $OUT or ./logs
set -u
here=$(cd "$(dirname "$0")" && pwd)
logs=${OUT:-$here/logs}; mkdir -p "$logs"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader > "$logs/device.txt" 2>&1
"$here/gpu-tests" > "$logs/gpu-tests.log" 2>&1; t=$?
(cd "$logs" && "$here/bench" --out "$logs" "$@") > "$logs/bench.log" 2>&1; b=$?
echo "== device"; cat "$logs/device.txt"
echo "== gpu tests (exit $t)"; grep -E "^(FAIL|worst)|gpu tests" "$logs/gpu-tests.log"
echo "== bench (exit $b)"; grep -vE "^\[" "$logs/bench.log" | tail -n 60
exit $(( t != 0 || b != 0 ))
"#;
    std::fs::write(dir.join("run.sh"), script).map_err(|e| e.to_string())?;
    run(Command::new("chmod").args(["+x"]).arg(dir.join("run.sh")))?;
    println!("{}", dir.display());
    Ok(())
}
