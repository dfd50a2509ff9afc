//! The run step: load the module once per context, fill params from a plan,
//! enqueue the attention kernel and (for split sequences) the merge kernel.
//! No heuristics and no allocation here.

use std::collections::HashMap;
use std::ffi::c_void;

use cust::device::DeviceAttribute;
use cust::function::{BlockSize, FunctionAttribute, GridSize};
use cust::memory::DeviceBuffer;
use cust::module::Module;
use cust::prelude::Stream;
use cust::sys as cuda;
use decode_attn_abi::{decode_kernel_name, merge_kernel_name, Addressing, DecodeParams, Dtype, KvFormat, MergeParams, Variant, DECODE_KERNELS, MERGE_ROWS_PER_BLOCK};

use crate::check::{check_buffers, BufferDesc, RunBuffers};
use crate::error::{ensure, Error, Result};
use crate::plan::{self, DeviceInfo, KernelInfo, Plan, PlanOptions};
use crate::shape::{DecodeShape, KvLayout};
use crate::tensor::{TensorMut, TensorRef};

/// Device memory for one plan's metadata and split partials. Reusable across
/// plans; the metadata upload is skipped when the last plan run in it is the
/// same plan.
pub struct Workspace {
    buf: DeviceBuffer<u8>,
    loaded_plan: Option<u64>,
}

impl Workspace {
    pub fn new(bytes: usize) -> Result<Self> {
        // SAFETY: the kernels read only what `run` uploads first.
        let buf = unsafe { DeviceBuffer::uninitialized(bytes.max(256))? };
        Ok(Workspace { buf, loaded_plan: None })
    }
    /// A workspace sized for `plan`.
    pub fn for_plan(plan: &Plan) -> Result<Self> {
        Self::new(plan.workspace_bytes())
    }
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }
}

/// A KV cache as the kernels read it: K and V values in the shape's layout
/// and, for quantized formats, their per-row scales (`docs/formats.md`).
#[derive(Clone, Copy, Debug)]
pub struct KvCache<'a> {
    pub k: TensorRef<'a>,
    pub v: TensorRef<'a>,
    pub k_scales: Option<TensorRef<'a>>,
    pub v_scales: Option<TensorRef<'a>>,
}

impl<'a> KvCache<'a> {
    /// A bf16 / fp16 cache.
    pub fn plain(k: impl Into<TensorRef<'a>>, v: impl Into<TensorRef<'a>>) -> Self {
        KvCache { k: k.into(), v: v.into(), k_scales: None, v_scales: None }
    }
    /// A quantized cache: int8 values (`u8` buffers) and f32 scales.
    pub fn quantized(
        k: impl Into<TensorRef<'a>>,
        v: impl Into<TensorRef<'a>>,
        k_scales: impl Into<TensorRef<'a>>,
        v_scales: impl Into<TensorRef<'a>>,
    ) -> Self {
        KvCache { k: k.into(), v: v.into(), k_scales: Some(k_scales.into()), v_scales: Some(v_scales.into()) }
    }
}

/// The library's entry point: the loaded kernels and the device they run on.
/// Create one per CUDA context (it must be current when calling `new`).
pub struct DecodeAttention {
    module: Module,
    device: DeviceInfo,
    kernels: HashMap<(KvFormat, Dtype, u32, Variant, Addressing), KernelInfo>,
}

/// Maps a raw driver status (cust keeps its own mapping private).
fn driver(call: &'static str, status: cuda::CUresult) -> Result<()> {
    if status == cuda::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Driver { call, code: status as u32 })
    }
}

fn device_attr(dev: &cust::device::Device, attr: DeviceAttribute) -> Result<u32> {
    Ok(dev.get_attribute(attr)? as u32)
}

