//! `decode_attn._native`: the Rust library's raw-handle entry points for
//! Python. A thin layer: shapes and plans are the Rust ones, buffers come
//! in as `(address, elements, element type)` triples that the Python
//! package reads off torch tensors after checking their device, dtype,
//! shape and strides (`decode_attn/_tensors.py`), and every Rust check
//! still runs before a launch. `Error::InvalidArgument` becomes a
//! `ValueError` carrying `param`, `expected` and `got`.

mod context;
mod convert;

use decode_attn::{DecodeAttention, DecodeShape, KvCache, KvFormat, KvMut, Plan, StepInputs, VariantBuffers};
use pyo3::prelude::*;

use crate::context::PrimaryContext;
use crate::convert::{buffer_mut, buffer_ref, parse_options, py_err, shape_from_args, Buf, ShapeArgs};

/// One decode problem: `DecodeShape` with its checks (`ValueError` names
/// the first bad field). Immutable.
#[pyclass(frozen, weakref, name = "DecodeShape", module = "decode_attn._native")]
struct PyShape {
    inner: DecodeShape,
}

#[pymethods]
impl PyShape {
    #[new]
    #[pyo3(signature = (*, batch, num_q_heads, num_kv_heads, head_dim, max_seq_len, q_len = 1, dtype = None, kv_format = None, layout = "nhd",
        strides = None, page_size = None, num_pages = None, page_order = "token_major", scale = None, soft_cap = None, window = None,
        sinks = false, alibi = false, key_ranges = false, tree = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        batch: i64,
        num_q_heads: i64,
        num_kv_heads: i64,
        head_dim: i64,
        max_seq_len: i64,
        q_len: i64,
        dtype: Option<&str>,
        kv_format: Option<&str>,
        layout: &str,
        strides: Option<(i64, i64, i64)>,
        page_size: Option<i64>,
        num_pages: Option<i64>,
        page_order: &str,
        scale: Option<f64>,
        soft_cap: Option<f64>,
        window: Option<i64>,
        sinks: bool,
        alibi: bool,
        key_ranges: bool,
        tree: bool,
    ) -> PyResult<Self> {
        let args = ShapeArgs {
            batch,
            num_q_heads,
            num_kv_heads,
            head_dim,
            max_seq_len,
            q_len,
            dtype,
            kv_format,
            layout,
            strides,
            page_size,
            num_pages,
            page_order,
            scale,
            soft_cap,
            window,
            sinks,
            alibi,
            key_ranges,
            tree,
        };
        let inner = shape_from_args(&args)?;
        inner.validate().map_err(py_err)?;
        Ok(PyShape { inner })
    }

    #[getter]
    fn batch(&self) -> u32 {
        self.inner.batch
    }
    #[getter]
    fn num_q_heads(&self) -> u32 {
        self.inner.num_q_heads
    }
    #[getter]
    fn num_kv_heads(&self) -> u32 {
        self.inner.num_kv_heads
    }
    #[getter]
    fn head_dim(&self) -> u32 {
        self.inner.head_dim
    }
    #[getter]
    fn q_len(&self) -> u32 {
        self.inner.q_len
    }
    #[getter]
    fn max_seq_len(&self) -> u32 {
        self.inner.max_seq_len
    }
    /// `"bf16"` or `"f16"`: Q's and O's element type.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.inner.dtype.name()
    }
    /// The cache format's name (`bf16`, `f16`, `int8`, `fp8-per-head`,
    /// `fp8`, `int4-g32`, `int4-g64`, `int4-g128`).
    #[getter]
    fn kv_format(&self) -> &'static str {
        self.inner.kv_format.name()
    }
    /// `"nhd"`, `"hnd"`, `"strided"` or `"paged"`.
    #[getter]
    fn layout(&self) -> &'static str {
        convert::layout_name(&self.inner.kv_layout)
    }
    /// Paged layouts: `"token_major"` or `"head_major"`; else `None`.
    #[getter]
    fn page_order(&self) -> Option<&'static str> {
        convert::page_order_name(&self.inner.kv_layout)
    }
    #[getter]
    fn page_size(&self) -> Option<u32> {
        self.inner.page_geometry().map(|(log2, _)| 1 << log2)
    }
    #[getter]
    fn num_pages(&self) -> Option<u32> {
        self.inner.page_geometry().map(|(_, n)| n)
    }
    /// Block-table entries per sequence (1 unless paged).
    #[getter]
    fn pages_per_seq(&self) -> u32 {
        self.inner.pages_per_seq()
    }
    /// The softmax scale the kernels use (`1/sqrt(head_dim)` by default).
    #[getter]
    fn scale(&self) -> f32 {
        self.inner.softmax_scale()
    }
    #[getter]
    fn soft_cap(&self) -> Option<f32> {
        self.inner.variant.soft_cap
    }
    #[getter]
    fn window(&self) -> Option<u32> {
        self.inner.variant.window
    }
    #[getter]
    fn sinks(&self) -> bool {
        self.inner.variant.sinks
    }
    #[getter]
    fn alibi(&self) -> bool {
        self.inner.variant.alibi
    }
    /// Whether each sequence has its own first key (`seq_starts`).
    #[getter]
    fn key_ranges(&self) -> bool {
        self.inner.variant.key_ranges
    }

    /// Whether the steps verify a draft tree (`tree_masks`, `tree_positions`).
    #[getter]
    fn tree(&self) -> bool {
        self.inner.variant.tree
    }
    /// The variant's name: `standard`, `softcap`, `masked` (a window, sinks, key ranges, or several), `alibi`, `masked_tree` or `softcap_tree` (a draft tree).
    #[getter]
    fn variant(&self) -> &'static str {
        self.inner.variant_name()
    }
    /// Cache values per stored element: 2 for int4 (nibbles in bytes), else 1.
    #[getter]
    fn values_per_element(&self) -> u32 {
        if self.inner.kv_format.bits() == 4 {
            2
        } else {
            1
        }
    }
    /// Stored elements of one cached row, the last dim of a cache tensor:
    /// `head_dim / values_per_element`, but fp8-ds-mla's 656 bytes.
    #[getter]
    fn row_elements(&self) -> u32 {
        let f = self.inner.kv_format;
        f.row_len(self.inner.head_dim) * f.bits().min(8) / 8
    }
    /// Strides of K and V `(batch or page, token, head)` in cache values.
    #[getter]
    fn kv_strides(&self) -> (u64, u64, u64) {
        let s = self.inner.kv_strides();
        (s.batch, s.token, s.head)
    }
    /// Strides of a quantized cache's scales `(batch or page, token, head)`, in entries.
    #[getter]
    fn scale_strides(&self) -> (u64, u64, u64) {
        let s = self.inner.scale_strides();
        (s.batch, s.token, s.head)
    }
    /// Bytes each of K's and V's scales must hold (0: none; 4: one f32 scale).
    #[getter]
    fn scale_bytes(&self) -> u64 {
        self.inner.scale_bytes_required().unwrap_or(u64::MAX)
    }
    /// Bytes of one side-data entry (0 for 16-bit formats).
    #[getter]
    fn side_entry_bytes(&self) -> u32 {
        self.inner.kv_format.scale_bytes(self.inner.head_dim)
    }
    /// Whether the format has one scale per tensor (fp8).
    #[getter]
    fn tensor_scaled(&self) -> bool {
        self.inner.kv_format.tensor_scaled()
    }
    /// The shape of a quantized cache's scales and its dims' names
    /// (`None`: no side rows).
    #[getter]
    fn scale_dims(&self) -> Option<(Vec<u64>, &'static str)> {
        self.inner.scale_dims()
    }
    /// The Rust checks of a tensor view (dims and strides in elements) for
    /// each role; each returns the view's extent in elements.
    fn check_rows_view(&self, name: &str, heads: u32, dims: Vec<i64>, strides: Vec<i64>) -> PyResult<u64> {
        self.inner.check_rows_view(name, heads, &dims, &strides).map_err(py_err)
    }

    fn check_out_view(&self, name: &str, dims: Vec<i64>, strides: Vec<i64>) -> PyResult<u64> {
        self.inner.check_out_view(name, &dims, &strides).map_err(py_err)
    }
    fn check_per_sequence_view(&self, name: &str, dims: Vec<i64>, strides: Vec<i64>) -> PyResult<u64> {
        self.inner.check_per_sequence_view(name, &dims, &strides).map_err(py_err)
    }
    fn check_cache_view(&self, name: &str, dims: Vec<i64>, strides: Vec<i64>, plain: bool) -> PyResult<u64> {
        self.inner.check_cache_view(name, &dims, &strides, plain).map_err(py_err)
    }
    fn check_table_view(&self, name: &str, dims: Vec<i64>, strides: Vec<i64>) -> PyResult<u64> {
        self.inner.check_table_view(name, &dims, &strides).map_err(py_err)
    }
    fn check_variant_view(&self, name: &str, dims: Vec<i64>, strides: Vec<i64>) -> PyResult<u64> {
        self.inner.check_variant_view(name, &dims, &strides).map_err(py_err)
    }
    /// The element types the variant's array `name` may be held in (the
    /// first is the one the launch takes).
    fn variant_elems(&self, name: &str) -> PyResult<Vec<&'static str>> {
        self.inner.variant_elems(name).map(|e| e.to_vec()).map_err(py_err)
    }
    #[staticmethod]
    fn check_workspace_view(name: &str, dims: Vec<i64>, strides: Vec<i64>, bytes: u64) -> PyResult<u64> {
        decode_attn::DecodeShape::check_workspace_view(name, &dims, &strides, bytes).map_err(py_err)
    }
    /// `(rows, (batch, token, head) strides, extent)` of new rows for
    /// `append_rows` (`hnd`: `[batch, Hkv, rows, D]`).
    fn check_new_rows_view(&self, name: &str, dims: Vec<i64>, strides: Vec<i64>, hnd: bool) -> PyResult<(u32, (u64, u64, u64), u64)> {
        let (rows, [b, t, h], extent) = self.inner.check_new_rows_view(name, &dims, &strides, hnd).map_err(py_err)?;
        Ok((rows, (b, t, h), extent))
    }
    /// The element types K and V may be held in (`plain`: a 16-bit copy),
    /// by name; the first is the launch's.
    fn value_elems(&self, plain: bool) -> Vec<&'static str> {
        self.inner.value_elems(plain).to_vec()
    }
    /// The element types scales may be held in; the first is the launch's.
    #[getter]
    fn scale_elems(&self) -> Vec<&'static str> {
        self.inner.scale_elems().to_vec()
    }
    fn check_scales_view(&self, name: &str, dims: Vec<i64>, strides: Vec<i64>) -> PyResult<u64> {
        self.inner.check_scales_view(name, &dims, &strides).map_err(py_err)
    }
    fn __repr__(&self) -> String {
        let s = &self.inner;
        format!(
            "DecodeShape(batch={}, num_q_heads={}, num_kv_heads={}, head_dim={}, q_len={}, max_seq_len={}, dtype='{}', kv_format='{}', layout='{}', variant='{}')",
            s.batch,
            s.num_q_heads,
            s.num_kv_heads,
            s.head_dim,
            s.q_len,
            s.max_seq_len,
            s.dtype.name(),
            s.kv_format.name(),
            convert::layout_name(&s.kv_layout),
            s.variant_name()
        )
    }
    fn __eq__(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

/// Python integers as `T`, or a `ValueError` naming the bad entry.
fn entries<T: TryFrom<i64>>(name: &str, expected: &str, values: &[i64]) -> PyResult<Vec<T>> {
    values.iter().enumerate().map(|(i, &v)| T::try_from(v).map_err(|_| convert::invalid(&format!("{name}[{i}]"), expected, v))).collect()
}

fn lengths(seq_lens: &[i64]) -> PyResult<Vec<u32>> {
    entries("seq_lens", "a length in 0..2^32", seq_lens)
}

fn table(block_table: &[i64]) -> PyResult<Vec<i32>> {
    entries("block_table", "an i32 page id", block_table)
}

/// Checks host lengths against a shape (what `plan` checks first).
#[pyfunction]
fn check_seq_lens(shape: &PyShape, seq_lens: Vec<i64>) -> PyResult<()> {
    shape.inner.validate_seq_lens(&lengths(&seq_lens)?).map_err(py_err)
}

/// The name of the KV format `name` spells (`fp8_per_head` → `fp8-per-head`,
/// `fp16` → `f16`): the one spelling every error and `repr` uses.
#[pyfunction]
fn kv_format_name(name: &str) -> PyResult<&'static str> {
    Ok(convert::kv_format(name)?.name())
}

