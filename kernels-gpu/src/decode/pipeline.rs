//! The global → shared pipeline every family shares: stages of
//! `keys_per_stage` K and V rows (and their scales), `PIPELINE_STAGES`
//! deep, filled with `cp.async` by every thread of the block.
//!
//! A block's shared memory holds `p.stages` stages (fewer than
//! `PIPELINE_STAGES` only when the plan's longest work item fills fewer,
//! `decode_attn_abi::stages_for`): an item of n stages' keys touches stages
//! 0..n only, so the ring never reaches past what was reserved.
//!
//! Paged caches: a stage's rows are addressed through the page ids of its
//! pages, which the block copies from the block table into a ring in shared
//! memory once per stage. The ids of tile `u` travel in the copy group of
//! tile `u - (PIPELINE_STAGES - 1)`, so the wait that precedes issuing tile
//! `u`'s rows has already covered them. The first tiles' ids are fetched
//! (and waited for) before the first rows — except in the 16-bit kernels,
//! whose first tiles' rows read their ids from the block table as their
//! addresses are formed (`Pipeline::TABLE_PROLOGUE`). The ring has one slot
//! more than the pipeline has stages, so that the ids of the tile a fast
//! warp fetches never land where a slower warp may still read the ids of
//! the tile before.

use core::marker::PhantomData;

use decode_attn_abi::{page_ids_per_stage, stage_region_bytes, tile_config, wgmma_producer_stages, DecodeParams, TileConfig, Family, WorkItem, PAGE_RING_SLOTS, PIPELINE_STAGES, WGMMA_PRODUCER_STAGES, WGMMA_STAGE_BARRIER_BYTES};

use crate::addressing::{paged_rows, PagedStage, RowAddressing, Strided};
use crate::arch::{mbarrier, memory, shared, thread, warp};
use crate::format::{copy_rows, KvFormat, LinearRows, StageTiles, Swizzle128, SwizzledRows, TileLayout};

/// How rows are copied (docs/perf.md, "Paged caches"): strided `WIDE`
/// kernels issue K's and V's chunk of a row in pairs from one address,
/// computing 4 chunks' addresses before issuing them; paged kernels do so
/// 2 at a time (their page-id reads overlap; 4 took the wide bf16 kernel to
/// 200 registers, one grid-B block per SM) — except the 16-bit non-cluster
/// wide kernels at D = 128, which fit 4 (bf16 / fp16 paged D (64, 128)
/// 1.5-2.5 points faster at 16-token pages over two rounds; grids A and C
/// unchanged), and strided narrow kernels copy
/// K's rows then V's — what keeps them at ≤ 128 registers (two blocks per SM).
/// `WGMMA` stages of unquantized formats lay rows out as [`Swizzle128`]
/// (quantized ones land as plain rows, below, and are converted into such
/// tiles, `KvFormat::stage_to_half`). The warpgroup MMAs read them after the same wait and
/// barrier as `ldmatrix` does, with no proxy fence (as CUTLASS's
/// `MainloopSm90CpAsyncGmma`); the converted tiles, written by ordinary
/// stores, are fenced. (The fence, a `MEMBAR.ALL.CTA` and a
/// `FENCE.VIEW.ASYNC.S`, was measured to cost nothing either way:
/// docs/perf.md, "Bulk copies for quantized wgmma stages".)
///
/// Quantized wgmma stages hold rows one after another ([`LinearRows`]). In
/// the strided kernels one warp issues a stage's rows and scales as bulk
/// copies (`cp.async.bulk`, one per tensor when the stage's rows are
/// contiguous, else one per row) completing on the stage's transaction
/// barrier: in the warp-specialised kernels (`decode::wgmma`) a producer
/// warp, whose warpgroup waits on the barrier ([`Pipeline::issue_bulk`],
/// [`Pipeline::wait_bulk`]); in the unspecialised ones warp 0 (`BULK`),
/// every thread waiting on it before the stage's block barrier.
/// These kernels are bound by instruction issue, and the per-thread
/// `cp.async` issue of a stage was ~110 instructions per warp (docs/perf.md,
/// "Bulk copies for quantized wgmma stages"). Rows past the item's end are not copied: their stale
/// (or never written) bytes convert to finite values, and their scales,
/// stored as zeros (a scale and zero of 0), makes them 0 — masked keys only
/// need finite values. The paged ones copy rows with `cp.async` into the
/// same layout: a bulk copy per page run (rows only; with scales too the
/// int8 kernels spilled) measured 2–5 % slower at 16-token pages and no
/// faster at 64 (docs/perf.md, "Paged caches").
///
/// `HG` > 1 (strided narrow kernels of a head pair, `decode_narrow`): a
/// stage holds `keys_per_stage / HG` keys of each of the block's `HG`
/// adjacent kv heads, head `h`'s rows (and scales) in the `h`-th part of
/// each tile ([`Pipeline::head_tiles`]), so the stage's bytes and the
/// fragment loaders stay those of one head.
pub(crate) struct Pipeline<'a, F, const D: usize, const PAGED: bool, const WIDE: bool, const CLUSTER: bool, const WGMMA: bool, const HG: u32 = 1> {
    p: &'a DecodeParams,
    /// Strided kernels: the sequence's rows (paged stages address theirs
    /// through `PagedStage`).
    /// K's rows; V's are `v_delta` bytes on.
    k: Strided,
    /// K's scales; V's is `side_delta` bytes on.
    k_scales: Strided,
    smem: u32,
    item: WorkItem,
    /// Paged only: this sequence's block-table row.
    table: u64,
    /// Stages this work item takes.
    pub n_tiles: u32,
    _format: PhantomData<F>,
}

