//! Views of the device buffers a decode step reads and writes: the cache
//! (`KvCache`), one cache tensor being written (`KvMut`), and what a
//! capacity plan's step reads on the device (`StepInputs`). No CUDA calls.

use crate::check::{check_buffer, kv_elem, scale_elem};
use crate::error::{ensure, Error, Result};
use crate::shape::{DecodeShape, KvLayout};
use crate::tensor::{BufferDesc, ElemType, TensorMut, TensorRef};
use crate::variant::VariantBuffers;

/// A KV cache as the kernels read it: K and V values in the shape's layout
/// and, for quantized formats, their per-row scales (`docs/formats.md`);
/// and the inputs of its variant — the layer's sinks and ALiBi slopes, the
/// step's draft tree — device arrays read at each run (a captured CUDA
/// graph sees their current values).
#[derive(Clone, Copy, Debug)]
pub struct KvCache<'a> {
    pub k: TensorRef<'a>,
    pub v: TensorRef<'a>,
    pub k_scales: Option<TensorRef<'a>>,
    pub v_scales: Option<TensorRef<'a>>,
    /// The device arrays of the plan's variant (sinks, ALiBi slopes, a
    /// draft tree): each required when the plan's [`VariantSpec`](crate::VariantSpec) has its
    /// part, rejected otherwise.
    pub variant: VariantBuffers<TensorRef<'a>>,
}

impl<'a> KvCache<'a> {
    /// A bf16 / fp16 cache.
    pub fn plain(k: impl Into<TensorRef<'a>>, v: impl Into<TensorRef<'a>>) -> Self {
        KvCache { k: k.into(), v: v.into(), k_scales: None, v_scales: None, variant: VariantBuffers::NONE }
    }
    /// A latent cache (MLA, [`DecodeShape::latent`]): one tensor read as
    /// K and, its first 512 values, as V — bf16 rows of 576 values, or
    /// (`KvFormat::Fp8DsMla`) DeepSeek V3.2's 656-byte rows, `u8`.
    pub fn latent(rows: impl Into<TensorRef<'a>>) -> Self {
        let rows = rows.into();
        KvCache::plain(rows, rows)
    }
    /// An fp8 latent cache (MLA, `KvFormat::Fp8PerHead` at head_dim 576):
    /// one byte tensor of 576 e4m3 values a row and its f32 scales, one a
    /// token, read as K and V alike.
    pub fn latent_quantized(rows: impl Into<TensorRef<'a>>, scales: impl Into<TensorRef<'a>>) -> Self {
        let (rows, scales) = (rows.into(), scales.into());
        KvCache::quantized(rows, rows, scales, scales)
    }
    /// A quantized cache: its values (`u8` buffers) and scales (int8:
    /// one f32 scale per row; int4: one u32 word per group, an fp16 scale
    /// and an fp16 zero; `docs/formats.md`).
    pub fn quantized(
        k: impl Into<TensorRef<'a>>,
        v: impl Into<TensorRef<'a>>,
        k_scales: impl Into<TensorRef<'a>>,
        v_scales: impl Into<TensorRef<'a>>,
    ) -> Self {
        KvCache { k: k.into(), v: v.into(), k_scales: Some(k_scales.into()), v_scales: Some(v_scales.into()), variant: VariantBuffers::NONE }
    }
    /// An fp8 (per-tensor) cache: its e4m3 values (`u8` buffers) and K's
    /// and V's scales, one f32 each on the device, read at each run (a
    /// captured CUDA graph sees new values; they must be positive and
    /// finite): `x ≈ e4m3 · scale`.
    pub fn fp8(k: impl Into<TensorRef<'a>>, v: impl Into<TensorRef<'a>>, k_scale: impl Into<TensorRef<'a>>, v_scale: impl Into<TensorRef<'a>>) -> Self {
        Self::quantized(k, v, k_scale, v_scale)
    }
    /// The cache with an fp8 (per-tensor) cache's scales, one f32 each on
    /// the device: what a packed pool ([`KvCache::packed`]) lacks.
    pub fn with_fp8_scales(self, k_scale: impl Into<TensorRef<'a>>, v_scale: impl Into<TensorRef<'a>>) -> Self {
        KvCache { k_scales: Some(k_scale.into()), v_scales: Some(v_scale.into()), ..self }
    }
    /// The cache with its variant's device arrays.
    pub fn with_variant(self, variant: VariantBuffers<TensorRef<'a>>) -> Self {
        KvCache { variant, ..self }
    }
    /// The cache with the layer's sink logits (`[num_q_heads]` f32).
    pub fn with_sinks(self, sinks: impl Into<TensorRef<'a>>) -> Self {
        self.with_variant(VariantBuffers { sinks: Some(sinks.into()), ..self.variant })
    }
    /// The cache with the layer's ALiBi slopes (`[num_q_heads]` f32).
    pub fn with_alibi_slopes(self, slopes: impl Into<TensorRef<'a>>) -> Self {
        self.with_variant(VariantBuffers { alibi_slopes: Some(slopes.into()), ..self.variant })
    }
    /// The cache with the step's draft tree ([`VariantSpec::tree`](crate::VariantSpec::tree)):
    /// `[batch, q_len]` u8 ancestor masks and `[batch, q_len]` u32
    /// positions.
    pub fn with_tree(self, masks: impl Into<TensorRef<'a>>, positions: impl Into<TensorRef<'a>>) -> Self {
        self.with_variant(VariantBuffers { tree_masks: Some(masks.into()), tree_positions: Some(positions.into()), ..self.variant })
    }
    /// The cache in one packed pool (`shape`: `KvLayout::Paged` with
    /// `page_bytes` of [`DecodeShape::packed_page`]): views of `pool`'s bytes
    /// at the page offsets, typed as the format's values and scales, so
    /// no `from_raw` is needed. Their lengths are checked when the cache is
    /// run, like any buffers'. An fp8 pool holds values only: add its
    /// scales with [`KvCache::with_fp8_scales`].
    pub fn packed(shape: &DecodeShape, pool: impl Into<TensorRef<'a>>) -> Result<Self> {
        let pool = pool.into();
        let part = |(offset, elem): (u64, ElemType)| pool.tail(offset, elem).ok_or_else(|| pool_too_short(offset, &pool.desc()));
        let (k, k_scales) = packed_parts(shape, KvTensor::K)?;
        let (v, v_scales) = packed_parts(shape, KvTensor::V)?;
        Ok(KvCache { k: part(k)?, v: part(v)?, k_scales: k_scales.map(part).transpose()?, v_scales: v_scales.map(part).transpose()?, variant: VariantBuffers::NONE })
    }
}

