// P7Viterbi filter (HMMER 3.4 impl_sse/vitfilter.c, p7_ViterbiFilter): CUDAMPF's Algorithm 3 on
// CUDAMPF++'s warp groups. One group of L = 32/S threads aligns one (model, sequence) pair at a
// time; a CTA works through one chunk of one model's pair list.
//
// Thread → data. blockIdx.x is a chunk (chunk_model, [chunk_start, chunk_end) of the pair list,
// longest sequence first). A group takes the chunk's next pair whenever it finishes one (an atomic
// counter per chunk) and runs it from its first residue to its last, in lock step with the other
// groups of its warp. The warp runs rows in stretches as long as its groups' shortest remainder,
// so starts and ends are tested once a stretch, not once a row (faster than testing every row).
// Thread t of a group holds H words of W cells: subword w of word h is model node
// (w·L + t)·H + h + 1, HMMER's striping with W·L vector lanes, so the diagonal predecessor of
// word 0 is word H−1 of thread t−1 (a shuffle), or for t = 0 thread L−1's one subword up with
// −inf shifted in. The emission rows (residue codes 0..28) and the D→D row sit in
// shared memory, striped as msvlayout.stripe_table lays them; the seven other transition words of
// the thread's nodes (BM, MM, IM, DM, MD, MI, II: vitfilter.c's per-vector order) are loaded once
// into registers. Residues are read straight from the shard's residue array, one row ahead.
//
// Lanes and overflow. Vit32: one int32 cell per register with HMMER's −32768 floor on every add
// (DPX __viaddmax_s32) and no ceiling; HMMER's 32767 ceiling can only bind in the row where xE
// reaches 32767, which is its overflow test, so Vit32 is HMMER's arithmetic (status OVERFLOW is
// HMMER's +inf). Vit16: two int16 cells per register on DPX (__viaddmax_s16x2), whose adds wrap.
// Cells are floored at −8192 and parameters at −24576, so no sum can wrap below; vitlayout.py
// states the argument that every value HMMER holds under −8192 is dead (it can never decide an M
// cell, xE or the score) and that padding nodes stay at the floor. A Vit16 pair reports
// NEEDS_EXACT, and is run again in Vit32, when xE passes 32767 − E_max (before any sum could wrap
// above), when no row of the pair rose above the dead level, or when a residue with −inf
// emissions (gap, '*', '~') comes before the last row or could leave HMMER's M cells above it.
//
// D→D. HMMER's Lazy-F passes converge to the max-plus closure of the D chain along the nodes, and
// HMMER's M values are those of the closure whether or not its ddbound test skips it. Here every
// row closes the chain along each thread's own nodes, then passes carries from segment to
// segment until no segment's first node improves: the closure, usually after one check.
#include "types.cuh"

