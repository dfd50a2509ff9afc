//! Builds `kernels-gpu` into PTX, the way `cuda_builder` does for
//! Rust-CUDA, then compiles the PTX ahead with ptxas into a compressed
//! fatbin (the cubin) that the crate embeds and `DecodeAttention::new`
//! loads without a driver compilation. The PTX itself is embedded only
//! where there is no fatbin; its path is `PTX_FILE` for the tests.
//! `DECODE_ATTN_ARCH` selects the target (`sm_90a`, the one supported).
//! Also builds the stand-in `libcuda.so` that binaries link against (see
//! `build/cuda_stub.rs`), so no CUDA package has to be installed to build or
//! to run the CPU tests.
//!
//! ptxas comes from `$PTXAS`, the project's tools directory (`cargo xtask`
//! installs PyPI's `nvidia-cuda-nvcc` there) or `PATH`. Without one the
//! library embeds no fatbin, says so in a build warning, and `new()`
//! hands the PTX to the driver instead (minutes on a cold driver cache).

use std::path::PathBuf;

#[path = "build/cuda_stub.rs"]
mod cuda_stub;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let workspace = manifest.parent().unwrap().to_path_buf();
    for dir in ["kernels-gpu/src", "kernels-gpu/Cargo.toml", "crates/abi/src", "crates/abi/build.rs", "crates/ptx-builder/src"] {
        println!("cargo:rerun-if-changed={}", workspace.join(dir).display());
    }
    println!("cargo:rerun-if-env-changed=DECODE_ATTN_ARCH");
    println!("cargo:rerun-if-env-changed=PTXAS");
    let arch = std::env::var("DECODE_ATTN_ARCH").unwrap_or_else(|_| ptx_builder::DEFAULT_ARCH.to_owned());
    let target_root = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace.join("target"));
    let fail = |e: String| -> ! {
        eprintln!("error: {e}");
        std::process::exit(1);
    };
    let ptx = ptx_builder::PtxBuild::for_workspace(&workspace, &target_root, &arch).build().unwrap_or_else(|e| fail(e));
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let out = out_dir.join("decode_attn.ptx");
    std::fs::copy(&ptx, &out).expect("copy PTX into OUT_DIR");
    println!("cargo:rustc-env=DECODE_ATTN_PTX_ARCH={arch}");
    println!("cargo:rustc-env=DECODE_ATTN_PTX_FILE={}", out.display());

    // The PTX compiled ahead, or an empty file (`FATBIN` is then `None`).
    let report = match ptx_builder::find_ptxas(&target_root) {
        Some(ptxas) => {
            let built = ptx_builder::build_fatbin(&out, &arch, &ptxas, &target_root.join("ptx")).unwrap_or_else(|e| fail(e));
            std::fs::copy(&built.fatbin, out_dir.join("decode_attn.fatbin")).expect("copy the fatbin into OUT_DIR");
            // The fatbin serves the device the PTX could: embed no PTX.
            std::fs::write(out_dir.join("embedded.ptx"), b"").expect("write the embedded PTX");
            built.report
        }
        None => {
            println!("cargo:warning=no ptxas ($PTXAS, target/tools or PATH; `cargo xtask test` installs one): decode-attn embeds no compiled kernels, and DecodeAttention::new() hands the PTX to the driver (minutes on a cold driver cache)");
            std::fs::write(out_dir.join("decode_attn.fatbin"), b"").expect("write an empty fatbin");
            std::fs::copy(&out, out_dir.join("embedded.ptx")).expect("copy the PTX to embed");
            String::new()
        }
    };
    std::fs::write(out_dir.join("ptxas-report.txt"), report).expect("write the ptxas report");
    println!("cargo:rerun-if-changed={}", manifest.join("build").display());
    cuda_stub::build(&out_dir);
}
