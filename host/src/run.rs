//! The run step: load the module once per context, fill params from a plan,
//! enqueue the attention kernel (split sequences are merged inside it, by
//! their last block or by a thread-block cluster per sequence, or by the
//! merge kernel after it, as the plan says);
//! capacity plans' blocks read the lengths on the device. No heuristics and
//! no allocation here. Every entry point exists for `cust` types and for raw
//! `CUdeviceptr` / `CUstream` handles (the `_raw` methods, for cudarc,
//! candle or PyTorch memory); both go through the same checks.

use std::collections::HashMap;
use std::ffi::c_void;

use cust::device::DeviceAttribute;
use cust::function::FunctionAttribute;
use cust::memory::DeviceBuffer;
use cust::module::Module;
use cust::prelude::Stream;
use cust::sys as cuda;
use decode_attn_abi::{
    decode_kernel_name, merge_kernel_name, DecodeParams, Family, Form, KernelId, Merge, MergeParams, DECODE_KERNELS, MERGE_KERNELS, MERGE_THREADS,
    QUANT_KERNELS, UTILITY_KERNELS,
};

use crate::check::{check_buffer, check_buffers, RunBuffers};
use crate::launch_ex::{LaunchAttr, LaunchEx};
use crate::error::{ensure, Error, Result};
use crate::plan::{self, DeviceInfo, KernelInfo, MergeMode, Plan, PlanMode, PlanOptions};
use crate::quant::KvTensor;
use crate::shape::DecodeShape;
use crate::tensor::{ElemType, TensorMut, TensorRef};

/// A raw device address (`CUdeviceptr`), as cudarc, candle or PyTorch hand them out.
pub type RawDevicePtr = cuda::CUdeviceptr;
/// A raw stream handle (`CUstream`); null is the legacy default stream.
pub type RawStream = cuda::CUstream;

/// Device memory for one plan's metadata and split partials. Reusable across
/// plans; the metadata upload (capacity plans: the merge-counter reset) is
/// skipped when the last plan run in it is the same plan.
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
    /// The cache in one packed pool (`shape`: `KvLayout::Paged` with
    /// `page_bytes` of [`DecodeShape::packed_page`]): views of `pool`'s bytes
    /// at the page offsets, typed as the format's values and side data, so
    /// no `from_raw` is needed. Their lengths are checked when the cache is
    /// run, like any buffers'.
    pub fn packed(shape: &DecodeShape, pool: impl Into<TensorRef<'a>>) -> Result<Self> {
        let pool = pool.into();
        let part = |(offset, elem): (u64, ElemType)| pool.tail(offset, elem).ok_or_else(|| pool_too_short(offset, &pool.desc()));
        let (k, k_side) = packed_parts(shape, KvTensor::K)?;
        let (v, v_side) = packed_parts(shape, KvTensor::V)?;
        Ok(KvCache { k: part(k)?, v: part(v)?, k_scales: k_side.map(part).transpose()?, v_scales: v_side.map(part).transpose()? })
    }
}

/// Where tensor `tensor`'s values and side data start in a page of the
/// packed pool `shape` describes, with their element types; an error
/// unless `shape` is a packed layout (`page_bytes` of `packed_page`).
pub(crate) fn packed_parts(shape: &DecodeShape, tensor: KvTensor) -> Result<((u64, ElemType), Option<(u64, ElemType)>)> {
    let page = shape.packed_page().ok_or_else(|| Error::invalid("kv_layout", "a paged layout (KvLayout::Paged) for a packed pool", "another layout"))?;
    let crate::shape::KvLayout::Paged { page_bytes, .. } = shape.kv_layout else { unreachable!("packed_page is Some only for paged layouts") };
    ensure(
        page_bytes == Some(page.page_bytes),
        "kv_layout.page_bytes",
        format!("Some({}) (DecodeShape::packed_page) for a packed pool", page.page_bytes),
        format!("{page_bytes:?}"),
    )?;
    let (data, side) = match tensor {
        KvTensor::K => (0, page.k_side),
        KvTensor::V => (page.v, page.v_side),
    };
    Ok(((data, crate::check::kv_elem(shape.kv_format)), crate::check::side_elem(shape.kv_format).map(|e| (side, e))))
}

