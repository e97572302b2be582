// The stages after the Forward filter (HMMER 3.4 p7_Pipeline from p7_ForwardParser on), as the
// kernels of stages.cuh: parse; regions, traces and clusters (stage 2's three parts); envelopes,
// assemble, serialize, launched in that order.
//
// Thread → data: stage 1 gives each pair a lane group of 4 threads; the other kernels give each
// item (a pair, a multi-domain region or an envelope; the schedule orders them costliest first)
// `spread` threads of which the first runs it serially in its own arena, the first 4 as a lane
// group for the regions' and envelopes' Forward and Backward matrices. The traces take one
// thread a region, so that a warp runs 32 regions of about the same length (their chains of
// draws), in at most 96 registers (an SM holds 20 such warps, 640 regions). Lane width:
// HMMER's 4 float32 lanes, as loops (common.cuh). Rounding: compiled without fused multiply-adds
// (-fmad=false) and without flush-to-zero, so every operation is the IEEE float32 or double
// operation HMMER's SSE code performs; the device's double log and exp are used only where the
// result is certified (fwdback.cuh, pipeline.cuh).
#include "stages.cuh"

namespace gpuhmm {

// Item of this thread: `spread` threads per item, the first of them working (spread 32 gives each
// item a warp of its own, so that items of divergent control flow do not serialize each other).
__device__ int tail_item(int count, int spread) {
    const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long item = thread / spread;
    return thread % spread == 0 && item < count ? (int)item : -1;
}

// Stage 1: a lane group of 4 threads per pair (spread 4, every thread working).
__global__ void tail_parse(const gpuhmm_tail::Tail *t, int spread) {
    const long long item = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / spread;
    if (item < t->npairs) gpuhmm_tail::parse_pair(t, (int)item, gpuhmm_tail::warp_lane_group());
}

// Item of this thread's lane group: the first 4 of an item's `spread` threads.
__device__ int tail_group_item(int count, int spread) {
    const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long item = thread / spread;
    return thread % spread < 4 && item < count ? (int)item : -1;
}

__global__ void tail_regions(const gpuhmm_tail::Tail *t, int spread) {
    int item = tail_group_item(t->ntasks, spread);
    if (item >= 0) gpuhmm_tail::region_forward_item(t, item, gpuhmm_tail::warp_lane_group());
}

__global__ void __launch_bounds__(64, 10) tail_traces(const gpuhmm_tail::Tail *t, int spread) {
    int item = tail_item(t->ntasks, spread);
    if (item >= 0) gpuhmm_tail::region_traces_item(t, item);
}

__global__ void tail_clusters(const gpuhmm_tail::Tail *t, int spread) {
    int item = tail_item(t->ntasks, spread);
    if (item >= 0) gpuhmm_tail::region_envelopes_item(t, item);
}

__global__ void tail_envelopes(const gpuhmm_tail::Tail *t, int spread) {
    int item = tail_group_item(t->ntasks, spread);
    if (item >= 0) gpuhmm_tail::rescore_envelope(t, item, gpuhmm_tail::warp_lane_group());
}

__global__ void tail_assemble(const gpuhmm_tail::Tail *t, int spread) {
    int item = tail_item(t->npairs, spread);
    if (item >= 0) gpuhmm_tail::assemble_pair(t, item);
}

__global__ void tail_serialize(const gpuhmm_tail::Tail *t, int spread) {
    int item = tail_item(t->npairs, spread);
    if (item >= 0) gpuhmm_tail::serialize_pair(t, item);
}

}  // namespace gpuhmm
