//! The kernels loaded into a CUDA context, and their launches: the driver
//! layer under [`DecodeAttention`](crate::DecodeAttention). Every function
//! of the module is looked up once, at load, so a launch makes no driver
//! call but the launch itself (safe inside a stream capture).

use std::ffi::c_void;

use cust::device::{Device, DeviceAttribute};
use cust::function::FunctionAttribute;
use cust::module::Module;
use cust::sys as cuda;
use decode_attn_abi::{Arch, KernelId, DECODE_KERNELS, MERGE_KERNELS, QUANT_KERNELS, UTILITY_KERNELS};

use crate::error::{ensure, Error, Result};
use crate::launch_ex::{LaunchAttr, LaunchEx};
use crate::kernel_table;
use crate::occupancy::{DeviceInfo, KernelInfo, KernelLimits, MAX_CLUSTER};
use crate::tuning::{DeviceFacts, Tuning};

/// A raw stream handle (`CUstream`); null is the legacy default stream.
pub type RawStream = cuda::CUstream;

/// Where the kernels' modules were loaded from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleSource {
    /// The embedded fatbins' cubins, which ptxas compiled at build time for
    /// the GPU's architecture: loaded with no driver compilation.
    Fatbin,
    /// The embedded fatbins' portable PTX, compiled by the driver (and
    /// cached in its compute cache): on a GPU none of the cubins runs on
    /// (a later architecture, or sm_90 with `DECODE_ATTN_DEVICE_ARCH`).
    FatbinPtx,
    /// The embedded PTX, compiled by the driver (and cached in its
    /// compute cache): builds without ptxas embed it instead of a fatbin.
    Ptx,
}

impl ModuleSource {
    /// What this build embeds: fatbins, or in a build without ptxas PTX.
    pub const EMBEDDED: ModuleSource = if crate::MODULE_IMAGES[Arch::Sm90a as usize].fatbin.is_some() { ModuleSource::Fatbin } else { ModuleSource::Ptx };
}

/// The environment variable that makes [`Kernels::load`] plan and load as
/// for a GPU of a lower architecture than the device's (`sm_80`, `sm_89`):
/// how the portable kernels are tested on a Hopper GPU.
pub const DEVICE_ARCH_VAR: &str = "DECODE_ATTN_DEVICE_ARCH";

