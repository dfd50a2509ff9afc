//! The contract between the host library and the PTX kernels.
//!
//! Everything here is `#[repr(C)]` plain data or a `const fn`, compiled into
//! both sides, so a field or a tile size can never be restated differently on
//! one of them (the lesson of FlashAttention-2's `set_params_splitkv`).
#![no_std]

mod kernels;
mod params;
mod tile;

pub use kernels::*;
pub use params::*;
pub use tile::*;

/// Element type of Q and O (and of the mma operands).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    Bf16 = 0,
    F16 = 1,
}

impl Dtype {
    pub const ALL: [Dtype; 2] = [Dtype::Bf16, Dtype::F16];
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::Bf16 => "bf16",
            Dtype::F16 => "f16",
        }
    }
    pub const fn size_bytes(self) -> u32 {
        2
    }
}

/// How a block maps its work onto `mma.m16n8k16` tiles.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Query rows along M: each warp owns 16 packed rows (up to
    /// `MAX_WARPS_M` row-tile warps per block) and its keys along N. For
    /// many rows per kv head (grid B: 48).
    Wide = 0,
    /// Keys along M, query rows along N: `S^T = K·Q^T` and `O^T += V^T·P^T`,
    /// so a block serves `NARROW_ROWS` (8) rows with no empty tile rows, K
    /// and V fragments are converted once per warp, and the O accumulator
    /// is half the size. For few rows per kv head (GQA decode, MHA).
    Narrow = 1,
    /// Query rows along M as in `Wide`, on Hopper's warpgroup MMA
    /// (`wgmma.mma_async`, sm_90a): each warpgroup of 4 warps computes
    /// `WGMMA_M` (64) rows against `WGMMA_KEYS` keys per step, reading K and
    /// V from shared memory once for all its rows instead of once per
    /// 16-row warp. Head_dim 128 only ([`Family::serves`]); quantized
    /// caches are first converted, each byte once per block, into 16-bit
    /// tiles the MMAs read.
    Wgmma = 2,
}

impl Family {
    pub const ALL: [Family; 3] = [Family::Wide, Family::Narrow, Family::Wgmma];
    pub const fn name(self) -> &'static str {
        match self {
            Family::Wide => "wide",
            Family::Narrow => "narrow",
            Family::Wgmma => "wgmma",
        }
    }
    /// Whether the kernel table has this family for a format and head dim
    /// (`Wide` and `Narrow` serve every supported pair).
    pub const fn serves(self, format: KvFormat, head_dim: u32) -> bool {
        match self {
            Family::Wide | Family::Narrow => format.supports_head_dim(head_dim),
            Family::Wgmma => head_dim == 128 && format.supports_head_dim(head_dim),
        }
    }
}

/// How a block finds a K/V row in global memory.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Addressing {
    /// Rows at fixed byte strides from a sequence's first row.
    Strided = 0,
    /// Rows in fixed-size pages of a pool, found through a per-sequence
    /// block table of page ids; each stage's page ids are fetched once per
    /// block into shared memory (`docs/formats.md`, "Paged caches").
    Paged = 1,
}

impl Addressing {
    pub const ALL: [Addressing; 2] = [Addressing::Strided, Addressing::Paged];
    pub const fn name(self) -> &'static str {
        match self {
            Addressing::Strided => "strided",
            Addressing::Paged => "paged",
        }
    }
}

/// How K and V are stored in the cache (`docs/formats.md`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvFormat {
    /// bf16 values, D contiguous per (sequence, token, kv head) row.
    Bf16 = 0,
    /// fp16 values, same layout as `Bf16`.
    F16 = 1,
    /// int8 per head: D bytes per row (`q + 128`, symmetric, q in -127..=127)
    /// and, in a separate side array, one f32 scale per (sequence, token, kv
    /// head), for K and V each: `x ≈ q · scale`.
    Int8 = 2,
    /// int4 group-wise, G = 32: D/2 bytes per row (nibbles in the order of
    /// `docs/formats.md`), and per group of G head dims an fp16 scale and
    /// zero in side data: `x ≈ q · scale + zero`, q in 0..=15.
    Int4G32 = 3,
    /// int4 group-wise, G = 64.
    Int4G64 = 4,
    /// int4 group-wise, G = 128 (head_dim ≥ 128).
    Int4G128 = 5,
}

impl KvFormat {
    pub const ALL: [KvFormat; 6] = [KvFormat::Bf16, KvFormat::F16, KvFormat::Int8, KvFormat::Int4G32, KvFormat::Int4G64, KvFormat::Int4G128];
    pub const fn name(self) -> &'static str {
        match self {
            KvFormat::Bf16 => "bf16",
            KvFormat::F16 => "f16",
            KvFormat::Int8 => "int8",
            KvFormat::Int4G32 => "int4-g32",
            KvFormat::Int4G64 => "int4-g64",
            KvFormat::Int4G128 => "int4-g128",
        }
    }
    /// Bits per cached value (16, 8 or 4). Cache strides count values.
    pub const fn bits(self) -> u32 {
        match self {
            KvFormat::Bf16 | KvFormat::F16 => 16,
            KvFormat::Int8 => 8,
            KvFormat::Int4G32 | KvFormat::Int4G64 | KvFormat::Int4G128 => 4,
        }
    }
    /// Head dims per scale/zero group (int4), `None` otherwise.
    pub const fn group(self) -> Option<u32> {
        match self {
            KvFormat::Int4G32 => Some(32),
            KvFormat::Int4G64 => Some(64),
            KvFormat::Int4G128 => Some(128),
            _ => None,
        }
    }
    /// Whether rows of `head_dim` values exist in this format (a group
    /// cannot be wider than a row).
    pub const fn supports_head_dim(self, head_dim: u32) -> bool {
        match self.group() {
            Some(g) => g <= head_dim,
            None => true,
        }
    }
    /// Bytes of one cached row's values (one token of one kv head).
    pub const fn row_bytes(self, head_dim: u32) -> u32 {
        head_dim * self.bits() / 8
    }
    /// Bytes of one row's side data (scales), stored apart from the values.
    pub const fn side_bytes(self, head_dim: u32) -> u32 {
        match self {
            KvFormat::Bf16 | KvFormat::F16 => 0,
            KvFormat::Int8 => 4,
            KvFormat::Int4G32 | KvFormat::Int4G64 | KvFormat::Int4G128 => match self.group() {
                Some(g) => 4 * head_dim / g,
                None => 0,
            },
        }
    }
    /// Whether rows are quantized (values + side data).
    pub const fn is_quantized(self) -> bool {
        self.bits() < 16
    }
    /// The Q/O dtype a cache of this format is computed with; `None` when any
    /// dtype works (quantized formats dequantize to the query's type).
    pub const fn required_dtype(self) -> Option<Dtype> {
        match self {
            KvFormat::Bf16 => Some(Dtype::Bf16),
            KvFormat::F16 => Some(Dtype::F16),
            _ => None,
        }
    }
}

/// Head dimensions the kernels are instantiated for.
pub const HEAD_DIMS: [u32; 3] = [64, 128, 256];
/// Largest number of new query tokens per sequence.
pub const MAX_Q_LEN: u32 = 8;

/// FNV-1a (64-bit) of a PTX module's text: names the PTX a precompiled
/// cubin was built from (`DECODE_ATTN_CUBIN`, written by `cargo xtask
/// bundle` and checked by the host before it loads the cubin).
pub fn ptx_hash(ptx: &[u8]) -> u64 {
    ptx.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}
