//! The GPU quantize, append and dequantize kernels give the CPU
//! quantizer's bits exactly, write only the rows they own, and leave every
//! other byte alone.

use decode_attn::cust::memory::{CopyDestination, DeviceBuffer};
use decode_attn::cust::stream::Stream;
use decode_attn::quant::{dequantize_cache, quantize_cache};
use decode_attn::testing::Distribution;
use decode_attn::{DecodeAttention, DecodeShape, VariantSpec, Dtype, KvFormat, KvLayout, KvMut, StepInputs, TensorMut, TensorRef};

use crate::common::{err, Buffers, Problem};

fn to16(x: f32, dtype: Dtype) -> u16 {
    match dtype {
        Dtype::Bf16 => decode_attn::half::bf16::from_f32(x).to_bits(),
        Dtype::F16 => decode_attn::half::f16::from_f32(x).to_bits(),
    }
}
fn from16(b: u16, dtype: Dtype) -> f32 {
    match dtype {
        Dtype::Bf16 => decode_attn::half::bf16::from_bits(b).to_f32(),
        Dtype::F16 => decode_attn::half::f16::from_bits(b).to_f32(),
    }
}


/// The 16-bit buffer of a problem's plain K, as raw bits.
fn plain_k(p: &Problem) -> Result<(u64, usize, Vec<u16>), String> {
    let n = p.shape.kv_elems_required().unwrap() as usize;
    let (addr, bits) = match &p.bufs {
        Buffers::Bf16 { k, .. } => {
            let mut h = vec![decode_attn::half::bf16::ZERO; n];
            k.copy_to(&mut h).map_err(err)?;
            (k.as_device_ptr().as_raw(), h.iter().map(|x| x.to_bits()).collect())
        }
        Buffers::F16 { k, .. } => {
            let mut h = vec![decode_attn::half::f16::ZERO; n];
            k.copy_to(&mut h).map_err(err)?;
            (k.as_device_ptr().as_raw(), h.iter().map(|x| x.to_bits()).collect())
        }
    };
    Ok((addr, n, bits))
}