impl<'a, F: KvFormat, const D: usize, const PAGED: bool, const WIDE: bool, const CLUSTER: bool, const WGMMA: bool, const HG: u32> Pipeline<'a, F, D, PAGED, WIDE, CLUSTER, WGMMA, HG> {
    /// Rows land by bulk copies on transaction barriers (see the struct's
    /// docs) in [`Pipeline::prefetch`] / [`Pipeline::advance`]: the
    /// unspecialised strided quantized wgmma kernels. (The warp-specialised
    /// ones issue and wait through [`Pipeline::issue_bulk`] /
    /// [`Pipeline::wait_bulk`] instead of those.)
    const BULK: bool = WGMMA && F::FORMAT.is_quantized() && !PAGED;
    /// Pipelines whose first tiles may be issued for a guessed item
    /// ([`Pipeline::advance_guessed`]): the strided wide kernels'.
    const GUESSABLE: bool = WIDE && !WGMMA && !PAGED;
    /// Paged pipelines whose first tiles' rows read their page ids from the
    /// block table itself ([`PagedStage`]'s `TABLE`) rather than from the
    /// ring, which the prologue would fill and wait for behind a block
    /// barrier: the 16-bit ones but the narrow cluster kernels. (In the
    /// quantized ones the table's address held through the copies spilled
    /// the paged wgmma kernels at their 128 registers and moved the head
    /// dim 64 wide ones past 128.)
    const TABLE_PROLOGUE: bool = PAGED && !F::FORMAT.is_quantized() && (WIDE || WGMMA || !CLUSTER);
    /// The family whose stage geometry this pipeline has (the wide and
    /// narrow kernels share theirs).
    const FAMILY: Family = if WGMMA { Family::Wgmma } else { Family::Wide };
    pub const CFG: TileConfig = tile_config(F::FORMAT, D as u32, Self::FAMILY);
    /// Keys of one kv head a stage holds (`HG` heads share it).
    pub const TILE_KEYS: u32 = {
        assert!(HG == 1 || (!WIDE && !CLUSTER && !WGMMA && Self::CFG.keys_per_stage % (HG * 16) == 0));
        Self::CFG.keys_per_stage / HG
    };
    /// Shared memory of the stages and (paged) the page-id ring, sized for
    /// the page size; the Q tile follows.
    #[inline(always)]
    pub fn region_bytes(p: &DecodeParams) -> u32 {
        stage_region_bytes(F::FORMAT, D as u32, Self::FAMILY, if PAGED { Some(p.page_shift) } else { None }, p.stages)
    }

    /// The pipeline of work item `item`, kv head `kvh`, in shared memory from `smem`.
    #[inline(always)]
    pub fn new(p: &'a DecodeParams, item: WorkItem, kvh: u32, smem: u32) -> Self {
        let b = item.batch;
        Pipeline {
            p,
            k: Strided::new(p.k, b, kvh, p.k_stride_batch, p.k_stride_token, p.k_stride_head),
            k_scales: Strided::new(p.k_scales, b, kvh, p.scale_stride_batch, p.scale_stride_token, p.scale_stride_head),
            smem,
            item,
            table: p.block_table + 4 * (item.batch as u64 * p.table_stride as u64),
            n_tiles: (item.kv_end - item.kv_start).div_ceil(Self::TILE_KEYS),
            _format: PhantomData,
        }
    }

