//! The host side under adversarial input (CPU only). One test per finding of
//! the "no panic, overflow or under-check" audit, then a proptest that drives
//! random and extreme shapes, lengths, strides, scales, devices and buffer
//! addresses through validate → plan → check_buffers and asserts: never a
//! panic; every Ok plan covers each key exactly once; grids within CUDA's
//! limits; workspace regions large enough for what the kernels write; every
//! accepted buffer large enough and not wrapping.
//!
//! CI runs this file in debug and in release (`cargo xtask test`), so
//! overflow that only wraps silently in release is caught by the assertions.

use decode_attn::check::{check_buffers, RunBuffers};
use decode_attn::BufferDesc;
use decode_attn::plan::{plan, MAX_GRID_YZ, MAX_WORK_ITEMS};
use decode_attn::reference::{decode_attention, relative_l2_error};
use decode_attn::shape::MAX_SEQ_LEN;
use decode_attn::{DecodeShape, VariantBuffers, VariantSpec, DeviceInfo, Dtype, ElemType, Error, Family, FamilyChoice, HeadPairChoice, KernelInfo, KvFormat, KvLayout, MergeChoice, Plan, PlanOptions, SpecializeChoice, SplitPolicy, TransposeChoice};
use proptest::prelude::*;

#[path = "common/coverage.rs"]
mod coverage;
use coverage::assert_covers;

const KERNEL: KernelInfo = KernelInfo { max_threads_per_block: 384, regs_per_thread: 168 };
const DEV: DeviceInfo = DeviceInfo::H100_SXM;

fn plan_with(shape: &DecodeShape, lens: &[u32], split: SplitPolicy) -> decode_attn::Result<Plan> {
    plan(shape, lens, &DEV, &KERNEL, &PlanOptions { split, ..Default::default() })
}

/// As [`plan_with`], merging through global memory (never in a cluster).
fn plan_global(shape: &DecodeShape, lens: &[u32], split: SplitPolicy) -> decode_attn::Result<Plan> {
    plan(shape, lens, &DEV, &KERNEL, &PlanOptions { split, merge: MergeChoice::Global, ..Default::default() })
}

fn rejects(r: decode_attn::Result<impl std::fmt::Debug>, param: &str) {
    match r {
        Err(e @ Error::InvalidArgument { .. }) => assert_eq!(e.param(), Some(param), "{e}"),
        other => panic!("expected InvalidArgument naming `{param}`, got {other:?}"),
    }
}

fn bufs_for(shape: &DecodeShape, q_len: usize, kv_len: usize, ws: usize) -> RunBuffers {
    let elem = decode_attn::check::dtype_elem(shape.dtype);
    let kv_elem = decode_attn::check::kv_elem(shape.kv_format);
    let d = |addr, len, elem| BufferDesc { addr, len, elem };
    let side_len = (shape.scale_bytes_required().unwrap_or(0) / 4) as usize;
    let side = |addr| shape.kv_format.is_quantized().then(|| d(addr, side_len, ElemType::F32));
    RunBuffers {
        q: d(1 << 40, q_len, elem),
        k: d(2 << 40, kv_len, kv_elem),
        v: d(3 << 40, kv_len, kv_elem),
        o: d(4 << 40, q_len, elem),
        workspace: d(7 << 40, ws, ElemType::U8),
        k_scales: side(5 << 40),
        v_scales: side(6 << 40),
        seq_lens: None,
        block_table: None,
        seq_starts: None,
        variant: VariantBuffers {
            sinks: shape.variant.sinks.then(|| d(8 << 40, shape.num_q_heads as usize, ElemType::F32)),
            alibi_slopes: shape.variant.alibi.then(|| d(9 << 40, shape.num_q_heads as usize, ElemType::F32)),
            tree_masks: shape.variant.tree.then(|| d(10 << 40, (shape.batch * shape.q_len) as usize, ElemType::U8)),
            tree_positions: shape.variant.tree.then(|| d(11 << 40, (shape.batch * shape.q_len) as usize, ElemType::U32)),
        },
    }
}

/// Finding 1: `q_elems()` wrapped in u64 and `check_buffers` trusted it: 2^31
/// query heads over 2^15 kv heads with zero strides planned Ok, then a
/// 16-element O passed the check.
#[test]
fn f1_query_size_overflow_is_rejected_and_never_trusted() {
    let mut s = DecodeShape::bf16(1 << 20, 1 << 31, 1 << 15, 256, 8, 8);
    s.kv_layout = KvLayout::Strided { batch: 0, token: 0, head: 0 };
    assert!(s.q_bytes().is_none_or(|b| b > isize::MAX as u64));
    assert_eq!(DecodeShape::bf16(u32::MAX, u32::MAX, 1, 256, 8, 8).q_elems_checked(), None);
    rejects(s.validate(), "num_q_heads");
    rejects(plan_with(&s, &vec![8; 1 << 20], SplitPolicy::Never), "num_q_heads");
    // Even for a shape that fits, a short O is caught in bytes.
    let s = DecodeShape::bf16(2, 8, 2, 128, 3, 64);
    let p = plan_with(&s, &[64, 64], SplitPolicy::Never).unwrap();
    let mut b = bufs_for(&s, s.q_elems() as usize, s.kv_elems_required().unwrap() as usize, p.workspace_bytes());
    b.o.len = 16;
    rejects(check_buffers(&p, &b), "o");
}

/// Finding 2: `kv_strides()`, `kv_elems_required()` (zero fields),
/// `Plan::bytes_moved()` and the merge grid overflowed or panicked.
#[test]
fn f2_size_helpers_are_total() {
    let mut s = DecodeShape::bf16(0, 0, 0, 0, 0, 0);
    assert_eq!(s.kv_elems_required(), None);
    let _ = s.kv_strides();
    s = DecodeShape::bf16(u32::MAX, u32::MAX, u32::MAX, u32::MAX, u32::MAX, u32::MAX);
    assert_eq!(s.kv_strides_checked(), None);
    assert_eq!(s.kv_elems_required(), None);
    assert_eq!(s.q_elems(), u64::MAX);
    // The largest plannable problem: bytes_moved saturates instead of wrapping.
    let s = DecodeShape::bf16(4, 4, 4, 256, 1, MAX_SEQ_LEN);
    let mut hnd = s.clone();
    hnd.kv_layout = KvLayout::Strided { batch: 0, token: 256, head: 0 };
    let p = plan_with(&hnd, &[MAX_SEQ_LEN; 4], SplitPolicy::Auto).unwrap();
    assert!(p.bytes_moved() >= 4 * MAX_SEQ_LEN as u64 * 4 * 512 * 2);
    assert_eq!(p.merge_counters(), 4 * 4 * p.row_chunks());
    assert_launchable(&p);
}

/// Finding 3: the merge grid's y exceeded 65535 (32768 query heads × q_len 8,
/// split), so the merge launch failed after the attention kernel had run.
/// Such a split now merges in the attention kernel (a counter per kv head);
/// with rows per block and slots enough for the merge kernel, its grid
/// stays within CUDA's limits (the kernel strides over y).
#[test]
fn f3_merge_grids_stay_within_cuda_limits() {
    let mut s = DecodeShape::bf16(1, 32768, 32768, 64, 8, 4096);
    s.kv_layout = KvLayout::Strided { batch: 0, token: 64, head: 0 };
    let p = plan_global(&s, &[4096], SplitPolicy::ChunkKeys(1024)).unwrap();
    assert!(!p.merges().is_empty());
    assert_launchable(&p);
    assert_eq!(p.merge_counters(), 32768 * p.row_chunks());
    let mut s = DecodeShape::bf16(1, 65536 * 4, 4096, 64, 8, 1 << 20);
    s.kv_layout = KvLayout::Strided { batch: 0, token: 64, head: 0 };
    let p = plan_with(&s, &[1 << 20], SplitPolicy::ChunkKeys(4096)).unwrap();
    assert_eq!(p.merge_mode(), decode_attn::MergeMode::Kernel);
    assert_eq!(p.merge_grid().unwrap().1, MAX_GRID_YZ);
    assert_launchable(&p);
}

/// Finding 4: lengths within ~100k of u32::MAX overflowed `start + chunk`,
/// so a work item ended before it started and the tail keys were lost.
#[test]
fn f4_lengths_near_the_limit_are_covered_or_rejected() {
    let mut s = DecodeShape::bf16(1, 8, 1, 128, 1, u32::MAX);
    rejects(s.validate(), "max_seq_len");
    s.max_seq_len = MAX_SEQ_LEN;
    s.kv_layout = KvLayout::Strided { batch: 0, token: 128, head: 0 };
    let p = plan_with(&s, &[MAX_SEQ_LEN], SplitPolicy::ChunkKeys(MAX_SEQ_LEN - 100_000)).unwrap();
    assert_covers(&p);
    rejects(plan_with(&s.clone(), &[u32::MAX - 5], SplitPolicy::Auto), "seq_lens[0]");
}

/// Finding 5: the work list was built before its size was checked, so 16
/// sequences of u32::MAX keys with ChunkKeys(1) aborted in the allocator.
#[test]
fn f5_huge_work_lists_are_an_error_not_an_abort() {
    let mut s = DecodeShape::bf16(16, 8, 1, 64, 1, MAX_SEQ_LEN);
    s.kv_layout = KvLayout::Strided { batch: 0, token: 64, head: 0 };
    rejects(plan_with(&s, &[MAX_SEQ_LEN; 16], SplitPolicy::ChunkKeys(1)), "split.chunk_keys");
    let ok = plan_with(&s, &[MAX_SEQ_LEN; 16], SplitPolicy::Auto).unwrap();
    assert!(ok.work().len() as u64 <= MAX_WORK_ITEMS);
}

/// The attention grid's x is work items × kv heads (a work item's heads
/// consecutive): a split that would pass CUDA's grid-x limit is an error
/// naming the split, never a failed launch.
#[test]
fn work_items_times_kv_heads_must_fit_grid_x() {
    // 65536 chunks of one stage × 65535 kv heads > 2^31 - 1 blocks.
    let mut s = DecodeShape::bf16(1, 65535, 65535, 64, 1, 1 << 23);
    s.kv_layout = KvLayout::Strided { batch: 0, token: 64, head: 0 };
    let r = plan_with(&s, &[1 << 23], SplitPolicy::ChunkKeys(128));
    assert!(matches!(&r, Err(e) if e.param() == Some("split.chunk_keys")), "{:?}", r.as_ref().err());
    let ok = plan_with(&s, &[1 << 23], SplitPolicy::Never).unwrap();
    assert_launchable(&ok);
}

/// Finding 6: a finite scale whose product with log2(e) is infinite was
/// accepted.
#[test]
fn f6_scale_must_stay_finite_in_base_2() {
    let mut s = DecodeShape::bf16(1, 1, 1, 64, 1, 16);
    s.scale = Some(f32::MAX);
    rejects(s.validate(), "scale");
    s.scale = Some(f32::MAX / 1.2); // finite, but × log2(e) = 1.44 is not
    rejects(s.validate(), "scale");
    s.scale = Some(1e30);
    assert!(s.validate().is_ok());
}

