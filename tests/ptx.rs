//! The build's PTX, one module per architecture (`decode_attn::ptx_file`;
//! what the embedded fatbins were compiled from): every kernel the host
//! names of an architecture is in its module, nothing is left unresolved,
//! the kernels the planner counts two blocks per SM for carry their
//! register cap, and (when a ptxas is available) each assembles for its
//! architecture with no local memory and within those caps.

use decode_attn_abi::{
    Arch, decode_kernel_name, has_capacity_twin, has_head_pair_form, merge_kernel_name, quant_kernel_name, wgmma_specializable, Addressing, Dtype, Family, Form, HeadDims, KernelId, KvFormat, Merge, QuantDirection, QuantKernelId, Variant, DECODE_KERNELS,
    HEAD_DIMS, MERGE_KERNELS, MLA_DIMS, QUANT_KERNELS, UTILITY_KERNELS,
};

/// The build's PTX text of `arch`'s module, read once.
fn ptx(arch: Arch) -> &'static str {
    static TEXT: [std::sync::OnceLock<String>; Arch::ALL.len()] = [const { std::sync::OnceLock::new() }; Arch::ALL.len()];
    TEXT[arch as usize].get_or_init(|| std::fs::read_to_string(decode_attn::ptx_file(arch)).expect("the build's PTX file"))
}

/// The kernels the host looks up in `arch`'s module.
fn host_names(arch: Arch) -> Vec<&'static str> {
    let mut names = if arch.holds(Arch::Sm80) { UTILITY_KERNELS.to_vec() } else { Vec::new() };
    // The tensor-core rate is a `wgmma` loop: Hopper's module only.
    names.retain(|&n| arch == Arch::Sm90a || n != decode_attn_abi::MMA_RATE_KERNEL);
    names.extend(DECODE_KERNELS.iter().filter(|k| k.id.arch == arch).map(|k| k.name));
    names.extend(MERGE_KERNELS.iter().filter(|k| k.id.arch == arch).map(|k| k.name));
    names.extend(QUANT_KERNELS.iter().filter(|k| k.id.arch == arch).map(|k| k.name));
    names
}

