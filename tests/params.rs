//! The kernels' parameters as the host fills them (`decode_attn::params`),
//! checked field by field on the CPU: a wrong stride, pointer or factor is
//! caught here, before any GPU test runs.

use decode_attn::heuristics::MergeMode;
use decode_attn::params::{decode_params, merge_params, LaunchAddrs};
use decode_attn::plan::{plan, plan_capacity, plan_paged};
use decode_attn::{DecodeShape, VariantBuffers, VariantSpec, DeviceInfo, Family, FamilyChoice, HeadPairChoice, KernelInfo, KvFormat, KvLayout, MergeChoice, PageOrder, PlanOptions, SplitPolicy};
use decode_attn_abi::{ITEM_SMEM_BYTES, MERGE_THREADS};

const DEV: DeviceInfo = DeviceInfo::H100_SXM;
const KERNEL: KernelInfo = KernelInfo { max_threads_per_block: 384, regs_per_thread: 168 };
const LOG2E: f32 = std::f32::consts::LOG2_E;

fn addrs() -> LaunchAddrs {
    LaunchAddrs { q: 0x1000, k: 0x10_0000, v: 0x20_0000, o: 0x2000, k_scales: 0, v_scales: 0, workspace: 0x100_0000, step_seq_lens: 0, step_block_table: 0, variant: VariantBuffers::NONE, step_seq_starts: 0 }
}

fn opts(split: SplitPolicy) -> PlanOptions {
    PlanOptions { split, merge: MergeChoice::Global, ..Default::default() }
}

/// Ragged host lengths: the blocks read the uploaded work list, lengths
/// and merge items at the workspace's offsets; buffers and strides (in
/// bytes) as given; the softmax scale in base 2.
#[test]
fn a_plan_of_ragged_lengths_points_into_its_workspace() {
    let shape = DecodeShape::bf16(3, 8, 2, 128, 2, 4096);
    let p = plan(&shape, &[4096, 1000, 17], &DEV, &KERNEL, &opts(SplitPolicy::ChunkKeys(1024))).unwrap();
    let a = addrs();
    let d = decode_params(&p, &a);
    let l = p.layout();
    assert_eq!((d.q, d.k, d.v, d.o), (a.q, a.k, a.v, a.o));
    assert_eq!((d.work, d.seq_lens, d.merge), (a.workspace + l.work as u64, a.workspace + l.seq_lens as u64, a.workspace + l.merges as u64));
    assert_eq!((d.partial_o, d.partial_lse), (a.workspace + l.partial_o as u64, a.workspace + l.partial_lse as u64));
    assert_eq!(d.chunks_per_seq, 0, "no uniform items: the list is read");
    // Token-major: a token's 2 heads of 128 bf16 values.
    assert_eq!((d.k_stride_batch, d.k_stride_token, d.k_stride_head), (4096 * 2 * 128 * 2, 2 * 128 * 2, 128 * 2));
    assert_eq!((d.v_stride_batch, d.v_stride_token, d.v_stride_head), (d.k_stride_batch, d.k_stride_token, d.k_stride_head));
    assert_eq!((d.num_q_heads, d.num_kv_heads, d.group, d.q_len), (8, 2, 4, 2));
    assert_eq!(d.score_scale, (1.0 / 128f32.sqrt()) * LOG2E);
    assert_eq!(d.logit_cap, 0.0);
    assert_eq!((d.rows_per_block, d.warps_m, d.warps_k, d.stages), (p.rows_per_block(), p.warps_m(), p.warps_k(), p.stages()));
    assert_eq!((d.chunk_keys, d.max_seq_len, d.cluster_log2), (1024, 4096, 0));
    assert_eq!(d.item_smem, p.smem_bytes() - ITEM_SMEM_BYTES);
    assert_eq!((d.block_table, d.k_scales, d.v_scales), (0, 0, 0));
    assert_eq!(p.merge_mode(), MergeMode::InAttention);
    assert_eq!(d.merge_counters, a.workspace + l.merge_counters as u64);
    assert!(merge_params(&p, &d).is_none(), "merged in the attention kernel");
}