    #[inline(always)]
    pub fn k_tile(&self, stage: u32) -> u32 {
        self.smem + stage * Self::CFG.stage_bytes()
    }
    #[inline(always)]
    pub fn v_tile(&self, stage: u32) -> u32 {
        self.k_tile(stage) + Self::CFG.v_offset()
    }
    #[inline(always)]
    pub fn k_scales(&self, stage: u32) -> u32 {
        self.k_tile(stage) + Self::CFG.side_offset()
    }
    #[inline(always)]
    pub fn v_scales(&self, stage: u32) -> u32 {
        self.k_scales(stage) + Self::CFG.scale_bytes * Self::CFG.keys_per_stage
    }
    /// Every tile of `stage`.
    #[inline(always)]
    pub fn tiles(&self, stage: u32) -> StageTiles {
        StageTiles { k: self.k_tile(stage), v: self.v_tile(stage), k_scales: self.k_scales(stage), v_scales: self.v_scales(stage) }
    }
    /// The tiles of `stage` that hold the block's `h`-th kv head's keys
    /// (`HG` > 1; [`Pipeline::tiles`] otherwise).
    #[inline(always)]
    pub fn head_tiles(&self, stage: u32, h: u32) -> StageTiles {
        let (rows, side) = (h * Self::TILE_KEYS * Self::CFG.row_bytes, h * Self::TILE_KEYS * Self::CFG.scale_bytes);
        StageTiles { k: self.k_tile(stage) + rows, v: self.v_tile(stage) + rows, k_scales: self.k_scales(stage) + side, v_scales: self.v_scales(stage) + side }
    }

    /// Bytes from a K row to the V row of the same token (the host gives
    /// both caches the same strides, pools and pages alike).
    #[inline(always)]
    fn v_delta(&self) -> u64 {
        self.p.v.wrapping_sub(self.p.k)
    }

    /// Bytes from K's side entry of a row to V's (same strides).
    #[inline(always)]
    fn side_delta(&self) -> u64 {
        self.p.v_scales.wrapping_sub(self.p.k_scales)
    }

    /// Strided quantized wgmma kernels: the transaction barrier of `stage`, in the last bytes before
    /// the stages (`decode_attn_abi::wgmma_prefix_bytes`).
    #[inline(always)]
    fn barrier(&self, stage: u32) -> u32 {
        self.smem - WGMMA_STAGE_BARRIER_BYTES + 8 * stage
    }

