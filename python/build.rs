//! Builds the stand-in `libcuda.so.1` the package loads where the machine
//! has no NVIDIA driver (`decode_attn/_driver.py`), so the extension
//! imports and the CPU-side checks work there; every driver call then
//! answers `CUDA_ERROR_NO_DEVICE`. It is the Rust crate's own stub
//! (`host/build/cuda_stub.rs`), copied into the package directory, where
//! maturin's `include` puts it in the wheel.

use std::path::PathBuf;

#[path = "../host/build/cuda_stub.rs"]
mod cuda_stub;

fn main() {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    println!("cargo:rerun-if-changed=../host/build");
    cuda_stub::build(&out_dir);
    let dest = manifest.join("decode_attn/_nodriver");
    std::fs::create_dir_all(&dest).expect("create decode_attn/_nodriver");
    std::fs::copy(out_dir.join("cuda-link/libcuda.so"), dest.join("libcuda.so.1")).expect("copy the libcuda stand-in into the package");
}
