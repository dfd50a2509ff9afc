//! The wgmma family (`Family::Wgmma`): the wide family's geometry —
//! query rows along M, keys along N — on Hopper's warpgroup MMA.
//!
//! A block is `warps_k` warpgroups of 4 warps. Warpgroup `wk` takes the
//! 32-key steps `wk, wk + warps_k, …` of every stage, and computes each
//! step for all 64 rows of the block at once: `S = Q·Kᵀ` with Q and K read
//! from shared memory by the tensor cores, an online softmax in registers
//! (warp `w % 4` holds rows `16 (w % 4) ..+16` in the `mma.m16n8k16` C
//! layout, exactly as a wide warp does), then `O += P·V` with P from
//! registers and V from shared memory. Each K and V byte in shared memory
//! is read once per warpgroup instead of once per 16-row warp (the wide
//! kernel's `ldmatrix`), which is what limits the wide kernel on grid B's
//! 48 rows. The Q tile (first in shared memory) and the stages after it
//! are laid out as `Swizzle128`; the epilogue is the wide family's
//! (`warps_m` = 4).
//!
//! Quantized caches land in their stages as plain rows (by bulk copies
//! when strided, `decode::pipeline`); before each step a warpgroup
//! converts its 32 keys into its half of two 16-bit tiles
//! (`KvFormat::stage_to_half`, each byte once per block where the wide
//! kernel converts it once per 16-row warp), fences them for the
//! tensor cores and meets at a named barrier; Q is converted once (as the
//! wide kernel does, per row scaled by a power of two) and the scales int8
//! keeps per row multiply the score columns (K) and P (V).

use decode_attn_abi::{q_converted, wgmma_prefix_bytes, wgmma_producer_stages, wgmma_specializable, DecodeParams, WGMMA_PRODUCER_STAGES, WGMMA_CONVERTED_BUFFERS, WGMMA_KEYS, WGMMA_M};

use super::pipeline::Pipeline;
use super::block::{block_kv_head, block_work, keep_item, keep_seq_len, kept_batch, mask_from, qo_row_addr, row_info, row_pair, token_head};
use super::epilogue::{epilogue, OUT_BATCH, SPECIALIZED_OUT_BATCH};
use super::query::convert_q_to;
use crate::arch::wgmma::descriptor;
use crate::arch::{math::ex2, math::fma, mbarrier, memory, shared, thread, warp};
use crate::format::{Half, KvFormat, Swizzle128, TileLayout, HALF_TILE};
use crate::state;
use crate::variant::{self, AttentionVariant, Rows};

/// Score tiles (n8) of one 32-key step.
const STEP_TILES: usize = (WGMMA_KEYS / 8) as usize;

/// Score tiles (n8) of one 64-key step: a warp-specialised kernel's
/// warpgroups take whole stages (half the steps' fixed work a key).
const STAGE_TILES: usize = 2 * STEP_TILES;

/// Most compute warpgroups of a block (one per 32-key step of a 64-key
/// stage): the epilogue's bound on the row states it combines.
const WGMMA_WARPS_K: usize = (WGMMA_M / WGMMA_KEYS) as usize;

