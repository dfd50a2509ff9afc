//! Planning: shape + sequence lengths + device figures → launch
//! configuration, work list and workspace layout. Pure CPU code with no
//! CUDA types, so every decision is unit-tested without a GPU; the `Auto`
//! rules it applies are in [`crate::heuristics`], the work lists in
//! [`crate::work`].

use std::sync::atomic::{AtomicU64, Ordering};

use decode_attn_abi::{
    Arch, MergeKernelId, DECODE_KERNELS, range_start, decode_smem_bytes, merge_rows_per_block, stages_for, tile_config, wgmma_specializable, Family, MLA_ROWS, MLA_STAGES, MLA_THREADS, MLA_T_ROWS, Form, HeadDims, KernelId, Merge, MergeItem, WorkItem, KEYS_PER_WARP_STEP, MAX_WARPS, MMA_M,
    NARROW_ROWS, WGMMA_KEYS, WGMMA_M, WGMMA_PRODUCER_WARPS,
};

use crate::error::{ensure, Error, Result};
use crate::heuristics::{self, HeadPairFacts, MergeMode};
use crate::kernel_table;
use crate::occupancy::{blocks_per_sm, DeviceInfo, KernelInfo, KernelLimits};
use crate::options::{HeadPairChoice, MergeChoice, PlanOptions, SpecializeChoice, SplitPolicy, TransposeChoice};
use crate::shape::DecodeShape;
use crate::work::{balanced_work, chunks_of, cluster_work, global_merge_work, merge_words, uniform_work, work_words, workspace_layout, WorkspaceLayout};

/// Most attention work items (blocks along grid x) one plan may have; far
/// above any real batch, it keeps the work list's host and device memory
/// bounded (256 MiB).
pub const MAX_WORK_ITEMS: u64 = 1 << 24;

/// CUDA's limit on grid y and z.
pub const MAX_GRID_YZ: u32 = 65535;

/// CUDA's limit on grid x: the attention grid's x is work items × kv heads
/// (`decode_attn_abi::decode_grid_x`).
pub const MAX_GRID_X: u64 = (1 << 31) - 1;

/// A plan's `items` work items must stay within [`MAX_WORK_ITEMS`] and,
/// times the kv heads, within grid x; `counted` says how they were counted
/// (for the error), `param` is the parameter that chose them.
fn ensure_work_items(items: u64, shape: &DecodeShape, param: &'static str, counted: &str) -> Result<()> {
    ensure(items <= MAX_WORK_ITEMS, param, format!("at most {MAX_WORK_ITEMS} attention blocks per kv head {counted}"), items)?;
    // (The MLA family's grid x also holds each item's row chunks.)
    let (per_item, what) = if shape.is_latent() { (rows_of(shape).div_ceil(MLA_ROWS), "work items × row chunks of 64 query rows") } else { (shape.num_kv_heads, "work items × num_kv_heads") };
    let blocks = items.saturating_mul(per_item as u64);
    ensure(blocks <= MAX_GRID_X, param, format!("at most {MAX_GRID_X} attention blocks ({what}), CUDA's grid x limit"), blocks)
}

/// What a plan's launches are fixed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanMode {
    /// One set of host lengths (and block table): the work list is built on
    /// the host and uploaded with the plan ([`plan`], [`plan_paged`]).
    Lengths,
    /// The shape's capacity only (`batch` sequences of up to `max_seq_len`
    /// tokens, a `[batch, pages_per_seq]` table): each run reads the current
    /// lengths and block table from device memory, and each block derives
    /// its work from them (`chunks_per_seq` chunks of `chunk_keys` keys per
    /// sequence). Nothing is copied from the
    /// host, so a run can be captured once in a CUDA graph and replayed as
    /// the lengths change ([`plan_capacity`]).
    Capacity { chunks_per_seq: u32 },
}

/// A launch plan for one shape and one set of sequence lengths, or for a
/// capacity (`PlanMode`).
#[derive(Clone, Debug)]
pub struct Plan {
    pub(crate) id: u64,
    pub(crate) mode: PlanMode,
    pub(crate) shape: DecodeShape,
    /// The lengths planned for (capacity plans: the capacity, `max_seq_len`
    /// for every sequence).
    pub(crate) seq_lens: Vec<u32>,
    /// Shapes with key ranges, plans of host lengths: each sequence's first
    /// key (uploaded with the metadata); empty otherwise.
    pub(crate) seq_starts: Vec<u32>,
    /// Paged caches: `[batch, pages_per_seq]` page ids (empty otherwise).
    pub(crate) block_table: Vec<i32>,
    /// Attention blocks' work, longest chunks first.
    pub(crate) work: Vec<WorkItem>,
    /// Split sequences to merge.
    pub(crate) merges: Vec<MergeItem>,
    /// fp32 partial slots (one per chunk of a split sequence).
    pub(crate) num_slots: u32,
    /// Keys per chunk (`u32::MAX` when no sequence is split).
    pub(crate) chunk_keys: u32,
    /// The device's kernel architecture (`DeviceInfo::arch`): which module
    /// the plan's kernels come from.
    pub(crate) arch: Arch,
    pub(crate) family: Family,
    pub(crate) warps_m: u32,
    pub(crate) warps_k: u32,
    /// Packed query rows per block (`16 * warps_m`, `Narrow`: 8).
    pub(crate) rows_per_block: u32,
    /// Blocks along grid z, covering `group * q_len` rows.
    pub(crate) row_chunks: u32,
    pub(crate) smem_bytes: u32,
    /// Pipeline stages the block's shared memory holds (fewer than
    /// `PIPELINE_STAGES` when every sequence is that short).
    pub(crate) stages: u32,
    /// Attention blocks resident per SM with this configuration.
    pub(crate) blocks_per_sm: u32,
    /// Blocks per cluster of a cluster merge ([`MergeMode::Cluster`]: every
    /// sequence has this many work items, chunks past its end empty; a
    /// power of two); 0 when sequences merge through global memory.
    pub(crate) cluster: u32,
    /// Blocks per cluster of the launch, an MLA work item's row chunks
    /// ([`heuristics::mla_row_cluster`]); 0: none.
    pub(crate) row_cluster: u32,
    /// Runs the warp-specialised wgmma kernel ([`SpecializeChoice`]).
    pub(crate) specialized: bool,
    /// The MLA family's transposed kernel the plan runs, if one
    /// ([`TransposeChoice`]): `Form::Transposed`, or its 32-row form
    /// `Form::TransposedRows`.
    pub(crate) transposed: Option<Form>,
    /// Kv heads per block: 2 for head pairs ([`HeadPairChoice`]), whose
    /// `warps_k` warps split evenly over the two heads.
    pub(crate) heads_per_block: u32,
    /// `(length, chunks per sequence)` when every sequence has the same
    /// length and the work and merge items are exactly a capacity plan's at
    /// that length ([`uniform_work`]): runs pass the length in the kernel's
    /// params, so no block loads its work item, length or merge item.
    pub(crate) uniform: Option<(u32, u32)>,
    /// A window's start alignment ([`window_align`]; 1 without a window).
    pub(crate) window_align: u32,
    /// The device table's bound on a block's in-attention merge
    /// ([`crate::Tuning::in_attention_merge_max_bytes`]), read by
    /// [`Plan::merge_mode`].
    pub(crate) in_attention_merge_max_bytes: u32,
    /// The device's SMs, read by `finish` ([`heuristics::merge_threads`]).
    pub(crate) sm_count: u32,
    pub(crate) layout: WorkspaceLayout,
    /// What the plan launches, decided once when it is made (`finish`):
    /// a run only reads it.
    pub(crate) launch: Launch,
    /// [`Plan::metadata`].
    pub(crate) metadata: Vec<u8>,
}

