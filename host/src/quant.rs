//! int8 per-head quantization of KV caches: the CPU quantizer, whose
//! arithmetic the GPU kernels (`kernels-gpu/src/quant.rs`) repeat operation
//! for operation in IEEE f32 so both give the same bits, and the GPU entry
//! points (whole cache, append a decode step's tokens, dequantize).
//!
//! Per (sequence, token, kv head) row of D values: `amax = max |x|`,
//! `inv = 127 / amax`, `q = round_ties_even(x · inv)`, stored scale
//! `amax / 127`; an all-zero row stores q = 0. Dequantized: `q · scale`.
//! Cache bytes hold `q + 128` (offset binary, 1..=255), which the kernels
//! turn into fp16 with one `prmt` and one subtraction.

use cust::prelude::Stream;
use decode_attn_abi::{quant_kernel_name, KvFormat, QuantDirection, QuantKernelId, QuantParams, QUANT_WARPS};

use crate::check::{check_buffer, dtype_elem, kv_elem, side_elem, BufferDesc};
use crate::error::{ensure, Error, Result};
use crate::run::{DecodeAttention, RawStream, StepInputs};
use crate::shape::DecodeShape;
use crate::tensor::{ElemType, TensorMut, TensorRef};

/// Quantizes one row; returns its scale.
pub fn quantize_int8_row(x: &[f32], q: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let inv = if amax > 0.0 { 127.0 / amax } else { 0.0 };
    for (o, &v) in q.iter_mut().zip(x) {
        *o = ((v * inv).round_ties_even() as i32).clamp(-127, 127) as i8;
    }
    amax / 127.0
}

/// The values a quantized row stands for.
pub fn dequantize_int8_row(q: &[i8], scale: f32, out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(q) {
        *o = v as f32 * scale;
    }
}

/// Slot of dim `p` (0..8) of a 32-bit word: nibbles are stored in the order
/// `p0 p2 p4 p6 p1 p3 p5 p7` (the kernels' magic-number extraction order).
pub fn int4_slot(p: usize) -> usize {
    if p % 2 == 0 {
        p / 2
    } else {
        4 + p / 2
    }
}

/// Quantizes one row group-wise to int4: `bytes` gets D/2 bytes (nibbles in
/// `int4_slot` order), `side` one word per group: fp16 scale (low half) and
/// fp16 zero (high half). Per group: `lo = min`, `scale = f16((max - lo) / 15)`,
/// `zero = f16(lo)`, `q = clamp(round_ties_even((x - zero) / scale), 0, 15)`
/// with the rounded scale and zero (q = 0 where the scale is 0).
pub fn quantize_int4_row(x: &[f32], group: usize, bytes: &mut [u8], side: &mut [u32]) {
    for (gi, (xs, sz)) in x.chunks(group).zip(side.iter_mut()).enumerate() {
        let lo = xs.iter().copied().fold(f32::INFINITY, f32::min);
        let hi = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let (s16, z16) = (half::f16::from_f32((hi - lo) / 15.0), half::f16::from_f32(lo));
        *sz = s16.to_bits() as u32 | ((z16.to_bits() as u32) << 16);
        let (s, z) = (s16.to_f32(), z16.to_f32());
        for (i, &v) in xs.iter().enumerate() {
            let q = if s > 0.0 { (((v - z) / s).round_ties_even() as i32).clamp(0, 15) as u8 } else { 0 };
            let dim = gi * group + i;
            let (word, slot) = (dim / 8, int4_slot(dim % 8));
            let byte = &mut bytes[word * 4 + slot / 2];
            *byte = if slot % 2 == 0 { (*byte & 0xF0) | q } else { (*byte & 0x0F) | (q << 4) };
        }
    }
}

