//! Shared by the GPU tests and the benchmark: random inputs for a shape,
//! uploaded to the device, run through the library, checked against the f64
//! reference.
#![allow(dead_code)]

use decode_attn::cust::memory::{CopyDestination, DeviceBuffer};
use decode_attn::cust::stream::Stream;
use decode_attn::half::{bf16, f16};
use decode_attn::reference;
use decode_attn::testing::{problem_inputs, round_bf16, round_f16, to_bf16, to_f16, Distribution};
use decode_attn::{DecodeAttention, DecodeShape, Dtype, Plan, Result, Workspace};

/// Device buffers of one problem, in either 16-bit type.
pub enum Buffers {
    Bf16 { q: DeviceBuffer<bf16>, k: DeviceBuffer<bf16>, v: DeviceBuffer<bf16>, o: DeviceBuffer<bf16> },
    F16 { q: DeviceBuffer<f16>, k: DeviceBuffer<f16>, v: DeviceBuffer<f16>, o: DeviceBuffer<f16> },
}

/// A problem's inputs: host copies (as the GPU sees them) and device buffers.
pub struct Problem {
    pub shape: DecodeShape,
    pub seq_lens: Vec<u32>,
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub bufs: Buffers,
}

/// Bit pattern that is NaN in both bf16 and f16.
const NAN16: u16 = 0x7FFF;

impl Problem {
    /// Random inputs from `dist` (rows past each sequence's length are NaN).
    pub fn new(shape: &DecodeShape, seq_lens: &[u32], dist: Distribution, seed: u64) -> Result<Problem> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (q, k, v) = problem_inputs(shape, seq_lens, dist, seed, threads)?;
        Problem::from_inputs(shape, seq_lens, q, k, v)
    }

    /// Uploads f32 inputs rounded to the shape's types; O starts as NaN.
    pub fn from_inputs(shape: &DecodeShape, seq_lens: &[u32], q: Vec<f32>, k: Vec<f32>, v: Vec<f32>) -> Result<Problem> {
        let n_o = shape.q_elems() as usize;
        let (q, k, v, bufs) = match shape.dtype {
            Dtype::Bf16 => {
                let bufs = Buffers::Bf16 {
                    q: DeviceBuffer::from_slice(&to_bf16(&q))?,
                    k: DeviceBuffer::from_slice(&to_bf16(&k))?,
                    v: DeviceBuffer::from_slice(&to_bf16(&v))?,
                    o: DeviceBuffer::from_slice(&vec![bf16::from_bits(NAN16); n_o])?,
                };
                (round_bf16(&q), round_bf16(&k), round_bf16(&v), bufs)
            }
            Dtype::F16 => {
                let bufs = Buffers::F16 {
                    q: DeviceBuffer::from_slice(&to_f16(&q))?,
                    k: DeviceBuffer::from_slice(&to_f16(&k))?,
                    v: DeviceBuffer::from_slice(&to_f16(&v))?,
                    o: DeviceBuffer::from_slice(&vec![f16::from_bits(NAN16); n_o])?,
                };
                (round_f16(&q), round_f16(&k), round_f16(&v), bufs)
            }
        };
        Ok(Problem { shape: shape.clone(), seq_lens: seq_lens.to_vec(), q, k, v, bufs })
    }

    /// Fills O with NaN so an unwritten element cannot pass.
    pub fn poison_output(&mut self) -> Result<()> {
        let n = self.shape.q_elems() as usize;
        match &mut self.bufs {
            Buffers::Bf16 { o, .. } => o.copy_from(&vec![bf16::from_bits(NAN16); n])?,
            Buffers::F16 { o, .. } => o.copy_from(&vec![f16::from_bits(NAN16); n])?,
        }
        Ok(())
    }

    pub fn run(&mut self, attn: &DecodeAttention, plan: &Plan, ws: &mut Workspace, stream: &Stream) -> Result<()> {
        match &mut self.bufs {
            Buffers::Bf16 { q, k, v, o } => attn.run(plan, &*q, &*k, &*v, &mut *o, ws, stream),
            Buffers::F16 { q, k, v, o } => attn.run(plan, &*q, &*k, &*v, &mut *o, ws, stream),
        }
    }

    pub fn output(&self) -> Result<Vec<f32>> {
        let n = self.shape.q_elems() as usize;
        Ok(match &self.bufs {
            Buffers::Bf16 { o, .. } => {
                let mut h = vec![bf16::ZERO; n];
                o.copy_to(&mut h)?;
                h.iter().map(|x| x.to_f32()).collect()
            }
            Buffers::F16 { o, .. } => {
                let mut h = vec![f16::ZERO; n];
                o.copy_to(&mut h)?;
                h.iter().map(|x| x.to_f32()).collect()
            }
        })
    }

    /// Reference output for the listed sequences (all when `None`).
    pub fn reference(&self, batches: Option<&[usize]>) -> Result<Vec<f64>> {
        let all: Vec<usize> = (0..self.shape.batch as usize).collect();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        reference::decode_attention_threads(&self.shape, &self.seq_lens, &self.q, &self.k, &self.v, batches.unwrap_or(&all), threads)
    }
}

pub mod cuda;
pub use cuda::init_cuda;