pub(crate) fn pool_too_short(offset: u64, pool: &crate::check::BufferDesc) -> Error {
    Error::invalid("pool", format!("a buffer reaching past byte {offset} (the page's last part)"), format!("{} bytes", pool.len * pool.elem.size_bytes()))
}

/// What a capacity plan's run reads from device memory each step (see
/// [`plan::PlanMode::Capacity`]): the current lengths, new tokens included,
/// and for paged caches the block table. Lengths above the capacity are
/// read as the capacity and page ids outside the pool as its last page, so
/// no device value makes a kernel touch memory outside its buffers.
#[derive(Clone, Copy, Debug)]
pub struct StepInputs<'a> {
    /// `[batch]` u32.
    pub seq_lens: TensorRef<'a>,
    /// Paged caches: `[batch, pages_per_seq]` i32 page ids (row-major).
    pub block_table: Option<TensorRef<'a>>,
}

impl<'a> StepInputs<'a> {
    /// Lengths only (contiguous caches).
    pub fn lengths(seq_lens: impl Into<TensorRef<'a>>) -> Self {
        StepInputs { seq_lens: seq_lens.into(), block_table: None }
    }
    /// Lengths and a block table (paged caches).
    pub fn paged(seq_lens: impl Into<TensorRef<'a>>, block_table: impl Into<TensorRef<'a>>) -> Self {
        StepInputs { seq_lens: seq_lens.into(), block_table: Some(block_table.into()) }
    }

    /// Checks the step's buffers against a shape: `batch` lengths, and a
    /// table of `batch × pages_per_seq` ids exactly when the shape is paged
    /// (what every entry point taking them checks first).
    pub fn check_for(&self, shape: &DecodeShape) -> Result<()> {
        check_buffer("seq_lens", &self.seq_lens.desc(), ElemType::U32, shape.batch as u64 * 4)?;
        match (shape.is_paged(), &self.block_table) {
            (true, Some(t)) => check_buffer("block_table", &t.desc(), ElemType::I32, shape.batch as u64 * shape.pages_per_seq() as u64 * 4),
            (true, None) => Err(Error::invalid("block_table", "a [batch, pages_per_seq] i32 table for the paged layout", "none")),
            (false, Some(_)) => Err(Error::invalid("block_table", "none (the cache is not paged)", "a table")),
            (false, None) => Ok(()),
        }
    }
}

/// The library's entry point: the loaded kernels and the device they run on.
/// Create one per CUDA context (it must be current when calling `new`).
pub struct DecodeAttention {
    /// Keeps the functions below alive.
    _module: Module,
    source: ModuleSource,
    device: DeviceInfo,
    kernels: HashMap<KernelId, KernelInfo>,
    /// Every kernel of the module, looked up once: launching then makes no
    /// driver call but the launch (safe inside a stream capture).
    functions: HashMap<&'static str, cuda::CUfunction>,
    /// `cuLaunchKernelEx`, for cluster-merge plans (`None`: the driver has
    /// none, and `device.max_cluster` is 0).
    launch_ex: Option<LaunchEx>,
}

// SAFETY: CUfunction handles are plain driver handles, valid in the module's
// context from any thread; the struct has no interior mutability.
unsafe impl Send for DecodeAttention {}
unsafe impl Sync for DecodeAttention {}

/// Maps a raw driver status (cust keeps its own mapping private).
fn driver(call: &'static str, status: cuda::CUresult) -> Result<()> {
    if status == cuda::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Driver { call, code: status as u32 })
    }
}

/// Where [`DecodeAttention::new`] took the kernels' module from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleSource {
    /// The embedded fatbin ([`crate::FATBIN`]): the cubin ptxas compiled
    /// at build time, loaded with no driver compilation.
    Fatbin,
    /// The embedded PTX, compiled by the driver (and cached in its
    /// compute cache): on devices of another architecture than
    /// [`crate::PTX_ARCH`], in builds without ptxas, or where the driver
    /// refused the fatbin.
    Ptx,
}