/// A plan's kernels: the attention kernel (its id, entry point and index
/// in `DECODE_KERNELS`), where split sequences merge, and the merge
/// kernel's index in `MERGE_KERNELS` and grid where one runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Launch {
    pub(crate) kernel: KernelId,
    pub(crate) kernel_name: &'static str,
    pub(crate) kernel_index: usize,
    pub(crate) merge_mode: MergeMode,
    pub(crate) merge_kernel: Option<(usize, (u32, u32, u32))>,
    /// Threads of a merge-kernel block ([`Plan::merge_threads`]).
    pub(crate) merge_threads: u32,
    /// Threads of an attention block ([`Plan::block_threads`]).
    pub(crate) block_threads: u32,
}

impl Launch {
    /// Before `finish`: no plan leaves the planner with it.
    const UNSET: Launch = Launch {
        kernel: KernelId {
            arch: Arch::Sm80,
            format: decode_attn_abi::KvFormat::Bf16,
            dtype: decode_attn_abi::Dtype::Bf16,
            dims: HeadDims::square(0),
            family: Family::Wide,
            addressing: decode_attn_abi::Addressing::Strided,
            merge: Merge::Global,
            form: Form::Plain,
            variant: decode_attn_abi::Variant::Standard,
        },
        kernel_name: "",
        kernel_index: usize::MAX,
        merge_mode: MergeMode::Kernel,
        merge_kernel: None,
        merge_threads: 0,
        block_threads: 0,
    };
}

