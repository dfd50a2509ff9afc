//! [`DecodeAttention`], the library's entry point, with every public method
//! in this file: plan, run (planned, captured steps, raw handles), write
//! the cache (quantize, append, dequantize) and grow device lengths. Every
//! call checks its buffers against the shape or plan before anything is
//! launched; each `_raw` method takes raw `CUdeviceptr` / `CUstream`
//! handles (memory from cudarc, candle or PyTorch) and goes through the
//! same checks as the `cust` one beside it.

use cust::memory::DeviceBuffer;
use cust::prelude::Stream;
use cust::sys as cuda;
use decode_attn_abi::{QuantDirection, QuantKernelId, QUANT_WARPS};

use crate::cache::{KvCache, KvMut, StepInputs};
use crate::check::{check_buffer, check_buffers, check_cache_job, CacheJob, RunBuffers};
use crate::error::{ensure, Error, Result};
use crate::kernel_table;
use crate::module::{driver, Entry, Kernels, ModuleSource, RawStream};
use crate::occupancy::DeviceInfo;
use crate::options::PlanOptions;
use crate::params::{cache_params, decode_params, merge_params, CacheLaunch, LaunchAddrs};
use crate::plan::{self, Plan, PlanMode};
use crate::shape::{DecodeShape, KvStrides};
use crate::tensor::{BufferDesc, ElemType, TensorMut, TensorRef};

/// Device memory for one plan's metadata and split partials. Reusable across
/// plans; the metadata upload (capacity plans: the merge-counter reset) is
/// skipped when the last plan run in it is the same plan.
pub struct Workspace {
    buf: DeviceBuffer<u8>,
    loaded_plan: Option<u64>,
}

impl Workspace {
    /// A workspace of `bytes` bytes (at least 256).
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
    fn desc(&self) -> BufferDesc {
        BufferDesc { addr: self.buf.as_device_ptr().as_raw(), len: self.buf.len(), elem: ElemType::U8 }
    }
}

/// The library's entry point: the loaded kernels and the device they run on.
/// Create one per CUDA context (it must be current when calling `new`).
pub struct DecodeAttention {
    kernels: Kernels,
}

impl DecodeAttention {
    /// Loads the kernels of the GPU's architecture into the current
    /// context ([`ModuleSource`]: on Hopper, Ampere and Ada the cubins
    /// compiled ahead, in well under a second; on a later GPU the portable
    /// PTX, which the driver compiles once, in minutes, and caches) and
    /// reads the device's limits. `Unsupported` before sm_80.
    pub fn new() -> Result<Self> {
        Ok(DecodeAttention { kernels: Kernels::load()? })
    }

    /// The architectures this build has kernels for: the portable ones that
    /// every later GPU runs, and Hopper's own.
    pub const ARCHS: [&'static str; decode_attn_abi::Arch::ALL.len()] = {
        let mut names = [""; decode_attn_abi::Arch::ALL.len()];
        let mut i = 0;
        while i < names.len() {
            names[i] = decode_attn_abi::Arch::ALL[i].name();
            i += 1;
        }
        names
    };

