// Pair lists (engine/pairs.py): a CTA works through one chunk of one model's pairs, and
// each warp takes the chunk's next pair through the chunk's atomic counter when it finishes one.
#pragma once

namespace gpuhmm {

// The warp's next pair of `chunk`, the same in every lane; chunk_end[chunk] or more when none is left.
__device__ __forceinline__ int next_pair(const int *chunk_start, int *chunk_taken, int chunk, int lane) {
    int pair = 0;
    if (lane == 0) pair = chunk_start[chunk] + atomicAdd(chunk_taken + chunk, 1);
    return __shfl_sync(0xffffffffu, pair, 0);
}

}  // namespace gpuhmm