pub fn round_trips(attn: &DecodeAttention, stream: &Stream, format: KvFormat, dtype: Dtype, d: u32, layout: KvLayout) -> Result<(), String> {
    let shape = DecodeShape { batch: 3, num_q_heads: 4, num_kv_heads: 2, head_dim: d, q_len: 2, max_seq_len: 300, dtype, kv_format: format, kv_layout: layout, scale: None, variant: VariantSpec { soft_cap: None, window: None, sinks: false, alibi: false, key_ranges: false, tree: false } };
    let lens = vec![300u32, 2, 157];
    let p = Problem::new(&shape, &lens, Distribution::HeavyTailed, 5).map_err(err)?;
    let qb = p.quant.as_ref().ok_or("no quantized buffers")?;
    let (plain_addr, n, plain_bits) = plain_k(&p)?;
    let n_side = (shape.scale_bytes_required().unwrap() / 4) as usize;
    let n_bytes = shape.kv_bytes_required().unwrap() as usize;
    let scale_elem = decode_attn::check::scale_elem(format).ok_or("not a quantized format")?;
    // SAFETY (of the views below): each names a live buffer of this function.
    let side_mut = |b: &mut DeviceBuffer<u32>| unsafe { TensorMut::from_raw(b.as_device_ptr().as_raw(), b.len(), scale_elem) };
    let side_ref = |b: &DeviceBuffer<u32>| unsafe { TensorRef::from_raw(b.as_device_ptr().as_raw(), b.len(), scale_elem) };
    let nan = f32::NAN.to_bits();
    let lens_dev = DeviceBuffer::from_slice(&lens).map_err(err)?;
    let elem16 = decode_attn::check::dtype_elem(dtype);
    // SAFETY: views of live buffers of this function.
    let plain = unsafe { TensorRef::from_raw(plain_addr, n, elem16) };

    // Whole cache: every byte and scale as the CPU quantizer wrote them.
    let mut data = DeviceBuffer::<u8>::zeroed(n_bytes).map_err(err)?;
    // (A per-tensor format's scale is the quantizer's input: the CPU's.)
    let side_init = if format.tensor_scaled() { qb.host_k.1.clone() } else { vec![nan; n_side] };
    let mut scales = DeviceBuffer::from_slice(&side_init).map_err(err)?;
    attn.quantize_kv(&shape, &StepInputs::lengths(&lens_dev), plain, KvMut::quantized(&mut data, side_mut(&mut scales)), stream).map_err(err)?;
    stream.synchronize().map_err(err)?;
    let (mut got_data, mut got_scales) = (vec![0u8; n_bytes], vec![0u32; n_side]);
    data.copy_to(&mut got_data).map_err(err)?;
    scales.copy_to(&mut got_scales).map_err(err)?;
    if got_data != qb.host_k.0 {
        let i = got_data.iter().zip(&qb.host_k.0).position(|(a, b)| a != b).unwrap();
        return Err(format!("quantize: byte {i} is {} on the GPU, {} on the CPU", got_data[i], qb.host_k.0[i]));
    }
    if got_scales != qb.host_k.1 {
        let i = got_scales.iter().zip(&qb.host_k.1).position(|(a, b)| a != b).unwrap();
        return Err(format!("quantize: side word {i} is {:#x} on the GPU, {:#x} on the CPU", got_scales[i], qb.host_k.1[i]));
    }

    // Append: the last q_len tokens of each sequence, from [batch, q_len, Hkv, D].
    let st = shape.kv_strides();
    let (ql, h, dd) = (shape.q_len as usize, shape.num_kv_heads as usize, d as usize);
    let mut new_rows = vec![0u16; shape.batch as usize * ql * h * dd];
    for (b, &len) in lens.iter().enumerate() {
        for i in 0..ql {
            for hh in 0..h {
                let t = len as usize - ql + i;
                let src = (b as u64 * st.batch + t as u64 * st.token + hh as u64 * st.head) as usize;
                new_rows[((b * ql + i) * h + hh) * dd..][..dd].copy_from_slice(&plain_bits[src..src + dd]);
            }
        }
    }
    let rows_dev = DeviceBuffer::from_slice(&new_rows).map_err(err)?;
    // SAFETY: a view of `rows_dev`.
    let rows = unsafe { TensorRef::from_raw(rows_dev.as_device_ptr().as_raw(), new_rows.len(), elem16) };
    let mut data2 = DeviceBuffer::<u8>::zeroed(n_bytes).map_err(err)?;
    let mut scales2 = DeviceBuffer::from_slice(&side_init).map_err(err)?;
    attn.append_kv(&shape, &StepInputs::lengths(&lens_dev), rows, KvMut::quantized(&mut data2, side_mut(&mut scales2)), stream).map_err(err)?;
    stream.synchronize().map_err(err)?;
    data2.copy_to(&mut got_data).map_err(err)?;
    scales2.copy_to(&mut got_scales).map_err(err)?;
    let side = shape.scale_strides();
    let (row_bytes, words) = (format.row_bytes(d) as usize, format.scale_bytes(d) as usize / 4);
    let bits = format.bits() as u64;
    let mut expect_data = vec![0u8; n_bytes];
    let mut expect_scales = side_init.clone();
    for (b, &len) in lens.iter().enumerate() {
        for t in len as usize - ql..len as usize {
            for hh in 0..h {
                let at = ((b as u64 * st.batch + t as u64 * st.token + hh as u64 * st.head) * bits / 8) as usize;
                let s_at = (b as u64 * side.batch + t as u64 * side.token + hh as u64 * side.head) as usize * words;
                expect_data[at..at + row_bytes].copy_from_slice(&qb.host_k.0[at..at + row_bytes]);
                expect_scales[s_at..s_at + words].copy_from_slice(&qb.host_k.1[s_at..s_at + words]);
            }
        }
    }
    if got_data != expect_data || got_scales != expect_scales {
        return Err("append: rows differ from the CPU quantizer's, or other rows were written".into());
    }

    // Dequantize back into a NaN-filled 16-bit buffer: the CPU's values, rounded.
    let out = DeviceBuffer::from_slice(&vec![0x7FFFu16; n]).map_err(err)?;
    // SAFETY: a view of `out`.
    let out_view = unsafe { TensorMut::from_raw(out.as_device_ptr().as_raw(), n, elem16) };
    attn.dequantize_kv(&shape, &lens_dev, &qb.k, Some(side_ref(&qb.k_scales)), out_view, stream).map_err(err)?;
    stream.synchronize().map_err(err)?;
    let mut got16 = vec![0u16; n];
    out.copy_to(&mut got16).map_err(err)?;
    let host = dequantize_cache(&shape, &lens, &qb.host_k.0, &qb.host_k.1).map_err(err)?;
    for (i, (&g, &x)) in got16.iter().zip(&host).enumerate() {
        let want = if x.is_nan() { 0x7FFF } else { to16(x, dtype) };
        if g != want {
            return Err(format!("dequantize: element {i} is {} on the GPU, {} on the CPU", from16(g, dtype), x));
        }
    }
    // And the CPU round trip itself: deterministic, and within half a step
    // (int8: scale / 2) or a step's rounding (int4: scale / 2 plus the fp16
    // rounding of scale and zero) of every value.
    let plain_f: Vec<f32> = plain_bits.iter().map(|&b| from16(b, dtype)).collect();
    let (cd, cs) = quantize_cache(&shape, &lens, &plain_f).map_err(err)?;
    if cd != qb.host_k.0 {
        return Err("CPU quantizer is not deterministic".into());
    }
    let back = dequantize_cache(&shape, &lens, &cd, &cs).map_err(err)?;
    let (num, den) = plain_f.iter().zip(&back).filter(|(_, y)| !y.is_nan()).fold((0f64, 0f64), |(n, d), (&x, &y)| (n + (x - y) as f64 * (x - y) as f64, d + x as f64 * x as f64));
    let rel = (num / den).sqrt();
    // Sanity bounds for heavy-tailed inputs (`cargo xtask quant-error` measures the real figures).
    let bound = if format == KvFormat::Int8 { 0.05 } else { 0.25 };
    if !(rel <= bound) {
        return Err(format!("CPU round trip: relative L2 error {rel:.3e} > {bound}"));
    }
    Ok(())
}

