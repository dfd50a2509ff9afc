//! The axes of the kernel set and the rules that say which points of their
//! product are built. This file is also compiled into `build.rs`, which
//! expands the rules into the kernel tables (`kernel_set.rs`), so it uses
//! nothing but `core` and its own items.

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
    /// The kernels' type of this dtype (`kernels-gpu/src/format/`).
    pub const fn type_name(self) -> &'static str {
        match self {
            Dtype::Bf16 => "Bf16",
            Dtype::F16 => "F16",
        }
    }
    /// The dtype named `name`: its [`Dtype::name`] or an alias (`bfloat16`;
    /// `fp16`, `float16`, `half`), in any case. Every binding parses names
    /// here, so each dtype has one spelling in what they print.
    pub fn from_name(name: &str) -> Option<Dtype> {
        let is = |n: &str| same_name(name, n);
        if is("bf16") || is("bfloat16") {
            Some(Dtype::Bf16)
        } else if is("f16") || is("fp16") || is("float16") || is("half") {
            Some(Dtype::F16)
        } else {
            None
        }
    }
}

/// Whether `given` spells `name`: ASCII case aside, `_` for `-`.
fn same_name(given: &str, name: &str) -> bool {
    given.len() == name.len() && given.bytes().zip(name.bytes()).all(|(g, n)| g.to_ascii_lowercase() == n || (g == b'_' && n == b'-'))
}

/// The GPU architecture a module of kernels is compiled for: rustc's
/// `-C target-cpu`, one PTX file and one fatbin each (`ptx-builder`).
///
/// An architecture-specific target ([`Arch::Sm90a`]) holds the whole
/// kernel set, compiled for that GPU alone; the portable targets hold,
/// each, the kernels whose parts need it and no less ([`Arch::needed_by`]):
/// sm_80 the 16-bit, int8 and int4 kernels of the wide and narrow families
/// with the global merge, and the cache and merge kernels of those formats;
/// sm_89 the same for the fp8 formats (`cvt.*.e4m3x2` needs it). Their PTX
/// runs, compiled by the driver, on any later GPU too.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Arch {
    /// Ampere (A100, A10, RTX 30) and later: `mma.sync` bf16, `cp.async`.
    Sm80 = 0,
    /// Ada (L4, L40, RTX 40) and later: fp8 conversions.
    Sm89 = 1,
    /// Hopper (H100, H200) only: `wgmma`, bulk copies, thread-block
    /// clusters, programmatic dependent launch.
    Sm90a = 2,
}

impl Arch {
    pub const ALL: [Arch; 3] = [Arch::Sm80, Arch::Sm89, Arch::Sm90a];
    /// The target's name, as rustc's `-C target-cpu` and ptxas's `-arch` spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Arch::Sm80 => "sm_80",
            Arch::Sm89 => "sm_89",
            Arch::Sm90a => "sm_90a",
        }
    }
    /// The architecture named `name` (`sm_80`, `sm_89`, `sm_90a`), in any case.
    pub fn from_name(name: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| same_name(name, a.name()))
    }
    /// The PTX ISA feature its module is built with (`-C target-feature`),
    /// where the target's default is too old: the portable modules' 7.8
    /// (CUDA 11.8 drivers) for `movmatrix` and the L2 prefetch hints, 8.1
    /// (CUDA 12.1) for sm_89's fp8 conversions; sm_90a's default is 8.0.
    pub const fn ptx_isa(self) -> Option<&'static str> {
        match self {
            Arch::Sm80 => Some("+ptx78"),
            Arch::Sm89 => Some("+ptx81"),
            Arch::Sm90a => None,
        }
    }
    /// Whether the target is for one compute capability only (its PTX and
    /// cubin run there alone), rather than portable to every later one.
    pub const fn is_specific(self) -> bool {
        matches!(self, Arch::Sm90a)
    }
    /// The compute capability the target is compiled for.
    pub const fn compute_capability(self) -> (u32, u32) {
        match self {
            Arch::Sm80 => (8, 0),
            Arch::Sm89 => (8, 9),
            Arch::Sm90a => (9, 0),
        }
    }
    /// The kernels' architecture on a GPU of compute capability
    /// `(major, minor)`: the specific target built for exactly it, else the
    /// newest portable one it can run; `None` before sm_80.
    pub const fn for_compute_capability(major: u32, minor: u32) -> Option<Arch> {
        let cc = major * 10 + minor;
        if cc == 90 {
            Some(Arch::Sm90a)
        } else if cc >= 89 {
            Some(Arch::Sm89)
        } else if cc >= 80 {
            Some(Arch::Sm80)
        } else {
            None
        }
    }
    /// Whether a GPU whose kernels are of `self`'s architecture runs the
    /// modules of `module`: its own, and below a specific target every
    /// portable one up to it (an sm_89 GPU loads the sm_80 and sm_89 modules).
    pub const fn loads(self, module: Arch) -> bool {
        self as u32 == module as u32 || (!self.is_specific() && !module.is_specific() && module as u32 <= self as u32)
    }
    /// The module that holds a kernel needing `needed` on a GPU of this
    /// architecture: a specific target's own (it holds the whole set), else
    /// the portable module of exactly `needed`; `None` where the GPU's
    /// architecture is below it.
    pub const fn module_for(self, needed: Arch) -> Option<Arch> {
        if self.is_specific() {
            Some(self)
        } else if needed as u32 <= self as u32 && !needed.is_specific() {
            Some(needed)
        } else {
            None
        }
    }
    /// The least architecture of a kernel's parts: the newest that any of
    /// them needs.
    pub const fn needed_by(parts: &[Arch]) -> Arch {
        let mut most = Arch::Sm80;
        let mut i = 0;
        while i < parts.len() {
            if parts[i] as u32 > most as u32 {
                most = parts[i];
            }
            i += 1;
        }
        most
    }
    /// Whether a module of this architecture has a kernel needing `needed`:
    /// a specific target has every kernel; a portable one those that need
    /// exactly it.
    pub const fn holds(self, needed: Arch) -> bool {
        self.is_specific() || self as u32 == needed as u32
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
    /// Multi-head latent attention (DeepSeek V3 / R1, Kimi K2) in its
    /// absorbed form: MQA over one latent head whose cached rows hold
    /// [`MLA_DIMS`] (576 values for Q·K, V the first 512 of the same row).
    /// A block is 64 query rows (tokens × heads) against a chunk of keys on
    /// Hopper's warpgroup MMA, two warpgroups splitting the keys of each
    /// 64-key stage for `S = Q·Kᵀ` and O's 512 columns for `O += P·V`
    /// (`kernels-gpu`'s `decode::mla`).
    Mla = 3,
}

