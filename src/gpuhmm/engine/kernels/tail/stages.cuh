// HMMER 3.4's p7_Pipeline from p7_ForwardParser on (src/p7_pipeline.c, src/p7_domaindef.c), cut
// into five stages whose work items are independent, so that each runs as one kernel over all its
// items with memory sized by the item (tail.cu), and the host build loops over the same items:
//   1. parse (per pair): Forward parser, the F3 test, Backward parser, p7_DomainDecoding and the
//      region scan; regions are appended to a queue.
//   2. regions (per multi-domain region): region_trace_ensemble and the dominance test, in three
//      kernels: the region's Forward matrix, its traces, their clustering (its arena keeps what
//      one leaves for the next).
//   3. envelopes (per envelope, single-domain regions included): rescore_isolated_domain.
//   4. assemble (per pair): the domains in region and envelope order, HMMER's counts, the scores,
//      and the size of the hit's serialized record;
//   5. serialize (per pair): the record (serialize.cuh), at the offset the schedule gives.
// The results are HMMER's bit for bit: every item runs the serial code of one thread, and what
// an item shares with others of its pair (the per-residue null2 scores) is written by one stage
// and read by a later one, over disjoint residue ranges.
//
// Thread → data: a lane group (4 threads, lanegroup.cuh) per pair for the parsers of stage 1, or
// a warp for the longest (wide.cuh), then its first thread; one thread per item otherwise (tail.cu spreads them); the schedule orders
// items costliest first. Memory: a pair's space (PairSpace) lives from stage 1 to stage 4; a
// region's or envelope's arena only for its stage, at an offset the schedule gives (sized by the
// item, not by the target).
#pragma once
#include "serialize.cuh"
#include "wide.cuh"

