//! Validation of the buffers handed to `run` against a plan. Pure: takes
//! addresses and lengths, so every rejection is tested without a GPU.

use decode_attn_abi::{Dtype, KvFormat, QuantDirection};

use crate::error::{ensure, Error, Result};
use crate::plan::Plan;
use crate::shape::{DecodeShape, KvLayout};
use crate::tensor::{BufferDesc, ElemType};
use crate::variant::{VariantBuffers, VariantCount};

/// The buffers of one `run` call.
#[derive(Clone, Copy, Debug)]
pub struct RunBuffers {
    pub q: BufferDesc,
    pub k: BufferDesc,
    pub v: BufferDesc,
    pub o: BufferDesc,
    /// The workspace: `len` bytes at `addr` (`ElemType::U8`), which the
    /// kernels write (split partials, merge counters) and read.
    pub workspace: BufferDesc,
    /// Scales (scales) of K and V: required for quantized formats,
    /// rejected for plain ones.
    pub k_scales: Option<BufferDesc>,
    pub v_scales: Option<BufferDesc>,
    /// A capacity plan's device lengths and (paged) block table, which the
    /// kernels read while they write `o` and the workspace.
    pub seq_lens: Option<BufferDesc>,
    pub block_table: Option<BufferDesc>,
    /// A capacity plan's device first keys (shapes with key ranges).
    pub seq_starts: Option<BufferDesc>,
    /// The variant's arrays ([`check_variant_buffers`]).
    pub variant: VariantBuffers<BufferDesc>,
}

pub fn dtype_elem(d: Dtype) -> ElemType {
    match d {
        Dtype::Bf16 => ElemType::Bf16,
        Dtype::F16 => ElemType::F16,
    }
}

/// Element type a cache of this format is stored in.
pub fn kv_elem(f: KvFormat) -> ElemType {
    match f {
        KvFormat::Bf16 => ElemType::Bf16,
        KvFormat::F16 => ElemType::F16,
        KvFormat::Int8 | KvFormat::Fp8PerHead | KvFormat::Fp8 | KvFormat::Fp8DsMla | KvFormat::Int4G32 | KvFormat::Int4G64 | KvFormat::Int4G128 => ElemType::U8,
    }
}

/// Element type of a quantized format's scales (`None`: no scales).
/// int8, fp8 per head: f32 scales; fp8: one f32 scale (per tensor); int4:
/// (fp16 scale, fp16 zero) pairs as u32 words; fp8-ds-mla none beside its
/// rows (they hold their scales).
pub fn scale_elem(f: KvFormat) -> Option<ElemType> {
    match f {
        KvFormat::Bf16 | KvFormat::F16 | KvFormat::Fp8DsMla => None,
        KvFormat::Int8 | KvFormat::Fp8PerHead | KvFormat::Fp8 => Some(ElemType::F32),
        KvFormat::Int4G32 | KvFormat::Int4G64 | KvFormat::Int4G128 => Some(ElemType::U32),
    }
}

/// First byte past the buffer, or `None` if its extent wraps past 2^64.
fn end_of(b: &BufferDesc) -> Option<u64> {
    (b.len as u64).checked_mul(b.elem.size_bytes() as u64)?.checked_add(b.addr)
}

pub(crate) fn check_buffer(name: &str, b: &BufferDesc, elem: ElemType, min_bytes: u64) -> Result<()> {
    ensure(b.elem == elem, name, format!("{} elements", elem.name()), format!("{} elements", b.elem.name()))?;
    ensure(b.addr != 0, name, "a non-null device pointer", "null")?;
    ensure(b.addr % 16 == 0, name, "a 16-byte aligned device pointer", format!("{:#x}", b.addr))?;
    let bytes = (b.len as u64).checked_mul(b.elem.size_bytes() as u64);
    ensure(end_of(b).is_some(), name, "an address range that does not wrap past 2^64", format!("{:#x} + {} elements", b.addr, b.len))?;
    ensure(
        bytes.is_some_and(|n| n >= min_bytes),
        name,
        format!("at least {min_bytes} bytes ({} elements)", min_bytes / elem.size_bytes() as u64),
        format!("{} elements", b.len),
    )?;
    Ok(())
}

