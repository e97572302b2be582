// A batch of (model, target) pairs for the tail (pipeline.cuh), as the GPU kernel (tail.cu) and
// the host build both run it: every pair gets its own scratch arena and output space, and
// reports a status (TAIL_OK, or why it goes to pyhmmer).
//
// Thread → data: one thread per pair at a time; a thread takes pair `first`, then every
// `stride`-th after it. Memory: scratch is `scratch_bytes` per thread, reused from pair to pair;
// output is `out_bytes` per pair: its Domain records, then their alignment lines.
#pragma once
#include "pipeline.cuh"

namespace gpuhmm_tail {

struct Model {
    Profile om;
    Annotation ann;
};

struct PairTask {
    int model, sequence;
    float filter_score, nullsc;
    double log_length;
};

struct Batch {
    const Model *models;
    const unsigned char *residues;
    const long long *offsets;  // each sequence's first residue
    const int *lengths;
    const PairTask *pairs;
    int npairs, max_domains;
    PipelineSettings settings;
    char *scratch;
    tail_size_t scratch_bytes;
    char *out;
    tail_size_t out_bytes;
    int *status;  // per pair
    Hit *hits;  // per pair
    int *ndomains;  // per pair; the counts follow in `counts`
    int *counts;  // per pair: nregions, nclustered, noverlaps, nenvelopes
    float *nexpected;  // per pair
};

TAIL_FN void run_pair(const Batch *batch, int p, char *scratch) {
    const PairTask *task = batch->pairs + p;
    const Model *model = batch->models + task->model;
    PairInput in;
    in.dsq = batch->residues + batch->offsets[task->sequence];
    in.L = batch->lengths[task->sequence];
    in.filter_score = task->filter_score;
    in.nullsc = task->nullsc;
    in.log_length = task->log_length;
    Arena arena = {scratch, 0, batch->scratch_bytes, 0};
    char *out = batch->out + (tail_size_t)p * batch->out_bytes;
    tail_size_t domain_bytes = sizeof(Domain) * (tail_size_t)batch->max_domains;
    Arena text = {out + domain_bytes, 0, batch->out_bytes - domain_bytes, 0};
    Definition def;
    def.domains = (Domain *)out;
    def.capacity = batch->max_domains;
    def.out = &text;
    def.ndom = def.nregions = def.nclustered = def.noverlaps = def.nenvelopes = 0;
    def.nexpected = 0.0f;
    int status = search_target(&model->om, &model->ann, &in, &batch->settings, &def, batch->hits + p, &arena);
    batch->status[p] = status;
    batch->ndomains[p] = def.ndom;
    batch->nexpected[p] = def.nexpected;
    int *counts = batch->counts + 4 * (tail_size_t)p;
    counts[0] = def.nregions, counts[1] = def.nclustered, counts[2] = def.noverlaps, counts[3] = def.nenvelopes;
}

}  // namespace gpuhmm_tail
