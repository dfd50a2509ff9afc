//! Builds `kernels-gpu` into PTX and hands it to the crate (`include_str!`),
//! the way `cuda_builder` does for Rust-CUDA. `DECODE_ATTN_ARCH` selects the
//! target (`sm_90a`, the one supported). Also builds the stand-in `libcuda.so` that
//! binaries link against (see `build/cuda_stub.rs`), so no CUDA package has
//! to be installed to build or to run the CPU tests.

use std::path::PathBuf;

#[path = "build/cuda_stub.rs"]
mod cuda_stub;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let workspace = manifest.parent().unwrap().to_path_buf();
    for dir in ["kernels-gpu/src", "kernels-gpu/Cargo.toml", "crates/abi/src", "crates/ptx-builder/src"] {
        println!("cargo:rerun-if-changed={}", workspace.join(dir).display());
    }
    println!("cargo:rerun-if-env-changed=DECODE_ATTN_ARCH");
    let arch = std::env::var("DECODE_ATTN_ARCH").unwrap_or_else(|_| ptx_builder::DEFAULT_ARCH.to_owned());
    let target_root = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace.join("target"));
    let ptx = match ptx_builder::PtxBuild::for_workspace(&workspace, &target_root, &arch).build() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("decode_attn.ptx");
    std::fs::copy(&ptx, &out).expect("copy PTX into OUT_DIR");
    println!("cargo:rustc-env=DECODE_ATTN_PTX_ARCH={arch}");
    println!("cargo:rerun-if-changed={}", manifest.join("build").display());
    cuda_stub::build(&PathBuf::from(std::env::var_os("OUT_DIR").unwrap()));
}
