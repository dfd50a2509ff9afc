//! The problem description a plan is made for, and its validation.

use decode_attn_abi::{Addressing, Dtype, HeadDims, KvFormat, Variant, HEAD_DIMS, MAX_Q_LEN, MLA_DIMS};

use crate::error::{ensure, Result};
pub use crate::variant::MAX_SOFT_CAP;
use crate::variant::VariantSpec;

/// Longest sequence (and cache capacity) a shape may have, in tokens: the
/// kernels index keys in 32-bit arithmetic with headroom for one stage.
pub const MAX_SEQ_LEN: u32 = i32::MAX as u32;

/// The largest `KvLayout::Strided` stride, in bytes (`stride × bits / 8`):
/// 2^59 (512 PiB), so a stride times a format's bits (at most 2^62) never
/// overflows u64, nor does a sum of three of them.
pub const MAX_STRIDE_BYTES: u64 = 1 << 59;

/// How one sequence/token/head row of K (and of V) is addressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvLayout {
    /// `[batch, max_seq_len, num_kv_heads, head_dim]` (token-major, "NHD").
    Nhd,
    /// `[batch, num_kv_heads, max_seq_len, head_dim]` (head-major, "HND").
    Hnd,
    /// Explicit strides, in values of the cache (2-byte values for bf16/f16,
    /// bytes for int8, nibbles for int4); `head_dim` values of a row are
    /// contiguous.
    /// Each stride must be a multiple of 16 bytes, for 16-byte vector loads.
    /// A quantized cache's scales have their own layout (`scale_strides`).
    Strided { batch: u64, token: u64, head: u64 },
    /// A pool of `num_pages` pages of `page_size` tokens (a power of two,
    /// 1..=256), found through a block table `[batch, pages_per_seq]` of
    /// `i32` page ids (`DecodeShape::pages_per_seq`) given to the plan.
    /// K and V: `[num_pages, page_size, Hkv, D]` (`PageOrder::TokenMajor`)
    /// or `[num_pages, Hkv, page_size, D]` (`PageOrder::HeadMajor`); a
    /// quantized cache's scales `[num_pages, Hkv, page_size]` either way.
    ///
    /// `page_bytes: None`: K, V and their scales are four dense pools.
    /// `Some(n)`: page p of each of them starts `p · n` bytes from its
    /// buffer's start, so all four can share one allocation, each page
    /// holding K's rows, V's rows and their scales together
    /// ([`DecodeShape::packed_page`] gives the offsets; FlashInfer's
    /// `[num_pages, 2, page_size, Hkv, D]` is this with `n` = two pages of
    /// rows). Fewer, larger scattered reads per page: see docs/formats.md.
    Paged { page_size: u32, num_pages: u32, order: PageOrder, page_bytes: Option<u64> },
}

/// Order of a page's rows (`KvLayout::Paged`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageOrder {
    /// `[page_size, Hkv, D]` per page (vLLM's and FlashInfer's "NHD").
    TokenMajor,
    /// `[Hkv, page_size, D]` per page ("HND").
    HeadMajor,
}

/// Largest page size of a paged cache, in tokens.
pub const MAX_PAGE_SIZE: u32 = 256;

/// Where K's rows, V's rows and their scales sit in one page of a packed
/// pool (`KvLayout::Paged { page_bytes: Some(page_bytes), .. }`), in bytes
/// from the page's start: K's rows at 0, then V's, K's scales, V's side
/// data, each part starting 16-byte aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedPage {
    pub page_bytes: u64,
    pub v: u64,
    pub k_scales: u64,
    pub v_scales: u64,
}

/// Strides of a KV layout, in elements (paged: `batch` is the page stride
/// and `token` the stride within a page).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvStrides {
    pub batch: u64,
    pub token: u64,
    pub head: u64,
}

