//! Device buffers of one benchmark problem, untyped (bytes) so every dtype
//! and KV format shares the code; views carry the element type.

use std::mem::ManuallyDrop;

use decode_attn::cust::memory::{DeviceBuffer, DeviceCopy, DevicePointer};
use decode_attn::cust::stream::Stream;
use decode_attn::cust::sys as cuda;
use decode_attn::{DecodeAttention, DecodeShape, ElemType, KvCache, TensorMut, TensorRef};

/// A driver call's status as a `Result`.
pub fn cuda(status: cuda::CUresult, what: &str) -> Result<(), String> {
    if status == cuda::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed: {status:?}"))
    }
}


pub fn qo_elem(shape: &DecodeShape) -> ElemType {
    decode_attn::check::dtype_elem(shape.dtype)
}

pub fn kv_elem(shape: &DecodeShape) -> ElemType {
    decode_attn::check::kv_elem(shape.kv_format)
}

/// Q, K, V and O of one problem (and K's and V's scales for quantized caches).
pub struct BufferSet {
    pub q: DeviceBuffer<u8>,
    /// K and V: their own allocations, or (`--kv-gap`) views into `kv_block`
    /// (dropped only when they are their own: see `Drop`).
    pub k: ManuallyDrop<DeviceBuffer<u8>>,
    pub v: ManuallyDrop<DeviceBuffer<u8>>,
    pub o: DeviceBuffer<u8>,
    /// Scales of K and V as 32-bit words (int8 scales, int4 scale/zero pairs).
    pub scales: Option<(DeviceBuffer<u32>, DeviceBuffer<u32>)>,
    side: Option<ElemType>,
    /// A packed paged pool holding this set's K, V and scales: while
    /// set, `views` hands out views into it (see `BufferSet::pack`).
    pool: Option<PackedPool>,
    /// `--kv-gap`: one allocation holding K, then `kv_gap` bytes, then V.
    kv_block: Option<DeviceBuffer<u8>>,
    qo: ElemType,
    kv: ElemType,
    /// The variant's per-head arrays (host values, for the check, and the
    /// device copies the kernels read): sink logits, ALiBi slopes.
    pub sinks: Option<(Vec<f32>, DeviceBuffer<f32>)>,
    pub slopes: Option<(Vec<f32>, DeviceBuffer<f32>)>,
    /// A latent cache (MLA): `k` is the cache, read as K and V alike.
    pub latent: bool,
}

/// Sink logits of a benchmark shape: 0.5 to 2 (a sink a sizeable share of
/// each row's mass, as trained ones are).
fn sink_values(shape: &DecodeShape) -> Vec<f32> {
    (0..shape.num_q_heads).map(|h| 0.5 + 0.5 * (h % 4) as f32).collect()
}

/// ALiBi slopes of a benchmark shape: `2^(−8 (h + 1) / num_q_heads)`.
fn slope_values(shape: &DecodeShape) -> Vec<f32> {
    (0..shape.num_q_heads).map(|h| 2f32.powf(-8.0 * (h + 1) as f32 / shape.num_q_heads as f32)).collect()
}

/// Bytes one set occupies on the device.
pub fn set_bytes(shape: &DecodeShape) -> u64 {
    // (A latent cache is one tensor, K and V alike.)
    let tensors = if shape.is_latent() { 1 } else { 2 };
    shape.q_bytes().unwrap_or(u64::MAX) + shape.o_bytes().unwrap_or(u64::MAX) + tensors * shape.kv_bytes_required().unwrap_or(u64::MAX) + 2 * shape.scale_bytes_required().unwrap_or(u64::MAX)
}

fn alloc(bytes: u64) -> Result<DeviceBuffer<u8>, String> {
    // SAFETY: u8 has no invalid bit patterns; every byte is written (filled
    // or poisoned) before the kernels read it.
    unsafe { DeviceBuffer::uninitialized(bytes as usize) }.map_err(|e| format!("allocating {bytes} B: {e}"))
}

