//! A CUDA context for the GPU tests and the benchmark, or why there is none;
//! and a captured CUDA graph, which both replay.
#![allow(dead_code)]

/// A CUDA context on device `ordinal`, or why there is none.
pub fn init_cuda(ordinal: u32) -> std::result::Result<decode_attn::cust::context::Context, String> {
    use decode_attn::cust;
    // (cust's Display of the stub's message nests quotes: the error's name
    // says it in one word.)
    cust::init(cust::CudaFlags::empty()).map_err(|e| format!("the CUDA driver found no GPU ({e:?})"))?;
    let n = cust::device::Device::num_devices().map_err(|e| format!("{e}"))?;
    if n == 0 {
        return Err("no CUDA device found".into());
    }
    if ordinal >= n {
        return Err(format!("device {ordinal} requested, {n} present"));
    }
    let dev = cust::device::Device::get_device(ordinal).map_err(|e| format!("{e}"))?;
    cust::context::Context::new(dev).map_err(|e| format!("creating a context: {e}"))
}

use decode_attn::cust::stream::Stream;
use decode_attn::cust::sys as cuda;

/// A raw driver status as a `Result` naming the call.
pub fn check(what: &str, s: cuda::CUresult) -> std::result::Result<(), String> {
    if s == cuda::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what}: {s:?}"))
    }
}

/// A captured and instantiated CUDA graph (destroyed on drop).
pub struct Graph {
    graph: cuda::CUgraph,
    exec: cuda::CUgraphExec,
}

impl Graph {
    /// Captures what `enqueue` puts on `stream`, in global capture mode (a
    /// call that is not allowed inside a capture fails it).
    pub fn capture<E: std::fmt::Display>(stream: &Stream, enqueue: impl FnOnce() -> std::result::Result<(), E>) -> std::result::Result<Graph, String> {
        let raw = stream.as_inner();
        // SAFETY: capture on the caller's stream, ended below on every path.
        check("cuStreamBeginCapture", unsafe { cuda::cuStreamBeginCapture_v2(raw, cuda::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL) })?;
        let enqueued = enqueue();
        let mut graph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above.
        check("cuStreamEndCapture", unsafe { cuda::cuStreamEndCapture(raw, &mut graph) })?;
        enqueued.map_err(|e| format!("capturing: {e}"))?;
        let mut exec = std::ptr::null_mut();
        // SAFETY: instantiates the graph just captured.
        check("cuGraphInstantiate", unsafe { cuda::cuGraphInstantiateWithFlags(&mut exec, graph, 0) })?;
        Ok(Graph { graph, exec })
    }

    pub fn launch(&self, stream: &Stream) -> std::result::Result<(), String> {
        // SAFETY: a live instantiated graph.
        check("cuGraphLaunch", unsafe { cuda::cuGraphLaunch(self.exec, stream.as_inner()) })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: this struct owns both handles.
        unsafe {
            cuda::cuGraphExecDestroy(self.exec);
            cuda::cuGraphDestroy(self.graph);
        }
    }
}