/// The kernels' module: the embedded fatbin where the current device is of
/// the architecture it was compiled for (the driver then compiles nothing:
/// ~500 kernels took it minutes from the PTX on a cold cache), else the
/// PTX.
fn load_module(dev: &cust::device::Device) -> Result<(Module, ModuleSource)> {
    let (major, minor) = (device_attr(dev, DeviceAttribute::ComputeCapabilityMajor)?, device_attr(dev, DeviceAttribute::ComputeCapabilityMinor)?);
    // `sm_90a` is compiled for compute capability 9.0 exactly.
    let arch = crate::PTX_ARCH.trim_start_matches("sm_").trim_end_matches('a');
    if let Some(fatbin) = crate::FATBIN.filter(|_| arch == format!("{major}{minor}")) {
        if let Ok(module) = Module::from_fatbin(fatbin, &[]) {
            return Ok((module, ModuleSource::Fatbin));
        }
    }
    Ok((Module::from_ptx(crate::PTX, &[])?, ModuleSource::Ptx))
}

fn device_attr(dev: &cust::device::Device, attr: DeviceAttribute) -> Result<u32> {
    Ok(dev.get_attribute(attr)? as u32)
}

impl DecodeAttention {
    /// Loads the kernels into the current context ([`ModuleSource`]) and
    /// reads the device's limits.
    pub fn new() -> Result<Self> {
        let dev = cust::context::CurrentContext::get_device()?;
        let (module, source) = load_module(&dev)?;
        let mut optin = 0i32;
        // SAFETY: plain attribute query on a valid device handle.
        unsafe {
            driver("cuDeviceGetAttribute", cuda::cuDeviceGetAttribute(
                &mut optin,
                cuda::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                dev.as_raw(),
            ))?;
        }
        // Clusters: compute capability 9.0+, launched with cuLaunchKernelEx.
        let launch_ex = if device_attr(&dev, DeviceAttribute::ComputeCapabilityMajor)? >= 9 { LaunchEx::load() } else { None };
        let device = DeviceInfo {
            max_cluster: if launch_ex.is_some() { 8 } else { 0 },
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
            kernels.insert(k.id, info);
        }
        let names = DECODE_KERNELS.iter().map(|k| k.name).chain(MERGE_KERNELS.iter().map(|k| k.name)).chain(QUANT_KERNELS.iter().map(|k| k.name)).chain(UTILITY_KERNELS);
        let mut functions = HashMap::new();
        for name in names {
            functions.insert(name, module.get_function(name)?.to_raw());
        }
        Ok(DecodeAttention { _module: module, source, device, kernels, functions, launch_ex })
    }

    pub fn device_info(&self) -> &DeviceInfo {
        &self.device
    }

    /// Where the kernels were loaded from.
    pub fn module_source(&self) -> ModuleSource {
        self.source
    }

    fn kernel_info(&self, shape: &DecodeShape, family: Family) -> Result<ShapeKernels> {
        shape.validate()?;
        // Plans are made for the global-merge kernels; a cluster plan's
        // kernel is checked against its block when it runs.
        let id = |form| KernelId {
            format: shape.kv_format,
            dtype: shape.dtype,
            head_dim: shape.head_dim,
            family,
            addressing: shape.addressing(),
            merge: Merge::Global,
            form,
            variant: shape.variant(),
        };
        let unspecialized = self.kernels.get(&id(Form::Plain)).copied().ok_or_else(|| {
            Error::Unsupported(format!(
                "no {} kernel for a {} cache with {} queries at head_dim {} ({} softmax)",
                family.name(),
                shape.kv_format.name(),
                shape.dtype.name(),
                shape.head_dim,
                shape.variant().name()
            ))
        })?;
        Ok(ShapeKernels { unspecialized, specialized: self.kernels.get(&id(Form::Specialized)).copied(), capacity: self.kernels.get(&id(Form::Capacity)).copied() })
    }

    /// Launches kernel `name` with `params` as its single by-value argument.
    ///
    /// # Safety
    /// `P` must be the kernel's `#[repr(C)]` params type, and the launch shape
    /// and every address in `params` must be valid for that kernel.
    pub(crate) unsafe fn launch<P>(&self, name: &str, grid: (u32, u32, u32), threads: u32, smem: u32, params: &P, stream: RawStream) -> Result<()> {
        let func = self.function(name)?;
        let (gx, gy, gz) = grid;
        let mut args = [params as *const P as *mut c_void];
        driver("cuLaunchKernel", cuda::cuLaunchKernel(func, gx, gy, gz, threads, 1, 1, smem, stream, args.as_mut_ptr(), std::ptr::null_mut()))
    }

    /// A function of the module by name.
    fn function(&self, name: &str) -> Result<cuda::CUfunction> {
        self.functions.get(name).copied().ok_or_else(|| Error::Unsupported(format!("kernel {name} is not in the module")))
    }

