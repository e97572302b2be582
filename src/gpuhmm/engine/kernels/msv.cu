// SSV and MSV filters (HMMER 3.4 ssvfilter.c p7_SSVFilter's get_xE, msvfilter.c p7_MSVFilter),
// CUDAMPF++-style: one warp aligns S sequences at once against one model.
//
// Thread → data. blockIdx.y is the model (of a batch of models with the same specialization);
// each of a CTA's CTA_WARPS warps owns one warp sequence block (stages/msvlayout.py). Lane g·L + t
// (L = 32/S) is thread t of group g, which aligns column g of the block. Thread t holds H words
// of W cells: subword w of word h is model node (w·L + t)·H + h + 1, HMMER's striping with 2L (or
// 4L) vector lanes. The diagonal predecessor of word h is word h−1 of the previous row; of word
// 0, word H−1 of thread t−1 (a warp shuffle), or for t = 0 thread L−1's, one subword up with
// −inf (0) shifted in. The model's cost table sits in shared memory, one row per residue code:
// 16-byte chunks (four words) per thread, then single 4-byte words for the rest (so H need not
// pad a model to a whole chunk); residues are read four at a time from 128-byte rows.
// Where a quarter-warp spans several groups (L < 8), each group reads its own copy of the
// table, skewed by L·16 bytes, so that groups on different residues never share a bank.
//
// Lane width: Lanes16 (16-bit cells on DPX, sm_90+) or Lanes8 (8-bit SIMD within a register),
// see lanes.cuh for the saturation proofs. Overflow rule: SSV records its best cell and lets the
// host apply ssvfilter.c's tests (best ≥ 127 − bias is its overflow); MSV flags xE + bias ≥ 255
// per row, as msvfilter.c does, and the flag is sticky until the sequence ends.
//
// Protocol: a residue END ('@') closes the group's current sequence: its result is written,
// the cells and specials reset, and the next sequence of the column begins. PAD ('#') and END
// rows carry −inf costs, so cells after them are at the floor.
#include "lanes.cuh"

