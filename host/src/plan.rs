//! Planning: shape + sequence lengths + device properties → launch
//! configuration, work list and workspace layout. Pure CPU code with no CUDA
//! types, so every decision here is unit-tested without a GPU.

use std::sync::atomic::{AtomicU64, Ordering};

use decode_attn_abi::{
    capacity_merge_item, capacity_work_item, decode_smem_bytes, merge_rows_per_block, Form, KernelId, Merge, stages_for, tile_config, wgmma_specializable, MergeItem, Family, WorkItem, DIRECT_OUTPUT, KEYS_PER_WARP_STEP, MAX_WARPS, MAX_WARPS_M, MMA_M, NARROW_ROWS, WGMMA_KEYS, WGMMA_M, WGMMA_PRODUCER_WARPS,
};

use crate::error::{ensure, Error, Result};
use crate::shape::DecodeShape;
use decode_attn_abi::KvFormat;

/// What the planner needs to know about the GPU (read from the device by
/// `DecodeAttention::new`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub sm_count: u32,
    /// Dynamic + static shared memory one block may opt in to.
    pub max_smem_per_block: u32,
    pub max_smem_per_sm: u32,
    pub max_threads_per_sm: u32,
    pub regs_per_sm: u32,
    pub l2_bytes: u32,
    /// Most blocks per thread-block cluster a launch may use: 8 (the
    /// portable size) on compute capability 9.0 and later with a driver
    /// that has `cuLaunchKernelEx`, else 0 (no cluster merge).
    pub max_cluster: u32,
}

impl DeviceInfo {
    /// Rejects figures the planner cannot work with (zero SMs, no shared
    /// memory, ...), naming the field.
    pub fn validate(&self) -> Result<()> {
        ensure(self.sm_count >= 1, "device.sm_count", "at least 1", self.sm_count)?;
        ensure(self.max_smem_per_block >= 1, "device.max_smem_per_block", "at least 1 byte", self.max_smem_per_block)?;
        ensure(self.max_smem_per_sm >= 1, "device.max_smem_per_sm", "at least 1 byte", self.max_smem_per_sm)?;
        ensure(self.max_threads_per_sm >= 32, "device.max_threads_per_sm", "at least 32", self.max_threads_per_sm)?;
        ensure(self.regs_per_sm >= 256, "device.regs_per_sm", "at least 256", self.regs_per_sm)?;
        Ok(())
    }

    /// An H100 SXM's figures, for tests and examples that run without a GPU.
    pub const H100_SXM: DeviceInfo = DeviceInfo {
        sm_count: 132,
        max_smem_per_block: 227 * 1024,
        max_smem_per_sm: 228 * 1024,
        max_threads_per_sm: 2048,
        regs_per_sm: 65536,
        l2_bytes: 50 * 1024 * 1024,
        max_cluster: 8,
    };
}

/// What the compiled attention kernel allows (from `cuFuncGetAttribute`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    pub max_threads_per_block: u32,
    pub regs_per_thread: u32,
}

impl KernelInfo {
    pub fn validate(&self) -> Result<()> {
        ensure(
            (32..=1024).contains(&self.max_threads_per_block),
            "kernel.max_threads_per_block",
            "32..=1024",
            self.max_threads_per_block,
        )?;
        ensure((1..=255).contains(&self.regs_per_thread), "kernel.regs_per_thread", "1..=255", self.regs_per_thread)?;
        Ok(())
    }
}

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
    let blocks = items.saturating_mul(shape.num_kv_heads as u64);
    ensure(blocks <= MAX_GRID_X, param, format!("at most {MAX_GRID_X} attention blocks (work items × num_kv_heads), CUDA's grid x limit"), blocks)
}

/// How a sequence's keys are divided among blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SplitPolicy {
    /// Split only when one block per (sequence, kv head) would not fill the
    /// GPU; then pick the chunk size that minimizes the estimated time.
    #[default]
    Auto,
    /// One block per (sequence, kv head, row chunk); no merge.
    Never,
    /// Chunks of this many keys (rounded up to a whole pipeline stage).
    ChunkKeys(u32),
}

/// Rows per kv head past which `Auto` picks the wgmma family where it
/// serves the cache: its 64-row tiles would leave half their rows empty at
/// 32 and fewer, where wide blocks of one or two row tiles serve instead.
pub const WGMMA_AUTO_MIN_ROWS: u32 = 32;

/// Which kernel family serves the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FamilyChoice {
    /// `Narrow` for a quantized cache whose kv heads have at most 8 query
    /// rows (`group × q_len`); `Wgmma` for any cache at head_dim 128 with
    /// more than [`WGMMA_AUTO_MIN_ROWS`]; else `Wide`.
    #[default]
    Auto,
    /// This family whatever the shape (`Wide` and `Narrow` serve every
    /// shape; `Wgmma` head_dim 128, else the plan is an `Err`).
    Force(Family),
}

/// Whether a wgmma plan of a strided quantized cache runs the
/// warp-specialised kernel (`decode_attn_abi::wgmma_specializable`: a
/// producer warpgroup copies and converts the stages, one 384-thread block
/// per SM) or the unspecialised one (every warp copies, converts and
/// computes, two 256-thread blocks per SM).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SpecializeChoice {
    /// The warp-specialised kernel when its grid fits two waves (at one
    /// block per SM), else the unspecialised one. Measured side by side on
    /// an H100 (docs/perf.md, twenty-sixth session), the specialised kernel
    /// is faster on grid B's seven one-wave rows and on (1K, 256), whose
    /// 256 blocks it runs in two waves. Grids of more waves are unmeasured
    /// and keep the unspecialised kernel, whose two blocks per SM overlap
    /// each other's start and end.
    #[default]
    Auto,
    /// The unspecialised kernel.
    Never,
    /// The warp-specialised kernel; an `Err` where none exists (not the
    /// wgmma family, a 16-bit or a paged cache).
    Always,
}