impl Plan {
    pub fn shape(&self) -> &DecodeShape {
        &self.shape
    }
    internal! {
        pub fn mode(&self) -> PlanMode {
            self.mode
        }
    }
    /// The length every sequence has when the plan's blocks compute their
    /// work from it instead of loading a work list (equal host lengths whose
    /// items are a capacity plan's at that length; not cluster merges).
    pub fn uniform_len(&self) -> Option<u32> {
        self.uniform.map(|(len, _)| len)
    }
    /// Whether runs read lengths (and the block table) from device memory.
    pub fn is_capacity(&self) -> bool {
        matches!(self.mode, PlanMode::Capacity { .. })
    }
    pub fn seq_lens(&self) -> &[u32] {
        &self.seq_lens
    }
    internal! {
        pub fn work(&self) -> &[WorkItem] {
            &self.work
        }
    }
    internal! {
        pub fn merges(&self) -> &[MergeItem] {
            &self.merges
        }
    }
    pub fn num_slots(&self) -> u32 {
        self.num_slots
    }
    pub fn chunk_keys(&self) -> u32 {
        self.chunk_keys
    }
    /// What a window's start is aligned down to (`window_align`; 1
    /// without a window).
    pub fn window_align(&self) -> u32 {
        self.window_align
    }
    /// Shapes with key ranges, plans of host lengths: the sequences' first
    /// keys (empty otherwise).
    pub fn seq_starts(&self) -> &[u32] {
        &self.seq_starts
    }
    /// The first key sequence `b`'s work reads: the later of its window's
    /// start and its own first key, aligned down
    /// (`decode_attn_abi::range_start`); 0 without either.
    pub fn first_key(&self, b: usize) -> u32 {
        let own = self.seq_starts.get(b).copied().unwrap_or(0);
        self.seq_lens.get(b).map_or(0, |&len| range_start(len, own, self.shape.q_len, self.shape.window_param(), self.window_align))
    }
    /// Paged caches: the block table the plan was made with (empty otherwise).
    pub fn block_table(&self) -> &[i32] {
        &self.block_table
    }
    pub fn family(&self) -> Family {
        self.family
    }
    pub fn warps_m(&self) -> u32 {
        self.warps_m
    }
    pub fn warps_k(&self) -> u32 {
        self.warps_k
    }
    pub fn rows_per_block(&self) -> u32 {
        self.rows_per_block
    }
    pub fn row_chunks(&self) -> u32 {
        self.row_chunks
    }
    pub fn smem_bytes(&self) -> u32 {
        self.smem_bytes
    }
    /// Pipeline stages in each block's shared memory ([`decode_attn_abi::stages_for`]
    /// of the longest sequence, or of the capacity).
    pub fn stages(&self) -> u32 {
        self.stages
    }
    pub fn blocks_per_sm(&self) -> u32 {
        self.blocks_per_sm
    }
    /// Whether the plan runs the warp-specialised wgmma kernel
    /// ([`SpecializeChoice`]).
    pub fn warp_specialized(&self) -> bool {
        self.specialized
    }
    /// Whether the plan runs one of the MLA family's transposed kernels
    /// ([`TransposeChoice`]: blocks of 16 query rows; more rows in row
    /// chunks, `Form::TransposedRows`).
    pub fn transposed(&self) -> bool {
        self.transposed.is_some()
    }
    /// Kv heads per block (2: head pairs, [`HeadPairChoice`]).
    pub fn heads_per_block(&self) -> u32 {
        self.heads_per_block
    }
    /// Whether the plan runs a capacity twin
    /// (`decode_attn_abi::has_capacity_twin`): a capacity plan of a shape
    /// that has one.
    pub fn runs_capacity_twin(&self) -> bool {
        self.is_capacity() && self.kernel_id_with(Form::Capacity).exists()
    }
    /// The attention kernel that runs the plan: its cluster-merge form for
    /// cluster plans, its warp-specialised, capacity-twin or head-pair
    /// form where the plan takes one, of the shape's variant.
    pub fn kernel_id(&self) -> KernelId {
        self.launch.kernel
    }
    /// The attention kernel's entry point in the PTX module.
    pub fn kernel_name(&self) -> &'static str {
        self.launch.kernel_name
    }
    /// The kernel the planned configuration runs ([`Plan::kernel_id`] once
    /// the plan is made).
    fn planned_kernel_id(&self) -> KernelId {
        let form = if self.specialized {
            Form::Specialized
        } else if let Some(form) = self.transposed {
            form
        } else if self.heads_per_block > 1 {
            Form::HeadPair
        } else if self.runs_capacity_twin() {
            Form::Capacity
        } else {
            Form::Plain
        };
        self.kernel_id_with(form)
    }
    /// The plan's kernel in form `form`, of the module that holds it on
    /// the plan's device (one that does not exist where none does).
    fn kernel_id_with(&self, form: Form) -> KernelId {
        let s = &self.shape;
        KernelId {
            arch: self.arch,
            format: s.kv_format,
            dtype: s.dtype,
            dims: s.head_dims(),
            family: self.family,
            addressing: s.addressing(),
            merge: if self.cluster > 1 { Merge::Cluster } else { Merge::Global },
            form,
            variant: s.kernel_variant(),
        }
        .on(self.arch)
    }
    internal! {
        /// Whether every block of the grid is resident at once (one wave at
        /// [`Plan::blocks_per_sm`]).
        pub fn fits_one_wave(&self, dev: &DeviceInfo) -> bool {
            self.waves(dev) <= 1
        }
    }
    internal! {
        /// Waves of the grid at [`Plan::blocks_per_sm`]: the resident rounds its
        /// blocks need.
        pub fn waves(&self, dev: &DeviceInfo) -> u64 {
            let (x, y, z) = self.grid();
            // (A device of no SMs runs nothing: every block is a wave of its own.)
            (x as u64 * y as u64 * z as u64).div_ceil((dev.sm_count as u64 * self.blocks_per_sm as u64).max(1))
        }
    }
    /// Blocks per thread-block cluster (0: no clusters; see `MergeMode::Cluster`).
    pub fn cluster(&self) -> u32 {
        self.cluster
    }
    internal! {
        /// Blocks per cluster the attention kernel is launched with: a
        /// cluster merge's, else an MLA item's row chunks'
        /// ([`heuristics::mla_row_cluster`]); 0 or 1: no clusters.
        pub fn launch_cluster(&self) -> u32 {
            self.cluster.max(self.row_cluster)
        }
    }
    internal! {
        pub fn layout(&self) -> &WorkspaceLayout {
            &self.layout
        }
    }
    /// Threads per attention block: the `warps_m × warps_k` compute warps,
    /// then (warp-specialised wgmma kernels) the producer warps.
    pub fn block_threads(&self) -> u32 {
        block_threads(self.specialized, self.warps_m, self.warps_k)
    }
    /// Attention grid: (work items × kv heads, 1, row chunks), a work
    /// item's kv heads consecutive, or with a cluster merge a cluster's
    /// chunks (`decode_attn_abi::decode_grid_x`, `decode_block_item`).
    /// The MLA family's: (work items × row chunks, 1, 1), a work item's
    /// row chunks consecutive (they read the same keys: `decode::mla`).
    pub fn grid(&self) -> (u32, u32, u32) {
        // make_plan / plan_capacity bound the product by MAX_GRID_X.
        if self.family == Family::Mla {
            return (self.work_items() * self.row_chunks, 1, 1);
        }
        (decode_attn_abi::decode_grid_x(self.work_items(), self.shape.num_kv_heads / self.heads_per_block), 1, self.row_chunks)
    }
    /// Work items of a run: the list's length, or for a capacity plan
    /// `batch × chunks_per_seq` (those past a sequence's end return at once).
    pub fn work_items(&self) -> u32 {
        match self.mode {
            PlanMode::Lengths => self.work.len() as u32,
            PlanMode::Capacity { chunks_per_seq } => self.shape.batch * chunks_per_seq,
        }
    }
    internal! {
        /// Where split sequences are merged (unsplit plans: a no-op either way),
        /// from the most slots a sequence has and the rows a block merges.
        pub fn merge_mode(&self) -> MergeMode {
            self.launch.merge_mode
        }
    }
    fn planned_merge_mode(&self) -> MergeMode {
        if self.cluster > 1 {
            return MergeMode::Cluster;
        }
        heuristics::merge_mode(self.max_splits(), self.rows_per_block.min(rows_of(&self.shape)), self.shape.head_dims().v, self.in_attention_merge_max_bytes)
    }
    /// Merge-kernel grid (`MergeMode::Kernel` plans that split; else
    /// `None`): (sequences, groups of [`Plan::merge_rows_per_block`] output
    /// rows up to grid y's limit; the kernel strides over the rest).
    pub fn merge_grid(&self) -> Option<(u32, u32, u32)> {
        self.launch.merge_kernel.map(|(_, grid)| grid)
    }
    fn planned_merge_grid(&self) -> Option<(u32, u32, u32)> {
        if self.planned_merge_mode() != MergeMode::Kernel || self.max_splits() <= 1 {
            return None;
        }
        // validate() bounds q_len × num_q_heads to 32 bits.
        let rows = self.shape.q_len.saturating_mul(self.shape.num_q_heads);
        Some((self.shape.batch, rows.div_ceil(self.merge_rows_per_block()).min(MAX_GRID_YZ), 1))
    }
    /// Output rows per merge-kernel block (`decode_attn_abi::merge_rows_per_block`).
    pub fn merge_rows_per_block(&self) -> u32 {
        merge_rows_per_block(self.max_splits())
    }
    /// Threads of a merge-kernel block ([`heuristics::merge_threads`]; 0
    /// where no merge kernel runs).
    pub fn merge_threads(&self) -> u32 {
        self.launch.merge_threads
    }
    /// Whether the merge kernel is launched as a programmatic dependent of
    /// the attention kernel (its blocks take the SMs the attention blocks
    /// leave, with no launch gap; `DecodeAttention` falls back to a plain
    /// launch on drivers without `cuLaunchKernelEx`).
    pub fn overlaps_merge(&self) -> bool {
        self.merge_grid().is_some()
    }
    /// Whether the plan's blocks count their arrivals in the workspace's
    /// merge counters (split sequences merged in the attention kernel),
    /// which must then be zero before a run.
    pub fn uses_merge_counters(&self) -> bool {
        self.max_splits() > 1 && self.merge_mode() == MergeMode::InAttention
    }
    /// Merge counters in the workspace: one per (sequence, kv head, row chunk).
    pub fn merge_counters(&self) -> u32 {
        // workspace_layout bounds batch × kv heads × row chunks to u32.
        self.shape.batch * self.shape.num_kv_heads * self.row_chunks
    }
    /// Device workspace this plan needs (metadata + fp32 partials).
    pub fn workspace_bytes(&self) -> usize {
        self.layout.total_bytes
    }
    /// Keys the step reads of each kv head, summed over the sequences (each
    /// from its first visible key: [`Plan::first_key`]; capacity plans: at
    /// capacity).
    pub fn keys_read(&self) -> u64 {
        self.seq_lens.iter().enumerate().map(|(b, &l)| (l - self.first_key(b)) as u64).fold(0, u64::saturating_add)
    }
    /// Bytes a run must move at least: every K and V row its work reads
    /// (each sequence's keys from [`Plan::first_key`]: all of them, or a
    /// window's) once with its scales (quantized formats' scales and
    /// zeros), plus Q and O (the benchmark's GB/s numerator, as
    /// docs/benchmark.md defines it); capacity plans: at capacity.
    /// Saturates at `u64::MAX`.
    pub fn bytes_moved(&self) -> u64 {
        let (format, d) = (self.shape.kv_format, self.shape.head_dim);
        let row = format.row_bytes(d) as u64 + format.scale_bytes(d) as u64;
        // A latent cache's V is its K rows' first values: one row a key.
        let tensors = if self.shape.head_dims().is_square() { 2 } else { 1 };
        let kv = self.keys_read().saturating_mul(self.shape.num_kv_heads as u64).saturating_mul(row).saturating_mul(tensors);
        kv.saturating_add(self.shape.q_bytes().unwrap_or(u64::MAX)).saturating_add(self.shape.o_bytes().unwrap_or(u64::MAX))
    }
    /// The MMA work of a run: `Q·Kᵀ` and `P·V` over every key its work
    /// reads for every query row, `2 · (Q·K's + V's head dim)` flops a row
    /// and key (as FlashInfer and FlashMLA count it). Saturates.
    pub fn flops(&self) -> u64 {
        let dims = self.shape.head_dims();
        let rows = self.shape.rows_per_kv_head().unwrap_or(u32::MAX) as u64;
        let keys = self.keys_read().saturating_mul(self.shape.num_kv_heads as u64);
        keys.saturating_mul(rows).saturating_mul(2 * (dims.qk + dims.v) as u64)
    }
    /// Largest number of chunks any sequence was split into.
    pub fn max_splits(&self) -> u32 {
        if let PlanMode::Capacity { chunks_per_seq } = self.mode {
            return chunks_per_seq;
        }
        if self.cluster > 1 {
            // A cluster's ranks past a sequence's chunks are empty.
            return self.seq_lens.iter().map(|&l| chunks_of(l, self.chunk_keys)).max().unwrap_or(1);
        }
        self.merges.iter().map(|m| m.num_slots).max().unwrap_or(1)
    }
    /// The metadata region's bytes, as the kernels read them (built once,
    /// when the plan is made; a run of a plan of host lengths uploads them).
    pub fn metadata(&self) -> &[u8] {
        &self.metadata
    }
    fn build_metadata(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; self.layout.metadata_bytes];
        let put = |bytes: &mut [u8], at: usize, src: &[u8]| bytes[at..at + src.len()].copy_from_slice(src);
        put(&mut bytes, self.layout.work, bytemuck::cast_slice(&work_words(&self.work)));
        put(&mut bytes, self.layout.seq_lens, bytemuck::cast_slice(&self.seq_lens));
        put(&mut bytes, self.layout.seq_starts, bytemuck::cast_slice(&self.seq_starts));
        put(&mut bytes, self.layout.block_table, bytemuck::cast_slice(&self.block_table));
        put(&mut bytes, self.layout.merges, bytemuck::cast_slice(&merge_words(&self.per_sequence_merges())));
        // The merge counters stay zero.
        bytes
    }

    /// One merge item per sequence, in batch order (unsplit ones: one slot).
    fn per_sequence_merges(&self) -> Vec<MergeItem> {
        let mut all: Vec<MergeItem> = (0..self.shape.batch).map(|b| MergeItem { batch: b, first_slot: 0, num_slots: 1, _pad: 0 }).collect();
        for m in &self.merges {
            all[m.batch as usize] = *m;
        }
        all
    }
}

