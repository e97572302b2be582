// HMMER 3.4's domain definition (src/p7_domaindef.c): p7_domaindef_ByPosteriorHeuristics with
// is_multidomain_region, region_trace_ensemble and rescore_isolated_domain, in hmmsearch's form,
// bit for bit (tests/oracle/domaindef.py), and each domain's alignment display
// (src/p7_alidisplay.c: p7_alidisplay_Create, p7_alidisplay_EncodePostProb).
//
// Thread → data: one thread per target for the region scan; per multi-domain region, a lane group
// (4 threads, fwdback.cuh) for its Forward matrix, then a warp for its traces (lane 0 samples,
// the lanes split the null2 sums) and one for their clustering (the lanes split the link
// tests); per envelope, a lane group for its matrices, then one thread for its trace and
// alignment display (stages.cuh); each region or envelope has its own arena.
// Lane width: the 4-lane vectors of the stages it calls. Rounding: float32 comparisons of
// float32 differences for the region thresholds; the null2 scores are glibc's logf of float32
// odds; a domain's correction is the in-order float32 sum of its residues' null2 scores.
#pragma once
#include "decoding.cuh"
#include "null2.cuh"
#include "optacc.cuh"
#include "spensemble.cuh"
#include "stotrace.cuh"
#include "wide.cuh"

namespace gpuhmm::tail {

TAIL_CONST float RT1 = 0.25f, RT2 = 0.10f, RT3 = 0.20f;  // p7_domaindef_Create's thresholds
TAIL_CONST int NSAMPLES = 200;
TAIL_CONST int MAX_SEGMENTS = 4096;  // sampled domains per region
TAIL_CONST int MAX_TRACE_DOMAINS = 256;  // domains per sampled trace
TAIL_CONST int MAX_ENVELOPES = 256;  // envelopes per region

// What the alignment display reads of a model besides its odds ratios.
struct Annotation {
    const unsigned char *consensus_code;  // M: the digital code of each consensus residue
    const char *consensus, *rf, *cs;  // M characters each; rf and cs null where the model has none
    const char *symbols;  // the alphabet's symbols by digital code
};

// One domain as P7_DOMAIN holds it, and its alignment lines: `N` characters each of the model,
// match, target and posterior lines, then the RF and CS lines where the model has them.
struct Domain {
    int ienv, jenv, iali, jali, hmmfrom, hmmto, N;
    float envsc, domcorrection, dombias, oasc, bitscore;
    double lnP;
    char *text;
};

// The domains found so far, with P7_DOMAINDEF's counts; `text` space comes from `out`.
struct Definition {
    float nexpected;
    int nregions, nclustered, noverlaps, nenvelopes, ndom, capacity;
    Domain *domains;
    Arena *out;
};

TAIL_FN SpecialTransitions reconfigured(int L, int multihit) {
    // p7_oprofile_ReconfigMultihit / ReconfigUnihit for the full target length L.
    SpecialTransitions xf;
    float nj = multihit ? 1.0f : 0.0f;
    xf.move = (2.0f + nj) / (((float)L + 2.0f) + nj);
    xf.loop = 1.0f - xf.move;
    xf.e_move = multihit ? 0.5f : 1.0f;
    xf.e_loop = multihit ? 0.5f : 0.0f;
    return xf;
}

TAIL_FN Matrix full_matrix(Arena *arena, int L, int Q) {
    Matrix mx;
    tail_size_t cells = (tail_size_t)(L + 1) * Q;
    mx.L = L, mx.Q = Q, mx.has_own_scales = 0;
    mx.xmx = (float *)arena_alloc(arena, sizeof(float) * X_COUNT * (L + 1));
    mx.M = (f4 *)arena_alloc(arena, sizeof(f4) * cells);
    mx.D = (f4 *)arena_alloc(arena, sizeof(f4) * cells);
    mx.I = (f4 *)arena_alloc(arena, sizeof(f4) * cells);
    return mx;
}

TAIL_FN char upper(char c) { return c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c; }
TAIL_FN char lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c; }

// p7_alidisplay_EncodePostProb, in double as HMMER does.
TAIL_FN char encode_posterior(float p) {
    double shifted = (double)p + 0.05;
    return shifted >= 1.0 ? '*' : (char)((int)(shifted * 10.0) + '0');
}

