//! The embedded PTX: every kernel the host names is in it, nothing is left
//! unresolved, the kernels the planner counts two blocks per SM for carry
//! their register cap, and (when a ptxas is available) it assembles for
//! sm_90 with no local memory and within those caps.

use decode_attn_abi::{decode_kernel_name, has_capacity_twin, merge_kernel_name, wgmma_specializable, Addressing, Dtype, KvFormat, Family, DECODE_KERNELS, HEAD_DIMS, MERGE_KERNELS, QUANT_KERNELS, UTILITY_KERNELS};

fn host_names() -> Vec<&'static str> {
    let mut names = UTILITY_KERNELS.to_vec();
    names.extend(DECODE_KERNELS.iter().map(|k| k.name));
    names.extend(MERGE_KERNELS.iter().map(|k| k.name));
    names.extend(QUANT_KERNELS.iter().map(|k| k.name));
    names
}

/// Every format the library accepts has a kernel for its dtype at every
/// head dim, in both families and both addressings, and a merge kernel
/// exists for every dtype and head dim.
#[test]
fn the_kernel_table_covers_every_supported_combination() {
    for d in HEAD_DIMS {
        for dtype in Dtype::ALL {
            assert!(merge_kernel_name(dtype, d).is_some(), "no merge kernel for {dtype:?} d{d}");
        }
        for f in KvFormat::ALL.into_iter().filter(|f| f.supports_head_dim(d)) {
            let dtypes: Vec<Dtype> = match f.required_dtype() {
                Some(q) => vec![q],
                None => Dtype::ALL.to_vec(),
            };
            for (q, v) in dtypes.into_iter().flat_map(|q| Family::ALL.into_iter().filter(move |v| v.serves(f, d)).map(move |v| (q, v))) {
                for (a, cluster) in Addressing::ALL.into_iter().flat_map(|a| [(a, false), (a, true)]) {
                    assert!(decode_kernel_name(f, q, d, v, a, cluster, false, false, 1).is_some(), "no kernel for {f:?} / {q:?} / d{d} / {v:?} / {a:?} / cluster {cluster}");
                    let specializable = v == Family::Wgmma && wgmma_specializable(f, a == Addressing::Paged);
                    let twin = has_capacity_twin(f, d, v, a == Addressing::Paged, cluster);
                    assert_eq!(
                        decode_kernel_name(f, q, d, v, a, cluster, false, true, 1).is_some(),
                        twin,
                        "capacity twin of {f:?} / {q:?} / d{d} / {v:?} / {a:?} / cluster {cluster}: expected {twin}"
                    );
                    assert_eq!(
                        decode_kernel_name(f, q, d, v, a, cluster, true, false, 1).is_some(),
                        specializable,
                        "warp-specialised kernel for {f:?} / {q:?} / d{d} / {v:?} / {a:?} / cluster {cluster}: expected {specializable}"
                    );
                }
            }
        }
    }
}

#[test]
fn every_kernel_the_host_names_is_an_entry() {
    let entries = ptx_builder::ptx_entries(decode_attn::PTX);
    for name in host_names() {
        assert!(entries.iter().any(|e| e == name), "{name} missing from PTX entries {entries:?}");
    }
    assert_eq!(entries.len(), host_names().len(), "PTX has entries the host does not know: {entries:?}");
}

/// The narrow kernels of the quantized formats (head dims ≤ 128) are
/// compiled within 128 registers and the wide ones within 168: `.maxnreg`
/// right after their parameter list, and nowhere else.
#[test]
fn register_caps_are_in_the_ptx() {
    let capped: Vec<_> = DECODE_KERNELS.iter().filter_map(|k| Some((k.name, k.register_cap()?))).collect();
    assert!(capped.iter().any(|(n, _)| *n == "decode_narrow_kv_int8_q_bf16_d128"));
    assert!(capped.iter().any(|(n, r)| *n == "decode_paged_kv_bf16_q_bf16_d128" && *r == 168));
    assert!(DECODE_KERNELS.iter().all(|k| k.register_cap().is_none() || k.head_dim <= 128));
    for (name, regs) in &capped {
        let at = decode_attn::PTX.find(&format!(".entry {name}(")).unwrap();
        let head = &decode_attn::PTX[at..at + decode_attn::PTX[at..].find('{').unwrap()];
        assert!(head.contains(&format!(".maxnreg {regs}")), "{name}: {head}");
    }
    assert_eq!(decode_attn::PTX.matches(".maxnreg").count(), capped.len());
}

#[test]
fn no_unresolved_external_functions() {
    ptx_builder::check_ptx(decode_attn::PTX).unwrap();
}

/// Needs ptxas: `cargo xtask test` provides it (PATH, or PyPI into
/// `target/tools/`) and runs this; a plain `cargo test` reports it ignored.
#[test]
#[ignore = "needs ptxas (PTXAS=...); `cargo xtask test` runs it"]
fn ptxas_accepts_it_without_spills() {
    let ptxas = std::env::var_os("PTXAS").expect("set PTXAS to a ptxas binary (cargo xtask test does)");
    let dir = std::env::temp_dir().join(format!("decode-attn-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ptx = dir.join("k.ptx");
    std::fs::write(&ptx, decode_attn::PTX).unwrap();
    let arch = format!("-arch={}", decode_attn::PTX_ARCH);
    let out = std::process::Command::new(ptxas).args([arch.as_str(), "-v"]).arg(&ptx).arg("-o").arg(dir.join("k.cubin")).output().expect("running ptxas");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ptxas rejected the PTX:\n{log}");
    let mut kernel = "";
    for line in log.lines() {
        if let Some(rest) = line.split("Function properties for ").nth(1) {
            kernel = rest.trim();
        } else if line.contains("bytes stack frame") {
            assert!(line.trim_start().starts_with("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"), "{kernel}: {line}");
        } else if let Some(regs) = line.split("Used ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse::<u32>().ok()) {
            if let Some(cap) = DECODE_KERNELS.iter().find(|k| k.name == kernel).and_then(|k| k.register_cap()) {
                assert!(regs <= cap, "{kernel}: {regs} registers, cap {cap}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Binaries link against the libcuda stub `host/build.rs` builds on machines
/// without a driver: it must define every driver function `cust_raw`
/// declares (a superset of what any binary imports).
#[test]
fn libcuda_stub_defines_every_driver_function_cust_raw_declares() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--manifest-path", concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")])
        .output()
        .expect("running cargo metadata");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let manifest = meta["packages"].as_array().unwrap().iter().find(|p| p["name"] == "cust_raw").expect("cust_raw in the dependency graph")["manifest_path"]
        .as_str()
        .unwrap()
        .to_owned();
    let bindings = std::fs::read_to_string(std::path::Path::new(&manifest).with_file_name("src/cuda.rs")).expect("cust_raw's bindings");
    let declared: std::collections::BTreeSet<&str> =
        bindings.split("pub fn ").skip(1).filter_map(|rest| rest.split('(').next()).filter(|n| n.starts_with("cu")).collect();
    let stub: std::collections::BTreeSet<&str> = include_str!("../host/build/cuda-driver-symbols.txt").lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    assert!(declared.len() > 300, "found only {} declarations", declared.len());
    let missing: Vec<_> = declared.difference(&stub).collect();
    assert!(missing.is_empty(), "the libcuda stub lacks {missing:?}");
}
