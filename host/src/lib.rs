//! Decode-phase attention for LLM inference on NVIDIA Hopper GPUs, with the
//! kernels written in Rust and compiled to PTX.
//!
//! ```no_run
//! use decode_attn::{DecodeAttention, DecodeShape, PlanOptions, Workspace};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let _ctx = cust::quick_init()?;
//! let stream = cust::stream::Stream::new(cust::stream::StreamFlags::NON_BLOCKING, None)?;
//! let attn = DecodeAttention::new()?;                       // loads the PTX once per context
//! let shape = DecodeShape::bf16(64, 32, 8, 128, 1, 4096);   // batch, Hq, Hkv, D, q_len, capacity
//! let seq_lens = vec![4096u32; 64];
//! let plan = attn.plan(&shape, &seq_lens, &PlanOptions::default())?; // CPU only
//! let mut ws = Workspace::for_plan(&plan)?;
//! # let q = cust::memory::DeviceBuffer::<half::bf16>::zeroed(shape.q_elems() as usize)?;
//! # let k = cust::memory::DeviceBuffer::<half::bf16>::zeroed(shape.kv_elems_required().unwrap() as usize)?;
//! # let v = cust::memory::DeviceBuffer::<half::bf16>::zeroed(shape.kv_elems_required().unwrap() as usize)?;
//! # let mut o = cust::memory::DeviceBuffer::<half::bf16>::zeroed(shape.q_elems() as usize)?;
//! attn.run(&plan, &q, &k, &v, &mut o, &mut ws, &stream)?;  // async on `stream`
//! stream.synchronize()?;
//! # Ok(()) }
//! ```

pub mod check;
pub mod error;
pub mod plan;
pub mod quant;
pub mod reference;
pub mod run;
pub mod shape;
pub mod tensor;
pub mod testing;

pub use decode_attn_abi::{Addressing, Dtype, KvFormat, Variant};
pub use error::{Error, Result};
pub use plan::{DeviceInfo, KernelInfo, Plan, PlanMode, PlanOptions, SplitPolicy, VariantChoice};
pub use quant::{KvMut, QuantizedMut};
pub use run::{DecodeAttention, KvCache, RawDevicePtr, RawStream, StepInputs, Workspace};
pub use shape::{DecodeShape, KvLayout, KvStrides, PageOrder, MAX_PAGE_SIZE};
pub use tensor::{ElemType, Element, TensorMut, TensorRef};
pub use {cust, half};

/// The kernels' PTX, built from `kernels-gpu` by `build.rs`.
pub const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/decode_attn.ptx"));

/// The SM architecture the embedded PTX was built for.
pub const PTX_ARCH: &str = env!("DECODE_ATTN_PTX_ARCH");
