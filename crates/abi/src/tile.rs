//! Tile geometry: one `const fn` used by the kernel (to lay out shared
//! memory) and by the planner (to size it and the grid).

use crate::axes::{q_in_smem, Family, Form, KvFormat, DS_MLA_SCALES_AT};

/// Rows of one mma tile (m16n8k16).
pub const MMA_M: u32 = 16;
/// Keys one warp processes per step (two n8 tiles of S, one k16 step of PV).
pub const KEYS_PER_WARP_STEP: u32 = 16;
/// Query rows of one block of the `Narrow` family (the n8 of its tiles).
pub const NARROW_ROWS: u32 = 8;
/// Most mma row tiles (warps along M) in one block; more rows go to more blocks.
pub const MAX_WARPS_M: u32 = 4;
/// Most warps in one block.
pub const MAX_WARPS: u32 = 8;
/// Rows of one warpgroup MMA (`Family::Wgmma`): 4 warps of 16.
pub const WGMMA_M: u32 = 64;
/// Keys one warpgroup processes per step of `Family::Wgmma` (the n of its
/// score MMA, two k16 steps of its P·V).
pub const WGMMA_KEYS: u32 = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileConfig {
    /// Keys staged in shared memory per pipeline stage.
    pub keys_per_stage: u32,
    /// Bytes of one cached row in shared memory.
    pub row_bytes: u32,
    /// Bytes of one row's scales (0 for unquantized formats).
    pub scale_bytes: u32,
}

impl TileConfig {
    /// Shared memory of one stage: K rows, V rows, K scales, V scales.
    pub const fn stage_bytes(&self) -> u32 {
        2 * self.keys_per_stage * (self.row_bytes + self.scale_bytes)
    }
    /// Offset of the V rows in a stage.
    pub const fn v_offset(&self) -> u32 {
        self.keys_per_stage * self.row_bytes
    }
    /// Offset of the K scales in a stage (V's follows it).
    pub const fn side_offset(&self) -> u32 {
        2 * self.keys_per_stage * self.row_bytes
    }
    /// Shared memory of `stages` stages (`PIPELINE_STAGES`, or fewer for
    /// short sequences: [`stages_for`]).
    pub const fn pipeline_bytes(&self, stages: u32) -> u32 {
        stages * self.stage_bytes()
    }
}

/// Stages a block's shared memory must hold when no work item has more than
/// `longest_keys` keys: a work item of n stages' keys touches only stages
/// 0..n, so short sequences take less shared memory and more blocks fit per
/// SM (grid D (64, 128): 2 stages of 32 KiB instead of 3, 3 blocks per SM
/// instead of 2). At least 1, at most [`max_stages`].
/// `specialized`: a warp-specialised wgmma kernel ([`wgmma_specializable`]).
pub const fn stages_for(format: KvFormat, head_dim: u32, family: Family, specialized: bool, longest_keys: u32) -> u32 {
    let n = longest_keys.div_ceil(tile_config(format, head_dim, family).keys_per_stage);
    let max = max_stages(format, specialized);
    if n == 0 {
        1
    } else if n > max {
        max
    } else {
        n
    }
}

/// Pipeline stages of a kernel: [`wgmma_producer_stages`] in the
/// warp-specialised wgmma kernels ([`wgmma_specializable`]), else
/// [`PIPELINE_STAGES`].
pub const fn max_stages(format: KvFormat, specialized: bool) -> u32 {
    if specialized {
        wgmma_producer_stages(format)
    } else {
        PIPELINE_STAGES
    }
}

/// Most stages of a warp-specialised wgmma kernel ([`wgmma_producer_stages`]):
/// the room its barrier blocks keep.
pub const WGMMA_PRODUCER_STAGES: u32 = 4;