static NEXT_PLAN_ID: AtomicU64 = AtomicU64::new(1);

/// Why a plan cannot run head pairs, or `None` when it can: the narrow
/// family (strided or paged), unsplit (a pair's block writes its rows
/// directly; the in-attention merge counts one head's blocks), no cluster
/// or warp specialisation, an even number of kv heads, warps to share out, and a
/// pair kernel in the table for the format, dtype, head dim and addressing.
pub fn head_pair_unsupported(plan: &Plan) -> Option<&'static str> {
    let s = &plan.shape;
    if plan.family != Family::Narrow || plan.cluster > 1 || plan.specialized {
        Some("head pairs run the narrow family, without clusters")
    } else if plan.num_slots > 0 || !plan.merges.is_empty() {
        Some("head pairs run unsplit plans only")
    } else if s.num_kv_heads % 2 != 0 || plan.warps_k < 2 || plan.warps_m != 1 {
        Some("head pairs need an even number of kv heads and at least two warps a block")
    } else if !plan.kernel_id_with(Form::HeadPair).exists() {
        Some("no head-pair kernel for this format, dtype, head dim and variant (int8, fp8 per head and fp8 at head dim 128, the standard variant)")
    } else {
        None
    }
}

/// `plan` with head pairs where `choice` asks for them and the plan allows.
/// A pair's stage holds half its keys of each head, so a work item takes
/// twice the stages: short ones reserve more (`stages_for`), and the
/// shared memory and blocks per SM follow.
fn pair_heads(mut plan: Plan, dev: &DeviceInfo, kernel: &KernelInfo, choice: HeadPairChoice) -> Result<Plan> {
    let why_not = head_pair_unsupported(&plan);
    let pair = match choice {
        HeadPairChoice::Never => false,
        HeadPairChoice::Always => match why_not {
            Some(why) => return Err(Error::Unsupported(why.into())),
            None => true,
        },
        HeadPairChoice::Auto => {
            let s = &plan.shape;
            let head_bytes = s.kv_strides().head.checked_mul(s.kv_format.bits() as u64).map(|b| b / 8);
            let (x, y, z) = plan.grid();
            let facts = HeadPairFacts {
                adjacent_heads: head_bytes == Some(s.kv_format.row_bytes(s.head_dim) as u64),
                blocks: x as u64 * y as u64 * z as u64,
                resident_blocks: dev.sm_count as u64 * plan.blocks_per_sm as u64,
                sm_count: dev.sm_count as u64,
                paged: s.is_paged(),
                total_keys: plan.seq_lens.iter().map(|&l| l as u64).sum(),
                sequences: plan.seq_lens.len() as u64,
            };
            why_not.is_none() && heuristics::pair_heads(&facts, &dev.tuning)
        }
    };
    if pair {
        let s = &plan.shape;
        let longest = plan.seq_lens.iter().copied().max().unwrap_or(1);
        let stages = stages_for(s.kv_format, s.head_dim, Family::Narrow, false, longest.saturating_mul(2));
        if stages != plan.stages {
            let page_shift = s.page_geometry().map(|(shift, _)| shift);
            let smem = decode_smem_bytes(s.kv_format, s.head_dim, plan.warps_m, plan.warps_k, Family::Narrow, page_shift, stages, Form::HeadPair);
            let per_sm = blocks_per_sm(dev, kernel, plan.block_threads(), smem);
            if smem > dev.max_smem_per_block || per_sm == 0 {
                return match choice {
                    HeadPairChoice::Always => Err(Error::Unsupported(format!("a head pair's {stages} stages need {smem} bytes of shared memory a block; this device allows {}", dev.max_smem_per_block))),
                    _ => Ok(plan),
                };
            }
            (plan.stages, plan.smem_bytes, plan.blocks_per_sm) = (stages, smem, per_sm);
        }
        plan.heads_per_block = 2;
    }
    Ok(plan)
}

/// The limits of the global-merge attention kernels a plan of one shape
/// and family may run: the plain kernel, its warp-specialised form and its
/// capacity twin where the set has them. (A cluster plan's kernel is
/// checked against its block when it runs.)
struct FamilyKernels {
    /// The device's kernel architecture.
    arch: Arch,
    family: Family,
    plain: KernelInfo,
    specialized: Option<KernelInfo>,
    capacity: Option<KernelInfo>,
    /// The MLA family's transposed form, where the set has one.
    transposed: Option<KernelInfo>,
    /// Its row-chunk form (more than 16 rows), where the set has one.
    transposed_rows: Option<KernelInfo>,
}

impl FamilyKernels {
    /// Picks the family (`opts.family`, else the `Auto` rule) and reads its
    /// kernels' limits; `Unsupported` where the set has no such kernel.
    fn new(shape: &DecodeShape, dev: &DeviceInfo, kernels: &impl KernelLimits, opts: &PlanOptions) -> Result<Self> {
        let family = heuristics::family(opts.family, shape, dev.arch, &dev.tuning);
        let id = |form| KernelId {
            arch: dev.arch,
            format: shape.kv_format,
            dtype: shape.dtype,
            dims: shape.head_dims(),
            family,
            addressing: shape.addressing(),
            merge: Merge::Global,
            form,
            variant: shape.kernel_variant(),
        }
        .on(dev.arch);
        let plain = kernels.limits(&id(Form::Plain)).ok_or_else(|| unsupported_kernel(shape, family, dev.arch))?;
        Ok(FamilyKernels {
            arch: dev.arch,
            family,
            plain,
            specialized: kernels.limits(&id(Form::Specialized)),
            capacity: kernels.limits(&id(Form::Capacity)),
            transposed: kernels.limits(&id(Form::Transposed)),
            transposed_rows: kernels.limits(&id(Form::TransposedRows)),
        })
    }

    /// The limits of the kernel a plan launches: warp-specialised or not,
    /// and for a capacity plan the capacity twin where the shape has one
    /// (`decode_attn_abi::has_capacity_twin`; no kernel is both).
    fn limits(&self, specialized: bool, capacity: bool) -> KernelInfo {
        match (specialized, capacity, self.capacity) {
            (false, true, Some(twin)) => twin,
            // The planner asks for the specialised kernel only where the
            // set has one (`wgmma_specializable`).
            (true, ..) => self.specialized.unwrap_or(self.plain),
            _ => self.plain,
        }
    }
}

/// The error of a shape the kernel set does not serve in `family` on a
/// device of kernel architecture `arch`: what needs a later architecture
/// names it and the device's.
fn unsupported_kernel(shape: &DecodeShape, family: Family, arch: Arch) -> Error {
    let need = |part: String, needs: Arch| (arch.module_for(needs).is_none()).then(|| format!("{part} needs {} kernels; this GPU runs {}'s", needs.name(), arch.name()));
    if let Some(why) = need(format!("the {} family", family.name()), family.needs()).or_else(|| need(format!("a {} cache", shape.kv_format.name()), shape.kv_format.needs())) {
        return Error::Unsupported(why);
    }
    Error::Unsupported(format!(
        "no {} kernel for a {} cache with {} queries at head_dim {} ({} softmax)",
        family.name(),
        shape.kv_format.name(),
        shape.dtype.name(),
        shape.head_dim,
        shape.kernel_variant().name()
    ))
}

