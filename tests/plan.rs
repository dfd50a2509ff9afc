//! Planner invariants (CPU only).

use decode_attn::heuristics::{self, block_shape};
use decode_attn::plan::{plan, stage_keys, Plan};
use decode_attn::{DecodeShape, VariantSpec, DeviceInfo, Dtype, KernelInfo, KernelLimits, KvFormat, KvLayout, MergeChoice, MergeMode, PageOrder, PlanOptions, SpecializeChoice, SplitPolicy, Family, FamilyChoice};
use decode_attn_abi::{Arch, Form, KernelId, Merge, MAX_WARPS, PIPELINE_STAGES};
use proptest::prelude::*;

#[path = "common/coverage.rs"]
mod coverage;
use coverage::assert_covers;

const KERNEL: KernelInfo = KernelInfo { max_threads_per_block: 384, regs_per_thread: 168 };

fn opts(split: SplitPolicy) -> PlanOptions {
    PlanOptions { split, ..Default::default() }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn chunks_cover_each_sequence_exactly_once(
        lens in prop::collection::vec(1u32..20_000, 1..40),
        g_log in 0u32..6,
        hkv in 1u32..9,
        q_len in 1u32..9,
        d_idx in 0usize..3,
        policy in prop_oneof![Just(SplitPolicy::Auto), Just(SplitPolicy::Never), (1u32..5000).prop_map(SplitPolicy::ChunkKeys)],
    ) {
        let lens: Vec<u32> = lens.into_iter().map(|l| l.max(q_len)).collect();
        let d = [64, 128, 256][d_idx];
        let shape = DecodeShape::bf16(lens.len() as u32, hkv << g_log, hkv, d, q_len, 20_000);
        let p = plan(&shape, &lens, &DeviceInfo::H100_SXM, &KERNEL, &opts(policy)).unwrap();
        assert_covers(&p);
        // Row chunks cover every packed row; the block fits the kernel.
        prop_assert!(p.rows_per_block() * p.row_chunks() >= (1 << g_log) * q_len);
        prop_assert!(p.block_threads() <= KERNEL.max_threads_per_block.max(32 * p.warps_m()));
        prop_assert!(p.warps_m() * p.warps_k() <= MAX_WARPS);
        prop_assert!(p.smem_bytes() <= DeviceInfo::H100_SXM.max_smem_per_block);
        // A block's shared memory holds every stage its work item fills
        // (past PIPELINE_STAGES the stages are a ring).
        let keys = stage_keys(KvFormat::Bf16, d);
        prop_assert!(p.work().iter().all(|w| (w.kv_end - w.kv_start).div_ceil(keys).min(PIPELINE_STAGES) <= p.stages()));
        // Work is ordered longest first (cluster plans: sequences, longest first).
        if p.cluster() > 1 {
            let lens: Vec<u32> = p.work().chunks(p.cluster() as usize).map(|g| p.seq_lens()[g[0].batch as usize]).collect();
            prop_assert!(lens.windows(2).all(|w| w[0] >= w[1]));
        } else {
            prop_assert!(p.work().windows(2).all(|w| w[0].kv_end - w[0].kv_start >= w[1].kv_end - w[1].kv_start));
        }
        // Forced chunks are whole pipeline stages.
        if let SplitPolicy::ChunkKeys(_) = policy {
            prop_assert_eq!(p.chunk_keys() % stage_keys(KvFormat::Bf16, d), 0);
        }
    }
}

/// An Ampere or Ada GPU (or a Hopper one run on the portable kernels):
/// its modules are the portable ones, without clusters.
fn portable(arch: Arch) -> DeviceInfo {
    DeviceInfo { arch, max_cluster: 0, ..DeviceInfo::H100_SXM }
}

/// On a GPU whose kernels are portable, the planner takes the wide and
/// narrow kernels of the module that holds each (fp8: sm_89's; the rest
/// and the merges: sm_80's) and never picks wgmma; what needs Hopper's or
/// Ada's kernels is refused, naming the architecture.
#[test]
fn portable_gpus_plan_wide_and_narrow_kernels_and_refuse_what_needs_a_later_architecture() {
    let grid_b = DecodeShape::bf16(16, 64, 8, 128, 1, 16_384);
    let lens = vec![16_384; 16];
    for arch in [Arch::Sm80, Arch::Sm89] {
        let dev = portable(arch);
        let p = plan(&grid_b, &lens, &dev, &KERNEL, &opts(SplitPolicy::Auto)).unwrap();
        assert_eq!((p.family(), p.kernel_id().arch), (Family::Wide, Arch::Sm80), "{arch:?}: grid B's 8 rows a kv head, bf16");
        let wgmma = PlanOptions { family: FamilyChoice::Force(Family::Wgmma), ..opts(SplitPolicy::Auto) };
        let e = plan(&grid_b, &lens, &dev, &KERNEL, &wgmma).unwrap_err().to_string();
        assert!(e.contains("the wgmma family needs sm_90a kernels") && e.contains(arch.name()), "{e}");
        let split = DecodeShape::bf16(1, 8, 1, 128, 1, 65_536);
        let cluster = PlanOptions { merge: MergeChoice::Cluster, ..opts(SplitPolicy::ChunkKeys(8192)) };
        let e = plan(&split, &[65_536], &dev, &KERNEL, &cluster).unwrap_err().to_string();
        assert!(e.contains("a cluster merge needs sm_90a kernels"), "{e}");
        let auto = plan(&split, &[65_536], &dev, &KERNEL, &opts(SplitPolicy::ChunkKeys(8192))).unwrap();
        assert_ne!(auto.merge_mode(), MergeMode::Cluster);
        let fp8 = DecodeShape { kv_format: KvFormat::Fp8PerHead, ..DecodeShape::bf16(4, 32, 8, 128, 1, 4096) };
        match arch {
            Arch::Sm80 => {
                let e = plan(&fp8, &[4096; 4], &dev, &KERNEL, &opts(SplitPolicy::Auto)).unwrap_err().to_string();
                assert!(e.contains("a fp8-per-head cache needs sm_89 kernels; this GPU runs sm_80's"), "{e}");
            }
            _ => {
                let p = plan(&fp8, &[4096; 4], &dev, &KERNEL, &opts(SplitPolicy::Auto)).unwrap();
                assert_eq!((p.family(), p.kernel_id().arch), (Family::Narrow, Arch::Sm89));
            }
        }
    }
    // A portable GPU that claims clusters is no device the planner takes.
    let e = DeviceInfo { max_cluster: 8, ..portable(Arch::Sm89) }.validate().unwrap_err().to_string();
    assert!(e.contains("device.max_cluster") && e.contains("sm_89 kernels have no cluster merge"), "{e}");
    // Hopper's plans are unchanged: its own module's kernels.
    let p = plan(&grid_b, &lens, &DeviceInfo::H100_SXM, &KERNEL, &opts(SplitPolicy::Auto)).unwrap();
    assert_eq!((p.family(), p.kernel_id().arch), (Family::Wide, Arch::Sm90a));
}

#[test]
fn div_rem_is_the_division_for_every_divisor() {
    // The kernels' shift-and-mask for powers of two, the division otherwise.
    let ns = [0u32, 1, 2, 3, 7, 8, 31, 32, 33, 1000, 65_535, 1 << 20, (1 << 31) + 5, u32::MAX - 1, u32::MAX];
    for d in (1u32..=300).chain([1 << 16, (1 << 16) + 1, 1 << 31, u32::MAX]) {
        for &n in &ns {
            assert_eq!(decode_attn_abi::div_rem(n, d), (n / d, n % d), "{n} / {d}");
        }
    }
}

#[test]
fn no_split_when_one_wave_is_already_full() {
    // Grid A at B=512: 512 blocks of 1 kv head >= 132 SMs x 2 blocks.
    let shape = DecodeShape::bf16(512, 8, 1, 128, 1, 8192);
    let p = plan(&shape, &vec![8192; 512], &DeviceInfo::H100_SXM, &KERNEL, &PlanOptions::default()).unwrap();
    assert_eq!(p.max_splits(), 1);
    assert!(p.merges().is_empty());
    assert_eq!(p.work().len(), 512);
}

#[test]
fn long_single_sequence_is_split_to_fill_the_gpu() {
    // Grid C: one sequence, 8 kv heads: 8 blocks unsplit; the planner must
    // split until every SM has a block (within one split's 8 blocks).
    let shape = DecodeShape::bf16(1, 32, 8, 128, 1, 131072);
    let p = plan(&shape, &[131072], &DeviceInfo::H100_SXM, &KERNEL, &PlanOptions::default()).unwrap();
    let blocks = p.work().len() as u32 * 8;
    assert!(blocks + 8 > DeviceInfo::H100_SXM.sm_count, "only {blocks} blocks");
    assert!(p.max_splits() > 1);
}

#[test]
fn never_policy_gives_one_chunk_per_sequence() {
    let shape = DecodeShape::bf16(2, 8, 1, 128, 1, 100_000);
    let p = plan(&shape, &[100_000, 5], &DeviceInfo::H100_SXM, &KERNEL, &opts(SplitPolicy::Never)).unwrap();
    assert_eq!(p.work().len(), 2);
    assert_eq!(p.num_slots(), 0);
    assert_eq!(p.workspace_bytes() % 256, 0);
}

#[test]
fn head_packing_puts_a_whole_group_in_one_block() {
    // 16 heads x 3 tokens = 48 rows: three mma row tiles in one block.
    let (warps_m, warps_k) = block_shape(48, 64, &KERNEL);
    assert_eq!((warps_m, warps_k), (3, 2));
    let shape = DecodeShape::bf16(4, 16, 1, 128, 3, 4096);
    let p = plan(&shape, &[4096; 4], &DeviceInfo::H100_SXM, &KERNEL, &opts(SplitPolicy::Never)).unwrap();
    assert_eq!(p.row_chunks(), 1);
    assert_eq!(p.grid(), (4, 1, 1));
}

#[test]
fn auto_chunk_prefers_fewer_splits_on_ties_and_never_exceeds_length() {
    assert_eq!(heuristics::auto_chunk_keys(&[100], 1, 64, 1, 2), u32::MAX);
    let c = heuristics::auto_chunk_keys(&[8192; 128], 1, 64, 264, 2);
    assert!(c < 8192 && c % 64 == 0, "chunk {c}");
}

#[test]
fn metadata_bytes_match_the_layout() {
    let shape = DecodeShape::bf16(3, 8, 2, 64, 2, 1000);
    let global = PlanOptions { merge: MergeChoice::Global, ..opts(SplitPolicy::ChunkKeys(128)) };
    let p = plan(&shape, &[1000, 10, 500], &DeviceInfo::H100_SXM, &KERNEL, &global).unwrap();
    let meta = p.metadata();
    assert_eq!(meta.len(), p.layout().metadata_bytes);
    let lens: &[u32] = bytemuck::cast_slice(&meta[p.layout().seq_lens..p.layout().seq_lens + 12]);
    assert_eq!(lens, &[1000, 10, 500]);
    // One merge item per sequence (unsplit ones: one slot), then zeroed counters.
    let merges: &[u32] = bytemuck::cast_slice(&meta[p.layout().merges..p.layout().merges + 48]);
    assert_eq!(&merges[..3], &[0, 0, 8]);
    assert_eq!(&merges[4..7], &[1, 0, 1]);
    assert_eq!(&merges[8..11], &[2, 8, 4]);
    let counters = &meta[p.layout().merge_counters..p.layout().merge_counters + 4 * p.merge_counters() as usize];
    assert_eq!(p.merge_counters(), 3 * 2 * p.row_chunks());
    assert!(counters.iter().all(|&b| b == 0));
    assert!(p.layout().partial_o >= p.layout().metadata_bytes);
    assert!(p.layout().partial_lse >= p.layout().partial_o + p.num_slots() as usize * 2 * 8 * 64 * 4);
}