/// The kernel set as the planner relies on it: every format the library
/// accepts has, for every dtype it computes with, head dim, family that
/// serves it, addressing and merge, its plain standard kernel; every
/// variant has the plain global-merge kernel of each of them; the
/// warp-specialised, capacity-twin and head-pair forms exist exactly where
/// their predicates say; and no two kernels share a symbol.
#[test]
fn the_kernel_set_is_the_product_of_its_axes_filtered_by_its_rules() {
    let id = |format, dtype, head_dim, family, addressing, merge, form, variant| KernelId { arch: Arch::Sm90a, format, dtype, dims: HeadDims::square(head_dim), family, addressing, merge, form, variant };
    for d in HEAD_DIMS {
        for dtype in Dtype::ALL {
            for sinks in [false, true] {
                assert!(merge_kernel_name(Arch::Sm90a, dtype, d, sinks).is_some(), "no merge kernel for {dtype:?} d{d} (sinks: {sinks})");
                assert!(merge_kernel_name(Arch::Sm80, dtype, d, sinks).is_some(), "no portable merge kernel for {dtype:?} d{d} (sinks: {sinks})");
                assert!(merge_kernel_name(Arch::Sm89, dtype, d, sinks).is_none(), "sm_89 GPUs take the merges of the sm_80 module");
            }
        }
        for f in KvFormat::ALL.into_iter().filter(|f| f.supports_head_dim(d)) {
            let dtypes: Vec<Dtype> = f.required_dtype().map_or(Dtype::ALL.to_vec(), |q| vec![q]);
            for (q, fam) in dtypes.into_iter().flat_map(|q| Family::ALL.into_iter().filter(move |v| v.serves(f, d)).map(move |v| (q, v))) {
                for a in Addressing::ALL {
                    for m in Merge::ALL {
                        let k = |form, variant| decode_kernel_name(&id(f, q, d, fam, a, m, form, variant));
                        assert!(k(Form::Plain, Variant::Standard).is_some(), "no kernel for {f:?} / {q:?} / d{d} / {fam:?} / {a:?} / {m:?}");
                        for v in Variant::ALL {
                            assert_eq!(k(Form::Plain, v).is_some(), m == Merge::Global || v == Variant::Standard, "{v:?} kernel of {f:?} / {q:?} / d{d} / {fam:?} / {a:?} / {m:?}");
                            let specializable = fam == Family::Wgmma && wgmma_specializable(f, a.is_paged()) && v.builds(m, Form::Specialized);
                            assert_eq!(k(Form::Specialized, v).is_some(), specializable, "warp-specialised {v:?} kernel of {f:?} / {q:?} / d{d} / {fam:?} / {a:?} / {m:?}");
                            let twin = has_capacity_twin(f, d, fam, a.is_paged(), m.is_cluster()) && v == Variant::Standard;
                            assert_eq!(k(Form::Capacity, v).is_some(), twin, "capacity twin of {f:?} / {q:?} / d{d} / {fam:?} / {a:?} / {m:?} / {v:?}");
                            let pair = has_head_pair_form(f, d, fam, m.is_cluster()) && v == Variant::Standard;
                            assert_eq!(k(Form::HeadPair, v).is_some(), pair, "head pair of {f:?} / {q:?} / d{d} / {fam:?} / {a:?} / {m:?} / {v:?}");
                            assert!(k(Form::Transposed, v).is_none() && k(Form::TransposedRows, v).is_none(), "a transposed kernel outside the MLA family: {f:?} / d{d} / {fam:?}");
                        }
                    }
                }
            }
        }
    }
    // MLA's latent rows: bf16 queries over a bf16, fp8-per-head or
    // fp8-ds-mla cache, both addressings, global merge (the plain kernel a
    // cluster merge too), standard variant,
    // Hopper's module alone, each plain and transposed (blocks of at most
    // 16 rows), the fp8 ones in row chunks too (`TransposedRows`); merges of V's 512; the cache kernels of a 576-value row for
    // those three formats alone, and fp8-ds-mla's of no other row, from
    // bf16 rows alone.
    let mla = |arch, format, dtype, addressing, merge, variant| KernelId { arch, format, dtype, dims: MLA_DIMS, family: Family::Mla, addressing, merge, form: Form::Plain, variant };
    for format in KvFormat::ALL {
        let latent = format.holds_latent();
        assert_eq!(latent, matches!(format, KvFormat::Bf16 | KvFormat::Fp8PerHead | KvFormat::Fp8DsMla));
        for a in Addressing::ALL {
            assert_eq!(decode_kernel_name(&mla(Arch::Sm90a, format, Dtype::Bf16, a, Merge::Global, Variant::Standard)).is_some(), latent, "MLA kernel of {format:?}, {a:?}");
            let transposed = KernelId { form: Form::Transposed, ..mla(Arch::Sm90a, format, Dtype::Bf16, a, Merge::Global, Variant::Standard) };
            assert_eq!(decode_kernel_name(&transposed).is_some(), latent, "transposed MLA kernel of {format:?}, {a:?}");
            let rows = KernelId { form: Form::TransposedRows, ..transposed };
            assert_eq!(decode_kernel_name(&rows).is_some(), latent && format != KvFormat::Bf16, "row-chunk MLA kernel of {format:?}, {a:?}");
            assert_eq!(decode_attn_abi::has_transposed_rows_form(format, Family::Mla), decode_attn_abi::mla_t_ring(format).is_some(), "the row-chunk form is the ring's: {format:?}");
            for form in [Form::Specialized, Form::Capacity, Form::HeadPair] {
                assert!(decode_kernel_name(&KernelId { form, ..transposed }).is_none(), "{form:?} MLA kernel of {format:?}");
            }
            assert!(decode_kernel_name(&mla(Arch::Sm90a, format, Dtype::F16, a, Merge::Global, Variant::Standard)).is_none(), "the MLA kernels take bf16 queries alone");
            // (The cluster merge: the 64-row kernel's alone.)
            let cluster = mla(Arch::Sm90a, format, Dtype::Bf16, a, Merge::Cluster, Variant::Standard);
            assert_eq!(decode_kernel_name(&cluster).is_some(), latent, "cluster-merge MLA kernel of {format:?}, {a:?}");
            assert!(decode_kernel_name(&KernelId { form: Form::Transposed, ..cluster }).is_none() && decode_kernel_name(&KernelId { form: Form::TransposedRows, ..cluster }).is_none());
            assert!(Variant::ALL.into_iter().filter(|&v| v != Variant::Standard).all(|v| decode_kernel_name(&mla(Arch::Sm90a, format, Dtype::Bf16, a, Merge::Global, v)).is_none()));
            assert!(decode_kernel_name(&mla(Arch::Sm80, format, Dtype::Bf16, a, Merge::Global, Variant::Standard)).is_none());
        }
        let row_kernels = QUANT_KERNELS.iter().filter(|k| k.id.format == format && k.id.head_dim == MLA_DIMS.qk && k.id.arch == Arch::Sm90a).count();
        assert_eq!(row_kernels > 0, latent, "cache kernels of a latent row in {format:?}");
    }
    let ds: Vec<_> = QUANT_KERNELS.iter().filter(|k| k.id.format == KvFormat::Fp8DsMla).map(|k| k.id).collect();
    assert!(!ds.is_empty() && ds.iter().all(|k| k.head_dim == MLA_DIMS.qk && k.dtype == Dtype::Bf16), "fp8-ds-mla's cache kernels: {ds:?}");
    assert!(DECODE_KERNELS.iter().filter(|k| k.id.format == KvFormat::Fp8DsMla).all(|k| k.id.family == Family::Mla));
    assert_eq!(DECODE_KERNELS.iter().filter(|k| k.id.family == Family::Mla).count(), 22);
    assert!(DECODE_KERNELS.iter().all(|k| k.id.dims.is_square() != (k.id.family == Family::Mla)));
    for dtype in Dtype::ALL {
        assert!(merge_kernel_name(Arch::Sm90a, dtype, MLA_DIMS.v, false).is_some() && merge_kernel_name(Arch::Sm80, dtype, MLA_DIMS.v, false).is_none());
    }
    for arch in Arch::ALL {
        let names: std::collections::BTreeSet<_> = host_names(arch).into_iter().collect();
        assert_eq!(names.len(), host_names(arch).len(), "two kernels of the {} module share a symbol", arch.name());
    }
    assert_eq!(DECODE_KERNELS.len(), KernelId::all().count());
    assert!(DECODE_KERNELS.iter().all(|k| k.id.exists()));
}

