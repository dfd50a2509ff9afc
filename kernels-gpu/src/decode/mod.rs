//! The decode-attention kernel bodies, generic over the KV format and head
//! dim. This module holds the wide family (query rows along mma M) and what
//! both families share; `narrow` the family with keys along M.
//!
//! One block computes, for one work item (a sequence's key range), one kv
//! head (both from grid x: `decode_attn_abi::decode_grid_x`, a work item's
//! heads consecutive) and one chunk of packed rows (grid z), every query row that
//! shares the kv head: rows are `token * group + head_in_group`, so each K/V
//! byte is read once for all `group × q_len` rows (GQA head packing).
//!
//! Warps form a `warps_m × warps_k` grid: warp (wm, wk) owns mma row tile
//! `wm` (16 rows) and the 16-key steps `wk, wk + warps_k, …` of every stage.
//! Stages of `keys_per_stage` K and V rows are copied global → shared with
//! `cp.async` (`PIPELINE_STAGES` deep) and read with `ldmatrix`; S = Q·Kᵀ and
//! O += P·V run on `mma.sync.m16n8k16` with fp32 accumulators and an online
//! softmax in base 2. At the end the `warps_k` partial states of each row are
//! merged in shared memory and the block writes either the final output or,
//! for a split sequence, an fp32 partial plus its log-sum-exp; in the
//! `CLUSTER` kernels a split sequence's blocks are one thread-block cluster
//! and merge through distributed shared memory instead (`cluster`).

mod cluster;
mod narrow;
mod pipeline;
mod wgmma;

pub use narrow::decode_narrow;
pub use wgmma::decode_wgmma;

use decode_attn_abi::{acc_pitch, capacity_work_item, div_rem, has_capacity_twin, q_converted, q_in_smem, tile_config, DecodeParams, Family, WorkItem, DIRECT_OUTPUT, KEYS_PER_WARP_STEP, MAX_WARPS, MMA_M, NARROW_ROWS};

use crate::arch::{math::ex2, memory, mma, shared, thread, warp};
use crate::format::{swizzled, Half, KvFormat};
use crate::state;
use crate::variant::{self, AttentionVariant};
use pipeline::Pipeline;

/// Output quads per round of the wgmma kernels' output loop (`epilogue`).
pub(crate) const OUT_BATCH: usize = 4;

/// [`OUT_BATCH`] of the warp-specialised wgmma kernels. Their 384 threads
/// take grid B's 48 rows' quads in one round of 4, whose 8.7 KB of code
/// each warp runs once: Nsight Compute counted 8.5 % of int8 (16K, 16)'s
/// warp samples waiting on instruction fetch there. Two rounds of 2 (the
/// second from the instruction cache) measured 0.2-0.6 µs faster on the
/// grid B rows they run, one quad a round 1-1.5 µs slower on int4-g32
/// (docs/perf.md, twenty-fifth session).
pub(crate) const SPECIALIZED_OUT_BATCH: usize = 2;

/// One thread's view of its two rows (`g` and `g + 8` of its warp's tile).
#[derive(Clone, Copy)]
pub(crate) struct RowInfo {
    /// Row within the block.
    local: u32,
    /// Whether the row exists (the last chunk's tile may be partly empty).
    valid: bool,
    token: u32,
    head: u32,
    /// Keys `< limit` are visible to this row (causal among new tokens, and
    /// the work item's end).
    limit: u32,
}

/// The (token, query head) of packed row `global` of kv head `kvh`: rows
/// are `token * group + head_in_group`. (`row_info` keeps the plain
/// division: with [`div_rem`] there, spills moved between the 168-register
/// kernels, docs/perf.md, twenty-second session.)
#[inline(always)]
pub(crate) fn token_head(p: &DecodeParams, kvh: u32, global: u32) -> (u32, u32) {
    let (token, in_group) = div_rem(global, p.group);
    (token, kvh * p.group + in_group)
}

#[inline(always)]
pub(crate) fn row_info(p: &DecodeParams, item: &WorkItem, seq_len: u32, kvh: u32, row0: u32, local: u32) -> RowInfo {
    let global = row0 + local;
    let valid = local < p.rows_per_block && global < p.group * p.q_len;
    let token = if valid { global / p.group } else { 0 };
    let head = kvh * p.group + if valid { global % p.group } else { 0 };
    // Token i (of q_len new ones) sees keys t < seq_len - q_len + 1 + i.
    let causal = seq_len - p.q_len + 1 + token;
    let limit = if valid && causal < item.kv_end { causal } else { item.kv_end };
    RowInfo { local, valid, token, head, limit }
}

/// A thread's two rows of an `m16` C fragment: `first` (`g` within its
/// warp's tile) and `first + 8`.
#[inline(always)]
pub(crate) fn row_pair(p: &DecodeParams, item: &WorkItem, seq_len: u32, kvh: u32, row0: u32, first: u32) -> [RowInfo; 2] {
    [first, first + 8].map(|r| row_info(p, item, seq_len, kvh, row0, r))
}

/// This block's work item and its sequence's length: from the uploaded
/// work list, or (capacity plans) from the sequence's device length. `None`
/// for an empty item (a capacity-mode chunk past its sequence's end): the
/// whole block returns before any barrier.
#[inline(always)]
pub(crate) unsafe fn block_work<const CLUSTER: bool>(p: &DecodeParams) -> Option<(WorkItem, u32)> {
    block_work_of::<CLUSTER, 1>(p)
}

/// [`block_work`] of a block that reads `HG` adjacent kv heads (grid x =
/// work item × `num_kv_heads / HG` + head pair).
#[inline(always)]
pub(crate) unsafe fn block_work_of<const CLUSTER: bool, const HG: u32>(p: &DecodeParams) -> Option<(WorkItem, u32)> {
    let x = block_item_of::<CLUSTER, HG>(p, thread::block_idx_x_fresh());
    let (item, seq_len) = if p.chunks_per_seq != 0 {
        let len = capacity_len(p.seq_lens, div_rem(x, p.chunks_per_seq).0, p.max_seq_len);
        (capacity_work_item(x, len, p.q_len, p.chunk_keys, p.chunks_per_seq)?, len)
    } else {
        let item = *(p.work as *const WorkItem).add(x as usize);
        (item, *(p.seq_lens as *const u32).add(item.batch as usize))
    };
    if item.kv_start >= item.kv_end {
        return None;
    }
    Some((item, seq_len))
}

