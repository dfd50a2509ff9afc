//! Decode-phase attention for LLM inference on NVIDIA Hopper GPUs, with the
//! kernels written in Rust and compiled to PTX.
//!
//! ```no_run
//! use decode_attn::{DecodeAttention, DecodeShape, KvCache, PlanOptions, Workspace};
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
//! attn.run(&plan, &q, &KvCache::plain(&k, &v), &mut o, &mut ws, &stream)?;  // async on `stream`
//! stream.synchronize()?;
//! # Ok(()) }
//! ```
//!
//! Serving: a paged pool, one capacity plan for every step, and a step that
//! reads its lengths and block table on the device (so it can be captured in
//! a CUDA graph and replayed):
//!
//! ```no_run
//! use decode_attn::{DecodeAttention, DecodeShape, KvCache, KvLayout, KvMut, PageOrder, PlanOptions, StepInputs, Workspace};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let _ctx = cust::quick_init()?;
//! # let stream = cust::stream::Stream::new(cust::stream::StreamFlags::NON_BLOCKING, None)?;
//! # let attn = DecodeAttention::new()?;
//! # let (max_batch, max_len, num_pages) = (64u32, 4096u32, 64 * 256);
//! let shape = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages, order: PageOrder::TokenMajor, page_bytes: None },
//!                           ..DecodeShape::bf16(max_batch, 32, 8, 128, 1, max_len) };
//! let plan = attn.plan_capacity(&shape, &PlanOptions::default())?;
//! let mut ws = Workspace::for_plan(&plan)?;
//! # let z = |n: u64| cust::memory::DeviceBuffer::<half::bf16>::zeroed(n as usize);
//! # let (mut k_pool, mut v_pool) = (z(shape.kv_elems_required().unwrap())?, z(shape.kv_elems_required().unwrap())?);
//! # let (q, mut o) = (z(shape.q_elems())?, z(shape.q_elems())?);
//! # let (k_new, v_new) = (z((max_batch * 8 * 128) as u64)?, z((max_batch * 8 * 128) as u64)?);
//! # let mut seq_lens_dev = cust::memory::DeviceBuffer::from_slice(&vec![1u32; max_batch as usize])?;
//! # let block_table_dev = cust::memory::DeviceBuffer::from_slice(&(0..(max_batch * 256) as i32).collect::<Vec<_>>())?;
//! for _token in 0..100 {
//!     let step = StepInputs::paged(&seq_lens_dev, &block_table_dev);
//!     attn.append_kv(&shape, &step, &k_new, KvMut::plain(&mut k_pool), &stream)?;
//!     attn.append_kv(&shape, &step, &v_new, KvMut::plain(&mut v_pool), &stream)?;
//!     attn.run_step(&plan, &step, &q, &KvCache::plain(&k_pool, &v_pool), &mut o, &mut ws, &stream)?;
//!     attn.advance_seq_lens(&shape, &mut seq_lens_dev, 1, &stream)?;
//! }
//! # Ok(()) }
//! ```

/// `pub` where the `internals` feature is on (the tests, the bench and
/// the fuzzer enable it), `pub(crate)` otherwise: the planner's parts, the
/// references and the test utilities are not the library's API.
macro_rules! internal {
    ($(#[$meta:meta])* pub $($item:tt)*) => {
        $(#[$meta])*
        #[cfg(feature = "internals")]
        pub $($item)*
        $(#[$meta])*
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code, unused_imports)]
        pub(crate) $($item)*
    };
}

mod attention;
mod kernel_table;
mod launch_ex;
mod module;
mod view;
internal! { pub mod cache; }
internal! { pub mod check; }
internal! { pub mod error; }
internal! { pub mod heuristics; }
internal! { pub mod occupancy; }
internal! { pub mod options; }
internal! { pub mod params; }
internal! { pub mod plan; }
internal! { pub mod quant; }
internal! { pub mod reference; }
internal! { pub mod shape; }
internal! { pub mod tensor; }
internal! { pub mod testing; }
internal! { pub mod tuning; }
internal! { pub mod variant; }
internal! { pub mod work; }

pub use attention::{DecodeAttention, Workspace};
pub use cache::{KvCache, KvMut, KvTensor, StepInputs};
pub use decode_attn_abi::{Dtype, Family, HeadDims, KvFormat, MLA_DIMS};
pub use error::{Error, Result};
pub use module::{ModuleSource, RawStream};
pub use options::{FamilyChoice, HeadPairChoice, MergeChoice, PlanOptions, SpecializeChoice, SplitPolicy, TransposeChoice};
pub use plan::Plan;
pub use shape::{DecodeShape, KvLayout, KvStrides, PackedPage, PageOrder};
pub use tensor::{ElemType, TensorMut, TensorRef};
pub use variant::{VariantBuffers, VariantSpec};
/// The `cust` types the API takes: streams and device buffers.
#[doc(no_inline)]
pub use cust::{memory::DeviceBuffer, stream::Stream};
internal! { pub use decode_attn_abi::{Addressing, Variant}; }
internal! { pub use heuristics::MergeMode; }
internal! { pub use occupancy::{DeviceInfo, KernelInfo, KernelLimits}; }
internal! { pub use plan::PlanMode; }
internal! { pub use tuning::{DeviceFacts, Knob, Tuning}; }
internal! { pub use shape::MAX_PAGE_SIZE; }
internal! { pub use tensor::{BufferDesc, Element}; }
internal! { pub use {cust, half}; }

/// One architecture's kernels as this build embeds them
/// (`decode_attn_abi::Arch`): the fatbin ptxas compiled (the cubin, and
/// for a portable architecture its PTX too), or in a build without ptxas
/// the PTX alone.
#[doc(hidden)]
pub struct ModuleImage {
    pub arch: decode_attn_abi::Arch,
    /// `None` when the build found no ptxas (a build warning says so;
    /// [`ModuleSource::EMBEDDED`]).
    pub fatbin: Option<&'static [u8]>,
    /// Embedded only where there is no fatbin.
    pub ptx: Option<&'static str>,
    /// ptxas's `-v` report of the fatbin's cubin (registers, stack, spills
    /// per kernel); empty when there is no fatbin.
    pub ptxas_report: &'static str,
}

macro_rules! module_image {
    ($arch:ident, $name:literal) => {
        ModuleImage {
            arch: decode_attn_abi::Arch::$arch,
            fatbin: {
                const BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".fatbin"));
                if BYTES.is_empty() {
                    None
                } else {
                    Some(BYTES)
                }
            },
            ptx: {
                const TEXT: &str = include_str!(concat!(env!("OUT_DIR"), "/", $name, ".embedded.ptx"));
                if TEXT.is_empty() {
                    None
                } else {
                    Some(TEXT)
                }
            },
            ptxas_report: include_str!(concat!(env!("OUT_DIR"), "/", $name, ".ptxas-report.txt")),
        }
    };
}

/// Every architecture's kernels, in `Arch::ALL`'s order (the list
/// `build.rs` writes from it).
#[doc(hidden)]
pub const MODULE_IMAGES: [ModuleImage; decode_attn_abi::Arch::ALL.len()] = include!(concat!(env!("OUT_DIR"), "/module_images.rs"));

/// The PTX files this build made (sm_80, sm_89, sm_90a; 179 MB for
/// sm_90a, not embedded where there is a fatbin): what the tests check.
#[doc(hidden)]
pub fn ptx_file(arch: decode_attn_abi::Arch) -> &'static str {
    env!("DECODE_ATTN_PTX_FILES").split(';').nth(arch as usize).unwrap_or("")
}
