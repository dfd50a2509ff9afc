//! The kernels loaded into a CUDA context, and their launches: the driver
//! layer under [`DecodeAttention`](crate::DecodeAttention). Every function
//! of the module is looked up once, at load, so a launch makes no driver
//! call but the launch itself (safe inside a stream capture).

use std::ffi::c_void;

use cust::device::{Device, DeviceAttribute};
use cust::function::FunctionAttribute;
use cust::module::Module;
use cust::sys as cuda;
use decode_attn_abi::{KernelId, DECODE_KERNELS, MERGE_KERNELS, QUANT_KERNELS, UTILITY_KERNELS};

use crate::error::{ensure, Error, Result};
use crate::launch_ex::{LaunchAttr, LaunchEx};
use crate::kernel_table;
use crate::occupancy::{DeviceInfo, KernelInfo, KernelLimits, MAX_CLUSTER};
use crate::tuning::{DeviceFacts, Tuning};

/// A raw stream handle (`CUstream`); null is the legacy default stream.
pub type RawStream = cuda::CUstream;

/// Where the kernels' module was loaded from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleSource {
    /// The embedded fatbin (`crate::FATBIN`): the cubin ptxas compiled
    /// at build time, loaded with no driver compilation.
    Fatbin,
    /// The embedded PTX, compiled by the driver (and cached in its
    /// compute cache): builds without ptxas embed it instead of a fatbin.
    Ptx,
}

impl ModuleSource {
    /// What this build embeds and [`DecodeAttention::new`](crate::DecodeAttention::new)
    /// loads: the fatbin, or in a build without ptxas the PTX.
    pub const EMBEDDED: ModuleSource = if crate::FATBIN.is_some() { ModuleSource::Fatbin } else { ModuleSource::Ptx };
}

/// The loaded module: every kernel's function handle, in the order of the
/// kernel tables (`DECODE_KERNELS`, `MERGE_KERNELS`, `QUANT_KERNELS`,
/// `UTILITY_KERNELS`), so that a launch finds its function by the index a
/// plan holds; the attention kernels' limits; the device's figures.
pub(crate) struct Kernels {
    /// Keeps the functions below alive.
    _module: Module,
    pub(crate) source: ModuleSource,
    pub(crate) device: DeviceInfo,
    decode: Vec<(cuda::CUfunction, KernelInfo)>,
    merge: Vec<cuda::CUfunction>,
    quant: Vec<cuda::CUfunction>,
    utility: Vec<cuda::CUfunction>,
    /// `cuLaunchKernelEx`, for cluster and programmatic launches (`None`:
    /// the driver has none, and `device.max_cluster` is 0).
    launch_ex: Option<LaunchEx>,
}

/// A kernel of the module: its table and its index there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    Decode(usize),
    Merge(usize),
    Quant(usize),
    /// By name, one of `UTILITY_KERNELS`.
    Utility(&'static str),
}

impl KernelLimits for Kernels {
    fn limits(&self, id: &KernelId) -> Option<KernelInfo> {
        kernel_table::decode_index(id).and_then(|i| self.decode_limits(i))
    }
}

// SAFETY: CUfunction handles are plain driver handles, valid in the module's
// context from any thread; the struct has no interior mutability.
unsafe impl Send for Kernels {}
unsafe impl Sync for Kernels {}

/// Maps a raw driver status (cust keeps its own mapping private).
pub(crate) fn driver(call: &'static str, status: cuda::CUresult) -> Result<()> {
    if status == cuda::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Driver { call, code: status as u32 })
    }
}

fn device_attr(dev: &Device, attr: DeviceAttribute) -> Result<u32> {
    Ok(dev.get_attribute(attr)? as u32)
}