#[test]
fn a_plan_names_the_kernel_it_launches_and_decides_it_once() {
    let dev = &DeviceInfo::H100_SXM;
    let strided = plan(&DecodeShape::bf16(2, 16, 1, 128, 3, 131072), &[131072; 2], dev, &KERNEL, &PlanOptions::default()).unwrap();
    let paged_shape = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages: 64, order: PageOrder::TokenMajor, page_bytes: None }, ..DecodeShape::bf16(2, 8, 2, 128, 1, 512) };
    let table: Vec<i32> = (0..64).collect();
    let paged = decode_attn::plan::plan_paged(&paged_shape, &[512, 300], &table, dev, &KERNEL, &PlanOptions::default()).unwrap();
    let capacity = decode_attn::plan::plan_capacity(&quantized(KvFormat::Int8, 4, 32, 8, 1, 8192), dev, &KERNEL, &PlanOptions::default()).unwrap();
    for p in [&strided, &paged, &capacity] {
        // The kernel is found when the plan is made: its entry point is the
        // table's name for its id, and the plan's Debug shows it.
        assert_eq!(Some(p.kernel_name()), decode_attn_abi::decode_kernel_name(&p.kernel_id()));
        assert!(format!("{p:?}").contains(p.kernel_name()), "{p:?}");
        // Clones launch the same kernels.
        let c = p.clone();
        assert_eq!((c.kernel_id(), c.merge_mode(), c.merge_grid()), (p.kernel_id(), p.merge_mode(), p.merge_grid()));
    }
    assert!(paged.kernel_name().contains("_paged"), "{}", paged.kernel_name());
    // A split plan that merges in the merge kernel holds that kernel's grid.
    assert_eq!((strided.merge_mode(), strided.merge_grid()), (MergeMode::Kernel, Some((2, 48, 1))));
}

#[test]
fn a_shape_checks_a_block_table_as_plan_paged_does() {
    let paged = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages: 8, order: PageOrder::TokenMajor, page_bytes: None }, ..DecodeShape::bf16(2, 8, 2, 128, 1, 64) };
    let table = [0, 1, 2, 3, 4, 5, 6, 7];
    assert!(paged.validate_block_table(&[64, 17], &table).is_ok());
    let param = |r: decode_attn::Result<()>| r.unwrap_err().param().map(str::to_owned);
    assert_eq!(param(paged.validate_block_table(&[64, 17], &[0, 1, 2, 3, 4, 8, 6, 7])), Some("block_table[1][1]".into()));
    assert_eq!(param(paged.validate_block_table(&[65, 17], &table)), Some("seq_lens[0]".into()));
    assert_eq!(param(paged.validate_block_table(&[64, 17], &table[..6])), Some("block_table".into()));
    assert_eq!(param(DecodeShape::bf16(2, 8, 2, 128, 1, 64).validate_block_table(&[64, 17], &table)), Some("block_table".into()));
}

#[test]
fn small_merges_run_in_the_attention_kernel_and_large_ones_in_the_merge_kernel() {
    let dev = &DeviceInfo::H100_SXM;
    // Grid C 8K: 4 rows per block, a few dozen slots: a few KB each block.
    let c = plan(&DecodeShape::bf16(1, 32, 8, 128, 1, 8192), &[8192], dev, &KERNEL, &PlanOptions::default()).unwrap();
    assert!(c.max_splits() > 1);
    assert_eq!(c.merge_mode(), MergeMode::InAttention);
    assert_eq!(c.merge_grid(), None);
    assert!(!c.overlaps_merge());
    // Grid B (2, 128K): 48 rows per block over ~128 slots, megabytes each.
    let b = plan(&DecodeShape::bf16(2, 16, 1, 128, 3, 131072), &[131072; 2], dev, &KERNEL, &PlanOptions::default()).unwrap();
    assert!(b.max_splits() as u64 * 48 * 128 * 4 > dev.tuning.in_attention_merge_max_bytes as u64);
    assert_eq!(b.merge_mode(), MergeMode::Kernel);
    assert_eq!(b.merge_grid(), Some((2, 48, 1)));
    // The merge kernel is a programmatic dependent launch of the attention kernel.
    assert!(b.overlaps_merge());
    // Unsplit plans merge nothing, in either mode.
    let a = plan(&DecodeShape::bf16(512, 8, 1, 128, 1, 8192), &vec![8192; 512], dev, &KERNEL, &PlanOptions::default()).unwrap();
    assert_eq!(a.merge_grid(), None);
}

#[test]
fn sequences_split_into_at_most_a_cluster_of_chunks_merge_in_the_cluster() {
    let dev = &DeviceInfo::H100_SXM;
    // Grid D (1, 1K): 32 kv heads, a few chunks each.
    let shape = DecodeShape::bf16(1, 32, 32, 128, 1, 1024);
    let clusters = PlanOptions { merge: MergeChoice::Cluster, ..Default::default() };
    let p = plan(&shape, &[1024], dev, &KERNEL, &clusters).unwrap();
    assert!((3..=dev.max_cluster).contains(&p.cluster()), "cluster {}", p.cluster());
    assert_eq!(p.merge_mode(), MergeMode::Cluster);
    assert_eq!((p.max_splits(), p.num_slots(), p.merge_grid()), (p.cluster(), 0, None));
    assert_eq!(p.grid().0, p.cluster() * 32);
    assert_covers(&p);
    // Ragged lengths: the short sequences' clusters have empty chunks.
    let ragged = plan(&DecodeShape::bf16(3, 8, 1, 128, 1, 8192), &[8192, 100, 3000], dev, &KERNEL, &PlanOptions { merge: MergeChoice::Cluster, ..opts(SplitPolicy::ChunkKeys(2048)) }).unwrap();
    assert_eq!(ragged.cluster(), 4);
    assert_eq!(ragged.work().iter().filter(|w| w.kv_start == w.kv_end).count(), 3 + 2);
    assert_covers(&ragged);
    // A capacity plan's chunks form the same clusters.
    let cap = decode_attn::plan::plan_capacity(&shape, dev, &KERNEL, &clusters).unwrap();
    assert_eq!((cap.cluster(), cap.num_slots(), cap.merge_mode()), (p.cluster(), 0, MergeMode::Cluster));
    // At capacity 1700 in chunks of 256: 7 chunks, a cluster of 8, whose
    // last chunk (past the capacity) is empty; every block's item is a chunk
    // of its cluster's sequence.
    let seven = DecodeShape::bf16(4, 8, 2, 128, 2, 1700);
    let cap = decode_attn::plan::plan_capacity(&seven, dev, &KERNEL, &PlanOptions { merge: MergeChoice::Cluster, ..opts(SplitPolicy::ChunkKeys(256)) }).unwrap();
    assert_eq!((cap.cluster(), cap.mode()), (8, decode_attn::PlanMode::Capacity { chunks_per_seq: 8 }));
    let log2 = cap.cluster().trailing_zeros();
    for x in 0..cap.grid().0 {
        let item = decode_attn_abi::decode_block_item(x, 2, log2);
        assert!(item < 4 * 8 && item / 8 == x / 8 / 2, "block {x}: item {item}");
    }
    assert_eq!(cap.grid().0 % cap.cluster(), 0);
    // Auto: clusters of two chunks only (larger ones measured slower).
    assert_eq!(plan(&shape, &[1024], dev, &KERNEL, &PlanOptions::default()).unwrap().cluster(), 0);
    let two = plan(&DecodeShape::bf16(2, 8, 1, 128, 1, 8192), &[8192, 3000], dev, &KERNEL, &opts(SplitPolicy::ChunkKeys(4096))).unwrap();
    assert_eq!((two.cluster(), two.merge_mode()), (2, MergeMode::Cluster));
    assert_covers(&two);
    // ... and for 16-bit caches only: quantized ones merge the same split
    // through global memory (measured faster since the one-atomic merge).
    for format in [KvFormat::Int8, KvFormat::Int4G32] {
        let q = plan(&quantized(format, 2, 8, 1, 1, 8192), &[8192, 3000], dev, &KERNEL, &opts(SplitPolicy::ChunkKeys(4096))).unwrap();
        assert_eq!((q.cluster(), q.merge_mode(), q.max_splits()), (0, MergeMode::InAttention, 2), "{format:?}");
        let forced = plan(&quantized(format, 2, 8, 1, 1, 8192), &[8192, 3000], dev, &KERNEL, &PlanOptions { merge: MergeChoice::Cluster, ..opts(SplitPolicy::ChunkKeys(4096)) }).unwrap();
        assert_eq!(forced.cluster(), 2, "{format:?}");
    }
    // Not when asked for a global merge, without clusters, or above 8 chunks.
    let global = PlanOptions { merge: MergeChoice::Global, ..Default::default() };
    assert_eq!(plan(&shape, &[1024], dev, &KERNEL, &global).unwrap().merge_mode(), MergeMode::InAttention);
    // Asked for, a cluster merge that cannot be is an error naming why
    // (no clusters, more chunks than the largest cluster, a variant
    // without cluster kernels), never a global merge in its place.
    let no_clusters = DeviceInfo { max_cluster: 0, ..*dev };
    let refused = |r: decode_attn::Result<decode_attn::Plan>, why: &str| match r {
        Err(decode_attn::Error::Unsupported(m)) => assert!(m.contains("MergeChoice::Cluster") && m.contains(why), "{m}"),
        other => panic!("expected Unsupported ({why}), got {other:?}"),
    };
    refused(plan(&shape, &[1024], &no_clusters, &KERNEL, &clusters), "no thread-block clusters");
    refused(plan(&DecodeShape::bf16(1, 8, 1, 128, 1, 8192), &[8192], dev, &KERNEL, &PlanOptions { merge: MergeChoice::Cluster, ..opts(SplitPolicy::ChunkKeys(512)) }), "16 chunks");
    let sinks = DecodeShape { variant: VariantSpec { sinks: true, ..shape.variant }, ..shape };
    refused(plan(&sinks, &[1024], dev, &KERNEL, &clusters), "no cluster-merge kernels");
    refused(decode_attn::plan::plan_capacity(&sinks, dev, &KERNEL, &clusters), "no cluster-merge kernels");
    // A sequence that does not split needs no merge: honoured.
    assert_eq!(plan(&sinks, &[1024], dev, &KERNEL, &PlanOptions { merge: MergeChoice::Cluster, ..opts(SplitPolicy::Never) }).unwrap().max_splits(), 1);
}

#[test]
fn auto_split_fills_whole_waves() {
    // One sequence, 8 kv heads, 264 resident blocks: never a nearly empty second wave.
    let wave = 132 * 2;
    let c = heuristics::auto_chunk_keys(&[32768], 8, 64, wave, 2);
    let blocks = 32768u64.div_ceil(c as u64) * 8;
    assert!(blocks <= wave, "chunk {c} gives {blocks} blocks for a wave of {wave}");
    let c = heuristics::auto_chunk_keys(&[131072; 2], 1, 64, wave, 2);
    assert!(2 * 131072u64.div_ceil(c as u64) <= wave, "chunk {c}");
}

fn quantized(format: KvFormat, batch: u32, hq: u32, hkv: u32, q_len: u32, cap: u32) -> DecodeShape {
    DecodeShape { kv_format: format, ..DecodeShape::bf16(batch, hq, hkv, 128, q_len, cap) }
}

#[test]
fn auto_picks_narrow_for_quantized_caches_with_at_most_eight_rows_per_kv_head() {
    let narrow = |shape: &DecodeShape| plan(shape, &vec![4096; shape.batch as usize], &DeviceInfo::H100_SXM, &KERNEL, &opts(SplitPolicy::Auto)).unwrap().family();
    // Grid A (8 rows), grid C (4), MHA (1): narrow for int8 / int4.
    for format in [KvFormat::Int8, KvFormat::Int4G32] {
        assert_eq!(narrow(&quantized(format, 4, 8, 1, 1, 4096)), Family::Narrow);
        assert_eq!(narrow(&quantized(format, 1, 32, 8, 1, 4096)), Family::Narrow);
        assert_eq!(narrow(&quantized(format, 2, 32, 32, 1, 4096)), Family::Narrow);
        // Grid B (48 rows): wgmma; 16 rows: wide.
        assert_eq!(narrow(&quantized(format, 2, 16, 1, 3, 4096)), Family::Wgmma);
        assert_eq!(narrow(&quantized(format, 2, 8, 1, 2, 4096)), Family::Wide);
    }
    // bf16 stays wide (measured no faster narrow).
    assert_eq!(narrow(&DecodeShape::bf16(4, 8, 1, 128, 1, 4096)), Family::Wide);
}

#[test]
fn a_forced_narrow_plan_covers_many_rows_in_chunks_of_eight() {
    let shape = DecodeShape::bf16(2, 32, 1, 128, 3, 1000);
    let o = PlanOptions { family: FamilyChoice::Force(Family::Narrow), ..Default::default() };
    let p = plan(&shape, &[1000, 7], &DeviceInfo::H100_SXM, &KERNEL, &o).unwrap();
    assert_eq!((p.family(), p.rows_per_block(), p.row_chunks(), p.warps_m()), (Family::Narrow, 8, 12, 1));
    assert_covers(&p);
}

#[test]
fn narrow_blocks_are_larger_when_the_work_is_split() {
    let kernel = KernelInfo { max_threads_per_block: 256, regs_per_thread: 155 };
    let warps = |batch: u32, len: u32| {
        let shape = quantized(KvFormat::Int8, batch, 8, 1, 1, len);
        plan(&shape, &vec![len; batch as usize], &DeviceInfo::H100_SXM, &kernel, &opts(SplitPolicy::Auto)).unwrap().warps_k()
    };
    // Equal warps resident (1 × 8 or 2 × 4): split → 8 warps, unsplit → 4.
    assert_eq!(warps(1, 100_000), 8);
    assert_eq!(warps(1024, 2048), 4);
}