/// Finding 7: address + bytes could wrap past 2^64, and K/V extents were
/// checked in elements rather than bytes.
#[test]
fn f7_buffer_extents_are_checked_in_bytes_without_wrapping() {
    let s = DecodeShape::bf16(2, 8, 2, 128, 3, 64);
    let p = plan_with(&s, &[64, 64], SplitPolicy::Never).unwrap();
    let kv = s.kv_elems_required().unwrap() as usize;
    let mut b = bufs_for(&s, s.q_elems() as usize, kv, p.workspace_bytes());
    b.k.addr = u64::MAX - 15; // 16-byte aligned, but the extent wraps
    rejects(check_buffers(&p, &b), "k");
    let mut b = bufs_for(&s, s.q_elems() as usize, kv, p.workspace_bytes());
    b.o.addr = u64::MAX & !15;
    rejects(check_buffers(&p, &b), "o");
    // A u8 buffer of the right element count is half the bytes: rejected by type and size.
    let mut b = bufs_for(&s, s.q_elems() as usize, kv, p.workspace_bytes());
    b.v.elem = ElemType::U8;
    rejects(check_buffers(&p, &b), "v");
    assert_eq!(s.kv_bytes_required(), Some(2 * kv as u64));
}

/// Finding 8: `group × q_len` overflowed u32.
#[test]
fn f8_rows_per_kv_head_cannot_overflow() {
    let s = DecodeShape::bf16(1, 1 << 30, 1, 64, 8, 16);
    rejects(s.validate(), "num_q_heads");
    assert_eq!(s.rows_per_kv_head(), None);
}

/// Finding 9: odd `DeviceInfo` / `KernelInfo` values divided by zero.
#[test]
fn f9_device_and_kernel_figures_are_validated() {
    let s = DecodeShape::bf16(1, 8, 1, 128, 1, 1024);
    let zero_sms = DeviceInfo { sm_count: 0, ..DEV };
    rejects(plan(&s, &[1024], &zero_sms, &KERNEL, &PlanOptions::default()), "device.sm_count");
    let no_smem = DeviceInfo { max_smem_per_sm: 0, ..DEV };
    rejects(plan(&s, &[1024], &no_smem, &KERNEL, &PlanOptions::default()), "device.max_smem_per_sm");
    let bad_kernel = KernelInfo { max_threads_per_block: 0, regs_per_thread: 0 };
    rejects(plan(&s, &[1024], &DEV, &bad_kernel, &PlanOptions::default()), "kernel.max_threads_per_block");
    let bad_regs = KernelInfo { max_threads_per_block: 1024, regs_per_thread: u32::MAX };
    rejects(plan(&s, &[1024], &DEV, &bad_regs, &PlanOptions::default()), "kernel.regs_per_thread");
}

/// Finding 10: the public reference and `relative_l2_error` panicked or
/// misled on unvalidated input.
#[test]
fn f10_reference_and_comparison_reject_bad_input() {
    let s = DecodeShape::bf16(1, 2, 1, 64, 4, 16);
    let q = vec![1.0; s.q_elems() as usize];
    let kv = vec![0.5; s.kv_elems_required().unwrap() as usize];
    rejects(decode_attention(&s, &[2], &q, &kv, &kv), "seq_lens[0]"); // below q_len
    rejects(decode_attention(&s, &[16], &q[1..], &kv, &kv), "q");
    rejects(decode_attention(&s, &[16], &q, &kv[1..], &kv), "k");
    rejects(relative_l2_error(&[1.0], &[1.0, 2.0]), "out");
    rejects(relative_l2_error(&[1.0, 2.0], &[f64::NAN, f64::NAN]), "reference[0]");
    rejects(relative_l2_error(&[1.0], &[f64::INFINITY]), "reference[0]");
}

/// What an Ok plan promises the kernels: launchable grids and a workspace
/// with room for every region they read or write.
fn assert_launchable(p: &Plan) {
    let s = p.shape();
    let (x, y, z) = p.grid();
    assert!(x >= 1 && (x as u64) < (1 << 31) && (1..=MAX_GRID_YZ).contains(&y) && (1..=MAX_GRID_YZ).contains(&z));
    assert!(p.block_threads() <= 1024 && p.smem_bytes() <= DEV.max_smem_per_block);
    if let Some((x, y, z)) = p.merge_grid() {
        assert!(x == s.batch && (1..=MAX_GRID_YZ).contains(&y) && z == 1);
    }
    let l = p.layout();
    let rows = p.num_slots() as u128 * s.q_len as u128 * s.num_q_heads as u128;
    assert!(l.work as u128 + p.work().len() as u128 * 16 <= l.seq_lens as u128);
    assert!(l.seq_lens as u128 + p.seq_lens().len() as u128 * 4 <= l.merges as u128);
    // A merge item per sequence, then a counter per (sequence, kv head, row chunk).
    assert!(l.merges as u128 + s.batch as u128 * 16 <= l.merge_counters as u128);
    assert_eq!(p.merge_counters() as u128, s.batch as u128 * s.num_kv_heads as u128 * p.row_chunks() as u128);
    assert!(l.merge_counters as u128 + p.merge_counters() as u128 * 4 <= l.metadata_bytes as u128);
    assert!(l.metadata_bytes <= l.partial_o);
    assert!(l.partial_o as u128 + rows * s.head_dim as u128 * 4 <= l.partial_lse as u128);
    assert!(l.partial_lse as u128 + rows * 4 <= l.total_bytes as u128);
    assert_eq!(p.workspace_bytes(), l.total_bytes);
}

fn extreme_u32() -> impl Strategy<Value = u32> {
    prop_oneof![0u32..20, 20u32..70_000, Just(u32::MAX), Just(u32::MAX - 1), Just(1 << 31), Just(MAX_SEQ_LEN), any::<u32>()]
}

fn extreme_u64() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), (0u64..1 << 20).prop_map(|x| x * 8), Just(u64::MAX), Just(u64::MAX & !7), any::<u64>()]
}

fn layout() -> impl Strategy<Value = KvLayout> {
    prop_oneof![
        4 => Just(KvLayout::Nhd),
        4 => Just(KvLayout::Hnd),
        1 => (extreme_u64(), extreme_u64(), extreme_u64()).prop_map(|(batch, token, head)| KvLayout::Strided { batch, token, head }),
    ]
}

fn scale() -> impl Strategy<Value = Option<f32>> {
    prop_oneof![
        12 => Just(None),
        2 => (0.01f32..10.0).prop_map(Some),
        1 => Just(Some(f32::MAX)),
        1 => Just(Some(f32::MIN_POSITIVE)),
        1 => Just(Some(f32::INFINITY)),
        1 => Just(Some(0.0)),
        1 => any::<f32>().prop_map(Some),
    ]
}

fn shape() -> impl Strategy<Value = DecodeShape> {
    let dims = (prop_oneof![4 => 1u32..8, 4 => 8u32..200, 1 => extreme_u32()], prop_oneof![9 => 1u32..70, 1 => extreme_u32()], prop_oneof![9 => 1u32..20, 1 => extreme_u32()]);
    let d = prop_oneof![3 => Just(64u32), 3 => Just(128), 3 => Just(256), 1 => extreme_u32()];
    let cap = prop_oneof![3 => 1u32..300, 3 => 300u32..300_000, 1 => 300_000..=MAX_SEQ_LEN, 1 => extreme_u32()];
    let rest = (d, prop_oneof![9 => 1u32..=8, 1 => extreme_u32()], cap);
    let quantized = prop_oneof![7 => Just(None), 3 => prop::sample::select(vec![KvFormat::Int8, KvFormat::Int4G32, KvFormat::Int4G64, KvFormat::Int4G128]).prop_map(Some)];
    // Soft-caps: mostly none, some ordinary, some invalid or extreme.
    let soft_cap = prop_oneof![24 => Just(None), 4 => (0.5f32..100.0).prop_map(Some), 1 => prop::sample::select(vec![0.0, -1.0, f32::NAN, f32::INFINITY, f32::MAX, f32::MIN_POSITIVE, 1e-30]).prop_map(Some)];
    // Windows: mostly none, some ordinary, some invalid or extreme; sinks,
    // ALiBi and draft trees now and then (ALiBi with a soft-cap or a tree
    // is an error, as is a tree with a window below q_len − 1).
    let window = prop_oneof![6 => Just(None), 3 => (1u32..200_000).prop_map(Some), 1 => prop::sample::select(vec![0, 1, u32::MAX, u32::MAX - 1]).prop_map(Some)];
    let extras = (window, prop::bool::weighted(0.2), prop::bool::weighted(0.15), prop::bool::weighted(0.15));
    let kinds = (any::<bool>(), prop::bool::weighted(0.1), layout(), (scale(), soft_cap, extras), quantized);
    (dims, rest, kinds).prop_map(|((batch, group, hkv), (d, q_len, cap), (f16, mismatch, kv_layout, (scale, soft_cap, (window, sinks, alibi, tree)), quantized))| {
        let dtype = if f16 { Dtype::F16 } else { Dtype::Bf16 };
        let same = quantized.unwrap_or(if f16 { KvFormat::F16 } else { KvFormat::Bf16 });
        let other = if f16 { KvFormat::Bf16 } else { KvFormat::F16 };
        DecodeShape { batch, num_q_heads: group.saturating_mul(hkv), num_kv_heads: hkv, head_dim: d, q_len, max_seq_len: cap, dtype, kv_format: if mismatch { other } else { same }, kv_layout, scale, variant: VariantSpec { key_ranges: false, soft_cap, window, sinks, alibi, tree } }
    })
}

/// One length per sequence (sometimes one too many), mostly clamped into
/// the valid range so that most draws reach the planner's split logic.
fn lens(batch: u32, q_len: u32, cap: u32) -> impl Strategy<Value = Vec<u32>> {
    let n = (batch as usize).min(200);
    let extra = prop_oneof![8 => Just(0usize), 1 => Just(1usize)];
    let each = prop_oneof![0u32..20, Just(cap), Just(cap.saturating_sub(1)), extreme_u32(), 0..=cap];
    (prop::collection::vec(each, n), extra, prop::bool::weighted(0.8)).prop_map(move |(mut v, extra, clamp)| {
        if clamp {
            v.iter_mut().for_each(|l| *l = (*l).clamp(q_len.min(cap), cap));
        }
        v.extend(std::iter::repeat_n(1, extra));
        v
    })
}

fn device() -> impl Strategy<Value = (DeviceInfo, KernelInfo)> {
    prop_oneof![
        4 => Just((DEV, KERNEL)),
        1 => (extreme_u32(), extreme_u32(), extreme_u32(), extreme_u32(), extreme_u32(), extreme_u32(), extreme_u32()).prop_map(
            |(sm, smem_b, smem_sm, thr, regs, mtpb, rpt)| (
                DeviceInfo { sm_count: sm, max_smem_per_block: smem_b, max_smem_per_sm: smem_sm, max_threads_per_sm: thr, regs_per_sm: regs, l2_bytes: 0, max_cluster: 8, ..DEV },
                KernelInfo { max_threads_per_block: mtpb, regs_per_thread: rpt },
            )
        ),
    ]
}

/// Plan options: every split policy, every family (or Auto), and
/// `warps_k` overrides that are often invalid.
fn options() -> impl Strategy<Value = PlanOptions> {
    let family = prop_oneof![3 => Just(FamilyChoice::Auto), 3 => Just(FamilyChoice::Force(Family::Wide)), 3 => Just(FamilyChoice::Force(Family::Narrow)), 1 => Just(FamilyChoice::Force(Family::Wgmma))];
    let warps_k = prop_oneof![8 => Just(None), 1 => (0u32..10).prop_map(Some), 1 => extreme_u32().prop_map(Some)];
    let merge = prop_oneof![Just(MergeChoice::Auto), Just(MergeChoice::Global)];
    let specialize = prop_oneof![8 => Just(SpecializeChoice::Auto), 1 => Just(SpecializeChoice::Never), 1 => Just(SpecializeChoice::Always)];
    (split(), family, warps_k, merge, specialize, head_pair()).prop_map(|(split, family, warps_k, merge, specialize, head_pair)| PlanOptions { split, family, warps_k, merge, specialize, head_pair, transpose: TransposeChoice::Auto })
}

