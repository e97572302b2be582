// The stages after the Forward filter (HMMER 3.4 p7_Pipeline from p7_ForwardParser on), as the
// kernels of stages.cuh: parse; regions, traces and clusters (stage 2's three parts); envelopes,
// assemble, serialize, launched in that order.
//
// Thread → data: stage 1 gives each pair a lane group of 4 threads; the other kernels give each
// item (a pair, a multi-domain region or an envelope; the schedule orders them costliest first)
// `spread` threads of which the first runs it serially in its own arena, the first 4 as a lane
// group for the regions' and envelopes' Forward and Backward matrices. The traces and the
// clusters take a warp a region: lane 0 draws the chain of traces, which is one sequence, and
// the lanes split the null2 sums between traces and the link tests (32 regions a warp, one a
// lane, would diverge at every step). Lane width: HMMER's 4 float32 lanes, as loops
// (common.cuh). Rounding: compiled without fused multiply-adds
// (-fmad=false) and without flush-to-zero, so every operation is the IEEE float32 or double
// operation HMMER's SSE code performs; the device's double log and exp are used only where the
// result is certified (fwdback.cuh, pipeline.cuh).
#include "stages.cuh"

namespace gpuhmm {

// The kernels' indices in schedule.py, for the item clocks.
enum { PARSE, REGIONS, ENVELOPES, ASSEMBLE, SERIALIZE, TRACES, CLUSTERS };

__device__ unsigned long long tail_now() {
    unsigned long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    return ns;
}

// Where the benchmarks ask for it (t->item_ns), the kernel's longest item so far.
__device__ void tail_clocked(const gpuhmm_tail::Tail *t, int kernel, unsigned long long started) {
    if (t->item_ns) atomicMax(t->item_ns + kernel, tail_now() - started);
}

// Item of this thread when the first `lanes` of an item's `spread` threads work on it together
// (spread 32 gives each item a warp of its own, so that items of divergent control flow do not
// serialize each other).
__device__ int tail_lanes_item(int count, int spread, int lanes) {
    const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long item = thread / spread;
    return thread % spread < lanes && item < count ? (int)item : -1;
}

// Stage 1: a lane group of 4 threads per pair (spread 4, every thread working).
__global__ void tail_parse(const gpuhmm_tail::Tail *t, int spread) {
    const unsigned long long started = tail_now();
    const long long item = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / spread;
    if (item >= t->npairs) return;
    gpuhmm_tail::parse_pair(t, (int)item, gpuhmm_tail::warp_lane_group());
    tail_clocked(t, PARSE, started);
}

__global__ void tail_regions(const gpuhmm_tail::Tail *t, int spread) {
    const unsigned long long started = tail_now();
    int item = tail_lanes_item(t->ntasks, spread, 4);
    if (item < 0) return;
    gpuhmm_tail::region_forward_item(t, item, gpuhmm_tail::warp_lane_group());
    tail_clocked(t, REGIONS, started);
}

__global__ void tail_traces(const gpuhmm_tail::Tail *t, int spread) {
    const unsigned long long started = tail_now();
    int item = tail_lanes_item(t->ntasks, spread, 32);
    if (item < 0) return;
    gpuhmm_tail::region_traces_item(t, item, gpuhmm_tail::this_warp());
    tail_clocked(t, TRACES, started);
}

__global__ void tail_clusters(const gpuhmm_tail::Tail *t, int spread) {
    const unsigned long long started = tail_now();
    int item = tail_lanes_item(t->ntasks, spread, 32);
    if (item < 0) return;
    gpuhmm_tail::region_envelopes_item(t, item, gpuhmm_tail::this_warp());
    tail_clocked(t, CLUSTERS, started);
}

__global__ void tail_envelopes(const gpuhmm_tail::Tail *t, int spread) {
    const unsigned long long started = tail_now();
    int item = tail_lanes_item(t->ntasks, spread, 4);
    if (item < 0) return;
    gpuhmm_tail::rescore_envelope(t, item, gpuhmm_tail::warp_lane_group());
    tail_clocked(t, ENVELOPES, started);
}

__global__ void tail_assemble(const gpuhmm_tail::Tail *t, int spread) {
    const unsigned long long started = tail_now();
    int item = tail_lanes_item(t->npairs, spread, 1);
    if (item < 0) return;
    gpuhmm_tail::assemble_pair(t, item);
    tail_clocked(t, ASSEMBLE, started);
}

__global__ void tail_serialize(const gpuhmm_tail::Tail *t, int spread) {
    const unsigned long long started = tail_now();
    int item = tail_lanes_item(t->npairs, spread, 1);
    if (item < 0) return;
    gpuhmm_tail::serialize_pair(t, item);
    tail_clocked(t, SERIALIZE, started);
}

}  // namespace gpuhmm
