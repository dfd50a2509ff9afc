//! The MLA family's transposed form (`Form::Transposed`): blocks of at most
//! 16 query rows (DeepSeek V3 / R1 at 16 heads a GPU and q_len 1), whose
//! 64-row blocks (`decode::mla`) would be three quarters padding rows
//! (docs/perf.md, "MLA at 16 heads"). Its MMAs are transposed, the keys
//! along M and the rows along N (`wgmma m64n16k16`):
//!
//! - `Sᵀ = K·Qᵀ`: A the stage's keys as they land (64 keys × 576 dims,
//!   K-major), B the 16-row Q tile (`arch::wgmma::mla_t_scores`);
//! - the softmax along M: a thread holds 2 keys of 4 rows, a row's stage
//!   maximum is its warp's 8 lanes' (`warp::column_max`), then the
//!   warpgroup's 4 warps' through shared memory;
//! - `Pᵀ` to the warpgroup's P tile (16 rows × 64 keys, the B operand),
//!   then `Oᵀ += Vᵀ·Pᵀ`: A the stage's first 512 dims read transposed, 8
//!   M-tiles of 64 dims (`mla_t_pv`); `Oᵀ` is 64 f32 registers a thread.
//!
//! Each warpgroup owns one of the two stage buffers and every other stage
//! (warpgroup `w` stages `w, w + 2, …`), with its own online-softmax state:
//! it copies its stages itself (as `decode::mla` does, each column block
//! completing an mbarrier), and refills its buffer once its P·V is done.
//! At the end the two states are merged through shared memory and the
//! block writes its rows (or a split's partials) as `decode::mla` does.
//! A quarter of the 64-row kernel's MMAs at 16 rows.
//!
//! The fp8 latent caches run a body of their own, `decode::mla_t_ring`
//! (e4m3 rows converted in the MMAs' A registers): this one is bf16's.
//!
//! The shared memory (`decode_attn_abi::mla_transposed_smem_bytes`): the
//! two buffers, the Q tile, the two P tiles, the exchange (stage maxima,
//! the rows' final maxima, sums and log-sum-exps, the buffers' barriers),
//! the work item.

use decode_attn_abi::{div_rem, DecodeParams, WorkItem, DIRECT_OUTPUT, MLA_KEYS, MLA_TILE_BYTES, MLA_T_P_BYTES, MLA_T_Q_BYTES, MLA_T_ROWS};

use super::block::{block_work_at, keep_item, mask_from, qo_row_addr, row_info, rows_here, token_head};
use super::mla::{issue_blocks, q_row, stage_sources, BLOCKS, QK_DIM, V_DIM};
use crate::arch::math::{ex2, pack_bf16x2};
use crate::arch::wgmma::{descriptor, mla_t_pv, mla_t_scores};
use crate::arch::{mbarrier, memory, shared, thread, warp};
use crate::format::{KvFormat, Swizzle128, TileLayout};
use crate::state;
use crate::variant::Standard;

/// The 16-row tiles' layout (Q's, and the P tiles').
const TILE16: Swizzle128 = Swizzle128 { rows: MLA_T_ROWS };
/// Words (f32) a row of the epilogue's O tiles takes: 4 past V's 512, so
/// that a warp's stores (8 dims × 4 row pairs) fall in 32 banks.
const O_ROW_WORDS: u32 = V_DIM + 4;