/// The MLA kernel form: `Always` is an `Err` for every plan it cannot
/// serve (drawn apart from `options()`, whose draws' counts
/// `most_random_draws_reach_the_planner` bounds).
fn transpose() -> impl Strategy<Value = TransposeChoice> {
    prop_oneof![3 => Just(TransposeChoice::Auto), 1 => Just(TransposeChoice::Never), 1 => Just(TransposeChoice::Always)]
}

fn head_pair() -> impl Strategy<Value = HeadPairChoice> {
    prop_oneof![3 => Just(HeadPairChoice::Auto), 1 => Just(HeadPairChoice::Never), 1 => Just(HeadPairChoice::Always)]
}

fn split() -> impl Strategy<Value = SplitPolicy> {
    prop_oneof![
        3 => Just(SplitPolicy::Auto),
        1 => Just(SplitPolicy::Never),
        3 => (1u32..5000).prop_map(SplitPolicy::ChunkKeys),
        1 => extreme_u32().prop_map(SplitPolicy::ChunkKeys),
    ]
}

fn inputs() -> impl Strategy<Value = (DecodeShape, Vec<u32>)> {
    shape().prop_flat_map(|s| {
        let l = lens(s.batch, s.q_len, s.max_seq_len);
        (Just(s), l)
    })
}

/// The generator is only useful if many draws get through validation to the
/// planner's split logic and the buffer checks.
#[test]
fn most_random_draws_reach_the_planner() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = (inputs(), options());
    let (mut ok, mut split_plans, mut narrow) = (0, 0, 0);
    for _ in 0..1000 {
        let ((shape, lens), opts) = strategy.new_tree(&mut runner).unwrap().current();
        match plan(&shape, &lens, &DEV, &KERNEL, &opts) {
            Ok(p) => {
                ok += 1;
                split_plans += !p.merges().is_empty() as u32;
                narrow += (p.family() == Family::Narrow) as u32;
            }
            Err(e) => if std::env::var_os("WHY").is_some() { eprintln!("{:?}", e.param()) },
        }
    }
    // (A tenth of the draws ask for the warp-specialised kernel, which most
    // shapes have not: those are `Err`s by design. The floors are what the
    // draws reached when windows, sinks and ALiBi joined them — 142 Ok,
    // 51 split, 36 narrow — less a margin.)
    assert!(ok >= 120 && split_plans >= 35 && narrow >= 28 && ok - narrow >= 50, "{ok} Ok plans, {split_plans} with splits, {narrow} narrow, of 1000 draws");
}

/// (Run on a thread with a 64 MiB stack: the value trees of these nested
/// strategies outgrow a test thread's 2 MiB in debug builds.)
#[test]
fn plan_and_check_never_panic_and_keep_their_promises() {
    std::thread::Builder::new().stack_size(64 << 20).spawn(plan_and_check_property).unwrap().join().unwrap();
}

fn plan_and_check_property() {
    let config = ProptestConfig { cases: 2000, ..ProptestConfig::default() };
    let strategy = (
        shape().prop_flat_map(|s| {
            let l = lens(s.batch, s.q_len, s.max_seq_len);
            (Just(s), l)
        }),
        device(),
        (options(), transpose()).prop_map(|(opts, transpose)| PlanOptions { transpose, ..opts }),
        (extreme_u64(), extreme_u64(), extreme_u64(), extreme_u64()),
        (0usize..1 << 20, 0usize..1 << 20, any::<usize>(), 0usize..1 << 30),
    );
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&strategy, |((shape, lens), (dev, kernel), opts, addrs, sizes)| {
        let _ = shape.validate();
        let _ = (shape.q_elems(), shape.kv_strides(), shape.kv_elems_required(), shape.kv_bytes_required());
        let Ok(p) = plan(&shape, &lens, &dev, &kernel, &opts) else { return Ok(()) };
        assert_covers(&p);
        assert_launchable(&p);
        let _ = (p.bytes_moved(), p.max_splits(), p.metadata().len());

        // Correctly sized buffers at the drawn addresses are accepted only if
        // each range is aligned, non-null, non-wrapping and disjoint from O.
        let q_elems = shape.q_elems() as usize;
        let kv_elems = shape.kv_elems_required().unwrap() as usize;
        for (qn, kvn) in [(q_elems, kv_elems), (sizes.0, sizes.1), (q_elems, sizes.2)] {
            let mut b = bufs_for(&shape, qn, kvn, sizes.3);
            b.q.addr = addrs.0;
            b.k.addr = addrs.1;
            b.v.addr = addrs.2;
            b.o.addr = addrs.3;
            if check_buffers(&p, &b).is_ok() {
                for (buf, need) in [(&b.q, shape.q_elems()), (&b.o, shape.q_elems()), (&b.k, kv_elems as u64), (&b.v, kv_elems as u64)] {
                    let elem = buf.elem.size_bytes() as u128;
                    prop_assert!(buf.addr % 16 == 0 && buf.addr != 0);
                    prop_assert!(buf.len as u128 * elem >= need as u128 * elem);
                    prop_assert!(buf.addr as u128 + buf.len as u128 * elem <= u64::MAX as u128);
                }
                prop_assert!(b.workspace.len >= p.workspace_bytes());
                // The written ranges (O, the workspace's used bytes) overlap nothing.
                let range = |x: &BufferDesc, bytes: u128| (x.addr as u128, x.addr as u128 + bytes);
                let o = range(&b.o, shape.q_elems() as u128 * 2);
                let ws = range(&b.workspace, p.workspace_bytes() as u128);
                for other in [&b.q, &b.k, &b.v] {
                    let r = range(other, other.len as u128 * other.elem.size_bytes() as u128);
                    prop_assert!(o.1 <= r.0 || r.1 <= o.0);
                    prop_assert!(ws.1 <= r.0 || r.1 <= ws.0 || ws.0 == ws.1);
                }
                prop_assert!(ws.1 <= u64::MAX as u128);
                for side in [b.k_scales, b.v_scales].into_iter().flatten() {
                    prop_assert!(side.len as u64 * 4 >= shape.scale_bytes_required().unwrap());
                }
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Paged caches: every bad page geometry or block table is an error naming
/// it, and a good table plans like the contiguous cache of the same lengths.
mod paged {
    use super::*;
    use decode_attn::plan::plan_paged;
    use decode_attn::PageOrder;

    fn paged(page_size: u32, num_pages: u32) -> DecodeShape {
        DecodeShape { kv_layout: KvLayout::Paged { page_size, num_pages, order: PageOrder::TokenMajor, page_bytes: None }, ..DecodeShape::bf16(2, 8, 2, 128, 1, 100) }
    }

    fn plan_p(shape: &DecodeShape, lens: &[u32], table: &[i32]) -> decode_attn::Result<Plan> {
        plan_paged(shape, lens, table, &DEV, &KERNEL, &PlanOptions::default())
    }

    #[test]
    fn page_sizes_are_powers_of_two_up_to_256() {
        for ps in [1u32, 2, 16, 64, 256] {
            paged(ps, 10).validate().unwrap();
        }
        for ps in [0u32, 3, 48, 512] {
            rejects(paged(ps, 10).validate(), "kv_layout.page_size");
        }
        rejects(paged(16, 0).validate(), "kv_layout.num_pages");
    }

    #[test]
    fn the_block_table_is_required_and_checked() {
        let s = paged(16, 20); // 100 tokens: 7 pages per sequence
        assert_eq!(s.pages_per_seq(), 7);
        let good: Vec<i32> = (0..14).collect();
        let p = plan_p(&s, &[100, 17], &good).unwrap();
        assert_eq!(p.block_table(), &good[..]);
        assert_covers(&p);
        // No table: plan() refuses a paged shape.
        rejects(plan_with(&s, &[100, 17], SplitPolicy::Auto), "block_table");
        // Too short for the shape.
        rejects(plan_p(&s, &[100, 17], &good[..13]), "block_table");
        // A page id outside the pool, or negative, in a page a length uses.
        let mut bad = good.clone();
        bad[3] = 20;
        rejects(plan_p(&s, &[100, 17], &bad), "block_table[0][3]");
        bad[3] = -1;
        rejects(plan_p(&s, &[100, 17], &bad), "block_table[0][3]");
        // Entries past a sequence's pages are not read, so not checked.
        let mut spare = good.clone();
        spare[7 + 5] = 999; // sequence 1 holds 17 tokens: pages 0 and 1
        plan_p(&s, &[100, 17], &spare).unwrap();
        // A contiguous shape is not planned with a table.
        rejects(plan_paged(&DecodeShape::bf16(2, 8, 2, 128, 1, 100), &[100, 17], &good, &DEV, &KERNEL, &PlanOptions::default()), "kv_layout");
    }

    #[test]
    fn a_pool_is_sized_by_pages_not_by_sequences() {
        let s = paged(16, 20);
        assert_eq!(s.kv_elems_required(), Some(20 * 16 * 2 * 128));
        let q = DecodeShape { kv_format: KvFormat::Int8, ..s };
        // Scales [num_pages, Hkv, page_size] f32 scales.
        assert_eq!(q.scale_bytes_required(), Some(20 * 2 * 16 * 4));
        let h = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages: 20, order: PageOrder::HeadMajor, page_bytes: None }, ..q };
        assert_eq!(h.kv_strides(), decode_attn::KvStrides { batch: 16 * 2 * 128, token: 128, head: 16 * 128 });
    }

    fn with_page_bytes(s: &DecodeShape, page_bytes: Option<u64>) -> DecodeShape {
        let KvLayout::Paged { page_size, num_pages, order, .. } = s.kv_layout else { panic!("paged") };
        DecodeShape { kv_layout: KvLayout::Paged { page_size, num_pages, order, page_bytes }, ..s.clone() }
    }

    #[test]
    fn a_packed_page_holds_k_v_and_their_side_data_in_that_order() {
        // int8, 16 tokens × 2 kv heads: 4 KiB of rows per tensor, 128 B of scales.
        let dense = DecodeShape { kv_format: KvFormat::Int8, ..paged(16, 20) };
        let pp = dense.packed_page().unwrap();
        assert_eq!(pp, decode_attn::PackedPage { page_bytes: 8448, v: 4096, k_scales: 8192, v_scales: 8320 });
        let packed = with_page_bytes(&dense, Some(pp.page_bytes));
        packed.validate().unwrap();
        // Pages are page_bytes apart for values (bytes) and scales (4-byte entries) alike.
        assert_eq!(packed.kv_strides(), decode_attn::KvStrides { batch: 8448, token: 2 * 128, head: 128 });
        assert_eq!(packed.scale_strides(), decode_attn::KvStrides { batch: 8448 / 4, token: 1, head: 16 });
        // A view needs every page but the last whole, and the last one's part.
        assert_eq!(packed.kv_bytes_required(), Some(19 * 8448 + 4096));
        assert_eq!(packed.scale_bytes_required(), Some(19 * 8448 + 2 * 16 * 4));
        // bf16: FlashInfer's [num_pages, 2, page_size, Hkv, D].
        let bf = paged(16, 20).packed_page().unwrap();
        assert_eq!((bf.page_bytes, bf.v, bf.k_scales), (2 * 8192, 8192, 16384));
        assert_eq!(with_page_bytes(&paged(16, 20), Some(bf.page_bytes)).kv_strides().batch, 8192, "in bf16 elements");
        // One int8 token per page: 2 × 128 B rows and 2 × 4 B scales, each
        // part 16-byte aligned.
        let one = DecodeShape { num_q_heads: 4, num_kv_heads: 1, kv_layout: KvLayout::Paged { page_size: 1, num_pages: 5, order: PageOrder::TokenMajor, page_bytes: None }, ..dense.clone() };
        assert_eq!(one.packed_page().unwrap(), decode_attn::PackedPage { page_bytes: 288, v: 128, k_scales: 256, v_scales: 272 });
    }

    #[test]
    fn page_bytes_must_hold_a_page_and_keep_rows_aligned() {
        let int8 = DecodeShape { kv_format: KvFormat::Int8, ..paged(16, 20) };
        for bad in [0u64, 8448 + 8, 4096 - 16, 1 << 63] {
            rejects(with_page_bytes(&int8, Some(bad)).validate(), "kv_layout.page_bytes");
        }
        // Any 16-byte multiple that holds a page of rows (and of scales) will do.
        with_page_bytes(&int8, Some(4096)).validate().unwrap();
        with_page_bytes(&int8, Some(1 << 20)).validate().unwrap();
        // int4-g32 at D = 256: 32-byte side entries keep pages 32-byte aligned.
        let int4 = DecodeShape { kv_format: KvFormat::Int4G32, dtype: decode_attn::Dtype::F16, head_dim: 256, ..paged(16, 20) };
        let pp = int4.packed_page().unwrap();
        assert_eq!(pp.page_bytes % 32, 0);
        with_page_bytes(&int4, Some(pp.page_bytes)).validate().unwrap();
        rejects(with_page_bytes(&int4, Some(pp.page_bytes + 16)).validate(), "kv_layout.page_bytes");
        // A pool so large its extent overflows is rejected, not wrapped.
        let huge = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages: i32::MAX as u32, order: PageOrder::TokenMajor, page_bytes: Some(1 << 40) }, ..int8 };
        rejects(huge.validate(), "kv_layout.page_bytes");
    }

    #[test]
    fn views_into_one_packed_pool_are_checked_like_separate_buffers() {
        let dense = DecodeShape { kv_format: KvFormat::Int8, ..paged(16, 20) };
        let pp = dense.packed_page().unwrap();
        let s = with_page_bytes(&dense, Some(pp.page_bytes));
        let table: Vec<i32> = (0..14).collect();
        let p = plan_p(&s, &[100, 17], &table).unwrap();
        let pool_bytes = 20 * pp.page_bytes;
        let base = 2u64 << 40;
        // Each view runs from its offset to the pool's end.
        let views = |pool_bytes: u64| {
            let mut b = bufs_for(&s, 2 * 8 * 128, 0, p.workspace_bytes());
            let d = |off: u64, unit: u64, elem| BufferDesc { addr: base + off, len: ((pool_bytes - off) / unit) as usize, elem };
            b.k = d(0, 1, ElemType::U8);
            b.v = d(pp.v, 1, ElemType::U8);
            b.k_scales = Some(d(pp.k_scales, 4, ElemType::F32));
            b.v_scales = Some(d(pp.v_scales, 4, ElemType::F32));
            b
        };
        check_buffers(&p, &views(pool_bytes)).unwrap();
        // A pool missing the last page's V scales: the error names them.
        rejects(check_buffers(&p, &views(pool_bytes - 16)), "v_scales");
    }

    #[test]
    fn packed_views_are_made_by_the_library_at_the_page_offsets() {
        use decode_attn::{KvCache, KvMut, KvTensor, TensorMut, TensorRef};
        let dense = DecodeShape { kv_format: KvFormat::Int8, ..paged(16, 20) };
        let pp = dense.packed_page().unwrap();
        let s = with_page_bytes(&dense, Some(pp.page_bytes));
        let (base, bytes) = (1u64 << 40, (20 * pp.page_bytes) as usize);
        // SAFETY: never dereferenced (no launch): views only.
        let pool = unsafe { TensorRef::from_raw(base, bytes, ElemType::U8) };
        let c = KvCache::packed(&s, pool).unwrap();
        let at = |t: &TensorRef| (t.addr() - base, t.len(), t.elem());
        assert_eq!(at(&c.k), (0, bytes, ElemType::U8));
        assert_eq!(at(&c.v), (pp.v, bytes - pp.v as usize, ElemType::U8));
        assert_eq!(at(c.k_scales.as_ref().unwrap()), (pp.k_scales, (bytes - pp.k_scales as usize) / 4, ElemType::F32));
        assert_eq!(at(c.v_scales.as_ref().unwrap()), (pp.v_scales, (bytes - pp.v_scales as usize) / 4, ElemType::F32));
        // SAFETY: as above.
        let whole = || unsafe { TensorMut::from_raw(base, bytes, ElemType::U8) };
        let w = KvMut::packed(&s, whole(), KvTensor::V).unwrap();
        assert_eq!((w.data.addr() - base, w.scales.as_ref().map(|t| t.addr() - base)), (pp.v, Some(pp.v_scales)));
        // Only the packed layout: dense pools and other strides are rejected.
        rejects(KvCache::packed(&dense, pool), "kv_layout.page_bytes");
        rejects(KvCache::packed(&with_page_bytes(&dense, Some(1 << 20)), pool), "kv_layout.page_bytes");
        rejects(KvMut::packed(&DecodeShape::bf16(2, 8, 2, 128, 1, 100), whole(), KvTensor::K), "kv_layout");
        // A pool that ends before a part starts.
        // SAFETY: as above.
        let short = unsafe { TensorRef::from_raw(base, pp.k_scales as usize, ElemType::U8) };
        rejects(KvCache::packed(&s, short), "pool");
    }
}

