//! Builds `kernels-gpu` into a single `.ptx` file.
//!
//! This is the role `cuda_builder` plays for Rust-CUDA, with rustc's own
//! NVPTX backend instead of `rustc_codegen_nvvm` (which needs LLVM 7):
//! a nested `cargo build --target nvptx64-nvidia-cuda -Zbuild-std=core` in its
//! own target directory (so it cannot deadlock on the outer build's lock),
//! flags passed through `CARGO_ENCODED_RUSTFLAGS` so the rebuilt `core` gets
//! the same `target-cpu`, linked by the project's own `ptx-linker`, and
//! exactly one `.ptx` artifact read back from `--message-format=json`. The
//! kernels' register caps (`DecodeKernel::register_cap`, which Rust has no
//! attribute for) are then written into it as `.maxnreg` directives.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const TARGET: &str = "nvptx64-nvidia-cuda";
pub use decode_attn_abi::Arch;

#[derive(Clone, Debug)]
pub struct PtxBuild {
    /// The `kernels-gpu` crate directory.
    pub kernel_crate: PathBuf,
    /// Target directory for the nested build (kept between builds), one
    /// per architecture: each builds `core` for its own `target-cpu`.
    pub target_dir: PathBuf,
    /// The module's architecture: its kernels are the table rows of it.
    pub arch: Arch,
}

impl PtxBuild {
    /// The workspace's kernel crate, built under `<target_root>/ptx`
    /// (sm_90a) or `<target_root>/ptx/<arch>` (the portable targets).
    pub fn for_workspace(workspace: &Path, target_root: &Path, arch: Arch) -> Self {
        let ptx = target_root.join("ptx");
        PtxBuild { kernel_crate: workspace.join("kernels-gpu"), target_dir: if arch.is_specific() { ptx } else { ptx.join(arch.name()) }, arch }
    }

    /// Runs the build and returns the path of the PTX file.
    pub fn build(&self) -> Result<PathBuf, String> {
        std::fs::create_dir_all(&self.target_dir).map_err(|e| format!("{}: {e}", self.target_dir.display()))?;
        let toolchain = Toolchain::detect()?;
        let linker = self.build_linker(&toolchain)?;
        let built = self.build_kernels(&toolchain, &linker)?;
        let text = std::fs::read_to_string(&built).map_err(|e| format!("{}: {e}", built.display()))?;
        check_ptx(&text)?;
        let caps = decode_attn_abi::DECODE_KERNELS.iter().filter(|k| k.id.arch == self.arch).filter_map(|k| Some((k.name, k.register_cap()?)));
        let capped = cap_registers(&text, caps)?;
        let ptx = self.target_dir.join(format!("decode_attn-{}.ptx", self.arch.name()));
        std::fs::write(&ptx, capped).map_err(|e| format!("{}: {e}", ptx.display()))?;
        Ok(ptx)
    }