// p7_alidisplay_Create(tr, 0, om, sq, NULL) for an OA trace in target coordinates: the lines from
// the first M after the first B to the last M before the next E.
TAIL_FN int display(const Profile *om, const Annotation *ann, const unsigned char *dsq, const Trace *tr, Domain *d,
                    Arena *out) {
    int z1 = 0, z2;
    while (z1 < tr->n && tr->st[z1] != 'B') z1++;
    while (z1 < tr->n && tr->st[z1] != 'M') z1++;
    for (z2 = z1; z2 < tr->n && tr->st[z2] != 'E'; z2++) {
    }
    if (z1 >= tr->n || z2 >= tr->n) return TAIL_RANGE;
    while (tr->st[z2] != 'M') z2--;
    int N = z2 - z1 + 1, lines = 4 + (ann->rf != 0) + (ann->cs != 0);
    char *text = (char *)arena_alloc(out, (tail_size_t)N * lines);
    if (!text) return TAIL_CAPACITY;
    char *model = text, *mline = text + N, *aseq = text + 2 * N, *ppline = text + 3 * N;
    char *rfline = ann->rf ? text + 4 * N : 0, *csline = ann->cs ? text + (4 + (ann->rf != 0)) * N : 0;
    for (int z = z1; z <= z2; z++) {
        char state = tr->st[z];
        int k = tr->k[z], c = z - z1;
        int x = state != 'D' ? dsq[tr->i[z] - 1] : 0;
        if (state == 'M') {
            model[c] = ann->consensus[k - 1];
            if (x == ann->consensus_code[k - 1])
                mline[c] = ann->consensus[k - 1];
            else
                mline[c] = om->rfv[x * om->Q + lane_q(k, om->Q)].v[lane_z(k, om->Q)] > 1.0f ? '+' : ' ';
            aseq[c] = upper(ann->symbols[x]);
        } else if (state == 'I') {
            model[c] = '.';
            mline[c] = ' ';
            aseq[c] = lower(ann->symbols[x]);
        } else {
            model[c] = ann->consensus[k - 1];
            mline[c] = ' ';
            aseq[c] = '-';
        }
        ppline[c] = state == 'D' ? '.' : encode_posterior(tr->pp[z]);
        if (rfline) rfline[c] = state == 'I' ? '.' : ann->rf[k - 1];
        if (csline) csline[c] = state == 'I' ? '.' : ann->cs[k - 1];
    }
    d->N = N, d->text = text;
    d->hmmfrom = tr->k[z1], d->hmmto = tr->k[z2];
    d->iali = tr->i[z1], d->jali = tr->i[z2];
    return TAIL_OK;
}

// rescore_isolated_domain: envelope i..j in unihit mode. Adds the domain to `def` unless posterior
// decoding overflows (HMMER then drops the envelope). Without `null2_is_done`, sets the
// envelope's null2 scores from its posteriors. The lane group `g` runs Forward, Backward, the
// decoding, the null2 odds and the optimal accuracy fill (or a warp does, for the longest); the
// thread that `leads` alone goes on (the trace, the display), and its status is the envelope's.
template <class Group>
TAIL_FN int rescore_isolated_domain(const Group &g, const Profile *om, const Annotation *ann, const unsigned char *dsq,
                                    int L, int i, int j, int null2_is_done, float *n2sc, Definition *def,
                                    Arena *arena) {
    const SpecialTransitions xf = reconfigured(L, 0);
    const int Ld = j - i + 1, Q = om->Q;
    const unsigned char *residues = dsq + i - 1;
    tail_size_t mark = arena->used;
    Matrix fwd = full_matrix(arena, Ld, Q), bck = full_matrix(arena, Ld, Q);
    f4 *scratch = (f4 *)arena_alloc(arena, sizeof(f4) * 6 * Q);
    float *null2 = (float *)arena_alloc(arena, sizeof(float) * om->Kp);
    Trace tr = trace_alloc(arena, 2 * (Ld + om->M) + 16, 1);
    Posteriors pp;
    pp.N = (float *)arena_alloc(arena, sizeof(float) * (Ld + 1));
    pp.J = (float *)arena_alloc(arena, sizeof(float) * (Ld + 1));
    pp.C = (float *)arena_alloc(arena, sizeof(float) * (Ld + 1));
    if (arena->overflow) return TAIL_CAPACITY;
    float envsc;
    int status = any_forward(g, om, residues, Ld, &xf, &fwd, scratch, &envsc);
    if (status != TAIL_OK) return status;
    status = any_backward(g, om, residues, Ld, &xf, &fwd, &bck, scratch);
    if (status != TAIL_OK) return status;
    pp.L = Ld, pp.Q = Q, pp.M = bck.M, pp.I = bck.I;  // decoded in place, as HMMER does
    if (decoding(g, &xf, &fwd, &bck, &pp) != TAIL_OK) {
        arena->used = mark;
        return TAIL_OK;
    }
    Domain *d = def->domains + def->ndom;
    if (def->ndom == def->capacity) return TAIL_CAPACITY;
    if (!null2_is_done) null2_by_expectation(g, om, &pp, scratch, null2);  // set in n2sc at the end
    const float oasc = optimal_accuracy(g, om, &xf, &pp, &fwd);  // the Forward matrix holds the OA matrix
    if (!leads(g)) return TAIL_OK;
    d->oasc = oasc;
    status = oa_trace(om, &xf, &pp, &fwd, &tr);
    if (status != TAIL_OK) return status;
    for (int z = 0; z < tr.n; z++)
        if (tr.i[z] > 0) tr.i[z] += i - 1;
    status = display(om, ann, dsq, &tr, d, def->out);
    if (status != TAIL_OK) return status;
    if (!null2_is_done)
        for (int r = 0; r < Ld; r++) n2sc[i + r] = libm_logf(null2[residues[r]]);
    float correction = 0.0f;
    for (int r = i; r <= j; r++) correction = correction + n2sc[r];
    d->ienv = i, d->jenv = j;
    d->envsc = envsc, d->domcorrection = correction;
    d->dombias = d->bitscore = 0.0f, d->lnP = 0.0;
    def->ndom++;
    arena->used = mark;
    return TAIL_OK;
}