/// Fixes what the made plan launches ([`Launch`]): its attention kernel,
/// where its split sequences merge and the merge kernel, each found once
/// here, so that a run reads them.
fn finish(mut plan: Plan) -> Result<Plan> {
    let kernel = plan.planned_kernel_id();
    let s = &plan.shape;
    let kernel_index = kernel_table::decode_index(&kernel).ok_or_else(|| unsupported_kernel(s, plan.family, plan.arch))?;
    let merge_kernel = match plan.planned_merge_grid() {
        None => None,
        Some(grid) => {
            let arch = plan.arch.module_for(Arch::Sm80).unwrap_or(plan.arch);
            let v = s.head_dims().v;
            let id = MergeKernelId { arch, dtype: s.dtype, head_dim: v, sinks: s.kernel_variant().takes_sinks() };
            let index = kernel_table::merge_index(&id).ok_or_else(|| Error::Unsupported(format!("no merge kernel for {} at V's head_dim {v}", s.dtype.name())))?;
            Some((index, grid))
        }
    };
    plan.launch = Launch {
        kernel,
        kernel_name: DECODE_KERNELS[kernel_index].name,
        kernel_index,
        merge_mode: plan.planned_merge_mode(),
        merge_kernel,
        merge_threads: merge_kernel.map_or(0, |(_, (x, y, z))| heuristics::merge_threads(x as u64 * y as u64 * z as u64, s.head_dims().v, plan.sm_count)),
        block_threads: plan.block_threads(),
    };
    plan.metadata = plan.build_metadata();
    Ok(plan)
}

/// Makes the plan. `kernel` describes the attention kernels that may run it.
/// Paged caches need their block table: [`plan_paged`].
pub fn plan(shape: &DecodeShape, seq_lens: &[u32], dev: &DeviceInfo, kernel: &impl KernelLimits, opts: &PlanOptions) -> Result<Plan> {
    shape.validate()?;
    dev.validate()?;
    ensure(!shape.is_paged(), "block_table", "a block table for the paged layout (plan_paged)", "none")?;
    shape.validate_seq_lens(seq_lens)?;
    no_starts_wanted(shape)?;
    let kernels = FamilyKernels::new(shape, dev, kernel, opts)?;
    finish(pair_heads(make_plan(shape, seq_lens, &[], "seq_lens", Vec::new(), dev, &kernels, false, opts)?, dev, &kernels.plain, opts.head_pair)?)
}

/// Plans of host lengths without starts: the shape must not ask for key
/// ranges ([`plan_key_ranges`] takes them).
fn no_starts_wanted(shape: &DecodeShape) -> Result<()> {
    ensure(!shape.variant.key_ranges, "seq_starts", "each sequence's first key for a shape with key_ranges (plan_key_ranges)", "none")
}

/// Makes the plan of sequences that each start at a key of their own
/// (`shape.variant.key_ranges`): sequence b's keys `seq_starts[b] .. seq_lens[b]`
/// (each start at most `seq_lens[b] − q_len`), uploaded with the plan's
/// metadata. `block_table`: a paged cache's `[batch, pages_per_seq]` ids
/// (as [`plan_paged`]), `None` for other layouts.
#[allow(clippy::too_many_arguments)]
pub fn plan_key_ranges(shape: &DecodeShape, seq_starts: &[u32], seq_lens: &[u32], block_table: Option<&[i32]>, dev: &DeviceInfo, kernel: &impl KernelLimits, opts: &PlanOptions) -> Result<Plan> {
    shape.validate()?;
    dev.validate()?;
    shape.validate_seq_lens(seq_lens)?;
    shape.validate_seq_starts(seq_starts, seq_lens)?;
    let table = match (shape.kv_layout, block_table) {
        (crate::shape::KvLayout::Paged { page_size, num_pages, .. }, Some(table)) => {
            check_block_table(table, seq_lens, shape.pages_per_seq(), page_size, num_pages)?;
            table.to_vec()
        }
        (crate::shape::KvLayout::Paged { .. }, None) => return Err(Error::invalid("block_table", "a block table for the paged layout", "none")),
        (_, Some(_)) => return Err(Error::invalid("block_table", "none (the cache is not paged)", "a table")),
        (_, None) => Vec::new(),
    };
    let kernels = FamilyKernels::new(shape, dev, kernel, opts)?;
    finish(pair_heads(make_plan(shape, seq_lens, seq_starts, "seq_lens", table, dev, &kernels, false, opts)?, dev, &kernels.plain, opts.head_pair)?)
}

/// Makes the plan of a paged cache: `block_table` is `[batch,
/// shape.pages_per_seq()]` page ids, row-major; the pages that hold each
/// sequence's `seq_lens[b]` tokens must be ids of the pool. The table is
/// uploaded with the plan's metadata.
pub fn plan_paged(shape: &DecodeShape, seq_lens: &[u32], block_table: &[i32], dev: &DeviceInfo, kernel: &impl KernelLimits, opts: &PlanOptions) -> Result<Plan> {
    shape.validate()?;
    dev.validate()?;
    shape.validate_seq_lens(seq_lens)?;
    let crate::shape::KvLayout::Paged { page_size, num_pages, .. } = shape.kv_layout else {
        return Err(Error::invalid("kv_layout", "a paged layout (KvLayout::Paged) for a block table", "another layout"));
    };
    check_block_table(block_table, seq_lens, shape.pages_per_seq(), page_size, num_pages)?;
    no_starts_wanted(shape)?;
    let kernels = FamilyKernels::new(shape, dev, kernel, opts)?;
    finish(pair_heads(make_plan(shape, seq_lens, &[], "seq_lens", block_table.to_vec(), dev, &kernels, false, opts)?, dev, &kernels.plain, opts.head_pair)?)
}

/// Makes a capacity plan ([`PlanMode::Capacity`]): launches fixed by the
/// shape alone (`batch` sequences of up to `max_seq_len` tokens; for a
/// paged shape a `[batch, pages_per_seq]` block table), so one plan serves
/// every step and a run can be captured in a CUDA graph. The block shape
/// and chunk size are those [`plan`] picks for every sequence at capacity;
/// shorter sequences leave their chunks past the end idle (each such block
/// returns at once).
///
/// `MergeChoice::Cluster` returns an `Err` where split sequences cannot be
/// merged in a cluster (as `SpecializeChoice::Always` and
/// `HeadPairChoice::Always` do where they cannot be honoured).
pub fn plan_capacity(shape: &DecodeShape, dev: &DeviceInfo, kernel: &impl KernelLimits, opts: &PlanOptions) -> Result<Plan> {
    shape.validate()?;
    dev.validate()?;
    // A block per sequence and kv head at least: checked before the
    // lengths at capacity are made (one u32 per sequence).
    ensure_work_items(shape.batch as u64, shape, "batch", "(one per sequence at least)")?;
    let at_capacity = vec![shape.max_seq_len; shape.batch as usize];
    let kernels = FamilyKernels::new(shape, dev, kernel, opts)?;
    let planned = make_plan(shape, &at_capacity, &[], "max_seq_len", Vec::new(), dev, &kernels, true, opts)?;
    // The most keys a step's work reads (a window's, at any length).
    let keys = capacity_keys(shape, planned.window_align);
    let chunk_keys = planned.chunk_keys.min(keys).max(1);
    // Each sequence's chunks are one cluster when they fit one (its size a
    // power of two: the chunks past the capacity, like those past a step's
    // lengths, exit at once).
    let chunks = chunks_of(keys, chunk_keys);
    let cluster = heuristics::cluster_size(chunks, shape, planned.transposed.is_some(), dev.max_cluster, opts.merge, &dev.tuning);
    cluster_honoured(opts.merge, chunks, cluster, shape, planned.transposed.is_some(), dev)?;
    let chunks_per_seq = if cluster > 1 { cluster } else { chunks };
    let work = shape.batch as u64 * chunks_per_seq as u64;
    ensure_work_items(work, shape, "split.chunk_keys", "at capacity")?;
    let num_slots = if chunks_per_seq > 1 && cluster == 0 { work as u32 } else { 0 };
    // No work list, lengths or merge items: the blocks derive them from the
    // device lengths. The merge counters and partials remain.
    let layout = workspace_layout(0, shape.batch as usize, 0, planned.row_chunks, num_slots, shape)
        .ok_or_else(|| Error::invalid("max_seq_len", "a split-partial workspace that fits in memory", format!("{num_slots} partial slots")))?;
    let capacity = Plan {
        arch: kernels.arch,
        mode: PlanMode::Capacity { chunks_per_seq },
        chunk_keys,
        num_slots,
        cluster,
        work: Vec::new(),
        merges: Vec::new(),
        uniform: None,
        layout,
        ..planned
    };
    finish(pair_heads(capacity, dev, &kernels.limits(false, true), opts.head_pair)?)
}