    /// The kernels' architecture on this GPU (`sm_90a` on Hopper, else the
    /// portable `sm_89` or `sm_80`, whose kernels are the wide and narrow
    /// families; see the README's "GPUs").
    pub fn arch(&self) -> &'static str {
        self.kernels.device.arch.name()
    }

    /// The GPU's streaming multiprocessors, as the driver reports them.
    pub fn sm_count(&self) -> u32 {
        self.kernels.device.sm_count
    }

    /// The GPU's L2 cache in bytes, as the driver reports it.
    pub fn l2_bytes(&self) -> u32 {
        self.kernels.device.l2_bytes
    }

    internal! {
        /// The device figures plans are made for.
        pub fn device_info(&self) -> &DeviceInfo {
            &self.kernels.device
        }
    }

    internal! {
        /// Plans made after this call read `tuning`'s thresholds instead of the
        /// device's table ([`Tuning::for_device`](crate::Tuning::for_device)):
        /// for `bench --sweep`, which measures each threshold's candidates, and
        /// for a GPU without a table of its own. Plans made before keep theirs.
        pub fn set_tuning(&mut self, tuning: crate::Tuning) {
            self.kernels.device.tuning = tuning;
        }
    }

    /// Where the kernels were loaded from.
    pub fn module_source(&self) -> ModuleSource {
        self.kernels.source
    }

    /// Plans one decode step (CPU only; see `plan::plan`).
    pub fn plan(&self, shape: &DecodeShape, seq_lens: &[u32], opts: &PlanOptions) -> Result<Plan> {
        plan::plan(shape, seq_lens, self.device_info(), &self.kernels, opts)
    }

    /// Plans one decode step over a paged cache (CPU only; see
    /// `plan::plan_paged`): `block_table` is `[batch, shape.pages_per_seq()]`
    /// page ids, checked here and uploaded with the plan.
    pub fn plan_paged(&self, shape: &DecodeShape, seq_lens: &[u32], block_table: &[i32], opts: &PlanOptions) -> Result<Plan> {
        plan::plan_paged(shape, seq_lens, block_table, self.device_info(), &self.kernels, opts)
    }

    /// Plans one decode step over sequences that each start at a key of
    /// their own (CPU only; see `plan::plan_key_ranges`): a shape with
    /// `key_ranges`, sequence b's keys `seq_starts[b] .. seq_lens[b]`, and
    /// a paged cache's block table (`None` for other layouts).
    pub fn plan_key_ranges(&self, shape: &DecodeShape, seq_starts: &[u32], seq_lens: &[u32], block_table: Option<&[i32]>, opts: &PlanOptions) -> Result<Plan> {
        plan::plan_key_ranges(shape, seq_starts, seq_lens, block_table, self.device_info(), &self.kernels, opts)
    }

    /// Plans decode steps by capacity (CPU only; see `plan::plan_capacity`):
    /// run it with [`DecodeAttention::run_step`], which reads the lengths
    /// and block table from device memory, so one plan serves every step
    /// and the run can be captured in a CUDA graph.
    pub fn plan_capacity(&self, shape: &DecodeShape, opts: &PlanOptions) -> Result<Plan> {
        plan::plan_capacity(shape, self.device_info(), &self.kernels, opts)
    }

    /// How many of a cluster-merge plan's clusters can be resident at once
    /// on this device (`cuOccupancyMaxActiveClusters`; `None` for plans
    /// without clusters): fewer than the grid has means a second wave.
    pub fn resident_clusters(&self, plan: &Plan) -> Result<Option<u32>> {
        if plan.cluster() <= 1 {
            return Ok(None);
        }
        self.kernels.max_active_clusters(Entry::Decode(plan.launch.kernel_index), plan.grid(), plan.block_threads(), plan.smem_bytes(), plan.cluster()).map(Some)
    }

    /// Enqueues one decode step of a plan of host lengths (`plan::plan`,
    /// `plan::plan_paged`) on `stream`: the attention kernel (split
    /// sequences merged inside it, in thread-block clusters or by the
    /// merge kernel after it, as the plan says).
    ///
    /// `q`, `o`: `[batch, q_len, num_q_heads, head_dim]` of the plan's dtype;
    /// `cache`: K and V (and a quantized format's scales) in the plan's
    /// format and layout. The call returns once the work is queued; the
    /// buffers must stay alive until the stream has executed it. The
    /// plan's metadata is uploaded into `workspace` unless the last run in
    /// it was of the same plan.
    pub fn run<'a>(&self, plan: &Plan, q: impl Into<TensorRef<'a>>, cache: &KvCache<'a>, o: impl Into<TensorMut<'a>>, workspace: &mut Workspace, stream: &Stream) -> Result<()> {
        ensure(!plan.is_capacity(), "plan", "a plan of host lengths (plan / plan_paged); capacity plans run with run_step", "a capacity plan")?;
        let upload = workspace.loaded_plan != Some(plan.id);
        self.enqueue(plan, None, q.into(), cache, o.into(), workspace.desc(), upload, stream.as_inner())?;
        workspace.loaded_plan = Some(plan.id);
        Ok(())
    }

    /// Enqueues one decode step of a capacity plan (`plan::plan_capacity`):
    /// one attention launch whose blocks read `step`'s lengths (and block
    /// table) on the device and derive their work from them (plus the merge
    /// kernel for plans with large merges). Nothing is copied from the host
    /// and nothing is allocated, so the call can be captured in a CUDA graph
    /// and the graph replayed as the lengths and table in device memory
    /// change. The first step of a plan in a workspace also zeroes the
    /// plan's merge counters (an async memset; every later step leaves them
    /// at zero). Sequences shorter than `q_len` (length 0: empty batch
    /// slots) are skipped, their output rows left as they were.
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
        let prepare = workspace.loaded_plan != Some(plan.id);
        self.enqueue(plan, Some(step), q.into(), cache, o.into(), workspace.desc(), prepare, stream.as_inner())?;
        workspace.loaded_plan = Some(plan.id);
        Ok(())
    }

    /// [`DecodeAttention::run`] (plans of host lengths: `step` is `None`)
    /// or [`DecodeAttention::run_step`] (capacity plans: `step` is
    /// required) on raw handles: a workspace of `workspace_bytes` at
    /// `workspace` (a `CUdeviceptr`, as cudarc, candle or PyTorch hand them
    /// out; 256-byte aligned, disjoint from every other buffer)
    /// and a raw stream. Plans of host lengths copy their metadata into the
    /// workspace on every call (from pageable memory, staged before the
    /// call returns); capacity plans zero their merge counters on every
    /// call.
    #[allow(clippy::too_many_arguments)]
    pub fn run_raw<'a>(
        &self,
        plan: &Plan,
        step: Option<&StepInputs<'a>>,
        q: TensorRef<'a>,
        cache: &KvCache<'a>,
        o: TensorMut<'a>,
        workspace: u64,
        workspace_bytes: usize,
        stream: RawStream,
    ) -> Result<()> {
        let ws = BufferDesc { addr: workspace, len: workspace_bytes, elem: ElemType::U8 };
        // Raw workspaces are not tracked: metadata (capacity plans: zeroed
        // merge counters) on every call.
        self.enqueue(plan, step, q, cache, o, ws, true, stream)
    }

    /// Quantizes (int8, fp8 per head, fp8 under the tensor's scale, int4) or
    /// stores (bf16, fp16) a whole 16-bit cache
    /// tensor (K or V; rows `t < seq_lens[b]`) into `out`: `plain` has the
    /// shape's dtype and its contiguous or paged layout (the same pages
    /// through `step`'s block table as `out`). Asynchronous.
    pub fn quantize_kv<'a>(&self, shape: &DecodeShape, step: &StepInputs<'a>, plain: impl Into<TensorRef<'a>>, out: KvMut<'a>, stream: &Stream) -> Result<()> {
        self.quantize_kv_raw(shape, step, plain.into(), out, stream.as_inner())
    }

    /// [`DecodeAttention::quantize_kv`] on a raw stream.
    pub fn quantize_kv_raw<'a>(&self, shape: &DecodeShape, step: &StepInputs<'a>, plain: TensorRef<'a>, out: KvMut<'a>, stream: RawStream) -> Result<()> {
        let job = CacheJob {
            direction: QuantDirection::Store,
            plain: plain.desc(),
            plain_name: "plain",
            plain_elems: shape.plain_shape().kv_elems_required().unwrap_or(u64::MAX),
            data: out.data.desc(),
            scales: out.scales.as_ref().map(TensorMut::desc),
            seq_lens: step.seq_lens.desc(),
            block_table: step.block_table.as_ref().map(TensorRef::desc),
        };
        self.cache_launch(shape, step, &job, shape.plain_shape().kv_strides_checked(), shape.max_seq_len, false, stream)
    }

    /// Appends a decode step's `q_len` new tokens of K or V to a cache of
    /// any format, contiguous or paged (through `step`'s block table):
    /// `new_rows` is `[batch, q_len, Hkv, D]` of the shape's dtype; sequence
    /// b's tokens go to positions `seq_lens[b] - q_len ..` (lengths read on
    /// the device, new tokens included; sequences whose length is below
    /// `q_len` or above the capacity are left alone). Copied for 16-bit
    /// formats, quantized for the others. Nothing is read from the host, so
    /// the call can be captured in a CUDA graph with
    /// [`DecodeAttention::run_step`].
    pub fn append_kv<'a>(&self, shape: &DecodeShape, step: &StepInputs<'a>, new_rows: impl Into<TensorRef<'a>>, out: KvMut<'a>, stream: &Stream) -> Result<()> {
        self.append_kv_raw(shape, step, new_rows.into(), out, stream.as_inner())
    }

    /// [`DecodeAttention::append_kv`] on a raw stream.
    pub fn append_kv_raw<'a>(&self, shape: &DecodeShape, step: &StepInputs<'a>, new_rows: TensorRef<'a>, out: KvMut<'a>, stream: RawStream) -> Result<()> {
        let (d, h, ql) = (shape.head_dim as u64, shape.num_kv_heads as u64, shape.q_len as u64);
        let job = CacheJob {
            direction: QuantDirection::Store,
            plain: new_rows.desc(),
            plain_name: "new_rows",
            plain_elems: (shape.batch as u64).saturating_mul(ql * h * d),
            data: out.data.desc(),
            scales: out.scales.as_ref().map(TensorMut::desc),
            seq_lens: step.seq_lens.desc(),
            block_table: step.block_table.as_ref().map(TensorRef::desc),
        };
        let strides = Some(KvStrides { batch: ql * h * d, token: h * d, head: d });
        self.cache_launch(shape, step, &job, strides, shape.q_len, true, stream)
    }

    /// Appends `rows` new tokens of K or V to every sequence of a cache of
    /// any format, contiguous or paged: [`DecodeAttention::append_kv`] for
    /// any number of rows up to the capacity (a prefill, a continued chat,
    /// a verification of many draft tokens), where `append_kv` appends the
    /// shape's `q_len`. Row (b, t, h) of the 16-bit `new_rows` is at
    /// element `b·strides.batch + t·strides.token + h·strides.head`, its
    /// head_dim values contiguous (transformers' `[batch, Hkv, rows, D]`
    /// states in place, or any view whose strides are multiples of 8
    /// values). Sequence b's rows go to positions `seq_lens[b] − rows ..`
    /// (device lengths, new tokens included).
    #[allow(clippy::too_many_arguments)]
    pub fn append_rows<'a>(&self, shape: &DecodeShape, step: &StepInputs<'a>, new_rows: impl Into<TensorRef<'a>>, strides: KvStrides, rows: u32, out: KvMut<'a>, stream: &Stream) -> Result<()> {
        self.append_rows_raw(shape, step, new_rows.into(), strides, rows, out, stream.as_inner())
    }

    /// [`DecodeAttention::append_rows`] on a raw stream.
    #[allow(clippy::too_many_arguments)]
    pub fn append_rows_raw<'a>(&self, shape: &DecodeShape, step: &StepInputs<'a>, new_rows: TensorRef<'a>, strides: KvStrides, rows: u32, out: KvMut<'a>, stream: RawStream) -> Result<()> {
        let plain_elems = crate::check::append_rows_elems(shape, strides, rows)?;
        let job = CacheJob {
            direction: QuantDirection::Store,
            plain: new_rows.desc(),
            plain_name: "new_rows",
            plain_elems,
            data: out.data.desc(),
            scales: out.scales.as_ref().map(TensorMut::desc),
            seq_lens: step.seq_lens.desc(),
            block_table: step.block_table.as_ref().map(TensorRef::desc),
        };
        self.cache_launch(shape, step, &job, Some(strides), rows, true, stream)
    }

    /// Dequantizes a contiguous quantized cache tensor (rows
    /// `t < seq_lens[b]`; `data` and `scales`: its values and scales, none
    /// for `KvFormat::Fp8DsMla`, whose rows hold theirs) into a 16-bit
    /// buffer of the shape's dtype and its twin's layout
    /// ([`DecodeShape::plain_shape`]; other elements are left untouched).
    pub fn dequantize_kv<'a>(&self, shape: &DecodeShape, seq_lens: impl Into<TensorRef<'a>>, data: impl Into<TensorRef<'a>>, scales: Option<TensorRef<'a>>, plain: impl Into<TensorMut<'a>>, stream: &Stream) -> Result<()> {
        self.dequantize_kv_raw(shape, seq_lens.into(), data.into(), scales, plain.into(), stream.as_inner())
    }

    /// [`DecodeAttention::dequantize_kv`] on a raw stream.
    pub fn dequantize_kv_raw<'a>(&self, shape: &DecodeShape, seq_lens: TensorRef<'a>, data: TensorRef<'a>, scales: Option<TensorRef<'a>>, plain: TensorMut<'a>, stream: RawStream) -> Result<()> {
        ensure(shape.kv_format.is_quantized(), "kv_format", "a quantized format (int8, fp8, int4)", shape.kv_format.name())?;
        ensure(!shape.is_paged(), "kv_layout", "a contiguous or strided layout", "a paged one")?;
        let step = StepInputs::lengths(seq_lens);
        let job = CacheJob {
            direction: QuantDirection::Dequantize,
            plain: plain.desc(),
            plain_name: "plain",
            plain_elems: shape.plain_shape().kv_elems_required().unwrap_or(u64::MAX),
            data: data.desc(),
            scales: scales.map(|s| s.desc()),
            seq_lens: step.seq_lens.desc(),
            block_table: None,
        };
        self.cache_launch(shape, &step, &job, shape.plain_shape().kv_strides_checked(), shape.max_seq_len, false, stream)
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
        unsafe { self.kernels.launch(Entry::Utility(decode_attn_abi::ADVANCE_KERNEL), (blocks, 1, 1), 256, 0, &params, stream) }
    }
}