/// Keeps the work item's sequence and partial slot for the epilogue in the
/// block's last shared-memory bytes (`DecodeParams::item_smem`), which no
/// stage or epilogue buffer reaches; the barriers between here and the
/// epilogue make the store visible to every thread.
#[inline(always)]
pub(crate) unsafe fn keep_item(p: &DecodeParams, item: &WorkItem, tid: u32) {
    if tid == 0 {
        let at = shared::dynamic_smem_base() + p.item_smem;
        shared::st_shared_u32(at, item.batch);
        shared::st_shared_u32(at + 4, item.partial_slot);
    }
}

/// Cluster plans: keeps the sequence's length (which chunks of the cluster
/// are live) beside the item for the cluster merge. Called after the
/// pipeline's first copies are issued: the length is a load that depends
/// on the work item's, and thread 0 storing it any earlier held its warp's
/// copies back by that load's latency (+0.3-0.6 µs on the smallest rows,
/// docs/perf.md).
#[inline(always)]
pub(crate) unsafe fn keep_seq_len<const CLUSTER: bool>(p: &DecodeParams, seq_len: u32, tid: u32) {
    if CLUSTER && tid == 0 {
        shared::st_shared_u32(shared::dynamic_smem_base() + p.item_smem + 8, seq_len);
    }
}

/// This block's kv head (`decode_attn_abi::decode_block_kv_head`), computed
/// afresh at each call: callers after the key loop call it again rather
/// than keep the value live through the loop (held, it cost the tightest
/// kernels a register, 8-byte spills at their caps).
#[inline(always)]
pub(crate) fn block_kv_head<const CLUSTER: bool>(p: &DecodeParams) -> u32 {
    let x = thread::block_idx_x_fresh();
    if CLUSTER {
        decode_attn_abi::decode_block_kv_head(x, p.num_kv_heads, p.cluster_log2)
    } else {
        div_rem(x, p.num_kv_heads).1
    }
}

/// The first of the `HG` adjacent kv heads of this block
/// ([`block_kv_head`] when `HG` = 1; never a cluster kernel otherwise).
#[inline(always)]
pub(crate) fn block_first_head<const CLUSTER: bool, const HG: u32>(p: &DecodeParams) -> u32 {
    if HG == 1 {
        block_kv_head::<CLUSTER>(p)
    } else {
        div_rem(thread::block_idx_x_fresh(), p.num_kv_heads / HG).1 * HG
    }
}

/// The work item of grid-x index `x` in a grid of `HG`-head blocks
/// ([`block_item`] when `HG` = 1).
#[inline(always)]
pub(crate) fn block_item_of<const CLUSTER: bool, const HG: u32>(p: &DecodeParams, x: u32) -> u32 {
    if HG == 1 {
        block_item::<CLUSTER>(p, x)
    } else {
        div_rem(x, p.num_kv_heads / HG).0
    }
}

/// The work item of grid-x index `x` (`decode_attn_abi::decode_block_item`;
/// without clusters by [`div_rem`]: the cluster kernels, which recompute
/// it at every stage, keep the plain division, whose code is smaller).
#[inline(always)]
pub(crate) fn block_item<const CLUSTER: bool>(p: &DecodeParams, x: u32) -> u32 {
    if CLUSTER {
        decode_attn_abi::decode_block_item(x, p.num_kv_heads, p.cluster_log2)
    } else {
        div_rem(x, p.num_kv_heads).0
    }
}

/// Capacity plans: sequence `batch`'s device length, capped at the capacity
/// (a larger value is read as the capacity).
#[inline(always)]
pub(crate) unsafe fn capacity_len(seq_lens: u64, batch: u32, max_seq_len: u32) -> u32 {
    if seq_lens == 0 {
        // A uniform plan (`DecodeParams::seq_lens`): every sequence is this long.
        return max_seq_len;
    }
    (*(seq_lens as *const u32).add(batch as usize)).min(max_seq_len)
}

/// Keys at or past this may be masked for some row of the block (causal
/// among the new tokens, or past the work item's end).
#[inline(always)]
pub(crate) fn mask_from(p: &DecodeParams, item: &WorkItem, seq_len: u32) -> u32 {
    let causal0 = seq_len - p.q_len + 1;
    if causal0 < item.kv_end {
        causal0
    } else {
        item.kv_end
    }
}

/// Byte address of element 0 of row (batch, token, head) of a
/// `[batch, q_len, num_q_heads, D]` tensor of 2-byte values.
#[inline(always)]
pub(crate) fn qo_row_addr<const D: usize>(base: u64, p: &DecodeParams, batch: u32, token: u32, head: u32) -> u64 {
    base + (((batch as u64 * p.q_len as u64 + token as u64) * p.num_q_heads as u64 + head as u64) * D as u64) * 2
}