/// Checks every buffer of a `run` call against the plan: element types,
/// alignment, sizes in bytes, no wrap-around, and the written buffers (`o`,
/// the workspace) disjoint from everything the kernels read and from each
/// other.
pub fn check_buffers(plan: &Plan, bufs: &RunBuffers) -> Result<()> {
    let shape = &plan.shape;
    let qo_elem = dtype_elem(shape.dtype);
    // `plan()` validated the shape; a failed size computation still rejects
    // (u64::MAX bytes fit no buffer) rather than wraps.
    let q_bytes = shape.q_bytes().unwrap_or(u64::MAX);
    check_buffer("q", &bufs.q, qo_elem, q_bytes)?;
    check_buffer("o", &bufs.o, qo_elem, shape.o_bytes().unwrap_or(u64::MAX))?;
    let kv_bytes = shape.kv_bytes_required().unwrap_or(u64::MAX);
    let kv = kv_elem(shape.kv_format);
    check_buffer("k", &bufs.k, kv, kv_bytes)?;
    check_buffer("v", &bufs.v, kv, kv_bytes)?;
    if shape.is_latent() {
        // The MLA kernels read V from K's rows: another V would be ignored.
        ensure(bufs.v.addr == bufs.k.addr, "v", "k's own buffer (a latent cache is one tensor: KvCache::latent)", format!("{:#x}, k at {:#x}", bufs.v.addr, bufs.k.addr))?;
    }
    let mut inputs = vec![("q", bufs.q), ("k", bufs.k), ("v", bufs.v)];
    match scale_elem(shape.kv_format) {
        Some(elem) => {
            let scale_bytes = shape.scale_bytes_required().unwrap_or(u64::MAX);
            for (name, side) in [("k_scales", bufs.k_scales), ("v_scales", bufs.v_scales)] {
                let side = side.ok_or_else(|| Error::invalid(name, scales_wanted(shape.kv_format, elem), "none"))?;
                if shape.kv_format.tensor_scaled() {
                    check_tensor_scale(name, &side)?;
                } else {
                    check_buffer(name, &side, elem, scale_bytes)?;
                }
                if shape.is_latent() && name == "v_scales" {
                    let k_scales = bufs.k_scales.map_or(0, |s| s.addr);
                    ensure(side.addr == k_scales, name, "k_scales' own buffer (a latent cache's V is its K rows)", format!("{:#x}, k_scales at {k_scales:#x}", side.addr))?;
                }
                inputs.push((name, side));
            }
        }
        None => {
            for (name, side) in [("k_scales", bufs.k_scales), ("v_scales", bufs.v_scales)] {
                ensure(side.is_none(), name, format!("none (a {} cache has no scales)", shape.kv_format.name()), "a buffer")?;
            }
        }
    }
    inputs.extend(check_variant_buffers(shape, bufs.variant)?.into_iter().flatten());
    let ws = &bufs.workspace;
    ensure(ws.elem == ElemType::U8, "workspace", "a byte buffer", format!("{} elements", ws.elem.name()))?;
    ensure(
        ws.len as u64 >= plan.workspace_bytes() as u64,
        "workspace",
        format!("at least {} bytes (Plan::workspace_bytes)", plan.workspace_bytes()),
        ws.len,
    )?;
    ensure(ws.addr != 0 && ws.addr % 256 == 0, "workspace", "a non-null 256-byte aligned device pointer", format!("{:#x}", ws.addr))?;
    let ws_end = end_of(ws).ok_or_else(|| Error::invalid("workspace", "an address range that does not wrap past 2^64", format!("{:#x} + {} bytes", ws.addr, ws.len)))?;
    for (name, step) in [("seq_lens", bufs.seq_lens), ("block_table", bufs.block_table), ("seq_starts", bufs.seq_starts)] {
        if let Some(b) = step {
            ensure(end_of(&b).is_some(), name, "an address range that does not wrap past 2^64", format!("{:#x} + {} elements", b.addr, b.len))?;
            inputs.push((name, b));
        }
    }
    // The ranges the kernels write (checked above not to wrap): O, and the
    // workspace's bytes the plan uses; neither may overlap what they read,
    // nor each other.
    let o_end = bufs.o.addr + shape.o_bytes().unwrap_or(u64::MAX);
    let used_ws_end = ws.addr.saturating_add(plan.workspace_bytes() as u64).min(ws_end);
    let disjoint = |a: (u64, u64), b: (u64, u64)| a.1 <= b.0 || b.1 <= a.0;
    for (name, other) in &inputs {
        let range = (other.addr, end_of(other).unwrap_or(u64::MAX));
        ensure(disjoint((bufs.o.addr, o_end), range), "o", format!("a buffer that does not overlap `{name}`"), "an overlapping one")?;
        ensure(disjoint((ws.addr, used_ws_end), range), "workspace", format!("a buffer that does not overlap `{name}`"), "an overlapping one")?;
    }
    ensure(disjoint((bufs.o.addr, o_end), (ws.addr, used_ws_end)), "workspace", "a buffer that does not overlap `o`", "an overlapping one")?;
    Ok(())
}