/// The portable modules hold, each, the kernels whose parts need exactly
/// their architecture: sm_80 the wide and narrow kernels of the 16-bit,
/// int8 and int4 formats with the global merge, sm_89 those of the fp8
/// formats; Hopper's module holds the whole set. A GPU finds each kernel
/// in the module `KernelId::on` names, or none.
#[test]
fn the_portable_modules_split_the_wide_and_narrow_kernels_by_what_they_need() {
    let hopper: Vec<KernelId> = DECODE_KERNELS.iter().map(|k| k.id).filter(|k| k.arch == Arch::Sm90a).collect();
    for k in &hopper {
        let on = |arch| KernelId { arch, ..*k }.on(arch);
        let portable = k.family.needs() == Arch::Sm80 && k.merge == Merge::Global;
        let fp8 = matches!(k.format, KvFormat::Fp8 | KvFormat::Fp8PerHead);
        assert_eq!(on(Arch::Sm80).exists(), portable && !fp8, "{k:?} on sm_80");
        assert_eq!(on(Arch::Sm89).exists(), portable, "{k:?} on sm_89");
        if portable {
            assert_eq!(on(Arch::Sm89).arch, if fp8 { Arch::Sm89 } else { Arch::Sm80 }, "{k:?}: the module an sm_89 GPU finds it in");
        }
        assert_eq!(on(Arch::Sm90a), *k);
    }
    let portable = DECODE_KERNELS.iter().filter(|k| k.id.arch != Arch::Sm90a).count();
    assert_eq!(portable, hopper.iter().filter(|k| k.family.needs() == Arch::Sm80 && k.merge == Merge::Global).count());
    assert!(DECODE_KERNELS.iter().filter(|k| k.id.arch == Arch::Sm89).all(|k| matches!(k.id.format, KvFormat::Fp8 | KvFormat::Fp8PerHead)));
    assert!(QUANT_KERNELS.iter().all(|k| k.id.arch == Arch::Sm90a || k.id.arch == k.id.format.needs()));
    // A GPU's modules: Hopper its own; sm_89 both portable ones; sm_80 one.
    assert!(Arch::Sm90a.loads(Arch::Sm90a) && !Arch::Sm90a.loads(Arch::Sm80));
    assert!(Arch::Sm89.loads(Arch::Sm80) && Arch::Sm89.loads(Arch::Sm89) && !Arch::Sm89.loads(Arch::Sm90a));
    assert!(Arch::Sm80.loads(Arch::Sm80) && !Arch::Sm80.loads(Arch::Sm89));
    assert_eq!(Arch::for_compute_capability(9, 0), Some(Arch::Sm90a));
    assert_eq!(Arch::for_compute_capability(10, 0), Some(Arch::Sm89), "Blackwell runs the portable PTX");
    assert_eq!(Arch::for_compute_capability(8, 9), Some(Arch::Sm89));
    assert_eq!(Arch::for_compute_capability(8, 6), Some(Arch::Sm80));
    assert_eq!(Arch::for_compute_capability(7, 5), None);
}