/// # Safety
/// Launched by the host with the planner's grid, block (`warps_m` = 4) and
/// shared memory, on buffers it validated.
#[inline(always)]
pub unsafe fn decode_wgmma<F: KvFormat, V: AttentionVariant, const D: usize, const PAGED: bool, const CLUSTER: bool, const SPECIALIZED: bool>(p: &DecodeParams) {
    const { assert!(D == 128 && (!SPECIALIZED || wgmma_specializable(F::FORMAT, PAGED))) };
    if SPECIALIZED {
        return decode_wgmma_specialized::<F, V, D, CLUSTER>(p);
    }
    type Pipe<'a, F, const D: usize, const PAGED: bool, const CLUSTER: bool> = Pipeline<'a, F, D, PAGED, true, CLUSTER, true>;
    let cfg = Pipe::<F, D, PAGED, CLUSTER>::CFG;
    let convert = const { q_converted(F::FORMAT) };

    let tid = thread::thread_idx_x();
    let nthreads = thread::block_dim_x();
    let lane = tid % 32;
    let warp = tid / 32;
    let warp_m = warp % 4;
    let warp_k = warp / 4;

    V::prefetch_heads(p);
    let Some((item, seq_len, seq_first)) = block_work::<V, CLUSTER>(p) else { return };
    keep_item(p, &item, tid);
    let batch = item.batch;
    let kvh = block_kv_head::<CLUSTER>(p);
    let row0 = thread::block_idx_z() * p.rows_per_block;

    let g = lane / 4;
    let c2 = (lane % 4) * 2;
    // The rows after the first copies for 16-bit caches, as the wide kernel
    // (`decode::decode_wide`) has them; converting kernels keep them here (later,
    // their held values spilled at the 128-register cap).
    let rows = || row_pair(p, &item, seq_len, kvh, row0, warp_m * 16 + g);
    let early_rows = convert.then(rows);

    // The Q tile first, then (quantized formats) the converted K and V
    // tiles and the Q scales, then the stages: the tiles on 1024-byte
    // boundaries (the swizzle's period; the dynamic shared memory base is
    // one).
    let smem = shared::dynamic_smem_base();
    let tile_bytes = WGMMA_M * (D as u32) * 2;
    let q_tile = smem;
    let (k_half, v_half, q_scales) = (smem + tile_bytes, smem + 2 * tile_bytes, smem + 3 * tile_bytes);
    const { assert!(Pipe::<F, D, PAGED, CLUSTER>::CFG.keys_per_stage == WGMMA_M) };
    if !convert {
        stage_q::<D>(p, batch, kvh, row0, q_tile, tid, nthreads);
    }
    let pipe = Pipe::<F, D, PAGED, CLUSTER>::new(p, item, kvh, smem + const { wgmma_prefix_bytes(F::FORMAT, D as u32, false) });
    pipe.prefetch();
    keep_seq_len::<CLUSTER>(p, seq_len, tid);
    let [ra, rb] = early_rows.unwrap_or_else(rows);

    if convert {
        let at = #[inline(always)] |r: u32, dim: u32| q_tile + HALF_TILE.at(r, dim / 8, 0) + 2 * (dim % 8);
        convert_q_to::<F, D, 1>(p, batch, kvh, row0, WGMMA_M, at, q_scales, warp, nthreads / 32, lane);
        // (The first stage's barrier orders these stores before the MMAs.)
        shared::fence_proxy_async_shared();
    }

    let mask_from = mask_from::<V>(p, &item, seq_len);
    // Groups of 8 rows (or keys) are 1024 bytes apart; V's two column
    // blocks (dims 0..64, 64..128) a tile's 64 rows × 128 bytes.
    let q_desc = descriptor(q_tile, 16, 1024);
    let column = WGMMA_M * 128;

    let mut o = [[0f32; 4]; 16];
    let mut m = [f32::NEG_INFINITY; 2];
    let mut l = [0f32; 2];
    let kt = cfg.keys_per_stage;
    for t in 0..pipe.n_tiles {
        let stage = pipe.advance(t);
        let tile_first = item.kv_start + t * kt;
        // Uniform over the warpgroup: its MMAs are issued by all 4 warps.
        let mut sub = warp_k * WGMMA_KEYS;
        // Converting warpgroups take every step of the stage, past the
        // item's end too (converting and computing nothing there), so both
        // meet their named barrier equally often: with the counts apart,
        // compute-sanitizer's racecheck reported the epilogue's shared
        // accesses, ordered by full barriers, as hazards.
        while sub < kt && (convert || tile_first + sub < item.kv_end) {
            let key0 = tile_first + sub;
            let live = !convert || key0 < item.kv_end;
            let (k_rows, v_rows) = if convert {
                // A later step of the stage first waits for the group's
                // MMAs on its rows (the stage's barrier covered the first).
                // This warpgroup's 32 rows of the converted tiles, and its barrier.
                let (half_rows, group_barrier) = (warp_k * WGMMA_KEYS, 1 + warp_k);
                if sub != half_rows {
                    thread::sync_named(group_barrier, 128);
                }
                // (The thread's conversion addresses are recomputed at each
                // step: held, they pushed the cluster kernels past 128
                // registers.)
                if live {
                    F::stage_to_half::<D, false, 1>(pipe.tiles(stage), sub, item.kv_end - tile_first, k_half, v_half, half_rows, thread::opaque(tid) % 128);
                    shared::fence_proxy_async_shared();
                }
                thread::sync_named(group_barrier, 128);
                let at = (half_rows / 8) * 1024;
                (k_half + at, v_half + at)
            } else {
                let at = (sub / 8) * 1024;
                (pipe.k_tile(stage) + at, pipe.v_tile(stage) + at)
            };
            if live {
                // (The scales's addresses are formed here, as before the
                // step was a function: the paged quantized kernels sit at
                // their 128-register cap.)
                let (k_scales, v_scales) = if F::SCALED { (pipe.k_scales(stage) + 4 * sub, pipe.v_scales(stage) + 4 * sub) } else { (0, 0) };
                let fold = V::LINEAR_IN_SCALE && convert && !(CLUSTER && F::SCALED);
                let ops = StepOperands { k: descriptor(k_rows, 16, 1024), v: descriptor(v_rows, column, 1024), k_scales, v_scales, key0 };
                let view = RowView { warp_m, g, c2, rows: Rows { tokens: [ra.token, rb.token], heads: [ra.head, rb.head], limits: [ra.limit, rb.limit], seq_len, mask_from }, seq_first };
                step::<F, V, STEP_TILES>(p, q_desc, q_scales, convert, fold, &ops, &view, &mut o, &mut m, &mut l);
            }
            sub += p.warps_k * WGMMA_KEYS;
        }
    }
    pipe.drain();

    let rows = [ra, rb];
    // The lane's quad position afresh (held from the start, it was the
    // value the quantized cluster kernels spilled).
    let quad = thread::opaque(tid) % 4;
    // V's rows are in head-dim order here (converted ones too): n8 tile
    // `nt` holds dims 8 nt .., this thread two adjacent ones.
    let store = |acc: u32, pitch: u32, scale: [f32; 2], add: bool, live: [bool; 2]| {
        for (nt, frag) in o.iter().enumerate() {
            for (r, row) in rows.iter().enumerate() {
                if !CLUSTER && !live[r] {
                    continue;
                }
                let addr = acc + 4 * (row.local * pitch + 8 * nt as u32 + 2 * quad);
                let mut v = [frag[2 * r] * scale[r], frag[2 * r + 1] * scale[r]];
                if add {
                    let old = shared::ld_shared_v2_f32(addr);
                    v[0] += old[0];
                    v[1] += old[1];
                }
                shared::st_shared_v2_f32(addr, v);
            }
        }
    };
    let l = l.map(warp::quad_sum);
    // (The warpgroup afresh too, for the same reason.)
    // (At their 128-register cap the quantized kernels output one quad per
    // round: `OUT_BATCH` spilled them.)
    if const { F::FORMAT.is_quantized() } {
        epilogue::<F, V, D, CLUSTER, WGMMA_WARPS_K, 1, 1>(p, row0, thread::opaque(tid) / 128, quad == 0, rows, m, l, smem, store);
    } else {
        epilogue::<F, V, D, CLUSTER, WGMMA_WARPS_K, OUT_BATCH, 1>(p, row0, thread::opaque(tid) / 128, quad == 0, rows, m, l, smem, store);
    }
}