/// One decode step's attention problem.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeShape {
    /// Sequences in the batch.
    pub batch: u32,
    pub num_q_heads: u32,
    /// Must divide `num_q_heads` (MHA: equal; GQA; MQA: 1).
    pub num_kv_heads: u32,
    /// 64, 128 or 256; or 576, a latent cache of multi-head latent
    /// attention ([`DecodeShape::latent`]): rows of 576 values, all of them
    /// in Q·K, the first 512 V (O's rows are 512 long).
    pub head_dim: u32,
    /// New query tokens per sequence, 1..=8 (causal among themselves).
    pub q_len: u32,
    /// Capacity of the KV cache per sequence, in tokens.
    pub max_seq_len: u32,
    /// Element type of Q and O.
    pub dtype: Dtype,
    pub kv_format: KvFormat,
    pub kv_layout: KvLayout,
    /// Softmax scale; `None` means `1/sqrt(head_dim)`.
    pub scale: Option<f32>,
    /// The attention variant: a soft-cap or ALiBi, a window, key ranges,
    /// a draft tree, sinks ([`VariantSpec`]; default: none of them). Its
    /// parts pick the kernels ([`VariantSpec::kernel_variant`]); plans of a
    /// spec run only with its [`VariantBuffers`](crate::VariantBuffers).
    pub variant: VariantSpec,
}

impl DecodeShape {
    /// Largest page size of a paged cache, in tokens.
    pub const MAX_PAGE_SIZE: u32 = MAX_PAGE_SIZE;
    /// A bf16 problem with an NHD cache and the default scale.
    pub fn bf16(batch: u32, num_q_heads: u32, num_kv_heads: u32, head_dim: u32, q_len: u32, max_seq_len: u32) -> Self {
        DecodeShape {
            batch,
            num_q_heads,
            num_kv_heads,
            head_dim,
            q_len,
            max_seq_len,
            dtype: Dtype::Bf16,
            kv_format: KvFormat::Bf16,
            kv_layout: KvLayout::Nhd,
            scale: None,
            variant: VariantSpec::STANDARD,
        }
    }

    /// Multi-head latent attention (DeepSeek V3 / R1, Kimi K2) in its
    /// absorbed form, bf16: `num_q_heads` query heads on one latent head
    /// whose cached rows hold 576 values (512 latent, 64 RoPE; Q's rows
    /// too), V the first 512 of each row, O `[batch, q_len, num_q_heads,
    /// 512]`. The cache is one tensor, `[batch, max_seq_len, 1, 576]` (or
    /// paged), passed as K and V alike ([`crate::KvCache::latent`]). The
    /// fp8 caches are this shape with `kv_format`
    /// `KvFormat::Fp8PerHead` (a scale per token beside the rows,
    /// [`crate::KvCache::latent_quantized`]) or `KvFormat::Fp8DsMla`
    /// (DeepSeek V3.2's 656-byte rows, `[.., 656]` bytes, scales inside;
    /// [`crate::KvCache::latent`]). The
    /// softmax scale defaults to `1/sqrt(576)`; DeepSeek's models use
    /// `1/sqrt(192)` (their q/k head dim before absorption), set `scale`.
    pub fn latent(batch: u32, num_q_heads: u32, q_len: u32, max_seq_len: u32) -> Self {
        DecodeShape::bf16(batch, num_q_heads, 1, MLA_DIMS.qk, q_len, max_seq_len)
    }

    /// Whether the cache is a latent one (head_dim 576: MLA).
    pub fn is_latent(&self) -> bool {
        self.head_dim == MLA_DIMS.qk
    }

    internal! {
        /// The head dims of the shape's kernels: Q·K's and V's, both
        /// `head_dim`, but a latent cache's ([`decode_attn_abi::MLA_DIMS`]).
        pub fn head_dims(&self) -> HeadDims {
            HeadDims::of_qk(self.head_dim)
        }
    }

    pub fn group_size(&self) -> u32 {
        self.num_q_heads / self.num_kv_heads.max(1)
    }

    pub fn softmax_scale(&self) -> f32 {
        self.scale.unwrap_or(1.0 / (self.head_dim as f32).sqrt())
    }