namespace gpuhmm {

constexpr int TABLE_ROWS = 31;
constexpr int END_CODE = 30;
constexpr int STAGE_SSV = 0;
constexpr int STAGE_MSV = 1;

struct ModelParameters {
    int bias, base, tbm, tec;
};

template <int S, int H, int STAGE, class Lanes, int CTA_WARPS>
__global__ void __launch_bounds__(CTA_WARPS * 32)
msv_stage(const uint8_t *__restrict__ blocks, const long long *__restrict__ block_start,
          const int *__restrict__ heights, const int *__restrict__ column_start,
          const int *__restrict__ column_sequences, int warps,
          const uint8_t *__restrict__ tables, const long long *__restrict__ table_offset,
          const ModelParameters *__restrict__ parameters, const uint8_t *__restrict__ tjb,
          int sequences, void *out) {
    constexpr int L = 32 / S;
    constexpr int W = Lanes::W;
    constexpr int CELL_BYTES = Lanes::CELL_BYTES;
    static_assert(W * CELL_BYTES == 4, "a table word is one 32-bit register of cells");
    constexpr int WORDS_PER_CHUNK = 4;
    constexpr int CHUNKS = H / WORDS_PER_CHUNK;
    // msvlayout.Striping.replicas/row_bytes/shared_bytes mirror these.
    constexpr int REPLICAS = L < 8 ? 8 / L : 1;
    constexpr int ALIGN = REPLICAS > 1 ? 128 : 16;
    constexpr int ROW_BYTES = (L * H * W * CELL_BYTES + ALIGN - 1) / ALIGN * ALIGN;
    constexpr int TABLE_CHUNKS = TABLE_ROWS * ROW_BYTES / 16;
    constexpr int REPLICA_CHUNKS = TABLE_CHUNKS + (REPLICAS > 1 ? L : 0);
    constexpr int PER_ROW = 128 / S;  // residues of one column in a 128-byte block row

    extern __shared__ uint4 table[];
    const int model = blockIdx.y;
    {
        const uint4 *source = reinterpret_cast<const uint4 *>(tables + table_offset[model]);
        for (int i = threadIdx.x; i < REPLICAS * TABLE_CHUNKS; i += blockDim.x)
            table[(i / TABLE_CHUNKS) * REPLICA_CHUNKS + i % TABLE_CHUNKS] = source[i % TABLE_CHUNKS];
    }
    __syncthreads();

    const int warp = blockIdx.x * CTA_WARPS + threadIdx.x / 32;
    if (warp >= warps) return;
    const int lane = threadIdx.x % 32;
    const int group = lane / L;
    const int t = lane % L;
    const unsigned group_mask = (L == 32) ? 0xffffffffu : (((1u << L) - 1u) << (group * L));
    const int left = group * L + (t + L - 1) % L;
    const ModelParameters p = parameters[model];
    const uint32_t bias = Lanes::splat(p.bias);

    const int column = warp * S + group;
    int cursor = column_start[column];
    const int column_end = column_start[column + 1];
    int tjbm = 0;
    if constexpr (STAGE == STAGE_MSV) tjbm = (cursor < column_end ? tjb[column_sequences[cursor]] : 0) + p.tbm;
    int x_j = 0;
    bool overflow = false;

    uint32_t cells[H];
#pragma unroll
    for (int h = 0; h < H; ++h) cells[h] = 0u;
    uint32_t best = 0u;

    const uint8_t *residues = blocks + block_start[warp] + group * PER_ROW;
    const int height = heights[warp];
    for (int row = 0; row < height; row += 4) {
        const uint32_t quad = *reinterpret_cast<const uint32_t *>(residues + (row / PER_ROW) * 128 + row % PER_ROW);
#pragma unroll
        for (int step = 0; step < 4; ++step) {
            const int code = (quad >> (8 * step)) & 0xff;
            const uint4 *costs = table + (group % REPLICAS) * REPLICA_CHUNKS + code * (ROW_BYTES / 16) + t;
            uint32_t carry = __shfl_sync(0xffffffffu, cells[H - 1], left);
            if (t == 0) carry <<= Lanes::SHIFT;
            // SSV keeps one running best over the whole sequence; MSV needs each row's xE.
            uint32_t row_max = (STAGE == STAGE_SSV) ? best : 0u;
            uint32_t begin = 0u;
            if constexpr (STAGE == STAGE_MSV) begin = Lanes::splat(::max(p.base, x_j) - tjbm);
            const uint32_t *tail = reinterpret_cast<const uint32_t *>(costs - t + CHUNKS * L) + t;
            // Descending h: word h−1 is read before it is overwritten, so no copies are needed.
#pragma unroll
            for (int h = H - 1; h >= 0; --h) {
                uint32_t gain;
                if (h < CHUNKS * WORDS_PER_CHUNK) {
                    const uint4 chunk = costs[(h / WORDS_PER_CHUNK) * L];
                    const uint32_t parts[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
                    gain = parts[h % WORDS_PER_CHUNK];
                } else {
                    const int word = h - CHUNKS * WORDS_PER_CHUNK;
                    gain = tail[word * L];
                }
                const uint32_t previous = h ? cells[h > 0 ? h - 1 : 0] : carry;
                if constexpr (STAGE == STAGE_SSV) {
                    cells[h] = Lanes::ssv(previous, gain, bias);
                } else {
                    cells[h] = Lanes::msv(previous, begin, gain, bias);
                }
                if ((H - 1 - h) & 1) row_max = Lanes::max3(row_max, cells[h], cells[h + 1 < H ? h + 1 : h]);
            }
            if constexpr (H & 1) row_max = Lanes::max(row_max, cells[0]);

            if constexpr (STAGE == STAGE_SSV) {
                best = row_max;
            } else {
                int x_e = Lanes::horizontal_max(row_max);
#pragma unroll
                for (int offset = L / 2; offset > 0; offset /= 2)
                    x_e = ::max(x_e, __shfl_xor_sync(0xffffffffu, x_e, offset, L));
                overflow |= (x_e + p.bias >= 255);
                x_j = ::max(x_j, ::max(x_e - p.tec, 0));
            }

            if (code == END_CODE) {
                // Group-uniform: every thread of the group read the same residue.
                const int sequence = column_sequences[cursor++];
                if constexpr (STAGE == STAGE_SSV) {
                    int value = Lanes::horizontal_max(best);
#pragma unroll
                    for (int offset = L / 2; offset > 0; offset /= 2)
                        value = ::max(value, __shfl_xor_sync(group_mask, value, offset, L));
                    if (t == 0) static_cast<uint8_t *>(out)[size_t(model) * sequences + sequence] = uint8_t(::min(value, 255));
                    best = 0u;
                } else {
                    if (t == 0) static_cast<int16_t *>(out)[size_t(model) * sequences + sequence] = overflow ? int16_t(-1) : int16_t(x_j);
                    tjbm = (cursor < column_end ? tjb[column_sequences[cursor]] : 0) + p.tbm;
                    x_j = 0;
                    overflow = false;
                }
#pragma unroll
                for (int h = 0; h < H; ++h) cells[h] = 0u;
            }
        }
    }
}

}  // namespace gpuhmm
