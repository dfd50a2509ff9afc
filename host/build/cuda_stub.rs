//! A stand-in `libcuda.so` to link against on machines without the NVIDIA
//! driver, built here instead of installing anything on the system.
//!
//! The linker only needs a library whose SONAME is `libcuda.so.1` and which
//! defines every driver function the binary calls; it records
//! `DT_NEEDED libcuda.so.1`, so at run time the real driver is loaded
//! wherever one is installed. The link directory holds only `libcuda.so`
//! (the link-time name), never `libcuda.so.1`, so it can never shadow the
//! driver. Only where no driver exists is a second directory with the stub
//! as `libcuda.so.1` added; cargo puts build-script search paths inside the
//! target directory on the loader path of `cargo test` / `cargo run`. There
//! every function returns `CUDA_ERROR_NO_DEVICE`, so `cuInit` fails cleanly
//! and GPU tests report themselves skipped.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `CUDA_ERROR_NO_DEVICE`.
const NO_DEVICE: u32 = 100;

/// Every driver function `cust_raw` 0.11 declares (one per line).
const SYMBOLS: &str = include_str!("cuda-driver-symbols.txt");

/// Builds the stub into `out_dir` and prints the cargo directives.
pub fn build(out_dir: &Path) {
    let link_dir = out_dir.join("cuda-link");
    let run_dir = out_dir.join("cuda-run");
    for dir in [&link_dir, &run_dir] {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    }
    let mut src = String::from("#![no_std]\n#[panic_handler]\nfn panic(_: &core::panic::PanicInfo) -> ! { loop {} }\n");
    // cust formats errors through these two, so they answer properly.
    src.push_str(concat!(
        "static MESSAGE: &[u8] = b\"no CUDA driver on this machine (decode-attn's libcuda stub)\\0\";\n",
        "#[no_mangle] pub unsafe extern \"C\" fn cuGetErrorString(_e: u32, s: *mut *const u8) -> u32 { if s.is_null() { return 1 } *s = MESSAGE.as_ptr(); 0 }\n",
        "#[no_mangle] pub unsafe extern \"C\" fn cuGetErrorName(_e: u32, s: *mut *const u8) -> u32 { if s.is_null() { return 1 } *s = b\"CUDA_ERROR_NO_DEVICE\\0\".as_ptr(); 0 }\n",
    ));
    for sym in SYMBOLS.lines().map(str::trim).filter(|s| !s.is_empty() && !s.starts_with("cuGetError")) {
        let _ = writeln!(src, "#[no_mangle] pub extern \"C\" fn {sym}() -> u32 {{ {NO_DEVICE} }}");
    }
    let src_path = out_dir.join("cuda_stub.rs");
    std::fs::write(&src_path, src).expect("write cuda_stub.rs");
    // Built beside and renamed into place: a process that has the library
    // loaded (a test binary of a parallel build) keeps its file, where a
    // rewrite in place crashed it.
    let lib = link_dir.join("libcuda.so");
    let tmp = link_dir.join(format!("libcuda.so.{}.tmp", std::process::id()));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc)
        .args(["--crate-type", "cdylib", "--edition", "2021", "--crate-name", "cuda", "-O", "-C", "panic=abort"])
        .args(["-C", "link-arg=-Wl,-soname,libcuda.so.1"])
        .arg(&src_path)
        .arg("-o")
        .arg(&tmp)
        .output()
        .expect("running rustc for the libcuda stub");
    if !out.status.success() {
        panic!("building the libcuda stub failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    std::fs::rename(&tmp, &lib).expect("rename the libcuda stub into place");
    println!("cargo:rustc-link-search=native={}", link_dir.display());
    println!("cargo:rerun-if-env-changed=LD_LIBRARY_PATH");
    if find_driver().is_none() {
        let (run_tmp, run_lib) = (run_dir.join(format!("libcuda.so.1.{}.tmp", std::process::id())), run_dir.join("libcuda.so.1"));
        std::fs::copy(&lib, &run_tmp).expect("copy the libcuda stub");
        std::fs::rename(&run_tmp, &run_lib).expect("rename the libcuda stub into place");
        println!("cargo:rustc-link-search=native={}", run_dir.display());
    }
}

/// The installed driver's `libcuda.so.1`, if any.
pub fn find_driver() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    dirs.extend(
        ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/nvidia/lib64", "/usr/lib/wsl/lib"]
            .iter()
            .map(PathBuf::from),
    );
    if let Some(p) = dirs.iter().map(|d| d.join("libcuda.so.1")).find(|p| p.exists()) {
        return Some(p);
    }
    let cache = Command::new("/sbin/ldconfig").arg("-p").output().ok()?;
    String::from_utf8_lossy(&cache.stdout)
        .lines()
        .find(|l| l.trim_start().starts_with("libcuda.so.1 "))
        .and_then(|l| l.rsplit("=> ").next())
        .map(|p| PathBuf::from(p.trim()))
}
