// Warp sequence blocks (CUDAMPF++ Algorithm 1, laid out as stages/msvlayout.py describes) written on the
// device from the resident residues, so a shard's layouts for every S never cross the bus.
//
// Thread → data. One CTA per sequence of the layout (an entry of column_sequences, in column
// order); its threads stride over the sequence's residues and the END that follows it. Residue r
// of a sequence starting at row `first` of column c = warp·S + c' goes to byte
//     block_start[warp] + (row / R)·128 + c'·R + row % R,   row = first + r, R = 128 / S.
// Bytes no sequence covers keep the PAD the caller filled the layout with.
//
// Lanes and overflow: none; this copies bytes. It reproduces no HMMER function: HMMER reads
// targets one at a time.
#include "types.cuh"

namespace gpuhmm {

constexpr uint8_t LAYOUT_END_CODE = 30;  // msvfilter.END_CODE

__global__ void warp_block_layout(const uint8_t *__restrict__ residues, const long long *__restrict__ sequence_start,
                                  const int *__restrict__ sequence_length, const int *__restrict__ sequence_column,
                                  const long long *__restrict__ sequence_row, const long long *__restrict__ block_start,
                                  int S, uint8_t *__restrict__ data) {
    const int entry = blockIdx.x;
    const int length = sequence_length[entry];
    const int warp = sequence_column[entry] / S;
    const int column = sequence_column[entry] % S;
    const int per_row = 128 / S;
    const uint8_t *sequence = residues + sequence_start[entry];
    uint8_t *block = data + block_start[warp] + column * per_row;
    for (int r = threadIdx.x; r <= length; r += blockDim.x) {
        const long long row = sequence_row[entry] + r;
        block[(row / per_row) * 128 + row % per_row] = r < length ? sequence[r] : LAYOUT_END_CODE;
    }
}

}  // namespace gpuhmm