/// Checks a variant's arrays against a (validated) shape: each present
/// exactly when the shape's [`VariantSpec`](crate::VariantSpec) has its
/// part — sinks and ALiBi slopes `num_q_heads` f32s, a tree's masks and
/// positions `batch × q_len` u8s and u32s — aligned and not wrapping.
/// Returns the given ones by name, for the overlap checks. The one check
/// of these buffers, whichever binding calls it.
pub fn check_variant_buffers(shape: &DecodeShape, bufs: VariantBuffers<BufferDesc>) -> Result<[Option<(&'static str, BufferDesc)>; 4]> {
    let mut given = [None; 4];
    for (slot, a) in given.iter_mut().zip(bufs.arrays(&shape.variant)) {
        let n = match a.count {
            VariantCount::PerQueryHead => shape.num_q_heads as u64,
            VariantCount::PerRow => shape.batch as u64 * shape.q_len as u64,
        };
        match (a.wanted, a.buf) {
            (true, Some(b)) => {
                check_values(a.name, &b, a.elem, n, &format!("at least {n} {}", a.what))?;
                *slot = Some((a.name, b));
            }
            (true, None) => return Err(Error::invalid(a.name, format!("{n} {} (the plan's shape has variant.{})", a.what, a.part), "none")),
            (false, Some(_)) => return Err(Error::invalid(a.name, format!("none (the plan was made without variant.{})", a.part), "a buffer")),
            (false, None) => {}
        }
    }
    Ok(given)
}

/// What a quantized format's scales buffer must be, for errors.
fn scales_wanted(f: KvFormat, elem: ElemType) -> String {
    if f.tensor_scaled() {
        format!("the {} cache's scale (one f32, a device scalar: KvCache::with_fp8_scales)", f.name())
    } else {
        format!("the {} cache's scales ({})", f.name(), elem.name())
    }
}

/// A per-tensor scale: one f32 at a non-null, 4-byte aligned address.
fn check_tensor_scale(name: &str, b: &BufferDesc) -> Result<()> {
    check_f32_values(name, b, 1, "one f32 scale (a device scalar)")
}

/// At least `n` f32 values (`wanted` says what they are) at a non-null,
/// 4-byte aligned address whose range does not wrap.
fn check_f32_values(name: &str, b: &BufferDesc, n: u64, wanted: &str) -> Result<()> {
    check_values(name, b, ElemType::F32, n, wanted)
}

/// At least `n` values of `elem` (`wanted` says what they are) at a
/// non-null address aligned to the element, whose range does not wrap.
fn check_values(name: &str, b: &BufferDesc, elem: ElemType, n: u64, wanted: &str) -> Result<()> {
    let align = elem.size_bytes() as u64;
    ensure(b.elem == elem, name, format!("{} elements", elem.name()), format!("{} elements", b.elem.name()))?;
    ensure(b.addr != 0 && b.addr % align == 0, name, format!("a non-null {align}-byte aligned device pointer"), format!("{:#x}", b.addr))?;
    ensure(end_of(b).is_some(), name, "an address range that does not wrap past 2^64", format!("{:#x} + {} elements", b.addr, b.len))?;
    ensure(b.len as u64 >= n, name, wanted, format!("{} elements", b.len))
}

/// The buffers of one cache store / quantize / dequantize launch
/// (`DecodeAttention::{quantize_kv, append_kv, dequantize_kv}`).
#[derive(Clone, Copy, Debug)]
pub struct CacheJob {
    /// Store (16-bit rows → the cache, quantized or not) or dequantize (the reverse).
    pub direction: QuantDirection,
    /// The 16-bit rows (`new_rows` of an append, else `plain`).
    pub plain: BufferDesc,
    pub plain_name: &'static str,
    /// Elements `plain` must hold.
    pub plain_elems: u64,
    /// The cache's values and scales.
    pub data: BufferDesc,
    pub scales: Option<BufferDesc>,
    /// The device lengths and (paged) block table.
    pub seq_lens: BufferDesc,
    pub block_table: Option<BufferDesc>,
}

/// Checks an `append_rows` call's rows and strides against a (validated)
/// shape: 1..=`max_seq_len` rows, strides in multiples of 8 values (16-byte
/// aligned rows); the elements the rows' view spans (one past its last,
/// saturating: a view no buffer can hold then fails the size check).
pub fn append_rows_elems(shape: &DecodeShape, strides: crate::shape::KvStrides, rows: u32) -> Result<u64> {
    shape.validate()?;
    ensure((1..=shape.max_seq_len).contains(&rows), "rows", format!("1..=max_seq_len ({})", shape.max_seq_len), rows)?;
    for (name, stride) in [("strides.batch", strides.batch), ("strides.token", strides.token), ("strides.head", strides.head)] {
        ensure(stride % 8 == 0, name, "a multiple of 8 values (16-byte aligned rows)", stride)?;
    }
    let (d, h, b) = (shape.head_dim as u64, shape.num_kv_heads as u64, shape.batch as u64);
    let last = [(b - 1, strides.batch), ((rows - 1) as u64, strides.token), (h - 1, strides.head)]
        .iter()
        .try_fold(d, |acc, &(n, s)| n.checked_mul(s).and_then(|x| acc.checked_add(x)));
    Ok(last.unwrap_or(u64::MAX))
}

/// Checks a cache job's buffers against the shape: element types, sizes,
/// alignment, and the written buffers disjoint from every other (a packed
/// pool's values and scales may interleave, each page's parts apart).
pub fn check_cache_job(shape: &DecodeShape, job: &CacheJob) -> Result<()> {
    let plain_bytes = job.plain_elems.checked_mul(2).unwrap_or(u64::MAX);
    check_buffer(job.plain_name, &job.plain, dtype_elem(shape.dtype), plain_bytes)?;
    check_buffer("data", &job.data, kv_elem(shape.kv_format), shape.kv_bytes_required().unwrap_or(u64::MAX))?;
    // (`KvMut::scales`, `dequantize_kv`'s `scales`.)
    let scales_name = "scales";
    let tensor_scaled = shape.kv_format.tensor_scaled();
    match (scale_elem(shape.kv_format), &job.scales) {
        (Some(_), Some(side)) if tensor_scaled => check_tensor_scale(scales_name, side)?,
        (Some(elem), Some(side)) => check_buffer(scales_name, side, elem, shape.scale_bytes_required().unwrap_or(u64::MAX))?,
        (Some(elem), None) => return Err(Error::invalid(scales_name, scales_wanted(shape.kv_format, elem), "none")),
        (None, Some(_)) => return Err(Error::invalid(scales_name, format!("none (a {} cache has no scales)", shape.kv_format.name()), "a buffer")),
        (None, None) => {}
    }
    let side = job.scales.unwrap_or(BufferDesc { addr: 0, len: 0, elem: ElemType::U32 });
    let mut read = vec![("seq_lens", job.seq_lens)];
    if let Some(t) = job.block_table {
        read.push(("block_table", t));
    }
    let (written, others): (Vec<_>, Vec<_>) = if job.direction == QuantDirection::Store {
        read.push((job.plain_name, job.plain));
        if tensor_scaled {
            // The tensor's scale is read, not written.
            read.push((scales_name, side));
            (vec![("data", job.data)], read)
        } else {
            (vec![("data", job.data), (scales_name, side)], read)
        }
    } else {
        read.extend([("data", job.data), (scales_name, side)]);
        (vec![(job.plain_name, job.plain)], read)
    };
    let end = |b: &BufferDesc| end_of(b).unwrap_or(u64::MAX);
    // A packed pool's values and scales share pages: they may
    // interleave, as long as in every page `a`'s part (a page of rows)
    // ends before `b`'s (a page of scales) starts, and `b`'s ends
    // within the page.
    let packed = match (shape.kv_layout, shape.page_part_bytes()) {
        (KvLayout::Paged { page_bytes: Some(page), .. }, Some((rows, side))) => Some((rows, side, page)),
        _ => None,
    };
    let interleaved = |a: &BufferDesc, b: &BufferDesc| {
        packed.is_some_and(|(rows, side, page)| {
            let d = (b.addr as i128 - a.addr as i128).rem_euclid(page as i128) as u64;
            d >= rows && d + side <= page
        })
    };
    for (i, (_, w)) in written.iter().enumerate() {
        // Only two written buffers (values, then scales) may interleave.
        let later = written[i + 1..].iter().map(|o| (o, true));
        for ((n, other), may_interleave) in others.iter().map(|o| (o, false)).chain(later) {
            if other.len == 0 {
                continue;
            }
            ensure(
                end(w) <= other.addr || end(other) <= w.addr || (may_interleave && interleaved(w, other)),
                *n,
                "a buffer that does not overlap the one written (in a packed pool: each page's parts apart)",
                "an overlapping one",
            )?;
        }
    }
    Ok(())
}