/// # Safety
/// Launched by the host with the planner's grid (x: work items), 256
/// threads and `mla_transposed_smem_bytes` of shared memory, on buffers it
/// validated, for at most 16 query rows (`group × q_len`), a bf16 latent
/// cache.
#[inline(always)]
pub unsafe fn decode_mla_transposed<F: KvFormat, const PAGED: bool>(p: &DecodeParams) {
    const { assert!(F::FORMAT.holds_latent()) };
    let tid = thread::thread_idx_x();
    let lane = tid % 32;
    let warp = tid / 32;
    let (own, warp_m) = (warp / 4, warp % 4);
    let (g, c2) = (lane / 4, (lane % 4) * 2);
    let pt = tid % 128;
    let Some((item, seq_len, _)) = block_work_at::<Standard>(p, thread::block_idx_x()) else { return };
    keep_item(p, &item, tid);

    let smem = shared::dynamic_smem_base();
    let buffer = |b: u32| smem + MLA_TILE_BYTES * b;
    let q_tile = smem + 2 * MLA_TILE_BYTES;
    let p_tile = |b: u32| q_tile + MLA_T_Q_BYTES + MLA_T_P_BYTES * b;
    // A warpgroup's stage maxima: two stages' slots of 4 warps × 16 rows.
    let stage_maxima = |b: u32, slot: u32| p_tile(2) + 4 * MLA_T_ROWS * (4 * (2 * b + slot));
    // The end: each warpgroup's rows' maxima, then its warps' row sums.
    let finals = |b: u32| stage_maxima(2, 0) + 4 * MLA_T_ROWS * 5 * b;
    let lses = finals(2);
    let bars = lses + 4 * MLA_T_ROWS;
    let full = |b: u32| bars + 8 * BLOCKS * b;
    // A warpgroup's own named barrier (0 is the block's).
    let group_bar = 1 + own;

    if tid == 0 {
        for b in 0..2 {
            for c in 0..BLOCKS {
                mbarrier::init_count(full(b) + 8 * c, 128);
            }
        }
        mbarrier::fence_init();
    }
    issue_q_tile::<MLA_T_ROWS>(p, item.batch, 0, q_tile, tid);
    memory::cp_async_commit();
    // (The barriers' initialisation is visible to every thread.)
    thread::sync_threads();
    let n_tiles = (item.kv_end - item.kv_start).div_ceil(MLA_KEYS);
    // Warpgroup `own`'s first stage into its buffer.
    if own < n_tiles {
        issue_blocks::<0, BLOCKS>(buffer(own), full(own), pt, &stage_sources::<PAGED>(p, &item, own, pt));
    }
    memory::cp_async_wait::<0>();
    thread::sync_threads();

    // The thread's rows (the scores' N columns `c2, c2 + 1, c2 + 8, c2 + 9`)
    // and keys of a stage (its M rows `16 warp_m + g`, `+ 8`).
    let locals: [u32; 4] = [c2, c2 + 1, c2 + 8, c2 + 9];
    let rows = locals.map(|local| row_info(p, &item, seq_len, 0, 0, local));
    let mask_from = mask_from::<Standard>(p, &item, seq_len);
    let q_desc = descriptor(q_tile, 16, 1024);
    let scale = p.score_scale;
    // Element `e` of an accumulator: key `16 warp_m + g + 8 key_half(e)`,
    // row `locals[row_of(e)]`.
    let key_half = |e: usize| (e / 2) % 2;
    let row_of = |e: usize| 2 * (e / 4) + e % 2;

    let mut o = [[0f32; 8]; 8];
    let mut m = [f32::NEG_INFINITY; 4];
    let mut l = [0f32; 4];
    let mut t = own;
    let mut use_count = 0u32;
    while t < n_tiles {
        let buf = buffer(own);
        let raw = mla_t_scores(descriptor(buf, 16, 1024), q_desc, full(own), use_count & 1);
        let key0 = item.kv_start + t * MLA_KEYS + 16 * warp_m + g;
        let masked = item.kv_start + (t + 1) * MLA_KEYS > mask_from;
        let s: [f32; 8] = core::array::from_fn(|e| {
            let key = key0 + 8 * key_half(e) as u32;
            if masked && key >= rows[row_of(e)].limit {
                f32::NEG_INFINITY
            } else {
                raw[e] * scale
            }
        });
        // The stage's maximum of each row: the thread's 2 keys, its warp's
        // 16, then the warpgroup's 64 (two slots: a slot is rewritten two
        // stages on, after the next stage's barrier).
        let warp_max: [f32; 4] = core::array::from_fn(|r| {
            let e = 4 * (r / 2) + r % 2;
            warp::column_max(s[e].max(s[e + 2]))
        });
        let slot = stage_maxima(own, use_count & 1);
        if g == 0 {
            for r in 0..4 {
                shared::st_shared_f32(slot + 4 * (MLA_T_ROWS * warp_m + locals[r]), warp_max[r]);
            }
        }
        thread::sync_named(group_bar, 128);
        let (alpha, pv) = stage_softmax::<4, 8, MLA_T_ROWS>(&s, &mut m, &mut l, slot, &locals);
        // Pᵀ as the P·V's B operand: the P tile's rows are the block's rows,
        // its 64 keys K-major (the previous stage's P·V, which read it, is
        // done: every thread waited for it before this stage's barrier).
        let tile = p_tile(own);
        for e in 0..8 {
            let key = 16 * warp_m + g + 8 * key_half(e) as u32;
            let at = tile + TILE16.at(locals[row_of(e)], key / 8, 0) + 2 * (key % 8);
            shared::st_shared_u16(at, pack_bf16x2(pv[e], 0.0));
        }
        shared::fence_proxy_async_shared();
        for acc in o.iter_mut() {
            for (e, x) in acc.iter_mut().enumerate() {
                *x *= alpha[row_of(e)];
            }
        }
        thread::sync_named(group_bar, 128);
        mla_t_pv(&mut o, descriptor(tile, 16, 1024), descriptor(buf, 8192, 1024));
        // The buffer is read (every warp's MMAs done: the barrier): refill it.
        thread::sync_named(group_bar, 128);
        if t + 2 < n_tiles {
            issue_blocks::<0, BLOCKS>(buf, full(own), pt, &stage_sources::<PAGED>(p, &item, t + 2, pt));
        }
        t += 2;
        use_count += 1;
    }

    // The epilogue's O tiles in the first buffer (free: every stage was
    // read before the end's barrier; the stage maxima's first word is the
    // merge's scratch, read before it).
    finish_rows::<2, false, false, 4, 8, MLA_T_ROWS>(p, &item, &o, m, l, TransposedSmem { o_tiles: buffer(0), finals: finals(0), lses, scratch: stage_maxima(0, 0) }, |j, e| 64 * j as u32 + 16 * warp_m + g + 8 * key_half(e) as u32, || {
        for b in 0..2 {
            for c in 0..BLOCKS {
                mbarrier::inval(full(b) + 8 * c);
            }
        }
    });
}