#[test]
fn warps_k_overrides_are_checked() {
    let shape = quantized(KvFormat::Int8, 2, 8, 1, 1, 512);
    let with = |w| plan(&shape, &[512, 512], &DeviceInfo::H100_SXM, &KERNEL, &PlanOptions { warps_k: Some(w), ..Default::default() });
    assert_eq!(with(2).unwrap().warps_k(), 2);
    for bad in [0, 3, 16, 64] {
        let e = with(bad).unwrap_err();
        assert_eq!(e.param(), Some("warps_k"), "{e}");
    }
}

#[test]
fn short_unsplit_sequences_get_at_least_two_steps_per_narrow_warp() {
    let kernel = KernelInfo { max_threads_per_block: 512, regs_per_thread: 128 };
    let warps = |batch: u32, len: u32| {
        let shape = quantized(KvFormat::Int4G32, batch, 8, 1, 1, len);
        plan(&shape, &vec![len; batch as usize], &DeviceInfo::H100_SXM, &kernel, &opts(SplitPolicy::Auto)).unwrap().warps_k()
    };
    // 16 warps resident as 2 × 8, 12 as 3 × 4 (three stages of shared
    // memory): 8-warp blocks, unless a sequence is too short for two 16-key
    // steps per warp.
    assert_eq!(warps(1024, 8192), 8);
    assert_eq!(warps(1024, 40), 1);
    // 128 keys are one int4 stage: one stage of shared memory fits 8 blocks
    // per SM, so 16 warps resident as 8 × 2 as well as 2 × 8 — the smaller.
    assert_eq!(warps(1024, 128), 2);
}

#[test]
fn int8_splits_fill_one_block_per_sm_and_int4_every_resident_block() {
    // Narrow kernels at 128 registers: two 8-warp blocks fit per SM.
    let kernel = KernelInfo { max_threads_per_block: 512, regs_per_thread: 128 };
    let splits = |format| {
        let shape = quantized(format, 1, 32, 8, 1, 131072);
        plan(&shape, &[131072], &DeviceInfo::H100_SXM, &kernel, &opts(SplitPolicy::Auto)).unwrap().max_splits()
    };
    // Grid C 128K: 8 kv heads × 16 = 128 blocks (int8: one per SM saturates
    // HBM), × 32 = 256 for int4, whose longer steps gain from every
    // resident warp (docs/perf.md, "Splits for one block per SM").
    assert_eq!(splits(KvFormat::Int8), 16);
    assert_eq!(splits(KvFormat::Int4G32), 32);
}

#[test]
fn wide_int8_splits_still_fill_every_resident_block() {
    // Grid B (48 rows, wide, 6 warps): two blocks fit per SM and both are used.
    let kernel = KernelInfo { max_threads_per_block: 384, regs_per_thread: 160 };
    let shape = quantized(KvFormat::Int8, 128, 16, 1, 3, 2048);
    let wide = PlanOptions { family: FamilyChoice::Force(Family::Wide), ..opts(SplitPolicy::Auto) };
    let p = plan(&shape, &[2048; 128], &DeviceInfo::H100_SXM, &kernel, &wide).unwrap();
    assert_eq!((p.family(), p.warps_m(), p.warps_k(), p.blocks_per_sm()), (Family::Wide, 3, 2, 2));
    assert_eq!(p.max_splits(), 2);
}

#[test]
fn wide_sixteen_bit_splits_fill_one_single_tile_block_per_sm() {
    // bf16 grid C (4 rows per kv head: one row tile, 4 warps): 8 kv heads ×
    // 16 splits = 128 blocks, one per SM (docs/perf.md, "Splits for one
    // block per SM"), though two fit.
    let dev = &DeviceInfo::H100_SXM;
    for ctx in [8192u32, 32768, 131072] {
        let p = plan(&DecodeShape::bf16(1, 32, 8, 128, 1, ctx), &[ctx], dev, &KERNEL, &opts(SplitPolicy::Auto)).unwrap();
        assert_eq!((p.family(), p.warps_m(), p.warps_k(), p.blocks_per_sm()), (Family::Wide, 1, 4, 2));
        assert_eq!(p.max_splits(), 16, "ctx {ctx}");
    }
    // Grid B (48 rows: three row tiles) still fills every resident block.
    let wide = PlanOptions { family: FamilyChoice::Force(Family::Wide), ..opts(SplitPolicy::Auto) };
    let b = plan(&DecodeShape::bf16(64, 16, 1, 128, 3, 4096), &[4096; 64], dev, &KERNEL, &wide).unwrap();
    assert_eq!((b.warps_m(), b.blocks_per_sm()), (3, 2));
    assert_eq!(b.max_splits(), 4);
}

/// The wgmma kernels as ptxas builds them: 128 registers.
const WGMMA_KERNEL: KernelInfo = KernelInfo { max_threads_per_block: 1024, regs_per_thread: 128 };

#[test]
fn sixteen_bit_wgmma_splits_fill_one_block_per_sm() {
    // Grid B in bf16 and fp16: the split rows get about 2048-key chunks,
    // one block per SM though two fit (126-128 of the H100's 132 SMs:
    // (128K, 2) takes 63 equal chunks of 33 stages); (2K, 128) stays
    // unsplit, and so does (1K, 256), whose 256 blocks need both slots.
    let dev = &DeviceInfo::H100_SXM;
    for (dtype, kv_format) in [(Dtype::Bf16, KvFormat::Bf16), (Dtype::F16, KvFormat::F16)] {
        for (ctx, batch, splits) in [(1024u32, 256u32, 1u32), (2048, 128, 1), (4096, 64, 2), (8192, 32, 4), (16384, 16, 8), (65536, 4, 32), (131072, 2, 63)] {
            let shape = DecodeShape { dtype, kv_format, ..DecodeShape::bf16(batch, 16, 1, 128, 3, ctx) };
            let p = plan(&shape, &vec![ctx; batch as usize], dev, &WGMMA_KERNEL, &opts(SplitPolicy::Auto)).unwrap();
            assert_eq!((p.family(), p.blocks_per_sm(), p.max_splits()), (Family::Wgmma, 2, splits), "{dtype:?} ({ctx}, {batch})");
            assert_covers(&p);
        }
    }
}

#[test]
fn auto_picks_wgmma_at_head_dim_128_with_more_than_two_row_tiles() {
    let dev = &DeviceInfo::H100_SXM;
    let family = |shape: &DecodeShape| decode_attn::heuristics::family(FamilyChoice::Auto, shape, dev.arch, &dev.tuning);
    // Grid B (48 rows) in bf16 and fp16; 64 and 128 rows.
    assert_eq!(family(&DecodeShape::bf16(64, 16, 1, 128, 3, 4096)), Family::Wgmma);
    assert_eq!(family(&DecodeShape { dtype: Dtype::F16, kv_format: KvFormat::F16, ..DecodeShape::bf16(64, 16, 1, 128, 3, 4096) }), Family::Wgmma);
    assert_eq!(family(&DecodeShape::bf16(2, 64, 1, 128, 2, 4096)), Family::Wgmma);
    // Quantized caches too (converted into 16-bit tiles in the kernel).
    for format in [KvFormat::Int8, KvFormat::Int4G32, KvFormat::Int4G64, KvFormat::Int4G128] {
        assert_eq!(family(&quantized(format, 2, 16, 1, 3, 4096)), Family::Wgmma);
    }
    // 32 rows and fewer, other head dims: not wgmma.
    assert_eq!(family(&DecodeShape::bf16(2, 16, 1, 128, 2, 4096)), Family::Wide);
    assert_eq!(family(&quantized(KvFormat::Int8, 2, 16, 1, 2, 4096)), Family::Wide);
    assert_eq!(family(&DecodeShape::bf16(2, 16, 1, 64, 3, 4096)), Family::Wide);
    assert_eq!(family(&DecodeShape::bf16(2, 16, 1, 256, 3, 4096)), Family::Wide);
    assert_eq!(family(&DecodeShape { head_dim: 64, ..quantized(KvFormat::Int8, 2, 16, 1, 3, 4096) }), Family::Wide);
    // A quantized token-major cache of two kv heads (its rows a token
    // stride apart, staged by cp.async chunks), head-major or paged: wgmma.
    for format in [KvFormat::Int8, KvFormat::Fp8PerHead, KvFormat::Fp8, KvFormat::Int4G32] {
        let two_heads = quantized(format, 2, 32, 2, 3, 4096);
        assert_eq!(family(&two_heads), Family::Wgmma, "{format:?}");
        assert_eq!(family(&DecodeShape { kv_layout: KvLayout::Hnd, ..two_heads.clone() }), Family::Wgmma, "{format:?}");
        let paged = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages: 512, order: PageOrder::TokenMajor, page_bytes: None }, ..two_heads };
        assert_eq!(family(&paged), Family::Wgmma, "{format:?}");
    }
    assert_eq!(family(&DecodeShape::bf16(2, 32, 2, 128, 3, 4096)), Family::Wgmma);
    // Grid B's plan: warpgroups of 64 rows, two per block (one per 32-key
    // step of a 64-key stage); two blocks fit per SM, but the splits fill
    // one per SM (2 × 64 = 128 blocks: docs/perf.md, "Splits for one block
    // per SM").
    let p = plan(&DecodeShape::bf16(64, 16, 1, 128, 3, 4096), &[4096; 64], dev, &WGMMA_KERNEL, &opts(SplitPolicy::Auto)).unwrap();
    assert_eq!((p.family(), p.warps_m(), p.warps_k(), p.rows_per_block(), p.row_chunks(), p.blocks_per_sm()), (Family::Wgmma, 4, 2, 64, 1, 2));
    assert_eq!(p.max_splits(), 2);
    assert_covers(&p);
    // Quantized, strided: stages of 64 keys (not the wide kernels' 128); on
    // this one-wave grid the warp-specialised kernel, whose producer
    // warpgroup follows the two compute ones (384 threads), with buffers of
    // converted tiles beside its stages, one block per SM.
    let ws_kernel = KernelInfo { regs_per_thread: 168, max_threads_per_block: 384 };
    let q = plan(&quantized(KvFormat::Int8, 64, 16, 1, 3, 4096), &[4096; 64], dev, &ws_kernel, &opts(SplitPolicy::Auto)).unwrap();
    assert_eq!((q.family(), q.warps_k(), q.block_threads(), q.blocks_per_sm(), q.stages()), (Family::Wgmma, 2, 384, 1, decode_attn_abi::wgmma_producer_stages(KvFormat::Int8)));
    assert_eq!(q.chunk_keys() % decode_attn::plan::stage_keys_for(KvFormat::Int8, 128, Family::Wgmma), 0);
    assert_covers(&q);
}

#[test]
fn a_forced_wgmma_plan_is_an_error_where_no_wgmma_kernel_exists() {
    let o = PlanOptions { family: FamilyChoice::Force(Family::Wgmma), ..Default::default() };
    for shape in [DecodeShape::bf16(2, 16, 1, 64, 3, 4096), DecodeShape::bf16(2, 16, 1, 256, 3, 4096), DecodeShape { head_dim: 64, ..quantized(KvFormat::Int8, 2, 16, 1, 3, 4096) }] {
        let e = plan(&shape, &[4096, 4096], &DeviceInfo::H100_SXM, &WGMMA_KERNEL, &o).unwrap_err();
        assert!(e.to_string().contains("wgmma"), "{e}");
    }
    // Quantized caches at head_dim 128 have wgmma kernels (64-key stages,
    // converted into 16-bit tiles first; on a one-wave grid of a strided
    // cache the warp-specialised one).
    let q = plan(&quantized(KvFormat::Int8, 2, 16, 1, 3, 4096), &[4096, 4096], &DeviceInfo::H100_SXM, &WGMMA_KERNEL, &o).unwrap();
    assert_eq!((q.family(), q.rows_per_block(), q.stages()), (Family::Wgmma, 64, decode_attn_abi::wgmma_producer_stages(KvFormat::Int8)));
    assert_covers(&q);
    // Forced where it serves, it covers any rows (here 8, in one 64-row chunk).
    let p = plan(&DecodeShape::bf16(2, 8, 1, 128, 1, 4096), &[4096, 77], &DeviceInfo::H100_SXM, &WGMMA_KERNEL, &o).unwrap();
    assert_eq!((p.family(), p.rows_per_block(), p.row_chunks()), (Family::Wgmma, 64, 1));
    assert_covers(&p);
}