/// Stages of the warp-specialised wgmma kernel of `format`. Measured on an
/// H100 (docs/perf.md, "Warp-specialised quantized wgmma"): 6 were 4-9 %
/// slower than 3 on every grid B row when the compute warps took 32-key
/// steps; with 64-key steps 4 are 0-3 % faster than 3 for int8, whose
/// producer waits for copies, and 0-1.5 % slower for int4, whose producer
/// is busy converting. (The unspecialised kernels keep [`PIPELINE_STAGES`],
/// at most this many. `Fp8DsMla` has no wgmma kernels: its rows are MLA's.)
pub const fn wgmma_producer_stages(format: KvFormat) -> u32 {
    match format {
        KvFormat::Int8 | KvFormat::Fp8PerHead | KvFormat::Fp8 | KvFormat::Fp8DsMla => WGMMA_PRODUCER_STAGES,
        KvFormat::Bf16 | KvFormat::F16 | KvFormat::Int4G32 | KvFormat::Int4G64 | KvFormat::Int4G128 => 3,
    }
}

/// The stage geometry of a format, head dim and kernel family.
pub const fn tile_config(format: KvFormat, head_dim: u32, family: Family) -> TileConfig {
    let row_bytes = format.row_bytes(head_dim);
    // ~32 KiB stages keep ≥ 2 blocks per SM (228 KiB) while one stage alone
    // covers the per-SM bytes in flight that HBM latency asks for; quantized
    // rows take twice the keys (measured: int8 stages of bf16's key count
    // lost 7-24 % on grid A, docs/perf.md, "Stage sizes") — except in the wgmma kernels,
    // whose 16-bit tiles of converted keys ([`wgmma_prefix_bytes`]) take the
    // shared memory a second stage's worth would: there a stage is one step
    // of each of the block's two warpgroups, as for bf16.
    if matches!(family, Family::Mla) {
        return TileConfig { keys_per_stage: MLA_KEYS, row_bytes, scale_bytes: 0 };
    }
    let keys_per_stage = match head_dim {
        64 => 128,
        128 => 64,
        _ => 32,
    } * if format.is_quantized() && !matches!(family, Family::Wgmma) { 2 } else { 1 };
    TileConfig { keys_per_stage, row_bytes, scale_bytes: format.scale_bytes(head_dim) }
}

/// Page ids one pipeline stage needs: stages start on multiples of their
/// key count and pages are powers of two, so a stage covers
/// `max(1, keys_per_stage / page_size)` whole pages.
pub const fn page_ids_per_stage(keys_per_stage: u32, page_shift: u32) -> u32 {
    let n = keys_per_stage >> page_shift;
    if n == 0 {
        1
    } else {
        n
    }
}

/// Slots of the page-id ring: one more than the pipeline's stages, so the
/// ids a tile's copies land in never share a slot with the ids that
/// another warp may still be reading to issue the previous tile's copies
/// (the prologue issues two tiles without a barrier between them).
pub const PAGE_RING_SLOTS: u32 = PIPELINE_STAGES + 1;

/// Bytes of the page-id ring of a paged kernel (`page_shift`: log2 of the
/// page size; `None`: not paged): `PAGE_RING_SLOTS` slots, rounded up to 16
/// bytes so the Q tile after it stays aligned.
pub const fn page_ring_bytes(format: KvFormat, head_dim: u32, family: Family, page_shift: Option<u32>) -> u32 {
    match page_shift {
        None => 0,
        Some(shift) => (PAGE_RING_SLOTS * 4 * page_ids_per_stage(tile_config(format, head_dim, family).keys_per_stage, shift)).next_multiple_of(16),
    }
}

/// Bytes from the start of shared memory to the Q tile: `stages` pipeline
/// stages, then (paged) the page-id ring.
pub const fn stage_region_bytes(format: KvFormat, head_dim: u32, family: Family, page_shift: Option<u32>, stages: u32) -> u32 {
    tile_config(format, head_dim, family).pipeline_bytes(stages) + page_ring_bytes(format, head_dim, family, page_shift)
}

/// Warps of a warp-specialised wgmma block that only feed the others: one
/// warpgroup, after the compute warpgroups.
pub const WGMMA_PRODUCER_WARPS: u32 = 4;

