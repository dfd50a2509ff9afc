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
use decode_attn_abi::{quant_kernel_name, KvFormat, QuantDirection, QuantParams, QUANT_WARPS};

use crate::check::{check_buffer, dtype_elem, BufferDesc};
use crate::error::{ensure, Error, Result};
use crate::run::DecodeAttention;
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

/// Quantizes the rows `t < seq_lens[b]` of a cache held as f32 values in
/// the shape's layout (`shape.kv_strides()`, elements): bytes `q + 128` in
/// the same layout (other bytes 0) and scales in `shape.side_strides()` (other
/// entries NaN, so a kernel that reads a row past a length cannot pass).
/// Sequences are quantized in parallel.
pub fn quantize_cache_int8(shape: &DecodeShape, seq_lens: &[u32], plain: &[f32]) -> Result<(Vec<u8>, Vec<f32>)> {
    check_cache_shape(shape, seq_lens, plain.len())?;
    let d = shape.head_dim as usize;
    let mut data = vec![0u8; shape.kv_elems_required().unwrap_or(0) as usize];
    let mut scales = vec![f32::NAN; (shape.side_bytes_required().unwrap_or(0) / 4) as usize];
    per_sequence(shape, seq_lens, &mut data, &mut scales, |row: Row, data, scales| {
        let mut q = [0i8; 256];
        scales[row.side] = quantize_int8_row(&plain[row.abs..][..d], &mut q[..d]);
        for (o, &v) in data[row.at..row.at + d].iter_mut().zip(&q[..d]) {
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
    let mut scales_copy = scales.to_vec();
    per_sequence(shape, seq_lens, &mut out, &mut scales_copy, |row: Row, out, scales| {
        let s = scales[row.side];
        for (o, &byte) in out[row.at..row.at + d].iter_mut().zip(&data[row.abs..][..d]) {
            *o = (byte as i32 - 128) as f32 * s;
        }
    });
    Ok(out)
}

/// One row as `per_sequence` hands it out.
#[derive(Clone, Copy)]
struct Row {
    /// Element offset of the row in the whole cache.
    abs: usize,
    /// Element offset of the row in the region handed out with it.
    at: usize,
    /// Index of its scale in the side region handed out with it.
    side: usize,
}

/// Calls `f(row, region of values, region of side data)` for every row
/// `t < seq_lens[b]` of every kv head: one thread per group of sequences
/// when sequences own disjoint regions (every built-in layout), else
/// serially with the whole buffers as the regions.
fn per_sequence<T: Send, S: Send>(shape: &DecodeShape, seq_lens: &[u32], values: &mut [T], side: &mut [S], f: impl Fn(Row, &mut [T], &mut [S]) + Sync) {
    let (st, ss) = (shape.kv_strides(), shape.side_strides());
    let d = shape.head_dim as u64;
    let extent = (shape.max_seq_len as u64 - 1) * st.token + (shape.num_kv_heads as u64 - 1) * st.head + d;
    let rows = |b: usize, values: &mut [T], side: &mut [S], rel: bool| {
        let (vb, sb) = (b as u64 * st.batch, b as u64 * ss.batch);
        for t in 0..seq_lens[b] as u64 {
            for h in 0..shape.num_kv_heads as u64 {
                let (v, s) = (t * st.token + h * st.head, t * ss.token + h * ss.head);
                let row = if rel { Row { abs: (vb + v) as usize, at: v as usize, side: s as usize } } else { Row { abs: (vb + v) as usize, at: (vb + v) as usize, side: (sb + s) as usize } };
                f(row, values, side);
            }
        }
    };
    if st.batch >= extent && st.batch > 0 && ss.batch > 0 {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut jobs: Vec<(usize, &mut [T], &mut [S])> =
            values.chunks_mut(st.batch as usize).zip(side.chunks_mut(ss.batch as usize)).enumerate().map(|(b, (v, s))| (b, v, s)).collect();
        jobs.truncate(seq_lens.len());
        let per = jobs.len().div_ceil(threads).max(1);
        std::thread::scope(|scope| {
            for group in jobs.chunks_mut(per) {
                let rows = &rows;
                scope.spawn(move || {
                    for (b, v, s) in group.iter_mut() {
                        rows(*b, v, s, true);
                    }
                });
            }
        });
    } else {
        for b in 0..seq_lens.len() {
            rows(b, values, side, false);
        }
    }
}

fn check_cache_shape(shape: &DecodeShape, seq_lens: &[u32], len: usize) -> Result<()> {
    shape.validate()?;
    shape.validate_seq_lens(seq_lens)?;
    ensure(shape.kv_format == KvFormat::Int8, "kv_format", "int8", shape.kv_format.name())?;
    let need = shape.kv_elems_required().unwrap_or(u64::MAX);
    ensure(len as u64 >= need, "plain", format!("at least {need} values"), len)
}

/// The device buffers of one quantized tensor (K's or V's values and scales).
pub struct QuantizedMut<'a> {
    pub data: TensorMut<'a>,
    pub scales: TensorMut<'a>,
}

impl DecodeAttention {
    /// Quantizes a whole 16-bit cache (K or V; rows `t < seq_lens[b]`) into
    /// `out`. `plain` has the shape's dtype and layout (strides in its own
    /// elements); `seq_lens` is `[batch]` u32 on the device. Asynchronous.
    pub fn quantize<'a>(&self, shape: &DecodeShape, seq_lens: impl Into<TensorRef<'a>>, plain: impl Into<TensorRef<'a>>, out: QuantizedMut<'a>, stream: &Stream) -> Result<()> {
        let (lens, plain) = (seq_lens.into(), plain.into());
        let elems = shape.kv_elems_required().unwrap_or(u64::MAX);
        self.quant_launch(shape, QuantDirection::Quantize, &lens, desc(&plain), "plain", elems, &out.data, &out.scales, shape.kv_strides_checked(), shape.max_seq_len, false, stream)
    }

    /// Appends a decode step's `q_len` new tokens of K or V: `new_rows` is
    /// `[batch, q_len, Hkv, D]` of the shape's dtype; sequence b's tokens go
    /// to positions `seq_lens[b] - q_len ..` (lengths read on the device,
    /// new tokens included; sequences whose length is below q_len or above
    /// the capacity are left alone).
    pub fn append<'a>(&self, shape: &DecodeShape, seq_lens: impl Into<TensorRef<'a>>, new_rows: impl Into<TensorRef<'a>>, out: QuantizedMut<'a>, stream: &Stream) -> Result<()> {
        let (lens, rows) = (seq_lens.into(), new_rows.into());
        let (d, h, ql) = (shape.head_dim as u64, shape.num_kv_heads as u64, shape.q_len as u64);
        let strides = crate::shape::KvStrides { batch: ql * h * d, token: h * d, head: d };
        let elems = shape.batch as u64 * ql * h * d;
        self.quant_launch(shape, QuantDirection::Quantize, &lens, desc(&rows), "new_rows", elems, &out.data, &out.scales, Some(strides), shape.q_len, true, stream)
    }

    /// Dequantizes a cache (rows `t < seq_lens[b]`) into a 16-bit buffer of
    /// the shape's dtype and layout (other elements are left untouched).
    pub fn dequantize<'a>(
        &self,
        shape: &DecodeShape,
        seq_lens: impl Into<TensorRef<'a>>,
        data: impl Into<TensorRef<'a>>,
        scales: impl Into<TensorRef<'a>>,
        plain: impl Into<TensorMut<'a>>,
        stream: &Stream,
    ) -> Result<()> {
        let (lens, data, scales, plain) = (seq_lens.into(), data.into(), scales.into(), plain.into());
        let elems = shape.kv_elems_required().unwrap_or(u64::MAX);
        // SAFETY (of the views): the kernel reads `data`/`scales` and writes `plain`.
        let (data_mut, scales_mut) = unsafe { (TensorMut::from_raw(data.addr, data.len, data.elem), TensorMut::from_raw(scales.addr, scales.len, scales.elem)) };
        let plain_desc = BufferDesc { addr: plain.addr, len: plain.len, elem: plain.elem };
        self.quant_launch(shape, QuantDirection::Dequantize, &lens, plain_desc, "plain", elems, &data_mut, &scales_mut, shape.kv_strides_checked(), shape.max_seq_len, false, stream)
    }

    #[allow(clippy::too_many_arguments)]
    fn quant_launch(
        &self,
        shape: &DecodeShape,
        direction: QuantDirection,
        lens: &TensorRef,
        plain: BufferDesc,
        plain_name: &str,
        plain_elems: u64,
        data: &TensorMut,
        scales: &TensorMut,
        plain_strides: Option<crate::shape::KvStrides>,
        rows_per_seq: u32,
        append: bool,
        stream: &Stream,
    ) -> Result<()> {
        shape.validate()?;
        ensure(shape.kv_format.is_quantized(), "kv_format", "a quantized format (int8)", shape.kv_format.name())?;
        let name = quant_kernel_name(shape.kv_format, shape.dtype, shape.head_dim, direction)
            .ok_or_else(|| Error::Unsupported(format!("no {direction:?} kernel for {} / {}", shape.kv_format.name(), shape.dtype.name())))?;
        check_buffer("seq_lens", &desc(lens), ElemType::U32, shape.batch as u64 * 4)?;
        let plain_bytes = plain_elems.checked_mul(2).unwrap_or(u64::MAX);
        check_buffer(plain_name, &plain, dtype_elem(shape.dtype), plain_bytes)?;
        let data_d = BufferDesc { addr: data.addr, len: data.len, elem: data.elem };
        let scales_d = BufferDesc { addr: scales.addr, len: scales.len, elem: scales.elem };
        check_buffer("data", &data_d, ElemType::U8, shape.kv_bytes_required().unwrap_or(u64::MAX))?;
        check_buffer("scales", &scales_d, ElemType::F32, shape.side_bytes_required().unwrap_or(u64::MAX))?;
        let written = if direction == QuantDirection::Quantize { [&data_d, &scales_d] } else { [&plain, &plain] };
        for w in written {
            let w_end = w.addr + (w.len * w.elem.size_bytes()) as u64;
            for (n, other) in [(plain_name, &plain), ("data", &data_d), ("scales", &scales_d), ("seq_lens", &desc(lens))] {
                if std::ptr::eq(w, other) || (w.addr == other.addr && w.len == other.len) {
                    continue;
                }
                let o_end = other.addr + (other.len * other.elem.size_bytes()) as u64;
                ensure(w_end <= other.addr || o_end <= w.addr, n, "a buffer that does not overlap the one written", "an overlapping one")?;
            }
        }
        let ps = plain_strides.ok_or_else(|| Error::invalid("kv_layout", "strides that fit in 64 bits", "an overflow"))?;
        let (ds, ss) = (shape.kv_strides(), shape.side_strides());
        let rows = shape.batch as u64 * rows_per_seq as u64 * shape.num_kv_heads as u64;
        let blocks = rows.div_ceil(QUANT_WARPS as u64);
        ensure(blocks < (1 << 31), "max_seq_len", "fewer than 2^34 rows to convert per launch", rows)?;
        let params = QuantParams {
            plain: plain.addr,
            plain_stride_batch: ps.batch * 2,
            plain_stride_token: ps.token * 2,
            plain_stride_head: ps.head * 2,
            data: data.addr,
            data_stride_batch: ds.batch,
            data_stride_token: ds.token,
            data_stride_head: ds.head,
            side: scales.addr,
            side_stride_batch: ss.batch * 4,
            side_stride_token: ss.token * 4,
            side_stride_head: ss.head * 4,
            seq_lens: lens.addr,
            batch: shape.batch,
            rows_per_seq,
            num_kv_heads: shape.num_kv_heads,
            append: append as u32,
            capacity: shape.max_seq_len,
            _pad: 0,
        };
        // SAFETY: every buffer was checked against the shape above; the
        // kernel bounds its rows by the grid, the lengths and the capacity.
        unsafe { self.launch(name, (blocks as u32, 1, 1), 32 * QUANT_WARPS, 0, &params, stream) }
    }
}

fn desc(t: &TensorRef) -> BufferDesc {
    BufferDesc { addr: t.addr, len: t.len, elem: t.elem }
}
