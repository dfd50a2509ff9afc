//! The global → shared pipeline both variants share: stages of
//! `keys_per_stage` K and V rows (and their side data), `PIPELINE_STAGES`
//! deep, filled with `cp.async` by every thread of the block.

use core::marker::PhantomData;

use decode_attn_abi::{tile_config, DecodeParams, TileConfig, WorkItem, PIPELINE_STAGES};

use crate::addressing::Strided;
use crate::arch::{memory, thread};
use crate::format::KvFormat;

pub(crate) struct Pipeline<F, const D: usize> {
    k: Strided,
    v: Strided,
    k_side: Strided,
    v_side: Strided,
    smem: u32,
    item: WorkItem,
    /// Stages this work item takes.
    pub n_tiles: u32,
    _format: PhantomData<F>,
}

impl<F: KvFormat, const D: usize> Pipeline<F, D> {
    pub const CFG: TileConfig = tile_config(F::FORMAT, D as u32);

    /// The pipeline of work item `item`, kv head `kvh`, in shared memory from `smem`.
    #[inline(always)]
    pub fn new(p: &DecodeParams, item: WorkItem, kvh: u32, smem: u32) -> Self {
        let b = item.batch;
        Pipeline {
            k: Strided::new(p.k, b, kvh, p.k_stride_batch, p.k_stride_token, p.k_stride_head),
            v: Strided::new(p.v, b, kvh, p.v_stride_batch, p.v_stride_token, p.v_stride_head),
            k_side: Strided::new(p.k_side, b, kvh, p.side_stride_batch, p.side_stride_token, p.side_stride_head),
            v_side: Strided::new(p.v_side, b, kvh, p.side_stride_batch, p.side_stride_token, p.side_stride_head),
            smem,
            item,
            n_tiles: (item.kv_end - item.kv_start).div_ceil(Self::CFG.keys_per_stage),
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
    pub fn k_side(&self, stage: u32) -> u32 {
        self.k_tile(stage) + Self::CFG.side_offset()
    }
    #[inline(always)]
    pub fn v_side(&self, stage: u32) -> u32 {
        self.k_side(stage) + Self::CFG.side_bytes * Self::CFG.keys_per_stage
    }

    /// Issues this thread's copies of tile `t` into its stage.
    #[inline(always)]
    unsafe fn load(&self, t: u32) {
        let (tid, nthreads) = (thread::thread_idx_x(), thread::block_dim_x());
        let kt = Self::CFG.keys_per_stage;
        let stage = t % PIPELINE_STAGES;
        let first = self.item.kv_start + t * kt;
        let end = self.item.kv_end;
        F::load_rows::<D, _>(self.k, self.k_tile(stage), first, end, kt, tid, nthreads);
        F::load_rows::<D, _>(self.v, self.v_tile(stage), first, end, kt, tid, nthreads);
        if Self::CFG.side_bytes > 0 {
            F::load_side::<D, _>(self.k_side, self.k_side(stage), first, end, kt, tid, nthreads);
            F::load_side::<D, _>(self.v_side, self.v_side(stage), first, end, kt, tid, nthreads);
        }
    }

    /// Starts the first `PIPELINE_STAGES - 1` tiles (one commit group each).
    ///
    /// # Safety
    /// The params' buffers must hold the item's rows (the host checked them).
    #[inline(always)]
    pub unsafe fn prefetch(&self) {
        for t in 0..PIPELINE_STAGES - 1 {
            if t < self.n_tiles {
                self.load(t);
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
        memory::cp_async_wait::<{ PIPELINE_STAGES - 2 }>();
        thread::sync_threads();
        if t + PIPELINE_STAGES - 1 < self.n_tiles {
            self.load(t + PIPELINE_STAGES - 1);
        }
        memory::cp_async_commit();
        t % PIPELINE_STAGES
    }

    /// Waits for every copy and the block (before shared memory is reused).
    ///
    /// # Safety
    /// Every thread of the block calls it.
    #[inline(always)]
    pub unsafe fn drain(&self) {
        memory::cp_async_wait::<0>();
        thread::sync_threads();
    }
}