/// Buffers of converted 16-bit K and V tiles in a warp-specialised wgmma
/// block: the producer converts into one while the compute warpgroups read
/// others. Each compute warpgroup takes whole stages, alternately, so the
/// count is a multiple of two (a buffer is always the same warpgroup's)
/// and four lets the producer run a stage ahead of each.
pub const WGMMA_CONVERTED_BUFFERS: u32 = 4;

/// Shared memory a wgmma block holds before its pipeline stages, every
/// tile on a 1024-byte boundary (the 128-byte swizzle's period): the
/// `WGMMA_M`-row Q tile in the compute type, and for quantized formats:
/// - the `WGMMA_M`-row tiles of K and V rows converted to 16 bits (each of
///   the block's two compute warpgroups reads its 32-key step from half of
///   their rows), [`WGMMA_CONVERTED_BUFFERS`] pairs of them in the
///   warp-specialised kernels (`specialized`, [`wgmma_specializable`]), one otherwise;
/// - the per-row Q scales ([`q_converted`]);
/// - warp-specialised kernels: each converted buffer's K and V row scales
///   (`WGMMA_M` f32 each), then the producer's barriers
///   ([`WGMMA_PRODUCER_BARRIER_BYTES`]);
/// - the stages' transaction barriers ([`WGMMA_STAGE_BARRIER_BYTES`]).
pub const fn wgmma_prefix_bytes(format: KvFormat, head_dim: u32, specialized: bool) -> u32 {
    let tile = WGMMA_M * head_dim * 2;
    if !q_converted(format) {
        tile
    } else if specialized {
        tile + WGMMA_CONVERTED_BUFFERS * (2 * tile + 2 * 4 * WGMMA_M) + 4 * WGMMA_M + WGMMA_PRODUCER_BARRIER_BYTES + WGMMA_STAGE_BARRIER_BYTES
    } else {
        3 * tile + 4 * WGMMA_M + WGMMA_STAGE_BARRIER_BYTES
    }
}

/// Warp-specialised wgmma blocks' `mbarrier`s besides the stages' copy
/// barriers: a "full" and an "empty" one for each converted buffer, the
/// producer announcing a converted stage on the first and its compute
/// warpgroup handing it back on the second, then a "consumed" one per
/// stage, on which the producer's threads announce that they have read the
/// stage (before its refill), then one on which the compute warps meet
/// once they have converted Q; rounded up to 16 bytes.
pub const WGMMA_PRODUCER_BARRIER_BYTES: u32 = (8 * (2 * WGMMA_CONVERTED_BUFFERS + WGMMA_PRODUCER_STAGES + 1)).next_multiple_of(16);

/// The last bytes of a quantized wgmma block's prefix, just before its
/// stages: one 8-byte `mbarrier` per stage of a warp-specialised kernel, on
/// which the bulk copies of a strided cache's rows complete
/// (`decode::pipeline`), rounded up to keep the stages 16-byte aligned.
pub const WGMMA_STAGE_BARRIER_BYTES: u32 = (8 * WGMMA_PRODUCER_STAGES).next_multiple_of(16);

/// Where the quantized wgmma kernels' conversion jobs go
/// (`KvFormat::stage_to_half`). Their raw stages hold rows one after another
/// (as bulk copies land them), so a quarter-warp's 8 threads read 8
/// different 16-byte bank groups when their raw chunks are 8 different
/// (row within a 128-byte line, chunk) pairs, and write 8 different ones of
/// the 16-bit `Swizzle128` tile (chunk XOR row mod 8) when the destination
/// chunks differ after the XOR. `chunks`, the raw chunks per row at
/// head_dim 128 (the only one wgmma serves), is 8 or 4:
/// - 8 (int8: a chunk is 16 dims, the 16-bit chunks `2c`, `2c + 1`): the
///   threads take chunks 0..8 of a row pair, chunks 0..4 of one row and
///   4..8 of the other, so the two halves' destination chunks differ in the
///   XOR's low bit;
/// - 4 (int4: a chunk is 32 dims, the 16-bit chunks `4c .. 4c + 4`): the
///   threads take 8 consecutive rows, thread `e` chunk `(c0 + e / 2) mod 4`.
///
/// Job `j` (K's, then V's) is done by the quarter-warp `t / 8 ≡ j (mod 16)`
/// of the warpgroup's thread `t`; returns (V's, row, chunk) of the thread's
/// `i`-th job, rows relative to the step's [`WGMMA_KEYS`]. The tests check
/// that every (tensor, row, chunk) is one job and the bank patterns.
pub const fn wgmma_conversion_job(t: u32, i: u32, chunks: u32) -> (bool, u32, u32) {
    let (j, e) = (t / 8 + 16 * i, t % 8);
    let per_tensor = WGMMA_KEYS * chunks / 8;
    let (v, j) = (j >= per_tensor, j % per_tensor);
    if chunks == 8 {
        (v, 2 * (j / 2) + ((e / 4) ^ (j % 2)), e)
    } else {
        (v, 8 * (j / 4) + e, (j % 4 + e / 2) % 4)
    }
}