/// No portable module has an instruction of a later architecture: ptxas
/// checks that when it builds the fatbins; here, without ptxas, the
/// instructions that need sm_90 are absent by name.
#[test]
fn the_portable_ptx_has_no_hopper_instruction() {
    for arch in [Arch::Sm80, Arch::Sm89] {
        let text = ptx(arch);
        assert!(text.contains(&format!(".target {}", arch.name())), "{}", &text[..200]);
        for hopper in ["wgmma", "griddepcontrol", "mapa", "barrier.cluster", "cp.async.bulk", "mbarrier.try_wait", "setmaxnreg"] {
            assert!(!text.contains(hopper), "the {} module has `{hopper}`", arch.name());
        }
        if arch == Arch::Sm80 {
            assert!(!text.contains("e4m3"), "the sm_80 module converts fp8");
        }
    }
}

/// Symbols spell the identity: family, addressing, merge, form and variant
/// as words, then the format, the query type and the head dim.
#[test]
fn a_kernel_symbol_spells_its_identity() {
    let named = |name: &str| DECODE_KERNELS.iter().find(|k| k.name == name && k.id.arch == Arch::Sm90a).map(|k| k.id);
    let k = named("decode_cluster_paged_narrow_kv_int4g32_q_f16_d256").unwrap();
    assert_eq!((k.format, k.dtype, k.dims.qk, k.family, k.addressing, k.merge, k.form, k.variant), (KvFormat::Int4G32, Dtype::F16, 256, Family::Narrow, Addressing::Paged, Merge::Cluster, Form::Plain, Variant::Standard));
    let k = named("decode_wgmma_ws_softcap_kv_int8_q_bf16_d128").unwrap();
    assert_eq!((k.family, k.addressing, k.merge, k.form, k.variant), (Family::Wgmma, Addressing::Strided, Merge::Global, Form::Specialized, Variant::SoftCap));
    assert_eq!(named("decode_capacity_kv_bf16_q_bf16_d64").unwrap().form, Form::Capacity);
    assert_eq!(named("decode_paged_narrow_pair_kv_int8_q_f16_d128").unwrap().form, Form::HeadPair);
    let k = named("decode_paged_mla_transposed_kv_fp8dsmla_q_bf16_d576v512").unwrap();
    assert_eq!((k.format, k.family, k.addressing, k.form, k.dims), (KvFormat::Fp8DsMla, Family::Mla, Addressing::Paged, Form::Transposed, MLA_DIMS));
    assert_eq!(named("decode_mla_transposed_rows_kv_fp8ph_q_bf16_d576v512").unwrap().form, Form::TransposedRows);
    assert_eq!(quant_kernel_name(&QuantKernelId { arch: Arch::Sm80, format: KvFormat::Int4G64, dtype: Dtype::Bf16, head_dim: 64, direction: QuantDirection::Dequantize }), Some("dequantize_int4g64_to_bf16_d64"));
    assert_eq!(quant_kernel_name(&QuantKernelId { arch: Arch::Sm90a, format: KvFormat::F16, dtype: Dtype::F16, head_dim: 128, direction: QuantDirection::Store }), Some("store_f16_d128"));
    assert_eq!(quant_kernel_name(&QuantKernelId { arch: Arch::Sm90a, format: KvFormat::F16, dtype: Dtype::F16, head_dim: 128, direction: QuantDirection::Dequantize }), None);
}