/// The warp-specialised form of [`decode_wgmma`] for strided quantized
/// caches (`decode_attn_abi::wgmma_specializable`): after the `warps_k`
/// compute warpgroups comes a producer warpgroup, which
/// - issues every stage's bulk copies from its first warp, all
///   `wgmma_producer_stages` ahead, and waits for them on the stage's barrier;
/// - converts each 32-key half of a stage into a converted buffer's half
///   (`KvFormat::stage_to_half`), copies the keys' scales beside it, fences
///   the tiles for the tensor cores and arrives on the half's "full"
///   barrier;
/// - refills a raw stage once its 128 threads have arrived on the stage's
///   "consumed" barrier, and reuses a converted half once its warpgroup
///   arrived on the half's "empty" barrier.
///
/// Compute warpgroup `wk` takes the stages `t ≡ wk (mod warps_k)` whole, in
/// one 64-key step each, waiting on both halves' "full" and handing them
/// back on "empty" after its P·V MMAs completed. With four converted
/// buffers the producer converts a stage while the previous ones are
/// computed: no compute warp copies,
/// converts or meets the producer at a block barrier inside the key loop
/// (in the unspecialised kernel, the copies' issue and the conversion were
/// half of every warp's instructions, docs/perf.md, "Warp-specialised
/// quantized wgmma"). All warps meet at the
/// block barriers after the barriers' initialisation and in the epilogue,
/// and only there (the compute warps convert Q and meet on an `mbarrier`
/// of their own): inside
/// the key loop every hand-over is an `mbarrier` (with a named barrier for
/// the producer's refill, the warps met the block barriers after
/// different counts of barriers, which compute-sanitizer's racecheck
/// reported as hazards between the conversion's and the epilogue's
/// stores). A last stage's half past the item's end is converted and
/// computed too (masked, its scales zero).
#[inline(always)]
unsafe fn decode_wgmma_specialized<F: KvFormat, V: AttentionVariant, const D: usize, const CLUSTER: bool>(p: &DecodeParams) {
    type Pipe<'a, F, const D: usize, const CLUSTER: bool> = Pipeline<'a, F, D, false, true, CLUSTER, true>;
    const { assert!(Pipe::<F, D, CLUSTER>::CFG.keys_per_stage == 2 * WGMMA_KEYS) };
    let tid = thread::thread_idx_x();
    let lane = tid % 32;
    let warp = tid / 32;
    let warp_m = warp % 4;
    let group = warp / 4;
    let producer = group >= p.warps_k;

    V::prefetch_heads(p);
    let Some((item, seq_len, seq_first)) = block_work::<V, CLUSTER>(p) else { return };
    keep_item(p, &item, tid);
    let kvh = block_kv_head::<CLUSTER>(p);
    let row0 = thread::block_idx_z() * p.rows_per_block;
    let g = lane / 4;
    let c2 = (lane % 4) * 2;
    // The rows first: after the producer's first copies they measured no
    // faster here (−0.5 … +1.4 % on grid B int8 / int4-g32, docs/perf.md,
    // "Block prologue"). Written out, not `row_pair`: through it LLVM
    // ordered this kernel's prologue differently.
    let ra = row_info(p, &item, seq_len, kvh, row0, warp_m * 16 + g);
    let rb = row_info(p, &item, seq_len, kvh, row0, warp_m * 16 + g + 8);

    // Shared memory (`decode_attn_abi::wgmma_prefix_bytes`): the Q tile,
    // the converted buffers' K and V tiles, the Q scales, the buffers'
    // row scales, their barriers, then the stages (their barriers last
    // before them).
    let smem = shared::dynamic_smem_base();
    let tile_bytes = WGMMA_M * (D as u32) * 2;
    let q_tile = smem;
    let k_half = |b: u32| smem + tile_bytes * (1 + 2 * b);
    let v_half = |b: u32| smem + tile_bytes * (2 + 2 * b);
    let q_scales = smem + tile_bytes * (1 + 2 * WGMMA_CONVERTED_BUFFERS);
    // K's scales of buffer b, V's `4 * WGMMA_M` bytes on.
    let row_scales = |b: u32| q_scales + 4 * WGMMA_M + 8 * WGMMA_M * b;
    let slot_barriers = row_scales(WGMMA_CONVERTED_BUFFERS);
    let full = |b: u32| slot_barriers + 8 * b;
    let empty = |b: u32| full(b) + 8 * WGMMA_CONVERTED_BUFFERS;
    let consumed = |stage: u32| slot_barriers + 8 * (2 * WGMMA_CONVERTED_BUFFERS + stage);
    // (After the most stages' barriers: the block layout is the format's.)
    let q_ready = consumed(WGMMA_PRODUCER_STAGES);
    let stages = const { wgmma_producer_stages(F::FORMAT) };
    let pipe = Pipe::<F, D, CLUSTER>::new(p, item, kvh, smem + const { wgmma_prefix_bytes(F::FORMAT, D as u32, true) });

    if tid == 0 {
        pipe.init_bulk_barriers();
        for b in 0..WGMMA_CONVERTED_BUFFERS {
            mbarrier::init_count(full(b), 128);
            mbarrier::init_count(empty(b), 128);
        }
        for stage in 0..stages {
            mbarrier::init_count(consumed(stage), 128);
        }
        mbarrier::init_count(q_ready, 128 * p.warps_k);
        mbarrier::fence_init();
    }
    thread::sync_threads();
    let first_producer_warp = 4 * p.warps_k;
    if warp == first_producer_warp {
        for t in 0..stages.min(pipe.n_tiles) {
            pipe.issue_bulk(t, lane);
        }
    }
    keep_seq_len::<CLUSTER>(p, seq_len, tid);
    // Q is the compute warps' alone (8 rows each, one batch of loads), met
    // on an mbarrier of their own: the producer goes on to its first
    // conversion as soon as the first stage lands, not after Q's global
    // loads and a block barrier (12 % of int8 (16K, 16)'s warp samples
    // were in this prologue; 1-3 % faster on grid B, docs/perf.md,
    // "Warp-specialised quantized wgmma"). (A named barrier among the compute warps
    // timed the same, but the warps then met unequal counts of barriers,
    // which compute-sanitizer's racecheck reports as hazards between the
    // epilogue's stores and loads, ordered by block barriers.)
    if !producer {
        let at = #[inline(always)] |r: u32, dim: u32| q_tile + HALF_TILE.at(r, dim / 8, 0) + 2 * (dim % 8);
        convert_q_to::<F, D, { (WGMMA_M / 8) as usize }>(p, item.batch, kvh, row0, WGMMA_M, at, q_scales, warp, 4 * p.warps_k, lane);
        shared::fence_proxy_async_shared();
        mbarrier::arrive(q_ready);
        mbarrier::wait_parity(q_ready, 0);
    }

    let mut o = [[0f32; 4]; 16];
    let mut m = [f32::NEG_INFINITY; 2];
    let mut l = [0f32; 2];
    if producer {
        let pt = tid - 128 * p.warps_k;
        for t in 0..pipe.n_tiles {
            let stage = t % stages;
            pipe.wait_bulk(t);
            let (b, parity) = (t % WGMMA_CONVERTED_BUFFERS, (t / WGMMA_CONVERTED_BUFFERS) & 1);
            // The whole stage in one conversion (every load of the thread's
            // four jobs first), the second half past the item's end too:
            // the compute warpgroup takes the stage in one step, and such
            // keys (masked) read finite converted values (`valid`) and zero
            // scales (the stage's scales is zero-filled past the end). The
            // n-th use of a buffer waits for the n-th hand-back (a fresh
            // barrier reports parity 1 as complete).
            mbarrier::wait_parity(empty(b), parity ^ 1);
            let valid = item.kv_end - item.kv_start - t * Pipe::<F, D, CLUSTER>::TILE_KEYS;
            F::stage_to_half::<D, true, 2>(pipe.tiles(stage), 0, valid, k_half(b), v_half(b), 0, pt);
            if F::SCALED {
                // One thread per key and tensor: K's scales, then V's.
                const { assert!(2 * WGMMA_M == 128) };
                let (is_v, r) = (pt / WGMMA_M, pt % WGMMA_M);
                let src = if is_v == 1 { pipe.v_scales(stage) } else { pipe.k_scales(stage) };
                shared::st_shared_f32(row_scales(b) + 4 * WGMMA_M * is_v + 4 * r, shared::ld_shared_f32(src + 4 * r));
            }
            shared::fence_proxy_async_shared();
            mbarrier::arrive(full(b));
            mbarrier::arrive(consumed(stage));
            if t + stages < pipe.n_tiles && pt < 32 {
                // Every producer thread has read the stage: refill it.
                mbarrier::wait_parity(consumed(stage), (t / stages) & 1);
                pipe.issue_bulk(t + stages, pt);
            }
        }
    } else {
        let mask_from = mask_from::<V>(p, &item, seq_len);
        // Groups of 8 rows (or keys) are 1024 bytes apart; V's two column
        // blocks (dims 0..64, 64..128) a tile's 64 rows × 128 bytes.
        let q_desc = descriptor(q_tile, 16, 1024);
        let column = WGMMA_M * 128;
        let view = RowView { warp_m, g, c2, rows: Rows { tokens: [ra.token, rb.token], heads: [ra.head, rb.head], limits: [ra.limit, rb.limit], seq_len, mask_from }, seq_first };
        // Warpgroup `group` takes the stages `t ≡ group (mod warps_k)`
        // whole, in 64-key steps: half the 32-key steps' maxima, votes,
        // rescales and MMA waits a key. Stage `t` is in buffer
        // `t % WGMMA_CONVERTED_BUFFERS`, a multiple of `warps_k`: each
        // buffer is one warpgroup's, which waits on every phase of its
        // barriers (a warpgroup skipping a phase could take an old phase's
        // parity for the new one's).
        const { assert!(WGMMA_CONVERTED_BUFFERS % WGMMA_WARPS_K as u32 == 0) };
        let mut t = group;
        while t < pipe.n_tiles {
            let (b, parity) = (t % WGMMA_CONVERTED_BUFFERS, (t / WGMMA_CONVERTED_BUFFERS) & 1);
            mbarrier::wait_parity(full(b), parity);
            let ops = StepOperands {
                k: descriptor(k_half(b), 16, 1024),
                v: descriptor(v_half(b), column, 1024),
                k_scales: row_scales(b),
                v_scales: row_scales(b) + 4 * WGMMA_M,
                key0: item.kv_start + t * 2 * WGMMA_KEYS,
            };
            // The unspecialised kernels' fold (their 32-key steps give
            // other bits: the bench checks paged rows against the strided
            // unspecialised kernel).
            step::<F, V, STAGE_TILES>(p, q_desc, q_scales, true, V::LINEAR_IN_SCALE && !(CLUSTER && F::SCALED), &ops, &view, &mut o, &mut m, &mut l);
            mbarrier::arrive(empty(b));
            t += p.warps_k;
        }
    }
    // Every wait is behind every warp: the barriers' memory is free.
    thread::sync_threads();
    if tid == 0 {
        pipe.inval_bulk_barriers();
        for b in 0..WGMMA_CONVERTED_BUFFERS {
            mbarrier::inval(full(b));
            mbarrier::inval(empty(b));
        }
        for stage in 0..stages {
            mbarrier::inval(consumed(stage));
        }
        mbarrier::inval(q_ready);
    }

    let rows = [ra, rb];
    let quad = thread::opaque(tid) % 4;
    // As the unspecialised kernel's; the producer's warps take part in the
    // epilogue's barriers and output loop, storing no accumulator. (One
    // helper for both closures changed the order of the scaling in these
    // kernels' epilogues and measured int4-g32 grid B 1-4 % slower:
    // docs/perf.md, "Epilogue".)
    let store = |acc: u32, pitch: u32, scale: [f32; 2], add: bool, live: [bool; 2]| {
        if producer {
            return;
        }
        for (nt, frag) in o.iter().enumerate() {
            for (r, row) in rows.iter().enumerate() {
                if !CLUSTER && !live[r] {
                    continue;
                }
                let addr = acc + 4 * (row.local * pitch + 8 * nt as u32 + 2 * quad);
                let mut v = [frag[2 * r] * scale[r], frag[2 * r + 1] * scale[r]];
                if add {
                    let old = shared::ld_shared_v2_f32(addr);
                    v[0] += old[0];
                    v[1] += old[1];
                }
                shared::st_shared_v2_f32(addr, v);
            }
        }
    };
    let l = l.map(warp::quad_sum);
    let warp_k = if producer { 0 } else { group };
    epilogue::<F, V, D, CLUSTER, WGMMA_WARPS_K, SPECIALIZED_OUT_BATCH, 1>(p, row0, warp_k, quad == 0 && !producer, rows, m, l, smem, store);
}

