//! Validation of the buffers handed to `run` against a plan. Pure: takes
//! addresses and lengths, so every rejection is tested without a GPU.

use decode_attn_abi::{Dtype, KvFormat};

use crate::error::{ensure, Result};
use crate::plan::Plan;
use crate::tensor::ElemType;

/// Address, length (elements) and element type of one buffer.
#[derive(Clone, Copy, Debug)]
pub struct BufferDesc {
    pub addr: u64,
    pub len: usize,
    pub elem: ElemType,
}

/// The buffers of one `run` call.
#[derive(Clone, Copy, Debug)]
pub struct RunBuffers {
    pub q: BufferDesc,
    pub k: BufferDesc,
    pub v: BufferDesc,
    pub o: BufferDesc,
    pub workspace_bytes: usize,
    /// Side data (scales) of K and V: required for quantized formats,
    /// rejected for plain ones.
    pub k_side: Option<BufferDesc>,
    pub v_side: Option<BufferDesc>,
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
        KvFormat::Int8 | KvFormat::Int4G32 | KvFormat::Int4G64 | KvFormat::Int4G128 => ElemType::U8,
    }
}

/// Element type of a quantized format's side data (`None`: no side data).
/// int8: f32 scales; int4: (fp16 scale, fp16 zero) pairs as u32 words.
pub fn side_elem(f: KvFormat) -> Option<ElemType> {
    match f {
        KvFormat::Bf16 | KvFormat::F16 => None,
        KvFormat::Int8 => Some(ElemType::F32),
        _ => Some(ElemType::U32),
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
/// alignment, sizes in bytes, no wrap-around, and `o` disjoint from the inputs.
pub fn check_buffers(plan: &Plan, bufs: &RunBuffers) -> Result<()> {
    let shape = &plan.shape;
    let qo_elem = dtype_elem(shape.dtype);
    // `plan()` validated the shape; a failed size computation still rejects
    // (u64::MAX bytes fit no buffer) rather than wraps.
    let q_bytes = shape.q_bytes().unwrap_or(u64::MAX);
    check_buffer("q", &bufs.q, qo_elem, q_bytes)?;
    check_buffer("o", &bufs.o, qo_elem, q_bytes)?;
    let kv_bytes = shape.kv_bytes_required().unwrap_or(u64::MAX);
    let kv = kv_elem(shape.kv_format);
    check_buffer("k", &bufs.k, kv, kv_bytes)?;
    check_buffer("v", &bufs.v, kv, kv_bytes)?;
    let mut inputs = vec![("q", bufs.q), ("k", bufs.k), ("v", bufs.v)];
    match side_elem(shape.kv_format) {
        Some(elem) => {
            let side_bytes = shape.side_bytes_required().unwrap_or(u64::MAX);
            for (name, side) in [("k_scales", bufs.k_side), ("v_scales", bufs.v_side)] {
                let side = side.ok_or_else(|| crate::error::Error::invalid(name, format!("the {} cache's side data ({})", shape.kv_format.name(), elem.name()), "none"))?;
                check_buffer(name, &side, elem, side_bytes)?;
                inputs.push((name, side));
            }
        }
        None => {
            for (name, side) in [("k_scales", bufs.k_side), ("v_scales", bufs.v_side)] {
                ensure(side.is_none(), name, format!("none (a {} cache has no scales)", shape.kv_format.name()), "a buffer")?;
            }
        }
    }
    // The range the kernels write (checked above not to wrap).
    let o_end = bufs.o.addr + q_bytes;
    for (name, other) in &inputs {
        let end = end_of(other).unwrap_or(u64::MAX);
        ensure(o_end <= other.addr || end <= bufs.o.addr, "o", format!("a buffer that does not overlap `{name}`"), "an overlapping one")?;
    }
    ensure(
        bufs.workspace_bytes >= plan.workspace_bytes(),
        "workspace",
        format!("at least {} bytes (Plan::workspace_bytes)", plan.workspace_bytes()),
        bufs.workspace_bytes,
    )?;
    Ok(())
}