/// The values an int4 row stands for: `q · scale + zero` rounded once to
/// fp16 (the fp16 fma the kernels compute; `docs/formats.md`).
pub fn dequantize_int4_row(bytes: &[u8], side: &[u32], group: usize, out: &mut [f32]) {
    for (dim, o) in out.iter_mut().enumerate() {
        let slot = int4_slot(dim % 8);
        let byte = bytes[dim / 8 * 4 + slot / 2];
        let q = if slot % 2 == 0 { byte & 0xF } else { byte >> 4 };
        let sz = side[dim / group];
        let (s, z) = (half::f16::from_bits(sz as u16).to_f64(), half::f16::from_bits((sz >> 16) as u16).to_f64());
        // One fp16 fma, as the kernels compute it: q·s + z in f64 (exact
        // but for extreme scale / zero ratios), then one rounding to fp16.
        *o = half::f16::from_f64(q as f64 * s + z).to_f32();
    }
}

/// Quantizes the rows `t < seq_lens[b]` of a cache held as f32 values in
/// the shape's layout, for any quantized format: value bytes in the cache's
/// byte layout (other bytes 0) and side data as 32-bit words in
/// `shape.side_strides()` order (int8: f32 bits of the scale; int4: one word
/// per group; entries of missing rows are NaN bits, `0x7FC0_0000`).
pub fn quantize_cache(shape: &DecodeShape, seq_lens: &[u32], plain: &[f32]) -> Result<(Vec<u8>, Vec<u32>)> {
    match shape.kv_format {
        KvFormat::Int8 => {
            let (d, s) = quantize_cache_int8(shape, seq_lens, plain)?;
            Ok((d, s.into_iter().map(f32::to_bits).collect()))
        }
        f => {
            let group = f.group().ok_or_else(|| Error::invalid("kv_format", "a quantized format", f.name()))? as usize;
            check_quantized(shape, seq_lens, plain.len())?;
            let d = shape.head_dim as usize;
            let words = d / group;
            let mut data = vec![0u8; shape.kv_bytes_required().unwrap_or(0) as usize];
            let mut side = vec![f32::NAN.to_bits(); (shape.side_bytes_required().unwrap_or(0) / 4) as usize];
            let (out, sides) = (Shared::new(&mut data), Shared::new(&mut side));
            for_each_row(shape, seq_lens, |at, si| {
                // SAFETY: each row and its side words go to one thread.
                let (bytes, sz) = unsafe { (out.slice(at / 2, d / 2), sides.slice(si * words, words)) };
                quantize_int4_row(&plain[at..at + d], group, bytes, sz);
            });
            Ok((data, side))
        }
    }
}

/// The f32 values of a quantized cache's rows `t < seq_lens[b]`, in the
/// shape's layout (other elements NaN), for any quantized format.
pub fn dequantize_cache(shape: &DecodeShape, seq_lens: &[u32], data: &[u8], side: &[u32]) -> Result<Vec<f32>> {
    match shape.kv_format {
        KvFormat::Int8 => {
            let scales: Vec<f32> = side.iter().map(|&w| f32::from_bits(w)).collect();
            dequantize_cache_int8(shape, seq_lens, data, &scales)
        }
        f => {
            let group = f.group().ok_or_else(|| Error::invalid("kv_format", "a quantized format", f.name()))? as usize;
            check_quantized(shape, seq_lens, data.len() * 2)?;
            let d = shape.head_dim as usize;
            let words = d / group;
            ensure((side.len() as u64) * 4 >= shape.side_bytes_required().unwrap_or(u64::MAX), "side", "the side data of every row", side.len())?;
            let mut out = vec![f32::NAN; shape.kv_elems_required().unwrap_or(0) as usize];
            let shared = Shared::new(&mut out);
            for_each_row(shape, seq_lens, |at, si| {
                // SAFETY: each row goes to one thread.
                let row = unsafe { shared.slice(at, d) };
                dequantize_int4_row(&data[at / 2..at / 2 + d / 2], &side[si * words..][..words], group, row);
            });
            Ok(out)
        }
    }
}