    /// Strided quantized wgmma kernels: issues tile `first ..`'s K and V rows and scales below
    /// `end` into `stage` from warp 0 (`lane`: its lane), completing on the
    /// stage barrier, whose arrival by lane 0 announces the bulk copies'
    /// bytes. Rows contiguous over tokens are one bulk copy per tensor. Rows
    /// a token stride apart (several kv heads side by side) are 16-byte
    /// `cp.async` chunks spread over the warp, each lane's copies one more
    /// arrival of the barrier ([`Pipeline::bulk_arrivals`]), made when they
    /// land: a bulk copy per 64-128-byte row ran the int8
    /// and int4 kernels at 10 % of the copy rate (docs/perf.md, "Strided
    /// rows in the quantized wgmma kernels"). Scales of strided caches is
    /// contiguous over tokens and 16-byte aligned at a stage's first token
    /// (`DecodeShape::scale_strides`); its last bytes past a multiple of 16,
    /// and zeros for the rows past `end`, are plain stores by lane 0 before
    /// its arrival (ordered before the readers by the barrier's phase).
    #[inline(always)]
    unsafe fn bulk_stage(&self, k: Strided, k_scales: Strided, stage: u32, first: u32, end: u32, lane: u32) {
        let (row_bytes, scale_bytes, keys) = (Self::CFG.row_bytes, Self::CFG.scale_bytes, Self::CFG.keys_per_stage);
        let rows = (end - first).min(keys);
        let (bar, kt, vt, delta) = (self.barrier(stage), self.k_tile(stage), self.v_tile(stage), self.v_delta());
        let side = rows * scale_bytes;
        let side_bulk = side & !15;
        let (ks, vs, side_src, side_delta) = (self.k_scales(stage), self.v_scales(stage), k_scales.row(first), self.side_delta());
        let contiguous = k.token_stride == row_bytes as u64;
        if !contiguous {
            let chunks_per_row = row_bytes / 16;
            let mut c = lane;
            while c < rows * chunks_per_row {
                let (r, at) = (c / chunks_per_row, c % chunks_per_row * 16);
                let src = k.row(first + r) + at as u64;
                memory::cp_async_16(kt + r * row_bytes + at, src, 16);
                memory::cp_async_16(vt + r * row_bytes + at, src.wrapping_add(delta), 16);
                c += 32;
            }
            mbarrier::cp_async_arrive_noinc(bar);
            warp::sync_warp();
        }
        if lane == 0 {
            // The scales's last 4-12 bytes, then zeros (a scale and zero
            // of 0) to the stage's end: plain stores before the arrival,
            // whose release the waiters' acquire pairs with (only a stage
            // reaching past the item's end has any).
            let mut at = side_bulk;
            while at < keys * scale_bytes {
                let (kv, vv) = if at < side {
                    (memory::ld_global_nc_u32(side_src + at as u64), memory::ld_global_nc_u32(side_src.wrapping_add(side_delta) + at as u64))
                } else {
                    (0, 0)
                };
                shared::st_shared_u32(ks + at, kv);
                shared::st_shared_u32(vs + at, vv);
                at += 4;
            }
            let bulk_rows = if contiguous { rows * row_bytes } else { 0 };
            mbarrier::arrive_expect_tx(bar, 2 * (bulk_rows + side_bulk));
            if contiguous {
                let src = k.row(first);
                mbarrier::bulk_copy(kt, src, rows * row_bytes, bar);
                mbarrier::bulk_copy(vt, src.wrapping_add(delta), rows * row_bytes, bar);
            }
            if side_bulk > 0 {
                mbarrier::bulk_copy(ks, side_src, side_bulk, bar);
                mbarrier::bulk_copy(vs, side_src.wrapping_add(side_delta), side_bulk, bar);
            }
        }
    }

    /// Shared address of the page ids of tile `t`.
    #[inline(always)]
    fn ids(&self, t: u32) -> u32 {
        self.smem + Self::CFG.pipeline_bytes(self.p.stages) + 4 * (t % PAGE_RING_SLOTS) * page_ids_per_stage(Self::CFG.keys_per_stage, self.p.page_shift)
    }

    /// Paged: issues this thread's share of the copies of tile `t`'s page ids
    /// (the pages holding its keys below the item's end) into the ring.
    #[inline(always)]
    unsafe fn fetch_ids(&self, t: u32, tid: u32, nthreads: u32) {
        if t >= self.n_tiles {
            return;
        }
        let first = self.item.kv_start + t * Self::TILE_KEYS;
        let last = (first + Self::TILE_KEYS).min(self.item.kv_end) - 1;
        let (p0, p1) = (first >> self.p.page_shift, last >> self.p.page_shift);
        let mut i = tid;
        while p0 + i <= p1 {
            memory::cp_async_4(self.ids(t) + 4 * i, self.table + 4 * (p0 + i) as u64, 4);
            i += nthreads;
        }
    }

    /// Issues this thread's copies of K's and V's rows from `first` into
    /// `stage` (see the struct's docs for the three ways).
    #[inline(always)]
    unsafe fn load_rows<A: RowAddressing>(&self, k: A, stage: u32, first: u32, end: u32, tid: u32, nthreads: u32) {
        let (kt, vt, keys, delta) = (self.k_tile(stage), self.v_tile(stage), Self::CFG.keys_per_stage, self.v_delta());
        if WGMMA && F::FORMAT.is_quantized() {
            copy_rows::<A, 2, true, _>(LinearRows, k, kt, delta, vt, first, end, keys, Self::CFG.row_bytes, tid, nthreads)
        } else if WGMMA {
            let row_bytes = Self::CFG.row_bytes;
            if A::PAGED {
                copy_rows::<A, 2, true, _>(Swizzle128 { rows: keys }, k, kt, delta, vt, first, end, keys, row_bytes, tid, nthreads)
            } else {
                copy_rows::<A, 4, true, _>(Swizzle128 { rows: keys }, k, kt, delta, vt, first, end, keys, row_bytes, tid, nthreads)
            }
        } else if WIDE && !WGMMA && (!A::PAGED || (!F::FORMAT.is_quantized() && !CLUSTER && D == 128)) {
            F::load_kv_rows::<D, A, 4, true>(k, delta, kt, vt, first, end, keys, tid, nthreads)
        } else if A::PAGED || WGMMA {
            F::load_kv_rows::<D, A, 2, true>(k, delta, kt, vt, first, end, keys, tid, nthreads)
        } else {
            F::load_kv_rows::<D, A, 2, false>(k, delta, kt, vt, first, end, keys, tid, nthreads)
        }
    }