    /// The name of the kernel variant the shape's parts select:
    /// `standard`, `softcap`, `masked` (a window, sinks, key ranges, or
    /// several), `alibi`, or with a draft tree `masked_tree` or
    /// `softcap_tree`.
    pub fn variant_name(&self) -> &'static str {
        self.kernel_variant().name()
    }
    internal! {
        /// The attention variant the shape's kernels are compiled for
        /// ([`VariantSpec::kernel_variant`]; a shape that
        /// [`DecodeShape::validate`] rejects for ALiBi with a tree reads as
        /// ALiBi's).
        pub fn kernel_variant(&self) -> Variant {
            self.variant.kernel_variant().unwrap_or(Variant::Alibi)
        }
    }

    /// The kernels' `DecodeParams::window`: the window, or
    /// `decode_attn_abi::NO_WINDOW`.
    pub fn window_param(&self) -> u32 {
        self.variant.window_param()
    }

    /// The kernels' query transform (`DecodeParams::score_scale`) and
    /// soft-cap factor (`logit_cap`) ([`VariantSpec::logit_factors`]).
    pub fn logit_factors(&self) -> (f32, f32) {
        self.variant.logit_factors(self.softmax_scale())
    }

    /// Elements of Q (and of O): `batch * q_len * num_q_heads * head_dim`;
    /// `None` on overflow. [`DecodeShape::validate`] rejects shapes where it
    /// overflows or its bytes exceed `isize::MAX`.
    pub fn q_elems_checked(&self) -> Option<u64> {
        (self.batch as u64).checked_mul(self.q_len as u64)?.checked_mul(self.num_q_heads as u64)?.checked_mul(self.head_dim as u64)
    }

    /// [`DecodeShape::q_elems_checked`], saturating at `u64::MAX` (which no
    /// buffer can hold, so a check against it fails rather than wraps).
    pub fn q_elems(&self) -> u64 {
        self.q_elems_checked().unwrap_or(u64::MAX)
    }

    /// The layout's strides in elements; `None` when one overflows u64.
    pub fn kv_strides_checked(&self) -> Option<KvStrides> {
        // A row's elements (`KvFormat::row_len`: head_dim, but 656 bytes
        // for `Fp8DsMla`'s rows).
        let d = self.kv_format.row_len(self.head_dim) as u64;
        let h = self.num_kv_heads as u64;
        let n = self.max_seq_len as u64;
        Some(match self.kv_layout {
            KvLayout::Nhd => KvStrides { batch: n.checked_mul(h)?.checked_mul(d)?, token: h * d, head: d },
            KvLayout::Hnd => KvStrides { batch: h.checked_mul(n)?.checked_mul(d)?, token: d, head: n * d },
            KvLayout::Strided { batch, token, head } => KvStrides { batch, token, head },
            KvLayout::Paged { page_size, order, page_bytes, .. } => {
                let p = page_size as u64;
                let dense = p.checked_mul(h)?.checked_mul(d)?;
                let page = match page_bytes {
                    Some(bytes) => bytes.checked_mul(8)? / self.kv_format.bits() as u64,
                    None => dense,
                };
                match order {
                    PageOrder::TokenMajor => KvStrides { batch: page, token: h * d, head: d },
                    PageOrder::HeadMajor => KvStrides { batch: page, token: d, head: p * d },
                }
            }
        })
    }

    /// Whether the cache is paged.
    pub fn is_paged(&self) -> bool {
        matches!(self.kv_layout, KvLayout::Paged { .. })
    }

    internal! {
        /// How the kernels find rows of this layout.
        pub fn addressing(&self) -> Addressing {
            if self.is_paged() {
                Addressing::Paged
            } else {
                Addressing::Strided
            }
        }
    }

    /// Paged layouts: (log2 of the page size, pages in the pool), as the
    /// kernels' params carry them.
    pub fn page_geometry(&self) -> Option<(u32, u32)> {
        match self.kv_layout {
            KvLayout::Paged { page_size, num_pages, .. } => Some((page_size.trailing_zeros(), num_pages)),
            _ => None,
        }
    }

    /// The offsets of a packed pool's page for this shape's page size, kv
    /// heads and format (`None` for layouts that are not paged): use
    /// `page_bytes` as `KvLayout::Paged::page_bytes` and views of one buffer
    /// at the offsets as K, V and their scales.
    pub fn packed_page(&self) -> Option<PackedPage> {
        let (rows, side) = self.page_part_bytes()?;
        let entry = self.kv_format.scale_bytes(self.head_dim) as u64;
        // Every part starts 16-byte aligned (the side pointers' alignment
        // rule; rows are multiples of 16 bytes already).
        let k_scales = rows.checked_mul(2)?;
        let v_scales = k_scales.checked_add(side.checked_next_multiple_of(16)?)?;
        let page_bytes = v_scales.checked_add(side)?.checked_next_multiple_of(16.max(entry))?;
        Some(PackedPage { page_bytes, v: rows, k_scales, v_scales })
    }

    /// Bytes of one page of one tensor's rows and of its scales (paged
    /// layouts only): what each part of a page holds, whatever the stride.
    pub fn page_part_bytes(&self) -> Option<(u64, u64)> {
        let KvLayout::Paged { page_size, .. } = self.kv_layout else { return None };
        let tokens = page_size as u64 * self.num_kv_heads as u64;
        Some((tokens.checked_mul(self.kv_format.row_bytes(self.head_dim) as u64)?, tokens.checked_mul(self.kv_format.scale_bytes(self.head_dim) as u64)?))
    }

    /// Entries per sequence of a paged cache's block table:
    /// `ceil(max_seq_len / page_size)` (1 for other layouts).
    pub fn pages_per_seq(&self) -> u32 {
        match self.kv_layout {
            KvLayout::Paged { page_size, .. } => self.max_seq_len.div_ceil(page_size.max(1)),
            _ => 1,
        }
    }

    /// [`DecodeShape::kv_strides_checked`] for a validated shape (saturating
    /// otherwise).
    pub fn kv_strides(&self) -> KvStrides {
        self.kv_strides_checked().unwrap_or(KvStrides { batch: u64::MAX, token: u64::MAX, head: u64::MAX })
    }

    /// Elements a K (or V) buffer must hold: one past the last element of the
    /// last row the layout addresses. `None` on overflow or when a dimension
    /// is zero.
    pub fn kv_elems_required(&self) -> Option<u64> {
        let s = self.kv_strides_checked()?;
        if let KvLayout::Paged { page_size, num_pages, .. } = self.kv_layout {
            // The last page's rows end one page of rows past its start.
            let rows = (page_size as u64).checked_mul(self.num_kv_heads as u64)?.checked_mul(self.kv_format.row_len(self.head_dim) as u64)?;
            return (num_pages as u64).checked_sub(1)?.checked_mul(s.batch)?.checked_add(rows).filter(|&n| n > 0);
        }
        let last = (self.batch as u64).checked_sub(1)?.checked_mul(s.batch)?.checked_add(
            (self.max_seq_len as u64).checked_sub(1)?.checked_mul(s.token)?,
        )?;
        let last = last.checked_add((self.num_kv_heads as u64).checked_sub(1)?.checked_mul(s.head)?)?;
        last.checked_add(self.kv_format.row_len(self.head_dim) as u64)
    }

    /// The shape of this cache's 16-bit twin: the rows `quantize_kv`
    /// reads, `dequantize_kv` writes and the CPU quantizer takes
    /// (`quant::quantize_cache`), in the same layout — the shape itself,
    /// but for a format whose rows are not `head_dim` elements
    /// (`Fp8DsMla`'s 656 bytes), whose twin is the shape as a bf16 cache
    /// (`[.., 576]` bf16 rows).
    pub fn plain_shape(&self) -> DecodeShape {
        if self.kv_format.latent_only() {
            DecodeShape { kv_format: KvFormat::Bf16, ..self.clone() }
        } else {
            self.clone()
        }
    }

    /// Bytes a K (or V) buffer must hold (`kv_elems_required` values of the
    /// format's bits; strides count values, so int4 rows start on bytes).
    pub fn kv_bytes_required(&self) -> Option<u64> {
        Some(self.kv_elems_required()?.checked_mul(self.kv_format.bits() as u64)?.div_ceil(8))
    }

    /// Strides of the scales of a quantized cache, in entries:
    /// `[batch, Hkv, padded_len]` whatever the value layout, with
    /// `padded_len = max_seq_len` rounded up to a multiple of 4, so that one
    /// kv head's scales of consecutive tokens are contiguous and 16-byte
    /// aligned in groups of 4 (a block reads only its own head's scales, in
    /// 16-byte copies; interleaved heads would waste most of each 32-byte
    /// sector).
    pub fn scale_strides(&self) -> KvStrides {
        if let KvLayout::Paged { page_size, page_bytes, .. } = self.kv_layout {
            let p = page_size as u64;
            let entry = (self.kv_format.scale_bytes(self.head_dim) as u64).max(1);
            let page = page_bytes.map_or((self.num_kv_heads as u64).saturating_mul(p), |b| b / entry);
            return KvStrides { batch: page, token: 1, head: p };
        }
        let padded = (self.max_seq_len as u64).next_multiple_of(4);
        let h = self.num_kv_heads as u64;
        KvStrides { batch: h.saturating_mul(padded), token: 1, head: padded }
    }

    /// Bytes a side-data buffer (K's or V's scales) must hold; 0 for
    /// unquantized formats, `None` on overflow.
    /// A per-tensor format's scales is its one f32 scale: 4 bytes.
    pub fn scale_bytes_required(&self) -> Option<u64> {
        if self.kv_format.tensor_scaled() {
            return Some(4);
        }
        let entry = self.kv_format.scale_bytes(self.head_dim) as u64;
        if entry == 0 {
            return Some(0);
        }
        let s = self.scale_strides();
        if let KvLayout::Paged { page_size, num_pages, .. } = self.kv_layout {
            let page = (self.num_kv_heads as u64).checked_mul(page_size as u64)?;
            return (num_pages as u64).checked_sub(1)?.checked_mul(s.batch)?.checked_add(page)?.checked_mul(entry);
        }
        (self.batch as u64).checked_mul(s.batch)?.checked_mul(entry)
    }

    /// Bytes of Q (and of O but for a latent cache's, [`DecodeShape::o_bytes`]).
    pub fn q_bytes(&self) -> Option<u64> {
        self.q_elems_checked()?.checked_mul(self.dtype.size_bytes() as u64)
    }

    /// Elements of O: `batch * q_len * num_q_heads * V's head dim` (a
    /// latent cache's 512, else `head_dim`); `None` on overflow.
    pub fn o_elems_checked(&self) -> Option<u64> {
        (self.batch as u64).checked_mul(self.q_len as u64)?.checked_mul(self.num_q_heads as u64)?.checked_mul(self.head_dims().v as u64)
    }

    /// Bytes of O.
    pub fn o_bytes(&self) -> Option<u64> {
        self.o_elems_checked()?.checked_mul(self.dtype.size_bytes() as u64)
    }

    /// Packed query rows per kv head (`group × q_len`); `None` on overflow.
    pub fn rows_per_kv_head(&self) -> Option<u32> {
        self.group_size().checked_mul(self.q_len)
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<()> {
        ensure(self.batch >= 1, "batch", "at least 1", self.batch)?;
        ensure(self.num_kv_heads >= 1, "num_kv_heads", "at least 1", self.num_kv_heads)?;
        ensure(self.num_kv_heads <= 65535, "num_kv_heads", "at most 65535", self.num_kv_heads)?;
        ensure(
            self.num_q_heads >= 1 && self.num_q_heads % self.num_kv_heads == 0,
            "num_q_heads",
            format!("a positive multiple of num_kv_heads ({})", self.num_kv_heads),
            self.num_q_heads,
        )?;
        ensure(HEAD_DIMS.contains(&self.head_dim) || self.is_latent(), "head_dim", format!("one of {HEAD_DIMS:?}, or {} (MLA's latent rows)", MLA_DIMS.qk), self.head_dim)?;
        if self.is_latent() {
            self.validate_latent()?;
        }
        if self.kv_format.latent_only() {
            ensure(self.is_latent(), "head_dim", format!("{} ({} holds MLA's latent rows alone)", MLA_DIMS.qk, self.kv_format.name()), self.head_dim)?;
        }
        ensure(
            self.kv_format.supports_head_dim(self.head_dim),
            "head_dim",
            format!("at least the {} group size ({})", self.kv_format.name(), self.kv_format.group().unwrap_or(0)),
            self.head_dim,
        )?;
        ensure((1..=MAX_Q_LEN).contains(&self.q_len), "q_len", format!("1..={MAX_Q_LEN}"), self.q_len)?;
        ensure(
            self.max_seq_len >= self.q_len && self.max_seq_len <= MAX_SEQ_LEN,
            "max_seq_len",
            format!("q_len..={MAX_SEQ_LEN} (q_len = {})", self.q_len),
            self.max_seq_len,
        )?;
        ensure(
            self.num_q_heads.checked_mul(self.q_len).is_some(),
            "num_q_heads",
            format!("at most {} query heads at q_len {} (num_q_heads × q_len fits in 32 bits)", u32::MAX / self.q_len, self.q_len),
            self.num_q_heads,
        )?;
        ensure(
            self.q_bytes().is_some_and(|b| b <= isize::MAX as u64),
            "num_q_heads",
            "a query tensor (batch × q_len × num_q_heads × head_dim × 2 B) that fits in memory",
            format!("{} x {} x {} x {}", self.batch, self.q_len, self.num_q_heads, self.head_dim),
        )?;
        if let Some(required) = self.kv_format.required_dtype() {
            ensure(
                self.dtype == required,
                "dtype",
                format!("{} (a {} KV cache is computed in its own type)", required.name(), self.kv_format.name()),
                self.dtype.name(),
            )?;
        }
        if let Some(scale) = self.scale {
            // The kernels compute in base 2: scale · log2(e) must be finite too.
            let scale_log2 = scale * std::f32::consts::LOG2_E;
            ensure(
                scale.is_finite() && scale > 0.0 && scale_log2.is_finite(),
                "scale",
                format!("a positive number whose product with log2(e) is finite (at most {:e})", f32::MAX / std::f32::consts::LOG2_E),
                scale,
            )?;
        }
        self.variant.validate(self.q_len, self.softmax_scale())?;
        if let KvLayout::Strided { batch, token, head } = self.kv_layout {
            // Rows must start 16-byte aligned for the kernels' vector loads.
            // Every stride is bounded, also one the shape multiplies by
            // zero (batch 1, one kv head, max_seq_len 1): the kernels'
            // parameters hold each in bytes, `stride × bits / 8`.
            let bits = self.kv_format.bits() as u64;
            let per16 = 128 / bits;
            let most = MAX_STRIDE_BYTES * 8 / bits;
            for (name, stride) in [("kv_layout.batch", batch), ("kv_layout.token", token), ("kv_layout.head", head)] {
                ensure(stride % per16 == 0, name, format!("a multiple of {per16} elements (16-byte aligned rows)"), stride)?;
                ensure(stride <= most, name, format!("at most {most} elements (2^59 bytes)"), stride)?;
            }
        }
        if let KvLayout::Paged { page_size, num_pages, .. } = self.kv_layout {
            ensure(
                page_size.is_power_of_two() && page_size <= MAX_PAGE_SIZE,
                "kv_layout.page_size",
                format!("a power of two from 1 to {MAX_PAGE_SIZE}"),
                page_size,
            )?;
            ensure(num_pages >= 1 && num_pages <= i32::MAX as u32, "kv_layout.num_pages", "1..=2^31-1 (page ids are i32)", num_pages)?;
        }
        if let (KvLayout::Paged { num_pages, page_bytes: Some(bytes), .. }, Some((rows, side))) = (self.kv_layout, self.page_part_bytes()) {
            // Each page's rows (and scales) must fit before the next
            // page, and rows and side entries stay aligned for the kernels'
            // 16-byte copies.
            let entry = self.kv_format.scale_bytes(self.head_dim) as u64;
            let align = 16u64.max(entry);
            let least = rows.max(side);
            ensure(
                bytes % align == 0 && bytes >= least,
                "kv_layout.page_bytes",
                format!("a multiple of {align} bytes of at least {least} (one page of rows{})", if entry > 0 { " or of scales" } else { "" }),
                bytes,
            )?;
            ensure(
                bytes.checked_mul(num_pages as u64).is_some_and(|b| b <= isize::MAX as u64),
                "kv_layout.page_bytes",
                format!("a pool (num_pages × page_bytes, {num_pages} pages) that fits in memory"),
                bytes,
            )?;
        }
        ensure(
            self.scale_bytes_required().is_some_and(|b| b <= isize::MAX as u64),
            "max_seq_len",
            "scales (batch × max_seq_len × num_kv_heads scales) that fits in memory",
            self.max_seq_len,
        )?;
        ensure(
            self.kv_bytes_required().is_some_and(|b| b <= isize::MAX as u64),
            "kv_layout",
            "strides whose extent in bytes fits in memory (below 2^63)",
            "an overflow",
        )?;
        Ok(())
    }

    /// The rules of a latent cache (MLA): one kv head, a format that holds
    /// latent rows (bf16, fp8 per head: a scale per token, fp8-ds-mla:
    /// DeepSeek V3.2's rows), bf16 queries, no variant, no packed pages (V
    /// is K's rows, not a part of each page).
    fn validate_latent(&self) -> Result<()> {
        let d = MLA_DIMS.qk;
        ensure(self.num_kv_heads == 1, "num_kv_heads", format!("1 at head_dim {d} (MLA: every query head reads the one latent head)"), self.num_kv_heads)?;
        ensure(self.kv_format.holds_latent(), "kv_format", format!("bf16, fp8-per-head or fp8-ds-mla at head_dim {d} (the latent caches of the MLA kernels)"), self.kv_format.name())?;
        ensure(self.dtype == Dtype::Bf16, "dtype", format!("bf16 at head_dim {d} (the MLA kernels' queries)"), self.dtype.name())?;
        ensure(self.variant == VariantSpec::STANDARD, "variant", format!("none at head_dim {d} (the MLA kernels are causal among the new tokens alone)"), self.variant_name())?;
        if let KvLayout::Paged { page_bytes, .. } = self.kv_layout {
            ensure(page_bytes.is_none(), "kv_layout.page_bytes", format!("none at head_dim {d} (a latent cache's V is its K rows, not a part of each page)"), format!("{page_bytes:?}"))?;
        }
        Ok(())
    }

    /// Checks host key-range starts against the shape and its (checked)
    /// lengths: one per sequence, each at most `seq_lens[b] − q_len`, so
    /// that every new token sees at least one key.
    pub fn validate_seq_starts(&self, seq_starts: &[u32], seq_lens: &[u32]) -> Result<()> {
        ensure(self.variant.key_ranges, "seq_starts", "none (the shape has variant.key_ranges = false)", "starts")?;
        ensure(
            seq_starts.len() == self.batch as usize,
            "seq_starts",
            format!("{} starts (one per sequence)", self.batch),
            format!("{}", seq_starts.len()),
        )?;
        for (b, (&start, &len)) in seq_starts.iter().zip(seq_lens).enumerate() {
            let last = len.saturating_sub(self.q_len);
            ensure(start <= last, format!("seq_starts[{b}]"), format!("0..=seq_lens[{b}] − q_len (0..={last}: every new token sees a key)"), start)?;
        }
        Ok(())
    }
    /// Checks host lengths and a paged cache's flattened `[batch,
    /// pages_per_seq]` block table against the shape: what
    /// [`DecodeAttention::plan_paged`](crate::DecodeAttention::plan_paged)
    /// checks first. An `Err` for a shape that is not paged.
    pub fn validate_block_table(&self, seq_lens: &[u32], block_table: &[i32]) -> Result<()> {
        let KvLayout::Paged { page_size, num_pages, .. } = self.kv_layout else {
            return Err(crate::Error::invalid("block_table", "none (the shape is not paged)", "a table"));
        };
        self.validate_seq_lens(seq_lens)?;
        check_block_table(block_table, seq_lens, self.pages_per_seq(), page_size, num_pages)
    }


    /// Checks `seq_lens` against the shape: one per sequence, each in
    /// `q_len..=max_seq_len` (a length counts the new tokens).
    pub fn validate_seq_lens(&self, seq_lens: &[u32]) -> Result<()> {
        ensure(
            seq_lens.len() == self.batch as usize,
            "seq_lens",
            format!("{} lengths (one per sequence)", self.batch),
            format!("{}", seq_lens.len()),
        )?;
        for (b, &len) in seq_lens.iter().enumerate() {
            ensure(
                len >= self.q_len && len <= self.max_seq_len,
                format!("seq_lens[{b}]"),
                format!("q_len..=max_seq_len ({}..={})", self.q_len, self.max_seq_len),
                len,
            )?;
        }
        Ok(())
    }
}