namespace gpuhmm {

constexpr int VIT_EMISSION_ROWS = 29;
constexpr int VIT_DD_ROW = 29;
constexpr int VIT_SHARED_ROWS = 30;
constexpr int VIT_OK = 0;
constexpr int VIT_OVERFLOW = 1;
constexpr int VIT_NEEDS_EXACT = 2;

struct Vit16 {
    static constexpr int W = 2;
    static constexpr int FLOOR = -8192;
    static constexpr bool EXACT = false;
    __device__ __forceinline__ static uint32_t splat(int v) { return (uint32_t(v) & 0xffffu) * 0x10001u; }
    __device__ __forceinline__ static uint32_t addmax(uint32_t a, uint32_t b, uint32_t c) { return __viaddmax_s16x2(a, b, c); }
    __device__ __forceinline__ static uint32_t max(uint32_t a, uint32_t b) { return __vmaxs2(a, b); }
    __device__ __forceinline__ static uint32_t max3(uint32_t a, uint32_t b, uint32_t c) { return __vimax3_s16x2(a, b, c); }
    // Thread 0 of a group takes its neighbour's low cell up and the floor in; others keep v.
    static constexpr unsigned SHIFT_IN = 0x1054u;
    static constexpr unsigned KEEP = 0x3210u;
    __device__ __forceinline__ static int cell(uint32_t v, int w) { return int(int16_t(v >> (16 * w))); }
    __device__ __forceinline__ static int horizontal_max(uint32_t v) { return ::max(cell(v, 0), cell(v, 1)); }
};

struct Vit32 {
    static constexpr int W = 1;
    static constexpr int FLOOR = -32768;
    static constexpr bool EXACT = true;
    __device__ __forceinline__ static uint32_t splat(int v) { return uint32_t(v); }
    __device__ __forceinline__ static uint32_t addmax(uint32_t a, uint32_t b, uint32_t c) {
        return uint32_t(__viaddmax_s32(int(a), int(b), int(c)));
    }
    __device__ __forceinline__ static uint32_t max(uint32_t a, uint32_t b) { return uint32_t(::max(int(a), int(b))); }
    __device__ __forceinline__ static uint32_t max3(uint32_t a, uint32_t b, uint32_t c) {
        return uint32_t(__vimax3_s32(int(a), int(b), int(c)));
    }
    static constexpr unsigned SHIFT_IN = 0x7654u;
    static constexpr unsigned KEEP = 0x3210u;
    __device__ __forceinline__ static int cell(uint32_t v, int) { return int(v); }
    __device__ __forceinline__ static int horizontal_max(uint32_t v) { return int(v); }
};

// vitlayout.KernelParameters mirrors this.
struct ViterbiParameters {
    int base, e_move, e_loop, bm_min, e_max;
};

// Word h of thread t in a striped row: 16-byte chunks (chunk j of thread t at (j·L + t)·16),
// then the H mod 4 words left over, word u of thread t at CHUNKS·L·16 + (u·L + t)·4.
template <int L, int H>
__device__ __forceinline__ uint32_t striped_word(const uint8_t *row, int h, int t) {
    constexpr int CHUNKS = H / 4;
    if (h < 4 * CHUNKS) {
        const uint4 chunk = reinterpret_cast<const uint4 *>(row)[(h / 4) * L + t];
        const uint32_t parts[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
        return parts[h % 4];
    }
    return reinterpret_cast<const uint32_t *>(row + CHUNKS * L * 16)[(h - 4 * CHUNKS) * L + t];
}

template <int S, int H, class Lanes, int CTA_WARPS>
__global__ void __launch_bounds__(CTA_WARPS * 32)
viterbi_filter(const uint8_t *__restrict__ residues, const long long *__restrict__ sequence_start,
               const int *__restrict__ sequence_length, const short *__restrict__ sequence_move,
               const int *__restrict__ pair_sequence, const int *__restrict__ chunk_model,
               const int *__restrict__ chunk_start, const int *__restrict__ chunk_end, int *__restrict__ chunk_taken,
               const uint8_t *__restrict__ blobs, const long long *__restrict__ blob_offset,
               const ViterbiParameters *__restrict__ parameters, int *__restrict__ out_xc,
               uint8_t *__restrict__ out_status) {
    constexpr int L = 32 / S;
    constexpr int W = Lanes::W;
    // msvlayout.Striping.row_bytes mirrors this.
    constexpr int ALIGN = L < 8 ? 128 : 16;
    constexpr int ROW_BYTES = (L * H * 4 + ALIGN - 1) / ALIGN * ALIGN;
    constexpr unsigned FULL = 0xffffffffu;

    extern __shared__ uint4 table[];
    const int chunk = blockIdx.x;
    const int model = chunk_model[chunk];
    const uint8_t *blob = blobs + blob_offset[model];
    for (int i = threadIdx.x; i < VIT_SHARED_ROWS * ROW_BYTES / 16; i += blockDim.x)
        table[i] = reinterpret_cast<const uint4 *>(blob)[i];
    __syncthreads();
    const uint8_t *shared_rows = reinterpret_cast<const uint8_t *>(table);
    const uint8_t *dd_row = shared_rows + VIT_DD_ROW * ROW_BYTES;

    const int lane = threadIdx.x % 32;
    const int group = lane / L;
    const int t = lane % L;
    const int left = group * L + (t + L - 1) % L;
    const unsigned shift = t == 0 ? Lanes::SHIFT_IN : Lanes::KEEP;
    const ViterbiParameters p = parameters[model];
    const uint32_t floor = Lanes::splat(Lanes::FLOOR);

    uint32_t bm[H], mm[H], im[H], dm[H], md[H], mi[H], ii[H];
    {
        const uint8_t *rows = blob + VIT_SHARED_ROWS * ROW_BYTES;
#pragma unroll
        for (int h = 0; h < H; ++h) {
            bm[h] = striped_word<L, H>(rows + 0 * ROW_BYTES, h, t);
            mm[h] = striped_word<L, H>(rows + 1 * ROW_BYTES, h, t);
            im[h] = striped_word<L, H>(rows + 2 * ROW_BYTES, h, t);
            dm[h] = striped_word<L, H>(rows + 3 * ROW_BYTES, h, t);
            md[h] = striped_word<L, H>(rows + 4 * ROW_BYTES, h, t);
            mi[h] = striped_word<L, H>(rows + 5 * ROW_BYTES, h, t);
            ii[h] = striped_word<L, H>(rows + 6 * ROW_BYTES, h, t);
        }
    }
    const int first = chunk_start[chunk];
    const int end = chunk_end[chunk];
    bool active = false, needs_exact = false, overflow = false;
    int pair = 0, length = 0, row = 0, move = 0, dead = 0, xN = 0, xJ = 0, xC = 0, xB = 0, next_code = 0;
    const uint8_t *sequence = residues;
    uint32_t Mc[H], Ic[H], Dc[H];
#pragma unroll
    for (int h = 0; h < H; ++h) Mc[h] = Ic[h] = Dc[h] = floor;
    bool starting = true;

    while (true) {
        // Every lane of a warp with a starting group takes part in the shuffle; only the
        // starting groups use it. Rows where no group starts skip it.
        if (__any_sync(FULL, starting)) {
            int taken = 0;
            if (starting && t == 0) taken = atomicAdd(chunk_taken + chunk, 1);
            taken = __shfl_sync(FULL, taken, group * L);
            if (starting) {
                pair = first + taken;
                active = pair < end;
                starting = false;
                if (active) {
                    const int s = pair_sequence[pair];
                    length = sequence_length[s];
                    sequence = residues + sequence_start[s];
                    move = sequence_move[s];
                    next_code = sequence[0];
                    row = 0;
                    xN = p.base;
                    xJ = -32768;
                    xC = -32768;
                    xB = p.base + move;
                    // Every B→M entry is at least base + move + min BM: a value under that is dead.
                    dead = p.base + move + p.bm_min - 1;
                    needs_exact = !Lanes::EXACT && dead < Lanes::FLOOR;
                    overflow = false;
#pragma unroll
                    for (int h = 0; h < H; ++h) Mc[h] = Ic[h] = Dc[h] = floor;
                }
            }
        }
        // The stretch: rows every working group runs before the first of them ends its sequence.
        constexpr int NO_ROWS_LEFT = 0x7fffffff;
        const int steps = __reduce_min_sync(FULL, active ? length - row : NO_ROWS_LEFT);
        if (steps == NO_ROWS_LEFT) break;

        for (int step = 0; step < steps; ++step, ++row) {
            const int code = next_code;
            next_code = active && row + 1 < length ? sequence[row + 1] : 0;
            // Gap, '*' and '~' have −inf emissions: HMMER's M cells fall to at most (the largest cell
            // so far) − 32768, dead unless that tops the dead level. On a last row (a trailing '*')
            // Vit16 leaves that row out of xE; anywhere else it defers to Vit32.
            const bool infinite = !Lanes::EXACT && (code == 20 || code >= 27);
            if (infinite && (row + 1 < length || ::max(p.base, xJ - p.e_loop) > dead + 32768)) needs_exact = true;
            const uint8_t *emissions = shared_rows + code * ROW_BYTES;
            const uint32_t carry_m = __byte_perm(__shfl_sync(FULL, Mc[H - 1], left), floor, shift);
            const uint32_t carry_i = __byte_perm(__shfl_sync(FULL, Ic[H - 1], left), floor, shift);
            const uint32_t carry_d = __byte_perm(__shfl_sync(FULL, Dc[H - 1], left), floor, shift);
            const uint32_t begin = Lanes::splat(::min(::max(xB, -32768), 32767));
            uint32_t row_max = floor;
            // M and I, descending h: word h−1 of the previous row is read before it is overwritten.
#pragma unroll
            for (int h = H - 1; h >= 0; --h) {
                const uint32_t m_prev = h ? Mc[h > 0 ? h - 1 : 0] : carry_m;
                const uint32_t i_prev = h ? Ic[h > 0 ? h - 1 : 0] : carry_i;
                const uint32_t d_prev = h ? Dc[h > 0 ? h - 1 : 0] : carry_d;
                uint32_t sv = Lanes::addmax(d_prev, dm[h], floor);
                sv = Lanes::addmax(i_prev, im[h], sv);
                sv = Lanes::addmax(m_prev, mm[h], sv);
                sv = Lanes::addmax(begin, bm[h], sv);
                Ic[h] = Lanes::addmax(Mc[h], mi[h], Lanes::addmax(Ic[h], ii[h], floor));
                Mc[h] = Lanes::addmax(sv, striped_word<L, H>(emissions, h, t), floor);
                if ((H - 1 - h) & 1) row_max = Lanes::max3(row_max, Mc[h], Mc[h + 1 < H ? h + 1 : h]);
            }
            if constexpr (H & 1) row_max = Lanes::max(row_max, Mc[0]);
            if (infinite) row_max = floor;

            // D, ascending h: M→D from the node before, closed along the thread's own nodes (D→D);
            // then D→D carries across segments until none improves (HMMER's Lazy-F fixpoint).
            {
                Dc[0] = __byte_perm(__shfl_sync(FULL, Lanes::addmax(Mc[H - 1], md[H - 1], floor), left), floor, shift);
            }
#pragma unroll
            for (int h = 0; h + 1 < H; ++h)
                Dc[h + 1] = Lanes::addmax(Dc[h], striped_word<L, H>(dd_row, h, t), Lanes::addmax(Mc[h], md[h], floor));
            while (true) {
                const uint32_t carry = __byte_perm(
                    __shfl_sync(FULL, Lanes::addmax(Dc[H - 1], striped_word<L, H>(dd_row, H - 1, t), floor), left), floor, shift);
                const uint32_t improved = Lanes::max(carry, Dc[0]);
                // Only pairs still vouched for: after Vit16 gives one up its cells may wrap.
                const bool changes = active && !needs_exact && improved != Dc[0];
                if (!__any_sync(FULL, changes)) break;
                if (changes) {
                    Dc[0] = improved;
#pragma unroll
                    for (int h = 0; h + 1 < H; ++h)
                        Dc[h + 1] = Lanes::addmax(Dc[h], striped_word<L, H>(dd_row, h, t), Dc[h + 1]);
                }
            }

            int x_e = Lanes::horizontal_max(row_max);
            if constexpr (L == 32) {
                x_e = __reduce_max_sync(FULL, x_e);
            } else {
#pragma unroll
                for (int offset = L / 2; offset > 0; offset /= 2)
                    x_e = ::max(x_e, __shfl_xor_sync(FULL, x_e, offset, L));
            }
            if (x_e >= 32767) overflow = true;
            if (!Lanes::EXACT && x_e > 32767 - p.e_max) needs_exact = true;
            // N, J and C loops are 0 in the filter (its −3 nat approximation).
            xC = ::max(xC, x_e + p.e_move);
            xJ = ::max(xJ, x_e + p.e_loop);
            xB = ::max(xJ + move, xN + move);
        }

        if (active && row == length) {
            if (t == 0) {
                int status = overflow ? VIT_OVERFLOW : VIT_OK;
                // C's value comes from a live row, or Vit16 cannot vouch for it.
                if (!Lanes::EXACT && (needs_exact || xC <= dead + p.e_move)) status = VIT_NEEDS_EXACT;
                out_xc[pair] = xC;
                out_status[pair] = uint8_t(status);
            }
            active = false;
            starting = true;
        }
    }
}

}  // namespace gpuhmm