impl Family {
    pub const ALL: [Family; 4] = [Family::Wide, Family::Narrow, Family::Wgmma, Family::Mla];
    pub const fn name(self) -> &'static str {
        match self {
            Family::Wide => "wide",
            Family::Narrow => "narrow",
            Family::Wgmma => "wgmma",
            Family::Mla => "mla",
        }
    }
    /// The architecture the family's kernels need: wgmma and MLA sm_90a.
    pub const fn needs(self) -> Arch {
        match self {
            Family::Wide | Family::Narrow => Arch::Sm80,
            Family::Wgmma | Family::Mla => Arch::Sm90a,
        }
    }
    /// Whether the kernel table has this family for a format and Q·K head
    /// dim (`Wide` and `Narrow` serve every supported pair; MLA the latent
    /// rows of [`MLA_DIMS`] alone, in the formats that hold them,
    /// [`KvFormat::holds_latent`]).
    pub const fn serves(self, format: KvFormat, head_dim: u32) -> bool {
        match self {
            Family::Wide | Family::Narrow => head_dim != MLA_DIMS.qk && format.supports_head_dim(head_dim),
            Family::Wgmma => head_dim == 128 && format.supports_head_dim(head_dim),
            Family::Mla => head_dim == MLA_DIMS.qk && format.holds_latent(),
        }
    }
    /// The family that serves a Q·K head dim's latent rows, if it is one:
    /// MLA's for [`MLA_DIMS`], none otherwise.
    pub const fn is_latent(self) -> bool {
        matches!(self, Family::Mla)
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
    pub const fn is_paged(self) -> bool {
        matches!(self, Addressing::Paged)
    }
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
    /// zero in scales: `x ≈ q · scale + zero`, q in 0..=15.
    Int4G32 = 3,
    /// int4 group-wise, G = 64.
    Int4G64 = 4,
    /// int4 group-wise, G = 128 (head_dim ≥ 128).
    Int4G128 = 5,
    /// fp8 e4m3 per head: D e4m3 bytes per row (`crate::e4m3_from_f32`) and
    /// one f32 scale per (sequence, token, kv head) in scales, int8's
    /// layout: `x ≈ e4m3 · scale`.
    Fp8PerHead = 6,
    /// fp8 e4m3 per tensor: D e4m3 bytes per row and no scales; one f32
    /// scale for all of K and one for all of V, device scalars read at
    /// each launch (a captured graph sees new values): `x ≈ e4m3 · scale`.
    Fp8 = 7,
    /// DeepSeek V3.2's fp8 latent rows (vLLM's `fp8_ds_mla`), MLA's
    /// [`MLA_DIMS`] only: 656 bytes a token — 512 e4m3 latent values, four
    /// f32 scales (one per 128 values, powers of two as the quantizer
    /// writes them), 64 bf16 RoPE values — scales inside the row, none
    /// beside it. A latent value is `bf16(e4m3 · scale)` (the f32 product
    /// rounded once; exact for a power-of-two scale): `docs/formats.md`,
    /// "Latent caches".
    Fp8DsMla = 8,
}

