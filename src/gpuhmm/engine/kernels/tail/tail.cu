// The stages after the Forward filter (HMMER 3.4 p7_Pipeline from p7_ForwardParser on) for a
// batch of (model, target) pairs: batch.cuh's run_pair on the GPU.
//
// Thread → data: thread t runs pairs t, t + T, t + 2T, … (T threads in all; the host orders the
// pairs by decreasing work), each serially from the Forward parser to the hit, in its own slice
// of the scratch space. Lane width: HMMER's 4 float32 lanes, as loops (common.cuh).
// Rounding: compiled without fused multiply-adds (-fmad=false) and without flush-to-zero, so
// every operation is the IEEE float32 or double operation HMMER's SSE code performs; the device's
// double log and exp are used only where the result is certified (fwdback.cuh, pipeline.cuh).
#include "batch.cuh"

namespace gpuhmm {

__global__ void tail_pairs(const gpuhmm_tail::Batch *batch) {
    const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long threads = (long long)gridDim.x * blockDim.x;
    char *scratch = batch->scratch + thread * batch->scratch_bytes;
    for (long long p = thread; p < batch->npairs; p += threads) gpuhmm_tail::run_pair(batch, (int)p, scratch);
}

}  // namespace gpuhmm