/// Whether a narrow plan of a quantized cache (strided or paged) runs blocks of two
/// adjacent kv heads (`DecodeKernel::heads_per_block`): half of each
/// block's warps per head, each stage holding half its keys of both. In a
/// token-major cache a token's rows of the two heads are one piece of
/// twice a row's bytes; HBM serves 128-byte pieces scattered at the token
/// stride more slowly than 256-byte ones (docs/design/nhd-head-groups.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HeadPairChoice {
    /// Head pairs where the plan allows them ([`head_pair_unsupported`]),
    /// the cache is token-major (adjacent heads' rows adjacent), the
    /// sequences average at least [`HEAD_PAIR_MIN_MEAN_KEYS`] keys, the
    /// paired grid keeps [`HEAD_PAIR_MIN_BUSY_SMS_PERCENT`] % of the SMs
    /// the unpaired one keeps busy, and (paged pools) it fills
    /// [`HEAD_PAIR_PAGED_MIN_WAVES`] waves.
    #[default]
    Auto,
    /// One kv head per block.
    Never,
    /// Head pairs; an `Err` where the plan does not allow them.
    Always,
}

/// Keys a plan's sequences must average for `Auto` to pair heads. A
/// pair's stage holds half its keys of each head, so a short sequence
/// takes twice the stages and the pipeline's fill and drain weigh more:
/// on an H100, int8 grid D (64, 128) (two pair stages a block) ran 10 %
/// slower paired, (8, 1K) 2 % and (128, 2K) 3.7 % faster (docs/perf.md,
/// twenty-fifth session). 512 keys (eight pair stages) lies between the
/// rows measured; no row between them was.
pub const HEAD_PAIR_MIN_MEAN_KEYS: u64 = 512;

/// The share (%) of the SMs busy with the unpaired grid that the paired one
/// (half the blocks) must keep busy for `Auto` to pair heads. Pairs read a
/// token-major int8 cache 2-4 % faster; an SM left idle costs its share:
/// grid D (8, 1K)'s 128 pairs on 132 SMs (3 % idle) measured 2 % faster
/// than its 256 one-head blocks, so a grid that leaves 5 % idle is about
/// where pairs stop paying (the break-even is not measured).
pub const HEAD_PAIR_MIN_BUSY_SMS_PERCENT: u64 = 95;