fn check_quantized(shape: &DecodeShape, seq_lens: &[u32], values: usize) -> Result<()> {
    shape.validate()?;
    // The CPU quantizer walks rows by the layout's strides; a pool's rows
    // are found through a block table, which it does not take (sequence b
    // would be read from page b).
    ensure(!shape.is_paged(), "kv_layout", "a contiguous or strided layout (the CPU quantizer takes no block table)", "a paged layout")?;
    shape.validate_seq_lens(seq_lens)?;
    let need = shape.kv_elems_required().unwrap_or(u64::MAX);
    ensure(values as u64 >= need, "plain", format!("at least {need} values"), values)
}

/// Quantizes the rows `t < seq_lens[b]` of a cache held as f32 values in
/// the shape's layout (`shape.kv_strides()`, elements): bytes `q + 128` in
/// the same layout (other bytes 0) and scales in `shape.side_strides()` (other
/// entries NaN, so a kernel that reads a row past a length cannot pass).
/// Rows are quantized in parallel.
pub fn quantize_cache_int8(shape: &DecodeShape, seq_lens: &[u32], plain: &[f32]) -> Result<(Vec<u8>, Vec<f32>)> {
    check_cache_shape(shape, seq_lens, plain.len())?;
    let d = shape.head_dim as usize;
    let mut data = vec![0u8; shape.kv_elems_required().unwrap_or(0) as usize];
    let mut scales = vec![f32::NAN; (shape.side_bytes_required().unwrap_or(0) / 4) as usize];
    let (out, side) = (Shared::new(&mut data), Shared::new(&mut scales));
    for_each_row(shape, seq_lens, |at, s| {
        let mut q = [0i8; 256];
        // SAFETY: each row and scale goes to one thread (`for_each_row`).
        let (row, scale) = unsafe { (out.slice(at, d), side.slice(s, 1)) };
        scale[0] = quantize_int8_row(&plain[at..at + d], &mut q[..d]);
        for (o, &v) in row.iter_mut().zip(&q[..d]) {
            *o = (v as i32 + 128) as u8;
        }
    });
    Ok((data, scales))
}

/// The f32 values of a quantized cache's rows `t < seq_lens[b]`, in the
/// shape's layout (other elements NaN): what the attention kernels compute with.
pub fn dequantize_cache_int8(shape: &DecodeShape, seq_lens: &[u32], data: &[u8], scales: &[f32]) -> Result<Vec<f32>> {
    check_cache_shape(shape, seq_lens, data.len())?;
    ensure((scales.len() as u64) * 4 >= shape.side_bytes_required().unwrap_or(u64::MAX), "scales", "one scale per row of the cache", scales.len())?;
    let d = shape.head_dim as usize;
    let mut out = vec![f32::NAN; data.len()];
    let shared = Shared::new(&mut out);
    for_each_row(shape, seq_lens, |at, si| {
        // SAFETY: each row goes to one thread (`for_each_row`).
        let row = unsafe { shared.slice(at, d) };
        let s = scales[si];
        for (o, &byte) in row.iter_mut().zip(&data[at..at + d]) {
            *o = (byte as i32 - 128) as f32 * s;
        }
    });
    Ok(out)
}