/// Checks a flattened `[batch, pages_per_seq]` block table against a paged
/// shape and host lengths (what `plan_paged` checks first).
#[pyfunction]
fn check_block_table(shape: &PyShape, seq_lens: Vec<i64>, block_table: Vec<i64>) -> PyResult<()> {
    shape.inner.validate_block_table(&lengths(&seq_lens)?, &table(&block_table)?).map_err(py_err)
}

/// A plan: the work of one decode step (host lengths) or of every step up
/// to a capacity (device lengths). Immutable; reusable.
#[pyclass(frozen, name = "Plan", module = "decode_attn._native")]
struct PyPlan {
    inner: Plan,
    /// The device ordinal of the `_Device` that made it.
    device: i32,
}

#[pymethods]
impl PyPlan {
    #[getter]
    fn shape(&self) -> PyShape {
        PyShape { inner: self.inner.shape().clone() }
    }
    /// Bytes of the workspace a run of this plan needs.
    #[getter]
    fn workspace_bytes(&self) -> usize {
        self.inner.workspace_bytes()
    }
    /// Whether the plan reads its lengths (and block table) on the device.
    #[getter]
    fn is_capacity(&self) -> bool {
        self.inner.is_capacity()
    }
    #[getter]
    fn device(&self) -> i32 {
        self.device
    }
    /// The kernel family (`wide`, `narrow`, `wgmma`, `mla`).
    #[getter]
    fn family(&self) -> &'static str {
        self.inner.family().name()
    }
    /// Most chunks any sequence is split into.
    #[getter]
    fn max_splits(&self) -> u32 {
        self.inner.max_splits()
    }
    #[getter]
    fn grid(&self) -> (u32, u32, u32) {
        self.inner.grid()
    }
    /// Bytes of K, V (and scales), Q and O one run moves.
    #[getter]
    fn bytes_moved(&self) -> u64 {
        self.inner.bytes_moved()
    }
    fn __repr__(&self) -> String {
        format!(
            "Plan({}, family='{}', grid={:?}, max_splits={}, workspace_bytes={}, capacity={})",
            PyShape { inner: self.inner.shape().clone() }.__repr__(),
            self.inner.family().name(),
            self.inner.grid(),
            self.inner.max_splits(),
            self.inner.workspace_bytes(),
            self.inner.is_capacity()
        )
    }
}