impl BufferSet {
    /// Allocates a set and fills Q, K and V with device-generated random
    /// values (seeded by `seed`; never zeros) and O with NaN. With `kv_gap`
    /// (a multiple of 16) K and V share one allocation, V starting `kv_gap`
    /// bytes after K's end: the distance from a K row to its V row, which
    /// the kernels read together, is then `kv_bytes + kv_gap` exactly.
    pub fn new(attn: &DecodeAttention, shape: &DecodeShape, seed: u64, kv_gap: Option<u64>, stream: &Stream) -> Result<Self, String> {
        let q_bytes = shape.q_bytes().ok_or("q size overflows")?;
        let kv_bytes = shape.kv_bytes_required().ok_or("kv size overflows")?;
        let q = alloc(q_bytes)?;
        let (k, v, kv_block) = match kv_gap {
            // A latent cache's V is its K: a placeholder buffer, never read.
            None if shape.is_latent() => (alloc(kv_bytes)?, alloc(16)?, None),
            None => (alloc(kv_bytes)?, alloc(kv_bytes)?, None),
            Some(gap) => {
                let block = alloc(2 * kv_bytes + gap)?;
                let base = block.as_device_ptr().as_raw();
                // SAFETY: both views lie inside `block`, which the set keeps
                // alive and frees; `Drop` never frees the views themselves.
                let view = |at: u64| unsafe { DeviceBuffer::from_raw_parts(DevicePointer::from_raw(base + at), kv_bytes as usize) };
                (view(0), view(kv_bytes + gap), Some(block))
            }
        };
        let upload = |v: Vec<f32>| -> Result<(Vec<f32>, DeviceBuffer<f32>), String> {
            let d = DeviceBuffer::from_slice(&v).map_err(|e| e.to_string())?;
            Ok((v, d))
        };
        let sinks = shape.variant.sinks.then(|| upload(sink_values(shape))).transpose()?;
        let slopes = shape.variant.alibi.then(|| upload(slope_values(shape))).transpose()?;
        let mut set = BufferSet {
            q,
            k: ManuallyDrop::new(k),
            v: ManuallyDrop::new(v),
            o: alloc(shape.o_bytes().ok_or("o size overflows")?)?,
            latent: shape.is_latent(),
            scales: None,
            pool: None,
            kv_block,
            side: decode_attn::check::scale_elem(shape.kv_format),
            qo: qo_elem(shape),
            kv: kv_elem(shape),
            sinks,
            slopes,
        };
        let e = |e: decode_attn::Error| e.to_string();
        let fill = |buf: &DeviceBuffer<u8>, elem: ElemType, s: u64| {
            // SAFETY: the buffer is alive and written only by this fill.
            let view = unsafe { TensorMut::from_raw(buf.as_device_ptr().as_raw(), buf.len() / elem.size_bytes(), elem) };
            decode_attn::testing::fill_random(attn, view, seed * 16 + s, stream).map_err(e)
        };
        fill(&set.q, set.qo, 1)?;
        if shape.kv_format.is_quantized() {
            // Random 16-bit K and V, quantized on the GPU (every token).
            let lens = DeviceBuffer::from_slice(&vec![shape.max_seq_len; shape.batch as usize]).map_err(|e| e.to_string())?;
            let plain = alloc(shape.plain_shape().kv_elems_required().unwrap_or(0) * 2)?;
            let n_side = (shape.scale_bytes_required().unwrap_or(0) / 4) as usize;
            // SAFETY: every scale is written by the quantize kernel, but a
            // per-tensor format's, which quantizing reads: the fill's
            // largest magnitude (127 / 64) maps to e4m3's largest value.
            let mut scales = if shape.kv_format.tensor_scaled() {
                let s = [decode_attn::quant::fp8_tensor_scale(127.0 / 64.0).to_bits()];
                (DeviceBuffer::from_slice(&s), DeviceBuffer::from_slice(&s))
            } else {
                unsafe { (DeviceBuffer::<u32>::uninitialized(n_side), DeviceBuffer::<u32>::uninitialized(n_side)) }
            };
            let (ks, vs) = (scales.0.as_mut().map_err(|e| e.to_string())?, scales.1.as_mut().map_err(|e| e.to_string())?);
            // (A latent cache is K alone: V is its rows.)
            for (data, side, s) in [(&set.k, ks, 2), (&set.v, vs, 3)].into_iter().take(if set.latent { 1 } else { 2 }) {
                fill(&plain, set.qo, s)?;
                // SAFETY: views of this set's live buffers.
                let (plain_v, data_v) = unsafe {
                    (TensorRef::from_raw(plain.as_device_ptr().as_raw(), plain.len() / 2, set.qo), TensorMut::from_raw(data.as_device_ptr().as_raw(), data.len(), ElemType::U8))
                };
                // (fp8-ds-mla rows hold their scales.)
                let out = match set.side {
                    // SAFETY: a view of this set's live side buffer.
                    Some(elem) => decode_attn::KvMut::quantized(data_v, unsafe { TensorMut::from_raw(side.as_device_ptr().as_raw(), side.len(), elem) }),
                    None => decode_attn::KvMut::plain(data_v),
                };
                attn.quantize_kv(shape, &decode_attn::StepInputs::lengths(&lens), plain_v, out, stream).map_err(e)?;
            }
            stream.synchronize().map_err(|e| e.to_string())?;
            if set.side.is_some() {
                set.scales = Some((scales.0.map_err(|e| e.to_string())?, scales.1.map_err(|e| e.to_string())?));
            }
        } else {
            fill(&set.k, set.kv, 2)?;
            if !set.latent {
                fill(&set.v, set.kv, 3)?;
            }
        }
        set.poison_output(stream)?;
        Ok(set)
    }