/// # Safety
/// Launched by the host with the grid, block and shared memory the planner
/// computed for these params (see the module docs), on buffers it validated.
#[inline(always)]
pub unsafe fn decode<F: KvFormat, V: AttentionVariant, const D: usize, const KC: usize, const NT: usize, const PAGED: bool, const CLUSTER: bool, const GUESS: bool>(p: &DecodeParams) {
    const { assert!(KC * 16 == D && NT * 8 == D && KC % 2 == 0 && NT % 4 == 0) };
    // The guess (below) is for strided 16-bit caches whose Q is in
    // registers: a Q staged in shared memory would be copied after the
    // guessed stages, outside the first wait's groups.
    const { assert!(!GUESS || has_capacity_twin(F::FORMAT, D as u32, Family::Wide, PAGED, CLUSTER)) };
    let cfg = const { tile_config(F::FORMAT, D as u32, Family::Wide) };

    let tid = thread::thread_idx_x();
    let nthreads = thread::block_dim_x();
    let lane = tid % 32;
    let warp = tid / 32;
    let warp_m = warp % p.warps_m;
    let warp_k = warp / p.warps_m;

    // Capacity kernels (`GUESS`: the table's `Capacity` entries, which the
    // host launches for capacity plans of device lengths): a sequence's
    // first chunk starts at key 0 whatever the sequence's device length,
    // so its block issues its first stages for the chunk at full capacity
    // before that length arrives (rows below the capacity are in bounds),
    // and zeroes the copied rows past the real end as they land
    // (`Pipeline::advance_guessed`). Without it every block of a CUDA-graph
    // step waited for its length's round trip before its first copy,
    // which planned launches of equal lengths no longer do
    // (`plan::uniform_work`). In the planned launches' kernels the same
    // code cost 0.2-0.4 µs on grid D, hence separate entry points
    // (docs/perf.md, twentieth and twenty-first sessions).
    let (guessed_end, work) = if GUESS && p.chunks_per_seq != 0 && p.seq_lens != 0 {
        let x = block_item::<false>(p, thread::block_idx_x_fresh());
        let (seq, chunk) = div_rem(x, p.chunks_per_seq);
        if chunk == 0 {
            // The length's load first, its use after the copies: issued
            // behind them it came back behind their bytes (bf16 D (64,
            // 128)'s graph replay +3 µs, docs/perf.md).
            let len = capacity_len(p.seq_lens, seq, p.max_seq_len);
            let end = p.chunk_keys.min(p.max_seq_len);
            let guess = WorkItem { batch: seq, kv_start: 0, kv_end: end, partial_slot: DIRECT_OUTPUT };
            Pipeline::<F, D, PAGED, true, CLUSTER, false>::new(p, guess, block_kv_head::<CLUSTER>(p), shared::dynamic_smem_base()).prefetch();
            (end, capacity_work_item(x, len, p.q_len, p.chunk_keys, p.chunks_per_seq).map(|item| (item, len)))
        } else {
            (0, block_work::<CLUSTER>(p))
        }
    } else {
        (0, block_work::<CLUSTER>(p))
    };
    let Some((item, seq_len)) = work else {
        // (A sequence shorter than its new tokens: no work, but the guessed
        // copies must land before the block's shared memory is released.)
        if guessed_end != 0 {
            memory::cp_async_wait::<0>();
        }
        return;
    };
    keep_item(p, &item, tid);
    let batch = item.batch;
    let kvh = block_kv_head::<CLUSTER>(p);
    let row0 = thread::block_idx_z() * p.rows_per_block;

    let g = lane / 4;
    let c2 = (lane % 4) * 2;

    let smem = shared::dynamic_smem_base();
    // Q as mma A fragments: in registers, loaded once (missing rows are
    // zeros); for large head dims staged in shared memory instead and read
    // with ldmatrix at each step, leaving the registers to the O accumulator.
    // Formats that compute in another type convert Q into the shared tile
    // first (after the pipeline's first loads are in flight).
    let q_conv = const { q_converted(F::FORMAT) };
    let q_smem = const { q_in_smem(D as u32) };
    let q_tile = smem + pipeline::Pipeline::<F, D, PAGED, true, CLUSTER, false>::region_bytes(p);
    let q_scales = q_tile + p.warps_m * MMA_M * (D as u32) * 2;
    if !q_conv && q_smem {
        stage_q::<D>(p, batch, kvh, row0, q_tile, tid, nthreads);
    }
    // The rows' key limits wait for the sequence's length, a load behind
    // the work item's: computed before the first copies, a branch on them
    // held every warp's copies back by that load's round trip
    // (docs/perf.md, eighteenth session), so the kernels of 16-bit caches
    // compute them after, and Q's register loads with them (issued before
    // the copies, with the rows' divisions, they measured D (1, 1K) 0.4 µs
    // slower). (Converting kernels keep the rows first: later, the held
    // values took the d256 int4 cluster kernel past 255 registers.)
    let rows = || row_pair(p, &item, seq_len, kvh, row0, warp_m * MMA_M + g);
    let early_rows = q_conv.then(rows);

    let pipe = Pipeline::<F, D, PAGED, true, CLUSTER, false>::new(p, item, kvh, smem);
    if guessed_end == 0 {
        pipe.prefetch();
    }
    keep_seq_len::<CLUSTER>(p, seq_len, tid);

    let [ra, rb] = early_rows.unwrap_or_else(rows);
    let mut qf = [[0u32; 4]; KC];
    if !q_conv && !q_smem {
        // (convert_q fills the tile of converted formats below.)
        let qa_addr = qo_row_addr::<D>(p.q, p, batch, ra.token, ra.head);
        let qb_addr = qo_row_addr::<D>(p.q, p, batch, rb.token, rb.head);
        let load_q = |valid: bool, addr: u64, dim: u32| if valid { memory::ld_global_nc_u32(addr + dim as u64 * 2) } else { 0 };
        for (kc, f) in qf.iter_mut().enumerate() {
            let d = kc as u32 * 16 + c2;
            *f = [load_q(ra.valid, qa_addr, d), load_q(rb.valid, qb_addr, d), load_q(ra.valid, qa_addr, d + 8), load_q(rb.valid, qb_addr, d + 8)];
        }
    }

    // Per-row factors of the scores: the softmax scale (base 2), times the
    // power of two a converted Q row was scaled down by.
    let (mut scale_a, mut scale_b) = (V::score_scale(p), V::score_scale(p));
    if q_conv {
        convert_q::<F, D>(p, batch, kvh, row0, p.warps_m * MMA_M, q_tile, q_scales, warp, nthreads / 32, lane);
        thread::sync_threads();
        scale_a *= shared::ld_shared_f32(q_scales + 4 * (warp_m * MMA_M + g));
        scale_b *= shared::ld_shared_f32(q_scales + 4 * (warp_m * MMA_M + g + 8));

    }

    let mask_from = mask_from(p, &item, seq_len);

    let mut o = [[0f32; 4]; NT];
    let (mut m_a, mut m_b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    let (mut l_a, mut l_b) = (0f32, 0f32);

    let kt = cfg.keys_per_stage;
    // (A closure-taking loop helper shared with the other family cost the
    // narrow int4 kernel 34 registers; the loop stays written out.)
    for t in 0..pipe.n_tiles {
        let stage = pipe.advance_guessed(t, guessed_end);
        let tile_first = item.kv_start + t * kt;
        let mut sub = warp_k * KEYS_PER_WARP_STEP;
        while sub < kt && tile_first + sub < item.kv_end {
            let key0 = tile_first + sub;
            // S = Q Kᵀ for 16 keys: two n8 tiles.
            let mut s = [[0f32; 4]; 2];
            for kp in 0..KC / 2 {
                let pair = F::k_fragment_pair::<D>(pipe.k_tile(stage), sub, kp as u32, lane);
                for (h, b) in pair.iter().enumerate() {
                    let kc = 2 * kp + h;
                    // Converted Q stays in shared memory too: its registers go
                    // to the dequantization instead.
                    let qk = if q_smem || q_conv { q_fragment::<D>(q_tile, warp_m, kc as u32, lane) } else { qf[kc] };
                    s[0] = F::Compute::mma(qk, [b[0], b[1]], s[0]);
                    s[1] = F::Compute::mma(qk, [b[2], b[3]], s[1]);
                }
            }
            // Per-key scales of this thread's keys sub + c2 + {0, 1, 8, 9}
            // (quantized formats): K's multiply the scores, V's multiply P.
            let (kscale, vscale) = if F::SCALED {
                let at = |side: u32, n: u32| shared::ld_shared_v2_f32(side + 4 * (sub + 8 * n + c2));
                ([at(pipe.k_side(stage), 0), at(pipe.k_side(stage), 1)], [at(pipe.v_side(stage), 0), at(pipe.v_side(stage), 1)])
            } else {
                ([[1.0; 2]; 2], [[1.0; 2]; 2])
            };
            // Constant-index loops (not iterators) so `s` stays in registers.
            let masked = key0 + KEYS_PER_WARP_STEP > mask_from;
            #[allow(clippy::needless_range_loop)]
            for n in 0..2 {
                for e in 0..4 {
                    let key = key0 + n as u32 * 8 + c2 + (e as u32 & 1);
                    let limit = if e < 2 { ra.limit } else { rb.limit };
                    let row_scale = if e < 2 { scale_a } else { scale_b };
                    let scale = if F::SCALED { row_scale * kscale[n][e & 1] } else { row_scale };
                    let hidden = masked && V::hides(p, key, limit);
                    s[n][e] = variant::logit::<V>(p, s[n][e], scale, hidden);
                }
            }

            let mx_a = warp::quad_max(s[0][0].max(s[0][1]).max(s[1][0]).max(s[1][1]));
            let mx_b = warp::quad_max(s[0][2].max(s[0][3]).max(s[1][2]).max(s[1][3]));
            let moved = state::warp_must_move([m_a, m_b], [mx_a, mx_b], F::RESCALE_SLACK);
            let (alpha_a, base_a) = state::advance_if(&mut m_a, mx_a, moved);
            let (alpha_b, base_b) = state::advance_if(&mut m_b, mx_b, moved);
            for tile in s.iter_mut() {
                tile[0] = ex2(tile[0] - base_a);
                tile[1] = ex2(tile[1] - base_a);
                tile[2] = ex2(tile[2] - base_b);
                tile[3] = ex2(tile[3] - base_b);
            }
            l_a = l_a * alpha_a + (s[0][0] + s[0][1] + s[1][0] + s[1][1]);
            l_b = l_b * alpha_b + (s[0][2] + s[0][3] + s[1][2] + s[1][3]);
            if moved {
                state::rescale_rows(&mut o, [alpha_a, alpha_b]);
            }
            if F::SCALED {
                #[allow(clippy::needless_range_loop)]
                for n in 0..2 {
                    for e in 0..4 {
                        s[n][e] *= vscale[n][e & 1];
                    }
                }
            }

            // P (C layout of two n8 tiles) is exactly an A fragment of m16k16.
            type H<F> = <F as KvFormat>::Compute;
            let pa = [
                H::<F>::pack(s[0][0], s[0][1]),
                H::<F>::pack(s[0][2], s[0][3]),
                H::<F>::pack(s[1][0], s[1][1]),
                H::<F>::pack(s[1][2], s[1][3]),
            ];
            for mp in 0..NT / 4 {
                let pair = F::v_fragment_pair::<D>(pipe.v_tile(stage), sub, mp as u32, lane);
                for (h, b) in pair.iter().enumerate() {
                    let np = 2 * mp + h;
                    o[2 * np] = F::Compute::mma(pa, [b[0], b[1]], o[2 * np]);
                    o[2 * np + 1] = F::Compute::mma(pa, [b[2], b[3]], o[2 * np + 1]);
                }
            }
            sub += p.warps_k * KEYS_PER_WARP_STEP;
        }
    }
    pipe.drain();

    let rows = [ra, rb];
    let store = |acc: u32, pitch: u32, scale: [f32; 2], add: bool, live: [bool; 2]| {
        if F::V_DIMS_INTERLEAVED {
            // Tiles 2m / 2m+1 hold the even / odd dims of 16m..16m+16:
            // this thread's four are the consecutive dims 16m + 4c ..+4.
            for m in 0..NT / 2 {
                let (even, odd) = (&o[2 * m], &o[2 * m + 1]);
                for (r, row) in rows.iter().enumerate() {
                    if !CLUSTER && !live[r] {
                        continue;
                    }
                    let addr = acc + 4 * (row.local * pitch + 16 * m as u32 + 4 * (lane % 4));
                    let sc = scale[r];
                    let mut v = [even[2 * r] * sc, odd[2 * r] * sc, even[2 * r + 1] * sc, odd[2 * r + 1] * sc];
                    if add {
                        let old = shared::ld_shared_v4_f32(addr);
                        v = [v[0] + old[0], v[1] + old[1], v[2] + old[2], v[3] + old[3]];
                    }
                    shared::st_shared_v4_f32(addr, v);
                }
            }
        } else {
            for (nt, frag) in o.iter().enumerate() {
                for (r, row) in rows.iter().enumerate() {
                    if !CLUSTER && !live[r] {
                        continue;
                    }
                    let addr = acc + 4 * (row.local * pitch + F::o_pair(nt as u32, lane % 4));
                    let mut v = [frag[2 * r] * scale[r], frag[2 * r + 1] * scale[r]];
                    if add {
                        let old = shared::ld_shared_v2_f32(addr);
                        v[0] += old[0];
                        v[1] += old[1];
                    }
                    shared::st_shared_v2_f32(addr, v);
                }
            }
        }
    };
    let (l_a, l_b) = (warp::quad_sum(l_a), warp::quad_sum(l_b));
    epilogue::<F, D, CLUSTER, { MAX_WARPS as usize }, 1, 1>(p, row0, warp_k, lane % 4 == 0, rows, [m_a, m_b], [l_a, l_b], smem, store);
}

/// Copies the block's Q rows (`warps_m * 16`, zero-filled past the last
/// row) into the swizzled shared tile at `q_tile`, in the first cp.async
/// group, which the first pipeline wait covers.
#[inline(always)]
unsafe fn stage_q<const D: usize>(p: &DecodeParams, batch: u32, kvh: u32, row0: u32, q_tile: u32, tid: u32, nthreads: u32) {
    let chunks_per_row = (D / 8) as u32;
    let rows_total = p.group * p.q_len;
    let mut c = tid;
    while c < p.warps_m * MMA_M * chunks_per_row {
        let local = c / chunks_per_row;
        let chunk = c % chunks_per_row;
        let global = row0 + local;
        let valid = local < p.rows_per_block && global < rows_total;
        let (token, head) = if valid { token_head(p, kvh, global) } else { (0, kvh * p.group) };
        let src = qo_row_addr::<D>(p.q, p, batch, token, head) + chunk as u64 * 16;
        memory::cp_async_16(q_tile + swizzled(local, chunk, (D * 2) as u32), src, if valid { 16 } else { 0 });
        c += nthreads;
    }
}

/// Converts the block's Q rows (`rows` of them, zeros past the last row)
/// from the query's type to the compute type into the shared tile, one warp
/// per row: each row is scaled by `2^(13 - ⌊log2 max|q|⌋)` (exact, and
/// below fp16's 65504), its inverse goes to `q_scales[row]`, and head dims
/// are stored in the order `F::k_fragment_pair` reads K in.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn convert_q<F: KvFormat, const D: usize>(p: &DecodeParams, batch: u32, kvh: u32, row0: u32, rows: u32, q_tile: u32, q_scales: u32, warp: u32, nwarps: u32, lane: u32) {
    let at = |r: u32, dim: u32| {
        let (kc, logical) = F::q_position(dim);
        q_tile + swizzled(r, 2 * kc + logical / 8, (D * 2) as u32) + 2 * (logical % 8)
    };
    convert_q_to::<F, D, 1>(p, batch, kvh, row0, rows, at, q_scales, warp, nwarps, lane)
}