/// Checks a block table: `pages_per_seq` entries per sequence, pages of
/// `page_size` tokens (a power of two) of which each sequence's tokens fill
/// no more than `pages_per_seq`, and the entries that hold its tokens ids
/// of the pool.
pub fn check_block_table(block_table: &[i32], seq_lens: &[u32], pages_per_seq: u32, page_size: u32, num_pages: u32) -> Result<()> {
    ensure(page_size.is_power_of_two(), "page_size", "a power of two", page_size)?;
    let width = pages_per_seq as usize;
    let entries = seq_lens.len().checked_mul(width);
    ensure(
        entries == Some(block_table.len()),
        "block_table",
        format!("{} entries ({} sequences × {width} pages per sequence)", entries.map_or("too many".into(), |n| n.to_string()), seq_lens.len()),
        block_table.len(),
    )?;
    for (b, &len) in seq_lens.iter().enumerate() {
        let used = len.div_ceil(page_size) as usize;
        ensure(used <= width, format!("seq_lens[{b}]"), format!("at most {} tokens ({width} pages of {page_size})", width as u64 * page_size as u64), len)?;
        for (i, &id) in block_table[b * width..b * width + used].iter().enumerate() {
            ensure(id >= 0 && (id as u32) < num_pages, format!("block_table[{b}][{i}]"), format!("a page id in 0..{num_pages}"), id)?;
        }
    }
    Ok(())
}