/// Q's `R` rows (16 or 32) of sequence `batch` into the Q tile (rows past
/// the block's last zero-filled) by the block's first 256 threads: 72
/// chunks of 16 bytes a row, consecutive threads a row's consecutive
/// chunks (`cp.async`, not committed).
#[inline(always)]
pub(super) unsafe fn issue_q_tile<const R: u32>(p: &DecodeParams, batch: u32, row0: u32, q_tile: u32, tid: u32) {
    let tile = Swizzle128 { rows: R };
    for pass in 0..(R * QK_DIM / 8).div_ceil(256) {
        let i = tid + 256 * pass;
        if i < R * QK_DIM / 8 {
            let (row, c) = (i / (QK_DIM / 8), i % (QK_DIM / 8));
            let src = q_row(p, batch, row0 + row);
            memory::cp_async_16(q_tile + tile.at(row, c, 0), src.unwrap_or(p.q) + 16 * c as u64, if src.is_some() { 16 } else { 0 });
        }
    }
}

/// The end of one stage's online softmax for the thread's `NE` scores `s`
/// (8, or 16 in a 32-row tile; element `e`: key half `(e / 2) % 2`, row
/// `locals[2 (e / 4) + e % 2]` of its `NR`), once its warpgroup's warps
/// have written their stage maxima to `maxima` (4 warps × `R` rows) and
/// met at their barrier: the rows' new maxima `m` and sums `l`. Returns
/// the rows' rescale factors and the scores' `2^(s − m)`.
#[inline(always)]
pub(super) unsafe fn stage_softmax<const NR: usize, const NE: usize, const R: u32>(s: &[f32; NE], m: &mut [f32; NR], l: &mut [f32; NR], maxima: u32, locals: &[u32; NR]) -> ([f32; NR], [f32; NE]) {
    const { assert!(NE == 2 * NR && R as usize == 4 * NR) };
    let row_of = |e: usize| 2 * (e / 4) + e % 2;
    let m_new: [f32; NR] = core::array::from_fn(|r| {
        let at = |w: u32| shared::ld_shared_f32(maxima + 4 * (R * w + locals[r]));
        m[r].max(at(0).max(at(1)).max(at(2).max(at(3))))
    });
    let alpha: [f32; NR] = core::array::from_fn(|r| state::rescale(m[r], m_new[r]));
    *m = m_new;
    let base = m.map(state::safe_max);
    let pv: [f32; NE] = core::array::from_fn(|e| ex2(s[e] - base[row_of(e)]));
    for r in 0..NR {
        let e = 4 * (r / 2) + r % 2;
        l[r] = l[r] * alpha[r] + (pv[e] + pv[e + 2]);
    }
    (alpha, pv)
}

