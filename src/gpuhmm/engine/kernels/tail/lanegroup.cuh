// A group of 4 threads, one per lane of HMMER's __m128, running one DP problem together
// (fwdback.cuh): each thread keeps its lane's serial chains, and the steps that cross lanes
// (esl_sse_rightshift_float, the left shift of the Backward successor, esl_sse_hsum_ps, the
// early-exit test of Forward's D→D passes) are explicit exchanges. A WideGroup runs one problem
// on a whole warp: each of the 4 lanes' q range cut into WIDE_PARTS parts (wide.cuh). A Warp
// shares one item among 32 lanes, for loops whose iterations are independent.
//
// Thread → data: on the GPU the group is 4 consecutive lanes of a warp (a WideGroup: the warp,
// thread 4·part + z) and an exchange is __shfl_sync over them. On the host the group's threads
// are coroutines of one thread (run_lane_group, run_wide_group), which take turns at every
// exchange, so that the host build runs the same source in the same order; a host Warp is one
// lane. No arithmetic.
#pragma once
#include "common.cuh"

#ifndef __CUDACC__
#include <ucontext.h>

#include <functional>
#include <vector>
#endif

namespace gpuhmm::tail {

#ifdef __CUDACC__
struct LaneGroup {
    int z;  // this thread's lane, 0..3
    unsigned mask;

    // The value `value` has in lane `from` (0..3).
    TAIL_FN float exchange(float value, int from) const { return __shfl_sync(mask, value, from, 4); }
    // esl_sse_hsum_ps of the lanes' values: (a0 + a1) + (a2 + a3).
    TAIL_FN float hsum(float value) const {
        float a0 = exchange(value, 0), a1 = exchange(value, 1), a2 = exchange(value, 2), a3 = exchange(value, 3);
        return (a0 + a1) + (a2 + a3);
    }
    TAIL_FN int any(int predicate) const { return __any_sync(mask, predicate); }
    // Makes what each lane wrote to memory visible to the others.
    TAIL_FN void sync() const { __syncwarp(mask); }
};

// The 32 threads of a warp sharing one item: lane `lane` of `width`.
struct Warp {
    int lane, width;

    // Makes what each lane wrote to memory visible to the others.
    TAIL_FN void sync() const { __syncwarp(); }
    TAIL_FN int from_first(int value) const { return __shfl_sync(0xffffffffu, value, 0); }
    // Bit l set where lane l's predicate holds.
    TAIL_FN unsigned ballot(int predicate) const { return __ballot_sync(0xffffffffu, predicate); }
};

TAIL_FN int lowest_lane(unsigned lanes) { return __ffs(lanes) - 1; }

TAIL_FN Warp this_warp() {
    Warp w = {(int)(threadIdx.x & 31), 32};
    return w;
}

TAIL_FN LaneGroup warp_lane_group() {
    const int lane = threadIdx.x & 31;
    LaneGroup g = {lane & 3, 0xfu << (lane & ~3)};
    return g;
}

// A warp on one problem: lane z of HMMER's vectors, part `part` of each lane's q range.
struct WideGroup {
    int z, part;

    // The value `value` has in thread (z_from, part_from).
    TAIL_FN float from(float value, int z_from, int part_from) const {
        return __shfl_sync(0xffffffffu, value, 4 * part_from + z_from);
    }
    TAIL_FN int any(int predicate) const { return __any_sync(0xffffffffu, predicate); }
    TAIL_FN void sync() const { __syncwarp(); }
};

TAIL_FN WideGroup warp_wide_group() {
    const int lane = threadIdx.x & 31;
    WideGroup w = {lane & 3, lane >> 2};
    return w;
}
#else
// The n coroutines of a host group (4 or 32): each meeting passes the turn to the next thread,
// so thread 0 resumes once every thread has arrived. Values go through two sets of slots, used in
// turn: a thread writes a set again only after every thread has read it.
struct LaneMeeting {
    int n;
    ucontext_t host, lanes[32];
    float value[2][32];
    int turn[32] = {};

    void meet(int z) { swapcontext(&lanes[z], &lanes[(z + 1) % n]); }
    // Every thread's `value`, by thread, until the meeting after next.
    const float *gather(int z, float value) {
        float *slots = this->value[turn[z]];
        turn[z] ^= 1;
        slots[z] = value;
        meet(z);
        return slots;
    }
};

struct LaneGroup {
    int z;
    LaneMeeting *meeting;