    /// [`Pipeline::load`]'s paged copies of tile `t` (`TABLE`: the page ids
    /// from the block table instead of the ring).
    #[inline(always)]
    unsafe fn load_paged<const TABLE: bool>(&self, t: u32, stage: u32, first: u32, end: u32, tid: u32, nthreads: u32) {
        let kt = Self::CFG.keys_per_stage;
        let (ids, first_page) = (self.ids(t), first >> self.p.page_shift);
        let (p, kvh, table) = (self.p, super::block::block_kv_head::<CLUSTER>(self.p), self.table);
        // (Only for unquantized formats: in the narrow int4 kernels this
        // second path cost 28-31 registers, past two blocks per SM. The
        // paths stay written out: one copy helper shared by all three
        // moved narrow int4-g64 from 128 to 146 registers.)
        if Self::CFG.scale_bytes == 0 && kt <= 1 << p.page_shift {
            // The whole stage is in one page (stages start on multiples
            // of `kt`): one id, then rows as at strides from its start.
            let k = PagedStage::<{ paged_rows::K }, TABLE> { p, kvh, ids, first_page, table }.single_page(first);
            self.load_rows(k, stage, first, end, tid, nthreads);
            self.fetch_ids(t + PIPELINE_STAGES - 1, tid, nthreads);
            return;
        }
        let k = PagedStage::<{ paged_rows::K }, TABLE> { p, kvh, ids, first_page, table };
        self.load_rows(k, stage, first, end, tid, nthreads);
        if Self::CFG.scale_bytes > 0 {
            let ks = PagedStage::<{ paged_rows::K_SIDE }, TABLE> { p, kvh, ids, first_page, table };
            F::load_kv_scales::<D, _>(ks, self.side_delta(), self.k_scales(stage), self.v_scales(stage), first, end, kt, tid, nthreads);
        }
        self.fetch_ids(t + PIPELINE_STAGES - 1, tid, nthreads);
    }