#[test]
fn every_kernel_the_host_names_is_an_entry_of_its_module() {
    for arch in Arch::ALL {
        let entries = ptx_builder::ptx_entries(ptx(arch));
        for name in host_names(arch) {
            assert!(entries.iter().any(|e| e == name), "{name} missing from the {} PTX's entries", arch.name());
        }
        assert_eq!(entries.len(), host_names(arch).len(), "the {} PTX has entries the host does not know", arch.name());
    }
}

/// The narrow kernels of the quantized formats (head dims ≤ 128) are
/// compiled within 128 registers and the wide ones within 168, and the
/// MLA ring kernels of three warpgroups of 128 threads (both fp8 formats'
/// one-chunk kernels) within 168: `.maxnreg` right after their parameter
/// list, and nowhere else (the 32-row ring of the row-chunk form has two
/// warpgroups, uncapped).
#[test]
fn register_caps_are_in_the_ptx() {
    // (The ring's kernels: one row chunk, and row chunks.)
    let ring = |name: &str| ["_mla_transposed_kv_fp8dsmla_", "_mla_transposed_kv_fp8ph_"].iter().any(|k| name.contains(k));
    assert!(DECODE_KERNELS.iter().all(|k| k.register_cap().is_none() || k.id.dims.qk <= 128 || ring(k.name)));
    for arch in Arch::ALL {
        let capped: Vec<_> = DECODE_KERNELS.iter().filter(|k| k.id.arch == arch).filter_map(|k| Some((k.name, k.register_cap()?))).collect();
        if arch != Arch::Sm89 {
            assert!(capped.iter().any(|(n, _)| *n == "decode_narrow_kv_int8_q_bf16_d128"));
            assert!(capped.iter().any(|(n, r)| *n == "decode_paged_kv_bf16_q_bf16_d128" && *r == 168));
        }
        if DECODE_KERNELS.iter().any(|k| k.id.arch == arch && ring(k.name)) {
            assert!(capped.iter().filter(|(n, _)| n.contains("_mla_")).all(|(n, r)| ring(n) && *r == 168), "{capped:?}");
            assert_eq!(capped.iter().filter(|(n, _)| ring(n)).count(), 4);
        }
        let text = ptx(arch);
        for (name, regs) in &capped {
            let at = text.find(&format!(".entry {name}(")).unwrap();
            let head = &text[at..at + text[at..].find('{').unwrap()];
            assert!(head.contains(&format!(".maxnreg {regs}")), "{name}: {head}");
        }
        assert_eq!(text.matches(".maxnreg").count(), capped.len(), "{}", arch.name());
    }
}

#[test]
fn no_unresolved_external_functions() {
    for arch in Arch::ALL {
        ptx_builder::check_ptx(ptx(arch)).unwrap();
    }
}