/// What one warpgroup's 32-key step reads: the K and V rows' descriptors,
/// the addresses of the keys' K and V scales (formats with per-row scales:
/// `F::SCALED`), and the step's first key.
pub(super) struct StepOperands {
    pub k: u64,
    pub v: u64,
    pub k_scales: u32,
    pub v_scales: u32,
    pub key0: u32,
}

/// The thread's place in the step: its warp's 16 rows, its rows `g` and
/// `g + 8` in them and its keys `8n + c2 + {0, 1}`, the rows' key limits and
/// tokens and heads (whose variant terms each step computes,
/// `variant::row_terms`), the sequence's length and the first key any row's
/// limit masks.
pub(super) struct RowView {
    pub warp_m: u32,
    pub g: u32,
    pub c2: u32,
    /// The rows' tokens, heads and key limits, the sequence's length and
    /// the first key any row's limit masks.
    pub rows: Rows,
    /// The sequence's own first key (`super::block::first_key`).
    pub seq_first: u32,
}

/// One warpgroup's step of `8 T` keys (`T`: [`STEP_TILES`] or
/// [`STAGE_TILES`]) over the block's 64 rows: `S = Q·Kᵀ`, the online
/// softmax of S into the rows' maxima `m` and sums `l`, and `O += P·V`.
/// `convert`: Q was converted (quantized formats), its rows' powers of two
/// in `q_scales`; `fold`: the row factors go into the exponent's FMA
/// instead of the scores.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) unsafe fn step<F: KvFormat, V: AttentionVariant, const T: usize>(
    p: &DecodeParams,
    q_desc: u64,
    q_scales: u32,
    convert: bool,
    fold: bool,
    ops: &StepOperands,
    view: &RowView,
    o: &mut [[f32; 4]; 16],
    m: &mut [f32; 2],
    l: &mut [f32; 2],
) {
    let (warp_m, g, c2, key0) = (view.warp_m, view.g, view.c2, ops.key0);
    // The exponent of this thread's largest V scale of the step (formats
    // whose P carries V's scales, `state::scale_exponent`), before the
    // scores: after them, its loads spilled the 128-register kernels.
    let e = if F::SCALED {
        state::scale_exponent(tree(core::array::from_fn::<_, T, _>(|n| {
            let pair = shared::ld_shared_v2_f32(ops.v_scales + 4 * (8 * n as u32 + c2));
            pair[0].max(pair[1])
        }), f32::max))
    } else {
        0.0
    };
    let raw = scores::<F::Compute, T>(q_desc, ops.k);
    // Per-row factors of the scores: the softmax scale (base 2),
    // times the power of two a converted Q row was scaled down by
    // (read at each step: held, they cost the kernel its last
    // registers).
    let (scale_a, scale_b) = if convert {
        let at = #[inline(always)] |r: u32| V::score_scale(p) * shared::ld_shared_f32(q_scales + 4 * (warp_m * 16 + g + r));
        (at(0), at(8))
    } else {
        (V::score_scale(p), V::score_scale(p))
    };
    // Per-key scales of this thread's keys 8n + c2 + {0, 1}
    // (formats with per-row scales): K's multiply the scores, V's P
    // (read where they are used: loaded together, V's scales were
    // live through the softmax).
    let scales = |side: u32| {
        if F::SCALED {
            core::array::from_fn::<_, T, _>(|n| shared::ld_shared_v2_f32(side + 4 * (8 * n as u32 + c2)))
        } else {
            [[1.0; 2]; T]
        }
    };
    let kscale = scales(ops.k_scales);
    // Converting kernels leave the row factors out of the scores when
    // `fold`: the maxima take them (positive: max(c·x) = c·max(x)
    // exactly) and the exponent's FMA applies them, 16 multiplies a
    // step fewer (their step is issue-bound).
    // The logits (`variant::logits`), every logit first and the mask in
    // its own pass (`variant::LogitThenMask`): keys `8n + c2 + {0, 1}` of each
    // tile, rows `warp_m·16 + g` (elements 0, 1) and `+ 8` (2, 3).
    let mut s = raw;
    let at = #[inline(always)] |n: usize, e: usize| (key0 + n as u32 * 8 + c2 + (e as u32 & 1), e / 2);
    let scale = #[inline(always)] |n: usize, e: usize| {
        let row_scale = if fold { 1.0 } else if e < 2 { scale_a } else { scale_b };
        if F::SCALED { row_scale * kscale[n][e & 1] } else { row_scale }
    };
    variant::logits::<V, variant::LogitThenMask, T, 4>(p, &mut s, key0, 8 * T as u32, &view.rows, #[inline(always)] || view.seq_first, #[inline(always)] || kept_batch(p), at, scale);
    // Maxima and sums as trees (a chain of 8 dependent operations
    // per row stalled the warps on fixed latencies).
    // (Formats whose P carries V's scales: the base covers them,
    // `state::scale_exponent`; with `fold`, after the row factors.)
    let (mx_a, mx_b) = (tree(s.map(|t| t[0].max(t[1])), f32::max), tree(s.map(|t| t[2].max(t[3])), f32::max));
    let (mx_a, mx_b) = if fold { (fma(mx_a, scale_a, e), fma(mx_b, scale_b, e)) } else { (mx_a + e, mx_b + e) };
    let (mx_a, mx_b) = (warp::quad_max(mx_a), warp::quad_max(mx_b));
    // Formats without slack (int8: P carries V's scale) still skip
    // the rescale when no row's base grew (slack 0): here it
    // is 64 multiplies a step.
    let moved = state::warp_must_move(*m, [mx_a, mx_b], F::RESCALE_SLACK.or(Some(0.0)));
    let (alpha_a, base_a) = state::advance_if(&mut m[0], mx_a, moved);
    let (alpha_b, base_b) = state::advance_if(&mut m[1], mx_b, moved);
    let p2 = |x: f32, row_scale: f32, base: f32| if fold { ex2(fma(x, row_scale, -base)) } else { ex2(x - base) };
    for tile in s.iter_mut() {
        tile[0] = p2(tile[0], scale_a, base_a);
        tile[1] = p2(tile[1], scale_a, base_a);
        tile[2] = p2(tile[2], scale_b, base_b);
        tile[3] = p2(tile[3], scale_b, base_b);
    }
    l[0] = l[0] * alpha_a + tree(s.map(|t| t[0] + t[1]), |x, y| x + y);
    l[1] = l[1] * alpha_b + tree(s.map(|t| t[2] + t[3]), |x, y| x + y);
    if moved {
        for acc in o.iter_mut() {
            acc[0] *= alpha_a;
            acc[1] *= alpha_a;
            acc[2] *= alpha_b;
            acc[3] *= alpha_b;
        }
    }
    if F::SCALED {
        let vscale = scales(ops.v_scales);
        #[allow(clippy::needless_range_loop)]
        for n in 0..T {
            for e in 0..4 {
                s[n][e] *= vscale[n][e & 1];
            }
        }
    }
    pv::<F::Compute, T>(o, &s, ops.v);
}