namespace gpuhmm::tail {

struct Model {
    Profile om;
    Annotation ann;
};

struct PairTask {
    int model, sequence;
    float filter_score, nullsc;
    double log_length;
};

// What stage 1 leaves for stage 4.
struct PairState {
    int status, passed, nregions, nclustered;
    float fwdsc, nexpected;
};

// A region of a pair: residues i..j, the `index`-th region of the pair.
struct Region {
    int pair, index, i, j, multi;
};

// A multi-domain region to sample (stage 2): its arena is `bytes` at offset `scratch` of `arena`.
struct RegionTask {
    int pair, i, j;
    tail_size_t scratch, bytes;
};

// An envelope to rescore (stage 3): `region` is the region's index in its pair; `clustered`
// envelopes come from stage 2 (their null2 scores are set); `text` is the offset of its alignment
// lines (`text_bytes` at most) in `text`.
struct EnvelopeTask {
    int pair, region, i, j, clustered;
    tail_size_t scratch, bytes, text, text_bytes;
};

// What stage 3 leaves for stage 4: the domain, if decoding kept it.
struct Rescored {
    int status, kept;
    Domain domain;
};

struct Tail {
    const Model *models;
    const unsigned char *residues;
    const long long *offsets;  // each sequence's first residue
    const int *lengths;
    const PairTask *pairs;
    int npairs, max_domains;
    PipelineSettings settings;
    // Stage 1: pair p's space at `space + space_offsets[p]`; pairs taken in `pair_order`.
    char *space;
    const tail_size_t *space_offsets;
    const int *pair_order;
    PairState *state;
    Region *regions;  // the queue, `region_capacity` long; its length in *nfound
    int *nfound;
    int region_capacity;
    int nwide;  // the first nwide items of the launch run on a warp each (wide.cuh): pairs of pair_order, envelope tasks
    // Stages 2 and 3: `ntasks` items, arenas in `arena`.
    int ntasks;
    char *arena;
    const RegionTask *region_tasks;
    int *region_status;  // per region task
    int *region_envelopes;  // per region task: the count, then MAX_ENVELOPES (i, j)
    const EnvelopeTask *envelope_tasks;
    Rescored *rescored;  // per envelope task
    char *text;
    // Stage 4: pair p's envelopes are envelope tasks envelope_first[p] .. envelope_first[p + 1]
    // (in region and envelope order); region_verdict[p] is the first status of its regions' stage 2
    // and takes precedence over the envelopes' (either sends the pair to pyhmmer).
    const int *envelope_first;
    const int *region_verdict;
    int *status;
    Hit *hits;
    Domain *domains;  // max_domains per pair
    int *ndomains;
    int *counts;  // per pair: nregions, nclustered, noverlaps, nenvelopes
    float *nexpected;
    // Stage 5: names (serialized.py's NameTable: three strings per model and per sequence), each
    // model's record settings; pair p's record of record_bytes[p] bytes (0: no hit) at
    // records + record_offsets[p].
    const char *model_names, *target_names;
    const long long *model_name_offsets, *target_name_offsets;
    const RecordSettings *record_settings;
    tail_size_t *record_bytes;
    const tail_size_t *record_offsets;
    char *records;
    // With item_ns set (benchmarks), each kernel's longest item in ns, by schedule.py's kernel index.
    unsigned long long *item_ns;
};

// Where a pair's arrays sit in its space (the same allocations in every stage).
struct PairSpace {
    Matrix fwd, bck;
    f4 *rows;
    float *btot, *etot, *mocc, *n2sc;
};

TAIL_FN PairSpace pair_space(char *base, int L, int Q) {
    Arena arena = {base, 0, ~(tail_size_t)0 >> 1, 0};
    PairSpace s;
    s.fwd.M = s.fwd.D = s.fwd.I = s.bck.M = s.bck.D = s.bck.I = 0;
    s.fwd.xmx = (float *)arena_alloc(&arena, sizeof(float) * X_COUNT * (L + 1));
    s.bck.xmx = (float *)arena_alloc(&arena, sizeof(float) * X_COUNT * (L + 1));
    s.rows = (f4 *)arena_alloc(&arena, sizeof(f4) * 6 * Q);
    s.btot = (float *)arena_alloc(&arena, sizeof(float) * (L + 1));
    s.etot = (float *)arena_alloc(&arena, sizeof(float) * (L + 1));
    s.mocc = (float *)arena_alloc(&arena, sizeof(float) * (L + 1));
    s.n2sc = (float *)arena_alloc(&arena, sizeof(float) * (L + 1));
    return s;
}

TAIL_FN int append_region(const Tail *t) {
#ifdef __CUDACC__
    return atomicAdd(t->nfound, 1);
#else
    return (*t->nfound)++;
#endif
}

TAIL_FN Names names_of(const Tail *t, const PairTask *task) {
    return table_names(t->model_names, t->model_name_offsets, task->model, t->target_names, t->target_name_offsets,
                       task->sequence);
}

TAIL_FN int lines_of(const Annotation *ann) { return 4 + (ann->rf != 0) + (ann->cs != 0); }

TAIL_FN const unsigned char *residues_of(const Tail *t, int pair, int *L) {
    const PairTask *task = t->pairs + pair;
    *L = t->lengths[task->sequence];
    return t->residues + t->offsets[task->sequence];
}

TAIL_FN PairSpace space_of(const Tail *t, int pair) {
    int L;
    residues_of(t, pair, &L);
    return pair_space(t->space + t->space_offsets[pair], L, t->models[t->pairs[pair].model].om.Q);
}

// Stage 1 for pair `pair_order[item]`, by the lane group or warp `g`: p7_ForwardParser, the F3
// test, p7_BackwardParser, then in its first thread p7_DomainDecoding and the regions. A region
// that does not fit the queue fails the pair.
template <class Group>
TAIL_FN void parse_pair(const Tail *t, int item, const Group &g) {
    const int p = t->pair_order[item];
    const PairTask *task = t->pairs + p;
    const Profile *om = &t->models[task->model].om;
    int L;
    const unsigned char *dsq = residues_of(t, p, &L);
    PairSpace s = space_of(t, p);
    const SpecialTransitions multihit = reconfigured(L, 1);
    float fwdsc = 0.0f;
    int passed = 0;
    int status = any_forward(g, om, dsq, L, &multihit, &s.fwd, s.rows, &fwdsc);
    if (status == TAIL_OK) status = forward_filter(om, fwdsc, task->filter_score, t->settings.F3, &passed);
    if (status == TAIL_OK && passed) status = any_backward(g, om, dsq, L, &multihit, &s.fwd, &s.bck, s.rows);
    if (!leads(g)) return;
    PairState *state = t->state + p;
    state->passed = passed, state->fwdsc = fwdsc;
    state->nregions = state->nclustered = 0;
    state->nexpected = 0.0f;
    if (status == TAIL_OK && passed) status = domain_decoding(&multihit, &s.fwd, &s.bck, s.btot, s.etot, s.mocc);
    if (status == TAIL_OK && passed) {
        for (int r = 0; r <= L; r++) s.n2sc[r] = 0.0f;
        state->nexpected = s.btot[L];
        int overflow = 0, index = 0, nclustered = 0;
        state->nregions = find_regions(s.btot, s.etot, s.mocc, L, [&](int i, int j, int multi) {
            Region region = {p, index++, i, j, multi};
            nclustered += multi;
            int at = append_region(t);
            if (at < t->region_capacity)
                t->regions[at] = region;
            else
                overflow = 1;
        });
        state->nclustered = nclustered;
        if (overflow) status = TAIL_CAPACITY;
    }
    state->status = status;
}

// Region task `item` and its arena's arrays, laid out alike by each of stage 2's three kernels.
struct RegionItem {
    const RegionTask *task;
    const Profile *om;
    const unsigned char *dsq;
    int L;
    Arena arena;
    Envelope *envelopes;
    RegionWork work;
};

TAIL_FN RegionItem region_item(const Tail *t, int item) {
    RegionItem r;
    r.task = t->region_tasks + item;
    r.om = &t->models[t->pairs[r.task->pair].model].om;
    r.dsq = residues_of(t, r.task->pair, &r.L);
    r.arena = {t->arena + r.task->scratch, 0, r.task->bytes, 0};
    r.envelopes = (Envelope *)arena_alloc(&r.arena, sizeof(Envelope) * MAX_ENVELOPES);
    r.work = region_work(r.om, r.task->j - r.task->i + 1, &r.arena);
    return r;
}

// Stage 2, first kernel, for region task `item`, by the lane group g: its Forward matrix
// (region_forward).
TAIL_FN void region_forward_item(const Tail *t, int item, const LaneGroup &g) {
    RegionItem r = region_item(t, item);
    int status = r.arena.overflow ? TAIL_CAPACITY : region_forward(g, r.om, r.dsq, r.L, r.task->i, r.task->j, &r.work);
    if (g.z != 0) return;
    t->region_envelopes[(tail_size_t)item * (1 + 2 * MAX_ENVELOPES)] = 0;
    t->region_status[item] = status;
}

// Stage 2, second kernel, by the warp `warp`: its 200 traces from the seeded generator
// (region_traces).
TAIL_FN void region_traces_item(const Tail *t, int item, const Warp &warp) {
    if (t->region_status[item] != TAIL_OK) return;
    RegionItem r = region_item(t, item);
    Randomness rng;
    rng_init(&rng, t->settings.seed);
    int status = region_traces(warp, r.om, r.dsq, r.L, r.task->i, r.task->j, &rng, &r.work);
    if (warp.lane == 0) t->region_status[item] = status;
}

// Stage 2, third kernel, by the warp `warp`: its null2 scores and envelopes (region_envelopes),
// out as the count then each envelope's (i, j).
TAIL_FN void region_envelopes_item(const Tail *t, int item, const Warp &warp) {
    if (t->region_status[item] != TAIL_OK) return;
    RegionItem r = region_item(t, item);
    int nenv = 0;
    int status = region_envelopes(warp, r.task->i, r.task->j, space_of(t, r.task->pair).n2sc, &r.work, r.envelopes,
                                  &nenv, &r.arena);
    if (warp.lane != 0) return;
    t->region_status[item] = status;
    if (status != TAIL_OK) return;
    int *out = t->region_envelopes + (tail_size_t)item * (1 + 2 * MAX_ENVELOPES);
    out[0] = nenv;
    for (int e = 0; e < nenv; e++) out[1 + 2 * e] = r.envelopes[e].i, out[2 + 2 * e] = r.envelopes[e].j;
}

// Stage 3 for envelope task `item`, by the lane group or warp g: rescore_isolated_domain, into
// one Domain.
template <class Group>
TAIL_FN void rescore_envelope(const Tail *t, int item, const Group &g) {
    const EnvelopeTask *task = t->envelope_tasks + item;
    const Model *model = t->models + t->pairs[task->pair].model;
    const Profile *om = &model->om;
    int L;
    const unsigned char *dsq = residues_of(t, task->pair, &L);
    Arena arena = {t->arena + task->scratch, 0, task->bytes, 0};
    Arena text = {t->text + task->text, 0, task->text_bytes, 0};
    Rescored *out = t->rescored + item;
    Definition def;
    def.domains = &out->domain;
    def.capacity = 1;
    def.out = &text;
    def.ndom = 0;
    int status = rescore_isolated_domain(g, om, &model->ann, dsq, L, task->i, task->j, task->clustered,
                                         space_of(t, task->pair).n2sc, &def, &arena);
    if (!leads(g)) return;
    out->status = status;
    out->kept = def.ndom;
}

// Stage 4 for pair `item`: p7_domaindef_ByPosteriorHeuristics' bookkeeping over the rescored
// envelopes in order (the domains kept, the overlaps of a clustered region's envelopes with the
// last kept domain), then p7_Pipeline's scores of the hit.
TAIL_FN void assemble_pair(const Tail *t, int p) {
    const PairState *state = t->state + p;
    const PairTask *task = t->pairs + p;
    const Model *model = t->models + task->model;
    const Profile *om = &model->om;
    Hit *hit = t->hits + p;
    t->record_bytes[p] = 0;
    hit->passed = state->passed, hit->has_hit = 0;
    int status = state->status;
    if (status == TAIL_OK) status = t->region_verdict[p];
    Definition def;
    def.domains = t->domains + (tail_size_t)p * t->max_domains;
    def.capacity = t->max_domains;
    def.nexpected = state->nexpected;
    def.nregions = state->nregions, def.nclustered = state->nclustered;
    def.noverlaps = def.nenvelopes = def.ndom = 0;
    int region = -1, last_end = 0;
    for (int e = t->envelope_first[p]; status == TAIL_OK && e < t->envelope_first[p + 1]; e++) {
        const EnvelopeTask *env = t->envelope_tasks + e;
        const Rescored *done = t->rescored + e;
        if (env->region != region) region = env->region, last_end = 0;
        status = done->status;
        if (env->clustered) def.noverlaps += env->i <= last_end;
        def.nenvelopes++;
        if (status != TAIL_OK || !done->kept) continue;
        if (def.ndom == def.capacity) status = TAIL_CAPACITY;
        else def.domains[def.ndom++] = done->domain, last_end = env->j;
    }
    t->status[p] = status;
    t->ndomains[p] = def.ndom;
    t->nexpected[p] = def.nexpected;
    int *counts = t->counts + 4 * (tail_size_t)p;
    counts[0] = def.nregions, counts[1] = def.nclustered, counts[2] = def.noverlaps, counts[3] = def.nenvelopes;
    if (status != TAIL_OK || !state->passed) return;
    int L;
    residues_of(t, p, &L);
    PairInput in;
    in.L = L, in.filter_score = task->filter_score, in.nullsc = task->nullsc, in.log_length = task->log_length;
    score_hit(om, &in, &t->settings, state->fwdsc, space_of(t, p).n2sc, &def, hit);
    Names names = names_of(t, task);
    if (hit->has_hit) t->record_bytes[p] = hit_record_bytes(hit, def.domains, def.ndom, lines_of(&model->ann), &names);
}

// Stage 5 for pair `item`: its hit's p7_hit_Serialize record, where it has one.
TAIL_FN void serialize_pair(const Tail *t, int p) {
    if (!t->record_bytes[p]) return;
    const PairTask *task = t->pairs + p;
    const Model *model = t->models + task->model;
    Names names = names_of(t, task);
    write_hit_record(t->records + t->record_offsets[p], t->hits + p, t->domains + (tail_size_t)p * t->max_domains,
                     t->ndomains[p], t->nexpected[p], t->counts + 4 * (tail_size_t)p, model->om.M,
                     t->lengths[task->sequence], model->ann.rf != 0, model->ann.cs != 0, &names,
                     t->record_settings + task->model);
}

}  // namespace gpuhmm::tail