/// Most blocks per thread-block cluster: the portable cluster size, the
/// most chunks of a sequence the cluster merge handles, and the largest
/// cluster the planner makes.
pub const MAX_CLUSTER: u32 = 8;

/// Pipeline depth of every format (the kernel's `cp.async.wait_group`
/// immediate is derived from it, so it is one constant, not per format).
pub const PIPELINE_STAGES: u32 = 3;

/// fp32 pitch (in floats) of one row of the block's output accumulator in
/// shared memory; padded so the quad-strided fragment stores spread over banks.
pub const fn acc_pitch(head_dim: u32) -> u32 {
    head_dim + 8
}

/// Shared memory the epilogue needs: the fp32 accumulator rows, then
/// `(max, sum)` per row for each warp along K, then `(1/l, lse)` per row.
pub const fn epilogue_bytes(head_dim: u32, warps_m: u32, warps_k: u32) -> u32 {
    let rows = warps_m * MMA_M;
    4 * (rows * acc_pitch(head_dim) + 2 * warps_k * rows + 2 * rows)
}

/// Whether the kernel converts Q into a shared tile (with a power-of-two
/// scale per row, in `q_scales_bytes` after it) before the main loop: the
/// quantized formats compute in fp16 whatever the query's dtype.
pub const fn q_converted(format: KvFormat) -> bool {
    format.is_quantized()
}

/// Bytes of the Q tile (after the pipeline buffers), per-row Q scales included.
/// The `Narrow` family keeps Q fragments in registers, so it needs the tile
/// only to convert Q. (The wgmma family's tiles precede its stages:
/// [`wgmma_prefix_bytes`].)
pub const fn q_tile_bytes(format: KvFormat, head_dim: u32, warps_m: u32, family: Family) -> u32 {
    let rows = warps_m * MMA_M;
    if q_converted(format) {
        rows * head_dim * 2 + 4 * rows
    } else if q_in_smem(head_dim) && matches!(family, Family::Wide) {
        rows * head_dim * 2
    } else {
        0
    }
}

/// Query rows (tokens × heads) of one MLA block: one warpgroup MMA's M.
pub const MLA_ROWS: u32 = 64;
/// Keys of one MLA stage: each of the block's two warpgroups computes the
/// scores of 32 of them, and both the P·V of all 64 for their half of O's
/// columns.
pub const MLA_KEYS: u32 = 64;
/// Pipeline stages of the MLA kernels: two stages of 72 KiB after the
/// 72 KiB Q tile take the shared memory a block may have (227 KiB).
pub const MLA_STAGES: u32 = 2;
/// Threads of an MLA block: two warpgroups.
pub const MLA_THREADS: u32 = 256;
/// Bytes of one 64-row tile of latent rows (576 bf16 values): Q's, and
/// each stage's keys.
pub const MLA_TILE_BYTES: u32 = MLA_ROWS * 576 * 2;
/// Bytes of the MLA block's P0 tile (64 rows × 64 keys, bf16), which
/// warpgroup 1 reads as an A operand (P1's is in Q's tile, `decode::mla`).
pub const MLA_P_BYTES: u32 = MLA_ROWS * MLA_KEYS * 2;
/// Bytes where the MLA block's warpgroups hand over their rows' maxima and
/// factors (three f32 a row) and sums (one a warpgroup and row), then the
/// two buffers' 9 column-block mbarriers, (fp8 caches) their keys'
/// scales and the scales' exponents, and their mbarriers of an fp8
/// stage's e4m3 bytes.
pub const MLA_EXCHANGE_BYTES: u32 = 3 * MLA_ROWS * 4 + 2 * MLA_ROWS * 4 + 2 * 9 * 8 + 2 * MLA_KEYS * 8 + 2 * 8;