/// Rows no finite input may break: magnitudes from bf16's smallest
/// subnormal (9.2e-41) through 1e-37 (where `127 / amax` and `448 / amax`
/// overflowed f32, zeros became NaN codes and every other value saturated)
/// to 3e37, all-zero rows and rows with exact zeros. The GPU's bytes are the
/// CPU's, no fp8 byte is a NaN code, every dequantized value is finite, and
/// int8 and fp8 rows keep their values (relative error of the row within the
/// format's rounding), tiny rows included; int4 rows (an fp16 scale and
/// zero) keep theirs within fp16's range. fp8 per tensor: a tiny device
/// scale (1e-40, 2^-149) gives the CPU's codes, a zero or negative one zero
/// codes, never NaN ones.
pub fn extreme_rows(attn: &DecodeAttention, stream: &Stream, format: KvFormat) -> Result<(), String> {
    if format == KvFormat::Fp8DsMla {
        return extreme_ds_mla_rows(attn, stream);
    }
    let dtype = Dtype::Bf16;
    let shape = DecodeShape { kv_format: format, ..DecodeShape::bf16(1, 2, 2, 128, 1, 16) };
    let lens = vec![16u32];
    let mags: [f32; 16] = [1e-37, 5e-38, 1e-39, 1e-40, 9.2e-41, 0.0, 1e-30, 1e-6, 1.0, 100.0, 6e4, 1e6, 3e37, 1e-36, 2e-38, 7.0];
    let n = shape.kv_elems_required().unwrap() as usize;
    let d = shape.head_dim as usize;
    let mut rng = decode_attn::testing::Rng::new(77);
    let plain: Vec<f32> = (0..n)
        .map(|i| {
            let (row, dim) = (i / d, i % d);
            let x = if dim % 5 == 0 { 0.0 } else { mags[row % mags.len()] * rng.normal() as f32 };
            decode_attn::half::bf16::from_f32(x).to_f32()
        })
        .collect();
    let bits: Vec<u16> = plain.iter().map(|&x| to16(x, dtype)).collect();
    let plain_dev = DeviceBuffer::from_slice(&bits).map_err(err)?;
    let lens_dev = DeviceBuffer::from_slice(&lens).map_err(err)?;
    // SAFETY (of the views below): each names a live buffer of this function.
    let plain_view = unsafe { TensorRef::from_raw(plain_dev.as_device_ptr().as_raw(), n, decode_attn::check::dtype_elem(dtype)) };
    let scale_elem = decode_attn::check::scale_elem(format).ok_or("not a quantized format")?;
    let n_bytes = shape.kv_bytes_required().unwrap() as usize;
    let fp8 = matches!(format, KvFormat::Fp8 | KvFormat::Fp8PerHead);
    let nan_code = |b: &u8| fp8 && b & 0x7f == 0x7f;
    let mut data = DeviceBuffer::<u8>::zeroed(n_bytes).map_err(err)?;
    let mut got = vec![0u8; n_bytes];
    if format == KvFormat::Fp8 {
        for scale in [1e-40f32, f32::from_bits(1), 1e-30, 0.0, -1.0] {
            let side = DeviceBuffer::from_slice(&[scale.to_bits()]).map_err(err)?;
            let side_view = unsafe { TensorMut::from_raw(side.as_device_ptr().as_raw(), 1, scale_elem) };
            attn.quantize_kv(&shape, &StepInputs::lengths(&lens_dev), plain_view, KvMut::quantized(&mut data, side_view), stream).map_err(err)?;
            stream.synchronize().map_err(err)?;
            data.copy_to(&mut got).map_err(err)?;
            let mut want = vec![0u8; n_bytes];
            for (row, out) in plain.chunks(d).zip(want.chunks_mut(d)) {
                decode_attn::quant::quantize_fp8_row_scaled(row, scale, out);
            }
            if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
                return Err(format!("scale {scale:e}: byte {i} is {:#x} on the GPU, {:#x} on the CPU", got[i], want[i]));
            }
            if let Some(i) = got.iter().position(nan_code) {
                return Err(format!("scale {scale:e}: byte {i} is a NaN code ({:#x})", got[i]));
            }
            if !(scale > 0.0) && got.iter().any(|&b| b & 0x7f != 0) {
                return Err(format!("scale {scale:e}: nonzero codes under a scale that is not positive"));
            }
        }
        return Ok(());
    }
    let n_side = (shape.scale_bytes_required().unwrap() / 4) as usize;
    let side = DeviceBuffer::from_slice(&vec![f32::NAN.to_bits(); n_side]).map_err(err)?;
    let side_view = unsafe { TensorMut::from_raw(side.as_device_ptr().as_raw(), n_side, scale_elem) };
    attn.quantize_kv(&shape, &StepInputs::lengths(&lens_dev), plain_view, KvMut::quantized(&mut data, side_view), stream).map_err(err)?;
    stream.synchronize().map_err(err)?;
    data.copy_to(&mut got).map_err(err)?;
    let mut got_side = vec![0u32; n_side];
    side.copy_to(&mut got_side).map_err(err)?;
    let (want, want_side) = quantize_cache(&shape, &lens, &plain).map_err(err)?;
    if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
        return Err(format!("byte {i} is {:#x} on the GPU, {:#x} on the CPU", got[i], want[i]));
    }
    if let Some(i) = got_side.iter().zip(&want_side).position(|(a, b)| a != b) {
        return Err(format!("side word {i} is {:#x} on the GPU, {:#x} on the CPU", got_side[i], want_side[i]));
    }
    if let Some(i) = got.iter().position(nan_code) {
        return Err(format!("byte {i} is a NaN code ({:#x})", got[i]));
    }
    let back = dequantize_cache(&shape, &lens, &got, &got_side).map_err(err)?;
    for (r, (x, y)) in plain.chunks(d).zip(back.chunks(d)).enumerate() {
        let mag = mags[r % mags.len()];
        if let Some(i) = y.iter().position(|v| !v.is_finite()) {
            return Err(format!("row {r} (magnitude {mag:e}): dequantized value {i} is {}", y[i]));
        }
        if x.iter().zip(y).any(|(&a, &b)| a == 0.0 && b != 0.0 && format.group().is_none()) {
            return Err(format!("row {r} (magnitude {mag:e}): a zero came back nonzero"));
        }
        let (num, den) = x.iter().zip(y).fold((0f64, 0f64), |(n, dd), (&a, &b)| (n + ((a - b) as f64).powi(2), dd + (a as f64).powi(2)));
        let rel = if den > 0.0 { (num / den).sqrt() } else { num.sqrt() };
        // Within the format's rounding: int8 half a step of 127, e4m3 half
        // an ulp of 3 mantissa bits (relative L2 well below both); int4
        // only where its fp16 scale and zero hold the row.
        let bound = match format {
            KvFormat::Int8 => Some(0.01),
            KvFormat::Fp8PerHead => Some(0.07),
            _ if (1e-3..=100.0).contains(&mag) => Some(0.25),
            _ => None,
        };
        if bound.is_some_and(|b| !(rel <= b)) {
            return Err(format!("row {r} (magnitude {mag:e}): relative error {rel:.3e} after the round trip"));
        }
    }
    Ok(())
}