/// [`convert_q`] into any layout: element (row, head dim) of the tile at
/// `at(row, dim)`. `BATCH`: rows per warp whose loads are all issued before
/// the first row is converted (each row's loads are a global round trip;
/// one at a time they were 6-12 % of a one-block-per-SM kernel's samples
/// on grid B); the warp's rows past `BATCH` go one at a time.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn convert_q_to<F: KvFormat, const D: usize, const BATCH: usize>(
    p: &DecodeParams,
    batch: u32,
    kvh: u32,
    row0: u32,
    rows: u32,
    at: impl Fn(u32, u32) -> u32,
    q_scales: u32,
    warp: u32,
    nwarps: u32,
    lane: u32,
) {
    const { assert!(D / 32 >= 2 && D % 32 == 0 && D <= 256 && BATCH >= 1) };
    let per_lane = (D / 32) as u32;
    let rows_total = p.group * p.q_len;
    let row_src = |r: u32| {
        let global = row0 + r;
        let valid = r < p.rows_per_block && global < rows_total;
        let (token, head) = if valid { token_head(p, kvh, global) } else { (0, kvh * p.group) };
        (valid, qo_row_addr::<D>(p.q, p, batch, token, head) + (lane * per_lane * 2) as u64)
    };
    // Converts row r from its words (2 per head dims 0..64, 64..128, …).
    let convert = |r: u32, words: [u32; 4]| {
        let mut x = [0f32; 8];
        let mut amax = 0f32;
        for w in 0..(D / 64) {
            let (a, b) = F::Query::unpack(words[w]);
            x[2 * w] = a;
            x[2 * w + 1] = b;
            amax = amax.max(a.abs()).max(b.abs());
        }
        let amax = warp::warp_max(amax);
        let (inv, scale) = q_row_scale(amax);
        #[allow(clippy::needless_range_loop)] // constant indices keep `x` in registers
        for j in 0..D / 32 {
            shared::st_shared_u16(at(r, lane * per_lane + j as u32), F::Compute::pack(x[j] * inv, 0.0));
        }
        if lane == 0 {
            shared::st_shared_f32(q_scales + 4 * r, scale);
        }
    };
    let mut r = warp;
    if BATCH > 1 {
        // The warp's first `BATCH` rows: every load first, then the rows
        // (constant indices keep the words in registers).
        let mut early = [[0u32; 4]; BATCH];
        unrolled::<BATCH>(|i| {
            let (valid, src) = row_src(warp + i as u32 * nwarps);
            if warp + (i as u32) * nwarps < rows && valid {
                for j in 0..D / 64 {
                    early[i][j] = memory::ld_global_nc_u32(src + 4 * j as u64);
                }
            }
        });
        unrolled::<BATCH>(|i| {
            if warp + (i as u32) * nwarps < rows {
                convert(warp + i as u32 * nwarps, early[i]);
            }
        });
        r += BATCH as u32 * nwarps;
    }
    // (Rows one at a time stay written out as they were: the kernels at
    // their register caps are laid out around them.)
    while r < rows {
        let (valid, src) = row_src(r);
        let mut x = [0f32; 8];
        let mut amax = 0f32;
        for w in 0..(D / 64) {
            let (a, b) = if valid { F::Query::unpack(memory::ld_global_nc_u32(src + 4 * w as u64)) } else { (0.0, 0.0) };
            x[2 * w] = a;
            x[2 * w + 1] = b;
            amax = amax.max(a.abs()).max(b.abs());
        }
        let amax = warp::warp_max(amax);
        let (inv, scale) = q_row_scale(amax);
        #[allow(clippy::needless_range_loop)] // constant indices keep `x` in registers
        for j in 0..D / 32 {
            let v = x[j];
            shared::st_shared_u16(at(r, lane * per_lane + j as u32), F::Compute::pack(v * inv, 0.0));
        }
        if lane == 0 {
            shared::st_shared_f32(q_scales + 4 * r, scale);
        }
        r += nwarps;
    }
}