/// The kernels loaded into one device's primary context (the one PyTorch
/// uses; retained, never created).
#[pyclass(frozen, name = "_Device", module = "decode_attn._native")]
struct PyDevice {
    // Field order: the kernels go before the context is released.
    attn: DecodeAttention,
    ctx: PrimaryContext,
}

#[pymethods]
impl PyDevice {
    #[new]
    fn new(py: Python<'_>, ordinal: i32) -> PyResult<Self> {
        py.detach(|| {
            let ctx = PrimaryContext::retain(ordinal)?;
            let attn = ctx.with_current(DecodeAttention::new).map_err(py_err)?;
            Ok(PyDevice { attn, ctx })
        })
    }

    #[getter]
    fn ordinal(&self) -> i32 {
        self.ctx.ordinal
    }
    /// `fatbin` (the cubins compiled ahead), `fatbin-ptx` (the fatbins'
    /// portable PTX, compiled by the driver) or `ptx` (a build without
    /// ptxas: compiled by the driver).
    #[getter]
    fn module_source(&self) -> &'static str {
        match self.attn.module_source() {
            decode_attn::ModuleSource::Fatbin => "fatbin",
            decode_attn::ModuleSource::FatbinPtx => "fatbin-ptx",
            decode_attn::ModuleSource::Ptx => "ptx",
        }
    }
    /// The kernels' architecture on this GPU: `sm_90a` (Hopper), else the
    /// portable `sm_89` or `sm_80` (wide and narrow kernels).
    #[getter]
    fn arch(&self) -> &'static str {
        self.attn.arch()
    }
    #[getter]
    fn sm_count(&self) -> u32 {
        self.attn.sm_count()
    }
    #[getter]
    fn l2_bytes(&self) -> u32 {
        self.attn.l2_bytes()
    }

    #[pyo3(signature = (shape, seq_lens, **options))]
    fn plan(&self, py: Python<'_>, shape: &PyShape, seq_lens: Vec<i64>, options: Option<&Bound<'_, pyo3::types::PyDict>>) -> PyResult<PyPlan> {
        let opts = parse_options(options)?;
        let lens = lengths(&seq_lens)?;
        let plan = py.detach(|| self.attn.plan(&shape.inner, &lens, &opts)).map_err(py_err)?;
        Ok(PyPlan { inner: plan, device: self.ctx.ordinal })
    }

    #[pyo3(signature = (shape, seq_lens, block_table, **options))]
    fn plan_paged(&self, py: Python<'_>, shape: &PyShape, seq_lens: Vec<i64>, block_table: Vec<i64>, options: Option<&Bound<'_, pyo3::types::PyDict>>) -> PyResult<PyPlan> {
        let opts = parse_options(options)?;
        let (lens, table) = (lengths(&seq_lens)?, table(&block_table)?);
        let plan = py.detach(|| self.attn.plan_paged(&shape.inner, &lens, &table, &opts)).map_err(py_err)?;
        Ok(PyPlan { inner: plan, device: self.ctx.ordinal })
    }

    #[pyo3(signature = (shape, seq_starts, seq_lens, block_table, **options))]
    fn plan_key_ranges(
        &self,
        py: Python<'_>,
        shape: &PyShape,
        seq_starts: Vec<i64>,
        seq_lens: Vec<i64>,
        block_table: Option<Vec<i64>>,
        options: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<PyPlan> {
        let opts = parse_options(options)?;
        let (starts, lens) = (entries("seq_starts", "a first key in 0..2^32", &seq_starts)?, lengths(&seq_lens)?);
        let table = block_table.as_deref().map(table).transpose()?;
        let plan = py.detach(|| self.attn.plan_key_ranges(&shape.inner, &starts, &lens, table.as_deref(), &opts)).map_err(py_err)?;
        Ok(PyPlan { inner: plan, device: self.ctx.ordinal })
    }

    #[pyo3(signature = (shape, **options))]
    fn plan_capacity(&self, py: Python<'_>, shape: &PyShape, options: Option<&Bound<'_, pyo3::types::PyDict>>) -> PyResult<PyPlan> {
        let opts = parse_options(options)?;
        let plan = py.detach(|| self.attn.plan_capacity(&shape.inner, &opts)).map_err(py_err)?;
        Ok(PyPlan { inner: plan, device: self.ctx.ordinal })
    }

    /// One attention run on `stream` (a `CUstream` as an integer):
    /// `seq_lens`, `block_table` and `seq_starts` are a capacity plan's
    /// device inputs (`None` for plans of host lengths); `variant` the
    /// variant's arrays (`decode_attn::VariantBuffers`: sinks, ALiBi
    /// slopes, a draft tree's masks and positions, each `None` or a
    /// buffer), checked in Rust against the plan's variant.
    #[pyo3(signature = (plan, q, k, v, k_scales, v_scales, out, workspace, seq_lens, block_table, seq_starts, variant, stream))]
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        py: Python<'_>,
        plan: &PyPlan,
        q: Buf,
        k: Buf,
        v: Buf,
        k_scales: Option<Buf>,
        v_scales: Option<Buf>,
        out: Buf,
        workspace: Buf,
        seq_lens: Option<Buf>,
        block_table: Option<Buf>,
        seq_starts: Option<Buf>,
        variant: (Option<Buf>, Option<Buf>, Option<Buf>, Option<Buf>),
        stream: usize,
    ) -> PyResult<()> {
        self.same_device(plan)?;
        py.detach(|| {
            // SAFETY: the Python layer read each triple off a live CUDA tensor
            // of this device whose extent it computed from its shape and strides;
            // the library checks every length against the plan.
            let (cache, step, q, out) = unsafe {
                let mut cache = KvCache::plain(buffer_ref(k)?, buffer_ref(v)?);
                cache.k_scales = k_scales.map(|b| buffer_ref(b)).transpose()?;
                cache.v_scales = v_scales.map(|b| buffer_ref(b)).transpose()?;
                let (sinks, alibi_slopes, tree_masks, tree_positions) = variant;
                let view = |b: Option<Buf>| b.map(|b| buffer_ref(b)).transpose();
                cache.variant = VariantBuffers { sinks: view(sinks)?, alibi_slopes: view(alibi_slopes)?, tree_masks: view(tree_masks)?, tree_positions: view(tree_positions)? };
                let step = match seq_lens {
                    Some(l) => Some(StepInputs {
                        seq_lens: buffer_ref(l)?,
                        block_table: block_table.map(|b| buffer_ref(b)).transpose()?,
                        seq_starts: seq_starts.map(|b| buffer_ref(b)).transpose()?,
                    }),
                    None => None,
                };
                (cache, step, buffer_ref(q)?, buffer_mut(out)?)
            };
            let (ws, ws_bytes) = (workspace.0, workspace.1 * convert::elem(&workspace.2)?.size_bytes());
            self.ctx.with_current(|| self.attn.run_raw(&plan.inner, step.as_ref(), q, &cache, out, ws, ws_bytes, stream as _)).map_err(py_err)
        })
    }

    /// `append_kv` (`append`) or `quantize_kv`: writes K or V of any format.
    #[pyo3(signature = (append, shape, seq_lens, block_table, rows, data, scales, stream))]
    #[allow(clippy::too_many_arguments)]
    fn write_kv(&self, py: Python<'_>, append: bool, shape: &PyShape, seq_lens: Buf, block_table: Option<Buf>, rows: Buf, data: Buf, scales: Option<Buf>, stream: usize) -> PyResult<()> {
        py.detach(|| {
            // SAFETY: as in `run`.
            let (step, rows, out) = unsafe {
                let step = StepInputs { seq_lens: buffer_ref(seq_lens)?, block_table: block_table.map(|b| buffer_ref(b)).transpose()?, seq_starts: None };
                let out = KvMut { data: buffer_mut(data)?, scales: scales.map(|b| buffer_mut(b)).transpose()? };
                (step, buffer_ref(rows)?, out)
            };
            self.ctx
                .with_current(|| {
                    if append {
                        self.attn.append_kv_raw(&shape.inner, &step, rows, out, stream as _)
                    } else {
                        self.attn.quantize_kv_raw(&shape.inner, &step, rows, out, stream as _)
                    }
                })
                .map_err(py_err)
        })
    }

    /// `append_rows`: any number of new rows per sequence, read with the
    /// given element strides `(batch, token, head)`.
    #[pyo3(signature = (shape, seq_lens, block_table, rows, strides, count, data, scales, stream))]
    #[allow(clippy::too_many_arguments)]
    fn append_rows(&self, py: Python<'_>, shape: &PyShape, seq_lens: Buf, block_table: Option<Buf>, rows: Buf, strides: (u64, u64, u64), count: u32, data: Buf, scales: Option<Buf>, stream: usize) -> PyResult<()> {
        py.detach(|| {
            // SAFETY: as in `run`.
            let (step, rows, out) = unsafe {
                let step = StepInputs { seq_lens: buffer_ref(seq_lens)?, block_table: block_table.map(|b| buffer_ref(b)).transpose()?, seq_starts: None };
                let out = KvMut { data: buffer_mut(data)?, scales: scales.map(|b| buffer_mut(b)).transpose()? };
                (step, buffer_ref(rows)?, out)
            };
            let strides = decode_attn::KvStrides { batch: strides.0, token: strides.1, head: strides.2 };
            self.ctx.with_current(|| self.attn.append_rows_raw(&shape.inner, &step, rows, strides, count, out, stream as _)).map_err(py_err)
        })
    }

    #[pyo3(signature = (shape, seq_lens, data, scales, plain, stream))]
    #[allow(clippy::too_many_arguments)]
    fn dequantize_kv(&self, py: Python<'_>, shape: &PyShape, seq_lens: Buf, data: Buf, scales: Option<Buf>, plain: Buf, stream: usize) -> PyResult<()> {
        py.detach(|| {
            // SAFETY: as in `run`.
            let (lens, data, scales, plain) = unsafe { (buffer_ref(seq_lens)?, buffer_ref(data)?, scales.map(|b| buffer_ref(b)).transpose()?, buffer_mut(plain)?) };
            self.ctx.with_current(|| self.attn.dequantize_kv_raw(&shape.inner, lens, data, scales, plain, stream as _)).map_err(py_err)
        })
    }

    #[pyo3(signature = (shape, seq_lens, by, stream))]
    fn advance_seq_lens(&self, py: Python<'_>, shape: &PyShape, seq_lens: Buf, by: u32, stream: usize) -> PyResult<()> {
        py.detach(|| {
            // SAFETY: as in `run`.
            let lens = unsafe { buffer_mut(seq_lens)? };
            self.ctx.with_current(|| self.attn.advance_seq_lens_raw(&shape.inner, lens, by, stream as _)).map_err(py_err)
        })
    }
}