    fn build_linker(&self, tc: &Toolchain) -> Result<PathBuf, String> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/ptx-linker.rs");
        let exe = self.target_dir.join("ptx-linker");
        if is_newer(&exe, &src) {
            return Ok(exe);
        }
        let out = clean_env(Command::new(&tc.rustc))
            .args(["-O", "--edition", "2021", "--crate-name", "ptx_linker"])
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output()
            .map_err(|e| format!("running rustc: {e}"))?;
        if !out.status.success() {
            return Err(format!("building ptx-linker failed:\n{}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(exe)
    }

    fn build_kernels(&self, tc: &Toolchain, linker: &Path) -> Result<PathBuf, String> {
        let rustflags = [
            format!("-Ctarget-cpu={}", self.arch.name()),
            // The kernel tables' rows of this architecture become entry points.
            "--cfg".into(),
            format!("decode_attn_arch=\"{}\"", self.arch.name()),
            format!("-Clinker={}", linker.display()),
            "-Zunstable-options".into(),
            // A failed bounds check becomes `trap` instead of pulling in the
            // panic formatting machinery.
            "-Cpanic=immediate-abort".into(),
            // Fragment arrays must stay in registers: fully unroll fixed-count
            // loops (Rust has no `#pragma unroll`).
            "-Cllvm-args=-unroll-threshold=4000".into(),
        ];
        let ptx_isa = self.arch.ptx_isa();
        let rustflags = rustflags.into_iter().chain(ptx_isa.map(|f| format!("-Ctarget-feature={f}"))).collect::<Vec<_>>().join("\u{1f}");
        let mut cmd = clean_env(Command::new(&tc.cargo));
        cmd.args(["build", "--release", "--message-format=json-render-diagnostics", "-Zbuild-std=core"])
            .args(["--target", TARGET])
            .arg("--manifest-path")
            .arg(self.kernel_crate.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&self.target_dir)
            .env("CARGO_ENCODED_RUSTFLAGS", rustflags)
            .env("DECODE_ATTN_LLVM_BIN", &tc.llvm_bin)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let out = cmd.output().map_err(|e| format!("running nested cargo: {e}"))?;
        if !out.status.success() {
            return Err(format!("building kernels-gpu for {TARGET} failed (see the errors above)"));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let ptx: Vec<&str> = stdout
            .lines()
            .filter(|l| l.contains("\"reason\":\"compiler-artifact\""))
            .flat_map(json_string_array_items("filenames"))
            .filter(|f| f.ends_with(".ptx"))
            .collect();
        match ptx.as_slice() {
            [one] => Ok(PathBuf::from(one)),
            other => Err(format!("expected exactly one .ptx artifact, got {other:?}")),
        }
    }
}

/// Where the project's tools put ptxas when the machine has none (`cargo
/// xtask` installs PyPI's `nvidia-cuda-nvcc` there).
pub fn tools_ptxas(target_root: &Path) -> PathBuf {
    target_root.join("tools/nvcc/nvidia/cu13/bin/ptxas")
}

/// ptxas: `$PTXAS`, else the project's tools directory, else one on `PATH`,
/// else the one PyPI's `nvidia-cuda-nvcc` put in the Python environment
/// the build runs in (the Python package's build requirement).
pub fn find_ptxas(target_root: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PTXAS") {
        return Some(PathBuf::from(p));
    }
    let local = tools_ptxas(target_root);
    if local.is_file() {
        return Some(local);
    }
    if Command::new("ptxas").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Some(PathBuf::from("ptxas"));
    }
    python_ptxas()
}

/// `nvidia/cu13/bin/ptxas` in the Python environment of `$PYO3_PYTHON`
/// (what maturin builds for) or `python3`: where `pip install ./python`'s
/// isolated build environment has `nvidia-cuda-nvcc`.
fn python_ptxas() -> Option<PathBuf> {
    let python = std::env::var_os("PYO3_PYTHON").unwrap_or_else(|| "python3".into());
    let script = "import importlib.util as u, os\ns = u.find_spec('nvidia')\nfor p in (s.submodule_search_locations if s else []):\n    print(os.path.join(p, 'cu13', 'bin', 'ptxas'))";
    let out = Command::new(python).args(["-c", script]).stderr(Stdio::null()).output().ok()?;
    String::from_utf8_lossy(&out.stdout).lines().map(PathBuf::from).find(|p| p.is_file())
}

/// The PTX compiled ahead: what `build_fatbin` made.
pub struct Fatbin {
    /// A compressed fatbin holding the `arch` cubin, which the driver
    /// loads without compiling anything on a device it runs on, and for a
    /// portable architecture the PTX too, which the driver compiles on
    /// the later ones.
    pub fatbin: PathBuf,
    /// ptxas's `-v` report (registers, stack and spills per kernel).
    pub report: String,
}

/// Compiles `ptx` for `arch` with ptxas (all cores) and packs the cubin
/// (and, portable, the PTX) into a compressed fatbin with the `fatbinary`
/// beside ptxas. The result is kept in `cache_dir` under the PTX's hash,
/// so builds of the same PTX (another profile, a test after a build)
/// reuse it.
pub fn build_fatbin(ptx: &Path, arch: Arch, ptxas: &Path, cache_dir: &Path) -> Result<Fatbin, String> {
    let text = std::fs::read(ptx).map_err(|e| format!("{}: {e}", ptx.display()))?;
    let hash = text.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3));
    // (`-cubin`: the fatbin's contents; fatbins that also held the PTX
    // were named by the hash alone.)
    // A portable architecture's fatbin carries its PTX beside the cubin.
    let with_ptx = !arch.is_specific();
    let contents = if with_ptx { "cubin-ptx" } else { "cubin" };
    let arch = arch.name();
    let stem_name = format!("decode_attn-{arch}-{hash:016x}-{contents}");
    let stem = cache_dir.join(&stem_name);
    let (fatbin, report_file) = (stem.with_extension("fatbin"), stem.with_extension("ptxas.txt"));
    // One ptxas at a time across build scripts running side by side (a
    // test build and the wheel's): on Hopper's module each took 12 GB, and
    // two ran a 24 GB machine out of memory. The later one then finds the
    // earlier one's fatbin. (Released when `lock` drops.)
    std::fs::create_dir_all(cache_dir).map_err(|e| format!("{}: {e}", cache_dir.display()))?;
    let lock = std::fs::File::create(cache_dir.join(".ptxas.lock")).map_err(|e| format!("{}: {e}", cache_dir.display()))?;
    lock.lock().map_err(|e| format!("locking {}: {e}", cache_dir.join(".ptxas.lock").display()))?;
    if let (true, Ok(report)) = (fatbin.is_file(), std::fs::read_to_string(&report_file)) {
        return Ok(Fatbin { fatbin, report });
    }
    let cubin = stem.with_extension("cubin");
    let out = Command::new(ptxas)
        .args([&format!("-arch={arch}"), "-v", "--split-compile", "0"])
        .arg(ptx)
        .arg("-o")
        .arg(&cubin)
        .output()
        .map_err(|e| format!("running {}: {e}", ptxas.display()))?;
    let report = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(format!("ptxas rejected the PTX ({}; killed without a message: out of memory?):\n{report}", out.status));
    }
    let fatbinary = ptxas.with_file_name("fatbinary");
    let fatbinary = if fatbinary.is_file() { fatbinary } else { PathBuf::from("fatbinary") };
    let sm = arch.trim_start_matches("sm_");
    // Compressed for size (71.6 MB of sm_90a cubin → 4.5 MB). `sm_90a` PTX
    // runs on compute capability 9.0 only, where the cubin does, so the
    // driver could never need it; a portable target's PTX is what later
    // GPUs (sm_90 forced portable, Blackwell) compile.
    let mut images = vec![format!("--image3=kind=elf,sm={sm},file={}", cubin.display())];
    if with_ptx {
        images.push(format!("--image3=kind=ptx,sm={sm},file={}", ptx.display()));
    }
    let status = Command::new(&fatbinary)
        .arg(format!("--create={}", fatbin.display()))
        .args(["--compress-all", "--compress-mode=size"])
        .args(&images)
        .status()
        .map_err(|e| format!("running {}: {e}", fatbinary.display()))?;
    let _ = std::fs::remove_file(&cubin);
    if !status.success() {
        let _ = std::fs::remove_file(&fatbin);
        return Err(format!("{} failed with {status}", fatbinary.display()));
    }
    // The report last: a fatbin counts as built once its report exists.
    std::fs::write(&report_file, &report).map_err(|e| format!("{}: {e}", report_file.display()))?;
    // Older PTX's fatbins of this architecture are of no further use.
    let prefix = format!("decode_attn-{arch}-");
    for old in std::fs::read_dir(cache_dir).into_iter().flatten().flatten().map(|e| e.path()) {
        let name = old.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with(&prefix) && !name.starts_with(&format!("{stem_name}.")) {
            let _ = std::fs::remove_file(&old);
        }
    }
    Ok(Fatbin { fatbin, report })
}