/// Equal lengths whose items a capacity plan would derive: no length
/// pointer, the length itself and the chunks per sequence in the params.
#[test]
fn a_uniform_plan_carries_its_length() {
    let shape = DecodeShape::bf16(4, 8, 1, 128, 1, 8192);
    let p = plan(&shape, &[6144; 4], &DEV, &KERNEL, &opts(SplitPolicy::ChunkKeys(2048))).unwrap();
    assert_eq!(p.uniform_len(), Some(6144));
    let d = decode_params(&p, &addrs());
    assert_eq!((d.seq_lens, d.max_seq_len, d.chunks_per_seq, d.chunk_keys), (0, 6144, 3, 2048));
}

/// A capacity plan of a paged int8 pool: lengths and block table from the
/// step's device buffers, pages as the batch stride, scales strides of
/// 4-byte scales, the chunks per sequence at capacity.
#[test]
fn a_capacity_step_reads_its_device_lengths_and_table() {
    let shape = DecodeShape {
        kv_format: KvFormat::Int8,
        kv_layout: KvLayout::Paged { page_size: 16, num_pages: 512, order: PageOrder::TokenMajor, page_bytes: None },
        ..DecodeShape::bf16(2, 8, 2, 128, 1, 4096)
    };
    let p = plan_capacity(&shape, &DEV, &KERNEL, &opts(SplitPolicy::ChunkKeys(1024))).unwrap();
    let a = LaunchAddrs { k_scales: 0x30_0000, v_scales: 0x40_0000, step_seq_lens: 0x5000, step_block_table: 0x6000, ..addrs() };
    let d = decode_params(&p, &a);
    assert_eq!((d.seq_lens, d.block_table, d.chunks_per_seq, d.max_seq_len), (0x5000, 0x6000, 4, 4096));
    assert_eq!((d.page_shift, d.num_pages, d.table_stride), (4, 512, 256));
    // A page of 16 tokens × 2 heads × 128 bytes; scales [pages, Hkv, 16] f32.
    assert_eq!((d.k_stride_batch, d.k_stride_token, d.k_stride_head), (16 * 2 * 128, 2 * 128, 128));
    assert_eq!((d.k_scales, d.v_scales), (0x30_0000, 0x40_0000));
    assert_eq!((d.scale_stride_batch, d.scale_stride_token, d.scale_stride_head), (2 * 16 * 4, 4, 16 * 4));
}

/// A plan of host lengths over a pool reads the table uploaded with it.
#[test]
fn a_paged_plan_reads_the_table_in_its_workspace() {
    let shape = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages: 8, order: PageOrder::HeadMajor, page_bytes: None }, ..DecodeShape::bf16(2, 4, 4, 64, 1, 64) };
    let table: Vec<i32> = (0..8).collect();
    let p = plan_paged(&shape, &[64, 20], &table, &DEV, &KERNEL, &opts(SplitPolicy::Never)).unwrap();
    let a = addrs();
    let d = decode_params(&p, &a);
    assert_eq!(d.block_table, a.workspace + p.layout().block_table as u64);
    // Head-major pages: [pages, Hkv, 16, 64] bf16.
    assert_eq!((d.k_stride_batch, d.k_stride_token, d.k_stride_head), (4 * 16 * 64 * 2, 64 * 2, 16 * 64 * 2));
}

/// Soft-cap `c`: the score scale is the exponent of the tanh
/// (2·log2 e · scale / c) and the logit factor c·log2 e.
#[test]
fn a_soft_cap_plan_carries_its_factors() {
    let shape = DecodeShape { variant: VariantSpec { soft_cap: Some(50.0), ..VariantSpec::STANDARD }, scale: Some(0.25), ..DecodeShape::bf16(2, 16, 8, 256, 1, 8192) };
    let p = plan(&shape, &[8192, 4000], &DEV, &KERNEL, &PlanOptions::default()).unwrap();
    let d = decode_params(&p, &addrs());
    assert_eq!(d.score_scale, 2.0 * LOG2E * (0.25 / 50.0));
    assert_eq!(d.logit_cap, 50.0 * LOG2E);
    assert_eq!(p.cluster(), 0, "soft-cap kernels merge through global memory");
}

