//! `cargo xtask bundle`: everything a GPU machine without Rust needs, in
//! `target/bundle/`: release binaries (GPU tests, fuzzer, benchmark; each
//! embeds the kernels compiled ahead, `decode_attn::MODULE_IMAGES`), the fuzz
//! regressions and `run.sh`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{cargo, run, workspace};

/// Executables cargo built, from its JSON messages.
fn built_executables(cmd: &mut Command) -> Result<Vec<PathBuf>, String> {
    let out = cmd.arg("--message-format=json-render-diagnostics").stderr(Stdio::inherit()).output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed"));
    }
    let mut exes = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if let Some(exe) = msg.get("executable").and_then(|e| e.as_str()) {
            exes.push(PathBuf::from(exe));
        }
    }
    Ok(exes)
}

const RUN_SH: &str = r#"#!/usr/bin/env bash
# decode-attn GPU bundle: needs only the NVIDIA driver (and compute-sanitizer
# for `sanitize`). Usage:
#   run.sh [tests] [portable] [bench] [flush] [fuzz] [soak] [sanitize]   (default: tests bench)
# `portable`: the GPU tests on the portable sm_80 / sm_89 kernels
# (DECODE_ATTN_DEVICE_ARCH=sm_89; on Hopper the driver first compiles their
# PTX: ~5 minutes on a cold cache).
# Environment: FUZZ_CASES (per format, default 10000), FUZZ_SEED,
# SOAK_CALLS (default 10000), BENCH_ARGS (e.g. "--quick").
# Full logs and result files go to ./logs (or $LOGS), and when $OUT is set
# also into $OUT/results.tgz as one file; a summary is printed last.
set -u
here=$(cd "$(dirname "$0")" && pwd)
logs=${LOGS:-$here/logs}; mkdir -p "$logs"
steps=${*:-tests bench}
summary=()
status=0
step() { # name, log, command...
  local name=$1 log=$2; shift 2
  local t0=$SECONDS
  "$@" > "$logs/$log" 2>&1; local rc=$?
  local last; last=$(grep -E "^[0-9]+ passed, [0-9]+ failed|gpu tests:|^fuzz: .*skipped" "$logs/$log" | tail -n 1)
  summary+=("$(printf '%-10s exit %-3s %5ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$last")")
  [ $rc -eq 0 ] || status=1
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader > "$logs/device.txt" 2>&1
for s in $steps; do
  case $s in
    tests) step tests gpu-tests.log "$here/gpu-tests" ;;
    portable) step portable gpu-tests-portable.log env DECODE_ATTN_DEVICE_ARCH=sm_89 "$here/gpu-tests" ;;
    bench) step bench bench.log bash -c "cd '$logs' && '$here/bench' --out '$logs' ${BENCH_ARGS:-}" ;;
    flush) step flush bench-flush.log bash -c "cd '$logs' && '$here/bench' --out '$logs' --l2 flush ${BENCH_ARGS:-}" ;;
    fuzz) step fuzz fuzz.log "$here/fuzz" --cases "${FUZZ_CASES:-10000}" ${FUZZ_SEED:+--seed $FUZZ_SEED} --regressions "$here/fuzz-regressions.txt" --require-gpu ;;
    soak) step soak soak.log "$here/fuzz" --soak "${SOAK_CALLS:-10000}" --require-gpu ;;
    sanitize)
      for tool in memcheck racecheck synccheck initcheck; do
        step "$tool" "sanitize-$tool.log" compute-sanitizer --tool "$tool" --error-exitcode 99 "$here/gpu-tests" --sanitize
      done ;;
    *) echo "run.sh: unknown step $s"; exit 2 ;;
  esac
done
echo "== device"; cat "$logs/device.txt"
for f in "$logs"/sanitize-*.log; do [ -e "$f" ] && { echo "== $(basename "$f")"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|========= (Error|Warning)" "$f" | head -n 5; }; done
[ -e "$logs/fuzz.log" ] && { echo "== fuzz"; grep -E "^fuzz|worst|FAIL|minimal" "$logs/fuzz.log" | tail -n 20; }
[ -e "$logs/soak.log" ] && { echo "== soak"; grep -E "^soak|FAIL" "$logs/soak.log" | tail -n 5; }
[ -e "$logs/gpu-tests.log" ] && { echo "== gpu tests"; grep -E "^(FAIL|worst)|gpu tests" "$logs/gpu-tests.log"; }
[ -e "$logs/bench-flush.log" ] && { echo "== bench, --l2 flush"; grep -vE "^\[" "$logs/bench-flush.log" | tail -n 45; }
[ -e "$logs/bench.log" ] && { echo "== bench"; grep -vE "^\[" "$logs/bench.log" | tail -n 45; }
echo "== summary"; printf '%s\n' "${summary[@]}"
[ -n "${OUT:-}" ] && tar czf "$OUT/results.tgz" -C "$logs" .
exit $status
"#;

pub fn bundle() -> Result<(), String> {
    let dir = workspace().join("target/bundle");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    // The binaries embed the kernels compiled ahead (host/build.rs): a
    // fresh GPU machine then loads them without compiling the PTX.
    let ptxas = crate::ensure_ptxas().ok_or("the bundle needs ptxas to compile its kernels ahead: pip could not install nvidia-cuda-nvcc==13.0.88; set PTXAS")?;
    let tests = built_executables(cargo().env("PTXAS", &ptxas).args(["test", "--release", "--no-run", "-p", "decode-attn", "--test", "gpu", "--test", "fuzz"]))?;
    let benches = built_executables(cargo().env("PTXAS", &ptxas).args(["bench", "--no-run", "-p", "decode-attn", "--bench", "decode"]))?;
    let find = |exes: &[PathBuf], stem: &str| -> Result<PathBuf, String> {
        exes.iter()
            .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&format!("{stem}-"))))
            .cloned()
            .ok_or(format!("no `{stem}` executable was built"))
    };
    let copy = |src: &Path, name: &str| std::fs::copy(src, dir.join(name)).map(|_| ()).map_err(|e| format!("{}: {e}", src.display()));
    copy(&find(&tests, "gpu")?, "gpu-tests")?;
    copy(&find(&tests, "fuzz")?, "fuzz")?;
    copy(&find(&benches, "decode")?, "bench")?;
    copy(&workspace().join("tests/fuzz-regressions.txt"), "fuzz-regressions.txt")?;
    std::fs::write(dir.join("run.sh"), RUN_SH).map_err(|e| e.to_string())?;
    run(Command::new("chmod").args(["+x"]).arg(dir.join("run.sh")))?;
    println!("{}", dir.display());
    Ok(())
}