/// A row-chunk block's work item (its index in the list) and first query
/// row (`Form::TransposedRows`): an item's rows in chunks of `R`, its
/// chunks consecutive blocks (grid x), as the 64-row kernel's.
#[inline(always)]
pub(super) fn row_chunk_of_block<const R: u32>(p: &DecodeParams) -> (u32, u32) {
    let chunks = (p.group * p.q_len).div_ceil(R);
    let (x, chunk) = div_rem(thread::block_idx_x(), chunks);
    (x, chunk * R)
}

/// Where a transposed block's end works in shared memory: the
/// warpgroups' O tiles (the block's rows × `O_ROW_WORDS` f32 each, from
/// `o_tiles`), their rows' maxima and warps' sums (`finals`, 5 f32 a row
/// a warpgroup), the rows' log-sum-exps (`lses`) and the split merge's
/// scratch word.
pub(super) struct TransposedSmem {
    pub o_tiles: u32,
    pub finals: u32,
    pub lses: u32,
    pub scratch: u32,
}

/// A transposed block's end: its `G` warpgroups' states (`o`, `m`, `l`)
/// merged through shared memory (`smem`) and its rows written, or a
/// split's partials and log-sum-exps and the merge of the last chunk
/// (`merge::merge_chunk_if_last`). The block's tile is `R` rows (16, or
/// 32: `NR` rows and `NE` elements an accumulator a thread, as
/// [`stage_softmax`]'s). Element `e` of `o[j]` is dim `dim(j, e)` of the
/// thread's row `2 (e / 4) + e % 2`; `QUADS`: the dims of
/// `o[2i]` and `o[2i + 1]` at a row's two key halves are 4 in a row
/// (`dim(2i, e)` the first), stored as one 16-byte word (the ring's
/// permuted dims: scalar stores were 4-way bank conflicts, 1.6 µs a
/// block; docs/perf.md, "MLA blocks' start and end"). `inval` runs on
/// thread 0 once every thread is past its stages (the mbarriers' end).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn finish_rows<const G: u32, const QUADS: bool, const CHUNKED: bool, const NR: usize, const NE: usize, const R: u32>(p: &DecodeParams, item: &WorkItem, o: &[[f32; NE]; 8], m: [f32; NR], l: [f32; NR], smem: TransposedSmem, dim: impl Fn(usize, usize) -> u32, inval: impl FnOnce()) {
    const { assert!(NE == 2 * NR && R as usize == 4 * NR) };
    let tid = thread::thread_idx_x();
    let lane = tid % 32;
    let (own, warp_m, g, c2) = (tid / 128, (tid / 32) % 4, lane / 4, (lane % 4) * 2);
    let locals: [u32; NR] = core::array::from_fn(|r| 8 * (r / 2) as u32 + c2 + (r % 2) as u32);
    let row_of = |e: usize| 2 * (e / 4) + e % 2;
    // The block's first row: its row chunk's (`CHUNKED`), found again from
    // the grid here rather than kept through the stages' loop.
    let row0 = if CHUNKED { row_chunk_of_block::<R>(p).1 } else { 0 };
    let finals = |b: u32| smem.finals + 4 * R * 5 * b;
    // Each row's maximum and its warps' sums.
    let sums = l.map(warp::column_sum);
    if g == 0 {
        for r in 0..NR {
            if warp_m == 0 {
                shared::st_shared_f32(finals(own) + 4 * locals[r], m[r]);
            }
            shared::st_shared_f32(finals(own) + 4 * (R * (1 + warp_m) + locals[r]), sums[r]);
        }
    }
    thread::sync_threads();
    if tid == 0 {
        inval();
    }
    // Each thread's rows' weight of its warpgroup's O: `2^(m_own − M) / L`,
    // M the largest maximum, L the sums at M (`state::finish`).
    let weight: [f32; NR] = core::array::from_fn(|r| {
        let at = |b: u32, k: u32| shared::ld_shared_f32(finals(b) + 4 * (R * k + locals[r]));
        let total = |b: u32| (at(b, 1) + at(b, 2)) + (at(b, 3) + at(b, 4));
        let mut top = at(0, 0);
        for b in 1..G {
            top = top.max(at(b, 0));
        }
        let mut sum = 0.0;
        let mut mine = 0.0;
        for b in 0..G {
            let f = state::rescale(at(b, 0), top);
            sum = if b == 0 { total(b) * f } else { sum + total(b) * f };
            if b == own {
                mine = f;
            }
        }
        let (inv_l, lse) = state::finish(top, sum);
        if own == 0 && warp_m == 0 && g == 0 {
            shared::st_shared_f32(smem.lses + 4 * locals[r], lse);
        }
        mine * inv_l
    });
    // Each warpgroup's weighted Oᵀ as rows × dims into its O tile, then
    // all summed by every thread, 4 dims of a row at a time (a row's 128
    // quads by a warpgroup, the warpgroups a row each in turn).
    let o_tile = |b: u32| smem.o_tiles + 4 * R * O_ROW_WORDS * b;
    if QUADS {
        // Element of row `r` (of the thread's `NR`) at key half `h`.
        let element = |r: usize, h: usize| 4 * (r / 2) + 2 * h + r % 2;
        for r in 0..NR {
            for i in 0..4 {
                let (e0, e1) = (element(r, 0), element(r, 1));
                let w = weight[r];
                let quad = [o[2 * i][e0] * w, o[2 * i][e1] * w, o[2 * i + 1][e0] * w, o[2 * i + 1][e1] * w];
                shared::st_shared_v4_f32(o_tile(own) + 4 * (O_ROW_WORDS * locals[r] + dim(2 * i, e0)), quad);
            }
        }
    } else {
        for (j, acc) in o.iter().enumerate() {
            for (e, &x) in acc.iter().enumerate() {
                shared::st_shared_f32(o_tile(own) + 4 * (O_ROW_WORDS * locals[row_of(e)] + dim(j, e)), x * weight[row_of(e)]);
            }
        }
    }
    thread::sync_threads();
    let (batch, slot) = (item.batch, item.partial_slot);
    let here = rows_here(p, row0);
    thread::launch_dependents();
    let col = 4 * (tid % 128);
    let mut r = own;
    while r < here {
        let at = 4 * (O_ROW_WORDS * r + col);
        let mut v = shared::ld_shared_v4_f32(o_tile(0) + at);
        for b in 1..G {
            let w = shared::ld_shared_v4_f32(o_tile(b) + at);
            v = core::array::from_fn(|k| v[k] + w[k]);
        }
        let (token, head) = token_head(p, 0, row0 + r);
        if slot == DIRECT_OUTPUT {
            let out = qo_row_addr::<{ V_DIM as usize }>(p.o, p, batch, token, head);
            memory::st_global_v2_u32(out + 2 * col as u64, [pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3])]);
        } else {
            let row = (slot as u64 * p.q_len as u64 + token as u64) * p.num_q_heads as u64 + head as u64;
            memory::st_global_v4_f32(p.partial_o + 4 * (row * V_DIM as u64 + col as u64), v);
            if col == 0 {
                memory::st_global_f32(p.partial_lse + 4 * row, shared::ld_shared_f32(smem.lses + 4 * r));
            }
        }
        r += G;
    }
    if slot != DIRECT_OUTPUT && p.merge_counters != 0 {
        let chunks = if CHUNKED { (p.group * p.q_len).div_ceil(R) } else { 1 };
        crate::merge::merge_chunk_if_last::<crate::format::Bf16, Standard, { V_DIM as usize }>(p, batch, 0, row0 / R, chunks, here, smem.scratch);
    }
}