/// The two wgmma kernels of a strided quantized cache as the library reads
/// them: the unspecialised one at its 128-register cap, the
/// warp-specialised one (384 threads) at 168.
struct BothWgmmaKernels;

impl KernelLimits for BothWgmmaKernels {
    fn limits(&self, id: &KernelId) -> Option<KernelInfo> {
        let info = if id.form == Form::Specialized { KernelInfo { max_threads_per_block: 384, regs_per_thread: 168 } } else { WGMMA_KERNEL };
        id.exists().then_some(info)
    }
}

#[test]
fn strided_quantized_wgmma_plans_are_warp_specialised_when_their_grid_fits_two_waves() {
    let dev = &DeviceInfo::H100_SXM; // 132 SMs
    for format in [KvFormat::Int8, KvFormat::Int4G32] {
        // Grid B (2K, 128): 128 blocks, one wave at one block per SM.
        let p = plan(&quantized(format, 128, 16, 1, 3, 2048), &[2048; 128], dev, &BothWgmmaKernels, &opts(SplitPolicy::Auto)).unwrap();
        assert_eq!((p.warp_specialized(), p.block_threads(), p.blocks_per_sm(), p.fits_one_wave(dev)), (true, 384, 1, true));
        assert_covers(&p);
        // Grid B (1K, 256): 256 blocks take two waves at one per SM, still
        // faster than the unspecialised kernel's one wave at two per SM.
        let lens = [1024; 256];
        let shape = quantized(format, 256, 16, 1, 3, 1024);
        let p = plan(&shape, &lens, dev, &BothWgmmaKernels, &opts(SplitPolicy::Auto)).unwrap();
        assert_eq!((p.warp_specialized(), p.block_threads(), p.blocks_per_sm(), p.waves(dev), p.max_splits()), (true, 384, 1, 2, 1));
        assert_covers(&p);
        // Three waves at one per SM: the unspecialised kernel for both.
        let p = plan(&quantized(format, 384, 16, 1, 3, 1024), &[1024; 384], dev, &BothWgmmaKernels, &opts(SplitPolicy::Auto)).unwrap();
        assert_eq!((p.warp_specialized(), p.blocks_per_sm(), p.waves(dev)), (false, 2, 2));
        // Either kernel on request.
        let always = PlanOptions { specialize: SpecializeChoice::Always, ..Default::default() };
        let never = PlanOptions { specialize: SpecializeChoice::Never, ..Default::default() };
        let p = plan(&shape, &lens, dev, &BothWgmmaKernels, &always).unwrap();
        assert_eq!((p.warp_specialized(), p.block_threads(), p.fits_one_wave(dev)), (true, 384, false));
        let p = plan(&quantized(format, 128, 16, 1, 3, 2048), &[2048; 128], dev, &BothWgmmaKernels, &never).unwrap();
        assert_eq!((p.warp_specialized(), p.block_threads(), p.blocks_per_sm()), (false, 256, 2));
        // Capacity plans choose as their lengths at capacity do.
        let cap = decode_attn::plan::plan_capacity(&shape, dev, &BothWgmmaKernels, &opts(SplitPolicy::Auto)).unwrap();
        assert!(cap.warp_specialized());
    }
    // None exists for 16-bit or paged caches, nor for other families:
    // asking for one is an error that says so; `Auto` runs the one there is.
    let always = PlanOptions { specialize: SpecializeChoice::Always, ..Default::default() };
    let paged = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages: 512, order: PageOrder::TokenMajor, page_bytes: None }, ..quantized(KvFormat::Int8, 2, 16, 1, 3, 4096) };
    let table: Vec<i32> = (0..2 * paged.pages_per_seq() as i32).collect();
    let e = decode_attn::plan::plan_paged(&paged, &[4096, 4096], &table, dev, &BothWgmmaKernels, &always).unwrap_err();
    assert!(e.to_string().contains("warp-specialised") && e.to_string().contains("paged"), "{e}");
    let p = decode_attn::plan::plan_paged(&paged, &[4096, 4096], &table, dev, &BothWgmmaKernels, &opts(SplitPolicy::Auto)).unwrap();
    assert_eq!((p.family(), p.warp_specialized(), p.block_threads()), (Family::Wgmma, false, 256));
    for shape in [DecodeShape::bf16(2, 16, 1, 128, 3, 4096), quantized(KvFormat::Int8, 2, 4, 1, 1, 4096)] {
        let e = plan(&shape, &[4096, 4096], dev, &BothWgmmaKernels, &always).unwrap_err();
        assert!(e.to_string().contains("warp-specialised"), "{e}");
        assert!(!plan(&shape, &[4096, 4096], dev, &BothWgmmaKernels, &opts(SplitPolicy::Auto)).unwrap().warp_specialized());
    }
}

#[test]
fn short_sequences_take_only_the_stages_they_fill() {
    // Grid D (64, 128): 128 keys are two bf16 stages of 64, so two stages of
    // shared memory (64 KiB) and three blocks per SM instead of two.
    let dev = &DeviceInfo::H100_SXM;
    let short = plan(&DecodeShape::bf16(64, 32, 32, 128, 1, 128), &[128; 64], dev, &KERNEL, &opts(SplitPolicy::Auto)).unwrap();
    let long = plan(&DecodeShape::bf16(64, 32, 32, 128, 1, 8192), &[8192; 64], dev, &KERNEL, &opts(SplitPolicy::Auto)).unwrap();
    assert_eq!((short.stages(), long.stages()), (2, 3));
    assert!(short.smem_bytes() < long.smem_bytes());
    assert_eq!((short.blocks_per_sm(), long.blocks_per_sm()), (3, 2));
    // The longest sequence decides, ragged or not; a one-key sequence still
    // has one stage.
    let ragged = plan(&DecodeShape::bf16(3, 32, 32, 128, 1, 8192), &[1, 65, 8192], dev, &KERNEL, &opts(SplitPolicy::Auto)).unwrap();
    assert_eq!(ragged.stages(), 3);
    let one = plan(&DecodeShape::bf16(1, 32, 32, 128, 1, 8192), &[1], dev, &KERNEL, &opts(SplitPolicy::Auto)).unwrap();
    assert_eq!(one.stages(), 1);
    // Below the full ring, no work item has more stages' keys than the
    // block holds.
    for p in [&short, &one] {
        assert!(p.work().iter().all(|w| (w.kv_end - w.kv_start).div_ceil(stage_keys(KvFormat::Bf16, 128)) <= p.stages()));
    }
    // Capacity plans size for the capacity, whatever the lengths at run time.
    let shape = DecodeShape::bf16(64, 32, 32, 128, 1, 128);
    let cap = decode_attn::plan::plan_capacity(&shape, dev, &KERNEL, &PlanOptions::default()).unwrap();
    assert_eq!((cap.stages(), cap.smem_bytes()), (short.stages(), short.smem_bytes()));
}

#[test]
fn bytes_moved_counts_every_visible_row_with_its_side_data_plus_q_and_o() {
    // docs/benchmark.md: K and V bytes actually read, scales included, + Q + O.
    let bytes = |format| {
        let shape = quantized(format, 2, 8, 1, 1, 4096);
        plan(&shape, &[1000, 24], &DeviceInfo::H100_SXM, &KERNEL, &opts(SplitPolicy::Auto)).unwrap().bytes_moved()
    };
    let keys = 1024u64; // 1000 + 24 rows of one kv head, for K and for V
    let q_and_o = 2 * 2 * 8 * 128 * 2; // Q and O: 2 sequences × 8 rows × 128 bf16
    assert_eq!(bytes(KvFormat::Bf16), 2 * keys * 256 + q_and_o);
    assert_eq!(bytes(KvFormat::Int8), 2 * keys * (128 + 4) + q_and_o);
    assert_eq!(bytes(KvFormat::Int4G32), 2 * keys * (64 + 16) + q_and_o);
    assert_eq!(bytes(KvFormat::Int4G128), 2 * keys * (64 + 4) + q_and_o);
}

#[test]
fn auto_splits_cut_the_longest_sequence_into_equal_chunks() {
    // 8192 keys in 128-key stages, split in two: 4096 + 4096, not 4224 + 3968
    // (the longer block sets the time; in a capacity step two long blocks
    // shared an SM: +4 % on int4 grid A B=128).
    let kernel = KernelInfo { max_threads_per_block: 512, regs_per_thread: 128 };
    let shape = quantized(KvFormat::Int4G32, 128, 8, 1, 1, 8192);
    let p = plan(&shape, &[8192; 128], &DeviceInfo::H100_SXM, &kernel, &opts(SplitPolicy::Auto)).unwrap();
    assert_eq!((p.max_splits(), p.chunk_keys()), (2, 4096));
    // Grid C 128K int4: 32 chunks of 4096, not 31 of 4224 and one of 128.
    let shape = quantized(KvFormat::Int4G32, 1, 32, 8, 1, 131072);
    let p = plan(&shape, &[131072], &DeviceInfo::H100_SXM, &kernel, &opts(SplitPolicy::Auto)).unwrap();
    assert_eq!((p.max_splits(), p.chunk_keys()), (32, 4096));
    // Every candidate is even: a chunk is never more than one stage longer
    // than the longest sequence divided by its split count.
    for len in [1000u32, 4097, 8192, 12345, 65536, 131071] {
        let c = heuristics::auto_chunk_keys(&[len], 8, 128, 264, 2);
        if c != u32::MAX {
            let n = len.div_ceil(c);
            assert!(c <= len.div_ceil(n).next_multiple_of(128), "len {len}: chunk {c} for {n} splits");
        }
    }
}

#[test]
fn equal_lengths_run_without_a_work_list_when_the_items_are_a_capacity_plans() {
    let dev = &DeviceInfo::H100_SXM;
    let merge_global = PlanOptions { split: SplitPolicy::ChunkKeys(256), merge: MergeChoice::Global, ..Default::default() };
    // Grid D (1, 1K): four chunks of 256 keys per kv head, merged in the
    // attention kernel: the blocks derive their items from the length.
    let d = DecodeShape::bf16(1, 32, 32, 128, 1, 1024);
    let p = plan(&d, &[1024], dev, &KERNEL, &merge_global).unwrap();
    assert_eq!((p.max_splits(), p.uniform_len()), (4, Some(1024)));
    // Unsplit and merge-kernel plans alike.
    let b = DecodeShape::bf16(4, 16, 1, 128, 3, 4096);
    assert_eq!(plan(&b, &[4096; 4], dev, &KERNEL, &opts(SplitPolicy::Never)).unwrap().uniform_len(), Some(4096));
    let p = plan(&b, &[4096; 4], dev, &KERNEL, &PlanOptions { split: SplitPolicy::ChunkKeys(64), ..Default::default() }).unwrap();
    assert_eq!((p.merge_mode(), p.uniform_len()), (MergeMode::Kernel, Some(4096)));
    // Ragged lengths keep the list; so do equal lengths whose short last
    // chunks the list orders after every full one (1000 = 3 × 256 + 232).
    assert_eq!(plan(&b, &[4096, 4096, 4096, 4095], dev, &KERNEL, &opts(SplitPolicy::Auto)).unwrap().uniform_len(), None);
    assert_eq!(plan(&b, &[1000; 4], dev, &KERNEL, &merge_global).unwrap().uniform_len(), None);
    // A single sequence's short last chunk is last either way.
    assert_eq!(plan(&d, &[1000], dev, &KERNEL, &merge_global).unwrap().uniform_len(), Some(1000));
    // Cluster merges and capacity plans never.
    let cluster = PlanOptions { split: SplitPolicy::ChunkKeys(512), merge: MergeChoice::Cluster, ..Default::default() };
    let p = plan(&d, &[1024], dev, &KERNEL, &cluster).unwrap();
    assert_eq!((p.merge_mode(), p.uniform_len()), (MergeMode::Cluster, None));
    assert_eq!(decode_attn::plan::plan_capacity(&d, dev, &KERNEL, &merge_global).unwrap().uniform_len(), None);
}

/// The kernels of a 16-bit wide strided shape as the library reads them:
/// the planned launches' kernel, and its capacity twin at more registers.
struct WideAndTwin {
    twin: KernelInfo,
}

impl KernelLimits for WideAndTwin {
    fn limits(&self, id: &KernelId) -> Option<KernelInfo> {
        let info = if id.form == Form::Capacity { self.twin } else { KernelInfo { max_threads_per_block: 384, regs_per_thread: 118 } };
        id.exists().then_some(info)
    }
}

