//! Builds `kernels-gpu` into PTX, the way `cuda_builder` does for
//! Rust-CUDA, one module per architecture (`decode_attn_abi::Arch`: sm_90a,
//! and the portable sm_80 and sm_89), then compiles each ahead with ptxas
//! into a compressed fatbin that the crate embeds and
//! `DecodeAttention::new` loads without a driver compilation on the GPUs
//! its cubin runs on. A module's PTX is embedded only where there is no
//! fatbin; the files' paths are `PTX_FILES` for the tests.
//! Also builds the stand-in `libcuda.so` that binaries link against (see
//! `build/cuda_stub.rs`), so no CUDA package has to be installed to build or
//! to run the CPU tests.
//!
//! ptxas comes from `$PTXAS`, the project's tools directory (`cargo xtask`
//! installs PyPI's `nvidia-cuda-nvcc` there) or `PATH`. Without one the
//! library embeds no fatbin, says so in a build warning, and `new()`
//! hands the PTX to the driver instead (minutes on a cold driver cache).

use std::path::PathBuf;

use ptx_builder::Arch;

#[path = "build/cuda_stub.rs"]
mod cuda_stub;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let workspace = manifest.parent().unwrap().to_path_buf();
    for dir in ["kernels-gpu/src", "kernels-gpu/Cargo.toml", "crates/abi/src", "crates/abi/build.rs", "crates/ptx-builder/src"] {
        println!("cargo:rerun-if-changed={}", workspace.join(dir).display());
    }
    println!("cargo:rerun-if-env-changed=PTXAS");
    let target_root = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace.join("target"));
    let fail = |e: String| -> ! {
        eprintln!("error: {e}");
        std::process::exit(1);
    };
    // The nested builds side by side: each ends in one single-threaded
    // LLVM run (fat LTO, one codegen unit), so two cores halve the wait.
    let built: Vec<Result<PathBuf, String>> = std::thread::scope(|s| {
        let builds: Vec<_> = Arch::ALL.into_iter().map(|arch| s.spawn({
            let (workspace, target_root) = (&workspace, &target_root);
            move || ptx_builder::PtxBuild::for_workspace(workspace, target_root, arch).build()
        })).collect();
        builds.into_iter().map(|b| b.join().unwrap_or_else(|_| Err("a PTX build panicked".into()))).collect()
    });
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let ptxas = ptx_builder::find_ptxas(&target_root);
    if ptxas.is_none() {
        println!("cargo:warning=no ptxas ($PTXAS, target/tools or PATH; `cargo xtask test` installs one): decode-attn embeds no compiled kernels, and DecodeAttention::new() hands the PTX to the driver (minutes on a cold driver cache)");
    }
    let mut files = Vec::new();
    for (arch, ptx) in Arch::ALL.into_iter().zip(built) {
        let ptx = ptx.unwrap_or_else(|e| fail(e));
        let name = arch.name();
        let out = out_dir.join(format!("decode_attn-{name}.ptx"));
        std::fs::copy(&ptx, &out).expect("copy PTX into OUT_DIR");
        files.push(out.display().to_string());
        // The PTX compiled ahead, or an empty file (the module's fatbin is
        // then `None`).
        let (fatbin, embedded, report) = match &ptxas {
            Some(ptxas) => {
                let built = ptx_builder::build_fatbin(&out, arch, ptxas, &target_root.join("ptx")).unwrap_or_else(|e| fail(e));
                // The fatbin serves the devices the PTX could: embed no PTX.
                (std::fs::read(&built.fatbin).expect("read the fatbin"), String::new(), built.report)
            }
            None => (Vec::new(), std::fs::read_to_string(&out).expect("read the PTX"), String::new()),
        };
        std::fs::write(out_dir.join(format!("{name}.fatbin")), fatbin).expect("write the fatbin");
        std::fs::write(out_dir.join(format!("{name}.embedded.ptx")), embedded).expect("write the embedded PTX");
        std::fs::write(out_dir.join(format!("{name}.ptxas-report.txt")), report).expect("write the ptxas report");
    }
    println!("cargo:rustc-env=DECODE_ATTN_PTX_FILES={}", files.join(";"));
    // One image per architecture, in `Arch::ALL`'s order (`include_bytes!`
    // needs literal paths: the list is written here, from `Arch::ALL`).
    let images: String = Arch::ALL.into_iter().map(|a| format!("module_image!({:?}, {:?}),\n", a, a.name())).collect();
    std::fs::write(out_dir.join("module_images.rs"), format!("[\n{images}]\n")).expect("write the module images");
    println!("cargo:rerun-if-changed={}", manifest.join("build").display());
    cuda_stub::build(&out_dir);
}