    /// The driver's cluster entry points (none before CUDA 12).
    fn cluster_launcher(&self) -> Result<LaunchEx> {
        self.launch_ex.ok_or_else(|| Error::Unsupported("thread-block clusters: this driver has no cuLaunchKernelEx".into()))
    }

    /// [`DecodeAttention::launch`] as clusters of `cluster` blocks along x.
    ///
    /// # Safety
    /// As [`DecodeAttention::launch`]; `grid.0` a multiple of `cluster`.
    unsafe fn launch_clusters<P>(&self, name: &str, grid: (u32, u32, u32), threads: u32, smem: u32, cluster: u32, params: &P, stream: RawStream) -> Result<()> {
        let (func, launcher) = (self.function(name)?, self.cluster_launcher()?);
        ensure(cluster.is_power_of_two() && grid.0 % cluster == 0, "plan", format!("a grid of whole clusters of {cluster} blocks"), grid.0)?;
        let mut args = [params as *const P as *mut c_void];
        driver("cuLaunchKernelEx", launcher.launch(func, grid, threads, smem, LaunchAttr::Cluster(cluster), stream, args.as_mut_ptr()))
    }

    /// [`DecodeAttention::launch`] of a kernel that reads the results of the
    /// stream's previous kernel only after `griddepcontrol.wait`: with
    /// `cuLaunchKernelEx` it is a programmatic dependent launch, whose blocks
    /// are scheduled while that kernel finishes (it executed
    /// `griddepcontrol.launch_dependents`) instead of after it; without, a
    /// plain launch (the wait is then a no-op).
    ///
    /// # Safety
    /// As [`DecodeAttention::launch`].
    unsafe fn launch_overlapping<P>(&self, name: &str, grid: (u32, u32, u32), threads: u32, smem: u32, params: &P, stream: RawStream) -> Result<()> {
        let Some(launcher) = self.launch_ex else { return self.launch(name, grid, threads, smem, params, stream) };
        let func = self.function(name)?;
        let mut args = [params as *const P as *mut c_void];
        driver("cuLaunchKernelEx", launcher.launch(func, grid, threads, smem, LaunchAttr::OverlapPrevious, stream, args.as_mut_ptr()))
    }

    /// How many of a cluster-merge plan's clusters can be resident at once
    /// on this device (`cuOccupancyMaxActiveClusters`; `None` for plans
    /// without clusters): fewer than the grid has means a second wave.
    pub fn resident_clusters(&self, plan: &Plan) -> Result<Option<u32>> {
        if plan.cluster <= 1 {
            return Ok(None);
        }
        let (func, launcher) = (self.function(plan_kernel_name(plan)?)?, self.cluster_launcher()?);
        // SAFETY: an occupancy query on a function of this module.
        let n = unsafe { launcher.max_active_clusters(func, plan.grid(), plan.block_threads(), plan.smem_bytes, plan.cluster) };
        n.map(Some).map_err(|code| Error::Driver { call: "cuOccupancyMaxActiveClusters", code: code as u32 })
    }

    /// Plans one decode step (CPU only; see [`plan::plan`]).
    pub fn plan(&self, shape: &DecodeShape, seq_lens: &[u32], opts: &PlanOptions) -> Result<Plan> {
        let kernel = self.kernel_info(shape, opts.family_for(shape))?;
        plan::plan(shape, seq_lens, &self.device, &kernel, opts)
    }

    /// Plans one decode step over a paged cache (CPU only; see
    /// [`plan::plan_paged`]): `block_table` is `[batch, shape.pages_per_seq()]`
    /// page ids, checked here and uploaded with the plan.
    pub fn plan_paged(&self, shape: &DecodeShape, seq_lens: &[u32], block_table: &[i32], opts: &PlanOptions) -> Result<Plan> {
        let kernel = self.kernel_info(shape, opts.family_for(shape))?;
        plan::plan_paged(shape, seq_lens, block_table, &self.device, &kernel, opts)
    }

    /// Plans decode steps by capacity (CPU only; see [`plan::plan_capacity`]):
    /// run it with [`DecodeAttention::run_step`], which reads the lengths
    /// and block table from device memory, so one plan serves every step
    /// and the run can be captured in a CUDA graph.
    pub fn plan_capacity(&self, shape: &DecodeShape, opts: &PlanOptions) -> Result<Plan> {
        let kernel = self.kernel_info(shape, opts.family_for(shape))?;
        plan::plan_capacity(shape, &self.device, &kernel, opts)
    }