/// Calls `f(element offset of the row, index of its scale)` for every row
/// `t < seq_lens[b]` of every kv head. When the layout keeps rows (and
/// sequences) disjoint, as every built-in layout does, rows are spread over
/// all threads; otherwise they run in order on one.
fn for_each_row(shape: &DecodeShape, seq_lens: &[u32], f: impl Fn(usize, usize) + Sync) {
    let (st, ss) = (shape.kv_strides(), shape.side_strides());
    let (d, hkv, n) = (shape.head_dim as u64, shape.num_kv_heads as u64, shape.max_seq_len as u64);
    let extent = (n - 1) * st.token + (hkv - 1) * st.head + d;
    let token_major = st.head >= d && st.token >= hkv * st.head;
    let head_major = st.token >= d && st.head >= n * st.token;
    let disjoint = (token_major || head_major) && (shape.batch == 1 || st.batch >= extent);
    let rows: Vec<(u32, u32, u32)> =
        seq_lens.iter().enumerate().flat_map(|(b, &len)| (0..len).flat_map(move |t| (0..hkv as u32).map(move |h| (b as u32, t, h)))).collect();
    let run = |rows: &[(u32, u32, u32)]| {
        for &(b, t, h) in rows {
            let at = b as u64 * st.batch + t as u64 * st.token + h as u64 * st.head;
            let side = b as u64 * ss.batch + t as u64 * ss.token + h as u64 * ss.head;
            f(at as usize, side as usize);
        }
    };
    if !disjoint {
        return run(&rows);
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for part in rows.chunks(rows.len().div_ceil(threads).max(256)) {
            s.spawn(|| run(part));
        }
    });
}

fn check_cache_shape(shape: &DecodeShape, seq_lens: &[u32], len: usize) -> Result<()> {
    ensure(shape.kv_format == KvFormat::Int8, "kv_format", "int8", shape.kv_format.name())?;
    check_quantized(shape, seq_lens, len)
}

/// A buffer that threads write at disjoint places (`for_each_row` hands
/// each row, and each scale, to exactly one thread).
struct Shared<T>(*mut T, usize);
unsafe impl<T: Send> Sync for Shared<T> {}
impl<T> Shared<T> {
    fn new(v: &mut [T]) -> Self {
        Shared(v.as_mut_ptr(), v.len())
    }
    /// # Safety
    /// No other thread accesses `at .. at + len` meanwhile.
    unsafe fn slice(&self, at: usize, len: usize) -> &mut [T] {
        assert!(at + len <= self.1, "row past the buffer");
        std::slice::from_raw_parts_mut(self.0.add(at), len)
    }
}

/// The device buffers of one quantized tensor (K's or V's values and scales).
pub struct QuantizedMut<'a> {
    pub data: TensorMut<'a>,
    pub scales: TensorMut<'a>,
}

/// One cache tensor (K or V) being written, in any format: its values and,
/// for quantized formats, its side data (scales, or scales and zeros).
#[derive(Debug)]
pub struct KvMut<'a> {
    pub data: TensorMut<'a>,
    pub side: Option<TensorMut<'a>>,
}

impl<'a> KvMut<'a> {
    /// A 16-bit cache tensor.
    pub fn plain(data: impl Into<TensorMut<'a>>) -> Self {
        KvMut { data: data.into(), side: None }
    }
    /// A quantized cache tensor.
    pub fn quantized(data: impl Into<TensorMut<'a>>, side: impl Into<TensorMut<'a>>) -> Self {
        KvMut { data: data.into(), side: Some(side.into()) }
    }
}

/// Which tensor of a packed pool a write goes to ([`KvMut::packed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvTensor {
    K,
    V,
}

impl<'a> KvMut<'a> {
    /// K's or V's values and side data in one packed pool (`shape`:
    /// `KvLayout::Paged` with `page_bytes` of [`DecodeShape::packed_page`]),
    /// as `append_kv` / `quantize_kv` write them: views of `pool`'s bytes at
    /// the page offsets (the two interleave; each page's parts are apart).
    pub fn packed(shape: &DecodeShape, pool: impl Into<TensorMut<'a>>, tensor: KvTensor) -> Result<Self> {
        let pool = pool.into();
        let part = |(offset, elem): (u64, ElemType)| pool.tail(offset, elem).ok_or_else(|| crate::run::pool_too_short(offset, &pool.desc()));
        let (data, side) = crate::run::packed_parts(shape, tensor)?;
        Ok(KvMut { data: part(data)?, side: side.map(part).transpose()? })
    }
}