/// Rejects PTX that still calls something outside itself: every call must
/// have been inlined or linked, or the module fails to load.
pub fn check_ptx(ptx: &str) -> Result<(), String> {
    if let Some(line) = ptx.lines().find(|l| l.contains(".extern .func")) {
        return Err(format!("PTX has an unresolved external function: `{}`", line.trim()));
    }
    if !ptx.contains(".entry") {
        return Err("PTX has no kernel entry point".into());
    }
    Ok(())
}

/// Adds `.maxnreg N` after the parameter list of each named entry (`.entry
/// NAME(` … `)`, before its body), as `__launch_bounds__` / `maxnreg` would
/// in CUDA C++. Every named entry must exist.
/// One pass over the module (a search and an insertion per entry, over a
/// module of 1500 kernels and 260 MB, took minutes).
pub fn cap_registers<'a>(ptx: &str, caps: impl IntoIterator<Item = (&'a str, u32)>) -> Result<String, String> {
    let mut caps: std::collections::BTreeMap<&str, u32> = caps.into_iter().collect();
    let mut out = String::with_capacity(ptx.len() + 24 * caps.len());
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry ") {
        let name_at = at + ".entry ".len();
        let Some(open) = rest[name_at..].find('(').map(|i| name_at + i) else { break };
        let name = &rest[name_at..open];
        match caps.remove(name) {
            Some(regs) => {
                let close = rest[open..].find(')').map(|i| open + i + 1).ok_or_else(|| format!("`{name}`: unterminated parameter list"))?;
                out.push_str(&rest[..close]);
                out.push_str(&format!("\n.maxnreg {regs}"));
                rest = &rest[close..];
            }
            None => {
                out.push_str(&rest[..open]);
                rest = &rest[open..];
            }
        }
    }
    out.push_str(rest);
    match caps.keys().next() {
        Some(name) => Err(format!("register cap for `{name}`: no such entry in the PTX")),
        None => Ok(out),
    }
}

/// The `.entry` names in a PTX module.
pub fn ptx_entries(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|l| l.trim().split_once(".entry "))
        .map(|(_, rest)| rest.trim_end_matches(['(', ' ']).to_owned())
        .collect()
}