    // Every lane's `value`, into all[0..3].
    void gather(float value, float *all) const {
        const float *slots = meeting->gather(z, value);
        for (int lane = 0; lane < 4; lane++) all[lane] = slots[lane];
    }
    float exchange(float value, int from) const {
        float all[4];
        gather(value, all);
        return all[from];
    }
    float hsum(float value) const {
        float a[4];
        gather(value, a);
        return (a[0] + a[1]) + (a[2] + a[3]);
    }
    int any(int predicate) const {
        float all[4];
        gather(predicate ? 1.0f : 0.0f, all);
        return all[0] != 0.0f || all[1] != 0.0f || all[2] != 0.0f || all[3] != 0.0f;
    }
    void sync() const { meeting->meet(z); }
};

// A warp on the host: one lane, so that every lane-parallel loop runs serially in its order.
struct Warp {
    int lane, width;

    void sync() const {}
    int from_first(int value) const { return value; }
    unsigned ballot(int predicate) const { return predicate ? 1u : 0u; }
};

inline int lowest_lane(unsigned lanes) { return __builtin_ctz(lanes); }

inline Warp this_warp() { return Warp{0, 1}; }

struct WideGroup {
    int z, part;
    LaneMeeting *meeting;

    float from(float value, int z_from, int part_from) const {
        return meeting->gather(4 * part + z, value)[4 * part_from + z_from];
    }
    int any(int predicate) const {
        const float *all = meeting->gather(4 * part + z, predicate ? 1.0f : 0.0f);
        int found = 0;
        for (int thread = 0; thread < meeting->n; thread++) found |= all[thread] != 0.0f;
        return found;
    }
    void sync() const { meeting->meet(4 * part + z); }
};

inline thread_local const std::function<void(int)> *group_body;

inline void group_entry(int thread) { (*group_body)(thread); }

// Runs body(thread) for the meeting's n threads, as coroutines of this thread; thread t + 1
// resumes when thread t finishes.
inline void run_group(LaneMeeting *meeting, const std::function<void(int)> &body) {
    const size_t stack = 1 << 18;
    const int n = meeting->n;
    std::vector<char> stacks(n * stack);
    for (int z = 0; z < n; z++) {
        getcontext(&meeting->lanes[z]);
        meeting->lanes[z].uc_stack.ss_sp = stacks.data() + z * stack;
        meeting->lanes[z].uc_stack.ss_size = stack;
        meeting->lanes[z].uc_link = z < n - 1 ? &meeting->lanes[z + 1] : &meeting->host;
        makecontext(&meeting->lanes[z], (void (*)())group_entry, 1, z);
    }
    group_body = &body;
    swapcontext(&meeting->host, &meeting->lanes[0]);
}

// Runs body(g) for the 4 lanes of a group.
inline void run_lane_group(const std::function<void(const LaneGroup &)> &body) {
    LaneMeeting meeting{4};
    run_group(&meeting, [&](int z) { body(LaneGroup{z, &meeting}); });
}

// Runs body(w) for the 32 threads of a wide group.
inline void run_wide_group(const std::function<void(const WideGroup &)> &body) {
    LaneMeeting meeting{32};
    run_group(&meeting, [&](int thread) { body(WideGroup{thread & 3, thread >> 2, &meeting}); });
}
#endif

// esl_sse_rightshift_float, seen from lane z: lane z − 1's value (`fill` in lane 0).
TAIL_FN float from_left(const LaneGroup &g, float value, float fill = 0.0f) {
    float out = g.exchange(value, g.z > 0 ? g.z - 1 : 0);
    return g.z > 0 ? out : fill;
}

// The largest of the lanes' values (exact in any order, for values without NaN).
TAIL_FN float lanes_max(const LaneGroup &g, float value) {
    float best = value;
    for (int lane = 0; lane < 4; lane++) {
        float other = g.exchange(value, lane);
        best = other > best ? other : best;
    }
    return best;
}

// The left shift that brings in 0, seen from lane z: lane z + 1's value (0 in lane 3).
TAIL_FN float from_right(const LaneGroup &g, float value) {
    float out = g.exchange(value, g.z < 3 ? g.z + 1 : 3);
    return g.z < 3 ? out : 0.0f;
}


// What follows serves both: a group's part of a row of Q striped vectors and the steps that
// cross parts, so that one source runs a DP on a lane group (one part: lane z's whole row) or on
// a warp.

// This thread's vectors q0 .. q1 − 1 of a row: a lane group's whole row.
struct WideRange {
    int parts, q0, q1;
};

TAIL_FN WideRange wide_range(const LaneGroup &, int Q) {
    WideRange r = {1, 0, Q};
    return r;
}

TAIL_FN int leads(const LaneGroup &g) { return g.z == 0; }
TAIL_FN int leads(const WideGroup &w) { return w.z == 0 && w.part == 0; }

// The value of the cell before q0 in this lane's serial order (`fill` in lane 0's first).
TAIL_FN float wide_before(const LaneGroup &g, const WideRange &, float last, float fill = 0.0f) {
    return from_left(g, last, fill);
}

// The value of the cell after q1 − 1 (0 past lane 3's last).
TAIL_FN float wide_after(const LaneGroup &g, const WideRange &, float first) { return from_right(g, first); }

// segment(value) over this thread's vectors, in each lane's order.
template <class Segment>
TAIL_FN float wide_chain(const LaneGroup &, const WideRange &, int, float value, Segment segment) {
    return segment(value);
}

TAIL_FN float wide_from_left(const LaneGroup &g, float value, float fill = 0.0f) { return from_left(g, value, fill); }
TAIL_FN float wide_from_right(const LaneGroup &g, float value) { return from_right(g, value); }

// A value the lane's last (or first) part holds, in every thread of the lane.
TAIL_FN float wide_last(const LaneGroup &, const WideRange &, float value) { return value; }
TAIL_FN float wide_first(const LaneGroup &, float value) { return value; }

TAIL_FN float wide_hsum(const LaneGroup &g, float value) { return g.hsum(value); }
TAIL_FN float wide_max(const LaneGroup &g, float value) { return lanes_max(g, value); }

TAIL_CONST int WIDE_PARTS = 8;

// A warp's parts of a row: min(WIDE_PARTS, Q), thread (z, part) lane z's part-th range (empty
// for threads past them).

TAIL_FN WideRange wide_range(const WideGroup &w, int Q) {
    const int parts = Q < WIDE_PARTS ? Q : WIDE_PARTS;
    WideRange r = {parts, Q, Q};
    if (w.part < parts) r.q0 = w.part * Q / parts, r.q1 = (w.part + 1) * Q / parts;
    return r;
}

// The value of the cell before q0 in this lane's serial order: the previous part's `last`, or for
// part 0 the last part's of lane z − 1 (`fill` in lane 0), as esl_sse_rightshift_float brings it.
TAIL_FN float wide_before(const WideGroup &w, const WideRange &r, float last, float fill = 0.0f) {
    const int first = w.part == 0;
    float value = w.from(last, first ? (w.z > 0 ? w.z - 1 : 0) : w.z, first ? r.parts - 1 : w.part - 1);
    return first && w.z == 0 ? fill : value;
}

// The value of the cell after q1 − 1: the next part's `first`, or for the last part the first
// part's of lane z + 1 (0 in lane 3), as the left shift brings it.
TAIL_FN float wide_after(const WideGroup &w, const WideRange &r, float first) {
    const int last = w.part == r.parts - 1;
    float value = w.from(first, last ? (w.z < 3 ? w.z + 1 : 3) : w.z, last ? 0 : w.part + 1);
    return last && w.z == 3 ? 0.0f : value;
}

// segment(value) run by each part of every lane in turn (part 0 first, or the last part first
// when `descending`), each from the value its lane's part before it returned; every thread of
// lane z gets its lane's final value.
template <class Segment>
TAIL_FN float wide_chain(const WideGroup &w, const WideRange &r, int descending, float value, Segment segment) {
    for (int step = 0; step < r.parts; step++) {
        const int turn = descending ? r.parts - 1 - step : step;
        const float out = w.part == turn ? segment(value) : 0.0f;
        value = w.from(out, w.z, turn);
    }
    return value;
}

// esl_sse_hsum_ps of the lanes' values (every thread of a lane holds its lane's).
TAIL_FN float wide_hsum(const WideGroup &w, float value) {
    float a0 = w.from(value, 0, w.part), a1 = w.from(value, 1, w.part);
    float a2 = w.from(value, 2, w.part), a3 = w.from(value, 3, w.part);
    return (a0 + a1) + (a2 + a3);
}

// The value lane z − 1 holds (`fill` in lane 0), or lane z + 1 (0 in lane 3).
TAIL_FN float wide_from_left(const WideGroup &w, float value, float fill = 0.0f) {
    float out = w.from(value, w.z > 0 ? w.z - 1 : 0, w.part);
    return w.z > 0 ? out : fill;
}

TAIL_FN float wide_from_right(const WideGroup &w, float value) {
    float out = w.from(value, w.z < 3 ? w.z + 1 : 3, w.part);
    return w.z < 3 ? out : 0.0f;
}


// A value the lane's last (or first) part holds, in every thread of the lane.
TAIL_FN float wide_last(const WideGroup &w, const WideRange &r, float value) { return w.from(value, w.z, r.parts - 1); }
TAIL_FN float wide_first(const WideGroup &w, float value) { return w.from(value, w.z, 0); }

// The largest of every thread's values, by halves of the warp (exact in any order, for values
// without NaN).
TAIL_FN float wide_max(const WideGroup &w, float value) {
    float best = value;
    for (int apart = 16; apart > 0; apart /= 2) {
        const int other = (4 * w.part + w.z) ^ apart;
        const float theirs = w.from(best, other & 3, other >> 2);
        best = theirs > best ? theirs : best;
    }
    return best;
}

}  // namespace gpuhmm::tail
