//! Launches with a launch attribute: a thread-block cluster dimension, or
//! programmatic stream serialization (the launch may overlap the previous
//! kernel of the stream until it executes `griddepcontrol.wait`).
//! `cuLaunchKernelEx` (CUDA 12) postdates the driver bindings cust 0.3
//! ships, so it is looked up at run time with `cuGetProcAddress`; its config
//! and attribute structs are declared here with the layout of CUDA 12's
//! `cuda.h`.

use std::ffi::{c_void, CStr};

use cust::sys as cuda;

/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
const ATTRIBUTE_CLUSTER_DIMENSION: u32 = 4;
/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`.
const ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: u32 = 6;

/// The one attribute of a [`LaunchEx::launch`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum LaunchAttr {
    /// Clusters of this many blocks along x.
    Cluster(u32),
    /// Programmatic dependent launch: the grid's blocks may start while the
    /// stream's previous kernel runs (once its blocks have executed
    /// `griddepcontrol.launch_dependents`); the kernel orders its reads of
    /// that kernel's results with `griddepcontrol.wait`.
    OverlapPrevious,
}

/// `CUlaunchAttribute`: an id, padding to 8 bytes, a 64-byte value union
/// (for the cluster dimension its first three words: x, y, z; for
/// programmatic serialization an `int` flag).
#[repr(C, align(8))]
struct LaunchAttribute {
    id: u32,
    _pad: u32,
    value: [u32; 16],
}

/// `CUlaunchConfig`.
#[repr(C)]
struct LaunchConfig {
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    stream: cuda::CUstream,
    attrs: *mut LaunchAttribute,
    num_attrs: u32,
}

const _: () = assert!(std::mem::size_of::<LaunchAttribute>() == 72);
const _: () = assert!(std::mem::size_of::<LaunchConfig>() == 56);

type LaunchKernelEx = unsafe extern "C" fn(*const LaunchConfig, cuda::CUfunction, *mut *mut c_void, *mut *mut c_void) -> cuda::CUresult;
type MaxActiveClusters = unsafe extern "C" fn(*mut i32, cuda::CUfunction, *const LaunchConfig) -> cuda::CUresult;

/// The driver's `cuLaunchKernelEx` and `cuOccupancyMaxActiveClusters`, or
/// `None` when it lacks them (drivers before CUDA 12): plans then merge
/// through global memory, and merge kernels start after the attention
/// kernel ends.
#[derive(Clone, Copy)]
pub(crate) struct LaunchEx {
    launch: LaunchKernelEx,
    max_active: MaxActiveClusters,
}

/// A driver entry point of the CUDA 12.0 ABI, or null.
fn proc_address(name: &CStr) -> *mut c_void {
    let mut pfn: *mut c_void = std::ptr::null_mut();
    // SAFETY: a symbol lookup into a local pointer.
    let status = unsafe { cuda::cuGetProcAddress(name.as_ptr(), &mut pfn, 12000, 0) };
    if status == cuda::CUresult::CUDA_SUCCESS {
        pfn
    } else {
        std::ptr::null_mut()
    }
}

impl LaunchEx {
    pub(crate) fn load() -> Option<Self> {
        let (launch, max_active) = (proc_address(c"cuLaunchKernelEx"), proc_address(c"cuOccupancyMaxActiveClusters"));
        if launch.is_null() || max_active.is_null() {
            return None;
        }
        // SAFETY: the driver's entry points have these signatures in CUDA 12.
        unsafe {
            Some(LaunchEx {
                launch: std::mem::transmute::<*mut c_void, LaunchKernelEx>(launch),
                max_active: std::mem::transmute::<*mut c_void, MaxActiveClusters>(max_active),
            })
        }
    }

    /// How many clusters of `cluster` blocks of this shape can be resident
    /// at once (`cuOccupancyMaxActiveClusters`).
    ///
    /// # Safety
    /// `func` must be a function of the current context.
    pub(crate) unsafe fn max_active_clusters(&self, func: cuda::CUfunction, grid: (u32, u32, u32), threads: u32, smem: u32, cluster: u32) -> Result<u32, cuda::CUresult> {
        let mut attr = attribute(LaunchAttr::Cluster(cluster));
        let config = launch_config(grid, threads, smem, std::ptr::null_mut(), &mut attr);
        let mut n = 0i32;
        match (self.max_active)(&mut n, func, &config) {
            cuda::CUresult::CUDA_SUCCESS => Ok(n.max(0) as u32),
            e => Err(e),
        }
    }

    /// Launches `func` with `attr` (clusters: `grid.0` a multiple of the
    /// cluster size).
    ///
    /// # Safety
    /// As `cuLaunchKernel`: `args` must point to the kernel's parameters and
    /// the launch shape must be valid for it.
    pub(crate) unsafe fn launch(
        &self,
        func: cuda::CUfunction,
        grid: (u32, u32, u32),
        threads: u32,
        smem: u32,
        attr: LaunchAttr,
        stream: cuda::CUstream,
        args: *mut *mut c_void,
    ) -> cuda::CUresult {
        let mut attr = attribute(attr);
        let config = launch_config(grid, threads, smem, stream, &mut attr);
        (self.launch)(&config, func, args, std::ptr::null_mut())
    }
}

fn attribute(attr: LaunchAttr) -> LaunchAttribute {
    let mut value = [0u32; 16];
    let id = match attr {
        LaunchAttr::Cluster(cluster) => {
            value[..3].copy_from_slice(&[cluster, 1, 1]);
            ATTRIBUTE_CLUSTER_DIMENSION
        }
        LaunchAttr::OverlapPrevious => {
            value[0] = 1;
            ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        }
    };
    LaunchAttribute { id, _pad: 0, value }
}

fn launch_config(grid: (u32, u32, u32), threads: u32, smem: u32, stream: cuda::CUstream, attr: &mut LaunchAttribute) -> LaunchConfig {
    LaunchConfig { grid: [grid.0, grid.1, grid.2], block: [threads, 1, 1], shared_mem_bytes: smem, stream, attrs: attr, num_attrs: 1 }
}
