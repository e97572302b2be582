// Shared definitions of the tail: HMMER 3.4's p7_Pipeline after the Forward filter
// (impl_sse/fwdback.c, decoding.c, stotrace.c, null2.c, optacc.c; src/p7_domaindef.c,
// p7_spensemble.c, p7_trace.c), written once for two compilers: NVRTC builds it for the GPU,
// and a host C++ compiler builds the same source for the CPU checks.
//
// Thread → data: one thread runs one (model, target) pair from the Forward parser to the hit,
// serially, as HMMER does. Lane width: HMMER's __m128 of 4 float32 lanes is `f4`; every
// lane-wise operation is written as a loop over its 4 lanes, which is the same arithmetic.
// Striped layout: node k is lane z = (k − 1) / Q of vector q = (k − 1) % Q, Q = max(2, ⌈M/4⌉).
//
// Rounding: every float expression is one IEEE float32 operation after another in HMMER's
// operand order; builds must not contract a·b + c (nvrtc -fmad=false, g++ -ffp-contract=off)
// and must keep subnormals (no -ftz): pyhmmer runs with FTZ and DAZ off. Double precision
// appears where HMMER uses it (totscale, the generator's draws, FChoose's sums).
//
// Memory: functions allocate nothing; the caller hands each pair a byte arena, and running out of
// it (or any other capacity) sends the pair back to pyhmmer rather than changing a result.
#pragma once

#ifdef __CUDACC__
#define TAIL_FN __device__
#define TAIL_MEMBER __device__
#define TAIL_CONST __device__ const
#ifndef __CUDACC_RTC__
#include <cstdint>
#endif
#else
#include <cstddef>
#include <cstdint>
#include <cstring>
#define TAIL_FN static
#define TAIL_MEMBER
#define TAIL_CONST static const
#endif