    /// [`Pipeline::load`]'s copies of a stage of `HG` adjacent kv heads
    /// (`HG` > 1): K's rows of the stage's tokens, then V's, through
    /// `copy_head_rows` from `k` (head `h`'s rows a head stride after head
    /// 0's), and each head's scales through `side(h)`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn load_head_rows<A: RowAddressing + Copy, S: RowAddressing>(&self, k: A, stage: u32, first: u32, end: u32, tid: u32, nthreads: u32, side: impl Fn(u32) -> S) {
        let (p, keys, row_bytes) = (self.p, Self::TILE_KEYS, Self::CFG.row_bytes);
        // (Two calls: a loop over the pair (K, V) put it on the stack.)
        copy_head_rows::<HG, A>(k, p.k_stride_head, 0, self.k_tile(stage), keys, first, end, row_bytes, tid, nthreads);
        copy_head_rows::<HG, A>(k, p.k_stride_head, self.v_delta(), self.v_tile(stage), keys, first, end, row_bytes, tid, nthreads);
        if Self::CFG.scale_bytes > 0 {
            for h in 0..HG {
                let tiles = self.head_tiles(stage, h);
                F::load_kv_scales::<D, _>(side(h), self.side_delta(), tiles.k_scales, tiles.v_scales, first, end, keys, tid, nthreads);
            }
        }
    }

    /// Issues this thread's copies of tile `t` into its stage (paged: and
    /// the page ids of tile `t + PIPELINE_STAGES - 1`). `PROLOGUE`: one of
    /// the tiles [`Pipeline::prefetch`] issues, whose page ids the
    /// `TABLE_PROLOGUE` pipelines read from the block table.
    #[inline(always)]
    unsafe fn load<const PROLOGUE: bool>(&self, t: u32) {
        // The paged wgmma kernels of quantized formats derive the thread's
        // copy offsets afresh at each stage (held, they spilled at 128
        // registers).
        let tid = if WGMMA && F::FORMAT.is_quantized() { thread::opaque(thread::thread_idx_x()) } else { thread::thread_idx_x() };
        let nthreads = thread::block_dim_x();
        let kt = Self::CFG.keys_per_stage;
        let stage = t % PIPELINE_STAGES;
        let first = self.item.kv_start + t * Self::TILE_KEYS;
        let end = self.item.kv_end;
        if HG > 1 {
            // K's rows of the stage's tokens, then V's, the heads'
            // interleaved: consecutive threads copy a token's row of one
            // head, then the next head's (its next bytes in a token-major
            // cache), so one warp's copies cover whole `HG`-row pieces, as a
            // row of `HG` times the head dim would be read. Each row lands in
            // its head's part of the tiles.
            // (The row bases afresh at each stage, as the bulk copies':
            // held through the key loop, they spilled the pair kernels at
            // their 128 registers.)
            // Paged: the rows of a token's page as the one-head kernels
            // find them, the second head's a head stride on (token-major
            // pages hold a token's heads side by side); the page ids of
            // tile `t + PIPELINE_STAGES - 1` after.
            let p = self.p;
            if PAGED {
                let kvh0 = super::block::block_first_head::<CLUSTER, HG>(p);
                let (ids, first_page, table) = (self.ids(t), first >> p.page_shift, self.table);
                let k = PagedStage::<{ paged_rows::K }, false> { p, kvh: kvh0, ids, first_page, table };
                self.load_head_rows(k, stage, first, end, tid, nthreads, |h| PagedStage::<{ paged_rows::K_SIDE }, false> { p, kvh: kvh0 + h, ids, first_page, table });
                self.fetch_ids(t + PIPELINE_STAGES - 1, tid, nthreads);
            } else {
                let (batch, kvh0) = (thread::opaque(self.item.batch), super::block::block_first_head::<CLUSTER, HG>(p));
                let k = Strided::new(p.k, batch, kvh0, p.k_stride_batch, p.k_stride_token, p.k_stride_head);
                self.load_head_rows(k, stage, first, end, tid, nthreads, |h| Strided::new(p.k_scales, batch, kvh0 + h, p.scale_stride_batch, p.scale_stride_token, p.scale_stride_head));
            }
        } else if PAGED {
            if PROLOGUE && Self::TABLE_PROLOGUE {
                self.load_paged::<true>(t, stage, first, end, tid, nthreads);
            } else {
                self.load_paged::<false>(t, stage, first, end, tid, nthreads);
            }
        } else if Self::BULK {
            // The rows' bases afresh at each stage: held through the key
            // loop, the two 64-bit values were what the unspecialised
            // kernels' 128 registers spilled.
            if tid < 32 {
                let (p, batch, kvh) = (self.p, thread::opaque(self.item.batch), super::block::block_kv_head::<CLUSTER>(self.p));
                let k = Strided::new(p.k, batch, kvh, p.k_stride_batch, p.k_stride_token, p.k_stride_head);
                let k_scales = Strided::new(p.k_scales, batch, kvh, p.scale_stride_batch, p.scale_stride_token, p.scale_stride_head);
                self.bulk_stage(k, k_scales, stage, first, end, tid);
            }
        } else {
            self.load_rows(self.k, stage, first, end, tid, nthreads);
            if Self::CFG.scale_bytes > 0 {
                F::load_kv_scales::<D, _>(self.k_scales, self.side_delta(), self.k_scales(stage), self.v_scales(stage), first, end, kt, tid, nthreads);
            }
        }
    }

    /// Starts the first `PIPELINE_STAGES - 1` tiles (one commit group each).
    ///
    /// # Safety
    /// The params' buffers must hold the item's rows (the host checked them).
    #[inline(always)]
    pub unsafe fn prefetch(&self) {
        if Self::BULK {
            // Both kinds of strided quantized kernel use the same barriers
            // (the unspecialised ones the first `PIPELINE_STAGES`).
            const { assert!(PIPELINE_STAGES <= WGMMA_PRODUCER_STAGES) };
            // The stage barriers, initialised before any thread waits on them.
            if thread::thread_idx_x() == 0 {
                self.init_bulk_barriers();
                mbarrier::fence_init();
            }
            thread::sync_threads();
        }
        if PAGED && !Self::TABLE_PROLOGUE {
            // The first tiles' page ids, before any of their rows.
            let (tid, nthreads) = (thread::thread_idx_x(), thread::block_dim_x());
            for t in 0..PIPELINE_STAGES - 1 {
                self.fetch_ids(t, tid, nthreads);
            }
            memory::cp_async_commit();
            memory::cp_async_wait::<0>();
            thread::sync_threads();
        }
        for t in 0..PIPELINE_STAGES - 1 {
            if t < self.n_tiles {
                self.load::<true>(t);
            }
            memory::cp_async_commit();
        }
    }

    /// Waits until tile `t` has landed for the whole block and starts the
    /// tile `PIPELINE_STAGES - 1` ahead (into the stage consumed in step
    /// `t - 1`, which every warp finished before this barrier). Returns `t`'s stage.
    ///
    /// # Safety
    /// As [`Pipeline::prefetch`]; every thread of the block calls it.
    #[inline(always)]
    pub unsafe fn advance(&self, t: u32) -> u32 {
        self.advance_guessed(t, 0)
    }

    /// [`Pipeline::advance`] of a pipeline whose first tiles were issued
    /// for a guessed item `0 .. guessed_end` (0: none) of the same rows
    /// before this one's end was known (`decode::decode_wide`): rows of those
    /// tiles at or past the real end were copied rather than zero-filled,
    /// so before the block barrier each thread zeroes the ones it copied
    /// (its own copies have landed: same thread, after its wait). Strided
    /// 16-bit wide kernels only (their copy's thread-to-chunk mapping).
    ///
    /// # Safety
    /// As [`Pipeline::advance`]; `guessed_end` ≥ the item's end, the item
    /// starting at key 0.
    #[inline(always)]
    pub unsafe fn advance_guessed(&self, t: u32, guessed_end: u32) -> u32 {
        memory::cp_async_wait::<{ PIPELINE_STAGES - 2 }>();
        if Self::BULK {
            // (The unspecialised kernels use the first `PIPELINE_STAGES`.)
            self.wait_bulk_in(t, PIPELINE_STAGES);
        }
        if Self::GUESSABLE && t < PIPELINE_STAGES - 1 && self.item.kv_end < guessed_end.min((t + 1) * Self::CFG.keys_per_stage) {
            self.zero_rows_past_end(t);
        }
        thread::sync_threads();
        if t + PIPELINE_STAGES - 1 < self.n_tiles {
            self.load::<false>(t + PIPELINE_STAGES - 1);
        }
        memory::cp_async_commit();
        t % PIPELINE_STAGES
    }

    /// Zeroes this thread's chunks (as `copy_rows` assigns them in the
    /// strided wide kernels: chunk `tid + k · nthreads` of the tile's
    /// swizzled rows, K's and V's) of tile `t`'s rows at or past the item's end.
    #[inline(always)]
    unsafe fn zero_rows_past_end(&self, t: u32) {
        let (tid, nthreads) = (thread::thread_idx_x(), thread::block_dim_x());
        let (keys, row_bytes) = (Self::CFG.keys_per_stage, Self::CFG.row_bytes);
        let chunks_per_row = row_bytes / 16;
        let (stage, first) = (t % PIPELINE_STAGES, self.item.kv_start + t * keys);
        let (kt, vt) = (self.k_tile(stage), self.v_tile(stage));
        let mut c = tid;
        while c < keys * chunks_per_row {
            let row = c / chunks_per_row;
            if first + row >= self.item.kv_end {
                let at = SwizzledRows.at(row, c % chunks_per_row, row_bytes);
                shared::st_shared_v4_u32(kt + at, [0; 4]);
                shared::st_shared_v4_u32(vt + at, [0; 4]);
            }
            c += nthreads;
        }
    }

    /// Waits for every copy and the block (before shared memory is reused).
    ///
    /// # Safety
    /// Every thread of the block calls it.
    #[inline(always)]
    pub unsafe fn drain(&self) {
        memory::cp_async_wait::<0>();
        if Self::BULK && thread::thread_idx_x() == 0 {
            // Every tile was waited for in `advance`, and every thread has
            // passed the last one's block barrier: no copy or waiter is left.
            self.inval_bulk_barriers();
        }
        thread::sync_threads();
    }

    /// Strided quantized wgmma kernels: initialises the stages' transaction barriers (one thread,
    /// before a block barrier and any issue).
    ///
    /// # Safety
    /// Called once, by one thread, before any other use of the barriers.
    #[inline(always)]
    pub unsafe fn init_bulk_barriers(&self) {
        let arrivals = self.bulk_arrivals();
        for stage in 0..WGMMA_PRODUCER_STAGES {
            mbarrier::init_count(self.barrier(stage), arrivals);
        }
    }

    /// Arrivals a stage barrier of the strided quantized wgmma kernels
    /// expects: the issuing lane 0's, and where the rows are a token stride
    /// apart one per lane of the warp for its `cp.async` copies
    /// ([`Pipeline::bulk_stage`]).
    #[inline(always)]
    fn bulk_arrivals(&self) -> u32 {
        if self.p.k_stride_token == Self::CFG.row_bytes as u64 {
            1
        } else {
            1 + 32
        }
    }

    /// Warp-specialised kernels: issues tile `t`'s bulk copies into its stage, from one warp
    /// (`lane`: its lane), after every reader of the stage's previous tile
    /// is done with it.
    ///
    /// # Safety
    /// As [`Pipeline::prefetch`]; the barriers were initialised and that
    /// ordered before this call.
    #[inline(always)]
    pub unsafe fn issue_bulk(&self, t: u32, lane: u32) {
        let first = self.item.kv_start + t * Self::CFG.keys_per_stage;
        let stages = const { wgmma_producer_stages(F::FORMAT) };
        self.bulk_stage(self.k, self.k_scales, t % stages, first, self.item.kv_end, lane);
    }

    /// Strided quantized wgmma kernels: waits until tile `t`'s copies (and the scales's plain
    /// stores) have landed, for this thread.
    ///
    /// # Safety
    /// Tile `t` was issued.
    #[inline(always)]
    pub unsafe fn wait_bulk(&self, t: u32) {
        self.wait_bulk_in(t, const { wgmma_producer_stages(F::FORMAT) });
    }

    /// [`Pipeline::wait_bulk`] in a ring of `stages` barriers.
    #[inline(always)]
    unsafe fn wait_bulk_in(&self, t: u32, stages: u32) {
        // Tile t is the (t / stages)-th use of its stage's barrier.
        mbarrier::wait_parity(self.barrier(t % stages), (t / stages) & 1);
    }

    /// Strided quantized wgmma kernels: ends the stage barriers' life (one thread, once every tile
    /// was waited for and every waiter has passed a block barrier).
    ///
    /// # Safety
    /// No copy is pending and no thread waits on them any more.
    #[inline(always)]
    pub unsafe fn inval_bulk_barriers(&self) {
        for stage in 0..WGMMA_PRODUCER_STAGES {
            mbarrier::inval(self.barrier(stage));
        }
    }
}