impl DecodeAttention {
    /// The loaded kernels (the crate's test utilities launch theirs).
    pub(crate) fn kernels(&self) -> &Kernels {
        &self.kernels
    }

    /// The one path every attention run takes: checks, then launches.
    /// `prepare`: upload the plan's metadata first (capacity plans: zero
    /// its merge counters instead).
    #[allow(clippy::too_many_arguments)]
    fn enqueue(&self, plan: &Plan, step: Option<&StepInputs>, q: TensorRef, cache: &KvCache, o: TensorMut, ws: BufferDesc, prepare: bool, stream: RawStream) -> Result<()> {
        check_buffers(
            plan,
            &RunBuffers {
                q: q.desc(),
                k: cache.k.desc(),
                v: cache.v.desc(),
                o: o.desc(),
                workspace: ws,
                k_scales: cache.k_scales.as_ref().map(TensorRef::desc),
                v_scales: cache.v_scales.as_ref().map(TensorRef::desc),
                seq_lens: step.map(|s| s.seq_lens.desc()),
                block_table: step.and_then(|s| s.block_table.as_ref().map(TensorRef::desc)),
                seq_starts: step.and_then(|s| s.seq_starts.as_ref().map(TensorRef::desc)),
                variant: cache.variant.map(|t| t.desc()),
            },
        )?;
        let shape = plan.shape();
        match (plan.mode(), step) {
            (PlanMode::Lengths, None) => {}
            (PlanMode::Lengths, Some(_)) => return Err(Error::invalid("step", "none (a plan of host lengths has its lengths)", "device lengths")),
            (PlanMode::Capacity { .. }, None) => return Err(Error::invalid("step", "the device lengths (and block table) a capacity plan reads", "none")),
            (PlanMode::Capacity { .. }, Some(step)) => {
                step.check_for(shape)?;
                step.check_starts_for(shape)?;
            }
        }
        // The plan's shape was validated and its kernels found when it was
        // made; a run reads them.
        let launch = &plan.launch;
        let kernel = self.kernels.decode_limits(launch.kernel_index);
        ensure(
            kernel.is_some_and(|k| launch.block_threads <= k.max_threads_per_block) && plan.smem_bytes() <= self.device_info().max_smem_per_block,
            "plan",
            "a plan made by this DecodeAttention (for this device)",
            "one whose block does not fit this device",
        )?;
        if prepare && plan.is_capacity() {
            // (Nothing to zero where no block counts its arrival.)
            if plan.uses_merge_counters() {
                let counters = ws.addr + plan.layout().merge_counters as u64;
                // SAFETY: the counters lie inside the checked workspace.
                unsafe { driver("cuMemsetD32Async", cuda::cuMemsetD32Async(counters, 0, plan.merge_counters() as usize, stream))? };
            }
        } else if prepare {
            let meta = plan.metadata();
            // SAFETY: the workspace holds at least `metadata_bytes` (checked);
            // a pageable source is staged before this call returns.
            unsafe { driver("cuMemcpyHtoDAsync", cuda::cuMemcpyHtoDAsync_v2(ws.addr, meta.as_ptr() as *const std::ffi::c_void, meta.len(), stream))? };
        }
        let addrs = LaunchAddrs {
            q: q.addr,
            k: cache.k.addr,
            v: cache.v.addr,
            o: o.addr,
            k_scales: cache.k_scales.map_or(0, |t| t.addr),
            v_scales: cache.v_scales.map_or(0, |t| t.addr),
            workspace: ws.addr,
            step_seq_lens: step.map_or(0, |s| s.seq_lens.addr),
            step_block_table: step.and_then(|s| s.block_table).map_or(0, |t| t.addr),
            variant: cache.variant.map(|t| t.addr),
            step_seq_starts: step.and_then(|s| s.seq_starts).map_or(0, |t| t.addr),
        };
        let params = decode_params(plan, &addrs);
        // SAFETY: the grid, block and shared memory are the plan's; every
        // buffer was checked against the plan's shape above.
        unsafe {
            let kernel = Entry::Decode(launch.kernel_index);
            if plan.launch_cluster() > 1 {
                self.kernels.launch_clusters(kernel, plan.grid(), launch.block_threads, plan.smem_bytes(), plan.launch_cluster(), &params, stream)?
            } else {
                self.kernels.launch(kernel, plan.grid(), launch.block_threads, plan.smem_bytes(), &params, stream)?
            }
        };
        if let (Some((index, _)), Some((merge, grid))) = (launch.merge_kernel, merge_params(plan, &params)) {
            // Every merge-kernel plan overlaps it (`Plan::overlaps_merge`).
            // SAFETY: reads the slots the attention kernel wrote (same
            // stream; its blocks read them after `griddepcontrol.wait`, which
            // waits for the attention grid and its writes) and writes rows of `o`.
            unsafe { self.kernels.launch_overlapping(Entry::Merge(index), grid, plan.merge_threads(), 0, &merge, stream)? };
        }
        Ok(())
    }