pub use crate::shape::check_block_table;


/// An MLA plan's balanced pieces (`work::balanced_work`) where
/// `heuristics::mla_balanced` takes them over `whole` (a work item a
/// sequence, longest first), else `whole`: the work, merges and slots.
fn mla_balanced_or(whole: (Vec<WorkItem>, Vec<MergeItem>, u32), seq_lens: &[u32], starts: &[u32], row_chunks: u32, wave: u64, keys_per_stage: u32, overhead_stages: u32) -> (Vec<WorkItem>, Vec<MergeItem>, u32) {
    let runs = heuristics::mla_balanced_runs(row_chunks, wave);
    let pieces = balanced_work(seq_lens, starts, runs, keys_per_stage, heuristics::MLA_MIN_PIECE_STAGES);
    let stages = |w: &WorkItem| (w.kv_end - w.kv_start).div_ceil(keys_per_stage);
    let whole_stages: Vec<u32> = whole.0.iter().map(stages).collect();
    let piece_stages: Vec<(u32, bool)> = pieces.0.iter().map(|w| (stages(w), w.partial_slot != decode_attn_abi::DIRECT_OUTPUT)).collect();
    if heuristics::mla_balanced(&whole_stages, &piece_stages, row_chunks, wave, overhead_stages) {
        pieces
    } else {
        whole
    }
}

/// The plan of `seq_lens` (`lens_param`: what errors about them name, the
/// caller's `seq_lens` or, for a capacity plan, `max_seq_len`).
#[allow(clippy::too_many_arguments)]
fn make_plan(shape: &DecodeShape, seq_lens: &[u32], seq_starts: &[u32], lens_param: &'static str, block_table: Vec<i32>, dev: &DeviceInfo, kernels: &FamilyKernels, capacity: bool, opts: &PlanOptions) -> Result<Plan> {
    let family = kernels.family;
    let specializable = family == Family::Wgmma && wgmma_specializable(shape.kv_format, shape.is_paged());
    let ranges = key_ranges(shape, seq_lens, seq_starts, window_align(shape, family));
    let transposed = transposed_kernel(shape, kernels, opts.transpose)?;
    let make = |block_table, specialized| {
        let info = transposed.map(|(info, _)| info).unwrap_or_else(|| kernels.limits(specialized, capacity));
        make_plan_for(shape, seq_lens, &ranges, lens_param, block_table, dev, &info, opts, family, PlanForm { specialized, transposed: transposed.map(|(_, form)| form) })
    };
    match opts.specialize {
        SpecializeChoice::Never => make(block_table, false),
        SpecializeChoice::Always if !specializable => Err(Error::Unsupported(format!(
            "no warp-specialised kernel for the {} family over a {} {} cache (only wgmma over strided quantized caches)",
            family.name(),
            if shape.is_paged() { "paged" } else { "strided" },
            shape.kv_format.name()
        ))),
        SpecializeChoice::Always => make(block_table, true),
        SpecializeChoice::Auto if specializable => {
            let specialized = make(block_table, true)?;
            if heuristics::specialize(specialized.waves(dev), &dev.tuning) {
                Ok(specialized)
            } else {
                make(specialized.block_table, false)
            }
        }
        SpecializeChoice::Auto => make(block_table, false),
    }
}

/// The limits and form of the MLA family's transposed kernel where the
/// plan runs it (`choice`, `Auto`: [`heuristics::mla_transposed`] to 16
/// rows, [`heuristics::mla_transposed_rows`] past them), else `None`; an
/// `Err` where `Always` cannot be honoured. Past 16 rows the kernel is the
/// row-chunk form (`Form::TransposedRows`: blocks of
/// `decode_attn_abi::mla_rows_per_block` rows, the plan's `row_chunks`
/// blocks an item).
fn transposed_kernel(shape: &DecodeShape, kernels: &FamilyKernels, choice: TransposeChoice) -> Result<Option<(KernelInfo, Form)>> {
    let rows = rows_of(shape);
    let available = if kernels.family != Family::Mla {
        Err("the MLA family alone has a transposed kernel".to_owned())
    } else if rows > MLA_T_ROWS {
        kernels.transposed_rows.map(|info| (info, Form::TransposedRows)).ok_or_else(|| {
            format!("the transposed MLA kernel serves at most {MLA_T_ROWS} query rows (group × q_len) of a {} cache (more in row chunks for the fp8 latent caches only); this shape has {rows}", shape.kv_format.name())
        })
    } else {
        kernels.transposed.map(|info| (info, Form::Transposed)).ok_or_else(|| format!("no transposed MLA kernel for a {} cache in this build", shape.kv_format.name()))
    };
    let auto = if rows > MLA_T_ROWS { heuristics::mla_transposed_rows(rows, shape.kv_format) } else { heuristics::mla_transposed(rows) };
    match (choice, available) {
        (TransposeChoice::Never, _) => Ok(None),
        (TransposeChoice::Always, Err(why)) => Err(Error::Unsupported(why)),
        (TransposeChoice::Always, Ok(info)) => Ok(Some(info)),
        (TransposeChoice::Auto, Ok(info)) if auto => Ok(Some(info)),
        (TransposeChoice::Auto, _) => Ok(None),
    }
}

/// The form of the kernel a plan is made for: the warp-specialised wgmma
/// kernel, the MLA family's transposed one, or (neither) the plain one.
#[derive(Clone, Copy)]
struct PlanForm {
    specialized: bool,
    /// The MLA family's transposed form the plan runs, if one.
    transposed: Option<Form>,
}

/// What each sequence's work reads: keys `starts[b] .. seq_lens[b]`,
/// `keys[b]` of them (from 0 without a window or key ranges), the
/// sequences' own first keys (`own`, empty without key ranges), and the
/// starts' alignment.
struct KeyRanges {
    starts: Vec<u32>,
    keys: Vec<u32>,
    own: Vec<u32>,
    align: u32,
}

/// The key ranges of `seq_lens` (validated) under the shape's window and
/// the sequences' own first keys `seq_starts` (validated; empty: 0).
fn key_ranges(shape: &DecodeShape, seq_lens: &[u32], seq_starts: &[u32], align: u32) -> KeyRanges {
    let own = |b: usize| seq_starts.get(b).copied().unwrap_or(0);
    let starts: Vec<u32> = seq_lens.iter().enumerate().map(|(b, &l)| range_start(l, own(b), shape.q_len, shape.window_param(), align)).collect();
    let keys = seq_lens.iter().zip(&starts).map(|(&l, &s)| l - s).collect();
    KeyRanges { starts, keys, own: seq_starts.to_vec(), align }
}