    /// Enqueues the attention kernel on `stream`, for a bf16 or
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
        self.run_cache(plan, q, &KvCache::plain(k, v), o, workspace, stream)
    }

    /// Enqueues the attention kernel for any cache format: the
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
        ensure(!plan.is_capacity(), "plan", "a plan of host lengths (plan / plan_paged); capacity plans run with run_step", "a capacity plan")?;
        let ws = workspace.buf.as_device_ptr().as_raw();
        let upload = workspace.loaded_plan != Some(plan.id);
        self.enqueue(plan, None, q.into(), cache, o.into(), ws, workspace.bytes(), upload, stream.as_inner())?;
        workspace.loaded_plan = Some(plan.id);
        Ok(())
    }

    /// Enqueues one decode step of a capacity plan ([`plan::plan_capacity`]):
    /// one attention launch whose blocks read `step`'s lengths (and block
    /// table) on the device and derive their work from them (plus the merge
    /// kernel for plans with large merges). Nothing is copied from the host
    /// and nothing is allocated, so the call can be captured in a CUDA graph
    /// and the graph replayed as the lengths and table in device memory
    /// change. The first step of a plan in a workspace also zeroes the
    /// plan's merge counters (an async memset; every later step leaves them
    /// at zero).
    /// Sequences shorter than `q_len` (length 0: empty batch slots) are
    /// skipped, their output rows left as they were.
    #[allow(clippy::too_many_arguments)]
    pub fn run_step<'a>(
        &self,
        plan: &Plan,
        step: &StepInputs<'a>,
        q: impl Into<TensorRef<'a>>,
        cache: &KvCache<'a>,
        o: impl Into<TensorMut<'a>>,
        workspace: &mut Workspace,
        stream: &Stream,
    ) -> Result<()> {
        let ws = workspace.buf.as_device_ptr().as_raw();
        let prepare = workspace.loaded_plan != Some(plan.id);
        self.enqueue(plan, Some(step), q.into(), cache, o.into(), ws, workspace.bytes(), prepare, stream.as_inner())?;
        workspace.loaded_plan = Some(plan.id);
        Ok(())
    }

    /// [`DecodeAttention::run_cache`] (plans of host lengths: `step` is
    /// `None`) or [`DecodeAttention::run_step`] (capacity plans: `step` is
    /// required) on raw handles: a workspace of `workspace_bytes` at
    /// `workspace` and a raw stream. Plans of host lengths copy their
    /// metadata into the workspace on every call (from pageable memory,
    /// staged before the call returns); capacity plans copy nothing.
    #[allow(clippy::too_many_arguments)]
    pub fn run_raw<'a>(
        &self,
        plan: &Plan,
        step: Option<&StepInputs<'a>>,
        q: TensorRef<'a>,
        cache: &KvCache<'a>,
        o: TensorMut<'a>,
        workspace: RawDevicePtr,
        workspace_bytes: usize,
        stream: RawStream,
    ) -> Result<()> {
        ensure(workspace != 0, "workspace", "a non-null device pointer", "null")?;
        ensure(workspace % 256 == 0, "workspace", "a 256-byte aligned device pointer", format!("{workspace:#x}"))?;
        // Raw workspaces are not tracked: metadata (capacity plans: zeroed
        // merge counters) on every call.
        self.enqueue(plan, step, q, cache, o, workspace, workspace_bytes, true, stream)
    }

    /// The one path every run takes: checks, then launches. `prepare`:
    /// upload the plan's metadata first (capacity plans: zero its merge
    /// counters instead).
    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        &self,
        plan: &Plan,
        step: Option<&StepInputs>,
        q: TensorRef,
        cache: &KvCache,
        o: TensorMut,
        ws: u64,
        ws_bytes: usize,
        prepare: bool,
        stream: RawStream,
    ) -> Result<()> {
        let (k, v) = (cache.k, cache.v);
        check_buffers(
            plan,
            &RunBuffers {
                q: q.desc(),
                k: k.desc(),
                v: v.desc(),
                o: o.desc(),
                workspace_bytes: ws_bytes,
                k_side: cache.k_scales.as_ref().map(TensorRef::desc),
                v_side: cache.v_scales.as_ref().map(TensorRef::desc),
            },
        )?;
        let shape = &plan.shape;
        match (plan.mode, step) {
            (PlanMode::Lengths, None) => {}
            (PlanMode::Lengths, Some(_)) => return Err(Error::invalid("step", "none (a plan of host lengths has its lengths)", "device lengths")),
            (PlanMode::Capacity { .. }, None) => {
                return Err(Error::invalid("step", "the device lengths (and block table) a capacity plan reads", "none"))
            }
            (PlanMode::Capacity { .. }, Some(step)) => step.check_for(shape)?,
        }
        // The plan's shape was validated by `plan()`; only the lookup is needed.
        let kernel = self.kernels.get(&plan.kernel_id()).copied().ok_or_else(|| {
            Error::Unsupported(format!("no kernel for this plan's {} / {} / d{}", shape.kv_format.name(), shape.dtype.name(), shape.head_dim))
        })?;
        ensure(
            plan.block_threads() <= kernel.max_threads_per_block && plan.smem_bytes <= self.device.max_smem_per_block,
            "plan",
            "a plan made by this DecodeAttention (for this device)",
            "one whose block does not fit this device",
        )?;

        if prepare && plan.is_capacity() {
            let counters = ws + plan.layout.merge_counters as u64;
            // SAFETY: the counters lie inside the checked workspace.
            unsafe { driver("cuMemsetD32Async", cuda::cuMemsetD32Async(counters, 0, plan.merge_counters() as usize, stream))? };
        } else if prepare {
            let meta = plan.metadata();
            // SAFETY: the workspace holds at least `metadata_bytes` (checked);
            // a pageable source is staged before this call returns.
            unsafe { driver("cuMemcpyHtoDAsync", cuda::cuMemcpyHtoDAsync_v2(ws, meta.as_ptr() as *const c_void, meta.len(), stream))? };
        }
        // Capacity plans: the blocks read the device lengths themselves;
        // uniform ones (`Plan::uniform`) take theirs from the params (a null
        // length pointer: every sequence is `max_seq_len` long).
        let (chunks_per_seq, seq_lens, max_seq_len) = match (plan.mode, step, plan.uniform) {
            (PlanMode::Capacity { chunks_per_seq }, Some(step), _) => (chunks_per_seq, step.seq_lens.addr, shape.max_seq_len),
            (PlanMode::Lengths, _, Some((len, chunks_per_seq))) => (chunks_per_seq, 0, len),
            _ => (0, ws + plan.layout.seq_lens as u64, shape.max_seq_len),
        };

        let (page_shift, num_pages) = shape.page_geometry().unwrap_or((0, 0));
        let block_table = match (step, shape.is_paged()) {
            (_, false) => 0,
            (Some(step), true) => step.block_table.map_or(0, |t| t.addr),
            (None, true) => ws + plan.layout.block_table as u64,
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
            seq_lens,
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
            // (Head pairs: one head's warps.)
            warps_k: plan.warps_k / plan.heads_per_block,
            score_scale: shape.logit_factors().0,
            num_kv_heads: shape.num_kv_heads,
            block_table,
            table_stride: shape.pages_per_seq(),
            page_shift,
            num_pages,
            item_smem: plan.smem_bytes - decode_attn_abi::ITEM_SMEM_BYTES,
            merge: ws + plan.layout.merges as u64,
            merge_counters: if plan.merge_mode() == MergeMode::InAttention { ws + plan.layout.merge_counters as u64 } else { 0 },
            chunks_per_seq,
            chunk_keys: plan.chunk_keys,
            max_seq_len,
            stages: plan.stages,
            cluster_log2: plan.cluster.max(1).trailing_zeros(),
            logit_cap: shape.logit_factors().1,
        };
        let name = plan_kernel_name(plan)?;
        // SAFETY: the grid, block and shared memory are the plan's; every
        // buffer was checked against the plan's shape above.
        unsafe {
            if plan.cluster > 1 {
                self.launch_clusters(name, plan.grid(), plan.block_threads(), plan.smem_bytes, plan.cluster, &params, stream)?
            } else {
                self.launch(name, plan.grid(), plan.block_threads(), plan.smem_bytes, &params, stream)?
            }
        };
        if let Some(grid) = plan.merge_grid() {
            let merge = MergeParams {
                partial_o: params.partial_o,
                partial_lse: params.partial_lse,
                o: o.addr,
                merge: params.merge,
                num_q_heads: shape.num_q_heads,
                q_len: shape.q_len,
                seq_lens,
                chunks_per_seq,
                chunk_keys: plan.chunk_keys,
                max_seq_len,
                rows_per_block: plan.merge_rows_per_block(),
            };
            let name = merge_kernel_name(shape.dtype, shape.head_dim).expect("validated head_dim");
            // Every merge-kernel plan overlaps it (`Plan::overlaps_merge`).
            // SAFETY: reads the slots the attention kernel wrote (same
            // stream; its blocks read them after `griddepcontrol.wait`, which
            // waits for the attention grid and its writes) and writes rows of `o`.
            unsafe { self.launch_overlapping(name, grid, MERGE_THREADS, 0, &merge, stream)? };
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
        unsafe { self.launch(name, (blocks, 1, 1), 256, 0, &params, stream.as_inner()) }
    }

    /// Enqueues a one-thread kernel that keeps the GPU busy for `duration`
    /// (benchmarks put it ahead of timed launches so they run back to back
    /// on the device, not at the pace the host enqueues them).
    pub fn gpu_sleep(&self, duration: std::time::Duration, stream: &Stream) -> Result<()> {
        let ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        let params = decode_attn_abi::SleepParams { ns };
        // SAFETY: the kernel touches no memory.
        unsafe { self.launch(decode_attn_abi::SLEEP_KERNEL, (1, 1, 1), 32, 0, &params, stream.as_inner()) }
    }

    /// Grows every nonzero device length by `by` tokens, capped at the
    /// shape's capacity (`max_seq_len`): the step a CUDA-graph decode loop
    /// ends with, so lengths never round-trip through the host.
    pub fn advance_seq_lens<'a>(&self, shape: &DecodeShape, seq_lens: impl Into<TensorMut<'a>>, by: u32, stream: &Stream) -> Result<()> {
        self.advance_seq_lens_raw(shape, seq_lens.into(), by, stream.as_inner())
    }

    /// [`DecodeAttention::advance_seq_lens`] on a raw stream.
    pub fn advance_seq_lens_raw(&self, shape: &DecodeShape, seq_lens: TensorMut, by: u32, stream: RawStream) -> Result<()> {
        shape.validate()?;
        check_buffer("seq_lens", &seq_lens.desc(), ElemType::U32, shape.batch as u64 * 4)?;
        let params = decode_attn_abi::AdvanceParams { seq_lens: seq_lens.addr, batch: shape.batch, by, capacity: shape.max_seq_len, _pad: 0 };
        let blocks = shape.batch.div_ceil(256).clamp(1, 1024);
        // SAFETY: writes the `batch` lengths of the checked buffer.
        unsafe { self.launch(decode_attn_abi::ADVANCE_KERNEL, (blocks, 1, 1), 256, 0, &params, stream) }
    }
}