#[test]
fn capacity_plans_of_sixteen_bit_wide_strided_shapes_run_the_capacity_twin_planned_for_its_limits() {
    let dev = &DeviceInfo::H100_SXM;
    let global = PlanOptions { split: SplitPolicy::ChunkKeys(256), merge: MergeChoice::Global, ..Default::default() };
    for (d, twin) in [(64, true), (128, true), (256, false)] {
        let shape = DecodeShape::bf16(64, 32, 32, d, 1, 128);
        let kernels = WideAndTwin { twin: KernelInfo { max_threads_per_block: 384, regs_per_thread: 121 } };
        let cap = decode_attn::plan::plan_capacity(&shape, dev, &kernels, &global).unwrap();
        assert_eq!((cap.family(), cap.runs_capacity_twin()), (Family::Wide, twin), "d{d}");
        // Planned launches of the same lengths never run it.
        let planned = plan(&shape, &[128; 64], dev, &kernels, &global).unwrap();
        assert!(!planned.runs_capacity_twin());
        // The capacity plan is made for the twin's registers: one that
        // cannot fit a second block per SM gets one.
        let heavy = WideAndTwin { twin: KernelInfo { max_threads_per_block: 384, regs_per_thread: 255 } };
        if twin {
            let cap = decode_attn::plan::plan_capacity(&shape, dev, &heavy, &global).unwrap();
            let regs_per_block = 256 * (255u32 * 32).div_ceil(256) * cap.block_threads().div_ceil(32);
            assert!(cap.blocks_per_sm() <= dev.regs_per_sm / regs_per_block, "d{d}: {} blocks per SM", cap.blocks_per_sm());
        }
    }
    // Quantized, paged and cluster capacity plans have no twin.
    let int8 = quantized(KvFormat::Int8, 64, 32, 32, 1, 128);
    assert!(!decode_attn::plan::plan_capacity(&int8, dev, &KERNEL, &global).unwrap().runs_capacity_twin());
    let paged = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages: 512, order: PageOrder::TokenMajor, page_bytes: None }, ..DecodeShape::bf16(64, 32, 32, 128, 1, 128) };
    assert!(!decode_attn::plan::plan_capacity(&paged, dev, &KERNEL, &global).unwrap().runs_capacity_twin());
    let cluster = PlanOptions { split: SplitPolicy::ChunkKeys(256), merge: MergeChoice::Cluster, ..Default::default() };
    let long = DecodeShape::bf16(1, 32, 32, 128, 1, 1024);
    let p = decode_attn::plan::plan_capacity(&long, dev, &KERNEL, &cluster).unwrap();
    assert_eq!((p.cluster() > 1, p.runs_capacity_twin()), (true, false));
}

#[test]
fn token_major_quantized_caches_read_two_adjacent_kv_heads_a_block_when_the_sms_stay_busy_and_sequences_are_long() {
    use decode_attn::plan::{head_pair_unsupported, plan_capacity, plan_paged};
    use decode_attn::HeadPairChoice;
    let dev = &DeviceInfo::H100_SXM; // 132 SMs
    let kernel = KernelInfo { max_threads_per_block: 512, regs_per_thread: 128 };
    let always = PlanOptions { head_pair: HeadPairChoice::Always, ..Default::default() };
    let never = PlanOptions { head_pair: HeadPairChoice::Never, ..Default::default() };
    for format in [KvFormat::Int8] {
        // Grid D (128, 2K): 4096 unsplit one-head blocks, 2048 pairs.
        let shape = quantized(format, 128, 32, 32, 1, 2048);
        let lens = [2048; 128];
        let p = plan(&shape, &lens, dev, &kernel, &opts(SplitPolicy::Auto)).unwrap();
        assert_eq!((p.family(), p.heads_per_block(), p.grid(), p.max_splits()), (Family::Narrow, 2, (2048, 1, 1), 1));
        assert_eq!(p.block_threads(), 32 * p.warps_k(), "the pair's warps split over its heads");
        let one = plan(&shape, &lens, dev, &kernel, &never).unwrap();
        assert_eq!((one.heads_per_block(), one.grid(), one.block_threads()), (1, (4096, 1, 1), p.block_threads()));
        // Head-major rows are not adjacent: Auto keeps one head a block,
        // Always pairs them anyway.
        let hnd = DecodeShape { kv_layout: KvLayout::Hnd, ..shape.clone() };
        assert_eq!(plan(&hnd, &lens, dev, &kernel, &opts(SplitPolicy::Auto)).unwrap().heads_per_block(), 1);
        assert_eq!(plan(&hnd, &lens, dev, &kernel, &always).unwrap().heads_per_block(), 2);
        // Grid D (8, 1K): 256 blocks, 128 pairs: 4 of the 132 SMs idle,
        // and pairs pay for that (measured 2 % faster).
        let small = quantized(format, 8, 32, 32, 1, 1024);
        assert_eq!(plan(&small, &[1024; 8], dev, &kernel, &opts(SplitPolicy::Auto)).unwrap().heads_per_block(), 2);
        // Half the SMs idle (128 unsplit blocks, 64 pairs): one head a block.
        let few = quantized(format, 4, 32, 32, 1, 2048);
        assert_eq!(plan(&few, &[2048; 4], dev, &kernel, &opts(SplitPolicy::Never)).unwrap().heads_per_block(), 1);
        assert_eq!(plan(&few, &[2048; 4], dev, &kernel, &PlanOptions { head_pair: HeadPairChoice::Always, ..opts(SplitPolicy::Never) }).unwrap().heads_per_block(), 2);
        // Grid D (64, 128): short sequences (two pair stages a block,
        // measured 10 % slower paired) keep one head a block.
        let short = quantized(format, 64, 32, 32, 1, 128);
        assert_eq!(plan(&short, &[128; 64], dev, &kernel, &opts(SplitPolicy::Auto)).unwrap().heads_per_block(), 1);
        assert_eq!(plan(&short, &[128; 64], dev, &kernel, &always).unwrap().heads_per_block(), 2);
        // Split sequences (grid C 128K) keep one head a block: Always says why.
        let split = quantized(format, 1, 32, 8, 1, 131_072);
        let p = plan(&split, &[131_072], dev, &kernel, &opts(SplitPolicy::Auto)).unwrap();
        assert!(p.max_splits() > 1 && p.heads_per_block() == 1);
        assert_eq!(head_pair_unsupported(&p), Some("head pairs run unsplit plans only"));
        assert!(plan(&split, &[131_072], dev, &kernel, &always).unwrap_err().to_string().contains("unsplit"));
        // Capacity plans pair as their lengths at capacity do (a CUDA graph
        // of the step runs the kernel the planned launch does).
        assert_eq!(plan_capacity(&shape, dev, &kernel, &opts(SplitPolicy::Auto)).unwrap().heads_per_block(), 2);
        assert_eq!(plan_capacity(&shape, dev, &kernel, &never).unwrap().heads_per_block(), 1);
        assert_eq!(plan_capacity(&split, dev, &kernel, &opts(SplitPolicy::Auto)).unwrap().heads_per_block(), 1);
        // Token-major pages hold a token's heads side by side: paged grid D
        // (128, 2K) pairs as the contiguous one does; head-major pages pair
        // only when asked. A paged grid D (8, 1K) does not: its 128 pairs
        // would run one block a SM, with nothing to hide each stage's wait
        // for its page ids.
        for (order, auto_heads) in [(PageOrder::TokenMajor, 2), (PageOrder::HeadMajor, 1)] {
            let paged = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages: 128 * 128, order, page_bytes: None }, ..shape.clone() };
            let table: Vec<i32> = (0..128 * paged.pages_per_seq() as i32).collect();
            let p = plan_paged(&paged, &lens, &table, dev, &kernel, &opts(SplitPolicy::Auto)).unwrap();
            assert_eq!((p.heads_per_block(), p.grid()), (auto_heads, (4096 / auto_heads, 1, 1)), "{order:?}");
            assert_eq!(plan_paged(&paged, &lens, &table, dev, &kernel, &always).unwrap().heads_per_block(), 2);
            assert_eq!(plan_paged(&paged, &lens, &table, dev, &kernel, &never).unwrap().heads_per_block(), 1);
        }
        let paged_small = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages: 8 * 64, order: PageOrder::TokenMajor, page_bytes: None }, ..small.clone() };
        let table: Vec<i32> = (0..8 * paged_small.pages_per_seq() as i32).collect();
        assert_eq!(plan_paged(&paged_small, &[1024; 8], &table, dev, &kernel, &opts(SplitPolicy::Auto)).unwrap().heads_per_block(), 1);
        assert_eq!(plan_paged(&paged_small, &[1024; 8], &table, dev, &kernel, &always).unwrap().heads_per_block(), 2);
        // An odd number of kv heads cannot pair.
        assert!(plan(&quantized(format, 128, 3, 3, 1, 2048), &lens, dev, &kernel, &always).is_err());
    }
    // A short sequence's pair takes twice the stages of one head (64 keys
    // of each head a stage): 130 keys, three stages rather than two.
    let short = quantized(KvFormat::Int8, 264, 8, 8, 1, 130);
    let (one, two) = (plan(&short, &[130; 264], dev, &kernel, &never).unwrap(), plan(&short, &[130; 264], dev, &kernel, &always).unwrap());
    assert_eq!((one.stages(), two.stages(), two.heads_per_block()), (2, 3, 2));
    assert!(two.smem_bytes() > one.smem_bytes());
    // No pair kernel for 16-bit caches (their rows are 256 bytes already),
    // int4 (its 64-byte rows read their neighbours' through L2 already, and
    // pairs measured 10 % slower on grid D (128, 2K)) or other head dims.
    let int4 = quantized(KvFormat::Int4G32, 128, 32, 32, 1, 2048);
    assert_eq!(plan(&int4, &[2048; 128], dev, &kernel, &opts(SplitPolicy::Auto)).unwrap().heads_per_block(), 1);
    assert!(plan(&int4, &[2048; 128], dev, &kernel, &always).unwrap_err().to_string().contains("no head-pair kernel"));
    let bf16 = DecodeShape::bf16(128, 32, 32, 128, 1, 2048);
    let forced = PlanOptions { family: FamilyChoice::Force(Family::Narrow), ..Default::default() };
    assert_eq!(plan(&bf16, &[2048; 128], dev, &kernel, &forced).unwrap().heads_per_block(), 1);
    assert!(plan(&bf16, &[2048; 128], dev, &kernel, &PlanOptions { head_pair: HeadPairChoice::Always, ..forced }).unwrap_err().to_string().contains("no head-pair kernel"));
}

fn ranged(batch: u32, q_len: u32, cap: u32) -> DecodeShape {
    DecodeShape { variant: VariantSpec { key_ranges: true, ..VariantSpec::STANDARD }, ..DecodeShape::bf16(batch, 8, 2, 128, q_len, cap) }
}

#[test]
fn key_ranges_run_the_masked_kernels_and_read_from_each_sequences_start_aligned_down() {
    let shape = ranged(3, 2, 4096);
    assert_eq!(shape.kernel_variant(), decode_attn::Variant::Masked);
    let (starts, lens) = ([0u32, 9, 1000], [4096u32, 700, 1002]);
    for policy in [SplitPolicy::Never, SplitPolicy::ChunkKeys(256), SplitPolicy::Auto] {
        let p = decode_attn::plan::plan_key_ranges(&shape, &starts, &lens, None, &DeviceInfo::H100_SXM, &KERNEL, &opts(policy)).unwrap();
        assert_eq!(p.seq_starts(), &starts);
        // Strided caches align a range's start down to 16 keys.
        assert_eq!((0..3).map(|b| p.first_key(b)).collect::<Vec<_>>(), vec![0, 0, 992]);
        // Each sequence's chunks cover its range from the aligned start once.
        for (b, (&len, first)) in lens.iter().zip([0u32, 0, 992]).enumerate() {
            let mut items: Vec<_> = p.work().iter().filter(|w| w.batch == b as u32).map(|w| (w.kv_start, w.kv_end)).collect();
            items.sort();
            assert_eq!(items.first().unwrap().0, first);
            assert_eq!(items.last().unwrap().1, len);
            assert!(items.windows(2).all(|w| w[0].1 == w[1].0));
        }
        // No uniform plan: the blocks read each sequence's start.
        assert_eq!(p.uniform_len(), None);
        // The starts are uploaded with the plan, after the lengths.
        let meta = p.metadata();
        let at = p.layout().seq_starts;
        let uploaded: Vec<u32> = meta[at..at + 12].chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(uploaded, starts);
    }
}