/// Head pairs: a block's `warps_k` warps split over its two heads, and the
/// kernel is told one head's share.
#[test]
fn a_head_pair_plan_gives_each_head_half_the_warps() {
    let shape = DecodeShape { kv_format: KvFormat::Int8, ..DecodeShape::bf16(16, 8, 8, 128, 1, 2048) };
    let o = PlanOptions { head_pair: HeadPairChoice::Always, family: FamilyChoice::Force(Family::Narrow), ..opts(SplitPolicy::Never) };
    let p = plan(&shape, &[2048; 16], &DEV, &KERNEL, &o).unwrap();
    assert_eq!(p.heads_per_block(), 2);
    assert_eq!(decode_params(&p, &addrs()).warps_k * 2, p.warps_k());
}

/// Merges too large for one block go to the merge kernel: its params
/// name the attention launch's partials, lengths and output, its grid the
/// plan's.
#[test]
fn a_merge_kernel_plan_fills_the_merge_launch() {
    let shape = DecodeShape::bf16(2, 16, 1, 128, 3, 8192);
    let p = plan(&shape, &[8192, 6000], &DEV, &KERNEL, &opts(SplitPolicy::ChunkKeys(64))).unwrap();
    assert_eq!(p.merge_mode(), MergeMode::Kernel);
    let d = decode_params(&p, &addrs());
    assert_eq!(d.merge_counters, 0, "the attention blocks only write partials");
    let (m, grid) = merge_params(&p, &d).unwrap();
    assert_eq!(Some(grid), p.merge_grid());
    assert_eq!((m.partial_o, m.partial_lse, m.o, m.merge, m.seq_lens), (d.partial_o, d.partial_lse, d.o, d.merge, d.seq_lens));
    assert_eq!((m.num_q_heads, m.q_len, m.chunk_keys, m.rows_per_block), (16, 3, p.chunk_keys(), p.merge_rows_per_block()));
    assert!(MERGE_THREADS >= 32);
}

/// Key ranges: a plan of host lengths points its blocks at the starts in
/// its workspace, a capacity plan at the step's device starts (and its
/// merge kernel too); a shape without key ranges at none.
#[test]
fn key_range_starts_come_from_the_workspace_or_the_step() {
    let shape = DecodeShape { variant: VariantSpec { key_ranges: true, ..VariantSpec::STANDARD }, ..DecodeShape::bf16(2, 16, 1, 128, 3, 5000) };
    let p = decode_attn::plan::plan_key_ranges(&shape, &[7, 0], &[5000, 100], None, &DEV, &KERNEL, &opts(SplitPolicy::ChunkKeys(64))).unwrap();
    let d = decode_params(&p, &addrs());
    assert_eq!(d.seq_starts, addrs().workspace + p.layout().seq_starts as u64);
    assert_eq!(d.window_align, 16);
    let c = plan_capacity(&shape, &DEV, &KERNEL, &opts(SplitPolicy::ChunkKeys(64))).unwrap();
    let a = LaunchAddrs { step_seq_lens: 0x5000, step_seq_starts: 0x6000, ..addrs() };
    let d = decode_params(&c, &a);
    assert_eq!(d.seq_starts, 0x6000);
    let (m, _) = merge_params(&c, &d).expect("65 slots of 48 rows: the merge kernel");
    assert_eq!(m.seq_starts, 0x6000);
    let plain = plan(&DecodeShape::bf16(2, 16, 1, 128, 3, 5000), &[5000, 100], &DEV, &KERNEL, &opts(SplitPolicy::Auto)).unwrap();
    assert_eq!(decode_params(&plain, &a).seq_starts, 0);
}