/// The global-merge attention kernels of one shape and family, both warp
/// specialisations and the capacity twin where they exist.
struct ShapeKernels {
    unspecialized: KernelInfo,
    specialized: Option<KernelInfo>,
    capacity: Option<KernelInfo>,
}

impl plan::KernelLimits for ShapeKernels {
    fn limits(&self, specialized: bool) -> KernelInfo {
        // The planner asks for the specialised kernel only where the table
        // has one (`wgmma_specializable`).
        if specialized { self.specialized.unwrap_or(self.unspecialized) } else { self.unspecialized }
    }

    fn capacity_limits(&self, specialized: bool) -> KernelInfo {
        // (No kernel is both: twins are of unspecialised wide kernels.)
        match self.capacity {
            Some(twin) if !specialized => twin,
            _ => self.limits(specialized),
        }
    }
}

/// The name of the attention kernel that runs `plan` ([`Plan::kernel_id`]).
fn plan_kernel_name(plan: &Plan) -> Result<&'static str> {
    let shape = &plan.shape;
    decode_kernel_name(&plan.kernel_id())
        .ok_or_else(|| Error::Unsupported(format!("no kernel for this plan's {} / {} / d{} ({})", shape.kv_format.name(), shape.dtype.name(), shape.head_dim, shape.variant().name())))
}