// is_multidomain_region: whether some split point expects rt3 domains on both sides.
TAIL_FN int is_multidomain_region(const float *btot, const float *etot, int i, int j) {
    float best = -1.0f;
    for (int z = i; z <= j; z++) {
        float ends = etot[z] - etot[i - 1];
        float begins = btot[j] - btot[z - 1];
        float expected = ends < begins ? ends : begins;
        if (expected > best) best = expected;
    }
    return best >= RT3;
}

// One domain of a sampled trace (p7_trace_Index's tfrom..tto as sequence and model bounds), and
// where its used nodes are in SampledDomains' lists.
struct SampledDomain {
    int sqfrom, sqto, hmmfrom, hmmto;
    int first, nodes, emitted;
};

// A sample_trace sink for region_trace_ensemble: p7_trace_Index and p7_Null2_ByTrace's node
// usage as the path is sampled (backward, T to S), without keeping the path. Between an E and its
// B the emitting steps (M and I) come at non-increasing nodes, so each used node is one run, kept
// with its count; the lists fill downward from `top`, so each domain's nodes ascend. Domains come
// last first.
struct SampledDomains {
    SampledDomain *found;  // MAX_TRACE_DOMAINS
    int *offsets;  // `capacity` each
    float *counts;
    int capacity, top, count;
    SampledDomain open;
    int end, run_k, run_offset;  // the open domain's list end; the node of the current run (0: none)
    float run_count;

    TAIL_MEMBER int close_run() {
        if (run_k == 0) return 1;
        if (top == 0) return 0;
        top--;
        offsets[top] = run_offset, counts[top] = run_count;
        run_k = 0;
        return 1;
    }

    TAIL_MEMBER int append(char, char state, int k, int i, Node n) {
        if (state == 'E') {
            open.sqfrom = open.sqto = open.hmmfrom = open.hmmto = 0;
            open.emitted = 0;
            end = top, run_k = 0;
        } else if (state == 'M' || state == 'I') {
            open.emitted++;
            if (run_k == k) {
                run_count += 1.0f;
            } else {
                if (!close_run()) return 0;
                run_k = k, run_offset = 4 * n.q + n.z, run_count = 1.0f;
            }
            if (state == 'M') {
                if (open.sqto == 0) open.sqto = i, open.hmmto = k;
                open.sqfrom = i, open.hmmfrom = k;
            }
        } else if (state == 'B') {
            if (!close_run() || count == MAX_TRACE_DOMAINS) return 0;
            open.first = top, open.nodes = end - top;
            found[count++] = open;
        }
        return 1;
    }
};

// A multi-domain region's arrays in its arena, laid out alike by each of the kernels that run
// region_trace_ensemble in three parts: the Forward matrix, the traces, the clustering.
struct RegionWork {
    Matrix fwd;  // its special states; the M, D and I rows are `cells`
    f4 *cells;  // (Lr + 1) * Q * 4: lane z of vector q of row i, {M, D, I, 0}, at 4 (iQ + q) + z
    f4 *scratch;
    float *odds, *addend, *null2;
    int *segments;  // sample, i, j, k and m of each segment (MAX_SEGMENTS each), then their number
    SampledDomains sampled;
};