impl DecodeAttention {
    /// Loads the PTX into the current context and reads the device's limits.
    pub fn new() -> Result<Self> {
        let module = Module::from_ptx(crate::PTX, &[])?;
        let dev = cust::context::CurrentContext::get_device()?;
        let mut optin = 0i32;
        // SAFETY: plain attribute query on a valid device handle.
        unsafe {
            driver("cuDeviceGetAttribute", cuda::cuDeviceGetAttribute(
                &mut optin,
                cuda::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                dev.as_raw(),
            ))?;
        }
        let device = DeviceInfo {
            sm_count: device_attr(&dev, DeviceAttribute::MultiprocessorCount)?,
            max_smem_per_block: optin as u32,
            max_smem_per_sm: device_attr(&dev, DeviceAttribute::MaxSharedMemoryPerMultiprocessor)?,
            max_threads_per_sm: device_attr(&dev, DeviceAttribute::MaxThreadsPerMultiprocessor)?,
            regs_per_sm: device_attr(&dev, DeviceAttribute::MaxRegistersPerMultiprocessor)?,
            l2_bytes: device_attr(&dev, DeviceAttribute::L2CacheSize)?,
        };
        let mut kernels = HashMap::new();
        for k in DECODE_KERNELS {
            let f = module.get_function(k.name)?;
            // SAFETY: sets a launch limit on a function of this module.
            unsafe {
                driver(
                    "cuFuncSetAttribute",
                    cuda::cuFuncSetAttribute(f.to_raw(), cuda::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin),
                )?;
            }
            let info = KernelInfo {
                max_threads_per_block: f.get_attribute(FunctionAttribute::MaxThreadsPerBlock)? as u32,
                regs_per_thread: f.get_attribute(FunctionAttribute::NumRegisters)? as u32,
            };
            kernels.insert((k.format, k.dtype, k.head_dim, k.variant, k.addressing), info);
        }
        Ok(DecodeAttention { module, device, kernels })
    }

    pub fn device_info(&self) -> &DeviceInfo {
        &self.device
    }

    fn kernel_info(&self, shape: &DecodeShape, variant: Variant) -> Result<KernelInfo> {
        shape.validate()?;
        self.kernels.get(&(shape.kv_format, shape.dtype, shape.head_dim, variant, shape.addressing())).copied().ok_or_else(|| {
            Error::Unsupported(format!(
                "no kernel for a {} cache with {} queries at head_dim {}",
                shape.kv_format.name(),
                shape.dtype.name(),
                shape.head_dim
            ))
        })
    }

    /// Launches kernel `name` with `params` as its single by-value argument.
    ///
    /// # Safety
    /// `P` must be the kernel's `#[repr(C)]` params type, and the launch shape
    /// and every address in `params` must be valid for that kernel.
    pub(crate) unsafe fn launch<P>(&self, name: &str, grid: (u32, u32, u32), threads: u32, smem: u32, params: &P, stream: &Stream) -> Result<()> {
        let func = self.module.get_function(name)?;
        let (gx, gy, gz) = grid;
        stream.launch(&func, GridSize::xyz(gx, gy, gz), BlockSize::x(threads), smem, &[params as *const P as *mut c_void])?;
        Ok(())
    }

    /// Plans one decode step (CPU only; see [`plan::plan`]).
    pub fn plan(&self, shape: &DecodeShape, seq_lens: &[u32], opts: &PlanOptions) -> Result<Plan> {
        let kernel = self.kernel_info(shape, opts.variant_for(shape))?;
        plan::plan(shape, seq_lens, &self.device, &kernel, opts)
    }

    /// Plans one decode step over a paged cache (CPU only; see
    /// [`plan::plan_paged`]): `block_table` is `[batch, shape.pages_per_seq()]`
    /// page ids, checked here and uploaded with the plan.
    pub fn plan_paged(&self, shape: &DecodeShape, seq_lens: &[u32], block_table: &[i32], opts: &PlanOptions) -> Result<Plan> {
        let kernel = self.kernel_info(shape, opts.variant_for(shape))?;
        plan::plan_paged(shape, seq_lens, block_table, &self.device, &kernel, opts)
    }