/// Capacity plans (CUDA-graph decode steps): launches fixed by the shape,
/// work derived on the device from lengths that may be anything.
mod capacity {
    use super::*;
    use decode_attn::plan::plan_capacity;
    use decode_attn::PlanMode;
    use decode_attn_abi::{capacity_merge_item, capacity_work_item, WorkItem, DIRECT_OUTPUT};

    fn cap_plan(shape: &DecodeShape, split: SplitPolicy) -> Plan {
        plan_capacity(shape, &DEV, &KERNEL, &PlanOptions { split, ..Default::default() }).unwrap()
    }

    /// The work items a capacity plan's blocks derive for one length (the
    /// function the kernel calls).
    fn items(len: u32, q_len: u32, chunk: u32, chunks: u32, b: u32) -> Vec<WorkItem> {
        (b * chunks..(b + 1) * chunks).filter_map(|x| capacity_work_item(x, len, q_len, chunk, chunks)).collect()
    }

    #[test]
    fn a_capacity_plan_has_a_fixed_grid_and_no_host_work_list() {
        let s = DecodeShape::bf16(2, 8, 2, 128, 1, 32768);
        let p = cap_plan(&s, SplitPolicy::Auto);
        let PlanMode::Capacity { chunks_per_seq } = p.mode() else { panic!("capacity mode") };
        assert!(chunks_per_seq > 1, "two long sequences on 132 SMs split");
        assert!(p.work().is_empty() && p.merges().is_empty());
        // Blocks: sequences × chunks, each chunk's two kv heads consecutive.
        assert_eq!(p.grid(), (2 * chunks_per_seq * 2, 1, p.row_chunks()));
        assert_eq!(p.merge_counters(), 2 * 2 * p.row_chunks());
        assert_eq!(p.num_slots(), 2 * chunks_per_seq);
        assert!(p.workspace_bytes() >= p.layout().partial_lse + 4 * (p.num_slots() as usize) * 8);
        // Its block shape and chunk are those planned for every sequence at capacity.
        let at_cap = plan_with(&s, &[32768, 32768], SplitPolicy::Auto).unwrap();
        assert_eq!((p.chunk_keys(), p.block_threads(), p.smem_bytes()), (at_cap.chunk_keys(), at_cap.block_threads(), at_cap.smem_bytes()));
        // Never: one chunk per sequence, no partial slots.
        let n = cap_plan(&s, SplitPolicy::Never);
        assert_eq!(n.mode(), PlanMode::Capacity { chunks_per_seq: 1 });
        assert_eq!(n.num_slots(), 0);
    }

    #[test]
    fn the_workspace_holds_every_counter_and_slot_a_capacity_step_uses() {
        // A counter per (sequence, kv head, row chunk) and a partial slot per
        // block, split or not (an unsplit plan once sized a region 0 and the
        // step wrote past the workspace).
        for split in [SplitPolicy::Never, SplitPolicy::Auto, SplitPolicy::ChunkKeys(64)] {
            for (batch, cap) in [(17u32, 3u32), (2, 32768), (300, 1000)] {
                let s = DecodeShape::bf16(batch, 8, 2, 128, 1, cap);
                let p = cap_plan(&s, split);
                let PlanMode::Capacity { chunks_per_seq } = p.mode() else { panic!("capacity mode") };
                let l = p.layout();
                assert_eq!(p.merge_counters(), batch * 2 * p.row_chunks());
                assert!(l.merge_counters + 4 * p.merge_counters() as usize <= l.metadata_bytes, "{split:?} b{batch} cap{cap}: merge counters");
                assert!(l.metadata_bytes <= l.partial_o && p.workspace_bytes() >= l.metadata_bytes);
                let slots = if chunks_per_seq > 1 { batch * chunks_per_seq } else { 0 };
                assert_eq!(p.num_slots(), slots, "{split:?} b{batch} cap{cap}: a slot per block of a split sequence");
                assert!(l.partial_lse + 4 * (slots as usize) * 8 <= p.workspace_bytes());
            }
        }
    }

    #[test]
    fn capacity_merge_items_name_the_slots_of_the_chunks_up_to_the_length() {
        let (chunk, chunks, q_len) = (256u32, 8u32, 2u32);
        for len in [0u32, 1, 2, 255, 256, 257, 2048] {
            let m = capacity_merge_item(3, len, q_len, chunk, chunks);
            let its = items(len, q_len, chunk, chunks, 3);
            assert_eq!(m.num_slots as usize, its.len(), "len {len}");
            if its.len() > 1 {
                assert!(its.iter().all(|i| (m.first_slot..m.first_slot + m.num_slots).contains(&i.partial_slot)));
            }
        }
    }

    #[test]
    fn device_lengths_map_to_chunks_that_cover_each_sequence_once() {
        let (chunk, chunks, q_len) = (256u32, 8u32, 2u32);
        for len in [2u32, 3, 255, 256, 257, 1000, 2047, 2048] {
            let its = items(len, q_len, chunk, chunks, 1);
            // Consecutive, from 0 to the length.
            assert_eq!(its.first().unwrap().kv_start, 0);
            assert_eq!(its.last().unwrap().kv_end, len);
            assert!(its.windows(2).all(|w| w[0].kv_end == w[1].kv_start));
            assert!(its.iter().all(|i| i.batch == 1 && i.kv_end - i.kv_start <= chunk));
            // One chunk: written directly; several: a slot per chunk (= its block).
            if len <= chunk {
                assert_eq!(its[0].partial_slot, DIRECT_OUTPUT);
            } else {
                assert!(its.iter().enumerate().all(|(c, i)| i.partial_slot == chunks + c as u32));
            }
        }
        // Shorter than q_len (0: an empty batch slot): no work at all.
        assert!(items(0, q_len, chunk, chunks, 0).is_empty());
        assert!(items(1, q_len, chunk, chunks, 0).is_empty());
    }

