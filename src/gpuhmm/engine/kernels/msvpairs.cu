// MSV filter (HMMER 3.4 msvfilter.c, p7_MSVFilter) for a list of (model, sequence) pairs: the
// ones SSV could not decide (f1.cu), a small share of all pairs, so no warp blocks are laid out.
//
// Thread → data. blockIdx.x is a chunk (chunk_model, [chunk_start, chunk_end) of the pair list,
// longest first; engine/pairs.py). Each warp takes the chunk's next pair (an atomic counter
// per chunk) and runs it alone. Lane l holds H consecutive nodes, k = l·H + h + 1, in registers;
// a node's diagonal predecessor k − 1 is the word before, or for h = 0 word H − 1 of lane l − 1
// (a shuffle; lane 0 shifts in −inf, 0). MSV cells depend only on the previous row, so the order
// of nodes is free. The model's gains (bias − cost, int16, msvfilter.pair_gains) are laid out
// [residue][h][lane] so a warp's reads for one h are consecutive, and are read through L1.
//
// Lanes: one int32 cell per node: cell = max(max(predecessor, xB) + gain, 0), the byte
// arithmetic of msvfilter.c without the 255 ceiling, which can bind only after a row with
// xE + bias ≥ 255, HMMER's overflow (engine/reference/msvfilter.py's run_msv uses the same argument). Overflow is
// sticky; the pair then reports MSV_OVERFLOW (−1) instead of its final xJ.
#include "pairs.cuh"
#include "types.cuh"

namespace gpuhmm {

// stages/msvfilter.py's MSV_PAIR_PARAMETERS mirrors this.
struct MsvPairParameters {
    int base, bias, tbm, tec;
    long long offset;  // the model's first gain in the blob
};

template <int H, int CTA_WARPS>
__global__ void __launch_bounds__(CTA_WARPS * 32)
msv_pairs(const uint8_t *__restrict__ residues, const long long *__restrict__ sequence_start,
          const int *__restrict__ sequence_length, const uint8_t *__restrict__ tjb,
          const int *__restrict__ pair_sequence, const int *__restrict__ chunk_model,
          const int *__restrict__ chunk_start, const int *__restrict__ chunk_end, int *__restrict__ chunk_taken,
          const short *__restrict__ gains, const MsvPairParameters *__restrict__ parameters,
          short *__restrict__ out_xj) {
    constexpr unsigned FULL = 0xffffffffu;
    const int chunk = blockIdx.x;
    const MsvPairParameters p = parameters[chunk_model[chunk]];
    const short *model_gains = gains + p.offset + threadIdx.x % 32;
    const int lane = threadIdx.x % 32;
    const int end = chunk_end[chunk];

    while (true) {
        const int pair = next_pair(chunk_start, chunk_taken, chunk, lane);
        if (pair >= end) break;
        const int s = pair_sequence[pair];
        const int length = sequence_length[s];
        const uint8_t *sequence = residues + sequence_start[s];
        const int tjbm = tjb[s] + p.tbm;
        int cells[H];
#pragma unroll
        for (int h = 0; h < H; ++h) cells[h] = 0;
        int x_j = 0, x_b = p.base - tjbm;
        bool overflow = false;
        for (int row = 0; row < length; ++row) {
            const short *row_gains = model_gains + sequence[row] * (H * 32);
            int carry = __shfl_up_sync(FULL, cells[H - 1], 1);
            if (lane == 0) carry = 0;
            int row_max = 0;
#pragma unroll
            for (int h = H - 1; h >= 0; --h) {
                const int predecessor = h ? cells[h > 0 ? h - 1 : 0] : carry;
                cells[h] = ::max(::max(predecessor, x_b) + row_gains[h * 32], 0);
                row_max = ::max(row_max, cells[h]);
            }
            const int x_e = __reduce_max_sync(FULL, row_max);
            overflow |= x_e + p.bias >= 255;
            x_j = ::max(x_j, ::max(x_e - p.tec, 0));
            x_b = ::max(p.base, x_j) - tjbm;
        }
        if (lane == 0) out_xj[pair] = short(overflow ? -1 : x_j);
    }
}

}  // namespace gpuhmm