    /// Enqueues the attention (and merge) kernels on `stream`, for a bf16 or
    /// fp16 cache (quantized caches: [`DecodeAttention::run_cache`]).
    ///
    /// `q`, `o`: `[batch, q_len, num_q_heads, head_dim]` of the plan's dtype;
    /// `k`, `v`: the cache in the plan's format and layout. The call returns
    /// once the work is queued; buffers must stay alive until the stream has
    /// executed it.
    #[allow(clippy::too_many_arguments)]
    pub fn run<'a>(
        &self,
        plan: &Plan,
        q: impl Into<TensorRef<'a>>,
        k: impl Into<TensorRef<'a>>,
        v: impl Into<TensorRef<'a>>,
        o: impl Into<TensorMut<'a>>,
        workspace: &mut Workspace,
        stream: &Stream,
    ) -> Result<()> {
        self.run_marked(plan, q, &KvCache::plain(k, v), o, workspace, stream, None)
    }

    /// Enqueues the attention (and merge) kernels for any cache format: the
    /// cache is one value (values, and scales for quantized formats).
    pub fn run_cache<'a>(
        &self,
        plan: &Plan,
        q: impl Into<TensorRef<'a>>,
        cache: &KvCache<'a>,
        o: impl Into<TensorMut<'a>>,
        workspace: &mut Workspace,
        stream: &Stream,
    ) -> Result<()> {
        self.run_marked(plan, q, cache, o, workspace, stream, None)
    }

    /// As [`DecodeAttention::run_cache`], recording `between` on the stream
    /// after the attention kernel and before the split merge (if the plan has
    /// one), so a benchmark can tell the two kernels' times apart.
    #[allow(clippy::too_many_arguments)]
    pub fn run_marked<'a>(
        &self,
        plan: &Plan,
        q: impl Into<TensorRef<'a>>,
        cache: &KvCache<'a>,
        o: impl Into<TensorMut<'a>>,
        workspace: &mut Workspace,
        stream: &Stream,
        between: Option<&cust::event::Event>,
    ) -> Result<()> {
        let (q, o) = (q.into(), o.into());
        let (k, v) = (cache.k, cache.v);
        let desc = |t: &TensorRef| BufferDesc { addr: t.addr, len: t.len, elem: t.elem };
        check_buffers(
            plan,
            &RunBuffers {
                q: desc(&q),
                k: desc(&k),
                v: desc(&v),
                o: BufferDesc { addr: o.addr, len: o.len, elem: o.elem },
                workspace_bytes: workspace.bytes(),
                k_side: cache.k_scales.as_ref().map(desc),
                v_side: cache.v_scales.as_ref().map(desc),
            },
        )?;
        let shape = &plan.shape;
        // The plan's shape was validated by `plan()`; only the lookup is needed.
        let kernel = self.kernels.get(&(shape.kv_format, shape.dtype, shape.head_dim, plan.variant, shape.addressing())).copied().ok_or_else(|| {
            Error::Unsupported(format!("no kernel for this plan's {} / {} / d{}", shape.kv_format.name(), shape.dtype.name(), shape.head_dim))
        })?;
        ensure(
            plan.block_threads() <= kernel.max_threads_per_block && plan.smem_bytes <= self.device.max_smem_per_block,
            "plan",
            "a plan made by this DecodeAttention (for this device)",
            "one whose block does not fit this device",
        )?;

        let ws = workspace.buf.as_device_ptr().as_raw();
        if workspace.loaded_plan != Some(plan.id) {
            let meta = plan.metadata();
            // SAFETY: the workspace holds at least `metadata_bytes` (checked);
            // a pageable source is staged before this call returns.
            unsafe {
                driver(
                    "cuMemcpyHtoDAsync",
                    cuda::cuMemcpyHtoDAsync_v2(ws, meta.as_ptr() as *const c_void, meta.len(), stream.as_inner()),
                )?;
            }
            workspace.loaded_plan = Some(plan.id);
        }

        let (page_shift, num_pages) = match shape.kv_layout {
            KvLayout::Paged { page_size, num_pages, .. } => (page_size.trailing_zeros(), num_pages),
            _ => (0, 0),
        };
        let strides = shape.kv_strides();
        let bits = shape.kv_format.bits() as u64;
        let side = shape.side_strides();
        let side_entry = shape.kv_format.side_bytes(shape.head_dim) as u64;
        let params = DecodeParams {
            q: q.addr,
            k: k.addr,
            v: v.addr,
            o: o.addr,
            partial_o: ws + plan.layout.partial_o as u64,
            partial_lse: ws + plan.layout.partial_lse as u64,
            work: ws + plan.layout.work as u64,
            seq_lens: ws + plan.layout.seq_lens as u64,
            k_stride_batch: strides.batch * bits / 8,
            k_stride_token: strides.token * bits / 8,
            k_stride_head: strides.head * bits / 8,
            v_stride_batch: strides.batch * bits / 8,
            v_stride_token: strides.token * bits / 8,
            v_stride_head: strides.head * bits / 8,
            k_side: cache.k_scales.map_or(0, |t| t.addr),
            v_side: cache.v_scales.map_or(0, |t| t.addr),
            side_stride_batch: side.batch * side_entry,
            side_stride_token: side.token * side_entry,
            side_stride_head: side.head * side_entry,
            num_q_heads: shape.num_q_heads,
            q_len: shape.q_len,
            group: shape.group_size(),
            rows_per_block: plan.rows_per_block,
            warps_m: plan.warps_m,
            warps_k: plan.warps_k,
            scale_log2: shape.softmax_scale() * std::f32::consts::LOG2_E,
            _pad: 0,
            block_table: if shape.is_paged() { ws + plan.layout.block_table as u64 } else { 0 },
            table_stride: shape.pages_per_seq(),
            page_shift,
            num_pages,
            _pad2: 0,
        };
        let name = decode_kernel_name(shape.kv_format, shape.dtype, shape.head_dim, plan.variant, shape.addressing()).expect("kernel looked up above");
        // SAFETY: the grid, block and shared memory are the plan's; every
        // buffer was checked against the plan's shape above.
        unsafe { self.launch(name, plan.grid(), plan.block_threads(), plan.smem_bytes, &params, stream)? };
        if let Some(event) = between {
            event.record(stream)?;
        }

        if !plan.merges.is_empty() {
            let merge = MergeParams {
                partial_o: params.partial_o,
                partial_lse: params.partial_lse,
                o: o.addr,
                merge: ws + plan.layout.merges as u64,
                num_q_heads: shape.num_q_heads,
                q_len: shape.q_len,
            };
            let name = merge_kernel_name(shape.dtype, shape.head_dim).expect("validated head_dim");
            // SAFETY: reads the slots the attention kernel wrote (same
            // stream, so ordered after it) and writes rows of `o`.
            unsafe { self.launch(name, plan.merge_grid(), 32 * MERGE_ROWS_PER_BLOCK, 0, &merge, stream)? };
        }
        Ok(())
    }
}