/// What a window's or a key range's first key is aligned down to in a plan
/// of `family` (`decode_attn_abi::range_start`): 16 keys over strided
/// caches, the smaller of a stage's keys and a page over paged ones; 1
/// without either.
pub fn window_align(shape: &DecodeShape, family: Family) -> u32 {
    if shape.variant.window.is_none() && !shape.variant.key_ranges {
        return 1;
    }
    match shape.kv_layout {
        crate::shape::KvLayout::Paged { page_size, .. } => tile_config(shape.kv_format, shape.head_dim, family).keys_per_stage.min(page_size.max(1)),
        _ => 16,
    }
}

/// The most keys one step of a capacity plan's sequences reads: the
/// capacity, or under a window `W + q_len + align − 1` (a window of `W`
/// keys left of the first new token, the new tokens, and the start's
/// alignment) where that is fewer.
fn capacity_keys(shape: &DecodeShape, align: u32) -> u32 {
    match shape.variant.window {
        None => shape.max_seq_len,
        Some(w) => (w as u64 + shape.q_len as u64 + align as u64 - 1).min(shape.max_seq_len as u64) as u32,
    }
}

/// [`make_plan`] for one kernel of `family` (`opts.family_for(shape)`):
/// `specialized` picks the warp-specialised wgmma kernel, which `kernel`
/// describes. The sizes (stages, splits, chunks) follow the keys each
/// sequence's work reads (`ranges`).
#[allow(clippy::too_many_arguments)]
fn make_plan_for(
    shape: &DecodeShape,
    seq_lens: &[u32],
    ranges: &KeyRanges,
    lens_param: &'static str,
    block_table: Vec<i32>,
    dev: &DeviceInfo,
    kernel: &KernelInfo,
    opts: &PlanOptions,
    family: Family,
    form: PlanForm,
) -> Result<Plan> {
    let PlanForm { specialized, transposed: transposed_form } = form;
    let transposed = transposed_form.is_some();
    let kernel_form = transposed_form.unwrap_or(if specialized { Form::Specialized } else { Form::Plain });
    kernel.validate()?;
    // validate() bounds num_q_heads × q_len (≥ group × q_len) to 32 bits.
    let rows = shape.rows_per_kv_head().ok_or_else(|| Error::invalid("num_q_heads", "group × q_len within 32 bits", shape.num_q_heads))?;
    let page_shift = shape.page_geometry().map(|(shift, _)| shift);
    let (format, d) = (shape.kv_format, shape.head_dim);
    if !family.serves(format, d) {
        let serves = if family == Family::Wgmma { "head_dim 128 only" } else if family == Family::Mla { "MLA's latent rows (head_dim 576, bf16 or fp8-per-head) only" } else { "the square head dims (64, 128, 256)" };
        return Err(Error::Unsupported(format!("the {} family serves {serves}; this shape is {:?} at head_dim {d}", family.name(), format)));
    }
    let tile = tile_config(format, d, family);
    // Splitting only shortens work items, so the longest sequence bounds
    // every item's stages. (A capacity plan's longest: at any length.)
    let keys = &ranges.keys[..];
    let longest = if lens_param == "max_seq_len" { capacity_keys(shape, ranges.align) } else { keys.iter().copied().max().unwrap_or(1) };
    let stages = if family == Family::Mla { MLA_STAGES } else { stages_for(format, d, family, specialized, longest) };
    // Keys per warp step along a stage: the most warps along K a stage feeds.
    let step_keys = if family == Family::Wgmma { WGMMA_KEYS } else { KEYS_PER_WARP_STEP };
    let (warps_m, warps_k, rows_per_block) = match family {
        // One warpgroup per 32-key step of a stage (two of a 64-key stage),
        // as many as the kernel's block may hold.
        Family::Wgmma => {
            let groups = (tile.keys_per_stage / WGMMA_KEYS).min(MAX_WARPS * MMA_M / WGMMA_M).min(kernel.max_threads_per_block / (WGMMA_M / MMA_M * 32));
            if groups == 0 {
                return Err(Error::Unsupported(format!("the wgmma kernel allows {} threads per block; a warpgroup needs 128", kernel.max_threads_per_block)));
            }
            (WGMMA_M / MMA_M, groups, WGMMA_M)
        }
        // Two warpgroups (`decode_attn_abi::MLA_THREADS`): of four row-tile
        // warps, or (transposed) one row tile, the warps along the keys.
        Family::Mla if transposed => (1, decode_attn_abi::mla_transposed_threads(format, kernel_form) / 32, decode_attn_abi::mla_rows_per_block(format, kernel_form)),
        Family::Mla => (MLA_ROWS / MMA_M, MLA_THREADS / (32 * (MLA_ROWS / MMA_M)), MLA_ROWS),
        Family::Wide => {
            let (m, k) = heuristics::block_shape(rows, tile.keys_per_stage, kernel);
            (m, k, m * MMA_M)
        }
        Family::Narrow => {
            let smem = |w| decode_smem_bytes(format, d, 1, w, family, page_shift, stages, Form::Plain);
            let larger = heuristics::narrow_warps_k(tile.keys_per_stage, dev, kernel, smem, true);
            let splits = match opts.split {
                SplitPolicy::Never => false,
                SplitPolicy::ChunkKeys(k) => keys.iter().any(|&l| l > k),
                SplitPolicy::Auto => {
                    let per_sm = heuristics::useful_blocks_per_sm(format, family, 1, larger, blocks_per_sm(dev, kernel, 32 * larger, smem(larger)), shape.is_paged(), &dev.tuning) as u64;
                    let blocks_per_len = shape.num_kv_heads as u64 * rows.div_ceil(NARROW_ROWS) as u64;
                    heuristics::auto_chunk_keys(keys, blocks_per_len, tile.keys_per_stage, dev.sm_count as u64 * per_sm, dev.tuning.split_overhead_stages) != u32::MAX
                }
            };
            let k = heuristics::narrow_block_warps(splits, longest, tile.keys_per_stage, dev, kernel, smem);
            (1, k, NARROW_ROWS)
        }
    };
    let warps_k = match opts.warps_k {
        None => warps_k,
        Some(w) if family == Family::Mla => {
            ensure(w == warps_k, "warps_k", format!("{warps_k} (the MLA kernel's warpgroups' warps) or none"), w)?;
            w
        }
        Some(w) => {
            let max_k = (tile.keys_per_stage / step_keys).max(1);
            ensure(
                w.is_power_of_two() && w <= max_k && warps_m * w <= MAX_WARPS.min(kernel.max_threads_per_block / 32),
                "warps_k",
                format!("a power of two ≤ {} (one warp per {step_keys} keys of a {}-key stage, ≤ {} warps per block)", max_k.min(MAX_WARPS / warps_m), tile.keys_per_stage, MAX_WARPS),
                w,
            )?;
            w
        }
    };
    let row_chunks = rows.div_ceil(rows_per_block);
    ensure(
        row_chunks <= MAX_GRID_YZ,
        "num_q_heads",
        format!("at most {} query rows per kv head (group × q_len), the grid's z limit", MAX_GRID_YZ as u64 * rows_per_block as u64),
        rows,
    )?;
    let smem_bytes = decode_smem_bytes(format, d, warps_m, warps_k, family, page_shift, stages, kernel_form);
    if smem_bytes > dev.max_smem_per_block {
        return Err(Error::Unsupported(format!(
            "head_dim {} needs {smem_bytes} bytes of shared memory per block; this device allows {}",
            shape.head_dim, dev.max_smem_per_block
        )));
    }
    let threads = block_threads(specialized, warps_m, warps_k);
    if threads > kernel.max_threads_per_block {
        return Err(Error::Unsupported(format!(
            "{rows} query rows per kv head need blocks of {threads} threads ({warps_m} row tiles); this kernel allows {}",
            kernel.max_threads_per_block
        )));
    }
    let blocks_per_sm = blocks_per_sm(dev, kernel, threads, smem_bytes);
    if blocks_per_sm == 0 {
        return Err(Error::Unsupported(format!(
            "a block of {threads} threads x {} registers and {smem_bytes} B shared memory does not fit on one SM",
            kernel.regs_per_thread
        )));
    }
    let blocks_per_len = shape.num_kv_heads as u64 * row_chunks as u64;
    let chunk_keys = match opts.split {
        SplitPolicy::Never => u32::MAX,
        SplitPolicy::ChunkKeys(keys) => {
            ensure(keys >= 1, "split.chunk_keys", "at least 1", keys)?;
            keys.div_ceil(tile.keys_per_stage).saturating_mul(tile.keys_per_stage)
        }
        SplitPolicy::Auto => {
            let per_sm = heuristics::useful_blocks_per_sm(format, family, warps_m, warps_m * warps_k, blocks_per_sm, shape.is_paged(), &dev.tuning) as u64;
            let chunk = heuristics::auto_chunk_keys(keys, blocks_per_len, tile.keys_per_stage, dev.sm_count as u64 * per_sm, dev.tuning.split_overhead_stages);
            if family == Family::Mla {
                heuristics::mla_chunk_keys(chunk, longest, tile.keys_per_stage, row_chunks)
            } else {
                chunk
            }
        }
    };

    // Count before building: a tiny chunk over long sequences must be an
    // `Err`, not an allocation failure.
    let total_items = keys.iter().map(|&l| chunks_of(l, chunk_keys) as u64).fold(0u64, u64::saturating_add);
    let param = if matches!(opts.split, SplitPolicy::ChunkKeys(_)) { "split.chunk_keys" } else { lens_param };
    ensure_work_items(total_items, shape, param, "(Σ ⌈len / chunk⌉)")?;

    let max_chunks = keys.iter().map(|&l| chunks_of(l, chunk_keys)).max().unwrap_or(1);
    let cluster = heuristics::cluster_size(max_chunks, shape, transposed, dev.max_cluster, opts.merge, &dev.tuning);
    cluster_honoured(opts.merge, max_chunks, cluster, shape, transposed, dev)?;
    let (work, merges, num_slots) = if cluster > 1 {
        let items = seq_lens.len() as u64 * cluster as u64;
        ensure_work_items(items, shape, param, "(batch × chunks per cluster)")?;
        (cluster_work(seq_lens, chunk_keys, cluster), Vec::new(), 0)
    } else {
        let whole = global_merge_work(seq_lens, &ranges.starts, chunk_keys, total_items as usize);
        // Balanced pieces: plans of host lengths whose automatic split left
        // every sequence whole, on the 64-row MLA kernel.
        if family == Family::Mla && !transposed && opts.split == SplitPolicy::Auto && chunk_keys == u32::MAX && lens_param != "max_seq_len" {
            let wave = dev.sm_count as u64 * heuristics::useful_blocks_per_sm(format, family, warps_m, warps_m * warps_k, blocks_per_sm, shape.is_paged(), &dev.tuning) as u64;
            let work = mla_balanced_or(whole, seq_lens, &ranges.starts, row_chunks, wave, tile.keys_per_stage, dev.tuning.split_overhead_stages);
            ensure_work_items(work.0.len() as u64, shape, lens_param, "(balanced pieces)")?;
            work
        } else {
            whole
        }
    };
    let layout = workspace_layout(work.len(), seq_lens.len(), block_table.len(), row_chunks, num_slots, shape)
        .ok_or_else(|| Error::invalid(lens_param, "a split-partial workspace that fits in memory", format!("{num_slots} partial slots")))?;
    // (Key ranges: the blocks read each sequence's first key, which a
    // uniform plan's params do not carry.)
    let uniform = if cluster > 1 || shape.variant.key_ranges { None } else { uniform_work(seq_lens, &work, &merges, chunk_keys, shape.q_len, (shape.window_param(), ranges.align)) };

    // (A cluster merge's clusters are a row chunk's chunks, not an item's
    // row chunks.)
    let row_cluster = if cluster > 1 { 0 } else { heuristics::mla_row_cluster(family, transposed, row_chunks, dev.max_cluster, work.len() as u64 * row_chunks as u64, dev.sm_count as u64 * blocks_per_sm as u64) };

    Ok(Plan {
        id: NEXT_PLAN_ID.fetch_add(1, Ordering::Relaxed),
        mode: PlanMode::Lengths,
        shape: shape.clone(),
        seq_lens: seq_lens.to_vec(),
        seq_starts: ranges.own.clone(),
        block_table,
        work,
        merges,
        num_slots,
        chunk_keys,
        arch: dev.arch,
        family,
        warps_m,
        warps_k,
        rows_per_block,
        row_chunks,
        smem_bytes,
        stages,
        blocks_per_sm,
        cluster,
        row_cluster,
        specialized,
        transposed: transposed_form,
        heads_per_block: 1,
        uniform,
        window_align: ranges.align,
        in_attention_merge_max_bytes: dev.tuning.in_attention_merge_max_bytes,
        sm_count: dev.sm_count,
        layout,
        launch: Launch::UNSET,
        metadata: Vec::new(),
    })
}