TAIL_FN RegionWork region_work(const Profile *om, int Lr, Arena *arena) {
    RegionWork w;
    w.fwd.L = Lr, w.fwd.Q = om->Q, w.fwd.has_own_scales = 0;
    w.fwd.xmx = (float *)arena_alloc(arena, sizeof(float) * X_COUNT * (Lr + 1));
    w.fwd.M = w.fwd.D = w.fwd.I = 0;
    w.cells = (f4 *)arena_alloc(arena, sizeof(f4) * 4 * (tail_size_t)(Lr + 1) * om->Q);
    w.scratch = (f4 *)arena_alloc(arena, sizeof(f4) * 6 * om->Q);
    w.odds = (float *)arena_alloc(arena, sizeof(float) * Lr);
    w.addend = (float *)arena_alloc(arena, sizeof(float) * Lr);
    w.null2 = (float *)arena_alloc(arena, sizeof(float) * om->Kp);
    w.segments = (int *)arena_alloc(arena, sizeof(int) * (5 * MAX_SEGMENTS + 1));
    w.sampled.found = (SampledDomain *)arena_alloc(arena, sizeof(SampledDomain) * MAX_TRACE_DOMAINS);
    w.sampled.capacity = Lr;  // a trace emits each residue once
    w.sampled.offsets = (int *)arena_alloc(arena, sizeof(int) * Lr);
    w.sampled.counts = (float *)arena_alloc(arena, sizeof(float) * Lr);
    return w;
}

// Forward rows kept as the traces read them: one 16-byte {M, D, I} cell per node and row.
struct CellRows {
    f4 *cells;
    int Q;

    TAIL_MEMBER void operator()(int i, int z, const f4 *M, const f4 *D, const f4 *I) const {
        f4 *row = cells + 4 * (tail_size_t)i * Q + z;
        for (int q = 0; q < Q; q++) row[4 * q] = f4{{M[q].v[z], D[q].v[z], I[q].v[z], 0.0f}};
    }
};

// region_trace_ensemble's first part: the multihit Forward matrix of region i..j, by the lane group g,
// its rows as cells.
TAIL_FN int region_forward(const LaneGroup &g, const Profile *om, const unsigned char *dsq, int L, int i, int j,
                           RegionWork *w) {
    const SpecialTransitions xf = reconfigured(L, 1);
    float unused;
    int status = group_forward(g, om, dsq + i - 1, j - i + 1, &xf, &w->fwd, w->scratch, &unused,
                               CellRows{w->cells, om->Q});
    return status == TAIL_RANGE ? status : TAIL_OK;  // the score's rounding (TAIL_UNCERTAIN) is not used
}

// Its second part, by the warp `warp`: the 200 stochastic traces from the reseeded generator
// (lane 0: the chain of draws is one sequence), their domains as segments, and each residue's
// null2 odds summed over the traces (the lanes split the residues).
TAIL_FN int region_traces(const Warp &warp, const Profile *om, const unsigned char *dsq, int L, int i, int j,
                          Randomness *rng, RegionWork *w) {
    const SpecialTransitions xf = reconfigured(L, 1);
    const StoSampler sampler = sto_sampler(om, &xf, &w->fwd, w->cells);
    const int Lr = j - i + 1;
    const unsigned char *residues = dsq + i - 1;
    float *odds = w->odds, *addend = w->addend, *null2 = w->null2;
    SampledDomains *sampled = &w->sampled;
    int *seg_sample = w->segments, *seg_i = w->segments + MAX_SEGMENTS, *seg_j = w->segments + 2 * MAX_SEGMENTS;
    int *seg_k = w->segments + 3 * MAX_SEGMENTS, *seg_m = w->segments + 4 * MAX_SEGMENTS;
    int n = 0;
    if (warp.lane == 0) rng_reseed(rng);
    for (int r = warp.lane; r < Lr; r += warp.width) odds[r] = 0.0f, addend[r] = 1.0f;
    for (int sample = 0; sample < NSAMPLES; sample++) {
        int status = TAIL_OK, ndomains = 0;
        if (warp.lane == 0) {
            SampledDomains found = *sampled;
            found.top = found.capacity, found.count = 0;
            status = sample_trace(rng, sampler, found);
            ndomains = found.count;
            if (status == TAIL_OK && n + ndomains > MAX_SEGMENTS) status = TAIL_CAPACITY;
            for (int d = ndomains - 1; status == TAIL_OK && d >= 0; d--, n++) {
                const SampledDomain *domain = found.found + d;
                seg_sample[n] = sample;
                seg_i[n] = domain->sqfrom + i - 1, seg_j[n] = domain->sqto + i - 1;
                seg_k[n] = domain->hmmfrom, seg_m[n] = domain->hmmto;
            }
        }
        status = warp.from_first(status), ndomains = warp.from_first(ndomains);
        if (status != TAIL_OK) return status;
        warp.sync();
        for (int d = ndomains - 1; d >= 0; d--) {  // in the trace's order
            const SampledDomain domain = sampled->found[d];
            null2_of_nodes(om, sampled->offsets + domain.first, sampled->counts + domain.first, domain.nodes,
                           1.0f / (float)domain.emitted, warp.lane, warp.width, null2);
            warp.sync();
            if (warp.lane == 0) null2_degenerate_odds(om, null2);
            warp.sync();
            for (int r = domain.sqfrom + warp.lane; r < domain.sqto; r += warp.width) addend[r] = null2[ro(residues + r)];
            warp.sync();
        }
        for (int r = warp.lane; r < Lr; r += warp.width) odds[r] = odds[r] + addend[r], addend[r] = 1.0f;
        warp.sync();
    }
    if (warp.lane == 0) w->segments[5 * MAX_SEGMENTS] = n;
    return TAIL_OK;
}