impl KvFormat {
    pub const ALL: [KvFormat; 9] = [KvFormat::Bf16, KvFormat::F16, KvFormat::Int8, KvFormat::Int4G32, KvFormat::Int4G64, KvFormat::Int4G128, KvFormat::Fp8PerHead, KvFormat::Fp8, KvFormat::Fp8DsMla];
    pub const fn name(self) -> &'static str {
        match self {
            KvFormat::Bf16 => "bf16",
            KvFormat::F16 => "f16",
            KvFormat::Int8 => "int8",
            KvFormat::Int4G32 => "int4-g32",
            KvFormat::Int4G64 => "int4-g64",
            KvFormat::Int4G128 => "int4-g128",
            KvFormat::Fp8PerHead => "fp8-per-head",
            KvFormat::Fp8 => "fp8",
            KvFormat::Fp8DsMla => "fp8-ds-mla",
        }
    }
    /// The format named `name`: its [`KvFormat::name`] (`bf16`, `f16`,
    /// `int8`, `fp8`, `fp8-per-head`, `fp8-ds-mla`, `int4-g32`, `int4-g64`, `int4-g128`),
    /// in any case and with `_` for `-`, or an alias (`bfloat16`; `fp16`,
    /// `float16`; `int4` for `int4-g32`; `fp8-e4m3`). Every binding parses
    /// names here, so each format has one spelling in what they print.
    pub fn from_name(name: &str) -> Option<KvFormat> {
        let is = |n: &str| same_name(name, n);
        KvFormat::ALL.into_iter().find(|f| is(f.name())).or(if is("bfloat16") {
            Some(KvFormat::Bf16)
        } else if is("fp16") || is("float16") {
            Some(KvFormat::F16)
        } else if is("int4") {
            Some(KvFormat::Int4G32)
        } else if is("fp8-e4m3") {
            Some(KvFormat::Fp8)
        } else {
            None
        })
    }
    /// The kernels' type of this format's cache, read with `dtype` queries
    /// (`kernels-gpu/src/format/`), as a type path: `build.rs` writes it
    /// into each kernel's table row, so the kernel crate names no format
    /// by hand.
    pub fn kernel_type(self, dtype: Dtype, out: &mut impl core::fmt::Write) -> core::fmt::Result {
        let q = dtype.type_name();
        match self {
            KvFormat::Bf16 | KvFormat::F16 => write!(out, "PlainKv<{q}>"),
            KvFormat::Int8 => write!(out, "Int8Kv<{q}>"),
            KvFormat::Fp8PerHead => write!(out, "Fp8PerHeadKv<{q}>"),
            KvFormat::Fp8 => write!(out, "Fp8Kv<{q}>"),
            KvFormat::Fp8DsMla => write!(out, "Fp8DsMlaKv"),
            KvFormat::Int4G32 | KvFormat::Int4G64 | KvFormat::Int4G128 => write!(out, "Int4Kv<{q}, {}>", self.group().unwrap_or(0)),
        }
    }
    /// The architecture the format's kernels need: fp8's conversions
    /// (`cvt.*.e4m3x2`) sm_89, every other format sm_80.
    pub const fn needs(self) -> Arch {
        match self {
            KvFormat::Fp8PerHead | KvFormat::Fp8 | KvFormat::Fp8DsMla => Arch::Sm89,
            KvFormat::Bf16 | KvFormat::F16 | KvFormat::Int8 | KvFormat::Int4G32 | KvFormat::Int4G64 | KvFormat::Int4G128 => Arch::Sm80,
        }
    }
    /// The format's part of kernel symbols: its name without punctuation.
    pub const fn symbol(self) -> &'static str {
        match self {
            KvFormat::Bf16 => "bf16",
            KvFormat::F16 => "f16",
            KvFormat::Int8 => "int8",
            KvFormat::Int4G32 => "int4g32",
            KvFormat::Int4G64 => "int4g64",
            KvFormat::Int4G128 => "int4g128",
            KvFormat::Fp8PerHead => "fp8ph",
            KvFormat::Fp8 => "fp8",
            KvFormat::Fp8DsMla => "fp8dsmla",
        }
    }
    /// Bits per stored element (16, 8 or 4): a value's, but for
    /// `Fp8DsMla`, whose rows are bytes of three kinds. Cache strides
    /// count these elements ([`KvFormat::row_len`] a row).
    pub const fn bits(self) -> u32 {
        match self {
            KvFormat::Bf16 | KvFormat::F16 => 16,
            KvFormat::Int8 | KvFormat::Fp8PerHead | KvFormat::Fp8 | KvFormat::Fp8DsMla => 8,
            KvFormat::Int4G32 | KvFormat::Int4G64 | KvFormat::Int4G128 => 4,
        }
    }
    /// Head dims per scale/zero group (int4), `None` otherwise.
    pub const fn group(self) -> Option<u32> {
        match self {
            KvFormat::Int4G32 => Some(32),
            KvFormat::Int4G64 => Some(64),
            KvFormat::Int4G128 => Some(128),
            KvFormat::Bf16 | KvFormat::F16 | KvFormat::Int8 | KvFormat::Fp8PerHead | KvFormat::Fp8 | KvFormat::Fp8DsMla => None,
        }
    }
    /// Whether the format stores MLA's latent rows ([`MLA_DIMS`]): bf16;
    /// fp8 e4m3 with one scale per row (a latent cache's one head: a scale
    /// per token), every one of the 576 values quantized; and DeepSeek
    /// V3.2's 656-byte rows (`Fp8DsMla`) (`docs/formats.md`, "Latent
    /// caches").
    pub const fn holds_latent(self) -> bool {
        matches!(self, KvFormat::Bf16 | KvFormat::Fp8PerHead | KvFormat::Fp8DsMla)
    }
    /// Whether the format stores latent rows alone (`Fp8DsMla`: its row
    /// layout is MLA's).
    pub const fn latent_only(self) -> bool {
        matches!(self, KvFormat::Fp8DsMla)
    }
    /// Whether rows of `head_dim` values exist in this format (a group
    /// cannot be wider than a row; a latent-only format's rows are MLA's).
    pub const fn supports_head_dim(self, head_dim: u32) -> bool {
        if self.latent_only() {
            return head_dim == MLA_DIMS.qk;
        }
        match self.group() {
            Some(g) => g <= head_dim,
            None => true,
        }
    }
    /// Bytes of one cached row (one token of one kv head), scales stored
    /// in it included (`Fp8DsMla`: 512 e4m3 values, 4 f32 scales, 64 bf16
    /// values); `u32::MAX` where that overflows (no head dim the library
    /// accepts).
    pub const fn row_bytes(self, head_dim: u32) -> u32 {
        if self.latent_only() {
            let rope = head_dim.saturating_sub(DS_MLA_LATENT);
            return saturate(DS_MLA_ROPE_AT as u64 + 2 * rope as u64);
        }
        saturate(head_dim as u64 * self.bits() as u64 / 8)
    }
    /// Stored elements of one row ([`KvFormat::bits`] each): `head_dim`,
    /// but 656 for `Fp8DsMla`'s rows. Cache strides count these.
    pub const fn row_len(self, head_dim: u32) -> u32 {
        if self.latent_only() {
            self.row_bytes(head_dim)
        } else {
            head_dim
        }
    }
    /// Bytes of one row's scales, stored apart from the values (none for
    /// `Fp8DsMla`, whose scales are in the row);
    /// `u32::MAX` where that overflows.
    pub const fn scale_bytes(self, head_dim: u32) -> u32 {
        match self {
            KvFormat::Bf16 | KvFormat::F16 | KvFormat::Fp8 | KvFormat::Fp8DsMla => 0,
            KvFormat::Int8 | KvFormat::Fp8PerHead => 4,
            KvFormat::Int4G32 | KvFormat::Int4G64 | KvFormat::Int4G128 => match self.group() {
                Some(g) => saturate(4 * head_dim as u64 / g as u64),
                None => 0,
            },
        }
    }
    /// Whether rows are quantized (values + scales, or values and
    /// per-tensor scales).
    pub const fn is_quantized(self) -> bool {
        self.bits() < 16
    }
    /// Whether the format's scales are one f32 per tensor (K's, V's),
    /// device scalars the kernels read at launch, instead of per-row side
    /// data: `Fp8`.
    pub const fn tensor_scaled(self) -> bool {
        matches!(self, KvFormat::Fp8)
    }
    /// The Q/O dtype a cache of this format is computed with; `None` when any
    /// dtype works (quantized formats dequantize to the query's type).
    pub const fn required_dtype(self) -> Option<Dtype> {
        match self {
            KvFormat::Bf16 => Some(Dtype::Bf16),
            KvFormat::F16 => Some(Dtype::F16),
            // (The MLA kernels' queries, and the RoPE part stored as is.)
            KvFormat::Fp8DsMla => Some(Dtype::Bf16),
            KvFormat::Int8 | KvFormat::Fp8PerHead | KvFormat::Fp8 | KvFormat::Int4G32 | KvFormat::Int4G64 | KvFormat::Int4G128 => None,
        }
    }
}