impl<'a> From<QuantizedMut<'a>> for KvMut<'a> {
    fn from(q: QuantizedMut<'a>) -> Self {
        KvMut { data: q.data, side: Some(q.scales) }
    }
}

/// What one store / quantize / dequantize launch converts.
struct QuantJob<'s, 'a> {
    direction: QuantDirection,
    step: &'s StepInputs<'a>,
    plain: BufferDesc,
    plain_name: &'static str,
    plain_elems: u64,
    data: BufferDesc,
    side: Option<BufferDesc>,
    plain_strides: Option<crate::shape::KvStrides>,
    rows_per_seq: u32,
    append: bool,
}

impl DecodeAttention {
    /// Quantizes a whole 16-bit cache (K or V; rows `t < seq_lens[b]`) into
    /// `out`. `plain` has the shape's dtype and layout (strides in its own
    /// elements); `seq_lens` is `[batch]` u32 on the device. Asynchronous.
    /// Paged caches: [`DecodeAttention::quantize_kv`].
    pub fn quantize<'a>(&self, shape: &DecodeShape, seq_lens: impl Into<TensorRef<'a>>, plain: impl Into<TensorRef<'a>>, out: QuantizedMut<'a>, stream: &Stream) -> Result<()> {
        self.quantize_kv_raw(shape, &StepInputs::lengths(seq_lens), plain.into(), out.into(), stream.as_inner())
    }

    /// Quantizes a whole 16-bit cache into a quantized one of the same
    /// layout; for a paged shape both are paged through `step`'s block
    /// table (the rows `t < seq_lens[b]` of each sequence).
    pub fn quantize_kv<'a>(&self, shape: &DecodeShape, step: &StepInputs<'a>, plain: impl Into<TensorRef<'a>>, out: KvMut<'a>, stream: &Stream) -> Result<()> {
        self.quantize_kv_raw(shape, step, plain.into(), out, stream.as_inner())
    }

    /// [`DecodeAttention::quantize_kv`] on a raw stream.
    pub fn quantize_kv_raw<'a>(&self, shape: &DecodeShape, step: &StepInputs<'a>, plain: TensorRef<'a>, out: KvMut<'a>, stream: RawStream) -> Result<()> {
        ensure(shape.kv_format.is_quantized(), "kv_format", "a quantized format (int8, int4)", shape.kv_format.name())?;
        let job = QuantJob {
            direction: QuantDirection::Quantize,
            step,
            plain: plain.desc(),
            plain_name: "plain",
            plain_elems: shape.kv_elems_required().unwrap_or(u64::MAX),
            data: out.data.desc(),
            side: out.side.as_ref().map(TensorMut::desc),
            plain_strides: shape.kv_strides_checked(),
            rows_per_seq: shape.max_seq_len,
            append: false,
        };
        self.quant_launch(shape, job, stream)
    }

    /// Appends a decode step's `q_len` new tokens of K or V to a quantized
    /// cache: `new_rows` is `[batch, q_len, Hkv, D]` of the shape's dtype;
    /// sequence b's tokens go to positions `seq_lens[b] - q_len ..` (lengths
    /// read on the device, new tokens included; sequences whose length is
    /// below q_len or above the capacity are left alone). Any format and
    /// paged caches: [`DecodeAttention::append_kv`].
    pub fn append<'a>(&self, shape: &DecodeShape, seq_lens: impl Into<TensorRef<'a>>, new_rows: impl Into<TensorRef<'a>>, out: QuantizedMut<'a>, stream: &Stream) -> Result<()> {
        self.append_kv_raw(shape, &StepInputs::lengths(seq_lens), new_rows.into(), out.into(), stream.as_inner())
    }

    /// Appends a decode step's `q_len` new tokens of K or V to a cache of
    /// any format, contiguous or paged (through `step`'s block table): as
    /// [`DecodeAttention::append`], copied for 16-bit formats, quantized
    /// for the others. Lengths and table are read on the device, so the
    /// call can be captured in a CUDA graph with
    /// [`DecodeAttention::run_step`].
    pub fn append_kv<'a>(&self, shape: &DecodeShape, step: &StepInputs<'a>, new_rows: impl Into<TensorRef<'a>>, out: KvMut<'a>, stream: &Stream) -> Result<()> {
        self.append_kv_raw(shape, step, new_rows.into(), out, stream.as_inner())
    }

    /// [`DecodeAttention::append_kv`] on a raw stream.
    pub fn append_kv_raw<'a>(&self, shape: &DecodeShape, step: &StepInputs<'a>, new_rows: TensorRef<'a>, out: KvMut<'a>, stream: RawStream) -> Result<()> {
        let (d, h, ql) = (shape.head_dim as u64, shape.num_kv_heads as u64, shape.q_len as u64);
        let job = QuantJob {
            direction: QuantDirection::Quantize,
            step,
            plain: new_rows.desc(),
            plain_name: "new_rows",
            plain_elems: shape.batch as u64 * ql * h * d,
            data: out.data.desc(),
            side: out.side.as_ref().map(TensorMut::desc),
            plain_strides: Some(crate::shape::KvStrides { batch: ql * h * d, token: h * d, head: d }),
            rows_per_seq: shape.q_len,
            append: true,
        };
        self.quant_launch(shape, job, stream)
    }

    /// Dequantizes a contiguous cache (rows `t < seq_lens[b]`) into a
    /// 16-bit buffer of the shape's dtype and layout (other elements are
    /// left untouched).
    pub fn dequantize<'a>(
        &self,
        shape: &DecodeShape,
        seq_lens: impl Into<TensorRef<'a>>,
        data: impl Into<TensorRef<'a>>,
        scales: impl Into<TensorRef<'a>>,
        plain: impl Into<TensorMut<'a>>,
        stream: &Stream,
    ) -> Result<()> {
        let (data, scales, plain) = (data.into(), scales.into(), plain.into());
        ensure(shape.kv_format.is_quantized(), "kv_format", "a quantized format (int8, int4)", shape.kv_format.name())?;
        let step = StepInputs::lengths(seq_lens);
        let job = QuantJob {
            direction: QuantDirection::Dequantize,
            step: &step,
            plain: plain.desc(),
            plain_name: "plain",
            plain_elems: shape.kv_elems_required().unwrap_or(u64::MAX),
            data: data.desc(),
            side: Some(scales.desc()),
            plain_strides: shape.kv_strides_checked(),
            rows_per_seq: shape.max_seq_len,
            append: false,
        };
        self.quant_launch(shape, job, stream.as_inner())
    }

    fn quant_launch(&self, shape: &DecodeShape, job: QuantJob, stream: RawStream) -> Result<()> {
        shape.validate()?;
        let direction = job.direction;
        let name = quant_kernel_name(&QuantKernelId { format: shape.kv_format, dtype: shape.dtype, head_dim: shape.head_dim, direction })
            .ok_or_else(|| Error::Unsupported(format!("no {direction:?} kernel for {} / {}", shape.kv_format.name(), shape.dtype.name())))?;
        job.step.check_for(shape)?;
        let lens = job.step.seq_lens.desc();
        let plain_bytes = job.plain_elems.checked_mul(2).unwrap_or(u64::MAX);
        check_buffer(job.plain_name, &job.plain, dtype_elem(shape.dtype), plain_bytes)?;
        check_buffer("data", &job.data, kv_elem(shape.kv_format), shape.kv_bytes_required().unwrap_or(u64::MAX))?;
        let side_name = "scales";
        match (side_elem(shape.kv_format), &job.side) {
            (Some(elem), Some(side)) => check_buffer(side_name, side, elem, shape.side_bytes_required().unwrap_or(u64::MAX))?,
            (Some(elem), None) => return Err(Error::invalid(side_name, format!("the {} cache's side data ({})", shape.kv_format.name(), elem.name()), "none")),
            (None, Some(_)) => return Err(Error::invalid("scales", format!("none (a {} cache has no side data)", shape.kv_format.name()), "a buffer")),
            (None, None) => {}
        }
        let side = job.side.unwrap_or(BufferDesc { addr: 0, len: 0, elem: ElemType::U32 });
        let mut read = vec![("seq_lens", lens)];
        if let Some(t) = &job.step.block_table {
            read.push(("block_table", t.desc()));
        }
        let (written, others): (Vec<_>, Vec<_>) = if direction == QuantDirection::Quantize {
            read.push((job.plain_name, job.plain));
            (vec![("data", job.data), (side_name, side)], read)
        } else {
            read.extend([("data", job.data), (side_name, side)]);
            (vec![(job.plain_name, job.plain)], read)
        };
        let end = |b: &BufferDesc| b.addr + (b.len * b.elem.size_bytes()) as u64;
        // A packed pool's values and side data share pages: they may
        // interleave, as long as in every page `a`'s part (a page of rows)
        // ends before `b`'s (a page of side data) starts, and `b`'s ends
        // within the page.
        let packed = match (shape.kv_layout, shape.page_part_bytes()) {
            (crate::shape::KvLayout::Paged { page_bytes: Some(page), .. }, Some((rows, side))) => Some((rows, side, page)),
            _ => None,
        };
        let interleaved = |a: &BufferDesc, b: &BufferDesc| {
            packed.is_some_and(|(rows, side, page)| {
                let d = (b.addr as i128 - a.addr as i128).rem_euclid(page as i128) as u64;
                d >= rows && d + side <= page
            })
        };
        for (i, (_, w)) in written.iter().enumerate() {
            // Only two written buffers (values, then side data) may interleave.
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
        let ps = job.plain_strides.ok_or_else(|| Error::invalid("kv_layout", "strides that fit in 64 bits", "an overflow"))?;
        let (ds, ss) = (shape.kv_strides(), shape.side_strides());
        let bits = shape.kv_format.bits() as u64;
        let side_entry = shape.kv_format.side_bytes(shape.head_dim) as u64;
        let rows = shape.batch as u64 * job.rows_per_seq as u64 * shape.num_kv_heads as u64;
        let blocks = rows.div_ceil(QUANT_WARPS as u64);
        ensure(blocks < (1 << 31), "max_seq_len", "fewer than 2^34 rows to convert per launch", rows)?;
        let (page_shift, num_pages) = shape.page_geometry().unwrap_or((0, 0));
        let params = QuantParams {
            plain: job.plain.addr,
            plain_stride_batch: ps.batch * 2,
            plain_stride_token: ps.token * 2,
            plain_stride_head: ps.head * 2,
            data: job.data.addr,
            data_stride_batch: ds.batch * bits / 8,
            data_stride_token: ds.token * bits / 8,
            data_stride_head: ds.head * bits / 8,
            side: side.addr,
            side_stride_batch: ss.batch * side_entry,
            side_stride_token: ss.token * side_entry,
            side_stride_head: ss.head * side_entry,
            seq_lens: lens.addr,
            batch: shape.batch,
            rows_per_seq: job.rows_per_seq,
            num_kv_heads: shape.num_kv_heads,
            append: job.append as u32,
            capacity: shape.max_seq_len,
            _pad: 0,
            block_table: job.step.block_table.map_or(0, |t| t.addr),
            table_stride: shape.pages_per_seq(),
            page_shift,
            num_pages,
            _pad2: 0,
        };
        // SAFETY: every buffer was checked against the shape above; the
        // kernel bounds its rows by the grid, the lengths and the capacity,
        // and its page ids by the pool.
        unsafe { self.launch(name, (blocks as u32, 1, 1), 32 * QUANT_WARPS, 0, &params, stream) }
    }
}