    /// Fills O with NaN (0x7FFF in bf16 and f16).
    pub fn poison_output(&self, stream: &Stream) -> Result<(), String> {
        // SAFETY: a memset of the buffer's own bytes.
        let status = unsafe { cuda::cuMemsetD16Async(self.o.as_device_ptr().as_raw(), 0x7FFF, self.o.len() / 2, stream.as_inner()) };
        cuda(status, "cuMemsetD16Async")
    }

    fn view(buf: &DeviceBuffer<u8>, elem: ElemType) -> TensorRef<'_> {
        // SAFETY: the view borrows the buffer.
        unsafe { TensorRef::from_raw(buf.as_device_ptr().as_raw(), buf.len() / elem.size_bytes(), elem) }
    }
    /// Q, the cache (with the variant's sinks and slopes) and O as the
    /// library takes them.
    pub fn views(&mut self) -> (TensorRef<'_>, KvCache<'_>, TensorMut<'_>) {
        let o = &mut self.o;
        // SAFETY: the view borrows `o` mutably for its lifetime.
        let o = unsafe { TensorMut::from_raw(o.as_device_ptr().as_raw(), o.len() / self.qo.size_bytes(), self.qo) };
        let heads = |cache| with_heads(&self.sinks, &self.slopes, cache);
        if let Some(pool) = &self.pool {
            let cache = KvCache::packed(&pool.shape, &pool.buf).expect("a packed shape (made by pack)");
            let cache = match (&self.scales, pool.shape.kv_format.tensor_scaled()) {
                // SAFETY: views of this set's live scale buffers.
                (Some((ks, vs)), true) => unsafe {
                    let scale = |b: &DeviceBuffer<u32>| TensorRef::from_raw(b.as_device_ptr().as_raw(), 1, ElemType::F32);
                    cache.with_fp8_scales(scale(ks), scale(vs))
                },
                _ => cache,
            };
            return (Self::view(&self.q, self.qo), heads(cache), o);
        }
        let (k, v) = (Self::view(&self.k, self.kv), Self::view(&self.v, self.kv));
        let cache = match (&self.scales, self.side) {
            (Some((ks, vs)), Some(elem)) => {
                // SAFETY: views of this set's live side buffers.
                let side = |b: &DeviceBuffer<u32>| unsafe { TensorRef::from_raw(b.as_device_ptr().as_raw(), b.len(), elem) };
                if self.latent {
                    KvCache::latent_quantized(k, side(ks))
                } else {
                    KvCache::quantized(k, v, side(ks), side(vs))
                }
            }
            _ if self.latent => KvCache::latent(k),
            _ => KvCache::plain(k, v),
        };
        (Self::view(&self.q, self.qo), heads(cache), o)
    }
}