impl DecodeAttention {
    /// Fills a bf16/f16 buffer with deterministic pseudo-random values
    /// (`decode_attn_abi::fill_value(seed, index)`, never all zero), on the
    /// device. For tests and benchmarks with caches too large to generate on
    /// the host.
    pub fn fill_random<'a>(&self, buf: impl Into<TensorMut<'a>>, seed: u64, stream: &Stream) -> Result<()> {
        let buf = buf.into();
        let name = match buf.elem {
            crate::tensor::ElemType::Bf16 => decode_attn_abi::FILL_KERNEL_BF16,
            crate::tensor::ElemType::F16 => decode_attn_abi::FILL_KERNEL_F16,
            other => return Err(Error::invalid("buf", "bf16 or f16 elements", other.name())),
        };
        ensure(buf.len % 2 == 0, "buf", "an even number of elements", buf.len)?;
        ensure(buf.addr % 4 == 0, "buf", "a 4-byte aligned pointer", format!("{:#x}", buf.addr))?;
        let params = decode_attn_abi::FillParams { ptr: buf.addr, len: buf.len as u64, seed };
        let blocks = (self.device.sm_count * 8).max(1);
        // SAFETY: writes `len` elements of the checked buffer.
        unsafe { self.launch(name, (blocks, 1, 1), 256, 0, &params, stream) }
    }

    /// Enqueues a one-thread kernel that keeps the GPU busy for `duration`
    /// (benchmarks put it ahead of timed launches so they run back to back
    /// on the device, not at the pace the host enqueues them).
    pub fn gpu_sleep(&self, duration: std::time::Duration, stream: &Stream) -> Result<()> {
        let ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        let params = decode_attn_abi::SleepParams { ns };
        // SAFETY: the kernel touches no memory.
        unsafe { self.launch(decode_attn_abi::SLEEP_KERNEL, (1, 1, 1), 32, 0, &params, stream) }
    }
}