namespace gpuhmm::tail {

#ifdef __CUDACC_RTC__
typedef unsigned long long tail_size_t;
typedef unsigned int tail_u32;
typedef int tail_i32;
#else
typedef size_t tail_size_t;
typedef uint32_t tail_u32;
typedef int32_t tail_i32;
#endif

// One __m128 of four float32 lanes.
struct f4 {
    float v[4];
};

// Rows of the striped transitions (p7o_tsc_e order), then DD: tfv[t * Q + q].
enum Transition { T_BM, T_MM, T_IM, T_DM, T_MD, T_MI, T_II, T_DD, T_COUNT };
// Columns of a matrix's special states (p7X_E .. p7X_SCALE).
enum Special { X_E, X_N, X_J, X_B, X_C, X_SCALE, X_COUNT };

// Outcomes of a stage: a pair that is not TAIL_OK goes to pyhmmer.
enum Status { TAIL_OK = 0, TAIL_RANGE = 1, TAIL_CAPACITY = 2, TAIL_UNCERTAIN = 3 };

// One model's P7_OPROFILE float parameters (stages/tail/profile.py's StripedProfile).
struct Profile {
    int M, Q, K, Kp;
    const f4 *rfv;  // Kp * Q: residue x's odds ratios, vector q at rfv[x * Q + q]
    const f4 *tfv;  // T_COUNT * Q
    // For each degenerate code x = K + 1 .. Kp − 3, row x − K − 1 of K + 1 bytes: the number of
    // canonical members, then the members ascending (esl_abc_FAvgScVec).
    const unsigned char *degenerate;
    // tfv node by node, for the traces' steps: node (q, z)'s T_COUNT transitions in Transition's
    // order at ntv[2 * (4q + z)] (BM, MM, IM, DM) and the vector after it (MD, MI, II, DD).
    const f4 *ntv;
    float tau, lam;  // the Forward exponential tail (FTAU, FLAMBDA)
};

// om->xf as the tail sets it for the full target length (p7_oprofile_ReconfigMultihit/Unihit).
struct SpecialTransitions {
    float e_move, e_loop, move, loop;
};

// A P7_OMX: the specials of rows 0..L; full matrices also keep the M, D and I rows.
struct Matrix {
    int L, Q;
    int has_own_scales;
    float *xmx;  // (L + 1) * X_COUNT
    f4 *M, *D, *I;  // (L + 1) * Q each; null for the parser matrices
};

// A byte arena; allocation past its end marks it overflowed and returns null.
struct Arena {
    char *base;
    tail_size_t used, capacity;
    int overflow;
};

// Every allocation starts at a 16-byte aligned address (the GPU faults on misaligned f4 and
// double accesses), whatever the arena's base.
TAIL_FN void *arena_alloc(Arena *arena, tail_size_t bytes) {
    tail_size_t base = (tail_size_t)arena->base;
    tail_size_t at = ((base + arena->used + 15) & ~(tail_size_t)15) - base;
    if (arena->overflow || at + bytes > arena->capacity) {
        arena->overflow = 1;
        return 0;
    }
    arena->used = at + bytes;
    return arena->base + at;
}

// A load of what no thread writes while the kernel runs (the models, the residues, an earlier
// kernel's matrices): on the GPU through the read-only cache, so that the compiler may move it
// past stores.
TAIL_FN float ro(const float *p) {
#ifdef __CUDACC__
    return __ldg(p);
#else
    return *p;
#endif
}

TAIL_FN f4 ro(const f4 *p) {
#ifdef __CUDACC__
    const float4 v = __ldg((const float4 *)p);
    return f4{{v.x, v.y, v.z, v.w}};
#else
    return *p;
#endif
}

TAIL_FN unsigned char ro(const unsigned char *p) {
#ifdef __CUDACC__
    return __ldg(p);
#else
    return *p;
#endif
}

TAIL_FN int lane_q(int k, int Q) { return (k - 1) % Q; }
TAIL_FN int lane_z(int k, int Q) { return (k - 1) / Q; }

// Node k's value in striped vectors `rows` (Q vectors); 0 for k = 0, as HMMER's shifts bring in.
TAIL_FN float node_value(const f4 *rows, int Q, int k) {
    return k > 0 ? rows[(k - 1) % Q].v[(k - 1) / Q] : 0.0f;
}

TAIL_FN float transition(const Profile *om, int t, int k) { return node_value(om->tfv + t * om->Q, om->Q, k); }

// esl_vec_FSum: the Kahan-compensated float32 sum.
TAIL_FN float kahan_sum(const float *values, int n) {
    float total = 0.0f, compensation = 0.0f;
    for (int i = 0; i < n; i++) {
        float y = values[i] - compensation;
        float t = total + y;
        compensation = (t - total) - y;
        total = t;
    }
    return total;
}

// glibc's logf (sysdeps/ieee754/flt-32/e_logf.c, glibc 2.27 and later), which HMMER's null2
// scores go through. Rewritten from its published algorithm and table: r = z·(1/c) − 1 for the
// nearest of 16 centres c, log x = k·ln 2 + log c + a degree-4 polynomial in r, all in double,
// rounded once. Equal to the C library's logf on every positive finite float, with or without
// fused multiply-adds (checked exhaustively); tail_logf_check in the tests re-checks a sample.
TAIL_CONST double LOGF_INVC[16] = {
    0x1.661ec79f8f3bep+0, 0x1.571ed4aaf883dp+0, 0x1.49539f0f010bp+0,  0x1.3c995b0b80385p+0,
    0x1.30d190c8864a5p+0, 0x1.25e227b0b8eap+0,  0x1.1bb4a4a1a343fp+0, 0x1.12358f08ae5bap+0,
    0x1.0953f419900a7p+0, 0x1p+0,               0x1.e608cfd9a47acp-1, 0x1.ca4b31f026aap-1,
    0x1.b2036576afce6p-1, 0x1.9c2d163a1aa2dp-1, 0x1.886e6037841edp-1, 0x1.767dcf5534862p-1};
TAIL_CONST double LOGF_LOGC[16] = {
    -0x1.57bf7808caadep-2, -0x1.2bef0a7c06ddbp-2, -0x1.01eae7f513a67p-2, -0x1.b31d8a68224e9p-3,
    -0x1.6574f0ac07758p-3, -0x1.1aa2bc79c81p-3,   -0x1.a4e76ce8c0e5ep-4, -0x1.1973c5a611cccp-4,
    -0x1.252f438e10c1ep-5, 0x0p+0,                0x1.aa5aa5df25984p-5,  0x1.c5e53aa362eb4p-4,
    0x1.526e57720db08p-3,  0x1.bc2860d22477p-3,   0x1.1058bc8a07ee1p-2,  0x1.4043057b6ee09p-2};
TAIL_CONST double LOGF_A[3] = {-0x1.00ea348b88334p-2, 0x1.5575b0be00b6ap-2, -0x1.ffffef20a4123p-2};
TAIL_CONST double LOGF_LN2 = 0x1.62e42fefa39efp-1;

TAIL_FN tail_u32 float_bits(float x) {
#ifdef __CUDACC__
    return __float_as_uint(x);
#else
    tail_u32 u;
    memcpy(&u, &x, 4);
    return u;
#endif
}

TAIL_FN float bits_float(tail_u32 u) {
#ifdef __CUDACC__
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, 4);
    return x;
#endif
}

// Defined for positive finite x, the only inputs the tail gives it (mean null2 odds).
TAIL_FN float libm_logf(float x) {
    tail_u32 ix = float_bits(x);
    if (ix == 0x3f800000u) return 0.0f;
    if (ix - 0x00800000u >= 0x7f800000u - 0x00800000u) {  // subnormal: normalize first
        ix = float_bits(x * 0x1p23f);
        ix -= 23u << 23;
    }
    tail_u32 tmp = ix - 0x3f330000u;
    int i = (tmp >> 19) % 16;
    int k = (tail_i32)tmp >> 23;
    tail_u32 iz = ix - (tmp & (0x1ffu << 23));
    double z = (double)bits_float(iz);
    double r = z * LOGF_INVC[i] - 1.0;
    double y0 = LOGF_LOGC[i] + (double)k * LOGF_LN2;
    double r2 = r * r;
    double y = LOGF_A[1] * r + LOGF_A[2];
    y = LOGF_A[0] * r2 + y;
    y = y * r2 + (y0 + r);
    return (float)y;
}

}  // namespace gpuhmm::tail