/// The kernels that spill, and the most bytes of stack frame, spill stores
/// and spill loads each may have: the paged narrow int4-g64 ALiBi kernels
/// at head_dim 128, 4 bytes stored and loaded at their 128-register cap
/// since the key ranges (docs/perf.md, "Key ranges"); the paged cluster
/// wgmma int8 and fp8-per-head kernels, 4 bytes stored and 20 loaded at
/// their 128-register cap since V's scale joined the softmax base (they run
/// only where `MergeChoice::Cluster` is forced: `Auto` merges quantized
/// caches globally; docs/perf.md, "V's scale in the softmax base"); the
/// unspecialised strided wgmma int4 kernels (8 bytes stored, 4 loaded) and
/// the strided cluster wgmma int8 ones (4 stored, 8 loaded) at their
/// 128-register cap since rows a token stride apart land by `cp.async`
/// (docs/perf.md, "Strided rows in the quantized wgmma kernels"; `Auto`
/// runs the warp-specialised kernels, which do not spill, on grids of up
/// to the table's waves, and merges quantized caches globally). The draft
/// tree's kernels (docs/perf.md, "Draft trees"): the paged wide 16-bit
/// masked and soft-cap ones at head_dim 128, 24 bytes stored and 36
/// loaded at their 168-register cap (32 before the shared logits step,
/// docs/perf.md, "Variant parts"; 16 and 12 on sm_80: any code in their
/// key loop spilled them); the wide int4-g32 masked ones at head_dim 256, 8
/// stored and 4 loaded at 255 (on sm_80 also the 16-bit ones, 12 and 8);
/// on sm_89 the narrow fp8-per-head masked and
/// soft-cap ones at head_dim 128, 16 stored and 28 loaded at their
/// 128-register cap. The MLA ring kernels (`decode::mla_t_ring`) at
/// their 168-register cap, 8 bytes of stack each: fp8-ds-mla's paged one
/// 20 stored and 36 loaded (a few `LDL` a stage, in its page lookups;
/// three warpgroups at 168 ran 16 heads 128 × 32K 17 % faster than two
/// uncapped at 178: docs/perf.md, "MLA fp8-ds-mla in the ring"), the
/// unpaged ones of both formats 8 and 4 (fp8 per token's paged one, 180
/// registers uncapped, does not spill at 168). Their row-chunk form
/// (`Form::TransposedRows`, 16 heads × q_len 2), the 32-row ring
/// (`decode::mla_t_ring32`, two warpgroups, 255 registers uncapped):
/// fp8-ds-mla's paged one 8 bytes of stack, 16 stored and 8 loaded
/// (docs/perf.md, "MLA 16 heads × q_len 2 in one block").
/// Every other kernel: none.
const KNOWN_SPILLS: [(&str, u32); 30] = [
    ("decode_paged_masked_tree_kv_bf16_q_bf16_d128", 36),
    ("decode_paged_masked_tree_kv_f16_q_f16_d128", 36),
    ("decode_paged_softcap_tree_kv_bf16_q_bf16_d128", 36),
    ("decode_paged_softcap_tree_kv_f16_q_f16_d128", 36),
    ("decode_masked_tree_kv_int4g32_q_bf16_d256", 8),
    ("decode_masked_tree_kv_int4g32_q_f16_d256", 8),
    ("decode_masked_tree_kv_bf16_q_bf16_d256", 12),
    ("decode_masked_tree_kv_f16_q_f16_d256", 12),
    ("decode_narrow_masked_tree_kv_fp8ph_q_bf16_d128", 28),
    ("decode_narrow_masked_tree_kv_fp8ph_q_f16_d128", 28),
    ("decode_narrow_softcap_tree_kv_fp8ph_q_bf16_d128", 28),
    ("decode_narrow_softcap_tree_kv_fp8ph_q_f16_d128", 28),
    ("decode_paged_narrow_alibi_kv_int4g64_q_f16_d128", 8),
    ("decode_paged_narrow_alibi_kv_int4g64_q_bf16_d128", 8),
    ("decode_cluster_paged_wgmma_kv_int8_q_bf16_d128", 20),
    ("decode_cluster_paged_wgmma_kv_int8_q_f16_d128", 20),
    ("decode_cluster_paged_wgmma_kv_fp8ph_q_bf16_d128", 20),
    ("decode_cluster_paged_wgmma_kv_fp8ph_q_f16_d128", 20),
    ("decode_wgmma_kv_int4g32_q_bf16_d128", 8),
    ("decode_wgmma_kv_int4g32_q_f16_d128", 8),
    ("decode_wgmma_kv_int4g64_q_bf16_d128", 8),
    ("decode_wgmma_kv_int4g64_q_f16_d128", 8),
    ("decode_wgmma_kv_int4g128_q_bf16_d128", 8),
    ("decode_wgmma_kv_int4g128_q_f16_d128", 8),
    ("decode_cluster_wgmma_kv_int8_q_bf16_d128", 8),
    ("decode_cluster_wgmma_kv_int8_q_f16_d128", 8),
    ("decode_mla_transposed_kv_fp8dsmla_q_bf16_d576v512", 8),
    ("decode_mla_transposed_kv_fp8ph_q_bf16_d576v512", 8),
    ("decode_paged_mla_transposed_kv_fp8dsmla_q_bf16_d576v512", 36),
    ("decode_paged_mla_transposed_rows_kv_fp8dsmla_q_bf16_d576v512", 16),
];

/// On the portable architectures ptxas schedules the same kernels at the
/// same register caps differently: 16 sm_80 kernels (the paged wide 16-bit
/// ones at head_dim 128, with and without variants; the narrow int4
/// soft-cap and window ones; the paged int8 head pairs) and 2 sm_89 ones
/// (narrow fp8-per-head ALiBi) spill 4-12 bytes. Their speed on Ampere and
/// Ada is unmeasured (docs/perf.md, "Portable kernels"); a capped
/// portable kernel may spill this many bytes, no more.
const PORTABLE_CAPPED_SPILLS: u32 = 12;