    /// Checks and launches one cache conversion.
    #[allow(clippy::too_many_arguments)]
    fn cache_launch(&self, shape: &DecodeShape, step: &StepInputs, job: &CacheJob, plain_strides: Option<KvStrides>, rows_per_seq: u32, append: bool, stream: RawStream) -> Result<()> {
        shape.validate()?;
        let direction = job.direction;
        let arch = self.kernels.device.arch;
        let module = arch.module_for(shape.kv_format.needs()).ok_or_else(|| {
            Error::Unsupported(format!("a {} cache needs {} kernels; this GPU runs {}'s", shape.kv_format.name(), shape.kv_format.needs().name(), arch.name()))
        })?;
        let kernel = kernel_table::quant_index(&QuantKernelId { arch: module, format: shape.kv_format, dtype: shape.dtype, head_dim: shape.head_dim, direction })
            .map(Entry::Quant)
            .ok_or_else(|| Error::Unsupported(format!("no {direction:?} kernel for {} / {}", shape.kv_format.name(), shape.dtype.name())))?;
        step.check_for(shape)?;
        check_cache_job(shape, job)?;
        let plain_strides = plain_strides.ok_or_else(|| Error::invalid("kv_layout", "strides that fit in 64 bits", "an overflow"))?;
        let launch = CacheLaunch {
            plain: job.plain.addr,
            plain_strides,
            data: job.data.addr,
            scales: job.scales.map_or(0, |s| s.addr),
            seq_lens: job.seq_lens.addr,
            block_table: job.block_table.map_or(0, |t| t.addr),
            rows_per_seq,
            append,
        };
        let (params, blocks) = cache_params(shape, &launch)?;
        // SAFETY: every buffer was checked against the shape above; the
        // kernel bounds its rows by the grid, the lengths and the capacity,
        // and its page ids by the pool.
        unsafe { self.kernels.launch(kernel, (blocks, 1, 1), 32 * QUANT_WARPS, 0, &params, stream) }
    }
}