/// `f(0)`, …, `f(N - 1)`, each call with a constant index (a loop that the
/// compiler leaves rolled indexes its arrays, which then go to the stack).
#[inline(always)]
fn unrolled<const N: usize>(mut f: impl FnMut(usize)) {
    const { assert!(N <= 8) };
    macro_rules! at {
        ($($i:literal)*) => {$(
            if $i < N {
                f($i);
            }
        )*};
    }
    at!(0 1 2 3 4 5 6 7);
}

/// The power of two a converted Q row is multiplied by (`inv`, so that its
/// largest magnitude `amax` lands near 2^13 in 16 bits) and its inverse,
/// the row's scale.
#[inline(always)]
fn q_row_scale(amax: f32) -> (f32, f32) {
    if amax > 0.0 {
        let e = (amax.to_bits() >> 23) & 0xFF;
        let inv = f32::from_bits((267u32.saturating_sub(e)).clamp(1, 254) << 23);
        (inv, 1.0 / inv)
    } else {
        (1.0, 1.0)
    }
}

/// A fragment of Q rows `16 * warp_m ..` and head dims `16 * kc ..` from the
/// shared tile written by [`stage_q`] or [`convert_q`].
#[inline(always)]
unsafe fn q_fragment<const D: usize>(q_tile: u32, warp_m: u32, kc: u32, lane: u32) -> [u32; 4] {
    // Matrix j = lane / 8: rows (j % 2) * 8 .. +8, dims 16 kc + (j / 2) * 8 .. +8.
    let j = lane / 8;
    let row = warp_m * MMA_M + (j % 2) * 8 + lane % 8;
    mma::ldmatrix_x4(q_tile + swizzled(row, kc * 2 + j / 2, (D * 2) as u32))
}

