//! decode-attn on memory and a stream owned by `cudarc` (as candle and
//! mistral.rs hold them): a paged bf16 KV cache, a capacity plan made once,
//! and a decode loop of raw-handle calls: append the new K/V row through
//! the block table, attention, grow the lengths on the device. Every step
//! is checked against the f64 reference.
//!
//! Run: `cargo run --release --example cudarc` (the GPU tests run it too).

use cudarc::driver::{CudaContext, CudaSlice, DevicePtr};
use decode_attn::half;
use decode_attn::{reference, DecodeAttention, DecodeShape, ElemType, KvCache, KvLayout, KvMut, PageOrder, PlanOptions, StepInputs, TensorMut, TensorRef};

/// What a run of the example did.
pub struct Outcome {
    pub steps: u32,
    pub worst_rel_l2: f64,
}

/// Relative L2 error the example accepts (the bound of docs/benchmark.md).
const BOUND: f64 = 1e-2;

/// The decode loop; `Ok(None)` when there is no CUDA device.
pub fn run_example() -> Result<Option<Outcome>, Box<dyn std::error::Error>> {
    let ctx = match CudaContext::new(0) {
        Ok(ctx) => ctx,
        Err(_) => return Ok(None),
    };
    let stream = ctx.new_stream()?;
    // cudarc made its context current on this thread; the kernels load into it.
    let attn = DecodeAttention::new()?;

    // 3 sequences of up to 256 tokens, in a pool of 16-token pages.
    let (batch, hq, hkv, d, cap, page) = (3u32, 8u32, 2u32, 128u32, 256u32, 16u32);
    let pages = batch * cap / page;
    let shape = DecodeShape {
        kv_layout: KvLayout::Paged { page_size: page, num_pages: pages + 1, order: PageOrder::TokenMajor, page_bytes: None },
        ..DecodeShape::bf16(batch, hq, hkv, d, 1, cap)
    };
    let plan = attn.plan_capacity(&shape, &PlanOptions::default())?;

    // Device buffers, all cudarc's. Pages are handed out in reverse order.
    let table: Vec<i32> = (0..pages as i32).rev().collect();
    let pool = shape.kv_elems_required().ok_or("pool size")? as usize;
    let k_pool: CudaSlice<u16> = stream.alloc_zeros(pool)?;
    let v_pool: CudaSlice<u16> = stream.alloc_zeros(pool)?;
    let table_dev = stream.clone_htod(&table)?;
    let lens_dev = stream.clone_htod(&vec![1u32; batch as usize])?;
    let q_dev: CudaSlice<u16> = stream.alloc_zeros((batch * hq * d) as usize)?;
    let k_new: CudaSlice<u16> = stream.alloc_zeros((batch * hkv * d) as usize)?;
    let v_new: CudaSlice<u16> = stream.alloc_zeros((batch * hkv * d) as usize)?;
    let o_dev: CudaSlice<u16> = stream.alloc_zeros((batch * hq * d) as usize)?;
    let workspace: CudaSlice<u8> = stream.alloc_zeros(plan.workspace_bytes())?;

    // Raw addresses; the views below get the same checks as cust buffers.
    let ptr = |s: &CudaSlice<u16>| s.device_ptr(&stream).0;
    let (k_ptr, v_ptr, q_ptr, o_ptr, kn_ptr, vn_ptr) = (ptr(&k_pool), ptr(&v_pool), ptr(&q_dev), ptr(&o_dev), ptr(&k_new), ptr(&v_new));
    let (q_len_elems, new_elems, o_elems) = (q_dev.len(), k_new.len(), o_dev.len());
    let (lens_ptr, table_ptr) = (lens_dev.device_ptr(&stream).0, table_dev.device_ptr(&stream).0);
    // SAFETY: as above (u32 lengths, i32 table).
    let step = unsafe {
        StepInputs::paged(TensorRef::from_raw(lens_ptr, batch as usize, ElemType::U32), TensorRef::from_raw(table_ptr, table.len(), ElemType::I32))
    };
    let raw_stream = stream.cu_stream() as decode_attn::RawStream;
    let (ws_ptr, ws_bytes) = (workspace.device_ptr(&stream).0, workspace.len());

    // Host copies for the reference: K and V contiguous `[batch, cap, Hkv, D]`.
    let contig = DecodeShape::bf16(batch, hq, hkv, d, 1, cap);
    let row = (hkv * d) as usize;
    let (mut k_host, mut v_host) = (vec![f32::NAN; (batch * cap) as usize * row], vec![f32::NAN; (batch * cap) as usize * row]);
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut random = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                half::bf16::from_f32(((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0).to_f32()
            })
            .collect()
    };
    let bits = |x: &[f32]| x.iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect::<Vec<u16>>();

    let steps = 60u32;
    let mut worst = 0f64;
    let (mut k_new, mut v_new, mut q_dev) = (k_new, v_new, q_dev);
    for s in 0..steps {
        let len = s + 1; // every sequence: the new token is number `len`
        let (q_h, kn_h, vn_h) = (random((batch * hq * d) as usize), random(batch as usize * row), random(batch as usize * row));
        for b in 0..batch as usize {
            let at = (b * cap as usize + s as usize) * row;
            k_host[at..at + row].copy_from_slice(&kn_h[b * row..(b + 1) * row]);
            v_host[at..at + row].copy_from_slice(&vn_h[b * row..(b + 1) * row]);
        }
        stream.memcpy_htod(&bits(&q_h), &mut q_dev)?;
        stream.memcpy_htod(&bits(&kn_h), &mut k_new)?;
        stream.memcpy_htod(&bits(&vn_h), &mut v_new)?;

        // The step, all on raw handles: append K and V, attention, advance.
        // SAFETY: views of the live cudarc allocations above, of their lengths.
        unsafe {
            let bf16 = |p: u64, n: usize| TensorRef::from_raw(p, n, ElemType::Bf16);
            let bf16_mut = |p: u64, n: usize| TensorMut::from_raw(p, n, ElemType::Bf16);
            attn.append_kv_raw(&shape, &step, bf16(kn_ptr, new_elems), KvMut::plain(bf16_mut(k_ptr, pool)), raw_stream)?;
            attn.append_kv_raw(&shape, &step, bf16(vn_ptr, new_elems), KvMut::plain(bf16_mut(v_ptr, pool)), raw_stream)?;
            let cache = KvCache::plain(bf16(k_ptr, pool), bf16(v_ptr, pool));
            attn.run_raw(&plan, Some(&step), bf16(q_ptr, q_len_elems), &cache, bf16_mut(o_ptr, o_elems), ws_ptr, ws_bytes, raw_stream)?;
        }
        let mut out = vec![0u16; o_dev.len()];
        stream.memcpy_dtoh(&o_dev, &mut out)?;
        stream.synchronize()?;
        // SAFETY: the lengths' view, which the advance kernel writes.
        attn.advance_seq_lens_raw(&shape, unsafe { TensorMut::from_raw(lens_ptr, batch as usize, ElemType::U32) }, 1, raw_stream)?;

        let out: Vec<f32> = out.iter().map(|&b| half::bf16::from_bits(b).to_f32()).collect();
        let expected = reference::decode_attention(&contig, &vec![len; batch as usize], &q_h, &k_host, &v_host)?;
        let cmp = reference::relative_l2_error(&out, &expected)?;
        if cmp.nonfinite || cmp.rel_l2 > BOUND {
            return Err(format!("step {s}: relative L2 error {:.2e} (non-finite: {})", cmp.rel_l2, cmp.nonfinite).into());
        }
        worst = worst.max(cmp.rel_l2);
    }
    Ok(Some(Outcome { steps, worst_rel_l2: worst }))
}

#[allow(dead_code)] // the GPU tests include this file for `run_example`
fn main() {
    match run_example() {
        Ok(Some(o)) => println!("cudarc example: {} decode steps on cudarc memory, worst relative L2 error {:.2e}", o.steps, o.worst_rel_l2),
        Ok(None) => println!("cudarc example: skipped (no CUDA device)"),
        Err(e) => {
            eprintln!("cudarc example failed: {e}");
            std::process::exit(1);
        }
    }
}