/// Dynamic shared memory of an MLA block: the Q tile, the stages, the P
/// tile, the exchange, then [`ITEM_SMEM_BYTES`] (`decode::mla` in
/// `kernels-gpu` lays it out in this order); of the transposed form's
/// ([`mla_transposed_smem_bytes`]) where `form` is a transposed one.
pub const fn mla_smem_bytes(format: KvFormat, form: Form) -> u32 {
    if form.is_transposed() {
        return mla_transposed_smem_bytes(format, form);
    }
    ((1 + MLA_STAGES) * MLA_TILE_BYTES + MLA_P_BYTES + MLA_EXCHANGE_BYTES).next_multiple_of(16) + ITEM_SMEM_BYTES
}

/// Query rows of a block of the MLA family's transposed form
/// (`Form::Transposed`): the N of its `wgmma m64n16k16`.
pub const MLA_T_ROWS: u32 = 16;
/// Bytes of the transposed form's Q tile (16 rows × 576 bf16 values) and
/// of each of its two P tiles (16 rows × 64 keys).
pub const MLA_T_Q_BYTES: u32 = MLA_T_ROWS * 576 * 2;
pub const MLA_T_P_BYTES: u32 = MLA_T_ROWS * MLA_KEYS * 2;
/// Bytes of the transposed form's exchange: each warpgroup's stage maxima
/// (two stages' slots × 4 warps × 16 rows), then its rows' maxima and its
/// warps' sums at the end (1 + 4 f32 a row), the rows' log-sum-exps, the
/// two buffers' 9 column-block mbarriers.
pub const MLA_T_EXCHANGE_BYTES: u32 = 2 * 2 * 4 * MLA_T_ROWS * 4 + 2 * 5 * MLA_T_ROWS * 4 + MLA_T_ROWS * 4 + 2 * 9 * 8;

/// The transposed form's ring of raw fp8 stages (`decode::mla_t_ring`,
/// both fp8 latent formats): its slots hold 64 keys' rows as the cache
/// holds them, back to back (`row` bytes: the keys of a stage that lie
/// back to back in the cache come in one bulk copy), key `k`'s scales at
/// `scales + scale_stride · k` bytes into the slot; `groups` warpgroups a
/// block, warpgroup `w` taking stages `w, w + groups, …`, each with
/// `p_tiles` P tiles (one a scale group of V's dims).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlaRing {
    /// Query rows of a block (the MMAs' N: 16, or 32 where a block takes
    /// two tokens' 16 heads).
    pub rows: u32,
    pub row: u32,
    pub slots: u32,
    pub scales: u32,
    pub p_tiles: u32,
    pub groups: u32,
    pub scale_stride: u32,
    /// A thread's keys spread for the banks at a row 16 bytes past a
    /// multiple of 128 (`decode::mla_t_ring::key_of`): its two score keys
    /// 4 apart in a quarter-warp, its P·V keys `2c, 2c + 1, 2c + 8, 2c +
    /// 9`; else adjacent score keys and P·V keys `c, c + 4, c + 8, c + 12`.
    pub spread: bool,
    /// Registers a thread the kernel is compiled within, so that its
    /// warpgroups fit an SM's 64 K (both rings: fp8 per token's paged
    /// kernel takes 180 uncapped, fp8-ds-mla's 178).
    pub register_cap: Option<u32>,
}

