//! Tile geometry: one `const fn` used by the kernel (to lay out shared
//! memory) and by the planner (to size it and the grid).

use crate::{KvFormat, Variant};

/// Rows of one mma tile (m16n8k16).
pub const MMA_M: u32 = 16;
/// Keys one warp processes per step (two n8 tiles of S, one k16 step of PV).
pub const KEYS_PER_WARP_STEP: u32 = 16;
/// Query rows of one block of the `Narrow` variant (the n8 of its tiles).
pub const NARROW_ROWS: u32 = 8;
/// Query rows of one block of the `Coop` variant (8 n-tiles of 8).
pub const COOP_ROWS: u32 = 64;
/// Warps of a `Coop` block.
pub const COOP_WARPS: u32 = 8;
/// Most mma row tiles (warps along M) in one block; more rows go to more blocks.
pub const MAX_WARPS_M: u32 = 4;
/// Most warps in one block.
pub const MAX_WARPS: u32 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileConfig {
    /// Keys staged in shared memory per pipeline stage.
    pub keys_per_stage: u32,
    /// Pipeline depth (cp.async groups in flight + the one being consumed).
    pub stages: u32,
    /// Bytes of one cached row in shared memory.
    pub row_bytes: u32,
    /// Bytes of one row's side data (0 for unquantized formats).
    pub side_bytes: u32,
}

impl TileConfig {
    /// Shared memory of one stage: K rows, V rows, K side data, V side data.
    pub const fn stage_bytes(&self) -> u32 {
        2 * self.keys_per_stage * (self.row_bytes + self.side_bytes)
    }
    /// Offset of the V rows in a stage.
    pub const fn v_offset(&self) -> u32 {
        self.keys_per_stage * self.row_bytes
    }
    /// Offset of the K side data in a stage (V's follows it).
    pub const fn side_offset(&self) -> u32 {
        2 * self.keys_per_stage * self.row_bytes
    }
    pub const fn pipeline_bytes(&self) -> u32 {
        self.stages * self.stage_bytes()
    }
}

pub const fn tile_config(format: KvFormat, head_dim: u32) -> TileConfig {
    let row_bytes = format.row_bytes(head_dim);
    // ~32 KiB stages keep ≥ 2 blocks per SM (228 KiB) while one stage alone
    // covers the per-SM bytes in flight that HBM latency asks for; quantized
    // rows take twice the keys (measured: int8 stages of bf16's key count
    // lost 7-24 % on grid A, docs/perf.md).
    let keys_per_stage = match head_dim {
        64 => 128,
        128 => 64,
        _ => 32,
    } * if format.is_quantized() { 2 } else { 1 };
    TileConfig { keys_per_stage, stages: PIPELINE_STAGES, row_bytes, side_bytes: format.side_bytes(head_dim) }
}

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

/// Whether the kernel keeps Q in shared memory (after the pipeline buffers)
/// rather than in registers: at D = 256, Q fragments (64 registers) and the
/// O accumulator (128) would not fit in 255 registers together.
pub const fn q_in_smem(head_dim: u32) -> bool {
    head_dim > 128
}

/// Whether the kernel converts Q into a shared tile (with a power-of-two
/// scale per row, in `q_scales_bytes` after it) before the main loop: the
/// quantized formats compute in fp16 whatever the query's dtype.
pub const fn q_converted(format: KvFormat) -> bool {
    format.is_quantized()
}

/// Bytes of the Q tile (after the pipeline buffers), per-row Q scales included.
/// The `Narrow` variant keeps Q fragments in registers, so it needs the tile
/// only to convert Q.
pub const fn q_tile_bytes(format: KvFormat, head_dim: u32, warps_m: u32, variant: Variant) -> u32 {
    let rows = warps_m * MMA_M;
    let rows = if matches!(variant, Variant::Coop) { COOP_ROWS } else { rows };
    if q_converted(format) {
        rows * head_dim * 2 + 4 * rows
    } else if matches!(variant, Variant::Coop) || (q_in_smem(head_dim) && matches!(variant, Variant::Wide)) {
        rows * head_dim * 2
    } else {
        0
    }
}

/// 16-dim output tiles each `Coop` warp owns (`D / 16` over 8 warps, at least 1).
pub const fn coop_dims_per_warp(head_dim: u32) -> usize {
    let tiles = head_dim / 16;
    if tiles >= COOP_WARPS {
        (tiles / COOP_WARPS) as usize
    } else {
        1
    }
}

/// 16-key score tiles each `Coop` warp takes per stage (at least 1).
pub const fn coop_tiles_per_warp(format: KvFormat, head_dim: u32) -> usize {
    let tiles = tile_config(format, head_dim).keys_per_stage / 16;
    if tiles >= COOP_WARPS {
        (tiles / COOP_WARPS) as usize
    } else {
        1
    }
}

/// Shared memory a `Coop` block exchanges (after the Q tile): P as mma B
/// fragments (8 bytes per lane, per 16 keys and 8-row n-tile), each warp's
/// row maxima, then per row the running max, the stage's rescale factor and
/// the causal key limit.
pub const fn coop_exchange_bytes(keys_per_stage: u32) -> u32 {
    (keys_per_stage / 16) * (COOP_ROWS / 8) * 32 * 8 + 4 * COOP_WARPS * COOP_ROWS + 3 * 4 * COOP_ROWS
}

/// Shared memory of the `Coop` epilogue: the fp32 output rows, each warp's
/// row sums, then `(1/l, lse)` and the max per row.
pub const fn coop_epilogue_bytes(head_dim: u32) -> u32 {
    4 * (COOP_ROWS * acc_pitch(head_dim) + COOP_WARPS * COOP_ROWS + 3 * COOP_ROWS)
}

/// Dynamic shared memory of one attention block.
pub const fn decode_smem_bytes(format: KvFormat, head_dim: u32, warps_m: u32, warps_k: u32, variant: Variant) -> u32 {
    let q_bytes = q_tile_bytes(format, head_dim, warps_m, variant);
    let cfg = tile_config(format, head_dim);
    let mut pipe = cfg.pipeline_bytes() + q_bytes;
    let mut epi = epilogue_bytes(head_dim, warps_m, warps_k);
    if matches!(variant, Variant::Coop) {
        pipe += coop_exchange_bytes(cfg.keys_per_stage);
        epi = coop_epilogue_bytes(head_dim);
    }
    if pipe > epi {
        pipe
    } else {
        epi
    }
}