/// `Fp8DsMla`'s rows: the latent values coded as e4m3 (the rest of a
/// row's [`MLA_DIMS`] are RoPE values, stored bf16), in groups of
/// [`DS_MLA_GROUP`] with a scale each.
pub const DS_MLA_LATENT: u32 = 512;
/// Latent values per scale of an `Fp8DsMla` row.
pub const DS_MLA_GROUP: u32 = 128;
/// Where an `Fp8DsMla` row's f32 scales start (bytes): after its codes.
pub const DS_MLA_SCALES_AT: u32 = DS_MLA_LATENT;
/// Where an `Fp8DsMla` row's bf16 RoPE values start (bytes): after its scales.
pub const DS_MLA_ROPE_AT: u32 = DS_MLA_SCALES_AT + 4 * (DS_MLA_LATENT / DS_MLA_GROUP);

/// `x`, or `u32::MAX` where it does not fit.
const fn saturate(x: u64) -> u32 {
    if x > u32::MAX as u64 {
        u32::MAX
    } else {
        x as u32
    }
}

/// Head dimensions the kernels are instantiated for (Q·K's and V's alike;
/// a latent cache's are [`MLA_DIMS`]).
pub const HEAD_DIMS: [u32; 3] = [64, 128, 256];

/// The head dims of multi-head latent attention (DeepSeek V3 / R1 / V3.2,
/// Kimi K2, GLM-5): a cached row of 512 latent values and 64 RoPE values,
/// all 576 in Q·K, the first 512 as V.
pub const MLA_DIMS: HeadDims = HeadDims { qk: 576, v: 512 };