impl MlaRing {
    /// Bytes of one slot (64 keys' rows, then their scales where those
    /// are not inside the rows).
    pub const fn slot_bytes(self) -> u32 {
        MLA_KEYS * self.row + if self.scale_stride == self.row { 0 } else { MLA_KEYS * self.scale_stride }
    }
    /// Bytes of the block's Q tile (`rows` × 576 bf16 values).
    pub const fn q_bytes(self) -> u32 {
        self.rows * 576 * 2
    }
    /// Bytes of one P tile (`rows` × 64 keys, f16).
    pub const fn p_bytes(self) -> u32 {
        self.rows * MLA_KEYS * 2
    }
}

/// The ring of `format`, for the fp8 latent formats (`None` for the
/// others, whose transposed blocks copy bf16 stages), rows back to back
/// (docs/perf.md, "MLA fp8 rows back to back in the ring"):
/// - fp8 a scale per token: five slots of 576-byte rows, the keys' f32
///   scales after them (a copy of their own); three warpgroups (164
///   registers a thread: three share an SM's 64 K; two ran 16 heads 32 ×
///   32K 18 % slower, docs/perf.md, "MLA fp8 at 16 heads in registers").
///   At 576 ≡ 64 mod 128 the scores' two keys of a quarter-warp are
///   adjacent (64 bytes apart in the banks); the P·V's four keys of a
///   load meet in two 32-byte places whatever keys it takes (a 2-way
///   conflict, cheaper than a copy a key).
/// - fp8-ds-mla: four slots of its 656-byte rows, their four scales
///   inside (656 ≡ 16 mod 128: keys `spread`, conflict-free), a P tile a
///   scale group; three warpgroups at a 168-register cap (docs/perf.md,
///   "MLA fp8-ds-mla in the ring"). A fifth slot and four P tiles a
///   warpgroup do not fit beside the Q tile.
pub const fn mla_t_ring(format: KvFormat) -> Option<MlaRing> {
    const PER_TOKEN_ROW: u32 = KvFormat::Fp8PerHead.row_bytes(crate::axes::MLA_DIMS.qk);
    const DS_ROW: u32 = KvFormat::Fp8DsMla.row_bytes(crate::axes::MLA_DIMS.qk);
    match format {
        KvFormat::Fp8PerHead => Some(MlaRing { rows: MLA_T_ROWS, row: PER_TOKEN_ROW, slots: 5, scales: MLA_KEYS * PER_TOKEN_ROW, scale_stride: 4, p_tiles: 1, groups: 3, spread: false, register_cap: Some(168) }),
        KvFormat::Fp8DsMla => Some(MlaRing { rows: MLA_T_ROWS, row: DS_ROW, slots: 4, scales: DS_MLA_SCALES_AT, scale_stride: DS_ROW, p_tiles: 4, groups: 3, spread: true, register_cap: Some(168) }),
        _ => None,
    }
}
/// The ring of `format`'s transposed form `form` (`None` for bf16 and the
/// other forms): [`mla_t_ring`]'s for `Form::Transposed`; for
/// `Form::TransposedRows` blocks of 32 rows (`decode::mla_t_ring32`: each
/// key converted once for two tokens' 16 heads, `wgmma m64n32k16`) and
/// two warpgroups (Oᵀ is 128 f32 a thread: three warpgroups do not fit
/// the register file), with as many slots as fit beside the 36 KB Q tile
/// and the 32-row P tiles: fp8 per token four, fp8-ds-mla (four P tiles
/// a warpgroup, 32 KB) three.
pub const fn mla_form_ring(format: KvFormat, form: Form) -> Option<MlaRing> {
    match (form, mla_t_ring(format)) {
        (Form::Transposed, ring) => ring,
        (Form::TransposedRows, Some(ring)) => {
            let slots = if matches!(format, KvFormat::Fp8DsMla) { 3 } else { 4 };
            Some(MlaRing { rows: 2 * MLA_T_ROWS, slots, groups: 2, register_cap: None, ..ring })
        }
        _ => None,
    }
}