/// The kernels' module: the embedded fatbin, or in a build without ptxas
/// the PTX (the driver then compiles ~1000 kernels: minutes on a cold
/// cache). Either is for one architecture ([`crate::PTX_ARCH`]): another
/// device gets `Unsupported`, naming both.
fn load_module(dev: &Device) -> Result<(Module, ModuleSource)> {
    let (major, minor) = (device_attr(dev, DeviceAttribute::ComputeCapabilityMajor)?, device_attr(dev, DeviceAttribute::ComputeCapabilityMinor)?);
    // `sm_90a` is compiled for compute capability 9.0 exactly.
    let arch = crate::PTX_ARCH.trim_start_matches("sm_").trim_end_matches('a');
    if arch != format!("{major}{minor}") {
        return Err(Error::Unsupported(format!("the kernels are built for {} only; this GPU is of compute capability {major}.{minor}", crate::PTX_ARCH)));
    }
    match (crate::FATBIN, crate::EMBEDDED_PTX) {
        (Some(fatbin), _) => Ok((Module::from_fatbin(fatbin, &[])?, ModuleSource::Fatbin)),
        (None, Some(ptx)) => Ok((Module::from_ptx(ptx, &[])?, ModuleSource::Ptx)),
        (None, None) => Err(Error::Unsupported("this build embeds neither a fatbin nor PTX".into())),
    }
}