struct Toolchain {
    rustc: PathBuf,
    cargo: PathBuf,
    llvm_bin: PathBuf,
}

impl Toolchain {
    fn detect() -> Result<Self, String> {
        let rustc = PathBuf::from(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()));
        let cargo = PathBuf::from(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        let sysroot = capture(clean_env(Command::new(&rustc)).args(["--print", "sysroot"]))?;
        let vv = capture(clean_env(Command::new(&rustc)).arg("-vV"))?;
        let host = vv
            .lines()
            .find_map(|l| l.strip_prefix("host: "))
            .ok_or("rustc -vV printed no host line")?
            .to_owned();
        if !vv.contains("-nightly") {
            return Err(format!("kernels need a nightly rustc (see rust-toolchain.toml), got: {}", vv.lines().next().unwrap_or("")));
        }
        let llvm_bin = Path::new(sysroot.trim()).join("lib/rustlib").join(&host).join("bin");
        if !llvm_bin.join("llvm-link").exists() {
            return Err(format!(
                "{} has no llvm-link: run `rustup component add llvm-tools rust-src`",
                llvm_bin.display()
            ));
        }
        Ok(Toolchain { rustc, cargo, llvm_bin })
    }
}

/// Drops what an outer cargo (or build script) exports that would leak into
/// the nested build: its flags, target, profile and output directories.
fn clean_env(mut cmd: Command) -> Command {
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let leaks = key.starts_with("CARGO_CFG_")
            || key.starts_with("CARGO_FEATURE_")
            || key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_PROFILE_")
            || key.starts_with("CARGO_BUILD_")
            || key.starts_with("CARGO_TARGET_")
            || key.starts_with("DEP_")
            || matches!(
                key,
                "RUSTFLAGS"
                    | "CARGO_ENCODED_RUSTFLAGS"
                    | "RUSTDOCFLAGS"
                    | "CARGO_ENCODED_RUSTDOCFLAGS"
                    | "RUSTC_WRAPPER"
                    | "RUSTC_WORKSPACE_WRAPPER"
                    | "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "OUT_DIR"
                    | "TARGET"
                    | "HOST"
                    | "PROFILE"
                    | "OPT_LEVEL"
                    | "DEBUG"
                    | "NUM_JOBS"
                    | "RUSTC_LINKER"
                    | "CARGO_LLVM_COV"
            );
        if leaks {
            cmd.env_remove(key);
        }
    }
    cmd
}

fn capture(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("running {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn is_newer(artifact: &Path, source: &Path) -> bool {
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    matches!((mtime(artifact), mtime(source)), (Some(a), Some(s)) if a >= s)
}

/// Items of a JSON string array field `"key":["a","b"]` in one line of
/// cargo's JSON output (paths from cargo never contain `"` or `,`-escapes we
/// would need to decode beyond `\\`).
fn json_string_array_items(key: &'static str) -> impl Fn(&str) -> Vec<&str> {
    move |line: &str| {
        let needle = format!("\"{key}\":[");
        let Some(start) = line.find(&needle) else { return Vec::new() };
        let rest = &line[start + needle.len()..];
        let Some(end) = rest.find(']') else { return Vec::new() };
        rest[..end].split(',').map(|s| s.trim().trim_matches('"')).filter(|s| !s.is_empty()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_registers_of_named_entries_only() {
        let ptx = ".visible .entry a(\n\t.param .u64 p\n)\n{\n}\n.visible .entry b(\n)\n{\n}\n";
        let capped = cap_registers(ptx, [("b", 128)]).unwrap();
        assert!(capped.contains(".entry b(\n)\n.maxnreg 128\n{"), "{capped}");
        assert_eq!(capped.matches(".maxnreg").count(), 1);
        assert!(cap_registers(ptx, [("c", 128)]).is_err());
    }

    #[test]
    fn finds_entries_and_rejects_externs() {
        let ptx = ".visible .entry foo(\n.param .align 8 .b8 foo_param_0[16]\n)\n.visible .entry bar(\n";
        assert_eq!(ptx_entries(ptx), vec!["foo", "bar"]);
        assert!(check_ptx(ptx).is_ok());
        let bad = format!("{ptx}\n.extern .func panic_bounds_check()\n");
        assert!(check_ptx(&bad).unwrap_err().contains("panic_bounds_check"));
    }

    #[test]
    fn reads_filenames_from_cargo_json() {
        let line = r#"{"reason":"compiler-artifact","filenames":["/t/a.ptx","/t/b.d"],"x":1}"#;
        assert_eq!(json_string_array_items("filenames")(line), vec!["/t/a.ptx", "/t/b.d"]);
    }
}