    #[test]
    fn run_step_inputs_are_checked_against_the_shape() {
        use decode_attn::{ElemType, StepInputs, TensorRef};
        let view = |addr: u64, len: usize, e: ElemType| unsafe { TensorRef::from_raw(addr, len, e) };
        let contiguous = DecodeShape::bf16(4, 8, 2, 128, 1, 1000);
        let paged = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages: 300, order: decode_attn::PageOrder::TokenMajor, page_bytes: None }, ..contiguous.clone() };
        let lens = view(0x10000, 4, ElemType::U32);
        let table = view(0x20000, 4 * 63, ElemType::I32);
        StepInputs::lengths(lens).check_for(&contiguous).unwrap();
        StepInputs::paged(lens, table).check_for(&paged).unwrap();
        rejects(StepInputs::lengths(view(0x10000, 3, ElemType::U32)).check_for(&contiguous), "seq_lens");
        rejects(StepInputs::lengths(view(0x10000, 4, ElemType::I32)).check_for(&contiguous), "seq_lens");
        rejects(StepInputs::lengths(lens).check_for(&paged), "block_table");
        rejects(StepInputs::paged(lens, view(0x20000, 4 * 62, ElemType::I32)).check_for(&paged), "block_table");
        rejects(StepInputs::paged(lens, view(0x20000, 4 * 63, ElemType::U32)).check_for(&paged), "block_table");
        rejects(StepInputs::paged(lens, table).check_for(&contiguous), "block_table");
    }
}

/// The second audit (an adversarial CPU fuzz of the public API, about 110k
/// cases): each finding as the input that found it, now an `Err` naming the
/// parameter, never a panic, a wrapped size or an absurd allocation.
mod audit2 {
    use super::*;
    use decode_attn::plan::{check_block_table, plan_capacity};
    use decode_attn::{PageOrder, StepInputs, TensorRef};

    fn unsupported(r: decode_attn::Result<impl std::fmt::Debug>) {
        assert!(matches!(r, Err(Error::Unsupported(_))), "expected Unsupported, got {r:?}");
    }

    /// `StepInputs::check_for` multiplied batch × pages × 4 unchecked: a
    /// paged shape of 2^31 + 46341 sequences in 1-token pages and a
    /// capacity of 2^31 − 46340 tokens accepted a 41 708-entry table where
    /// 4.6e18 entries are needed (and panicked in debug builds).
    #[test]
    fn g1_a_block_table_size_never_wraps() {
        let shape = DecodeShape {
            kv_layout: KvLayout::Paged { page_size: 1, num_pages: 1, order: PageOrder::TokenMajor, page_bytes: None },
            ..DecodeShape::bf16((1 << 31) + 46341, 1, 1, 64, 1, (1 << 31) - 46340)
        };
        // SAFETY: views the checks only look at (never dereferenced).
        let (lens, table) = unsafe { (TensorRef::from_raw(1 << 20, (1 << 31) + 46341, ElemType::U32), TensorRef::from_raw(1 << 40, 41_708, ElemType::I32)) };
        rejects(StepInputs::paged(lens, table).check_for(&shape), "block_table");
    }

    /// The f64 reference and the CPU quantizer read a paged shape's rows by
    /// its strides, so sequence b came from page b (or a row past the
    /// buffer panicked): they take no block table, and say so.
    #[test]
    fn g2_the_cpu_reference_and_quantizer_reject_pools() {
        let paged = |format| DecodeShape {
            kv_format: format,
            kv_layout: KvLayout::Paged { page_size: 16, num_pages: 2, order: PageOrder::TokenMajor, page_bytes: None },
            ..DecodeShape::bf16(2, 1, 1, 64, 1, 32)
        };
        let s = paged(KvFormat::Bf16);
        let n = s.kv_elems_required().unwrap() as usize;
        let q = vec![1f32; s.q_elems() as usize];
        rejects(decode_attention(&s, &[32, 32], &q, &vec![1f32; n], &vec![1f32; n]), "kv_layout");
        let s8 = paged(KvFormat::Int8);
        let plain = vec![1f32; s8.kv_elems_required().unwrap() as usize];
        rejects(decode_attn::quant::quantize_cache(&s8, &[32, 32], &plain), "kv_layout");
        rejects(decode_attn::quant::dequantize_cache(&s8, &[32, 32], &vec![0u8; plain.len()], &vec![0u32; 64]), "kv_layout");
        rejects(decode_attn::quant::quantize_cache_int8(&s8, &[32, 32], &plain), "kv_layout");
    }

    /// `plan_capacity` of u32::MAX sequences tried a 17 GB allocation (the
    /// lengths at capacity) before it counted the work items, and of
    /// 2^24 + 1 sequences named `seq_lens`, which it does not take.
    #[test]
    fn g3_capacity_plans_count_sequences_first_and_name_the_batch() {
        rejects(plan_capacity(&DecodeShape::bf16(u32::MAX, 1, 1, 64, 1, 1), &DEV, &KERNEL, &PlanOptions::default()), "batch");
        rejects(plan_capacity(&DecodeShape::bf16((1 << 24) + 1, 1, 1, 64, 1, 1), &DEV, &KERNEL, &PlanOptions::default()), "batch");
    }

    /// `DeviceInfo::max_cluster` was not validated: with 64, a forced
    /// cluster merge of chunks of 205 keys over two 8192-key sequences made
    /// clusters of 32 (512 with u32::MAX), past the kernels' 8.
    #[test]
    fn g4_the_device_cluster_size_is_validated() {
        let opts = PlanOptions { merge: MergeChoice::Cluster, split: SplitPolicy::ChunkKeys(205), ..Default::default() };
        for max_cluster in [3, 16, 64, u32::MAX] {
            let dev = DeviceInfo { max_cluster, ..DEV };
            rejects(plan(&DecodeShape::bf16(2, 8, 1, 128, 1, 8192), &[8192, 8192], &dev, &KERNEL, &opts), "device.max_cluster");
        }
        // On the real device's 8: 32 chunks a sequence cannot merge in a
        // cluster, which the forced choice reports rather than merging
        // otherwise.
        match plan(&DecodeShape::bf16(2, 8, 1, 128, 1, 8192), &[8192, 8192], &DEV, &KERNEL, &opts) {
            Err(Error::Unsupported(m)) => assert!(m.contains("32 chunks"), "{m}"),
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }

    /// A kernel limit of 64 threads a block validated, and a shape of 64
    /// query rows per kv head still planned 128-thread blocks (the launch
    /// would have failed later): the planner now says `Unsupported`.
    #[test]
    fn g5_plans_fit_the_kernels_thread_limit() {
        let small = KernelInfo { max_threads_per_block: 64, regs_per_thread: 128 };
        assert!(small.validate().is_ok());
        for d in [64, 128] {
            let s = DecodeShape::bf16(1, 64, 1, d, 1, 256);
            unsupported(plan(&s, &[256], &DEV, &small, &PlanOptions::default()));
            unsupported(plan(&s, &[256], &DEV, &small, &PlanOptions { family: FamilyChoice::Force(Family::Wide), ..Default::default() }));
        }
    }

    /// `check_block_table` divided by a zero page size and sliced past the
    /// table for a sequence longer than its row of pages.
    #[test]
    fn g6_block_table_checks_are_total() {
        rejects(check_block_table(&[0], &[1], 1, 0, 1), "page_size");
        rejects(check_block_table(&[0], &[1], 1, 3, 1), "page_size");
        rejects(check_block_table(&[0], &[100], 1, 16, 10), "seq_lens[0]");
        rejects(check_block_table(&[0; 4], &[5, 64], 2, 16, 10), "seq_lens[1]");
        assert!(check_block_table(&[0, 1, 2, 3], &[5, 32], 2, 16, 10).is_ok());
    }

    /// `Plan::waves` divided by zero for a device of no SMs;
    /// `auto_chunk_keys` overflowed (debug) for 1.3e19 blocks per length.
    #[test]
    fn g7_plan_arithmetic_does_not_panic() {
        let p = plan_with(&DecodeShape::bf16(2, 8, 1, 128, 1, 1024), &[1024, 1024], SplitPolicy::Auto).unwrap();
        assert!(p.waves(&DeviceInfo { sm_count: 0, ..DEV }) >= 1);
        let chunk = decode_attn::heuristics::auto_chunk_keys(&[43233, 26527], 13_000_000_000_000_000_000, 32, 0, u32::MAX);
        assert_eq!(chunk, u32::MAX, "more blocks than a wave: no split");
    }

    /// The size helpers were not total: an int4 shape of head_dim u32::MAX
    /// overflowed `scale_bytes_required`, `scale_strides` and `packed_page`
    /// (debug panics, wrong values in release).
    #[test]
    fn g8_size_helpers_saturate_or_say_none() {
        for format in [KvFormat::Int4G32, KvFormat::Int4G128, KvFormat::Int8] {
            let mut s = DecodeShape { kv_format: format, ..DecodeShape::bf16(3, 4, 2, u32::MAX, 1, 64) };
            assert!(s.scale_bytes_required().is_none_or(|b| b >= 3 * 2 * 64));
            let _ = s.scale_strides();
            s.kv_layout = KvLayout::Paged { page_size: 256, num_pages: u32::MAX, order: PageOrder::HeadMajor, page_bytes: None };
            let _ = (s.scale_strides(), s.scale_bytes_required(), s.kv_bytes_required());
            assert!(s.packed_page().is_none_or(|p| p.page_bytes >= p.v_scales));
            assert!(s.validate().is_err());
        }
        assert_eq!(KvFormat::Int4G32.scale_bytes(u32::MAX), (4 * u32::MAX as u64 / 32) as u32);
        assert_eq!(KvFormat::Bf16.row_bytes(u32::MAX), u32::MAX);
    }

    /// `run_raw`'s workspace was checked neither for overlap with Q, K, V
    /// or O nor for wrapping past 2^64, and `run_step`'s device lengths
    /// and block table not against O: aliased raw views corrupted data
    /// silently.
    #[test]
    fn g9_the_workspace_and_step_buffers_are_disjoint_from_what_is_written() {
        let shape = DecodeShape::bf16(2, 8, 2, 128, 1, 1024);
        let p = plan_with(&shape, &[1024, 1000], SplitPolicy::ChunkKeys(256)).unwrap();
        assert!(p.workspace_bytes() > 0);
        let (q, kv) = (shape.q_elems() as usize, shape.kv_elems_required().unwrap() as usize);
        let ok = bufs_for(&shape, q, kv, p.workspace_bytes());
        assert!(check_buffers(&p, &ok).is_ok());
        for (what, mutate) in [
            ("workspace over q", Box::new(|b: &mut RunBuffers| b.workspace.addr = b.q.addr) as Box<dyn Fn(&mut RunBuffers)>),
            ("workspace over k", Box::new(|b: &mut RunBuffers| b.workspace.addr = b.k.addr + 256)),
            ("workspace over v", Box::new(|b: &mut RunBuffers| b.workspace.addr = b.v.addr)),
            ("workspace over o", Box::new(|b: &mut RunBuffers| b.workspace.addr = b.o.addr)),
            ("workspace wrapping", Box::new(|b: &mut RunBuffers| b.workspace.addr = u64::MAX - 255)),
        ] {
            let mut b = ok;
            mutate(&mut b);
            rejects(check_buffers(&p, &b), "workspace");
            let _ = what;
        }
        let mut b = ok;
        b.seq_lens = Some(BufferDesc { addr: b.o.addr, len: 2, elem: ElemType::U32 });
        rejects(check_buffers(&p, &b), "o");
        let mut b = ok;
        b.block_table = Some(BufferDesc { addr: b.workspace.addr + 256, len: 8, elem: ElemType::I32 });
        rejects(check_buffers(&p, &b), "workspace");
    }
}

/// fp8 per tensor: the scales are one f32 each, device scalars; a missing,
/// mistyped, misaligned or empty scale is an error naming it, and a packed
/// pool holds values only.
mod fp8_per_tensor {
    use super::*;
    use decode_attn::{KvCache, KvMut, KvTensor, TensorMut, TensorRef};

    fn shape() -> DecodeShape {
        DecodeShape { kv_format: KvFormat::Fp8, ..DecodeShape::bf16(2, 8, 2, 128, 1, 100) }
    }