#[test]
fn a_key_range_must_leave_every_new_token_a_key() {
    let shape = ranged(2, 3, 100);
    let plan = |starts: &[u32], lens: &[u32]| decode_attn::plan::plan_key_ranges(&shape, starts, lens, None, &DeviceInfo::H100_SXM, &KERNEL, &opts(SplitPolicy::Auto));
    // The first new token sees keys [start, L − q_len]: start ≤ L − q_len.
    assert!(plan(&[97, 0], &[100, 3]).is_ok());
    let e = plan(&[98, 0], &[100, 3]).unwrap_err().to_string();
    assert!(e.contains("seq_starts[0]") && e.contains("0..=97"), "{e}");
    let e = plan(&[0], &[100, 3]).unwrap_err().to_string();
    assert!(e.contains("seq_starts") && e.contains("2 starts"), "{e}");
    // A shape with key ranges needs starts; one without takes none.
    let e = decode_attn::plan::plan(&shape, &[100, 3], &DeviceInfo::H100_SXM, &KERNEL, &opts(SplitPolicy::Auto)).unwrap_err().to_string();
    assert!(e.contains("seq_starts") && e.contains("plan_key_ranges"), "{e}");
    let plain = DecodeShape::bf16(2, 8, 2, 128, 3, 100);
    let e = decode_attn::plan::plan_key_ranges(&plain, &[0, 0], &[100, 3], None, &DeviceInfo::H100_SXM, &KERNEL, &opts(SplitPolicy::Auto)).unwrap_err().to_string();
    assert!(e.contains("seq_starts") && e.contains("key_ranges = false"), "{e}");
}

#[test]
fn paged_key_ranges_align_to_the_page_or_the_stage() {
    let shape = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages: 64, order: PageOrder::TokenMajor, page_bytes: None }, ..ranged(2, 1, 512) };
    let table: Vec<i32> = (0..64).collect();
    let p = decode_attn::plan::plan_key_ranges(&shape, &[37, 0], &[500, 40], Some(&table), &DeviceInfo::H100_SXM, &KERNEL, &opts(SplitPolicy::Never)).unwrap();
    assert_eq!((p.first_key(0), p.first_key(1)), (32, 0));
    let e = decode_attn::plan::plan_key_ranges(&shape, &[37, 0], &[500, 40], None, &DeviceInfo::H100_SXM, &KERNEL, &opts(SplitPolicy::Never)).unwrap_err().to_string();
    assert!(e.contains("block_table"), "{e}");
}

#[test]
fn capacity_plans_derive_a_ranges_items_from_the_clamped_device_start() {
    use decode_attn_abi::{capacity_merge_item_from, capacity_work_item_from, range_start};
    // The kernels' items: chunk c of a sequence starts at its range's start
    // (the device start, read as at most L − q_len, aligned down) + c·chunk.
    let (len, q_len, chunk, chunks) = (1000u32, 2u32, 256u32, 4u32);
    for (device_start, first) in [(0u32, 0u32), (300, 288), (998, 992), (5000, 992)] {
        let start = range_start(len, device_start, q_len, decode_attn_abi::NO_WINDOW, 16);
        assert_eq!(start, first);
        let items: Vec<_> = (0..chunks).filter_map(|x| capacity_work_item_from(x, len, start, q_len, chunk, chunks)).collect();
        assert_eq!(items[0].kv_start, first);
        assert_eq!(items.last().unwrap().kv_end, len);
        assert_eq!(capacity_merge_item_from(0, len, start, q_len, chunk, chunks).num_slots as usize, items.len());
    }
    // A window and a start: the later of the two first keys.
    assert_eq!(range_start(1000, 100, 1, 50, 16), 944);
    assert_eq!(range_start(1000, 990, 1, 50, 16), 976);
}

mod tuning {
    //! Which table a GPU's planner reads (`Tuning::for_device`).
    use decode_attn::tuning::{H100_TABLE, H200_TABLE, TABLES};
    use decode_attn::{DeviceFacts, DeviceInfo, Knob, Tuning};

    fn facts(sm_count: u32, memory_clock_khz: u32, memory_bus_bits: u32) -> DeviceFacts {
        DeviceFacts { compute_capability: (9, 0), sm_count, l2_bytes: 50 << 20, memory_clock_khz, memory_bus_bits }
    }

    #[test]
    fn each_measured_gpu_reads_its_own_table() {
        for t in TABLES {
            assert_eq!(Tuning::for_device(&t.facts), t, "{}", t.name);
        }
        assert_eq!(Tuning::for_device(&DeviceFacts::H100_SXM).name, "H100 SXM");
        assert_eq!(Tuning::for_device(&DeviceFacts::H200).name, "H200");
        assert_eq!(DeviceInfo::H100_SXM.tuning, H100_TABLE);
    }

    #[test]
    fn an_unmeasured_sm90_part_reads_the_nearest_table() {
        // H800 SXM: an H100's SMs and HBM3 (3.35 TB/s).
        assert_eq!(Tuning::for_device(&facts(132, 2_619_000, 5120)).name, "H100 SXM");
        // H100 PCIe: 114 SMs, HBM2e at 2.0 TB/s.
        assert_eq!(Tuning::for_device(&facts(114, 1_593_000, 5120)).name, "H100 SXM");
        // H20: 78 SMs, HBM3 at 4.0 TB/s (nearer the H200's 4.8 than the
        // H100's 3.35, on a log scale).
        assert_eq!(Tuning::for_device(&facts(78, 2_619_000, 6144)).name, "H200");
        // GH200 with HBM3e (4.9 TB/s) and with HBM3 (4.0 TB/s).
        assert_eq!(Tuning::for_device(&facts(132, 3_201_000, 6144)).name, "H200");
        assert_eq!(Tuning::for_device(&facts(132, 2_619_000, 6144)).name, "H200");
        // A part slower than the H100: its table.
        assert_eq!(Tuning::for_device(&facts(132, 2_000_000, 5120)).name, "H100 SXM");
        // A driver that reports no memory clock: by SMs alone, the first table on a tie.
        assert_eq!(Tuning::for_device(&facts(132, 0, 0)).name, "H100 SXM");
        // Another architecture: the nearest of all tables.
        let other = DeviceFacts { compute_capability: (10, 0), ..DeviceFacts::H200 };
        assert_eq!(Tuning::for_device(&other).name, "H200");
    }

    #[test]
    fn peak_bandwidth_is_two_transfers_a_clock_over_the_bus() {
        assert_eq!(DeviceFacts::H100_SXM.peak_gbps(), 3352);
        assert_eq!(DeviceFacts::H200.peak_gbps(), 4814);
        assert_eq!(facts(132, 0, 5120).peak_gbps(), 0);
    }

    #[test]
    fn a_sweep_candidate_changes_one_threshold_and_names_round_trip() {
        for k in Knob::ALL {
            assert_eq!(Knob::from_name(k.name()), Some(k));
            let t = H200_TABLE.with(k, 12345);
            assert_eq!(t.get(k), 12345);
            for other in Knob::ALL.into_iter().filter(|&o| o != k) {
                assert_eq!(t.get(other), H200_TABLE.get(other), "{} moved {}", k.name(), other.name());
            }
        }
        assert_eq!(Tuning::by_name("h200"), Some(&H200_TABLE));
        assert_eq!(Tuning::by_name("B200"), None);
    }

    #[test]
    fn the_tables_thresholds_reach_the_plans() {
        use decode_attn::plan::plan;
        use decode_attn::{Family, PlanOptions};
        // Grid B's 48 rows: wgmma under the H100 table, wide when the table
        // asks for more than 48 rows.
        let shape = decode_attn::DecodeShape::bf16(64, 16, 1, 128, 3, 4096);
        let dev = DeviceInfo::H100_SXM;
        assert_eq!(plan(&shape, &[4096; 64], &dev, &super::KERNEL, &PlanOptions::default()).unwrap().family(), Family::Wgmma);
        let fewer = DeviceInfo { tuning: H100_TABLE.with(Knob::WgmmaMinRows, 48), ..dev };
        assert_eq!(plan(&shape, &[4096; 64], &fewer, &super::KERNEL, &PlanOptions::default()).unwrap().family(), Family::Wide);
    }

    #[test]
    fn a_paged_cache_fills_at_least_the_blocks_per_sm_its_table_asks_where_they_fit() {
        use decode_attn::plan::{plan, plan_capacity, plan_paged};
        use decode_attn::{DecodeShape, KvLayout, PageOrder, PlanOptions};
        let auto = PlanOptions::default();
        let floor = DeviceInfo { tuning: H100_TABLE.with(Knob::PagedMinBlocksPerSm, 2), ..DeviceInfo::H100_SXM };
        // Grid A B=128 bf16: 128 one-block sequences, one wide block an SM
        // (the saturating-warps rule) contiguous, paged or not under the
        // H100 table; two splits (256 blocks) in a pool under a floor of two.
        let shape = DecodeShape::bf16(128, 8, 1, 128, 1, 8192);
        let lens = [8192; 128];
        let paged = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages: 128 * 512, order: PageOrder::TokenMajor, page_bytes: None }, ..shape.clone() };
        let table: Vec<i32> = (0..128 * 512).collect();
        let splits = |dev: &DeviceInfo, s: &DecodeShape| match s.is_paged() {
            true => plan_paged(s, &lens, &table, dev, &super::KERNEL, &auto).unwrap().max_splits(),
            false => plan(s, &lens, dev, &super::KERNEL, &auto).unwrap().max_splits(),
        };
        assert_eq!(splits(&DeviceInfo::H100_SXM, &paged), 1);
        assert_eq!(splits(&floor, &paged), 2);
        assert_eq!(splits(&floor, &shape), 1, "contiguous caches keep the saturating-warps rule");
        // A capacity plan of the pool splits as its lengths at capacity do.
        assert_eq!(plan_capacity(&paged, &floor, &super::KERNEL, &auto).unwrap().max_splits(), 2);
        // B=256 fills two blocks an SM unsplit already: a second wave of
        // half-length blocks would cost more than it hides.
        let big = DecodeShape { batch: 256, kv_layout: KvLayout::Paged { page_size: 16, num_pages: 256 * 512, order: PageOrder::TokenMajor, page_bytes: None }, ..shape };
        let table: Vec<i32> = (0..256 * 512).collect();
        assert_eq!(plan_paged(&big, &[8192; 256], &table, &floor, &super::KERNEL, &auto).unwrap().max_splits(), 1);
    }

    #[test]
    fn head_pairs_stop_at_the_tables_longest_mean_sequence() {
        use decode_attn::plan::plan;
        use decode_attn::{DecodeShape, KernelInfo, KvFormat, PlanOptions};
        let kernel = KernelInfo { max_threads_per_block: 512, regs_per_thread: 128 };
        let auto = PlanOptions::default();
        let int8 = |batch: u32, len: u32| DecodeShape { kv_format: KvFormat::Int8, ..DecodeShape::bf16(batch, 32, 32, 128, 1, len) };
        let heads = |dev: &DeviceInfo, batch: u32, len: u32| plan(&int8(batch, len), &vec![len; batch as usize], dev, &kernel, &auto).unwrap().heads_per_block();
        let bounded = DeviceInfo { tuning: H100_TABLE.with(Knob::HeadPairMaxMeanKeys, 1024), ..DeviceInfo::H100_SXM };
        // Grid D (128, 2K): paired under the H100 table (no bound), one head
        // a block past a bound of 1024 keys; (16, 1K) at the bound pairs.
        assert_eq!(heads(&DeviceInfo::H100_SXM, 128, 2048), 2);
        assert_eq!(heads(&bounded, 128, 2048), 1);
        assert_eq!(heads(&bounded, 16, 1024), 2);
    }
}

/// An MLA sequence's `Auto` chunks hold two stages (128 keys) at least,
/// and as many as the sequence has row chunks, and make 128 blocks at
/// most, evened out (`heuristics::mla_chunk_keys`); a batch whose
/// sequences take a few chunks each keeps the shortest chunks that fill
/// a wave.
#[test]
fn mla_auto_split_takes_two_stages_and_128_blocks_at_most() {
    let kernel = KernelInfo { max_threads_per_block: 256, regs_per_thread: 255 };
    let chunk = |batch: u32, heads: u32, q_len: u32, len: u32| plan(&DecodeShape::latent(batch, heads, q_len, len), &vec![len; batch as usize], &DeviceInfo::H100_SXM, &kernel, &opts(SplitPolicy::Auto)).unwrap().chunk_keys();
    assert_eq!(chunk(1, 128, 1, 4096), 128); // 32 chunks, not 64 single stages
    assert_eq!(chunk(1, 16, 1, 32768), 256); // 128 chunks of one row chunk
    assert_eq!(chunk(1, 128, 1, 32768), 512); // 64 chunks of two row chunks
    assert_eq!(chunk(1, 128, 2, 32768), 1024); // four row chunks: 32 chunks
    assert_eq!(chunk(1, 128, 2, 4096), 256); // four row chunks: four stages a chunk
    assert_eq!(chunk(32, 16, 1, 4096), 1024); // 4 chunks a sequence: 128 blocks
    assert_eq!(chunk(1, 16, 1, 128), u32::MAX); // two stages: no split
}