/// Every point of the head-dim axis the kernel set is built over: the
/// square [`HEAD_DIMS`] and [`MLA_DIMS`].
pub const KERNEL_DIMS: [HeadDims; 4] = [HeadDims::square(64), HeadDims::square(128), HeadDims::square(256), MLA_DIMS];

/// Row lengths of the cache kernels (store, quantize, dequantize): the
/// square [`HEAD_DIMS`], and a latent row's for the formats that hold one
/// ([`KvFormat::holds_latent`]).
pub const CACHE_DIMS: [u32; 4] = [64, 128, 256, MLA_DIMS.qk];

/// V's (and O's) head dims of every kernel: the split merge is built for
/// each.
pub const V_HEAD_DIMS: [u32; 4] = [64, 128, 256, 512];

/// An attention kernel's head dims: Q·K's (the length of Q's and K's rows)
/// and V's (V's and O's). Every family built so far reads V rows as long
/// as K's ([`HeadDims::square`]); multi-head latent attention (DeepSeek,
/// Kimi) reads 576 values for Q·K and the first 512 of the same cached row
/// for V: another point of this axis, not another kernel set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HeadDims {
    pub qk: u32,
    pub v: u32,
}

impl HeadDims {
    /// Q·K and V of the same head dim `d`.
    pub const fn square(d: u32) -> HeadDims {
        HeadDims { qk: d, v: d }
    }
    /// The head dims of a shape whose Q·K head dim is `d`: [`MLA_DIMS`]
    /// for MLA's latent rows (576), square otherwise.
    pub const fn of_qk(d: u32) -> HeadDims {
        if d == MLA_DIMS.qk {
            MLA_DIMS
        } else {
            HeadDims::square(d)
        }
    }
    /// Whether V's rows are as long as K's.
    pub const fn is_square(self) -> bool {
        self.qk == self.v
    }
    pub const fn same(self, other: HeadDims) -> bool {
        self.qk == other.qk && self.v == other.v
    }
    /// The symbols' part: `d<qk>`, or `d<qk>v<v>` where V's differs.
    pub fn write_symbol(self, w: &mut impl core::fmt::Write) -> core::fmt::Result {
        if self.is_square() {
            write!(w, "d{}", self.qk)
        } else {
            write!(w, "d{}v{}", self.qk, self.v)
        }
    }
}
/// Largest number of new query tokens per sequence.
pub const MAX_Q_LEN: u32 = 8;

/// How an attention kernel merges the partial results of a sequence split
/// into several work items (chunks).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Merge {
    /// Through fp32 partials in global memory: the sequence's last block
    /// merges them, or the merge kernel after the grid does.
    Global = 0,
    /// In a thread-block cluster, through distributed shared memory
    /// (`DecodeParams::cluster_log2`): a sequence's chunks are one cluster.
    Cluster = 1,
}