/// One cache tensor (K or V) being written, in any format: its values and,
/// for quantized formats, its scales (int4: scales and zeros).
#[derive(Debug)]
pub struct KvMut<'a> {
    pub data: TensorMut<'a>,
    pub scales: Option<TensorMut<'a>>,
}

impl<'a> KvMut<'a> {
    /// A cache tensor without scales beside its rows: 16-bit, or
    /// `KvFormat::Fp8DsMla`'s rows (`u8`, scales inside).
    pub fn plain(data: impl Into<TensorMut<'a>>) -> Self {
        KvMut { data: data.into(), scales: None }
    }
    /// A quantized cache tensor. For fp8 (per tensor), `scales` is the
    /// tensor's scale, one f32 on the device, which quantizing reads.
    pub fn quantized(data: impl Into<TensorMut<'a>>, scales: impl Into<TensorMut<'a>>) -> Self {
        KvMut { data: data.into(), scales: Some(scales.into()) }
    }
    /// The tensor with its fp8 scale (one f32 on the device): what a packed
    /// pool's fp8 tensor ([`KvMut::packed`]) lacks.
    pub fn with_fp8_scale(self, scale: impl Into<TensorMut<'a>>) -> Self {
        KvMut { scales: Some(scale.into()), ..self }
    }
}

/// Which tensor of a packed pool a write goes to ([`KvMut::packed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvTensor {
    K,
    V,
}

impl<'a> KvMut<'a> {
    /// K's or V's values and scales in one packed pool (`shape`:
    /// `KvLayout::Paged` with `page_bytes` of [`DecodeShape::packed_page`]),
    /// as `append_kv` / `quantize_kv` write them: views of `pool`'s bytes at
    /// the page offsets (the two interleave; each page's parts are apart).
    pub fn packed(shape: &DecodeShape, pool: impl Into<TensorMut<'a>>, tensor: KvTensor) -> Result<Self> {
        let pool = pool.into();
        let part = |(offset, elem): (u64, ElemType)| pool.tail(offset, elem).ok_or_else(|| pool_too_short(offset, &pool.desc()));
        let (data, side) = packed_parts(shape, tensor)?;
        Ok(KvMut { data: part(data)?, scales: side.map(part).transpose()? })
    }
}