    #[test]
    fn its_scales_are_one_f32_each_and_checked() {
        let s = shape();
        assert_eq!(s.scale_bytes_required(), Some(4));
        let p = plan_with(&s, &[100, 17], SplitPolicy::Auto).unwrap();
        let kv = s.kv_elems_required().unwrap() as usize;
        let ok = bufs_for(&s, s.q_elems() as usize, kv, p.workspace_bytes());
        assert_eq!(ok.k_scales.unwrap().len, 1);
        check_buffers(&p, &ok).unwrap();
        // A scale need only be 4-byte aligned (a tensor's element).
        let mut b = ok;
        b.k_scales = Some(BufferDesc { addr: (5 << 40) + 4, ..b.k_scales.unwrap() });
        check_buffers(&p, &b).unwrap();
        let mut b = ok;
        b.v_scales = None;
        rejects(check_buffers(&p, &b), "v_scales");
        let mut b = ok;
        b.k_scales = Some(BufferDesc { addr: (5 << 40) + 2, ..b.k_scales.unwrap() });
        rejects(check_buffers(&p, &b), "k_scales");
        let mut b = ok;
        b.k_scales = Some(BufferDesc { len: 0, ..b.k_scales.unwrap() });
        rejects(check_buffers(&p, &b), "k_scales");
        let mut b = ok;
        b.v_scales = Some(BufferDesc { elem: ElemType::U32, ..b.v_scales.unwrap() });
        rejects(check_buffers(&p, &b), "v_scales");
    }

    #[test]
    fn a_packed_pool_holds_values_and_takes_its_scales_apart() {
        let dense = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages: 20, order: decode_attn::PageOrder::TokenMajor, page_bytes: None }, ..shape() };
        let pp = dense.packed_page().unwrap();
        // Two pages of rows, nothing else.
        assert_eq!(pp.page_bytes, 2 * 16 * 2 * 128);
        let s = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages: 20, order: decode_attn::PageOrder::TokenMajor, page_bytes: Some(pp.page_bytes) }, ..dense };
        let (base, bytes) = (1u64 << 40, (20 * pp.page_bytes) as usize);
        // SAFETY: never dereferenced (no launch): views only.
        let pool = unsafe { TensorRef::from_raw(base, bytes, ElemType::U8) };
        let c = KvCache::packed(&s, pool).unwrap();
        assert!(c.k_scales.is_none() && c.v_scales.is_none());
        // SAFETY: as above.
        let (ks, vs) = unsafe { (TensorRef::from_raw(3 << 40, 1, ElemType::F32), TensorRef::from_raw(4 << 40, 1, ElemType::F32)) };
        let c = c.with_fp8_scales(ks, vs);
        assert_eq!(c.k_scales.map(|t| t.addr()), Some(3 << 40));
        // SAFETY: as above.
        let whole = unsafe { TensorMut::from_raw(base, bytes, ElemType::U8) };
        let w = KvMut::packed(&s, whole, KvTensor::V).unwrap();
        assert!(w.scales.is_none());
        // SAFETY: as above.
        let w = w.with_fp8_scale(unsafe { TensorMut::from_raw(4 << 40, 1, ElemType::F32) });
        assert_eq!(w.scales.map(|t| t.addr()), Some(4 << 40));
    }

    #[test]
    fn the_cpu_quantizer_takes_a_positive_finite_scale() {
        let s = shape();
        let plain = vec![0.5f32; s.kv_elems_required().unwrap() as usize];
        for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            rejects(decode_attn::quant::quantize_cache_fp8(&s, &[100, 17], &plain, bad), "scale");
        }
        let int8 = DecodeShape { kv_format: KvFormat::Int8, ..s.clone() };
        rejects(decode_attn::quant::quantize_cache_fp8(&int8, &[100, 17], &plain, 1.0), "kv_format");
    }
}

/// A capacity step's first keys: required (`[batch]` u32) exactly when the
/// shape has key ranges, and never overlapping what the kernels write.
#[test]
fn a_capacity_steps_starts_are_required_exactly_for_shapes_with_key_ranges() {
    use decode_attn::{StepInputs, TensorRef};
    // SAFETY: descriptors only; nothing is dereferenced on the CPU.
    let (lens, starts, short) = unsafe { (TensorRef::from_raw(0x1000, 4, ElemType::U32), TensorRef::from_raw(0x2000, 4, ElemType::U32), TensorRef::from_raw(0x2000, 3, ElemType::U32)) };
    let plain = DecodeShape::bf16(4, 8, 2, 128, 1, 100);
    let ranged = DecodeShape { variant: VariantSpec { key_ranges: true, ..plain.variant }, ..plain.clone() };
    StepInputs::lengths(lens).with_seq_starts(starts).check_starts_for(&ranged).unwrap();
    StepInputs::lengths(lens).check_starts_for(&plain).unwrap();
    rejects(StepInputs::lengths(lens).check_starts_for(&ranged), "seq_starts");
    rejects(StepInputs::lengths(lens).with_seq_starts(short).check_starts_for(&ranged), "seq_starts");
    rejects(StepInputs::lengths(lens).with_seq_starts(starts).check_starts_for(&plain), "seq_starts");
    // Starts where O is written.
    let p = decode_attn::plan::plan_capacity(&ranged, &DEV, &KERNEL, &PlanOptions::default()).unwrap();
    let mut b = bufs_for(&ranged, ranged.q_elems() as usize, ranged.kv_elems_required().unwrap() as usize, p.workspace_bytes());
    b.seq_lens = Some(BufferDesc { addr: 0x7000_0000, len: 4, elem: ElemType::U32 });
    b.seq_starts = Some(BufferDesc { addr: b.o.addr, len: 4, elem: ElemType::U32 });
    rejects(decode_attn::check::check_buffers(&p, &b), "o");
}

/// A draft tree (`VariantSpec::tree`): not with ALiBi, with a window of at
/// least q_len − 1 keys; on the masked (or soft-cap) kernels; its masks
/// (`[batch, q_len]` u8) and positions (`[batch, q_len]` u32, 4-byte
/// aligned) required exactly when the shape has one, and never where the
/// kernels write.
#[test]
fn a_draft_tree_is_checked_with_its_shape_and_required_exactly_when_it_has_one() {
    use decode_attn::Variant;
    let plain = DecodeShape::bf16(4, 8, 2, 128, 5, 100);
    let tree = DecodeShape { variant: VariantSpec { tree: true, ..plain.variant }, ..plain.clone() };
    tree.validate().unwrap();
    assert_eq!(tree.kernel_variant(), Variant::MaskedTree);
    assert_eq!(DecodeShape { variant: VariantSpec { soft_cap: Some(30.0), ..tree.variant }, ..tree.clone() }.kernel_variant(), Variant::SoftCapTree);
    rejects(DecodeShape { variant: VariantSpec { alibi: true, ..tree.variant }, ..tree.clone() }.validate(), "tree");
    rejects(DecodeShape { variant: VariantSpec { window: Some(3), ..tree.variant }, ..tree.clone() }.validate(), "window");
    DecodeShape { variant: VariantSpec { window: Some(4), sinks: true, ..tree.variant }, ..tree.clone() }.validate().unwrap();
    DecodeShape { variant: VariantSpec { window: Some(3), ..plain.variant }, ..plain.clone() }.validate().unwrap();
    let p = decode_attn::plan::plan(&tree, &[100, 5, 17, 60], &DEV, &KERNEL, &PlanOptions::default()).unwrap();
    let b = bufs_for(&tree, tree.q_elems() as usize, tree.kv_elems_required().unwrap() as usize, p.workspace_bytes());
    decode_attn::check::check_buffers(&p, &b).unwrap();
    let (masks, positions) = (b.variant.tree_masks.unwrap(), b.variant.tree_positions.unwrap());
    let with = |m: Option<BufferDesc>, t: Option<BufferDesc>| RunBuffers { variant: VariantBuffers { tree_masks: m, tree_positions: t, ..b.variant }, ..b };
    rejects(decode_attn::check::check_buffers(&p, &with(None, None)), "tree_masks");
    rejects(decode_attn::check::check_buffers(&p, &with(Some(masks), None)), "tree_positions");
    rejects(decode_attn::check::check_buffers(&p, &with(Some(BufferDesc { len: 19, ..masks }), Some(positions))), "tree_masks");
    rejects(decode_attn::check::check_buffers(&p, &with(Some(masks), Some(BufferDesc { elem: ElemType::U8, len: 80, ..positions }))), "tree_positions");
    rejects(decode_attn::check::check_buffers(&p, &with(Some(masks), Some(BufferDesc { addr: positions.addr + 2, ..positions }))), "tree_positions");
    rejects(decode_attn::check::check_buffers(&p, &with(Some(BufferDesc { addr: 0, ..masks }), Some(positions))), "tree_masks");
    rejects(decode_attn::check::check_buffers(&p, &with(Some(BufferDesc { addr: b.o.addr, ..masks }), Some(positions))), "o");
    // A tree given to a plan without one.
    let p = decode_attn::plan::plan(&plain, &[100, 5, 17, 60], &DEV, &KERNEL, &PlanOptions::default()).unwrap();
    let b = bufs_for(&plain, plain.q_elems() as usize, plain.kv_elems_required().unwrap() as usize, p.workspace_bytes());
    rejects(decode_attn::check::check_buffers(&p, &RunBuffers { variant: VariantBuffers { tree_masks: Some(masks), ..b.variant }, ..b }), "tree_masks");
    rejects(decode_attn::check::check_buffers(&p, &RunBuffers { variant: VariantBuffers { tree_positions: Some(positions), ..b.variant }, ..b }), "tree_positions");
}

/// A shape's variant is one spec of orthogonal parts, and the kernels that
/// serve it are the fastest compiled variant covering them: a window or
/// key ranges alone take the masked kernels, a cap keeps its window and
/// sinks in the soft-cap kernels, a tree moves either to its twin, and ALiBi
/// with a tree has none (an error naming `tree`).
#[test]
fn a_variant_spec_picks_the_fastest_kernels_that_cover_its_parts() {
    use decode_attn::Variant;
    let spec = |f: fn(&mut VariantSpec)| {
        let mut v = VariantSpec::default();
        f(&mut v);
        v
    };
    assert_eq!(VariantSpec::default(), VariantSpec::STANDARD);
    assert_eq!(VariantSpec::STANDARD.kernel_variant().unwrap(), Variant::Standard);
    assert_eq!(spec(|v| v.window = Some(8)).kernel_variant().unwrap(), Variant::Masked);
    assert_eq!(spec(|v| v.key_ranges = true).kernel_variant().unwrap(), Variant::Masked);
    assert_eq!(spec(|v| v.sinks = true).kernel_variant().unwrap(), Variant::Masked);
    assert_eq!(spec(|v| v.soft_cap = Some(30.0)).kernel_variant().unwrap(), Variant::SoftCap);
    assert_eq!(spec(|v| { v.soft_cap = Some(30.0); v.sinks = true; v.window = Some(4) }).kernel_variant().unwrap(), Variant::SoftCap);
    assert_eq!(spec(|v| { v.alibi = true; v.window = Some(4) }).kernel_variant().unwrap(), Variant::Alibi);
    assert_eq!(spec(|v| v.tree = true).kernel_variant().unwrap(), Variant::MaskedTree);
    assert_eq!(spec(|v| { v.tree = true; v.soft_cap = Some(30.0) }).kernel_variant().unwrap(), Variant::SoftCapTree);
    rejects(spec(|v| { v.tree = true; v.alibi = true }).kernel_variant(), "tree");
    rejects(spec(|v| { v.soft_cap = Some(30.0); v.alibi = true }).kernel_variant(), "alibi");
    rejects(spec(|v| { v.soft_cap = Some(30.0); v.alibi = true }).validate(1, 0.125), "alibi");
    rejects(spec(|v| v.window = Some(0)).validate(1, 0.125), "window");
    rejects(spec(|v| v.soft_cap = Some(f32::NAN)).validate(1, 0.125), "soft_cap");
    // Every compiled variant serves its own parts, and exactly those parts
    // name it.
    for v in Variant::ALL {
        assert_eq!(Variant::serving(v.parts()), Some(v));
        assert_eq!(Variant::of(v.parts()), v);
    }
}