impl Merge {
    pub const ALL: [Merge; 2] = [Merge::Global, Merge::Cluster];
    pub const fn is_cluster(self) -> bool {
        matches!(self, Merge::Cluster)
    }
    /// The architecture the merge needs: clusters sm_90a.
    pub const fn needs(self) -> Arch {
        match self {
            Merge::Global => Arch::Sm80,
            Merge::Cluster => Arch::Sm90a,
        }
    }
}

/// The form of a kernel within its family: the plain kernel, or one of the
/// specialised forms the planner takes where they are faster.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Form {
    /// The family's kernel.
    Plain = 0,
    /// A warp-specialised wgmma kernel ([`wgmma_specializable`]): a producer
    /// warpgroup of `WGMMA_PRODUCER_WARPS` after the compute warpgroups.
    Specialized = 1,
    /// A capacity twin ([`has_capacity_twin`]), launched for capacity plans
    /// of device lengths: it differs from the plain kernel only in when
    /// its first copies are issued.
    Capacity = 2,
    /// A narrow kernel whose blocks read two adjacent kv heads
    /// ([`has_head_pair_form`]).
    HeadPair = 3,
    /// An MLA kernel for blocks of at most [`crate::MLA_T_ROWS`] query rows,
    /// its MMAs transposed: keys along M, the rows along N
    /// ([`has_transposed_form`]).
    Transposed = 4,
    /// The transposed MLA form for more than [`crate::MLA_T_ROWS`] query
    /// rows: a work item's rows in chunks of 32 (`tile::mla_form_ring`),
    /// each chunk a block of its own, the chunks consecutive blocks
    /// ([`has_transposed_rows_form`]). A kernel of its own, so that the
    /// one-chunk kernels keep their registers.
    TransposedRows = 5,
}

impl Form {
    pub const ALL: [Form; 6] = [Form::Plain, Form::Specialized, Form::Capacity, Form::HeadPair, Form::Transposed, Form::TransposedRows];
    pub const fn is_specialized(self) -> bool {
        matches!(self, Form::Specialized)
    }
    pub const fn is_capacity(self) -> bool {
        matches!(self, Form::Capacity)
    }
    /// Either transposed MLA form.
    pub const fn is_transposed(self) -> bool {
        matches!(self, Form::Transposed | Form::TransposedRows)
    }
    /// Kv heads one block reads: 2 for [`Form::HeadPair`], else 1.
    pub const fn heads_per_block(self) -> u32 {
        if matches!(self, Form::HeadPair) {
            2
        } else {
            1
        }
    }
}

/// A variant's logits transform, one of its three parts
/// ([`VariantParts`]).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScoreMod {
    /// The scaled score itself.
    Plain = 0,
    /// Logits soft-cap (Gemma 2, Grok): `cap · tanh(scale · q·k / cap)`.
    SoftCap = 1,
    /// ALiBi (BLOOM, MPT, Falcon): `scale · q·k + slope_h · (t − p)`.
    Alibi = 2,
}

/// Which keys a variant's kernels can hide beyond the causal limit among
/// the new tokens, one of its three parts ([`VariantParts`]). Ordered: each
/// mask's kernels serve the launches of the masks before it (an absent
/// window, first keys or tree is a value of the launch).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MaskKind {
    /// The causal limit alone.
    Causal = 0,
    /// A sliding window (Mistral, Gemma's local layers) and the sequences'
    /// own first keys (key ranges), where the launch sets them.
    Window = 1,
    /// [`MaskKind::Window`] and a speculative step's draft tree (each new
    /// token sees the prefix and its ancestors), where the launch sets one.
    Tree = 2,
}

/// A variant as three orthogonal parts: the score modifier, the mask and
/// whether the launch's sinks (gpt-oss) enter the softmax. The kernel set
/// compiles some combinations ([`Variant`]); [`Variant::serving`] picks
/// the one that serves a wanted combination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VariantParts {
    pub score: ScoreMod,
    pub mask: MaskKind,
    pub sinks: bool,
}

impl VariantParts {
    /// Whether kernels built with `self` serve a launch that wants
    /// `wanted`: the same score modifier, a mask at least as wide, sinks if
    /// it wants them.
    pub const fn covers(self, wanted: VariantParts) -> bool {
        self.score as u32 == wanted.score as u32 && self.mask as u32 >= wanted.mask as u32 && (self.sinks || !wanted.sinks)
    }
}