/// Threads of an attention block of `warps_m × warps_k` compute warps: the
/// warp-specialised wgmma kernels add a producer warpgroup
/// (`decode_attn_abi::WGMMA_PRODUCER_WARPS`).
fn block_threads(specialized: bool, warps_m: u32, warps_k: u32) -> u32 {
    let producer = if specialized { WGMMA_PRODUCER_WARPS } else { 0 };
    32 * (warps_m * warps_k + producer)
}

/// Query rows per kv head of a validated shape.
fn rows_of(shape: &DecodeShape) -> u32 {
    shape.rows_per_kv_head().unwrap_or(u32::MAX)
}

/// Keys per pipeline stage of the wide and narrow kernels for a format and
/// head dim (their chunks are multiples of it).
pub fn stage_keys(format: decode_attn_abi::KvFormat, head_dim: u32) -> u32 {
    stage_keys_for(format, head_dim, Family::Wide)
}

/// Keys per pipeline stage of a family's kernels (the wgmma kernels of
/// quantized formats stage half the keys the others do).
pub fn stage_keys_for(format: decode_attn_abi::KvFormat, head_dim: u32, family: Family) -> u32 {
    tile_config(format, head_dim, family).keys_per_stage
}

/// `MergeChoice::Cluster` asked for a cluster merge: an `Err` naming why
/// when sequences split into `chunks` and the plan merges them otherwise
/// (`cluster` 0), rather than a global merge the caller did not ask for.
fn cluster_honoured(choice: MergeChoice, chunks: u32, cluster: u32, shape: &DecodeShape, transposed: bool, dev: &DeviceInfo) -> Result<()> {
    if choice != MergeChoice::Cluster || chunks <= 1 || cluster > 1 {
        return Ok(());
    }
    let why = if shape.is_latent() && transposed {
        "the MLA family's transposed kernels have no cluster-merge form (the 64-row kernel has: TransposeChoice::Never)".to_owned()
    } else if !shape.kernel_variant().builds(Merge::Cluster, Form::Plain) {
        format!("the {} variant has no cluster-merge kernels", shape.kernel_variant().name())
    } else if dev.arch.module_for(Merge::Cluster.needs()).is_none() {
        format!("a cluster merge needs {} kernels; this GPU runs {}'s", Merge::Cluster.needs().name(), dev.arch.name())
    } else if dev.max_cluster < 2 {
        "the device has no thread-block clusters".to_owned()
    } else {
        format!("a sequence splits into {chunks} chunks, more than the device's largest cluster ({})", dev.max_cluster)
    };
    Err(Error::Unsupported(format!("MergeChoice::Cluster: {why}; merge globally (MergeChoice::Global or Auto), or split into fewer chunks")))
}