/// Query rows of a block of the MLA family's form `form` of `format`: the
/// ring's ([`mla_form_ring`]), [`MLA_T_ROWS`] for bf16's transposed form,
/// [`MLA_ROWS`] for the 64-row kernel.
pub const fn mla_rows_per_block(format: KvFormat, form: Form) -> u32 {
    match mla_form_ring(format, form) {
        Some(ring) => ring.rows,
        None if form.is_transposed() => MLA_T_ROWS,
        None => MLA_ROWS,
    }
}

/// Bytes of the ring form's exchange: each warpgroup's stage maxima (two
/// stages' slots × 4 warps × the rows), its rows' maxima and its warps'
/// sums at the end (1 + 4 f32 a row), the rows' log-sum-exps, the slots'
/// mbarriers, the Q rows' f16 factors and their inverses, the number of
/// the stage last issued into each slot.
pub const fn mla_t_ring_exchange_bytes(ring: MlaRing) -> u32 {
    ring.groups * (2 * 4 * ring.rows * 4 + 5 * ring.rows * 4) + ring.rows * 4 + ring.slots * 8 + 2 * 4 * ring.rows + ring.slots * 4
}

/// Threads of a block of `format`'s transposed form `form`: the ring's
/// warpgroups for the fp8 formats ([`mla_form_ring`]), two
/// ([`MLA_THREADS`]) for bf16.
pub const fn mla_transposed_threads(format: KvFormat, form: Form) -> u32 {
    match mla_form_ring(format, form) {
        Some(ring) => 128 * ring.groups,
        None => MLA_THREADS,
    }
}

/// Dynamic shared memory of a block of `format`'s transposed form `form`,
/// then [`ITEM_SMEM_BYTES`]: `decode::mla_t_ring`'s (`mla_t_ring32`'s) for
/// the fp8 formats (the Q tile, the warpgroups' P tiles, the ring's slots,
/// its exchange), `decode::mla_transposed`'s for bf16 (the two stage
/// buffers, the Q tile, the two P tiles, the exchange). Each its own: a
/// bf16 block given the ring's carve-out loses L1 for nothing.
pub const fn mla_transposed_smem_bytes(format: KvFormat, form: Form) -> u32 {
    let bytes = match mla_form_ring(format, form) {
        Some(ring) => ring.q_bytes() + ring.groups * ring.p_tiles * ring.p_bytes() + ring.slots * ring.slot_bytes() + mla_t_ring_exchange_bytes(ring),
        None => MLA_STAGES * MLA_TILE_BYTES + MLA_T_Q_BYTES + 2 * MLA_T_P_BYTES + MLA_T_EXCHANGE_BYTES,
    };
    bytes.next_multiple_of(16) + ITEM_SMEM_BYTES
}

/// Bytes at the end of an attention block's shared memory where it keeps
/// its work item's sequence and partial slot from its start to its epilogue
/// (`DecodeParams::item_smem`).
pub const ITEM_SMEM_BYTES: u32 = 16;

/// Dynamic shared memory of one attention block: the larger of the
/// pipeline (stages, page-id ring, Q tile) and the epilogue's buffers, then
/// [`ITEM_SMEM_BYTES`].
/// `page_shift`: log2 of the page size of a paged cache (`None`: strided);
/// `stages`: the pipeline stages it holds ([`stages_for`]); `form`: the
/// kernel's form (a warp-specialised wgmma kernel, an MLA form).
#[allow(clippy::too_many_arguments)]
pub const fn decode_smem_bytes(format: KvFormat, head_dim: u32, warps_m: u32, warps_k: u32, family: Family, page_shift: Option<u32>, stages: u32, form: Form) -> u32 {
    if matches!(family, Family::Mla) {
        return mla_smem_bytes(format, form);
    }
    let specialized = form.is_specialized();
    let q_bytes = if matches!(family, Family::Wgmma) { wgmma_prefix_bytes(format, head_dim, specialized) } else { q_tile_bytes(format, head_dim, warps_m, family) };
    let pipe = stage_region_bytes(format, head_dim, family, page_shift, stages) + q_bytes;
    let epi = epilogue_bytes(head_dim, warps_m, warps_k);
    (if pipe > epi { pipe } else { epi }).next_multiple_of(16) + ITEM_SMEM_BYTES
}