/// The loaded module: every kernel's function handle, in the order of the
/// kernel tables (`DECODE_KERNELS`, `MERGE_KERNELS`, `QUANT_KERNELS`,
/// `UTILITY_KERNELS`), so that a launch finds its function by the index a
/// plan holds; the attention kernels' limits; the device's figures.
pub(crate) struct Kernels {
    /// Keeps the functions below alive.
    _modules: Vec<(Arch, Module)>,
    pub(crate) source: ModuleSource,
    pub(crate) device: DeviceInfo,
    /// Per table row; `None` for the kernels of a module not loaded here
    /// (another architecture's).
    decode: Vec<Option<(cuda::CUfunction, KernelInfo)>>,
    merge: Vec<Option<cuda::CUfunction>>,
    quant: Vec<Option<cuda::CUfunction>>,
    /// Of the module that holds the sm_80 kernels here (the tensor-core
    /// rate, `wgmma`, is in Hopper's alone).
    utility: Vec<Option<cuda::CUfunction>>,
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

/// The kernels' architecture on this GPU ([`Arch::for_compute_capability`]),
/// or the lower one `DECODE_ATTN_DEVICE_ARCH` names; `Unsupported` before
/// sm_80, naming the compute capability.
fn device_arch(major: u32, minor: u32) -> Result<Arch> {
    let native = Arch::for_compute_capability(major, minor)
        .ok_or_else(|| Error::Unsupported(format!("this GPU is of compute capability {major}.{minor}; the kernels need 8.0 (sm_80) or later")))?;
    let Ok(name) = std::env::var(DEVICE_ARCH_VAR) else { return Ok(native) };
    let forced = Arch::from_name(&name).ok_or_else(|| Error::Unsupported(format!("{DEVICE_ARCH_VAR}={name}: expected one of sm_80, sm_89, sm_90a")))?;
    let (fmaj, fmin) = forced.compute_capability();
    let runs = if forced.is_specific() { forced == native } else { (major, minor) >= (fmaj, fmin) };
    if !runs {
        return Err(Error::Unsupported(format!("{DEVICE_ARCH_VAR}={name}: {name} kernels do not run on this GPU (compute capability {major}.{minor})")));
    }
    Ok(forced)
}

/// The modules a GPU whose kernels are of `arch` loads: the embedded
/// fatbin (or PTX) of each architecture it [`Arch::loads`], and whether the
/// driver had to compile PTX for any of them.
fn load_modules(arch: Arch, major: u32, minor: u32) -> Result<(Vec<(Arch, Module)>, ModuleSource)> {
    let mut modules = Vec::new();
    let mut source = ModuleSource::Fatbin;
    for image in crate::MODULE_IMAGES.iter().filter(|m| arch.loads(m.arch)) {
        let module = match (image.fatbin, image.ptx) {
            (Some(fatbin), _) => {
                // A cubin of sm_XY runs on X.Y and later GPUs of major X
                // (exactly 9.0 for sm_90a); elsewhere the driver compiles
                // the fatbin's PTX.
                let (cmaj, cmin) = image.arch.compute_capability();
                if major != cmaj || minor < cmin || (image.arch.is_specific() && minor != cmin) {
                    source = ModuleSource::FatbinPtx;
                }
                Module::from_fatbin(fatbin, &[])?
            }
            (None, Some(ptx)) => {
                source = ModuleSource::Ptx;
                Module::from_ptx(ptx, &[])?
            }
            (None, None) => return Err(Error::Unsupported(format!("this build embeds no {} kernels", image.arch.name()))),
        };
        modules.push((image.arch, module));
    }
    Ok((modules, source))
}

impl Kernels {
    /// Loads the module into the current context, looks up every kernel and
    /// reads the device's limits.
    pub(crate) fn load() -> Result<Self> {
        let dev = cust::context::CurrentContext::get_device()?;
        let (major, minor) = (device_attr(&dev, DeviceAttribute::ComputeCapabilityMajor)?, device_attr(&dev, DeviceAttribute::ComputeCapabilityMinor)?);
        let arch = device_arch(major, minor)?;
        let (modules, source) = load_modules(arch, major, minor)?;
        let mut optin = 0i32;
        // SAFETY: plain attribute query on a valid device handle.
        unsafe {
            driver(
                "cuDeviceGetAttribute",
                cuda::cuDeviceGetAttribute(&mut optin, cuda::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev.as_raw()),
            )?;
        }
        // Clusters and programmatic launches: compute capability 9.0+,
        // launched with cuLaunchKernelEx, and kernels built for them (a
        // specific target's: the portable merges do not wait for their
        // prerequisite, so they must not overlap it).
        let launch_ex = if major >= 9 && arch.is_specific() { LaunchEx::load() } else { None };
        let facts = DeviceFacts {
            compute_capability: (major, minor),
            sm_count: device_attr(&dev, DeviceAttribute::MultiprocessorCount)?,
            l2_bytes: device_attr(&dev, DeviceAttribute::L2CacheSize)?,
            // Not every driver reports them (then the nearest table is
            // picked by SMs alone).
            memory_clock_khz: device_attr(&dev, DeviceAttribute::MemoryClockRate).unwrap_or(0),
            memory_bus_bits: device_attr(&dev, DeviceAttribute::GlobalMemoryBusWidth).unwrap_or(0),
        };
        let device = DeviceInfo {
            arch,
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
        let module_of = |a: Arch| modules.iter().find(|(m, _)| *m == a).map(|(_, m)| m);
        let mut decode = Vec::with_capacity(DECODE_KERNELS.len());
        for k in DECODE_KERNELS {
            let Some(module) = module_of(k.id.arch) else {
                decode.push(None);
                continue;
            };
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
            decode.push(Some((f.to_raw(), info)));
        }
        let function = |arch: Arch, name: &str| module_of(arch).map(|m| Ok(m.get_function(name)?.to_raw())).transpose();
        let merge = MERGE_KERNELS.iter().map(|k| function(k.id.arch, k.name)).collect::<Result<Vec<_>>>()?;
        let quant = QUANT_KERNELS.iter().map(|k| function(k.id.arch, k.name)).collect::<Result<Vec<_>>>()?;
        let home = arch.module_for(Arch::Sm80).ok_or_else(|| Error::Unsupported(format!("{}: no module holds the utility kernels", arch.name())))?;
        let home_module = module_of(home).ok_or_else(|| Error::Unsupported(format!("no {} module loaded", home.name())))?;
        let utility = UTILITY_KERNELS.iter().map(|name| home_module.get_function(name).ok().map(|f| f.to_raw())).collect();
        Ok(Kernels { _modules: modules, source, device, decode, merge, quant, utility, launch_ex })
    }

    /// An attention kernel's limits (the index of `DECODE_KERNELS` a plan
    /// holds), `None` past the table.
    pub(crate) fn decode_limits(&self, index: usize) -> Option<KernelInfo> {
        self.decode.get(index).copied().flatten().map(|(_, info)| info)
    }

    /// The function of `entry`.
    fn function(&self, entry: Entry) -> Result<cuda::CUfunction> {
        let f = match entry {
            Entry::Decode(i) => self.decode.get(i).copied().flatten().map(|(f, _)| f),
            Entry::Merge(i) => self.merge.get(i).copied().flatten(),
            Entry::Quant(i) => self.quant.get(i).copied().flatten(),
            Entry::Utility(name) => UTILITY_KERNELS.iter().position(|&u| u == name).and_then(|i| self.utility[i]),
        };
        f.ok_or_else(|| Error::Unsupported(format!("kernel {entry:?} is not in the modules loaded for {}", self.device.arch.name())))
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