proptest! {
    /// The MLA chunk rule keeps `auto`'s chunk or lengthens it, in whole
    /// stages, to at most 128 blocks a sequence (chunks × row chunks),
    /// and splits nothing it would leave in one chunk.
    #[test]
    fn mla_chunks_make_at_most_128_blocks_a_sequence(longest in 2u32..300_000, row_chunks in 1u32..9, auto_stages in 1u32..4096) {
        // (`auto_chunk_keys` splits a sequence or says u32::MAX.)
        let auto = (auto_stages * 64).min(longest - 1);
        let chunk = heuristics::mla_chunk_keys(auto, longest, 64, row_chunks);
        if chunk != u32::MAX {
            prop_assert!(chunk >= auto && (chunk % 64 == 0 || chunk == auto), "chunk {chunk}, auto {auto}");
            let chunks = longest.div_ceil(chunk);
            prop_assert!(chunks >= 2, "{chunks} chunks");
            prop_assert!(chunks * row_chunks <= 128.max(row_chunks), "{chunks} chunks x {row_chunks} row chunks");
        }
    }
}

/// An MLA plan of an fp8-ds-mla cache on the 64-row kernel whose
/// sequences split in two merges each sequence's chunks in a 2-block
/// cluster (`heuristics::mla_cluster_max`): no merge kernel, no partials,
/// the kernel's cluster form, a cluster a row chunk's chunks. The other
/// formats merge globally unless asked; `MergeChoice::Cluster` takes up
/// to the device's largest cluster, and the transposed kernels (no
/// cluster form) refuse it.
#[test]
fn mla_ds_sequences_split_in_two_merge_in_a_cluster_on_the_64_row_kernel() {
    let kernel = KernelInfo { max_threads_per_block: 384, regs_per_thread: 168 };
    let dev = &DeviceInfo::H100_SXM;
    let latent = |format: KvFormat, heads: u32, split: SplitPolicy, merge: MergeChoice| plan(&DecodeShape { kv_format: format, ..DecodeShape::latent(32, heads, 1, 4096) }, &[4096; 32], dev, &kernel, &PlanOptions { merge, ..opts(split) });
    let ds = KvFormat::Fp8DsMla;
    let two = latent(ds, 128, SplitPolicy::ChunkKeys(2048), MergeChoice::Auto).unwrap();
    assert_eq!((two.cluster(), two.launch_cluster(), two.merge_grid(), two.kernel_id().merge), (2, 2, None, Merge::Cluster));
    assert!(two.kernel_name().starts_with("decode_cluster_mla_"), "{}", two.kernel_name());
    assert_eq!((two.grid(), two.max_splits(), two.merge_mode()), ((32 * 2 * 2, 1, 1), 2, MergeMode::Cluster));
    for format in [KvFormat::Bf16, KvFormat::Fp8PerHead] {
        let global = latent(format, 128, SplitPolicy::ChunkKeys(2048), MergeChoice::Auto).unwrap();
        assert_eq!((global.cluster(), global.kernel_id().merge), (0, Merge::Global), "{format:?}");
        let forced = latent(format, 128, SplitPolicy::ChunkKeys(2048), MergeChoice::Cluster).unwrap();
        assert_eq!((forced.cluster(), forced.merge_grid()), (2, None), "{format:?}");
    }
    // Four chunks: `Auto` merges globally (clusters of 4 one-block-per-SM
    // blocks do not fill the GPU); `Cluster` asks for them.
    let four = latent(ds, 128, SplitPolicy::ChunkKeys(1024), MergeChoice::Auto).unwrap();
    assert_eq!((four.cluster(), four.kernel_id().merge), (0, Merge::Global));
    assert!(four.merge_grid().is_some());
    let forced = latent(ds, 128, SplitPolicy::ChunkKeys(1024), MergeChoice::Cluster).unwrap();
    assert_eq!((forced.cluster(), forced.merge_grid()), (4, None));
    // 16 heads run the transposed kernel: merged globally, or refused.
    assert_eq!(latent(ds, 16, SplitPolicy::ChunkKeys(2048), MergeChoice::Auto).unwrap().cluster(), 0);
    match latent(ds, 16, SplitPolicy::ChunkKeys(2048), MergeChoice::Cluster) {
        Err(decode_attn::Error::Unsupported(m)) => assert!(m.contains("transposed") && m.contains("TransposeChoice::Never"), "{m}"),
        other => panic!("{other:?}"),
    }
    let never = plan(&DecodeShape { kv_format: ds, ..DecodeShape::latent(32, 16, 1, 4096) }, &[4096; 32], dev, &kernel, &PlanOptions { merge: MergeChoice::Cluster, transpose: decode_attn::TransposeChoice::Never, ..opts(SplitPolicy::ChunkKeys(2048)) }).unwrap();
    assert_eq!((never.transposed(), never.cluster()), (false, 2));
    // A capacity plan: every sequence's chunks at capacity one cluster.
    let cap = decode_attn::plan::plan_capacity(&DecodeShape { kv_format: ds, ..DecodeShape::latent(4, 128, 1, 4000) }, dev, &kernel, &opts(SplitPolicy::ChunkKeys(2048))).unwrap();
    assert_eq!((cap.cluster(), cap.merge_grid(), cap.grid()), (2, None, (4 * 2 * 2, 1, 1)));
}

/// An MLA merge kernel (rows of 512 values) runs blocks of 512 threads
/// where its grid fits one block a SM, else of 128 like every other merge
/// (`heuristics::merge_threads`); plans without a merge kernel have none.
#[test]
fn mla_merges_take_512_threads_a_block_where_the_grid_fits_the_sms() {
    let kernel = KernelInfo { max_threads_per_block: 256, regs_per_thread: 255 };
    let dev = &DeviceInfo::H100_SXM;
    let latent = |batch: u32, heads: u32, len: u32, split: SplitPolicy| plan(&DecodeShape::latent(batch, heads, 1, len), &vec![len; batch as usize], dev, &kernel, &opts(split)).unwrap();
    // 16 heads, one sequence of 32K in 512-key chunks: 64 slots, 16 one-row merge blocks.
    let one = latent(1, 16, 32768, SplitPolicy::ChunkKeys(512));
    assert_eq!((one.max_splits(), one.merge_grid(), one.merge_threads()), (64, Some((1, 16, 1)), 512));
    // 128 heads, 32 sequences of 4K in halves, merged globally (`Auto`
    // merges them in clusters): 2 slots, 32 × 32 blocks of 4 rows.
    let many = plan(&DecodeShape::latent(32, 128, 1, 4096), &[4096; 32], dev, &kernel, &PlanOptions { merge: MergeChoice::Global, ..opts(SplitPolicy::ChunkKeys(2048)) }).unwrap();
    assert_eq!((many.max_splits(), many.merge_grid(), many.merge_threads()), (2, Some((32, 32, 1)), 128));
    // Grid B's rows (128 values) keep 128 threads; unsplit plans launch no merge.
    let b = plan(&DecodeShape::bf16(2, 16, 1, 128, 3, 131072), &[131072; 2], dev, &KERNEL, &PlanOptions::default()).unwrap();
    assert_eq!((b.merge_grid().is_some(), b.merge_threads()), (true, 128));
    assert_eq!(latent(128, 16, 4096, SplitPolicy::Never).merge_threads(), 0);
    assert_eq!((heuristics::merge_threads(132, 512, 132), heuristics::merge_threads(133, 512, 132)), (512, 128));
}

/// An MLA plan of at most 16 query rows runs the transposed kernel
/// (`Form::Transposed`: one 16-row tile, eight warps along the keys, its
/// own shared memory) in every latent format; of 17 to 32 rows of an fp8
/// latent cache, its row-chunk form (`Form::TransposedRows`: a block a
/// chunk of 32 rows, a work item's chunks consecutive blocks); `Never`
/// keeps the 64-row kernel; `Always` takes the row chunks at any row
/// count of an fp8 cache, and is an `Err` naming why past 16 rows of a
/// bf16 one and for another family.
#[test]
fn mla_plans_of_16_rows_run_the_transposed_kernel() {
    use decode_attn::TransposeChoice;
    use decode_attn_abi::{mla_rows_per_block, mla_smem_bytes, mla_transposed_threads, MLA_T_ROWS};
    let kernel = KernelInfo { max_threads_per_block: 384, regs_per_thread: 168 };
    let dev = &DeviceInfo::H100_SXM;
    let with = |heads: u32, q_len: u32, format: KvFormat, transpose: TransposeChoice| {
        let shape = DecodeShape { kv_format: format, ..DecodeShape::latent(4, heads, q_len, 4096) };
        plan(&shape, &[4096, 8, 70, 4000], dev, &kernel, &PlanOptions { transpose, ..Default::default() })
    };
    for (heads, q_len) in [(16, 1), (8, 2), (1, 1), (5, 3)] {
        let p = with(heads, q_len, KvFormat::Bf16, TransposeChoice::Auto).unwrap();
        assert!(p.transposed() && p.kernel_id().form == Form::Transposed, "{heads} heads q_len {q_len}");
        assert!(p.kernel_name().contains("_mla_transposed_"), "{}", p.kernel_name());
        assert_eq!((p.rows_per_block(), p.row_chunks(), p.block_threads(), p.smem_bytes()), (MLA_T_ROWS, 1, 256, mla_smem_bytes(KvFormat::Bf16, Form::Transposed)));
        let plain = with(heads, q_len, KvFormat::Bf16, TransposeChoice::Never).unwrap();
        assert!(!plain.transposed() && plain.kernel_id().form == Form::Plain);
        assert_eq!((plain.rows_per_block(), plain.smem_bytes()), (64, mla_smem_bytes(KvFormat::Bf16, Form::Plain)));
    }
    for format in [KvFormat::Fp8PerHead, KvFormat::Fp8DsMla] {
        let p = with(16, 1, format, TransposeChoice::Auto).unwrap();
        assert!(p.transposed(), "{format:?}");
        // Both fp8 formats: the ring kernel's three warpgroups.
        assert_eq!((p.smem_bytes(), p.block_threads()), (mla_smem_bytes(format, Form::Transposed), 384), "{format:?}");
        for form in [Form::Transposed, Form::TransposedRows] {
            assert!(mla_smem_bytes(format, form) <= dev.max_smem_per_block, "{format:?} {form:?}");
        }
        assert!(!with(16, 1, format, TransposeChoice::Never).unwrap().transposed(), "{format:?}");
    }
    assert_eq!(mla_transposed_threads(KvFormat::Bf16, Form::Transposed), 256);
    // A build whose ring kernel took more registers than 384 threads allow
    // is refused by name, not launched.
    let small = KernelInfo { max_threads_per_block: 256, regs_per_thread: 168 };
    for format in [KvFormat::Fp8PerHead, KvFormat::Fp8DsMla] {
        let shape = DecodeShape { kv_format: format, ..DecodeShape::latent(4, 16, 1, 4096) };
        let err = plan(&shape, &[4096, 8, 70, 4000], dev, &small, &PlanOptions::default()).unwrap_err().to_string();
        assert!(err.contains("384 threads"), "{err}");
    }
    let why = |r: decode_attn::Result<decode_attn::Plan>| r.unwrap_err().to_string();
    assert!(!with(16, 2, KvFormat::Bf16, TransposeChoice::Auto).unwrap().transposed());
    assert!(why(with(16, 2, KvFormat::Bf16, TransposeChoice::Always)).contains("at most 16 query rows"));
    // Past 16 rows: blocks of 32 rows (two warpgroups), the chunks
    // consecutive blocks.
    let wide = KernelInfo { max_threads_per_block: 256, regs_per_thread: 255 };
    for (format, block_rows, threads) in [(KvFormat::Fp8PerHead, 32, 256), (KvFormat::Fp8DsMla, 32, 256)] {
        assert_eq!((mla_rows_per_block(format, Form::TransposedRows), mla_transposed_threads(format, Form::TransposedRows)), (block_rows, threads));
        for (heads, q_len, transpose) in [(16, 2, TransposeChoice::Auto), (17, 1, TransposeChoice::Auto), (8, 3, TransposeChoice::Auto), (128, 1, TransposeChoice::Always)] {
            let shape = DecodeShape { kv_format: format, ..DecodeShape::latent(4, heads, q_len, 4096) };
            let p = plan(&shape, &[4096, 8, 70, 4000], dev, &wide, &PlanOptions { transpose, ..Default::default() }).unwrap();
            let chunks = (heads * q_len).div_ceil(block_rows);
            assert!(p.transposed() && p.kernel_id().form == Form::TransposedRows, "{format:?} {heads} heads q_len {q_len}");
            assert!(p.kernel_name().contains("_mla_transposed_rows_"), "{}", p.kernel_name());
            assert_eq!((p.rows_per_block(), p.row_chunks(), p.grid(), p.block_threads()), (block_rows, chunks, (p.work_items() * chunks, 1, 1), threads));
            assert_eq!(p.smem_bytes(), mla_smem_bytes(format, Form::TransposedRows));
        }
        // Past 32 rows `Auto` keeps the 64-row kernel (not measured there).
        assert!(!with(64, 1, format, TransposeChoice::Auto).unwrap().transposed(), "{format:?}");
        assert!(!with(16, 2, format, TransposeChoice::Never).unwrap().transposed(), "{format:?}");
    }
    let gqa = plan(&DecodeShape::bf16(1, 16, 1, 128, 1, 256), &[256], dev, &KERNEL, &PlanOptions { transpose: TransposeChoice::Always, ..Default::default() });
    assert!(why(gqa).contains("MLA family alone"));
    assert!(heuristics::mla_transposed(16) && !heuristics::mla_transposed(17));
    for format in [KvFormat::Fp8PerHead, KvFormat::Fp8DsMla] {
        assert!(heuristics::mla_transposed_rows(17, format) && heuristics::mla_transposed_rows(32, format), "{format:?}");
        assert!(!heuristics::mla_transposed_rows(16, format) && !heuristics::mla_transposed_rows(33, format), "{format:?}");
    }
    assert!(!heuristics::mla_transposed_rows(32, KvFormat::Bf16));
}