/// Copies rows `first .. first + keys` of `HG` adjacent kv heads (head `h`'s
/// row of a token `h · head_stride` bytes after head 0's, `delta` bytes on
/// from K's rows: 0 for K, V's offset for V) into the heads' consecutive
/// tiles of `keys` swizzled rows from `tile` (head `h`'s at `tile + h · keys
/// · row_bytes`); rows at or past `end` are zero-filled. Chunk `c` of the
/// copy is token `c / (HG · chunks)`, head `c / chunks mod HG`: consecutive
/// threads read a token's heads one after another. (`copy_rows` reads a
/// row's chunks as consecutive bytes; the second head's row is a head
/// stride away, the next bytes only in a token-major cache.)
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn copy_head_rows<const HG: u32, A: RowAddressing>(k: A, head_stride: u64, delta: u64, tile: u32, keys: u32, first: u32, end: u32, row_bytes: u32, tid: u32, nthreads: u32) {
    let chunks = row_bytes / 16;
    let per_token = HG * chunks;
    let total = keys * per_token;
    let mut c = tid;
    while c < total {
        let (row, hc) = (c / per_token, c % per_token);
        let (h, chunk) = (hc / chunks, hc % chunks);
        let valid = first + row < end;
        let src = k.row(if valid { first + row } else { first }).wrapping_add(delta) + h as u64 * head_stride + chunk as u64 * 16;
        let at = tile + h * keys * row_bytes + SwizzledRows.at(row, chunk, row_bytes);
        memory::cp_async_16(at, src, if valid { 16 } else { 0 });
        c += nthreads;
    }
}