/// The attention variants the kernel set compiles (`kernels-gpu`'s
/// `variant::Parts`; the semantics are `docs/benchmark.md`'s, "The
/// operation"): named combinations of [`VariantParts`]. A part's presence
/// is a compile-time choice; its values (the cap, the window, the sinks',
/// slopes' and tree's device arrays) are runtime data in `DecodeParams`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// `softmax(scale · q·k)`, causal among the new tokens: no window, no
    /// sinks. The fastest kernels; every form.
    Standard = 0,
    /// Logits soft-cap with a sliding window, sinks and first keys where
    /// the launch sets them.
    SoftCap = 1,
    /// The standard logits with any of the masks — a sliding window, the
    /// sequences' first keys — and / or attention sinks.
    Masked = 2,
    /// ALiBi with a sliding window and sinks where the launch sets them.
    Alibi = 3,
    /// [`Variant::Masked`] verifying a speculative step's draft tree: its
    /// own kernels, so that the masked ones keep their code (docs/perf.md,
    /// "Draft trees").
    MaskedTree = 4,
    /// [`Variant::SoftCap`] verifying a draft tree (not ALiBi: its bias
    /// would need each new key's tree position too; no model pairs ALiBi
    /// with speculative trees).
    SoftCapTree = 5,
}

impl Variant {
    pub const ALL: [Variant; 6] = [Variant::Standard, Variant::SoftCap, Variant::Masked, Variant::Alibi, Variant::MaskedTree, Variant::SoftCapTree];
    pub const fn name(self) -> &'static str {
        match self {
            Variant::Standard => "standard",
            Variant::SoftCap => "softcap",
            Variant::Masked => "masked",
            Variant::MaskedTree => "masked_tree",
            Variant::SoftCapTree => "softcap_tree",
            Variant::Alibi => "alibi",
        }
    }
    /// The parts the variant's kernels apply.
    pub const fn parts(self) -> VariantParts {
        let (score, mask, sinks) = match self {
            Variant::Standard => (ScoreMod::Plain, MaskKind::Causal, false),
            Variant::SoftCap => (ScoreMod::SoftCap, MaskKind::Window, true),
            Variant::Masked => (ScoreMod::Plain, MaskKind::Window, true),
            Variant::Alibi => (ScoreMod::Alibi, MaskKind::Window, true),
            Variant::MaskedTree => (ScoreMod::Plain, MaskKind::Tree, true),
            Variant::SoftCapTree => (ScoreMod::SoftCap, MaskKind::Tree, true),
        };
        VariantParts { score, mask, sinks }
    }
    /// The first compiled variant (in [`Variant::ALL`]'s order, fastest
    /// first) whose kernels serve `wanted`; `None` for a combination no
    /// kernel applies (ALiBi with a draft tree).
    pub const fn serving(wanted: VariantParts) -> Option<Variant> {
        Variant::first_covering(wanted, false)
    }
    /// The compiled variant of exactly these parts (the kernels' types name
    /// their parts; this names their kernel set). Panics, at compile time
    /// in a const, for parts the set does not compile.
    pub const fn of(parts: VariantParts) -> Variant {
        match Variant::first_covering(parts, true) {
            Some(v) => v,
            None => panic!("no compiled variant has these parts"),
        }
    }
    /// The first variant in [`Variant::ALL`]'s order whose parts cover
    /// `wanted` (`exact`: and are covered by it, so are its parts).
    const fn first_covering(wanted: VariantParts, exact: bool) -> Option<Variant> {
        let mut i = 0;
        while i < Variant::ALL.len() {
            let parts = Variant::ALL[i].parts();
            if parts.covers(wanted) && (!exact || wanted.covers(parts)) {
                return Some(Variant::ALL[i]);
            }
            i += 1;
        }
        None
    }
    /// Whether the logits are the scaled score times a constant, so that a
    /// positive factor commutes with the row maximum and may be applied in
    /// the exponent's FMA instead of to every score (the wgmma kernels'
    /// `fold`). A soft-cap's `tanh` is not, nor is ALiBi's added bias.
    pub const fn linear_in_scale(self) -> bool {
        matches!(self.parts().score, ScoreMod::Plain)
    }
    /// Whether the kernels read a sliding window and first keys from their
    /// parameters (`DecodeParams::window`, `seq_starts`).
    pub const fn takes_window(self) -> bool {
        self.parts().mask as u32 >= MaskKind::Window as u32
    }
    /// Whether the kernels (and their merges) add the launch's sinks
    /// (`DecodeParams::sinks`).
    pub const fn takes_sinks(self) -> bool {
        self.parts().sinks
    }
    /// Whether the kernels read a draft tree from their parameters
    /// (`DecodeParams::tree_masks`, `tree_positions`).
    pub const fn takes_tree(self) -> bool {
        matches!(self.parts().mask, MaskKind::Tree)
    }
    /// Whether the kernels of a merge and form are built with this variant.
    /// Variants other than [`Variant::Standard`] merge split sequences
    /// through global memory, and take neither the capacity twin nor the
    /// head-pair form (the plain kernels serve those plans; the forms are
    /// speed-ups of the standard kernels), which keeps the module to one
    /// more kernel per family, format, head dim and addressing.
    pub const fn builds(self, merge: Merge, form: Form) -> bool {
        match self {
            Variant::Standard => true,
            _ => matches!(merge, Merge::Global) && matches!(form, Form::Plain | Form::Specialized),
        }
    }
}