/// Where tensor `tensor`'s values and scales start in a page of the
/// packed pool `shape` describes, with their element types; an error
/// unless `shape` is a packed layout (`page_bytes` of `packed_page`).
pub(crate) fn packed_parts(shape: &DecodeShape, tensor: KvTensor) -> Result<((u64, ElemType), Option<(u64, ElemType)>)> {
    let page = shape.packed_page().ok_or_else(|| Error::invalid("kv_layout", "a paged layout (KvLayout::Paged) for a packed pool", "another layout"))?;
    let KvLayout::Paged { page_bytes, .. } = shape.kv_layout else { unreachable!("packed_page is Some only for paged layouts") };
    ensure(
        page_bytes == Some(page.page_bytes),
        "kv_layout.page_bytes",
        format!("Some({}) (DecodeShape::packed_page) for a packed pool", page.page_bytes),
        format!("{page_bytes:?}"),
    )?;
    let (data, side) = match tensor {
        KvTensor::K => (0, page.k_scales),
        KvTensor::V => (page.v, page.v_scales),
    };
    // (A per-tensor format's scales are not in the pool.)
    let side = scale_elem(shape.kv_format).filter(|_| !shape.kv_format.tensor_scaled()).map(|e| (side, e));
    Ok(((data, kv_elem(shape.kv_format)), side))
}

pub(crate) fn pool_too_short(offset: u64, pool: &BufferDesc) -> Error {
    Error::invalid("pool", format!("a buffer reaching past byte {offset} (the page's last part)"), format!("{} bytes", pool.len * pool.elem.size_bytes()))
}

/// What a capacity plan's run reads from device memory each step (see
/// `PlanMode::Capacity`): the current lengths, new tokens included,
/// for paged caches the block table, and for shapes with key ranges each
/// sequence's first key. Lengths above the capacity are read as the
/// capacity, page ids outside the pool as its last page and starts past
/// `L − q_len` as `L − q_len`, so no device value makes a kernel touch
/// memory outside its buffers.
#[derive(Clone, Copy, Debug)]
pub struct StepInputs<'a> {
    /// `[batch]` u32.
    pub seq_lens: TensorRef<'a>,
    /// Paged caches: `[batch, pages_per_seq]` i32 page ids (row-major).
    pub block_table: Option<TensorRef<'a>>,
    /// Shapes with `key_ranges`: `[batch]` u32, sequence b's first key
    /// (keys before it are not seen). Only attention runs read it.
    pub seq_starts: Option<TensorRef<'a>>,
}

impl<'a> StepInputs<'a> {
    /// Lengths only (contiguous caches).
    pub fn lengths(seq_lens: impl Into<TensorRef<'a>>) -> Self {
        StepInputs { seq_lens: seq_lens.into(), block_table: None, seq_starts: None }
    }
    /// Lengths and a block table (paged caches).
    pub fn paged(seq_lens: impl Into<TensorRef<'a>>, block_table: impl Into<TensorRef<'a>>) -> Self {
        StepInputs { seq_lens: seq_lens.into(), block_table: Some(block_table.into()), seq_starts: None }
    }
    /// The step with each sequence's first key (`[batch]` u32 on the
    /// device; shapes with `key_ranges`).
    pub fn with_seq_starts(self, seq_starts: impl Into<TensorRef<'a>>) -> Self {
        StepInputs { seq_starts: Some(seq_starts.into()), ..self }
    }

    /// Checks the starts an attention step reads: `batch` of them exactly
    /// when the shape has key ranges.
    pub fn check_starts_for(&self, shape: &DecodeShape) -> Result<()> {
        match (shape.variant.key_ranges, &self.seq_starts) {
            (true, Some(s)) => check_buffer("seq_starts", &s.desc(), ElemType::U32, shape.batch as u64 * 4),
            (true, None) => Err(Error::invalid("seq_starts", "a [batch] u32 device array of first keys (the shape has key_ranges)", "none")),
            (false, Some(_)) => Err(Error::invalid("seq_starts", "none (the shape has key_ranges = false)", "starts")),
            (false, None) => Ok(()),
        }
    }

    /// Checks the step's buffers against a shape: `batch` lengths, and a
    /// table of `batch × pages_per_seq` ids exactly when the shape is paged
    /// (what every entry point taking them checks first).
    pub fn check_for(&self, shape: &DecodeShape) -> Result<()> {
        check_buffer("seq_lens", &self.seq_lens.desc(), ElemType::U32, shape.batch as u64 * 4)?;
        match (shape.is_paged(), &self.block_table) {
            (true, Some(t)) => {
                // (Saturating: a table no buffer can hold is too short, not a wrapped small size.)
                let bytes = (shape.batch as u64).saturating_mul(shape.pages_per_seq() as u64).saturating_mul(4);
                check_buffer("block_table", &t.desc(), ElemType::I32, bytes)
            }
            (true, None) => Err(Error::invalid("block_table", "a [batch, pages_per_seq] i32 table for the paged layout", "none")),
            (false, Some(_)) => Err(Error::invalid("block_table", "none (the cache is not paged)", "a table")),
            (false, None) => Ok(()),
        }
    }
}