/// `cache` with the per-head arrays a set has.
fn with_heads<'a>(sinks: &'a Option<(Vec<f32>, DeviceBuffer<f32>)>, slopes: &'a Option<(Vec<f32>, DeviceBuffer<f32>)>, mut cache: KvCache<'a>) -> KvCache<'a> {
    if let Some((_, d)) = sinks {
        cache = cache.with_sinks(d);
    }
    if let Some((_, d)) = slopes {
        cache = cache.with_alibi_slopes(d);
    }
    cache
}

/// One buffer whose pages hold K's rows, V's rows and their scales
/// (`KvLayout::Paged { page_bytes: Some(..) }`).
struct PackedPool {
    buf: DeviceBuffer<u8>,
    shape: DecodeShape,
}

/// Copies `height` rows of `width` bytes from `src` (rows `width` apart) to
/// `dst` (rows `pitch` apart).
fn copy_pitched(dst: u64, pitch: u64, src: u64, width: u64, height: u64) -> Result<(), String> {
    let m = cuda::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: cuda::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcHost: std::ptr::null(),
        srcDevice: src,
        srcArray: std::ptr::null_mut(),
        srcPitch: width as usize,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: cuda::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstHost: std::ptr::null_mut(),
        dstDevice: dst,
        dstArray: std::ptr::null_mut(),
        dstPitch: pitch as usize,
        WidthInBytes: width as usize,
        Height: height as usize,
    };
    // SAFETY: the caller names live device ranges of these extents.
    cuda(unsafe { cuda::cuMemcpy2D_v2(&m) }, "cuMemcpy2D")
}

impl BufferSet {
    /// Builds a packed pool of `packed`'s geometry from this set's values
    /// (NHD rows of whole pages: token-major pages, identity table) and
    /// `side` (the scales in the dense paged layout `dense`, from
    /// `paged_side`), and makes `views` hand out views into it until
    /// `unpack`.
    pub fn pack(&mut self, dense: &DecodeShape, packed: &DecodeShape, side: Option<&(DeviceBuffer<u32>, DeviceBuffer<u32>)>) -> Result<(), String> {
        let decode_attn::KvLayout::Paged { num_pages, .. } = dense.kv_layout else { return Err("not a paged shape".into()) };
        let page = packed.packed_page().ok_or("not a paged shape")?;
        let n = num_pages as u64;
        let (rows, side_page) = (page.v, page.v_scales - page.k_scales);
        let buf = alloc(n * page.page_bytes)?;
        let base = buf.as_device_ptr().as_raw();
        copy_pitched(base, page.page_bytes, self.k.as_device_ptr().as_raw(), rows, n)?;
        copy_pitched(base + page.v, page.page_bytes, self.v.as_device_ptr().as_raw(), rows, n)?;
        if let Some((ks, vs)) = side.filter(|_| side_page > 0) {
            copy_pitched(base + page.k_scales, page.page_bytes, ks.as_device_ptr().as_raw(), side_page, n)?;
            copy_pitched(base + page.v_scales, page.page_bytes, vs.as_device_ptr().as_raw(), side_page, n)?;
        }
        self.pool = Some(PackedPool { buf, shape: packed.clone() });
        Ok(())
    }