/// Whether the kernel keeps Q in shared memory (after the pipeline buffers)
/// rather than in registers: at D = 256, Q fragments (64 registers) and the
/// O accumulator (128) would not fit in 255 registers together.
pub const fn q_in_smem(head_dim: u32) -> bool {
    head_dim > 128
}

/// Whether the wgmma kernels of a format and addressing come in a
/// warp-specialised form too ([`Form::Specialized`]): the strided kernels
/// of quantized formats. There a producer warpgroup issues the stages'
/// bulk copies and converts them into 16-bit tiles while the `warps_k`
/// warpgroups before it only compute (`decode::wgmma`). Their blocks run
/// one per SM (384 threads at 168 registers), the unspecialised ones two:
/// the planner takes the specialised kernel when its grid fits two waves
/// (`host::heuristics`, docs/perf.md, "Warp-specialised quantized wgmma").
pub const fn wgmma_specializable(format: KvFormat, paged: bool) -> bool {
    format.is_quantized() && !paged
}

/// Whether an attention kernel has a capacity twin ([`Form::Capacity`]),
/// launched for capacity plans of device lengths: the strided wide kernels
/// of 16-bit caches that keep Q in registers (head dims up to 128), global
/// merge. A block of a sequence's first chunk issues its first stages for
/// the chunk at full capacity before its device length arrives, and zeroes
/// the rows it copied past that length as they land (`decode::decode_wide`); a
/// Q staged in shared memory, converted formats, page ids and cluster ranks
/// would each need that length or their own copies first.
pub const fn has_capacity_twin(format: KvFormat, head_dim: u32, family: Family, paged: bool, cluster: bool) -> bool {
    !format.is_quantized() && !q_in_smem(head_dim) && matches!(family, Family::Wide) && !paged && !cluster
}

/// Whether an MLA kernel has a transposed form ([`Form::Transposed`]):
/// every latent cache's, strided and paged (`decode::mla_transposed` in
/// `kernels-gpu`; docs/perf.md, "MLA at 16 heads").
pub const fn has_transposed_form(format: KvFormat, family: Family) -> bool {
    matches!(family, Family::Mla) && format.holds_latent()
}

/// Whether an MLA kernel has the row-chunk form of its transposed one
/// ([`Form::TransposedRows`]): the fp8 latent caches' (`decode::mla_t_ring32`
/// in `kernels-gpu`), strided and paged. Their 64-row blocks convert each
/// stage through shared memory; 16-row blocks that read the keys once a
/// chunk were 1.14-1.49× faster at 32 rows (docs/perf.md, "MLA 16 heads ×
/// q_len 2 in row chunks"), 32-row blocks that convert each key once
/// faster again from B = 32 (docs/perf.md, "MLA 16 heads × q_len 2 in one
/// block"). bf16's 64-row kernel is the faster from
/// B = 32 there, and has no such form.
pub const fn has_transposed_rows_form(format: KvFormat, family: Family) -> bool {
    // (The formats of `tile::mla_t_ring`, which `tests/ptx.rs` checks.)
    matches!(family, Family::Mla) && matches!(format, KvFormat::Fp8PerHead | KvFormat::Fp8DsMla)
}

/// Whether a narrow kernel has a head-pair form ([`Form::HeadPair`]):
/// the 8-bit formats (int8, both fp8) at head dim 128, global merge,
/// strided or paged. In a token-major
/// cache a token's two 128-byte rows are then one 256-byte piece, which HBM
/// serves as fast as head-major rows (docs/design/nhd-head-groups.md);
/// int4 pairs measured 10 % slower and are not built.
pub const fn has_head_pair_form(format: KvFormat, head_dim: u32, family: Family, cluster: bool) -> bool {
    matches!(format, KvFormat::Int8 | KvFormat::Fp8PerHead | KvFormat::Fp8) && head_dim == 128 && matches!(family, Family::Narrow) && !cluster
}