/// Needs ptxas: `cargo xtask test` provides it (PATH, or PyPI into
/// `target/tools/`) and runs this; a plain `cargo test` reports it ignored.
/// Reads the report of the build's own ptxas run (the embedded fatbin's
/// cubin) where the build made one, else runs ptxas. No kernel spills but
/// the `KNOWN_SPILLS`, within their bytes; capped kernels stay at their caps.
#[test]
#[ignore = "needs ptxas (PTXAS=...); `cargo xtask test` runs it"]
fn ptxas_accepts_it_without_spills() {
    for image in &decode_attn::MODULE_IMAGES {
        let arch = image.arch;
        let log = ptxas_report(image);
        let mut kernel = "";
        let mut checked = 0;
        for line in log.lines() {
            if let Some(rest) = line.split("Function properties for ").nth(1) {
                kernel = rest.trim();
            } else if line.contains("bytes stack frame") {
                let bytes: Vec<u32> = line.split(',').filter_map(|part| part.split_whitespace().next()?.parse().ok()).collect();
                let capped = DECODE_KERNELS.iter().any(|k| k.name == kernel && k.id.arch == arch && k.register_cap().is_some());
                let portable = if arch.is_specific() || !capped { 0 } else { PORTABLE_CAPPED_SPILLS };
                let most = KNOWN_SPILLS.iter().find(|(name, _)| *name == kernel).map_or(0, |&(_, most)| most).max(portable);
                assert!(bytes.len() == 3 && bytes.iter().all(|&b| b <= most), "{} {kernel}: {line} (at most {most} bytes of stack and of spills each)", arch.name());
                checked += 1;
            } else if let Some(regs) = line.split("Used ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse::<u32>().ok()) {
                if let Some(cap) = DECODE_KERNELS.iter().find(|k| k.name == kernel && k.id.arch == arch).and_then(|k| k.register_cap()) {
                    assert!(regs <= cap, "{} {kernel}: {regs} registers, cap {cap}", arch.name());
                }
            }
        }
        assert_eq!(checked, ptx_builder::ptx_entries(ptx(arch)).len(), "ptxas reported on every kernel of {}", arch.name());
    }
}

/// Needs ptxas, as above. ptxas keeps every kernel's wgmma asynchronous:
/// where it cannot (a register access or a branch between the MMAs of a
/// sequence with no `wgmma.fence` after it), it serializes every wgmma of
/// the kernel and says so (info C7520). The MLA kernels were serialized
/// so by their barrier waits until a fence followed each: 16-head rows
/// 97 → 104 % of the copy roofline (docs/perf.md, "MLA kernel").
#[test]
#[ignore = "needs ptxas (PTXAS=...); `cargo xtask test` runs it"]
fn ptxas_keeps_every_kernels_wgmma_asynchronous() {
    for image in &decode_attn::MODULE_IMAGES {
        let log = ptxas_report(image);
        let serialized: Vec<&str> = log.lines().filter(|l| l.contains("(C7520)")).collect();
        assert!(serialized.is_empty(), "{}: ptxas serialized wgmma:\n{}", image.arch.name(), serialized.join("\n"));
    }
}

/// ptxas's `-v` report of a module: the build's own (the embedded
/// fatbin's cubin) where it made one, else a run of `$PTXAS`.
fn ptxas_report(image: &decode_attn::ModuleImage) -> String {
    let arch = image.arch;
    if image.fatbin.is_some() {
        return image.ptxas_report.to_owned();
    }
    let ptxas = std::env::var_os("PTXAS").expect("set PTXAS to a ptxas binary (cargo xtask test does)");
    let dir = std::env::temp_dir().join(format!("decode-attn-ptx-{}-{}", std::process::id(), arch.name()));
    std::fs::create_dir_all(&dir).unwrap();
    let flag = format!("-arch={}", arch.name());
    let out = std::process::Command::new(ptxas).args([flag.as_str(), "-v"]).arg(decode_attn::ptx_file(arch)).arg("-o").arg(dir.join("k.cubin")).output().expect("running ptxas");
    let _ = std::fs::remove_dir_all(dir);
    assert!(out.status.success(), "ptxas rejected the {} PTX:\n{}", arch.name(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).into_owned()
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