/// The score MMA of a step of `T` n8 tiles of keys, as tiles.
#[inline(always)]
unsafe fn scores<H: Half, const T: usize>(q: u64, k: u64) -> [[f32; 4]; T] {
    const { assert!(T == STEP_TILES || T == STAGE_TILES) };
    // (Each branch indexes its own accumulator within its length: the
    // other is not compiled for this `T`.)
    if T == STEP_TILES {
        let r = H::wgmma_scores_d128(q, k);
        core::array::from_fn(|n| [r[4 * n], r[4 * n + 1], r[4 * n + 2], r[4 * n + 3]])
    } else {
        let r = H::wgmma_scores64_d128(q, k);
        core::array::from_fn(|n| [r[4 * n], r[4 * n + 1], r[4 * n + 2], r[4 * n + 3]])
    }
}

/// `O += P·V` for a step of `T` n8 tiles of keys, P in the score MMA's C
/// layout: n8 tiles `2h, 2h+1` are the A fragment of keys `16h..16h+16`.
#[inline(always)]
unsafe fn pv<H: Half, const T: usize>(o: &mut [[f32; 4]; 16], s: &[[f32; 4]; T], v: u64) {
    let a = |h: usize| {
        let (lo, hi) = (&s[2 * h], &s[2 * h + 1]);
        [H::pack(lo[0], lo[1]), H::pack(lo[2], lo[3]), H::pack(hi[0], hi[1]), H::pack(hi[2], hi[3])]
    };
    if T == STEP_TILES {
        H::wgmma_pv_d128(o, [0, 1].map(a), v);
    } else {
        H::wgmma_pv64_d128(o, [a(0), a(1), a(2), a(3)], v);
    }
}