// Its third part, then the dominance test, by the warp `warp` (the result in lane 0): the region's
// null2 scores into n2sc, and the envelopes of its segments into `envelopes`, their number into
// `count`.
TAIL_FN int region_envelopes(const Warp &warp, int i, int j, float *n2sc, RegionWork *w, Envelope *envelopes,
                             int *count, Arena *arena) {
    const int Lr = j - i + 1, n = w->segments[5 * MAX_SEGMENTS];
    for (int r = warp.lane; r < Lr; r += warp.width) n2sc[i + r] = libm_logf(w->odds[r] / (float)NSAMPLES);
    int *seg_sample = w->segments, *seg_i = w->segments + MAX_SEGMENTS, *seg_j = w->segments + 2 * MAX_SEGMENTS;
    int *seg_k = w->segments + 3 * MAX_SEGMENTS, *seg_m = w->segments + 4 * MAX_SEGMENTS;
    int nenv = 0;
    int status =
        cluster(warp, seg_sample, seg_i, seg_j, seg_k, seg_m, n, NSAMPLES, arena, envelopes, MAX_ENVELOPES, &nenv);
    if (status != TAIL_OK || warp.lane != 0) return status;
    // Of two envelopes overlapping by 80% of the shorter, the less probable one is dominated (on a
    // tie, the first); the scan stops at the first envelope that starts right after (overlap 0).
    int *dominated = (int *)arena_alloc(arena, sizeof(int) * (nenv + 1));
    if (!dominated) return TAIL_CAPACITY;
    for (int d = 0; d < nenv; d++) dominated[d] = 0;
    for (int d = 0; d < nenv; d++)
        for (int d2 = d + 1; d2 < nenv; d2++) {
            const Envelope *a = envelopes + d, *b = envelopes + d2;
            int overlap = (a->j < b->j ? a->j : b->j) - (a->i > b->i ? a->i : b->i) + 1;
            if (overlap == 0) break;
            int la = a->j - a->i + 1, lb = b->j - b->i + 1;
            int shorter = la < lb ? la : lb;
            if ((double)((float)overlap / (float)shorter) >= 0.8) dominated[a->prob > b->prob ? d2 : d] = 1;
        }
    int kept = 0;
    for (int d = 0; d < nenv; d++)
        if (!dominated[d]) envelopes[kept++] = envelopes[d];
    *count = kept;
    return TAIL_OK;
}

// The region scan of p7_domaindef_ByPosteriorHeuristics over the posteriors of the whole target
// (domain_decoding's btot, etot and mocc of rows 0..L): each region i..j in order, and whether it
// is multi-domain, to `found(i, j, multi)`. A region still open at L is dropped, as in HMMER.
template <class Found>
TAIL_FN int find_regions(const float *btot, const float *etot, const float *mocc, int L, Found found) {
    int start = -1, triggered = 0, nregions = 0;
    for (int j = 1; j <= L; j++) {
        if (!triggered) {
            if (mocc[j] - (btot[j] - btot[j - 1]) < RT2)
                start = j;
            else if (start == -1)
                start = j;
            triggered = mocc[j] >= RT1;
            continue;
        }
        if (!(mocc[j] - (etot[j] - etot[j - 1]) < RT2)) continue;
        found(start, j, is_multidomain_region(btot, etot, start, j));
        nregions++;
        start = -1, triggered = 0;
    }
    return nregions;
}

}  // namespace gpuhmm::tail
