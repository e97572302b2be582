// The stages after the Forward filter (HMMER 3.4 p7_Pipeline from p7_ForwardParser on), as the
// kernels of stages.cuh: parse; regions, traces and clusters (stage 2's three parts); envelopes,
// assemble, serialize, launched in that order.
//
// Thread → data: each item (a pair, a multi-domain region or an envelope; the schedule orders them
// costliest first) gets `spread` threads (launch.THREADS_PER_ITEM), of which the first runs it
// serially in its own arena, the first 4 as a lane group for the parsers and the regions' and
// envelopes' Forward and Backward matrices; `group` consecutive items of one model share a warp
// (launch.SAME_MODEL_ITEMS). The longest pairs' parsers and envelopes take a warp each
// (tail_parse_wide, tail_envelopes_wide), launched beside tail_parse and tail_envelopes. The traces and the
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
enum { PARSE, REGIONS, ENVELOPES, ASSEMBLE, SERIALIZE, TRACES, CLUSTERS, PARSE_WIDE, ENVELOPES_WIDE };

__device__ unsigned long long tail_now() {
    unsigned long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    return ns;
}

// Item of this thread when the first `lanes` of an item's `spread` threads work on it together
// (spread 32 gives each item a warp of its own, so that items of divergent control flow do not
// serialize each other), and `group` consecutive items run side by side as one unit (a warp's
// lane groups on one model's problems, in step). Units go out costliest first, a block's slots
// in order, except that each of the first W blocks (W as many as the SMs) takes one of the W
// costliest units and fills its other slots from the next ones: those units' serial chains then
// run apart, instead of side by side in a few blocks that share one SM's cache and issue slots.
__device__ int tail_lanes_item(int count, int spread, int group, int lanes) {
    unsigned sms;
    asm("mov.u32 %0, %%nsmid;" : "=r"(sms));
    const int threads = spread * group;
    const long long per = blockDim.x / threads, slot = threadIdx.x / threads, block = blockIdx.x;
    const long long apart = gridDim.x < sms ? gridDim.x : sms;
    const long long unit = block >= apart ? block * per + slot
                           : slot == 0    ? block
                                          : apart + block * (per - 1) + slot - 1;
    const long long item = unit * group + threadIdx.x % threads / spread;
    return threadIdx.x % spread < lanes && item < count ? (int)item : -1;
}

// run(item) for this thread's item of `count`; where the benchmarks ask for it (t->item_ns), the
// kernel's longest item so far.
template <class Run>
__device__ void tail_run(const tail::Tail *t, int kernel, int count, int spread, int group, int lanes, Run run) {
    const unsigned long long started = tail_now();
    const int item = tail_lanes_item(count, spread, group, lanes);
    if (item < 0) return;
    run(item);
    if (t->item_ns) atomicMax(t->item_ns + kernel, tail_now() - started);
}

// Stage 1: the pairs past the first t->nwide, a lane group of 4 threads per pair, the first 4 of
// its `spread`.
__global__ void tail_parse(const tail::Tail *t, int spread, int group) {
    tail_run(t, PARSE, t->npairs - t->nwide, spread, group, 4,
             [&](int item) { tail::parse_pair(t, t->nwide + item, tail::warp_lane_group()); });
}

// Stage 1 for the first t->nwide pairs, whose chains are the longest: a warp each (spread 32),
// beside tail_parse.
__global__ void tail_parse_wide(const tail::Tail *t, int spread, int group) {
    tail_run(t, PARSE_WIDE, t->nwide, spread, group, 32,
             [&](int item) { tail::parse_pair(t, item, tail::warp_wide_group()); });
}

// Threads per block of every tail kernel (TailDevice.THREADS).
constexpr int TAIL_THREADS = 64;
// Blocks of tail_envelopes an SM keeps: 8 caps its registers at 128 (a few spill to the cache),
// 16 warps an SM against 10 at the 180 it would take; the kernel waits on loads, and more warps
// hide more of that wait (benchmarks/RESULTS.md).
constexpr int ENVELOPE_BLOCKS_PER_SM = 8;
// Blocks of tail_traces an SM keeps: 12 caps its registers at 80, 24 warps (regions) an SM
// against 16 at the 117 it would take; each warp's draws are one serial chain.
constexpr int TRACE_BLOCKS_PER_SM = 12;

__global__ void tail_regions(const tail::Tail *t, int spread, int group) {
    tail_run(t, REGIONS, t->ntasks, spread, group, 4,
             [&](int item) { tail::region_forward_item(t, item, tail::warp_lane_group()); });
}

__global__ void __launch_bounds__(TAIL_THREADS, TRACE_BLOCKS_PER_SM)
    tail_traces(const tail::Tail *t, int spread, int group) {
    tail_run(t, TRACES, t->ntasks, spread, group, 32,
             [&](int item) { tail::region_traces_item(t, item, tail::this_warp()); });
}

__global__ void tail_clusters(const tail::Tail *t, int spread, int group) {
    tail_run(t, CLUSTERS, t->ntasks, spread, group, 32,
             [&](int item) { tail::region_envelopes_item(t, item, tail::this_warp()); });
}

// Stage 3: the envelope tasks past the launch's first t->nwide, a lane group each.
__global__ void __launch_bounds__(TAIL_THREADS, ENVELOPE_BLOCKS_PER_SM)
    tail_envelopes(const tail::Tail *t, int spread, int group) {
    tail_run(t, ENVELOPES, t->ntasks, spread, group, 4,
             [&](int item) { tail::rescore_envelope(t, t->nwide + item, tail::warp_lane_group()); });
}

// Stage 3 for the launch's first t->nwide envelope tasks, the longest: a warp each, beside
// tail_envelopes.
__global__ void tail_envelopes_wide(const tail::Tail *t, int spread, int group) {
    tail_run(t, ENVELOPES_WIDE, t->ntasks, spread, group, 32,
             [&](int item) { tail::rescore_envelope(t, item, tail::warp_wide_group()); });
}

__global__ void tail_assemble(const tail::Tail *t, int spread, int group) {
    tail_run(t, ASSEMBLE, t->npairs, spread, group, 1, [&](int item) { tail::assemble_pair(t, item); });
}

__global__ void tail_serialize(const tail::Tail *t, int spread, int group) {
    tail_run(t, SERIALIZE, t->npairs, spread, group, 1, [&](int item) { tail::serialize_pair(t, item); });
}

}  // namespace gpuhmm