/// `append_rows`: 1..=capacity rows, strides of whole 16-byte rows, and
/// the rows' view sized from its strides without wrapping.
#[test]
fn appended_rows_are_checked_before_any_launch() {
    use decode_attn::check::append_rows_elems;
    use decode_attn::KvStrides;
    let s = DecodeShape::bf16(2, 8, 2, 128, 1, 100);
    // transformers' [B, Hkv, rows, D] states of 5 rows.
    let hnd = KvStrides { batch: 2 * 5 * 128, token: 128, head: 5 * 128 };
    assert_eq!(append_rows_elems(&s, hnd, 5).unwrap(), 2 * 2 * 5 * 128);
    rejects(append_rows_elems(&s, hnd, 0), "rows");
    rejects(append_rows_elems(&s, hnd, 101), "rows");
    rejects(append_rows_elems(&s, KvStrides { token: 132, ..hnd }, 5), "strides.token");
    // A view that would wrap past 2^64 needs more than any buffer holds.
    assert_eq!(append_rows_elems(&s, KvStrides { batch: u64::MAX - 7, ..hnd }, 5).unwrap(), u64::MAX);
}

/// The second outside audit: inputs that passed every check and then broke
/// the library (strides, caps, tiny rows, the reference), and helpers that
/// panicked in debug builds.
mod audit3 {
    use super::*;
    use decode_attn::quant::{dequantize_cache, e4m3_to_f32, quantize_cache, quantize_cache_fp8, quantize_fp8_row, quantize_fp8_row_scaled, quantize_int4_row, quantize_int8_row, dequantize_int4_row};
    use decode_attn::reference::{decode_attention_with, HeadInputs};
    use decode_attn::shape::{MAX_SOFT_CAP, MAX_STRIDE_BYTES};

    /// A stride the shape multiplies by zero (batch 1, one kv head,
    /// max_seq_len 1) is still bounded: past 2^59 bytes an `Err` naming
    /// it, where `decode_params` and `cache_params` overflowed a multiply.
    #[test]
    fn h3_every_stride_is_bounded_even_one_multiplied_by_zero() {
        let strided = |batch, token, head| DecodeShape { kv_layout: KvLayout::Strided { batch, token, head }, ..DecodeShape::bf16(1, 8, 1, 128, 1, 64) };
        rejects(strided(1 << 60, 1024, 128).validate(), "kv_layout.batch");
        rejects(DecodeShape { max_seq_len: 1, ..strided(1024, 3 << 62, 128) }.validate(), "kv_layout.token");
        rejects(strided(1024, 128, u64::MAX - 7).validate(), "kv_layout.head");
        for format in KvFormat::ALL.into_iter().filter(|f| !f.latent_only()) {
            let most = MAX_STRIDE_BYTES * 8 / format.bits() as u64;
            let s = DecodeShape { kv_format: format, dtype: format.required_dtype().unwrap_or(Dtype::Bf16), kv_layout: KvLayout::Strided { batch: most, token: 1024, head: 128 }, ..DecodeShape::bf16(1, 8, 1, 128, 1, 4) };
            s.validate().unwrap_or_else(|e| panic!("{}: {e}", format.name()));
            rejects(DecodeShape { kv_layout: KvLayout::Strided { batch: most + 128, token: 1024, head: 128 }, ..s }.validate(), "kv_layout.batch");
            // The largest accepted stride plans, and its parameters are
            // formed without overflow (debug builds panic on one).
            let p = plan_with(&s, &[4], SplitPolicy::Never).unwrap();
            let params = decode_attn::params::decode_params(&p, &decode_attn::params::LaunchAddrs::default());
            assert_eq!(params.k_stride_batch, most * format.bits() as u64 / 8);
            let launch = decode_attn::params::CacheLaunch { plain: 0, plain_strides: s.kv_strides(), data: 0, scales: 0, seq_lens: 0, block_table: 0, rows_per_seq: 1, append: true };
            decode_attn::params::cache_params(&s, &launch).unwrap();
        }
    }

    /// A soft-cap errs by about `cap · 2^-23` in a logit: caps past
    /// `MAX_SOFT_CAP` (1e4) are rejected, the bound itself taken (the GPU
    /// tests run it: `magnitudes-softcap-bound`).
    #[test]
    fn h4_soft_caps_are_bounded_where_the_error_bound_holds() {
        let capped = |cap| DecodeShape { variant: VariantSpec { soft_cap: Some(cap), ..VariantSpec::STANDARD }, ..DecodeShape::bf16(1, 8, 1, 128, 1, 64) };
        capped(MAX_SOFT_CAP).validate().unwrap();
        capped(30.0).validate().unwrap();
        for cap in [f32::from_bits(MAX_SOFT_CAP.to_bits() + 1), 3e5, 1e10, 2.3e38] {
            rejects(capped(cap).validate(), "soft_cap");
        }
    }

    /// The reference gives a +inf sink its limit (the row's output 0, as
    /// the kernels' `1 / (1 + 2^(s − lse))`), rejects NaN sinks and
    /// non-finite slopes by name, never returns a NaN row, and the
    /// comparison fails on a NaN where it used to skip it.
    #[test]
    fn h5_the_reference_never_hides_a_row() {
        let s = DecodeShape { variant: VariantSpec { sinks: true, ..VariantSpec::STANDARD }, ..DecodeShape::bf16(1, 2, 1, 64, 1, 8) };
        let q = vec![0.5; s.q_elems() as usize];
        let kv: Vec<f32> = (0..s.kv_elems_required().unwrap()).map(|i| (i % 7) as f32 - 3.0).collect();
        let run = |s: &DecodeShape, heads: &HeadInputs| decode_attention_with(s, &[8], &q, &kv, &kv, heads, &[0], 1);
        let out = run(&s, &HeadInputs { sinks: Some(&[f32::INFINITY, 0.0]), ..Default::default() }).unwrap();
        assert!(out[..64].iter().all(|&x| x == 0.0), "a +inf sink takes every weight");
        assert!(out[64..].iter().all(|x| x.is_finite()) && out[64..].iter().any(|&x| x != 0.0));
        let plain = run(&DecodeShape { variant: VariantSpec { sinks: false, ..s.variant }, ..s }, &HeadInputs::default()).unwrap();
        assert_eq!(run(&s, &HeadInputs { sinks: Some(&[f32::NEG_INFINITY; 2]), ..Default::default() }).unwrap(), plain, "a -inf sink takes none");
        rejects(run(&s, &HeadInputs { sinks: Some(&[0.0, f32::NAN]), ..Default::default() }), "sinks[1]");
        let a = DecodeShape { variant: VariantSpec { alibi: true, ..VariantSpec::STANDARD }, ..DecodeShape::bf16(1, 2, 1, 64, 1, 8) };
        for slope in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            rejects(run(&a, &HeadInputs { alibi_slopes: Some(&[0.5, slope]), ..Default::default() }), "alibi_slopes[1]");
        }
        // A NaN input inside a sequence is a failure, not a skipped row.
        let mut bad = kv.clone();
        bad[3] = f32::NAN;
        let e = decode_attention_with(&DecodeShape { variant: VariantSpec { sinks: false, ..s.variant }, ..s }, &[8], &q, &bad, &kv, &HeadInputs::default(), &[0], 1).unwrap_err();
        assert!(e.to_string().contains("reference row (sequence 0"), "{e}");
        rejects(relative_l2_error(&[5.0, 1.0], &[f64::NAN, 1.0]), "reference[0]");
    }

    /// Rows below ~1.3e-36 made `448 / amax` (and `127 / amax` below
    /// ~3.7e-37) infinite: zeros became NaN codes and every value
    /// saturated. Now every finite row keeps its values; per tensor, a tiny
    /// scale is lifted the same way and a scale that is not positive gives
    /// zero codes. (The GPU kernels give the same bytes: the GPU test
    /// `quantize-extreme-rows`.)
    #[test]
    fn h2_tiny_rows_keep_their_values_and_never_get_nan_codes() {
        let mut q = [0u8; 4];
        let s = quantize_fp8_row(&[1e-37, 0.0, 5e-38, 0.0], &mut q);
        assert_eq!((q[1], q[3]), (0, 0), "zeros stay zero: {q:x?}");
        assert!(q.iter().all(|&b| b & 0x7f != 0x7f), "{q:x?}");
        assert!((e4m3_to_f32(q[0]) * s / 1e-37 - 1.0).abs() < 1e-2 && (e4m3_to_f32(q[2]) * s / 5e-38 - 1.0).abs() < 0.07);
        for amax in [1e-37f32, 1e-39, 9.2e-41, f32::from_bits(1), 1e-30] {
            let row = [amax, -amax / 3.0, 0.0, amax / 7.0];
            let mut q8 = [0i8; 4];
            let s8 = quantize_int8_row(&row, &mut q8);
            assert_eq!(q8[0], 127, "amax {amax:e}");
            assert_eq!(q8[2], 0);
            let back: Vec<f32> = q8.iter().map(|&v| v as f32 * s8).collect();
            assert!(back.iter().all(|x| x.is_finite()));
            let mut qf = [0u8; 4];
            let sf = quantize_fp8_row(&row, &mut qf);
            assert_eq!(qf[0], 0x7e, "amax {amax:e} codes 448");
            assert!(qf.iter().all(|&b| b & 0x7f != 0x7f) && qf[2] == 0);
            assert!(sf > 0.0 || amax < 448.0 * f32::from_bits(1));
        }
        let mut qs = [0u8; 4];
        quantize_fp8_row_scaled(&[1e-38, 0.0, -1e-38, 3e38], 1e-40, &mut qs);
        assert_eq!((qs[1], qs[2], qs[3]), (0, qs[0] | 0x80, 0x7e), "{qs:x?}");
        assert!((e4m3_to_f32(qs[0]) * 1e-40 / 1e-38 - 1.0).abs() < 0.07, "{qs:x?}");
        for bad in [0.0, -1.0, f32::NAN] {
            quantize_fp8_row_scaled(&[1.0, 0.0, -2.0, 5.0], bad, &mut qs);
            assert!(qs.iter().all(|&b| b & 0x7f == 0), "scale {bad}: zero codes (±0), got {qs:x?}");
        }
        // The whole-cache twins agree, and `quantize_cache_fp8` takes a tiny scale.
        let shape = DecodeShape { kv_format: KvFormat::Fp8, ..DecodeShape::bf16(1, 2, 1, 64, 1, 2) };
        let plain: Vec<f32> = (0..shape.kv_elems_required().unwrap()).map(|i| if i % 3 == 0 { 0.0 } else { 1e-38 * (i % 5) as f32 }).collect();
        let bytes = quantize_cache_fp8(&shape, &[2], &plain, 1e-40).unwrap();
        assert!(bytes.iter().zip(&plain).all(|(&b, &x)| (x == 0.0) == (b == 0) && b & 0x7f != 0x7f));
        // int4: groups beyond fp16's range saturate; scale, zero and every
        // dequantized value stay finite.
        let big: Vec<f32> = (0..64).map(|i| if i % 2 == 0 { 1e6 } else { -3e38 }).collect();
        let (mut b4, mut side) = (vec![0u8; 32], vec![0u32; 2]);
        quantize_int4_row(&big, 32, &mut b4, &mut side);
        let mut out = vec![0f32; 64];
        dequantize_int4_row(&b4, &side, 32, &mut out);
        assert!(out.iter().all(|x| x.is_finite() && x.abs() <= 65504.0), "{out:?}");
        let int8 = DecodeShape { kv_format: KvFormat::Int8, ..shape };
        let tiny: Vec<f32> = plain.iter().map(|x| x * 1e-2).collect();
        let (d8, s8) = quantize_cache(&int8, &[2], &tiny).unwrap();
        let back = dequantize_cache(&int8, &[2], &d8, &s8).unwrap();
        assert!(back.iter().zip(&tiny).all(|(&y, &x)| y.is_finite() && (y - x).abs() <= x.abs() / 100.0 + f32::from_bits(1) * 64.0));
    }

    /// Smaller findings: the fp8 dequantizer takes only a usable scale;
    /// errors name the parameters the caller passed; a forced cluster
    /// merge that cannot be is an `Err`; helpers that divided by zero or
    /// overflowed in debug are total.
    #[test]
    fn h6_the_smaller_findings() {
        let fp8 = DecodeShape { kv_format: KvFormat::Fp8, ..DecodeShape::bf16(1, 2, 1, 64, 1, 2) };
        let n = fp8.kv_elems_required().unwrap() as usize;
        for bad in [f32::NAN, 0.0, -1.0, f32::INFINITY] {
            rejects(dequantize_cache(&fp8, &[2], &vec![0u8; n], &[bad.to_bits()]), "scales[0]");
        }
        dequantize_cache(&fp8, &[2], &vec![0u8; n], &[1e-40f32.to_bits()]).unwrap();
        let int8 = DecodeShape { kv_format: KvFormat::Int8, ..fp8 };
        let side = (int8.scale_bytes_required().unwrap() / 4) as usize;
        rejects(dequantize_cache(&int8, &[2], &vec![0u8; n - 1], &vec![0; side]), "data");
        rejects(dequantize_cache(&int8, &[2], &vec![0u8; n], &vec![0; side - 1]), "scales");
        let int4 = DecodeShape { kv_format: KvFormat::Int4G32, ..fp8 };
        rejects(dequantize_cache(&int4, &[2], &vec![0u8; n / 2 - 1], &vec![0; 64]), "data");
        // The cache jobs name `scales` (`KvMut::scales`, `dequantize_kv`'s).
        let d = |addr, len, elem| BufferDesc { addr, len, elem };
        let job = decode_attn::check::CacheJob {
            direction: decode_attn_abi::QuantDirection::Store,
            plain: d(1 << 40, n, ElemType::Bf16),
            plain_name: "plain",
            plain_elems: n as u64,
            data: d(2 << 40, n, ElemType::U8),
            scales: None,
            seq_lens: d(3 << 40, 1, ElemType::U32),
            block_table: None,
        };
        rejects(decode_attn::check::check_cache_job(&int8, &job), "scales");
        rejects(decode_attn::check::check_cache_job(&int8, &decode_attn::check::CacheJob { scales: Some(d(4 << 40, 1, ElemType::F32)), ..job }), "scales");
        // Total helpers.
        let none = decode_attn_abi::MergeItem::default();
        assert_eq!(decode_attn::work::uniform_work(&[5], &[], &[none], 0, 1, (decode_attn_abi::NO_WINDOW, 1)), None);
        assert_eq!(decode_attn_abi::capacity_merge_item_from(3, 10, 0, 1, 0, 4).num_slots, 0);
        assert_eq!(decode_attn_abi::capacity_merge_item_from(3, 10, 11, 1, 4, 4).num_slots, 0);
        let _ = decode_attn_abi::capacity_merge_item_from(u32::MAX, 10, 0, 1, 4, u32::MAX);
        assert_eq!(decode_attn::heuristics::merge_mode(u32::MAX, u32::MAX, u32::MAX, u32::MAX), decode_attn::MergeMode::Kernel);
        let facts = decode_attn::heuristics::HeadPairFacts { adjacent_heads: true, blocks: u64::MAX, resident_blocks: u64::MAX, sm_count: u64::MAX, paged: true, total_keys: u64::MAX, sequences: u64::MAX };
        let _ = decode_attn::heuristics::pair_heads(&facts, &decode_attn::tuning::H100_TABLE);
        let p = plan_with(&DecodeShape::bf16(2, 8, 1, 128, 1, 4096), &[4096, 100], SplitPolicy::ChunkKeys(512)).unwrap();
        let params = decode_attn::params::decode_params(&p, &decode_attn::params::LaunchAddrs { workspace: u64::MAX - 3, ..Default::default() });
        assert_eq!(params.work, (u64::MAX - 3).wrapping_add(p.layout().work as u64));
    }
}