/// Query rows of the block whose first row is `row0` (the last row chunk
/// may hold fewer than `rows_per_block`).
#[inline(always)]
fn rows_here(p: &DecodeParams, row0: u32) -> u32 {
    let rows_total = p.group * p.q_len;
    if rows_total - row0 < p.rows_per_block {
        rows_total - row0
    } else {
        p.rows_per_block
    }
}

/// Merges the `warps_k` states of each row in shared memory (the pipeline's
/// buffers are free now) and writes the block's rows. Each thread holds two
/// rows' states (`m`, `l`: equal on every lane that holds the row, the
/// `publisher` lanes write them); `store(acc, pitch, scale, add, live)` writes
/// (or adds) its accumulators, times each row's `scale`, into the fp32 rows
/// at `acc`, which have `pitch` floats, for the rows that are `live` (rows
/// past the block's last are never read: an MHA block's 16-row tile holds
/// one).
///
/// `HG` > 1: a narrow block of `HG` adjacent kv heads. Head `s`'s rows are
/// the block's rows `8 s ..` (`RowInfo::local`; the 16-row tile of the
/// narrow kernel has room for two heads' 8), `warp_k` and `p.warps_k`
/// count one head's warps, and the block writes its outputs directly (the
/// planner gives head pairs unsplit work only).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn epilogue<F: KvFormat, const D: usize, const CLUSTER: bool, const WARPS_K: usize, const OUT_BATCH: usize, const HG: u32>(
    p: &DecodeParams,
    row0: u32,
    warp_k: u32,
    publisher: bool,
    rows: [RowInfo; 2],
    m: [f32; 2],
    l: [f32; 2],
    smem: u32,
    store: impl Fn(u32, u32, [f32; 2], bool, [bool; 2]),
) {
    const { assert!(HG == 1 || (!CLUSTER && OUT_BATCH == 1 && HG * NARROW_ROWS <= MMA_M)) };
    let tid = thread::thread_idx_x();
    let nthreads = thread::block_dim_x();
    let block_rows = p.warps_m * MMA_M;
    let pitch = acc_pitch(D as u32);
    let acc = smem;
    let m_smem = acc + 4 * block_rows * pitch;
    let l_smem = m_smem + 4 * p.warps_k * block_rows;
    let fin_smem = l_smem + 4 * p.warps_k * block_rows;

    // Where the block's shared memory has room for one slice per warp past
    // the row states (it is free after the key loop), every warp stores its
    // tile at once and the output loop adds the slices in warp order, the
    // same sums as one warp at a time, with one barrier instead of
    // `warps_k` (the cluster kernels keep the loop: their merge reads one
    // summed tile).
    let slice = if HG == 1 { p.rows_per_block * pitch } else { block_rows * pitch };
    let slices = fin_smem + 8 * block_rows;
    let parallel = !CLUSTER && p.warps_k > 1 && slices + 4 * (p.warps_k - 1) * slice <= smem + p.item_smem;
    let slice_at = |k: u32| if k == 0 { acc } else { slices + 4 * (k - 1) * slice };
    // `fused` (the wide and narrow kernels, up to 8 warps along K, with
    // every slice in room): each warp stores its accumulator unscaled beside
    // its row states, and the output loop combines the states of its row
    // and scales the slices itself (the same factors, products and sums in
    // the same order). The `!fused` pass — every thread combining both its
    // rows' states between two barriers before the stores — took 0.4 µs of
    // a D (64, 128) block's 1.2 µs epilogue (per-block timestamps); fused,
    // the small 16-bit rows ran 0.1-0.3 µs and narrow int4 grid A 1 %
    // faster (docs/perf.md, twenty-second session).
    // The wgmma kernels (two warpgroups, `OUT_BATCH` quads a round) take
    // the fused path too, batched; the unspecialised quantized ones (one
    // quad a round at their 128-register cap) keep the states pass.
    let fused = (WARPS_K > 2 || OUT_BATCH > 1) && parallel;

    if publisher {
        for (r, row) in rows.iter().enumerate() {
            shared::st_shared_f32(m_smem + 4 * (warp_k * block_rows + row.local), m[r]);
            shared::st_shared_f32(l_smem + 4 * (warp_k * block_rows + row.local), l[r]);
        }
    }
    let mut my_scale = [1f32; 2];
    if !fused {
        thread::sync_threads();

        // Each thread merges its two rows' states over warps_k (no sync). With
        // up to 8 warps along K (the wide and narrow kernels) every warp's
        // (m, l) of both rows is loaded first (an unrolled loop), then
        // combined: loaded where they were combined, each load's latency was
        // waited out in turn, 0.6-0.8 µs of every block's epilogue
        // (docs/perf.md, nineteenth session); slots past `warps_k` stay
        // (-inf, 0), which add nothing. The wgmma kernels (2 warpgroups) keep
        // the loop: their quantized ones, at 128 registers, spilled with the
        // states loaded first.
        let mut ms = [[f32::NEG_INFINITY; WARPS_K]; 2];
        let mut ls = [[0f32; WARPS_K]; 2];
        if WARPS_K > 2 {
            for k in 0..WARPS_K {
                if (k as u32) < p.warps_k {
                    for (r, row) in rows.iter().enumerate() {
                        let at = 4 * (k as u32 * block_rows + row.local);
                        ms[r][k] = shared::ld_shared_f32(m_smem + at);
                        ls[r][k] = shared::ld_shared_f32(l_smem + at);
                    }
                }
            }
        }
        for (r, row) in rows.iter().enumerate() {
            let (big_m, big_l) = if WARPS_K > 2 {
                let big_m = ms[r].iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                (big_m, (0..WARPS_K).fold(0f32, |acc, k| acc + ls[r][k] * state::rescale(ms[r][k], big_m)))
            } else {
                let mut big_m = f32::NEG_INFINITY;
                for k in 0..p.warps_k {
                    big_m = big_m.max(shared::ld_shared_f32(m_smem + 4 * (k * block_rows + row.local)));
                }
                let mut big_l = 0f32;
                for k in 0..p.warps_k {
                    let mk = shared::ld_shared_f32(m_smem + 4 * (k * block_rows + row.local));
                    big_l += shared::ld_shared_f32(l_smem + 4 * (k * block_rows + row.local)) * state::rescale(mk, big_m);
                }
                (big_m, big_l)
            };
            my_scale[r] = state::rescale(m[r], big_m);
            if warp_k == 0 && publisher {
                let (inv_l, lse) = state::finish(big_m, big_l);
                shared::st_shared_v2_f32(fin_smem + 8 * row.local, [inv_l, lse]);
            }
        }
    }

    // Sum the warps' rescaled accumulators (deterministically, in warp
    // order), storing only the block's live rows. The cluster kernels store
    // every row and compute nothing for the test (hence `!CLUSTER &&` in the
    // `store` closures too): with it, ptxas allocated the whole narrow
    // int4-g32 cluster kernel's registers differently and grid A B=128 ran
    // 3 % slower, its key loop unchanged; its rows are all live there.
    let live = if CLUSTER {
        [true; 2]
    } else {
        let rows_here = rows_here(p, row0);
        // (A head pair's second head's rows are 8 on: its row within the head.)
        let in_head = |local: u32| if HG == 1 { local } else { local % NARROW_ROWS };
        [in_head(rows[0].local) < rows_here, in_head(rows[1].local) < rows_here]
    };
    // (One call of `store`: a second one left the closure out of line and
    // the accumulators in local memory.)
    let rounds = if parallel { 1 } else { p.warps_k };
    for k in 0..rounds {
        if parallel || warp_k == k {
            let (at, add) = if parallel { (slice_at(warp_k), false) } else { (acc, k > 0) };
            store(at, pitch, my_scale, add, live);
        }
        thread::sync_threads();
    }

    // The work item's sequence and partial slot (`keep_item`).
    let [batch, partial_slot] = shared::ld_shared_v2_u32(smem + p.item_smem);
    let kvh = block_first_head::<CLUSTER, HG>(p);
    let rows_here = rows_here(p, row0);
    // Output row `i` (of `HG · rows_here`): its head's index in the block
    // and its row in that head.
    let head_row = |i: u32| if HG == 1 { (0, i) } else { div_rem(i, rows_here) };
    if CLUSTER && partial_slot != DIRECT_OUTPUT {
        let seq_len = shared::ld_shared_u32(smem + p.item_smem + 8);
        let rows = cluster::BlockRows { acc, pitch, fin: fin_smem, row0, rows_here, kvh, batch };
        cluster::merge_in_cluster::<F::Query, D>(p, &rows, seq_len);
        return;
    }
    // A merge kernel launched after this grid (programmatic dependent
    // launch) may be scheduled once every block got here: its blocks then
    // take the SMs this grid's blocks leave, with no launch gap, and wait
    // for the partials themselves (`griddepcontrol.wait`). (Triggered at
    // block start instead, the merge blocks were packed onto the few SMs
    // free at that moment: grid B (128K, 2) +4 µs, docs/perf.md.)
    if !CLUSTER {
        thread::launch_dependents();
    }
    // The output loop takes `OUT_BATCH` of the thread's quads per round and
    // issues all their shared-memory loads (the accumulator, every warp's
    // slice, the row's finish) before using any: one quad at a time, each
    // round waited out its loads' latency in turn (the per-block
    // timestamps: 1.5 µs of grid B's 2.6 µs epilogue; docs/perf.md,
    // nineteenth and twenty-first sessions). The wgmma kernels (48-64 rows
    // a block, 6-8 quads a thread) take 4; the wide and narrow ones (1-16
    // live rows, at most 4 quads a thread) keep the loop as it was (1):
    // with 4 their grid D (64, 128) read 1 µs slower. So do the
    // unspecialised quantized wgmma kernels, which any change to the loop
    // spilled at their 128-register cap.
    let quads_per_row = (D / 4) as u32;
    if fused && OUT_BATCH == 1 {
        let mut idx = tid;
        while idx < HG * rows_here * quads_per_row {
            let (slot, row) = head_row(idx / quads_per_row);
            let r = slot * NARROW_ROWS + row;
            let c = (idx % quads_per_row) * 4;
            // The row's states, every load issued before any use (slots
            // past `warps_k` stay (-inf, 0): factor 0, adding nothing).
            let mut ms = [f32::NEG_INFINITY; WARPS_K];
            let mut ls = [0f32; WARPS_K];
            for k in 0..WARPS_K {
                if (k as u32) < p.warps_k {
                    ms[k] = shared::ld_shared_f32(m_smem + 4 * (k as u32 * block_rows + r));
                    ls[k] = shared::ld_shared_f32(l_smem + 4 * (k as u32 * block_rows + r));
                }
            }
            let at = 4 * (r * pitch + c);
            let (v, fin) = combine_slices(p.warps_k, &ms, &ls, |k| shared::ld_shared_v4_f32(slice_at(k as u32) + at));
            emit_quad::<F, D>(p, batch, kvh + slot, row0 + row, partial_slot, c, v, fin);
            idx += nthreads;
        }
    }
    if OUT_BATCH == 1 && !fused {
        let mut idx = tid;
        while idx < HG * rows_here * quads_per_row {
            let (slot, row) = head_row(idx / quads_per_row);
            let r = slot * NARROW_ROWS + row;
            let c = (idx % quads_per_row) * 4;
            let mut v = shared::ld_shared_v4_f32(acc + 4 * (r * pitch + c));
            if parallel {
                for k in 1..p.warps_k {
                    let w = shared::ld_shared_v4_f32(slice_at(k) + 4 * (r * pitch + c));
                    v = [v[0] + w[0], v[1] + w[1], v[2] + w[2], v[3] + w[3]];
                }
            }
            let fin = shared::ld_shared_v2_f32(fin_smem + 8 * r);
            emit_quad::<F, D>(p, batch, kvh + slot, row0 + row, partial_slot, c, v, fin);
            idx += nthreads;
        }
    }
    if fused && OUT_BATCH > 1 {
        // As the loop above, `OUT_BATCH` quads a round: every state and
        // slice load of the round issued before any use.
        let total = rows_here * quads_per_row;
        let mut first = tid;
        while first < total {
            let idx = core::array::from_fn::<u32, OUT_BATCH, _>(|u| first + u as u32 * nthreads);
            let (row, col) = (idx.map(|i| i / quads_per_row), idx.map(|i| (i % quads_per_row) * 4));
            let at = core::array::from_fn::<u32, OUT_BATCH, _>(|u| 4 * (row[u] * pitch + col[u]));
            let live = |u: usize| u == 0 || idx[u] < total;
            let mut ms = [[f32::NEG_INFINITY; WARPS_K]; OUT_BATCH];
            let mut ls = [[0f32; WARPS_K]; OUT_BATCH];
            let mut sk = [[[0f32; 4]; WARPS_K]; OUT_BATCH];
            for u in 0..OUT_BATCH {
                if live(u) {
                    for k in 0..WARPS_K {
                        if (k as u32) < p.warps_k {
                            ms[u][k] = shared::ld_shared_f32(m_smem + 4 * (k as u32 * block_rows + row[u]));
                            ls[u][k] = shared::ld_shared_f32(l_smem + 4 * (k as u32 * block_rows + row[u]));
                            sk[u][k] = shared::ld_shared_v4_f32(slice_at(k as u32) + at[u]);
                        }
                    }
                }
            }
            for u in 0..OUT_BATCH {
                if !live(u) {
                    break;
                }
                let (v, fin) = combine_slices(p.warps_k, &ms[u], &ls[u], |k| sk[u][k]);
                emit_quad::<F, D>(p, batch, kvh, row0 + row[u], partial_slot, col[u], v, fin);
            }
            first += OUT_BATCH as u32 * nthreads;
        }
    }
    if OUT_BATCH > 1 && !fused {
        let total = rows_here * quads_per_row;
        let mut first = tid;
        while first < total {
            let idx = core::array::from_fn::<u32, OUT_BATCH, _>(|u| first + u as u32 * nthreads);
            let at = idx.map(|i| 4 * ((i / quads_per_row) * pitch + (i % quads_per_row) * 4));
            // (In the order one quad at a time took them: the accumulator, the
            // slices, the finish.)
            let live = |u: usize| u == 0 || idx[u] < total;
            let mut v = [[0f32; 4]; OUT_BATCH];
            for u in 0..OUT_BATCH {
                if live(u) {
                    v[u] = shared::ld_shared_v4_f32(acc + at[u]);
                }
            }
            if parallel {
                for k in 1..p.warps_k {
                    for u in 0..OUT_BATCH {
                        if live(u) {
                            let w = shared::ld_shared_v4_f32(slice_at(k) + at[u]);
                            v[u] = [v[u][0] + w[0], v[u][1] + w[1], v[u][2] + w[2], v[u][3] + w[3]];
                        }
                    }
                }
            }
            let mut fin = [[0f32; 2]; OUT_BATCH];
            for u in 0..OUT_BATCH {
                if live(u) {
                    fin[u] = shared::ld_shared_v2_f32(fin_smem + 8 * (idx[u] / quads_per_row));
                }
            }
            for u in 0..OUT_BATCH {
                if !live(u) {
                    break;
                }
                let (r, c) = (idx[u] / quads_per_row, (idx[u] % quads_per_row) * 4);
                emit_quad::<F, D>(p, batch, kvh, row0 + r, partial_slot, c, v[u], fin[u]);
            }
            first += OUT_BATCH as u32 * nthreads;
        }
    }
    if HG == 1 && partial_slot != DIRECT_OUTPUT && p.merge_counters != 0 {
        // The accumulator rows were read above; its first word is free.
        crate::merge::merge_if_last::<F::Query, D, CLUSTER>(p, batch, rows_here, acc);
    }
}