    /// Drops the packed pool: `views` hands out the set's own buffers again.
    pub fn unpack(&mut self) {
        self.pool = None;
    }

    /// Swaps this set's scales for the same entries laid out as the
    /// paged shape `paged` with the identity table (sequence b's tokens in
    /// pages `b·pages_per_seq ..`; the values need no change: NHD rows of
    /// whole pages are already token-major pages). Call again with the
    /// returned buffers to swap back.
    pub fn swap_side(&mut self, side: (DeviceBuffer<u32>, DeviceBuffer<u32>)) -> Option<(DeviceBuffer<u32>, DeviceBuffer<u32>)> {
        self.scales.replace(side)
    }

    /// This set's scales in `paged`'s layout (see [`BufferSet::swap_side`]).
    pub fn paged_side(&self, contiguous: &DecodeShape, paged: &DecodeShape) -> Result<Option<(DeviceBuffer<u32>, DeviceBuffer<u32>)>, String> {
        let Some((ks, vs)) = &self.scales else { return Ok(None) };
        let decode_attn::KvLayout::Paged { page_size, .. } = paged.kv_layout else { return Err("not a paged shape".into()) };
        if contiguous.kv_format.tensor_scaled() {
            // One scale per tensor, whatever the layout.
            let copy = |b: &DeviceBuffer<u32>| DeviceBuffer::from_slice(&download::<u32>(b.as_device_ptr().as_raw(), 1)?).map_err(|e| e.to_string());
            return Ok(Some((copy(ks)?, copy(vs)?)));
        }
        let words = (contiguous.kv_format.scale_bytes(contiguous.head_dim) / 4) as u64;
        let (c, p) = (contiguous.scale_strides(), paged.scale_strides());
        let (ps, per_seq) = (page_size as u64, paged.pages_per_seq() as u64);
        let n_paged = (paged.scale_bytes_required().unwrap_or(0) / 4) as usize;
        let permute = |buf: &DeviceBuffer<u32>| -> Result<DeviceBuffer<u32>, String> {
            let old = download::<u32>(buf.as_device_ptr().as_raw(), buf.len())?;
            let mut new = vec![0u32; n_paged];
            for b in 0..contiguous.batch as u64 {
                for t in 0..contiguous.max_seq_len as u64 {
                    let page = b * per_seq + t / ps;
                    for h in 0..contiguous.num_kv_heads as u64 {
                        let from = ((b * c.batch + t * c.token + h * c.head) * words) as usize;
                        let to = ((page * p.batch + (t % ps) * p.token + h * p.head) * words) as usize;
                        new[to..to + words as usize].copy_from_slice(&old[from..from + words as usize]);
                    }
                }
            }
            DeviceBuffer::from_slice(&new).map_err(|e| e.to_string())
        };
        Ok(Some((permute(ks)?, permute(vs)?)))
    }
}

/// Copies `n` values of type `T` from device address `addr`.
pub fn download<T: DeviceCopy + Default + Clone>(addr: u64, n: usize) -> Result<Vec<T>, String> {
    let mut h = vec![T::default(); n];
    // SAFETY: `h` has room for `n` values; the caller names a live range.
    let status = unsafe { cuda::cuMemcpyDtoH_v2(h.as_mut_ptr() as *mut std::ffi::c_void, addr, n * std::mem::size_of::<T>()) };
    cuda(status, "cuMemcpyDtoH")?;
    Ok(h)
}

impl Drop for BufferSet {
    fn drop(&mut self) {
        if self.kv_block.is_none() {
            // SAFETY: K and V are their own allocations here, dropped once.
            unsafe {
                ManuallyDrop::drop(&mut self.k);
                ManuallyDrop::drop(&mut self.v);
            }
        }
    }
}