/// Latent caches (MLA, head_dim 576): each rule the MLA kernels need names
/// its field — one kv head, bf16 rows and queries, no variant, no packed
/// pages; the planner takes the MLA family (a forced other family and a
/// cluster merge are refused as Unsupported, saying why); O is checked at
/// 512 values a row, not Q's 576; and V must be K's own buffer (the kernels
/// read V from K's rows: another V would be ignored, never read), and an
/// fp8 cache's V scales K's.
#[test]
fn latent_shapes_name_each_rule_and_v_must_be_k() {
    let s = DecodeShape::latent(2, 16, 2, 300);
    s.validate().unwrap();
    let broken = |f: fn(&mut DecodeShape)| {
        let mut b = s.clone();
        f(&mut b);
        b.validate()
    };
    rejects(broken(|b| b.num_kv_heads = 2), "num_kv_heads");
    rejects(broken(|b| b.kv_format = KvFormat::Int8), "kv_format");
    rejects(broken(|b| b.dtype = Dtype::F16), "dtype");
    rejects(broken(|b| b.variant.soft_cap = Some(30.0)), "variant");
    rejects(broken(|b| b.head_dim = 512), "head_dim");
    let mut paged = s.clone();
    paged.kv_layout = KvLayout::Paged { page_size: 64, num_pages: 10, order: decode_attn::PageOrder::TokenMajor, page_bytes: Some(1 << 20) };
    rejects(paged.validate(), "kv_layout.page_bytes");

    let p = plan_global(&s, &[300, 2], SplitPolicy::ChunkKeys(128)).unwrap();
    assert_eq!(p.family(), Family::Mla);
    assert_covers(&p);
    // A work item's row chunks (16 heads × 2 tokens: one) along grid x.
    assert_eq!(p.grid(), (p.work_items() * p.row_chunks(), 1, 1));
    // Two warpgroups splitting O's columns, and the flops of 576 + 512.
    assert_eq!((p.rows_per_block(), p.block_threads()), (64, 256));
    assert_eq!(p.flops(), 302 * 32 * 2 * (576 + 512));
    // Another family serves no latent rows; a cluster merge runs on the
    // 64-row kernel (five chunks: clusters of 8), and a transposed kernel
    // refuses it, naming the choice that serves it.
    let unsupported = |opts: &PlanOptions, shape: &DecodeShape, needle: &str| match plan(shape, &[300, 2], &DEV, &KERNEL, opts) {
        Err(Error::Unsupported(why)) => assert!(why.contains(needle), "{why}"),
        other => panic!("expected Unsupported, got {other:?}"),
    };
    let split = |family, merge| PlanOptions { split: SplitPolicy::ChunkKeys(64), family, merge, ..Default::default() };
    unsupported(&split(FamilyChoice::Force(Family::Wide), MergeChoice::Auto), &s, "576");
    let clustered = plan(&s, &[300, 2], &DEV, &KERNEL, &split(FamilyChoice::Auto, MergeChoice::Cluster)).unwrap();
    assert_eq!((clustered.transposed(), clustered.cluster(), clustered.kernel_name()), (false, 8, "decode_cluster_mla_kv_bf16_q_bf16_d576v512"));
    let sixteen = DecodeShape::latent(2, 16, 1, 300);
    unsupported(&split(FamilyChoice::Auto, MergeChoice::Cluster), &sixteen, "TransposeChoice::Never");

    let o_elems = s.o_elems_checked().unwrap() as usize;
    assert_eq!(o_elems, 2 * 2 * 16 * 512);
    let mut b = bufs_for(&s, s.q_elems() as usize, s.kv_elems_required().unwrap() as usize, p.workspace_bytes());
    b.v = b.k;
    b.o.len = o_elems;
    check_buffers(&p, &b).unwrap();
    b.o.len = o_elems - 1;
    rejects(check_buffers(&p, &b), "o");
    b.o.len = o_elems;
    b.v.addr += 1 << 20;
    rejects(check_buffers(&p, &b), "v");

    // fp8 with a scale per token holds latent rows too; V's scales are
    // K's, as V is K.
    let f = DecodeShape { kv_format: KvFormat::Fp8PerHead, ..s.clone() };
    f.validate().unwrap();
    let p8 = plan_global(&f, &[300, 2], SplitPolicy::ChunkKeys(128)).unwrap();
    assert_eq!(p8.family(), Family::Mla);
    let mut b = bufs_for(&f, f.q_elems() as usize, f.kv_elems_required().unwrap() as usize, p8.workspace_bytes());
    (b.v, b.v_scales, b.o.len) = (b.k, b.k_scales, o_elems);
    check_buffers(&p8, &b).unwrap();
    b.v_scales.as_mut().unwrap().addr += 1 << 20;
    rejects(check_buffers(&p8, &b), "v_scales");

    // DeepSeek V3.2's rows (fp8-ds-mla): 656 bytes a token, scales inside
    // (none beside them), latent rows and bf16 alone.
    let ds = DecodeShape { kv_format: KvFormat::Fp8DsMla, ..s.clone() };
    ds.validate().unwrap();
    assert_eq!((ds.kv_format.row_bytes(576), ds.kv_strides().token), (656, 656));
    let tokens = ds.batch as u64 * ds.max_seq_len as u64;
    assert_eq!(ds.kv_bytes_required(), Some(tokens * 656));
    assert_eq!(ds.plain_shape().kv_elems_required(), Some(tokens * 576));
    let pd = plan_global(&ds, &[300, 2], SplitPolicy::ChunkKeys(128)).unwrap();
    assert_eq!(pd.family(), Family::Mla);
    let mut b = bufs_for(&ds, ds.q_elems() as usize, ds.kv_bytes_required().unwrap() as usize, pd.workspace_bytes());
    (b.v, b.k_scales, b.v_scales, b.o.len) = (b.k, None, None, o_elems);
    check_buffers(&pd, &b).unwrap();
    b.k.len -= 1;
    b.v.len -= 1;
    rejects(check_buffers(&pd, &b), "k");
    b.k.len += 1;
    b.v.len += 1;
    b.k_scales = Some(b.k);
    rejects(check_buffers(&pd, &b), "k_scales");
    for bad in [DecodeShape { head_dim: 128, ..ds.clone() }, DecodeShape { kv_format: KvFormat::Fp8DsMla, ..DecodeShape::bf16(1, 8, 1, 128, 1, 64) }] {
        rejects(bad.validate(), "head_dim");
    }
    rejects(DecodeShape { dtype: Dtype::F16, ..ds.clone() }.validate(), "dtype");
    // Rows 16-byte aligned: strides in multiples of 16 bytes.
    let strided = |token| DecodeShape { kv_layout: KvLayout::Strided { batch: 400 * token, token, head: 656 }, ..ds.clone() };
    strided(672).validate().unwrap();
    rejects(strided(664).validate(), "kv_layout.token");
}