/// The fused epilogue's output quad of one row: the warps' row states
/// (`ms`, `ls`; slots past `warps_k` are (-inf, 0)) combined into the
/// row's finish [1 / l, lse], and the warps' unscaled slices of the quad
/// (`slice(k)`, called for `k < warps_k` only) scaled by their factors and
/// added in warp order.
#[inline(always)]
fn combine_slices<const WARPS_K: usize>(warps_k: u32, ms: &[f32; WARPS_K], ls: &[f32; WARPS_K], slice: impl Fn(usize) -> [f32; 4]) -> ([f32; 4], [f32; 2]) {
    let big_m = ms.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let big_l = (0..WARPS_K).fold(0f32, |a, k| a + ls[k] * state::rescale(ms[k], big_m));
    let (inv_l, lse) = state::finish(big_m, big_l);
    let mut v = [0f32; 4];
    for k in 0..WARPS_K {
        if (k as u32) < warps_k {
            let w = state::rescale(ms[k], big_m);
            let s = slice(k);
            let s = [s[0] * w, s[1] * w, s[2] * w, s[3] * w];
            v = if k == 0 { s } else { [v[0] + s[0], v[1] + s[1], v[2] + s[2], v[3] + s[3]] };
        }
    }
    (v, [inv_l, lse])
}