/// Every MLA work item starts at a stage boundary (a multiple of 64
/// keys): whole sequences, chunks of any requested size (rounded up to
/// stages), balanced pieces, in every latent format. The fp8 ring kernel
/// lands a run of scales 16-byte aligned in its slot only so
/// (`decode::mla_t_ring::issue_stage`), and the latent shape refuses the
/// variants (windows, key ranges) that start items elsewhere.
#[test]
fn mla_work_items_start_at_stage_boundaries() {
    let kernel = KernelInfo { max_threads_per_block: 384, regs_per_thread: 168 };
    let dev = &DeviceInfo::H100_SXM;
    let ragged: Vec<u32> = (0..150u32).map(|b| 700 - (b * 7919 + 13) % 140).collect();
    let long: Vec<u32> = (0..20u32).map(|b| 2000 + (b * 7919) % 30000).collect();
    for format in [KvFormat::Bf16, KvFormat::Fp8PerHead, KvFormat::Fp8DsMla] {
        for heads in [16, 64, 128] {
            for (lens, split) in [(&ragged, SplitPolicy::Auto), (&long, SplitPolicy::Auto), (&long, SplitPolicy::ChunkKeys(100)), (&long, SplitPolicy::ChunkKeys(1000)), (&ragged, SplitPolicy::Never)] {
                let cap = lens.iter().copied().max().unwrap_or(1);
                let shape = DecodeShape { kv_format: format, ..DecodeShape::latent(lens.len() as u32, heads, 1, cap) };
                let p = plan(&shape, lens, dev, &kernel, &opts(split)).unwrap();
                assert!(p.work().iter().all(|w| w.kv_start % 64 == 0), "{format:?} {heads} heads {split:?}: {:?}", p.work().iter().find(|w| w.kv_start % 64 != 0));
            }
        }
        let windowed = DecodeShape { kv_format: format, variant: VariantSpec { window: Some(100), ..VariantSpec::STANDARD }, ..DecodeShape::latent(1, 16, 1, 4096) };
        assert!(plan(&windowed, &[4096], dev, &kernel, &opts(SplitPolicy::Auto)).unwrap_err().to_string().contains("variant"));
    }
}

/// An MLA item's two row chunks (128 heads at q_len 1) launch as one
/// 2-block cluster where the driver launches clusters and the grid is
/// more than a wave (132 SMs, a block each: 67 sequences and more); a
/// grid of one wave or less, one row chunk, four, the transposed kernel
/// or a device without clusters: no cluster. (Split sequences merged
/// globally: a cluster merge's clusters are a row chunk's chunks.)
#[test]
fn mla_row_chunk_pairs_launch_as_clusters_past_a_wave() {
    let kernel = KernelInfo { max_threads_per_block: 256, regs_per_thread: 246 };
    let latent = |batch: u32, heads: u32, q_len: u32| DecodeShape::latent(batch, heads, q_len, 4096);
    let global = PlanOptions { merge: MergeChoice::Global, ..Default::default() };
    let plan_of = |batch: u32, heads: u32, q_len: u32, dev: &DeviceInfo| plan(&latent(batch, heads, q_len), &vec![4096; batch as usize], dev, &kernel, &global).unwrap();
    let h100 = &DeviceInfo::H100_SXM;
    assert_eq!((plan_of(67, 128, 1, h100).launch_cluster(), plan_of(128, 128, 1, h100).launch_cluster()), (2, 2));
    assert_eq!(plan_of(128, 128, 1, h100).grid().0 % 2, 0);
    assert_eq!(decode_attn::plan::plan_capacity(&latent(128, 128, 1), h100, &kernel, &global).unwrap().launch_cluster(), 2);
    assert!(plan_of(66, 128, 1, h100).launch_cluster() <= 1 && plan_of(32, 128, 1, h100).launch_cluster() <= 1 && plan_of(1, 128, 1, h100).launch_cluster() <= 1);
    assert!(plan_of(200, 64, 1, h100).launch_cluster() <= 1 && plan_of(200, 128, 2, h100).launch_cluster() <= 1 && plan_of(200, 16, 1, h100).launch_cluster() <= 1);
    let no_clusters = DeviceInfo { max_cluster: 0, ..*h100 };
    assert!(plan_of(128, 128, 1, &no_clusters).launch_cluster() <= 1);
}

/// Balanced MLA pieces (`heuristics::mla_balanced`, `work::balanced_work`):
/// where a block per sequence and row chunk would leave a wave's tail
/// short (128 heads, B = 128 × 32K: 256 blocks on 132 SMs; a ragged batch
/// of 200), an `Auto` plan of host lengths cuts the batch's keys into
/// runs of an equal share a slot and launches the pieces longest first;
/// every key of every sequence is in exactly one piece, a sequence cut
/// into pieces has a slot a piece and one merge item, and the blocks are
/// the pieces' row chunks. `Never`, a chunk size, a capacity plan, 4K
/// sequences (the pieces' overhead outweighs the tail) and a batch that
/// fills whole waves keep a block per sequence.
#[test]
fn mla_balanced_pieces_cover_each_key_once_longest_first() {
    use decode_attn::plan::plan_capacity;
    let kernel = KernelInfo { max_threads_per_block: 256, regs_per_thread: 255 };
    let dev = &DeviceInfo::H100_SXM;
    let latent = |lens: &[u32], split: SplitPolicy| plan(&DecodeShape::latent(lens.len() as u32, 128, 1, 32768), lens, dev, &kernel, &opts(split)).unwrap();
    let ragged: Vec<u32> = (0..200u32).map(|b| 2000 + (b * 7919) % 30000).collect();
    for lens in [vec![32768u32; 128], vec![32768u32; 100], ragged] {
        let p = latent(&lens, SplitPolicy::Auto);
        assert!(!p.merges().is_empty(), "{} sequences of {}…: balanced", lens.len(), lens[0]);
        assert_eq!(p.grid(), (p.work().len() as u32 * 2, 1, 1));
        let sizes: Vec<u32> = p.work().iter().map(|w| w.kv_end - w.kv_start).collect();
        assert!(sizes.windows(2).all(|s| s[0] >= s[1]), "longest first");
        assert!(sizes.iter().all(|&s| s >= 2 * 64 || lens.contains(&s)), "no piece under two stages but a whole sequence");
        let mut covered: Vec<Vec<(u32, u32)>> = vec![Vec::new(); lens.len()];
        for w in p.work() {
            covered[w.batch as usize].push((w.kv_start, w.kv_end));
        }
        let mut slots = Vec::new();
        for (b, mut pieces) in covered.into_iter().enumerate() {
            pieces.sort();
            assert_eq!(pieces.first().map(|r| r.0), Some(0), "sequence {b} from key 0");
            assert!(pieces.windows(2).all(|w| w[0].1 == w[1].0), "sequence {b}: pieces {pieces:?} meet");
            assert_eq!(pieces.last().map(|r| r.1), Some(lens[b]));
            let merge = p.merges().iter().find(|m| m.batch == b as u32);
            assert_eq!(merge.map_or(1, |m| m.num_slots), pieces.len() as u32, "sequence {b}");
            if let Some(m) = merge {
                slots.extend(m.first_slot..m.first_slot + m.num_slots);
            }
        }
        let mut item_slots: Vec<u32> = p.work().iter().filter(|w| w.partial_slot != decode_attn_abi::DIRECT_OUTPUT).map(|w| w.partial_slot).collect();
        slots.sort();
        item_slots.sort();
        assert_eq!(item_slots, slots, "a slot a piece, each once");
        assert_eq!(p.num_slots() as usize, slots.len());
    }
    // The GPU tests' balanced cases (`tests/gpu/mla.rs`, `balanced_lens`)
    // plan balanced pieces on 132 SMs.
    let balanced_lens = |n: u32, most: u32| (0..n).map(|b| most - (b * 7919 + 13) % (most / 5)).collect::<Vec<u32>>();
    for (heads, q_len, lens) in [(64, 1, balanced_lens(150, 700)), (128, 1, balanced_lens(67, 800)), (64, 2, balanced_lens(70, 1000))] {
        let p = plan(&DecodeShape::latent(lens.len() as u32, heads, q_len, 1000), &lens, dev, &kernel, &PlanOptions::default()).unwrap();
        assert!(!p.merges().is_empty(), "{heads} heads q_len {q_len}: balanced");
    }
    let whole = |p: &Plan| p.merges().is_empty() && p.work().len() == p.grid().0 as usize / 2;
    assert!(whole(&latent(&[32768; 128], SplitPolicy::Never)));
    assert!(whole(&latent(&[4096; 128], SplitPolicy::Auto)));
    assert!(whole(&latent(&[32768; 128], SplitPolicy::ChunkKeys(1 << 20))));
    let capacity = plan_capacity(&DecodeShape::latent(128, 128, 1, 32768), dev, &kernel, &PlanOptions::default()).unwrap();
    assert_eq!((capacity.grid().0, capacity.num_slots()), (256, 0));
    let waves = plan(&DecodeShape::latent(132, 64, 1, 32768), &[32768; 132], dev, &kernel, &PlanOptions::default()).unwrap();
    assert!(waves.merges().is_empty() && waves.work().len() == 132);
}

/// `heuristics::mla_balanced` against the grids it decides between (two
/// overhead stages a block, a cut piece four; 132 slots): 128 sequences
/// of 512 stages as 256 blocks take two rounds (1028 stages), their
/// pieces about a share (993) plus their overhead and the merge's; 4K
/// sequences (64 stages) stay whole, as 128 heads × q_len 2 (four row
/// chunks) at 4K, where the pieces measured 1.5 % slower; 132 sequences
/// of 64 rows fill one round exactly; no slots, no pieces.
#[test]
fn mla_balanced_pieces_where_a_wave_tail_is_short() {
    // (Runs of an equal share, cut as `work::balanced_work` cuts them.)
    let pieces = |stages: u32, n: usize, row_chunks: u32| {
        let runs = heuristics::mla_balanced_runs(row_chunks, 132) as u64;
        let total = stages as u64 * n as u64;
        let mut out = Vec::new();
        let (mut left, mut seq) = (stages as u64, 0usize);
        for r in 0..runs {
            let mut room = ((r + 1) * total).div_ceil(runs) - (r * total).div_ceil(runs);
            while room > 0 && seq < n {
                let take = left.min(room);
                out.push((take as u32, take != stages as u64));
                (left, room) = (left - take, room - take);
                if left == 0 {
                    (left, seq) = (stages as u64, seq + 1);
                }
            }
        }
        out.sort_unstable_by(|a, b| b.0.cmp(&a.0));
        out
    };
    assert_eq!(heuristics::mla_balanced_runs(2, 132), 66);
    for (stages, n, row_chunks, balanced) in [(512, 128, 2, true), (512, 100, 2, true), (64, 100, 2, true), (512, 128, 4, true), (512, 32, 4, true), (64, 128, 2, false), (64, 128, 4, false), (512, 132, 1, false)] {
        let whole = vec![stages; n];
        assert_eq!(heuristics::mla_balanced(&whole, &pieces(stages, n, row_chunks), row_chunks, 132, 2), balanced, "{n} × {stages} stages, {row_chunks} row chunks");
    }
    assert!(!heuristics::mla_balanced(&[512; 4], &[(512, false); 4], 2, 0, 2));
}