impl Kernels {
    /// Loads the module into the current context, looks up every kernel and
    /// reads the device's limits.
    pub(crate) fn load() -> Result<Self> {
        let dev = cust::context::CurrentContext::get_device()?;
        let (module, source) = load_module(&dev)?;
        let mut optin = 0i32;
        // SAFETY: plain attribute query on a valid device handle.
        unsafe {
            driver(
                "cuDeviceGetAttribute",
                cuda::cuDeviceGetAttribute(&mut optin, cuda::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev.as_raw()),
            )?;
        }
        // Clusters: compute capability 9.0+, launched with cuLaunchKernelEx.
        let launch_ex = if device_attr(&dev, DeviceAttribute::ComputeCapabilityMajor)? >= 9 { LaunchEx::load() } else { None };
        let facts = DeviceFacts {
            compute_capability: (device_attr(&dev, DeviceAttribute::ComputeCapabilityMajor)?, device_attr(&dev, DeviceAttribute::ComputeCapabilityMinor)?),
            sm_count: device_attr(&dev, DeviceAttribute::MultiprocessorCount)?,
            l2_bytes: device_attr(&dev, DeviceAttribute::L2CacheSize)?,
            // Not every driver reports them (then the nearest table is
            // picked by SMs alone).
            memory_clock_khz: device_attr(&dev, DeviceAttribute::MemoryClockRate).unwrap_or(0),
            memory_bus_bits: device_attr(&dev, DeviceAttribute::GlobalMemoryBusWidth).unwrap_or(0),
        };
        let device = DeviceInfo {
            tuning: *Tuning::for_device(&facts),
            max_cluster: if launch_ex.is_some() { MAX_CLUSTER } else { 0 },
            sm_count: facts.sm_count,
            max_smem_per_block: optin as u32,
            max_smem_per_sm: device_attr(&dev, DeviceAttribute::MaxSharedMemoryPerMultiprocessor)?,
            max_threads_per_sm: device_attr(&dev, DeviceAttribute::MaxThreadsPerMultiprocessor)?,
            regs_per_sm: device_attr(&dev, DeviceAttribute::MaxRegistersPerMultiprocessor)?,
            l2_bytes: facts.l2_bytes,
            facts,
        };
        let mut decode = Vec::with_capacity(DECODE_KERNELS.len());
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
            decode.push((f.to_raw(), info));
        }
        let functions = |names: &mut dyn Iterator<Item = &'static str>| names.map(|name| Ok(module.get_function(name)?.to_raw())).collect::<Result<Vec<_>>>();
        let merge = functions(&mut MERGE_KERNELS.iter().map(|k| k.name))?;
        let quant = functions(&mut QUANT_KERNELS.iter().map(|k| k.name))?;
        let utility = functions(&mut UTILITY_KERNELS.into_iter())?;
        Ok(Kernels { _module: module, source, device, decode, merge, quant, utility, launch_ex })
    }

    /// An attention kernel's limits (the index of `DECODE_KERNELS` a plan
    /// holds), `None` past the table.
    pub(crate) fn decode_limits(&self, index: usize) -> Option<KernelInfo> {
        self.decode.get(index).map(|&(_, info)| info)
    }

    /// The function of `entry`.
    fn function(&self, entry: Entry) -> Result<cuda::CUfunction> {
        let f = match entry {
            Entry::Decode(i) => self.decode.get(i).map(|&(f, _)| f),
            Entry::Merge(i) => self.merge.get(i).copied(),
            Entry::Quant(i) => self.quant.get(i).copied(),
            Entry::Utility(name) => UTILITY_KERNELS.iter().position(|&u| u == name).map(|i| self.utility[i]),
        };
        f.ok_or_else(|| Error::Unsupported(format!("kernel {entry:?} is not in the module")))
    }

    /// The driver's cluster entry points (none before CUDA 12).
    fn cluster_launcher(&self) -> Result<LaunchEx> {
        self.launch_ex.ok_or_else(|| Error::Unsupported("thread-block clusters: this driver has no cuLaunchKernelEx".into()))
    }

    /// Launches kernel `entry` with `params` as its single by-value argument.
    ///
    /// # Safety
    /// `P` must be the kernel's `#[repr(C)]` params type, and the launch shape
    /// and every address in `params` must be valid for that kernel.
    pub(crate) unsafe fn launch<P>(&self, entry: Entry, grid: (u32, u32, u32), threads: u32, smem: u32, params: &P, stream: RawStream) -> Result<()> {
        let func = self.function(entry)?;
        let (gx, gy, gz) = grid;
        let mut args = [params as *const P as *mut c_void];
        driver("cuLaunchKernel", cuda::cuLaunchKernel(func, gx, gy, gz, threads, 1, 1, smem, stream, args.as_mut_ptr(), std::ptr::null_mut()))
    }

    /// [`Kernels::launch`] as clusters of `cluster` blocks along x.
    ///
    /// # Safety
    /// As [`Kernels::launch`]; `grid.0` a multiple of `cluster`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn launch_clusters<P>(&self, entry: Entry, grid: (u32, u32, u32), threads: u32, smem: u32, cluster: u32, params: &P, stream: RawStream) -> Result<()> {
        let (func, launcher) = (self.function(entry)?, self.cluster_launcher()?);
        ensure(cluster.is_power_of_two() && grid.0 % cluster == 0, "plan", format!("a grid of whole clusters of {cluster} blocks"), grid.0)?;
        let mut args = [params as *const P as *mut c_void];
        driver("cuLaunchKernelEx", launcher.launch(func, grid, threads, smem, LaunchAttr::Cluster(cluster), stream, args.as_mut_ptr()))
    }

    /// [`Kernels::launch`] of a kernel that reads the results of the
    /// stream's previous kernel only after `griddepcontrol.wait`: with
    /// `cuLaunchKernelEx` it is a programmatic dependent launch, whose blocks
    /// are scheduled while that kernel finishes (it executed
    /// `griddepcontrol.launch_dependents`) instead of after it; without, a
    /// plain launch (the wait is then a no-op).
    ///
    /// # Safety
    /// As [`Kernels::launch`].
    pub(crate) unsafe fn launch_overlapping<P>(&self, entry: Entry, grid: (u32, u32, u32), threads: u32, smem: u32, params: &P, stream: RawStream) -> Result<()> {
        let Some(launcher) = self.launch_ex else { return self.launch(entry, grid, threads, smem, params, stream) };
        let func = self.function(entry)?;
        let mut args = [params as *const P as *mut c_void];
        driver("cuLaunchKernelEx", launcher.launch(func, grid, threads, smem, LaunchAttr::OverlapPrevious, stream, args.as_mut_ptr()))
    }

    /// Clusters of `cluster` blocks of kernel `entry` resident at once
    /// (`cuOccupancyMaxActiveClusters`).
    pub(crate) fn max_active_clusters(&self, entry: Entry, grid: (u32, u32, u32), threads: u32, smem: u32, cluster: u32) -> Result<u32> {
        let (func, launcher) = (self.function(entry)?, self.cluster_launcher()?);
        // SAFETY: an occupancy query on a function of this module.
        unsafe { launcher.max_active_clusters(func, grid, threads, smem, cluster) }.map_err(|code| Error::Driver { call: "cuOccupancyMaxActiveClusters", code: code as u32 })
    }
}