/// One output quad of the epilogue: values `c .. c + 4` of the block's
/// packed row `global` (its accumulator sum `v`, its finish `fin` =
/// [1 / l, lse]), scaled and stored to O, or with the row's lse to the
/// work item's partial slot.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn emit_quad<F: KvFormat, const D: usize>(p: &DecodeParams, batch: u32, kvh: u32, global: u32, partial_slot: u32, c: u32, v: [f32; 4], fin: [f32; 2]) {
    let (token, head) = token_head(p, kvh, global);
    let v = [v[0] * fin[0], v[1] * fin[0], v[2] * fin[0], v[3] * fin[0]];
    if partial_slot == DIRECT_OUTPUT {
        let addr = qo_row_addr::<D>(p.o, p, batch, token, head) + c as u64 * 2;
        type H<F> = <F as KvFormat>::Query;
        memory::st_global_v2_u32(addr, [H::<F>::pack(v[0], v[1]), H::<F>::pack(v[2], v[3])]);
    } else {
        let row = (partial_slot as u64 * p.q_len as u64 + token as u64) * p.num_q_heads as u64 + head as u64;
        memory::st_global_v4_f32(p.partial_o + 4 * (row * D as u64 + c as u64), v);
        if c == 0 {
            memory::st_global_f32(p.partial_lse + 4 * row, fin[1]);
        }
    }
}
