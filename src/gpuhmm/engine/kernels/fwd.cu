// Forward filter (HMMER 3.4 impl_sse/fwdback.c, p7_ForwardParser): the local multihit model's
// Forward score in float32 probability space, with HMMER's sparse rescaling, for the F3 test.
//
// Thread → data. blockIdx.x is a chunk (chunk_model, [chunk_start, chunk_end) of the pair
// list, longest sequence first). Each warp takes the chunk's next pair whenever it finishes one
// (an atomic counter per chunk) and runs it alone, residue by residue. Lane l holds the nodes
// k = 32·j + l + 1, j = 0 .. J − 1 (one node per lane per "block" of 32), so a node's
// predecessor k − 1 is the lane below (a shuffle), or for lane 0 lane 31's node of the block
// before. The previous row's M, I and D cells sit in the warp's slice of shared memory, each
// lane reading and overwriting only its own nodes. The model's parameters (29 emission rows
// of odds ratios, then the BM, MM, IM, DM, MD, MI, II and DD rows, padded with zeros to 32·J
// nodes: fwdfilter.model_blob) are read through the L1 cache, coalesced across the warp.
//
// Lanes: one float32 cell per thread per node; no packing. Overflow: none in practice, as in
// HMMER: a row whose xE passes 1e4 is scaled by 1/xE (here lazily, as the next row reads it),
// and the logs of the scale factors are summed in double. An infinite or NaN result, or xC = 0
// (HMMER's eslERANGE cases), comes back as such, and the host passes the pair on.
//
// D→D. D_k = M_(k−1)·MD + D_(k−1)·DD is a linear recurrence along the nodes; each block of 32
// nodes closes it with a warp scan of the affine maps (a, b) ↦ a·x + b, starting from the block
// before's last D. This is the full chain, which HMMER's D→D passes also reach (they stop when a
// pass no longer changes a float). The order of the sums differs from HMMER's, so scores agree
// to rounding; fwdfilter.py gives the F3 margin that covers it.
#include "pairs.cuh"
#include "types.cuh"