/// Waves (the unpaired plan's resident blocks) a paired grid of a paged
/// cache must fill for `Auto` to pair heads. A paged block waits for each
/// stage's page ids before its copies; a second resident block hides that,
/// and pairing takes it away where the grid is short: int8 grid D (8, 1K)
/// in 16-token pages read +20 % over contiguous paired (128 pairs, one a
/// SM) against +5.5 % unpaired (256 blocks, two a SM), while D (128, 2K)
/// (2048 pairs) read +4.6 % paired against +6.3 % (docs/perf.md,
/// twenty-fifth session).
pub const HEAD_PAIR_PAGED_MIN_WAVES: u64 = 2;

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
        Some("no head-pair kernel for this format, dtype, head dim and variant (int8 at head_dim 128, standard softmax)")
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
            // Adjacent heads' rows adjacent: what makes a pair's piece one.
            let head_bytes = s.kv_strides().head.checked_mul(s.kv_format.bits() as u64).map(|b| b / 8);
            let adjacent = head_bytes == Some(s.kv_format.row_bytes(s.head_dim) as u64);
            let (x, y, z) = plan.grid();
            let blocks = x as u64 * y as u64 * z as u64;
            let paired = blocks / 2;
            let busy = |blocks: u64| blocks.min(dev.sm_count as u64);
            let keeps_sms = 100 * busy(paired) >= HEAD_PAIR_MIN_BUSY_SMS_PERCENT * busy(blocks);
            let slots = dev.sm_count as u64 * plan.blocks_per_sm as u64;
            let paged_waves = !s.is_paged() || paired >= HEAD_PAIR_PAGED_MIN_WAVES * slots;
            let total_keys: u64 = plan.seq_lens.iter().map(|&l| l as u64).sum();
            let long_enough = total_keys >= HEAD_PAIR_MIN_MEAN_KEYS * plan.seq_lens.len() as u64;
            why_not.is_none() && adjacent && keeps_sms && long_enough && paged_waves
        }
    };
    if pair {
        let s = &plan.shape;
        let longest = plan.seq_lens.iter().copied().max().unwrap_or(1);
        let stages = stages_for(s.kv_format, s.head_dim, Family::Narrow, false, longest.saturating_mul(2));
        if stages != plan.stages {
            let page_shift = s.page_geometry().map(|(shift, _)| shift);
            let smem = decode_smem_bytes(s.kv_format, s.head_dim, plan.warps_m, plan.warps_k, Family::Narrow, page_shift, stages, false);
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

/// How split sequences may be merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MergeChoice {
    /// In a thread-block cluster ([`MergeMode::Cluster`]) when the cache is
    /// 16-bit, the device has clusters and no sequence has more than
    /// [`AUTO_CLUSTER_MAX`] chunks; else through global memory
    /// ([`merge_mode`]).
    #[default]
    Auto,
    /// In a cluster whenever no sequence has more chunks than the device's
    /// largest cluster (`DeviceInfo::max_cluster`); else as `Auto`.
    Cluster,
    /// Through fp32 partials in global memory, never in a cluster.
    Global,
}

/// Most chunks per sequence the `Auto` merge puts in a cluster. Measured on
/// an H100 (docs/perf.md, "Cluster merge"): clusters of 2 are 1-4.5 %
/// faster than the global merge (grid B (128, 2K), A B=64, int4 A B=128);
/// clusters of 4 and 8 were up to 1.5× slower on most rows.
pub const AUTO_CLUSTER_MAX: u32 = 2;

/// Whether the `Auto` merge may use a cluster for this cache format: 16-bit
/// caches only. Since the in-attention merge became one acquire-release
/// atomic (twenty-first session), the quantized kernels' two-chunk rows run
/// 1.3-3.5 % faster merged through global memory (int8 A B=64, grid B
/// (4K, 64), int4 A B=128; docs/perf.md, twenty-third session), while the
/// 16-bit grid B (4K, 64) still runs 2-3 % faster in clusters.
pub fn auto_cluster_allowed(format: KvFormat) -> bool {
    !format.is_quantized()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PlanOptions {
    pub split: SplitPolicy,
    pub family: FamilyChoice,
    /// Warps along the keys per block (1, 2, 4 or 8; at most one per 16 keys
    /// of a pipeline stage); `None` picks the count that keeps the most
    /// warps resident.
    pub warps_k: Option<u32>,
    pub merge: MergeChoice,
    pub specialize: SpecializeChoice,
    pub head_pair: HeadPairChoice,
}

impl PlanOptions {
    /// The family these options select for `shape`.
    pub fn family_for(&self, shape: &DecodeShape) -> Family {
        match self.family {
            FamilyChoice::Force(v) => v,
            // Measured on an H100 (docs/perf.md, "Narrow family"): narrow
            // is 3-13 % faster for quantized caches with ≤ 8 rows and no
            // faster for bf16 / fp16, whose fragments cost nothing to convert.
            FamilyChoice::Auto => match shape.rows_per_kv_head() {
                Some(rows) if rows <= NARROW_ROWS && shape.kv_format.is_quantized() => Family::Narrow,
                // Measured on an H100 (docs/perf.md, "Twelfth session"): grid
                // B's 48 rows 2.5-3.5 % faster than wide on every row.
                // Quantized caches too (docs/perf.md, "Thirteenth session"):
                // grid B int8 8-10 % and int4-g32 23-25 % faster than wide.
                Some(rows) if rows > WGMMA_AUTO_MIN_ROWS && Family::Wgmma.serves(shape.kv_format, shape.head_dim) => Family::Wgmma,
                _ => Family::Wide,
            },
        }
    }
}

/// Where a plan's split sequences are merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeMode {
    /// In the attention kernel, through distributed shared memory: the
    /// chunks of a sequence are the blocks of one thread-block cluster,
    /// which merge their rows after a cluster barrier. No fp32 partials, no
    /// counter, no second launch.
    Cluster,
    /// In the attention kernel: the last block of each (sequence, kv head,
    /// row chunk) to finish merges its rows. No second launch.
    InAttention,
    /// By the merge kernel, launched after the attention kernel, one block
    /// per 1–4 output rows: for merges too large for one block to finish
    /// without becoming the tail ([`IN_ATTENTION_MERGE_MAX_BYTES`]).
    Kernel,
}

/// Partial bytes one block may merge inside the attention kernel (slots ×
/// rows × head_dim × 4). Measured on an H100 (docs/perf.md, "Split merge in
/// the attention kernel"): rows of 64 KB and less (grid C's 32 slots of 4
/// rows, grid A's 8 of 8) gain 2-3.5 µs; grid B's 48-row blocks lose 1-2 µs
/// from 4 slots (98 KB) and up to 2.1× at 128 slots (3 MB in one block),
/// where the merge kernel's block per row is 12 % faster than before.
pub const IN_ATTENTION_MERGE_MAX_BYTES: u64 = 64 << 10;

/// The merge mode for sequences of up to `max_slots` partials, of blocks of
/// `rows` query rows of `head_dim`.
pub fn merge_mode(max_slots: u32, rows: u32, head_dim: u32) -> MergeMode {
    if max_slots as u64 * rows as u64 * head_dim as u64 * 4 <= IN_ATTENTION_MERGE_MAX_BYTES {
        MergeMode::InAttention
    } else {
        MergeMode::Kernel
    }
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
/// capacity ([`PlanMode`]).
#[derive(Clone, Debug)]
pub struct Plan {
    pub(crate) id: u64,
    pub(crate) mode: PlanMode,
    pub(crate) shape: DecodeShape,
    /// The lengths planned for (capacity plans: the capacity, `max_seq_len`
    /// for every sequence).
    pub(crate) seq_lens: Vec<u32>,
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
    /// Runs the warp-specialised wgmma kernel ([`SpecializeChoice`]).
    pub(crate) specialized: bool,
    /// Kv heads per block: 2 for head pairs ([`HeadPairChoice`]), whose
    /// `warps_k` warps split evenly over the two heads.
    pub(crate) heads_per_block: u32,
    /// `(length, chunks per sequence)` when every sequence has the same
    /// length and the work and merge items are exactly a capacity plan's at
    /// that length ([`uniform_work`]): runs pass the length in the kernel's
    /// params, so no block loads its work item, length or merge item.
    pub(crate) uniform: Option<(u32, u32)>,
    pub(crate) layout: WorkspaceLayout,
}

/// Byte offsets inside the workspace buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkspaceLayout {
    pub work: usize,
    pub seq_lens: usize,
    /// Paged caches' block table (`[batch, pages_per_seq]` i32).
    pub block_table: usize,
    /// One [`MergeItem`] per sequence: its partial slots.
    pub merges: usize,
    /// `[batch, num_kv_heads, row_chunks]` u32 arrival counters of split
    /// sequences' blocks (zero between runs: the last block resets its own).
    pub merge_counters: usize,
    /// Bytes of the metadata region (work, seq_lens, block table, merges,
    /// counters), uploaded per plan (capacity plans: only the counters,
    /// zeroed by the first step of the plan in a workspace).
    pub metadata_bytes: usize,
    pub partial_o: usize,
    pub partial_lse: usize,
    pub total_bytes: usize,
}

impl Plan {
    pub fn shape(&self) -> &DecodeShape {
        &self.shape
    }
    pub fn mode(&self) -> PlanMode {
        self.mode
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
    pub fn work(&self) -> &[WorkItem] {
        &self.work
    }
    pub fn merges(&self) -> &[MergeItem] {
        &self.merges
    }
    pub fn num_slots(&self) -> u32 {
        self.num_slots
    }
    pub fn chunk_keys(&self) -> u32 {
        self.chunk_keys
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
        let form = if self.specialized {
            Form::Specialized
        } else if self.heads_per_block > 1 {
            Form::HeadPair
        } else if self.runs_capacity_twin() {
            Form::Capacity
        } else {
            Form::Plain
        };
        self.kernel_id_with(form)
    }
    /// The plan's kernel in form `form`.
    fn kernel_id_with(&self, form: Form) -> KernelId {
        let s = &self.shape;
        KernelId {
            format: s.kv_format,
            dtype: s.dtype,
            head_dim: s.head_dim,
            family: self.family,
            addressing: s.addressing(),
            merge: if self.cluster > 1 { Merge::Cluster } else { Merge::Global },
            form,
            variant: s.variant(),
        }
    }
    /// Whether every block of the grid is resident at once (one wave at
    /// [`Plan::blocks_per_sm`]).
    pub fn fits_one_wave(&self, dev: &DeviceInfo) -> bool {
        self.waves(dev) <= 1
    }
    /// Waves of the grid at [`Plan::blocks_per_sm`]: the resident rounds its
    /// blocks need.
    pub fn waves(&self, dev: &DeviceInfo) -> u64 {
        let (x, y, z) = self.grid();
        (x as u64 * y as u64 * z as u64).div_ceil(dev.sm_count as u64 * self.blocks_per_sm as u64)
    }
    /// Blocks per thread-block cluster (0: no clusters; see [`MergeMode::Cluster`]).
    pub fn cluster(&self) -> u32 {
        self.cluster
    }
    pub fn layout(&self) -> &WorkspaceLayout {
        &self.layout
    }
    /// Threads per attention block: the `warps_m × warps_k` compute warps,
    /// then (warp-specialised wgmma kernels) the producer warps.
    pub fn block_threads(&self) -> u32 {
        block_threads(self.specialized, self.warps_m, self.warps_k)
    }
    /// Attention grid: (work items × kv heads, 1, row chunks), a work
    /// item's kv heads consecutive, or with a cluster merge a cluster's
    /// chunks (`decode_attn_abi::decode_grid_x`, `decode_block_item`).
    pub fn grid(&self) -> (u32, u32, u32) {
        // make_plan / plan_capacity bound the product by MAX_GRID_X.
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
    /// Where split sequences are merged (unsplit plans: a no-op either way),
    /// from the most slots a sequence has and the rows a block merges.
    pub fn merge_mode(&self) -> MergeMode {
        if self.cluster > 1 {
            return MergeMode::Cluster;
        }
        merge_mode(self.max_splits(), self.rows_per_block.min(rows_of(&self.shape)), self.shape.head_dim)
    }
    /// Merge-kernel grid ([`MergeMode::Kernel`] plans that split; else
    /// `None`): (sequences, groups of [`Plan::merge_rows_per_block`] output
    /// rows up to grid y's limit; the kernel strides over the rest).
    pub fn merge_grid(&self) -> Option<(u32, u32, u32)> {
        if self.merge_mode() != MergeMode::Kernel || self.max_splits() <= 1 {
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
    /// Whether the merge kernel is launched as a programmatic dependent of
    /// the attention kernel (its blocks take the SMs the attention blocks
    /// leave, with no launch gap; `DecodeAttention` falls back to a plain
    /// launch on drivers without `cuLaunchKernelEx`).
    pub fn overlaps_merge(&self) -> bool {
        self.merge_grid().is_some()
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
    /// Bytes a run must move at least: every visible K and V row once with
    /// its side data (quantized formats' scales and zeros), plus Q and O (the
    /// benchmark's GB/s numerator, as SPEC.md defines it); capacity plans:
    /// at capacity. Saturates at `u64::MAX`.
    pub fn bytes_moved(&self) -> u64 {
        let (format, d) = (self.shape.kv_format, self.shape.head_dim);
        let row = format.row_bytes(d) as u64 + format.side_bytes(d) as u64;
        let keys: u64 = self.seq_lens.iter().map(|&l| l as u64).fold(0, u64::saturating_add);
        let kv = keys.saturating_mul(self.shape.num_kv_heads as u64).saturating_mul(row).saturating_mul(2);
        kv.saturating_add(self.shape.q_bytes().unwrap_or(u64::MAX).saturating_mul(2))
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
    /// The metadata region's bytes, as the kernels read them.
    pub fn metadata(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; self.layout.metadata_bytes];
        let put = |bytes: &mut [u8], at: usize, src: &[u8]| bytes[at..at + src.len()].copy_from_slice(src);
        put(&mut bytes, self.layout.work, bytemuck::cast_slice(&work_words(&self.work)));
        put(&mut bytes, self.layout.seq_lens, bytemuck::cast_slice(&self.seq_lens));
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

fn work_words(work: &[WorkItem]) -> Vec<u32> {
    work.iter().flat_map(|w| [w.batch, w.kv_start, w.kv_end, w.partial_slot]).collect()
}
fn merge_words(merges: &[MergeItem]) -> Vec<u32> {
    merges.iter().flat_map(|m| [m.batch, m.first_slot, m.num_slots, 0]).collect()
}

const ALIGN: usize = 256;

static NEXT_PLAN_ID: AtomicU64 = AtomicU64::new(1);

/// Block shape (`warps_m`, `warps_k`) of the `Wide` family for `rows`
/// packed rows: warps along M cover up to `MAX_WARPS_M * 16` rows, warps
/// along K take the rest of the warp budget.
pub fn block_shape(rows: u32, keys_per_stage: u32, kernel: &KernelInfo) -> (u32, u32) {
    let rows = rows.max(1);
    let warps_m = rows.div_ceil(MMA_M).clamp(1, MAX_WARPS_M);
    let max_warps = MAX_WARPS.min(kernel.max_threads_per_block / 32).max(warps_m);
    let max_k = (keys_per_stage / KEYS_PER_WARP_STEP).max(1);
    let mut warps_k = 4.min(max_k);
    while warps_k > 1 && warps_m * warps_k > max_warps {
        warps_k /= 2;
    }
    (warps_m, warps_k)
}

/// Warps along K of a `Narrow` block (one row tile): the power of two up to
/// one per 16 keys of a stage (and `MAX_WARPS`) that keeps the most warps
/// resident per SM; on a tie the larger block when `prefer_larger`, else
/// the smaller (more blocks resident).
pub fn narrow_warps_k(keys_per_stage: u32, dev: &DeviceInfo, kernel: &KernelInfo, smem: impl Fn(u32) -> u32, prefer_larger: bool) -> u32 {
    let max_k = (keys_per_stage / KEYS_PER_WARP_STEP).clamp(1, MAX_WARPS).min((kernel.max_threads_per_block / 32).max(1));
    let mut best = (0u32, 1u32);
    let mut w = 1;
    while w <= max_k {
        let resident = blocks_per_sm(dev, kernel, 32 * w, smem(w)) * w;
        if resident > best.0 || (resident == best.0 && prefer_larger) {
            best = (resident, w);
        }
        w *= 2;
    }
    best.1
}

/// Resident warps per SM past which more co-resident blocks stop adding
/// throughput, where measured (block of `warps_m` row-tile warps):
/// - a narrow int8 block of 8 warps alone keeps an SM's share of HBM busy,
///   so splitting a sequence further only to fill a second block slot adds
///   merge work and pipeline fills (H100, grid C: 16 splits 26 / 56 / 83 %
///   of the roofline at 8K / 32K / 128K against 23 / 54 / 77 % with 32);
/// - so does one 4-warp wide bf16 / fp16 block of one row tile (H100: grid
///   C 8K / 32K / 128K 23.2 / 57.1 / 187.5 → 21.7 / 55.0 / 184.3 µs with
///   16 splits instead of 32, grid A B=64 / 128 −1.5 / −1.9 %, no row
///   slower; `docs/perf.md`, "Splits for one block per SM");
/// - so does one 8-warp bf16 / fp16 wgmma block (two warpgroups; H100,
///   grid B's split rows: 2048-key chunks, one block per SM, 3.0-4.9 µs
///   faster than 1024-key chunks filling both block slots, on every row
///   from (2K, 128) to (128K, 2); half the partials to merge, and the
///   attention kernel alone streams as fast; `docs/perf.md`, eighteenth
///   session).
///
/// int4 (measured: its steps do about twice int8's work per byte, and more
/// resident warps hide more of it) and blocks of several row tiles on
/// `mma.sync` (grid B: one per SM made B ≤ 64 up to 13 % slower; the wide
/// int8 kernel's 3 row-tile warps convert the same bytes) gain from every
/// resident warp, as do the quantized wgmma kernels (their warp-specialised
/// form, one block per SM, is planned where its grid fits one wave).
pub fn saturating_warps_per_sm(format: KvFormat, family: Family, warps_m: u32) -> Option<u32> {
    match (format, family) {
        (KvFormat::Int8, Family::Narrow) => Some(8),
        (KvFormat::Bf16 | KvFormat::F16, Family::Wide) if warps_m == 1 => Some(4),
        (KvFormat::Bf16 | KvFormat::F16, Family::Wgmma) => Some(8),
        _ => None,
    }
}

/// The blocks per SM the split planner should fill: all that fit, or as
/// many as reach [`saturating_warps_per_sm`] (at least one).
pub fn useful_blocks_per_sm(format: KvFormat, family: Family, warps_m: u32, warps_per_block: u32, fit: u32) -> u32 {
    match saturating_warps_per_sm(format, family, warps_m) {
        Some(w) => fit.min((w / warps_per_block.max(1)).max(1)),
        None => fit,
    }
}

/// Blocks of `threads` threads using `smem` bytes that fit on one SM.
pub fn blocks_per_sm(dev: &DeviceInfo, kernel: &KernelInfo, threads: u32, smem: u32) -> u32 {
    // The driver reserves 1 KiB of shared memory per block.
    let by_smem = dev.max_smem_per_sm as u64 / (smem as u64 + 1024);
    // Registers are allocated per warp in units of 256.
    let regs_per_warp = (kernel.regs_per_thread.max(1) as u64 * 32).div_ceil(256) * 256;
    let by_regs = dev.regs_per_sm as u64 / (regs_per_warp * threads.div_ceil(32).max(1) as u64);
    let by_threads = dev.max_threads_per_sm as u64 / threads.max(1) as u64;
    by_smem.min(by_regs).min(by_threads).min(32) as u32
}

/// Chunk size (keys) for `Auto`: the smallest estimated time, where a block
/// costs its keys plus a fixed overhead (pipeline fill and epilogue, about
/// two stages of keys), and the kernel takes at least its longest block and
/// at least the total work in *whole* waves of chunk-long blocks (a grid one
/// block over a wave takes two waves; a fluid estimate misses that).
pub fn auto_chunk_keys(seq_lens: &[u32], blocks_per_len: u64, keys_per_stage: u32, wave: u64) -> u32 {
    let (keys_per_stage, wave, blocks_per_len) = (keys_per_stage.max(1), wave.max(1), blocks_per_len.max(1));
    let max_len = seq_lens.iter().copied().max().unwrap_or(1).max(1);
    let unsplit_blocks = seq_lens.len() as u64 * blocks_per_len;
    if unsplit_blocks >= wave {
        return u32::MAX;
    }
    let overhead = 2 * keys_per_stage as u64;
    let cost = |chunk: u64| -> u64 {
        let mut total = 0u64;
        for &len in seq_lens {
            let len = len as u64;
            let n = len.div_ceil(chunk);
            total = total.saturating_add((len + n * overhead).saturating_mul(blocks_per_len));
        }
        let longest = chunk.min(max_len as u64) + overhead;
        let waves = total.div_ceil(wave.saturating_mul(longest));
        longest.max(waves.saturating_mul(longest))
    };
    // Candidates ascend geometrically (planning stays O(batch · log len)),
    // each evened out over the splits it makes of the longest sequence:
    // 33 stages of a 64-stage sequence become 32, so its two blocks are
    // equal instead of 33 + 31 stages (the longer one set the time: +3 %).
    // `<=` lets the larger chunk (fewer partials to merge) win ties.
    let mut best = (u64::MAX, u32::MAX);
    let stages_max = max_len.div_ceil(keys_per_stage);
    let mut stages = 1u32;
    loop {
        let even = stages_max.div_ceil(stages_max.div_ceil(stages));
        let chunk = even.saturating_mul(keys_per_stage).min(max_len);
        let c = cost(chunk as u64);
        if c <= best.0 {
            best = (c, chunk);
        }
        if stages >= stages_max {
            break;
        }
        stages = (stages + 1).max(stages + stages / 8).min(stages_max);
    }
    if best.1 >= max_len {
        u32::MAX
    } else {
        best.1
    }
}

/// The limits of the attention kernels a plan picks from: one
/// [`KernelInfo`] serves for both warp specialisations (tests, offline
/// planning); [`DecodeAttention`](crate::DecodeAttention) reads each
/// kernel's own.
pub trait KernelLimits {
    /// The unspecialised (`false`) or warp-specialised (`true`) kernel's limits.
    fn limits(&self, specialized: bool) -> KernelInfo;

    /// The limits of the kernel a capacity plan launches: the capacity twin
    /// where the shape has one (`decode_attn_abi::has_capacity_twin`),
    /// else the same as [`KernelLimits::limits`].
    fn capacity_limits(&self, specialized: bool) -> KernelInfo {
        self.limits(specialized)
    }
}

/// A capacity plan's view of `K`: its kernels are the capacity twins.
struct CapacityKernels<'a, K>(&'a K);

impl<K: KernelLimits> KernelLimits for CapacityKernels<'_, K> {
    fn limits(&self, specialized: bool) -> KernelInfo {
        self.0.capacity_limits(specialized)
    }
}

impl KernelLimits for KernelInfo {
    fn limits(&self, _specialized: bool) -> KernelInfo {
        *self
    }
}

/// Makes the plan. `kernel` describes the attention kernels that may run it.
/// Paged caches need their block table: [`plan_paged`].
pub fn plan(shape: &DecodeShape, seq_lens: &[u32], dev: &DeviceInfo, kernel: &impl KernelLimits, opts: &PlanOptions) -> Result<Plan> {
    shape.validate()?;
    ensure(!shape.is_paged(), "block_table", "a block table for the paged layout (plan_paged)", "none")?;
    pair_heads(make_plan(shape, seq_lens, Vec::new(), dev, kernel, opts)?, dev, &kernel.limits(false), opts.head_pair)
}

/// Makes the plan of a paged cache: `block_table` is `[batch,
/// shape.pages_per_seq()]` page ids, row-major; the pages that hold each
/// sequence's `seq_lens[b]` tokens must be ids of the pool. The table is
/// uploaded with the plan's metadata.
pub fn plan_paged(shape: &DecodeShape, seq_lens: &[u32], block_table: &[i32], dev: &DeviceInfo, kernel: &impl KernelLimits, opts: &PlanOptions) -> Result<Plan> {
    shape.validate()?;
    shape.validate_seq_lens(seq_lens)?;
    let crate::shape::KvLayout::Paged { page_size, num_pages, .. } = shape.kv_layout else {
        return Err(Error::invalid("kv_layout", "a paged layout (KvLayout::Paged) for a block table", "another layout"));
    };
    check_block_table(block_table, seq_lens, shape.pages_per_seq(), page_size, num_pages)?;
    pair_heads(make_plan(shape, seq_lens, block_table.to_vec(), dev, kernel, opts)?, dev, &kernel.limits(false), opts.head_pair)
}

/// Makes a capacity plan ([`PlanMode::Capacity`]): launches fixed by the
/// shape alone (`batch` sequences of up to `max_seq_len` tokens; for a
/// paged shape a `[batch, pages_per_seq]` block table), so one plan serves
/// every step and a run can be captured in a CUDA graph. The block shape
/// and chunk size are those [`plan`] picks for every sequence at capacity;
/// shorter sequences leave their chunks past the end idle (each such block
/// returns at once).
pub fn plan_capacity(shape: &DecodeShape, dev: &DeviceInfo, kernel: &impl KernelLimits, opts: &PlanOptions) -> Result<Plan> {
    shape.validate()?;
    let at_capacity = vec![shape.max_seq_len; shape.batch as usize];
    let planned = make_plan(shape, &at_capacity, Vec::new(), dev, &CapacityKernels(kernel), opts)?;
    let chunk_keys = planned.chunk_keys.min(shape.max_seq_len).max(1);
    // Each sequence's chunks are one cluster when they fit one (its size a
    // power of two: the chunks past the capacity, like those past a step's
    // lengths, exit at once).
    let chunks = chunks_of(shape.max_seq_len, chunk_keys);
    let cluster = cluster_size(chunks, shape, dev, opts);
    let chunks_per_seq = if cluster > 1 { cluster } else { chunks };
    let work = shape.batch as u64 * chunks_per_seq as u64;
    ensure_work_items(work, shape, "split.chunk_keys", "at capacity")?;
    let num_slots = if chunks_per_seq > 1 && cluster == 0 { work as u32 } else { 0 };
    // No work list, lengths or merge items: the blocks derive them from the
    // device lengths. The merge counters and partials remain.
    let layout = workspace_layout(0, shape.batch as usize, 0, planned.row_chunks, num_slots, shape)
        .ok_or_else(|| Error::invalid("max_seq_len", "a split-partial workspace that fits in memory", format!("{num_slots} partial slots")))?;
    let capacity = Plan {
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
    pair_heads(capacity, dev, &kernel.capacity_limits(false), opts.head_pair)
}

/// Checks a block table: `pages_per_seq` entries per sequence, and the
/// entries that hold each sequence's tokens ids of the pool.
pub fn check_block_table(block_table: &[i32], seq_lens: &[u32], pages_per_seq: u32, page_size: u32, num_pages: u32) -> Result<()> {
    let width = pages_per_seq as usize;
    ensure(
        block_table.len() == seq_lens.len() * width,
        "block_table",
        format!("{} entries ({} sequences × {width} pages per sequence)", seq_lens.len() * width, seq_lens.len()),
        block_table.len(),
    )?;
    for (b, &len) in seq_lens.iter().enumerate() {
        let used = len.div_ceil(page_size) as usize;
        for (i, &id) in block_table[b * width..b * width + used].iter().enumerate() {
            ensure(id >= 0 && (id as u32) < num_pages, format!("block_table[{b}][{i}]"), format!("a page id in 0..{num_pages}"), id)?;
        }
    }
    Ok(())
}

/// The most waves of blocks for which [`SpecializeChoice::Auto`] picks the
/// warp-specialised kernel (measured: docs/perf.md, twenty-sixth session).
const SPECIALIZED_MAX_WAVES: u64 = 2;

fn make_plan(shape: &DecodeShape, seq_lens: &[u32], block_table: Vec<i32>, dev: &DeviceInfo, kernel: &impl KernelLimits, opts: &PlanOptions) -> Result<Plan> {
    let family = opts.family_for(shape);
    let specializable = family == Family::Wgmma && wgmma_specializable(shape.kv_format, shape.is_paged());
    let make = |block_table, specialized| make_plan_for(shape, seq_lens, block_table, dev, &kernel.limits(specialized), opts, family, specialized);
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
            if specialized.waves(dev) <= SPECIALIZED_MAX_WAVES {
                Ok(specialized)
            } else {
                make(specialized.block_table, false)
            }
        }
        SpecializeChoice::Auto => make(block_table, false),
    }
}

/// [`make_plan`] for one kernel of `family` (`opts.family_for(shape)`):
/// `specialized` picks the warp-specialised wgmma kernel, which `kernel`
/// describes.
#[allow(clippy::too_many_arguments)]
fn make_plan_for(shape: &DecodeShape, seq_lens: &[u32], block_table: Vec<i32>, dev: &DeviceInfo, kernel: &KernelInfo, opts: &PlanOptions, family: Family, specialized: bool) -> Result<Plan> {
    shape.validate_seq_lens(seq_lens)?;
    dev.validate()?;
    kernel.validate()?;
    // validate() bounds num_q_heads × q_len (≥ group × q_len) to 32 bits.
    let rows = shape.rows_per_kv_head().ok_or_else(|| Error::invalid("num_q_heads", "group × q_len within 32 bits", shape.num_q_heads))?;
    let page_shift = shape.page_geometry().map(|(shift, _)| shift);
    let (format, d) = (shape.kv_format, shape.head_dim);
    if !family.serves(format, d) {
        return Err(Error::Unsupported(format!("the {} family serves head_dim 128 only; this shape is {:?} at head_dim {d}", family.name(), format)));
    }
    let tile = tile_config(format, d, family);
    // Splitting only shortens work items, so the longest sequence bounds
    // every item's stages.
    let stages = stages_for(format, d, family, specialized, seq_lens.iter().copied().max().unwrap_or(1));
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
        Family::Wide => {
            let (m, k) = block_shape(rows, tile.keys_per_stage, kernel);
            (m, k, m * MMA_M)
        }
        Family::Narrow => {
            let smem = |w| decode_smem_bytes(format, d, 1, w, family, page_shift, stages, false);
            let larger = narrow_warps_k(tile.keys_per_stage, dev, kernel, smem, true);
            let splits = match opts.split {
                SplitPolicy::Never => false,
                SplitPolicy::ChunkKeys(k) => seq_lens.iter().any(|&l| l > k),
                SplitPolicy::Auto => {
                    let per_sm = useful_blocks_per_sm(format, family, 1, larger, blocks_per_sm(dev, kernel, 32 * larger, smem(larger))) as u64;
                    let blocks_per_len = shape.num_kv_heads as u64 * rows.div_ceil(NARROW_ROWS) as u64;
                    auto_chunk_keys(seq_lens, blocks_per_len, tile.keys_per_stage, dev.sm_count as u64 * per_sm) != u32::MAX
                }
            };
            // Measured (docs/perf.md): with as many warps resident either
            // way, split work runs best in the larger blocks, unsplit work in
            // more, smaller ones (fewer waves, shorter epilogues).
            let k = if splits {
                larger
            } else {
                // Unsplit short sequences: at least two 16-key steps per warp
                // (one-step warps leave the block's time to its epilogue).
                let longest = seq_lens.iter().copied().max().unwrap_or(1);
                let cap = (longest / (2 * KEYS_PER_WARP_STEP)).max(1);
                let k = narrow_warps_k(tile.keys_per_stage, dev, kernel, smem, false);
                let mut k2 = k;
                while k2 > cap && k2 > 1 {
                    k2 /= 2;
                }
                k2
            };
            (1, k, NARROW_ROWS)
        }
    };
    let warps_k = match opts.warps_k {
        None => warps_k,
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
    let smem_bytes = decode_smem_bytes(format, d, warps_m, warps_k, family, page_shift, stages, specialized);
    if smem_bytes > dev.max_smem_per_block {
        return Err(Error::Unsupported(format!(
            "head_dim {} needs {smem_bytes} bytes of shared memory per block; this device allows {}",
            shape.head_dim, dev.max_smem_per_block
        )));
    }
    let threads = block_threads(specialized, warps_m, warps_k);
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
            let per_sm = useful_blocks_per_sm(format, family, warps_m, warps_m * warps_k, blocks_per_sm) as u64;
            auto_chunk_keys(seq_lens, blocks_per_len, tile.keys_per_stage, dev.sm_count as u64 * per_sm)
        }
    };

    // Count before building: a tiny chunk over long sequences must be an
    // `Err`, not an allocation failure.
    let total_items = seq_lens.iter().map(|&l| chunks_of(l, chunk_keys) as u64).fold(0u64, u64::saturating_add);
    let param = if matches!(opts.split, SplitPolicy::ChunkKeys(_)) { "split.chunk_keys" } else { "seq_lens" };
    ensure_work_items(total_items, shape, param, "(Σ ⌈len / chunk⌉)")?;

    let max_chunks = seq_lens.iter().map(|&l| chunks_of(l, chunk_keys)).max().unwrap_or(1);
    let cluster = cluster_size(max_chunks, shape, dev, opts);
    let (work, merges, num_slots) = if cluster > 1 {
        let items = seq_lens.len() as u64 * cluster as u64;
        ensure_work_items(items, shape, param, "(batch × chunks per cluster)")?;
        (cluster_work(seq_lens, chunk_keys, cluster), Vec::new(), 0)
    } else {
        global_merge_work(seq_lens, chunk_keys, total_items as usize)
    };
    let layout = workspace_layout(work.len(), seq_lens.len(), block_table.len(), row_chunks, num_slots, shape)
        .ok_or_else(|| Error::invalid("seq_lens", "a split-partial workspace that fits in memory", format!("{num_slots} partial slots")))?;
    let uniform = if cluster > 1 { None } else { uniform_work(seq_lens, &work, &merges, chunk_keys, shape.q_len) };

    Ok(Plan {
        id: NEXT_PLAN_ID.fetch_add(1, Ordering::Relaxed),
        mode: PlanMode::Lengths,
        shape: shape.clone(),
        seq_lens: seq_lens.to_vec(),
        block_table,
        work,
        merges,
        num_slots,
        chunk_keys,
        family,
        warps_m,
        warps_k,
        rows_per_block,
        row_chunks,
        smem_bytes,
        stages,
        blocks_per_sm,
        cluster,
        specialized,
        heads_per_block: 1,
        uniform,
        layout,
    })
}

/// `(length, chunks per sequence)` when every sequence of `seq_lens` has
/// the same length and `work` / `merges` are item for item what a capacity
/// plan's blocks derive at that length (`decode_attn_abi::capacity_work_item`,
/// `capacity_merge_item`): then a run passes the length in the params and
/// a null length pointer, and every block computes its item instead of
/// loading it — one dependent load fewer before its first copy, and the
/// merging block's merge item too (the work list is evicted from L2 by the
/// time a step that streams the cache reads it). Cluster plans keep their
/// list (their slots are ranks, not a capacity plan's).
pub fn uniform_work(seq_lens: &[u32], work: &[WorkItem], merges: &[MergeItem], chunk_keys: u32, q_len: u32) -> Option<(u32, u32)> {
    let &len = seq_lens.first()?;
    if seq_lens.iter().any(|&l| l != len) {
        return None;
    }
    let chunks = chunks_of(len, chunk_keys);
    let same_work = work.len() as u64 == seq_lens.len() as u64 * chunks as u64
        && work.iter().enumerate().all(|(x, w)| capacity_work_item(x as u32, len, q_len, chunk_keys, chunks) == Some(*w));
    let same_merges = merges.is_empty() && chunks == 1
        || merges.len() == seq_lens.len() && merges.iter().enumerate().all(|(b, m)| capacity_merge_item(b as u32, len, q_len, chunk_keys, chunks) == *m);
    (same_work && same_merges).then_some((len, chunks))
}

/// Threads of an attention block of `warps_m × warps_k` compute warps: the
/// warp-specialised wgmma kernels add a producer warpgroup
/// (`decode_attn_abi::WGMMA_PRODUCER_WARPS`).
fn block_threads(specialized: bool, warps_m: u32, warps_k: u32) -> u32 {
    let producer = if specialized { WGMMA_PRODUCER_WARPS } else { 0 };
    32 * (warps_m * warps_k + producer)
}

/// Chunks of `chunk_keys` keys a sequence of `len` keys is split into (one
/// when `chunk_keys` covers it, `u32::MAX` included; at least one).
fn chunks_of(len: u32, chunk_keys: u32) -> u32 {
    len.div_ceil(chunk_keys.min(len).max(1))
}

/// Work items of a cluster merge: every sequence gets `cluster` items, chunk
/// c at rank c and chunks past its end empty (their blocks exit at once),
/// longest sequences first.
fn cluster_work(seq_lens: &[u32], chunk_keys: u32, cluster: u32) -> Vec<WorkItem> {
    let mut order: Vec<usize> = (0..seq_lens.len()).collect();
    order.sort_by_key(|&b| std::cmp::Reverse(seq_lens[b]));
    let mut work = Vec::with_capacity(seq_lens.len() * cluster as usize);
    for b in order {
        let len = seq_lens[b];
        let chunks = chunks_of(len, chunk_keys);
        for c in 0..cluster {
            // In u64: near MAX_SEQ_LEN, start + chunk_keys passes u32::MAX.
            let start = (c as u64 * chunk_keys as u64).min(len as u64);
            let end = (start + chunk_keys as u64).min(len as u64);
            let partial_slot = if chunks == 1 { DIRECT_OUTPUT } else { c };
            work.push(WorkItem { batch: b as u32, kv_start: start as u32, kv_end: end as u32, partial_slot });
        }
    }
    work
}

/// Work items, merge items and partial-slot count of a merge through
/// global memory: a chunk per block, a slot per chunk of a split sequence,
/// longest chunks first (so the tail of the grid is short ones).
fn global_merge_work(seq_lens: &[u32], chunk_keys: u32, total_items: usize) -> (Vec<WorkItem>, Vec<MergeItem>, u32) {
    let mut work = Vec::with_capacity(total_items);
    let mut merges = Vec::new();
    let mut num_slots = 0u32;
    for (b, &len) in seq_lens.iter().enumerate() {
        let chunks = chunks_of(len, chunk_keys);
        if chunks == 1 {
            work.push(WorkItem { batch: b as u32, kv_start: 0, kv_end: len, partial_slot: DIRECT_OUTPUT });
            continue;
        }
        merges.push(MergeItem { batch: b as u32, first_slot: num_slots, num_slots: chunks, _pad: 0 });
        for c in 0..chunks {
            // In u64: near MAX_SEQ_LEN, start + chunk_keys passes u32::MAX.
            let start = c as u64 * chunk_keys as u64;
            let end = (start + chunk_keys as u64).min(len as u64);
            work.push(WorkItem { batch: b as u32, kv_start: start as u32, kv_end: end as u32, partial_slot: num_slots + c });
        }
        num_slots += chunks;
    }
    work.sort_by_key(|w| std::cmp::Reverse(w.kv_end - w.kv_start));
    (work, merges, num_slots)
}

/// Blocks per cluster of a cluster merge for sequences of up to `chunks`
/// chunks: the power of two at or above `chunks` (the kernels find their
/// item with shifts; ranks past a sequence's chunks exit at once) when the
/// sequences split, the options allow a cluster that large
/// ([`MergeChoice`]) and the device has one; else 0 (merge through global
/// memory).
pub fn cluster_size(chunks: u32, shape: &DecodeShape, dev: &DeviceInfo, opts: &PlanOptions) -> u32 {
    let format = shape.kv_format;
    if !shape.variant().builds(Merge::Cluster, Form::Plain) {
        // The variant's kernels merge through global memory only.
        return 0;
    }
    let most = match opts.merge {
        MergeChoice::Auto if auto_cluster_allowed(format) => AUTO_CLUSTER_MAX.min(dev.max_cluster),
        MergeChoice::Auto => 0,
        MergeChoice::Cluster => dev.max_cluster,
        MergeChoice::Global => 0,
    };
    let size = chunks.checked_next_power_of_two().unwrap_or(u32::MAX);
    if chunks > 1 && size <= most {
        size
    } else {
        0
    }
}

/// Query rows per kv head of a validated shape.
fn rows_of(shape: &DecodeShape) -> u32 {
    shape.rows_per_kv_head().unwrap_or(u32::MAX)
}

/// Byte offsets of the workspace regions; `None` when they overflow or
/// exceed `isize::MAX`.
fn workspace_layout(work: usize, seqs: usize, table: usize, row_chunks: u32, num_slots: u32, shape: &DecodeShape) -> Option<WorkspaceLayout> {
    let align_up = |x: usize| x.checked_next_multiple_of(ALIGN);
    let work_at = 0usize;
    let seq_lens_at = work.checked_mul(16)?;
    let table_at = align_up(seq_lens_at.checked_add(seqs.checked_mul(4)?)?)?;
    let merges_at = align_up(table_at.checked_add(table.checked_mul(4)?)?)?;
    let counters_at = align_up(merges_at.checked_add(seqs.checked_mul(16)?)?)?;
    let counters = seqs.checked_mul(shape.num_kv_heads as usize)?.checked_mul(row_chunks as usize)?;
    u32::try_from(counters).ok()?;
    let metadata_bytes = counters_at.checked_add(counters.checked_mul(4)?)?;
    let rows = (num_slots as usize).checked_mul(shape.q_len as usize)?.checked_mul(shape.num_q_heads as usize)?;
    let partial_o = align_up(metadata_bytes)?;
    let partial_lse = align_up(partial_o.checked_add(rows.checked_mul(shape.head_dim as usize)?.checked_mul(4)?)?)?;
    let total_bytes = align_up(partial_lse.checked_add(rows.checked_mul(4)?)?)?;
    (total_bytes <= isize::MAX as usize).then_some(WorkspaceLayout {
        work: work_at,
        seq_lens: seq_lens_at,
        block_table: table_at,
        merges: merges_at,
        merge_counters: counters_at,
        metadata_bytes,
        partial_o,
        partial_lse,
        total_bytes,
    })
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
