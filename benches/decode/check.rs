//! Each row is checked against the f64 reference before it is timed.

use decode_attn::{Dtype, Plan};

use crate::buffers::{download, BufferSet};

pub const TOLERANCE: f64 = 1e-2;

fn to_f32(bits: &[u16], dtype: Dtype) -> Vec<f32> {
    match dtype {
        Dtype::Bf16 => bits.iter().map(|&b| decode_attn::half::bf16::from_bits(b).to_f32()).collect(),
        Dtype::F16 => bits.iter().map(|&b| decode_attn::half::f16::from_bits(b).to_f32()).collect(),
    }
}

/// ‖a − b‖ / ‖b‖ of two outputs of `dtype` (infinite where either has a
/// non-finite value).
pub fn relative_difference(a: &[u16], b: &[u16], dtype: Dtype) -> f64 {
    let (a, b) = (to_f32(a, dtype), to_f32(b, dtype));
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(&b) {
        if !x.is_finite() || !y.is_finite() {
            return f64::INFINITY;
        }
        num += (x as f64 - y as f64).powi(2);
        den += (y as f64).powi(2);
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// Relative L2 error of the first and last sequences against the f64
/// reference (NHD: each sequence's rows are contiguous, so only they are
/// downloaded). Non-finite output counts as infinitely wrong.
pub fn sampled_error(plan: &Plan, set: &BufferSet) -> Result<f64, String> {
    let shape = plan.shape();
    let mut one = shape.clone();
    one.batch = 1;
    let q_seq = one.q_elems() as usize;
    let kv_seq = shape.kv_strides().batch as usize;
    let side_seq = shape.scale_strides().batch as usize;
    let (mut num, mut den) = (0.0f64, 0.0f64);
    let mut samples = vec![0usize, shape.batch as usize - 1];
    samples.dedup();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for b in samples {
        let at = |buf: &decode_attn::cust::memory::DeviceBuffer<u8>, elems: usize| buf.as_device_ptr().as_raw() + (b * elems * 2) as u64;
        let q = to_f32(&download::<u16>(at(&set.q, q_seq), q_seq)?, shape.dtype);
        if shape.is_latent() {
            let lens = [plan.seq_lens()[b]];
            // One sequence's latent rows (K's), V their first 512 values.
            let o_seq = one.o_elems_checked().unwrap_or(0) as usize;
            let o = to_f32(&download::<u16>(set.o.as_device_ptr().as_raw() + (b * o_seq * 2) as u64, o_seq)?, shape.dtype);
            let latent = decode_attn::reference::LatentShape { batch: 1, num_q_heads: shape.num_q_heads, q_len: shape.q_len, max_seq_len: shape.max_seq_len, dims: decode_attn_abi::MLA_DIMS, scale: shape.softmax_scale() };
            let rows = match &set.scales {
                // fp8: the sequence's bytes and scales, dequantized.
                Some((ks, _)) => {
                    let bytes = download::<u8>(set.k.as_device_ptr().as_raw() + (b * kv_seq) as u64, kv_seq)?;
                    let words = download::<u32>(ks.as_device_ptr().as_raw() + (b * side_seq * 4) as u64, side_seq)?;
                    decode_attn::quant::dequantize_cache(&one, &lens, &bytes, &words).map_err(|e| e.to_string())?
                }
                // fp8-ds-mla: the sequence's rows, scales inside.
                None if shape.kv_format.is_quantized() => {
                    let bytes = download::<u8>(set.k.as_device_ptr().as_raw() + (b * kv_seq) as u64, kv_seq)?;
                    decode_attn::quant::dequantize_cache(&one, &lens, &bytes, &[]).map_err(|e| e.to_string())?
                }
                None => to_f32(&download::<u16>(at(&set.k, kv_seq), kv_seq)?, shape.dtype),
            };
            let r = decode_attn::reference::latent_attention(&latent, &lens, &q, &rows).map_err(|e| e.to_string())?;
            accumulate(&o, &r, &mut num, &mut den)?;
            continue;
        }
        let (k, v) = match (&set.scales, shape.kv_format.required_dtype()) {
            (Some((ks, vs)), _) => {
                // One sequence's quantized rows and scales, dequantized as the kernel sees them.
                let lens = [plan.seq_lens()[b]];
                let bytes_seq = kv_seq * shape.kv_format.bits() as usize / 8;
                let words_seq = side_seq * shape.kv_format.scale_bytes(shape.head_dim) as usize / 4;
                let load = |data: &decode_attn::cust::memory::DeviceBuffer<u8>, side: &decode_attn::cust::memory::DeviceBuffer<u32>| -> Result<Vec<f32>, String> {
                    let bytes = download::<u8>(data.as_device_ptr().as_raw() + (b * bytes_seq) as u64, bytes_seq)?;
                    // (A per-tensor format's one scale serves every sequence.)
                    let words = if shape.kv_format.tensor_scaled() {
                        download::<u32>(side.as_device_ptr().as_raw(), 1)?
                    } else {
                        download::<u32>(side.as_device_ptr().as_raw() + (b * words_seq * 4) as u64, words_seq)?
                    };
                    decode_attn::quant::dequantize_cache(&one, &lens, &bytes, &words).map_err(|e| e.to_string())
                };
                (load(&set.k, ks)?, load(&set.v, vs)?)
            }
            (None, Some(kv_dtype)) => (
                to_f32(&download::<u16>(at(&set.k, kv_seq), kv_seq)?, kv_dtype),
                to_f32(&download::<u16>(at(&set.v, kv_seq), kv_seq)?, kv_dtype),
            ),
            (None, None) => return Err("a quantized row without scales".into()),
        };
        let lens = [plan.seq_lens()[b]];
        let o = to_f32(&download::<u16>(at(&set.o, q_seq), q_seq)?, shape.dtype);
        let heads = decode_attn::reference::HeadInputs { sinks: set.sinks.as_ref().map(|(h, _)| &h[..]), alibi_slopes: set.slopes.as_ref().map(|(h, _)| &h[..]), seq_starts: None, tree: None };
        let r = decode_attn::reference::decode_attention_with(&one, &lens, &q, &k, &v, &heads, &[0], threads).map_err(|e| e.to_string())?;
        accumulate(&o, &r, &mut num, &mut den)?;
    }
    Ok((num / den).sqrt())
}

/// Adds a sequence's squared error and squared reference to the sums; a
/// non-finite output makes both infinite (the row fails).
fn accumulate(o: &[f32], r: &[f64], num: &mut f64, den: &mut f64) -> Result<(), String> {
    let c = decode_attn::reference::relative_l2_error(o, r).map_err(|e| e.to_string())?;
    if c.nonfinite {
        *num = f64::INFINITY;
        return Ok(());
    }
    for (&x, &y) in o.iter().zip(r) {
        *num += (x as f64 - y).powi(2);
        *den += y * y;
    }
    Ok(())
}