namespace gpuhmm {

constexpr int FWD_EMISSION_ROWS = 29;
enum ForwardRow { FWD_BM, FWD_MM, FWD_IM, FWD_DM, FWD_MD, FWD_MI, FWD_II, FWD_DD };
constexpr float FWD_RESCALE_ABOVE = 1.0e4f;

// stages/fwdfilter.py's FORWARD_PARAMETERS mirrors this.
struct ForwardParameters {
    float e_move, e_loop;
    int blocks;  // J: warp rows of 32 nodes
    long long offset;  // the model's first float in the parameter blob
};

template <int CTA_WARPS>
__global__ void __launch_bounds__(CTA_WARPS * 32)
forward_filter(const uint8_t *__restrict__ residues, const long long *__restrict__ sequence_start,
               const int *__restrict__ sequence_length, const float *__restrict__ sequence_move,
               const int *__restrict__ pair_sequence, const int *__restrict__ chunk_model,
               const int *__restrict__ chunk_start, const int *__restrict__ chunk_end, int *__restrict__ chunk_taken,
               const float *__restrict__ blob, const ForwardParameters *__restrict__ parameters,
               double *__restrict__ out_score) {
    constexpr unsigned FULL = 0xffffffffu;
    extern __shared__ float cells[];
    const int chunk = blockIdx.x;
    const ForwardParameters p = parameters[chunk_model[chunk]];
    const int N = 32 * p.blocks;
    const float *emission_rows = blob + p.offset;
    const float *transition_rows = emission_rows + FWD_EMISSION_ROWS * N;
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    float *Mrow = cells + warp * 3 * N;
    float *Irow = Mrow + N;
    float *Drow = Irow + N;
    const int end = chunk_end[chunk];

    while (true) {
        const int pair = next_pair(chunk_start, chunk_taken, chunk, lane);
        if (pair >= end) break;
        const int s = pair_sequence[pair];
        const int length = sequence_length[s];
        const uint8_t *sequence = residues + sequence_start[s];
        const float move = sequence_move[s];
        const float loop = 1.0f - move;
        for (int k = lane; k < N; k += 32) Mrow[k] = Irow[k] = Drow[k] = 0.0f;
        float xN = 1.0f, xJ = 0.0f, xC = 0.0f, xB = move, scale = 1.0f;
        double totscale = 0.0;

        for (int row = 0; row < length; ++row) {
            const float *emissions = emission_rows + sequence[row] * N;
            // Node k − 1 for lane 0: lane 31's node of the block before (node 0 is empty).
            float carry_m = 0.0f, carry_i = 0.0f, carry_d = 0.0f;
            float carry_to_d = 0.0f, carry_dd = 0.0f, carry_d_new = 0.0f;
            float partial_e = 0.0f;
            for (int j = 0; j < p.blocks; ++j) {
                const int k = 32 * j + lane;
                const float m_here = Mrow[k] * scale, i_here = Irow[k] * scale, d_here = Drow[k] * scale;
                float m_left = __shfl_up_sync(FULL, m_here, 1);
                float i_left = __shfl_up_sync(FULL, i_here, 1);
                float d_left = __shfl_up_sync(FULL, d_here, 1);
                if (lane == 0) m_left = carry_m, i_left = carry_i, d_left = carry_d;
                carry_m = __shfl_sync(FULL, m_here, 31);
                carry_i = __shfl_sync(FULL, i_here, 31);
                carry_d = __shfl_sync(FULL, d_here, 31);

                const float *t = transition_rows + k;
                float sv = xB * t[FWD_BM * N];
                sv = fmaf(m_left, t[FWD_MM * N], sv);
                sv = fmaf(i_left, t[FWD_IM * N], sv);
                sv = fmaf(d_left, t[FWD_DM * N], sv);
                const float m_new = sv * emissions[k];
                const float i_new = fmaf(m_here, t[FWD_MI * N], i_here * t[FWD_II * N]);

                // D_k = a·D_(k−1) + b with a = DD(k − 1), b = M_(k−1)·MD(k − 1) of this row.
                const float to_d = m_new * t[FWD_MD * N];
                const float dd = t[FWD_DD * N];
                float b = __shfl_up_sync(FULL, to_d, 1);
                float a = __shfl_up_sync(FULL, dd, 1);
                if (lane == 0) b = carry_to_d, a = carry_dd;
                carry_to_d = __shfl_sync(FULL, to_d, 31);
                carry_dd = __shfl_sync(FULL, dd, 31);
#pragma unroll
                for (int offset = 1; offset < 32; offset *= 2) {
                    const float a_below = __shfl_up_sync(FULL, a, offset);
                    const float b_below = __shfl_up_sync(FULL, b, offset);
                    if (lane >= offset) {
                        b = fmaf(a, b_below, b);
                        a *= a_below;
                    }
                }
                const float d_new = fmaf(a, carry_d_new, b);
                carry_d_new = __shfl_sync(FULL, d_new, 31);

                Mrow[k] = m_new;
                Irow[k] = i_new;
                Drow[k] = d_new;
                partial_e += m_new + d_new;
            }
            float xE = partial_e;
#pragma unroll
            for (int offset = 16; offset > 0; offset /= 2) xE += __shfl_xor_sync(FULL, xE, offset);

            xN = xN * loop;
            xC = fmaf(xC, loop, xE * p.e_move);
            xJ = fmaf(xJ, loop, xE * p.e_loop);
            xB = fmaf(xJ, move, xN * move);
            scale = 1.0f;
            if (xE > FWD_RESCALE_ABOVE) {
                xN /= xE;
                xC /= xE;
                xJ /= xE;
                xB /= xE;
                scale = 1.0f / xE;
                totscale += log(double(xE));
            }
        }
        if (lane == 0) out_score[pair] = totscale + log(double(xC * move));
    }
}

}  // namespace gpuhmm