/// `f` over `T` values as a tree of adjacent pairs (four:
/// `f(f(x0, x1), f(x2, x3))`).
#[inline(always)]
fn tree<const T: usize>(mut x: [f32; T], f: impl Fn(f32, f32) -> f32) -> f32 {
    if T == 4 {
        // (Written out, as before the 64-key steps: the loop below gives
        // the same pairs, in another instruction order.)
        return f(f(x[0], x[1]), f(x[2], x[3]));
    }
    let mut w = T;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            x[i] = f(x[2 * i], x[2 * i + 1]);
        }
    }
    x[0]
}

/// Copies the block's `WGMMA_M` Q rows (zero-filled past its last row) into
/// the tile at `q_tile`, laid out as `Swizzle128`, in the first cp.async
/// group (which the first pipeline wait covers).
#[inline(always)]
unsafe fn stage_q<const D: usize>(p: &DecodeParams, batch: u32, kvh: u32, row0: u32, q_tile: u32, tid: u32, nthreads: u32) {
    let chunks = (D / 8) as u32;
    let rows_total = p.group * p.q_len;
    let mut c = tid;
    while c < WGMMA_M * chunks {
        let (local, chunk) = (c / chunks, c % chunks);
        let global = row0 + local;
        let valid = local < p.rows_per_block && global < rows_total;
        let (token, head) = if valid { token_head(p, kvh, global) } else { (0, kvh * p.group) };
        let src = qo_row_addr::<D>(p.q, p, batch, token, head) + chunk as u64 * 16;
        memory::cp_async_16(q_tile + Swizzle128 { rows: WGMMA_M }.at(local, chunk, (D * 2) as u32), src, if valid { 16 } else { 0 });
        c += nthreads;
    }
}