/// DeepSeek V3.2's 656-byte rows (`Fp8DsMla`) of latent rows whose four
/// groups have their own magnitudes, from 9.2e-41 (bf16's subnormals) and
/// all-zero groups to 3e38: the GPU's bytes (codes, power-of-two scales,
/// RoPE bits) are the CPU quantizer's, no code is a NaN code, every scale
/// is a power of two (or 0 for an all-zero group) whose group fits under
/// 448 · scale, and the dequantized rows are finite, zeros kept, within
/// e4m3's rounding where the scale is not the least one (2^-126) and the
/// RoPE values exact.
fn extreme_ds_mla_rows(attn: &DecodeAttention, stream: &Stream) -> Result<(), String> {
    let rows = 24u32;
    let shape = DecodeShape { kv_format: KvFormat::Fp8DsMla, ..DecodeShape::latent(1, 16, 1, rows) };
    let lens = vec![rows];
    let mags: [f32; 12] = [9.2e-41, 1e-39, 1e-37, 0.0, 1e-30, 1e-6, 1.0, 448.0, 449.0, 6e4, 1e30, 3e38];
    let d = 576usize;
    let mut rng = decode_attn::testing::Rng::new(78);
    let plain: Vec<f32> = (0..rows as usize * d)
        .map(|i| {
            let (row, dim) = (i / d, i % d);
            // Group g of row r has magnitude mags[(r + 5 g) % 12]; RoPE values are ordinary.
            let mag = if dim < 512 { mags[(row + 5 * (dim / 128)) % mags.len()] } else { 1.0 };
            let x = if dim % 7 == 0 { 0.0 } else { mag * rng.normal().clamp(-1.0, 1.0) as f32 };
            decode_attn::half::bf16::from_f32(x).to_f32()
        })
        .collect();
    let bits: Vec<u16> = plain.iter().map(|&x| to16(x, Dtype::Bf16)).collect();
    let plain_dev = DeviceBuffer::from_slice(&bits).map_err(err)?;
    let lens_dev = DeviceBuffer::from_slice(&lens).map_err(err)?;
    let n_bytes = shape.kv_bytes_required().unwrap() as usize;
    let mut data = DeviceBuffer::from_slice(&vec![0x7Fu8; n_bytes]).map_err(err)?;
    // SAFETY: a view of a live buffer of this function.
    let plain_view = unsafe { TensorRef::from_raw(plain_dev.as_device_ptr().as_raw(), bits.len(), decode_attn::check::dtype_elem(Dtype::Bf16)) };
    attn.quantize_kv(&shape, &StepInputs::lengths(&lens_dev), plain_view, KvMut::plain(&mut data), stream).map_err(err)?;
    stream.synchronize().map_err(err)?;
    let mut got = vec![0u8; n_bytes];
    data.copy_to(&mut got).map_err(err)?;
    let (want, _) = quantize_cache(&shape, &lens, &plain).map_err(err)?;
    if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
        return Err(format!("byte {i} (row {}, byte {} of it) is {:#x} on the GPU, {:#x} on the CPU", i / 656, i % 656, got[i], want[i]));
    }
    let back = dequantize_cache(&shape, &lens, &got, &[]).map_err(err)?;
    // The GPU's dequantization (the MLA kernel's conversion) gives the
    // CPU's values, bit for bit.
    let out = DeviceBuffer::from_slice(&vec![0x7FFFu16; bits.len()]).map_err(err)?;
    // SAFETY: views of live buffers of this function.
    let (data_view, out_view) = unsafe {
        (TensorRef::from_raw(data.as_device_ptr().as_raw(), n_bytes, decode_attn::ElemType::U8), TensorMut::from_raw(out.as_device_ptr().as_raw(), bits.len(), decode_attn::check::dtype_elem(Dtype::Bf16)))
    };
    attn.dequantize_kv(&shape, &lens_dev, data_view, None, out_view, stream).map_err(err)?;
    stream.synchronize().map_err(err)?;
    let mut got16 = vec![0u16; bits.len()];
    out.copy_to(&mut got16).map_err(err)?;
    if let Some(i) = got16.iter().zip(&back).position(|(&a, &b)| a != to16(b, Dtype::Bf16)) {
        return Err(format!("dequantized value {i} (row {}, dim {}) is {:#06x} on the GPU, {:#06x} on the CPU", i / d, i % d, got16[i], to16(back[i], Dtype::Bf16)));
    }
    for r in 0..rows as usize {
        let row = &got[r * 656..(r + 1) * 656];
        if let Some(i) = row[..512].iter().position(|b| b & 0x7f == 0x7f) {
            return Err(format!("row {r}: latent byte {i} is a NaN code ({:#x})", row[i]));
        }
        for g in 0..4 {
            let scale = f32::from_le_bytes(row[512 + 4 * g..516 + 4 * g].try_into().unwrap());
            let xs = &plain[r * d + 128 * g..r * d + 128 * (g + 1)];
            let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
            let pow2 = scale.to_bits() & 0x7F_FFFF == 0 && scale > 0.0;
            if !(scale == 0.0 && amax == 0.0 || pow2 && amax <= 448.0 * scale) {
                return Err(format!("row {r} group {g} (amax {amax:e}): scale {scale:e} is not the least power of two over amax / 448"));
            }
            let ys = &back[r * d + 128 * g..r * d + 128 * (g + 1)];
            if let Some(i) = ys.iter().position(|v| !v.is_finite()) {
                return Err(format!("row {r} group {g}: dequantized value {i} is {}", ys[i]));
            }
            if xs.iter().zip(ys).any(|(&a, &b)| a == 0.0 && b != 0.0) {
                return Err(format!("row {r} group {g}: a zero came back nonzero"));
            }
            let (num, den) = xs.iter().zip(ys).fold((0f64, 0f64), |(n, dd), (&a, &b)| (n + ((a - b) as f64).powi(2), dd + (a as f64).powi(2)));
            let rel = if den > 0.0 { (num / den).sqrt() } else { 0.0 };
            // e4m3's half ulp (2^-4) bounds every value's relative error,
            // but where the least scale leaves values among e4m3's subnormals.
            if scale > f32::MIN_POSITIVE && !(rel <= 0.07) {
                return Err(format!("row {r} group {g} (amax {amax:e}): relative error {rel:.3e} after the round trip"));
            }
        }
        if plain[r * d + 512..(r + 1) * d] != back[r * d + 512..(r + 1) * d] {
            return Err(format!("row {r}: the RoPE values changed"));
        }
    }
    Ok(())
}