impl PyDevice {
    fn same_device(&self, plan: &PyPlan) -> PyResult<()> {
        if plan.device == self.ctx.ordinal {
            Ok(())
        } else {
            Err(convert::invalid("plan", &format!("a plan made for cuda:{}", self.ctx.ordinal), format!("one for cuda:{}", plan.device)))
        }
    }
}

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyShape>()?;
    m.add_class::<PyPlan>()?;
    m.add_class::<PyDevice>()?;
    m.add_function(wrap_pyfunction!(check_seq_lens, m)?)?;
    m.add_function(wrap_pyfunction!(check_block_table, m)?)?;
    m.add_function(wrap_pyfunction!(context::device_count, m)?)?;
    m.add_function(wrap_pyfunction!(kv_format_name, m)?)?;
    m.add("KV_FORMATS", KvFormat::ALL.map(KvFormat::name))?;
    m.add("KV_FORMAT_BITS", KvFormat::ALL.into_iter().map(|f| (f.name(), f.bits())).collect::<std::collections::HashMap<_, _>>())?;
    // MLA's latent rows (Q·K) and V's (O's) part of them.
    m.add("LATENT_QK_DIM", decode_attn::MLA_DIMS.qk)?;
    m.add("LATENT_V_DIM", decode_attn::MLA_DIMS.v)?;
    m.add("QUANTIZED_KV_FORMATS", KvFormat::ALL.into_iter().filter(|f| f.is_quantized()).map(KvFormat::name).collect::<Vec<_>>())?;
    // Formats of MLA's latent rows alone (head_dim 576): not for other models' caches.
    m.add("LATENT_ONLY_KV_FORMATS", KvFormat::ALL.into_iter().filter(|f| f.latent_only()).map(KvFormat::name).collect::<Vec<_>>())?;
    // A tuple: what the wheel carries kernels for.
    m.add("ARCHS", pyo3::types::PyTuple::new(m.py(), DecodeAttention::ARCHS)?)?;
    m.add("HAS_FATBIN", decode_attn::ModuleSource::EMBEDDED == decode_attn::ModuleSource::Fatbin)?;
    Ok(())
}
