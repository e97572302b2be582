// HMMER 3.4's serialized hit record (src/p7_hit.c p7_hit_Serialize, src/p7_domain.c
// p7_domain_Serialize, src/p7_alidisplay.c p7_alidisplay_Serialize) for a pair the tail finished:
// the buffer a pyhmmer TopHits state holds per hit, byte for byte what hits/records.py's
// encode_hit writes for the HitRecord of the same Hit and Domains (tests/oracle/records.py).
//
// Thread → data: one thread writes one hit's record, serially, to `out` (hit_record_bytes long);
// nothing is allocated.
// Layout: integers big-endian, float32 and double as their big-endian IEEE bits, strings
// NUL-terminated: P7_HIT (109 bytes, then the target's name, and its accession and description
// where set), then for each domain P7_DOMAIN (92 bytes, no per-position scores) and
// P7_ALIDISPLAY (45 bytes, then its lines and the six names). Fields hmmsearch never sets
// (window_length, seqidx, subseq_start, iorf, jorf) are 0; nreported and nincluded are left to
// p7_tophits_Threshold; the flags are those p7_Pipeline sets at hit creation.
#pragma once
#include "pipeline.cuh"

namespace gpuhmm::tail {

// Bytes before the strings (records.py's _HIT, _DOMAIN and _ALIDISPLAY layouts).
enum RecordLayout { HIT_FIXED_BYTES = 109, DOMAIN_FIXED_BYTES = 92, ALIDISPLAY_FIXED_BYTES = 45 };
// p7_hitflags_e's IS_INCLUDED and IS_REPORTED; P7_ALIDISPLAY's presence bits of the lines the
// tail writes (mmline and ntseq are never present in hmmsearch).
enum RecordBits { HIT_INCLUDED = 1, HIT_REPORTED = 2, LINE_RF = 1, LINE_CS = 4, LINE_PP = 8, LINE_ASEQ = 16 };

// `length` bytes at `bytes`, not NUL-terminated; length 0 is an empty or unset string.
struct Text {
    const char *bytes;
    tail_size_t length;
};

// The six strings of a hit: the model's and the target's name, accession and description.
struct Names {
    Text model_name, model_accession, model_description;
    Text target_name, target_accession, target_description;
};

// What the record takes from the pipeline: the sort key is −lnP under inc_by_E, else the score;
// under use_bit_cutoffs (--cut_ga/tc/nc) the flags come from the bit thresholds, else they are 0.
struct RecordSettings {
    int inc_by_E, use_bit_cutoffs;
    double T, incT, domT, incdomT;
};

// A pair's Names from two name tables (stages/tail/serialized.py's NameTable): three strings per
// model or target (name, accession, description), string i at blob[offsets[i] .. offsets[i + 1]).
TAIL_FN Names table_names(const char *model_blob, const long long *model_offsets, int model, const char *target_blob,
                          const long long *target_offsets, int target) {
    Text text[6];
    for (int n = 0; n < 6; n++) {
        const char *blob = n < 3 ? model_blob : target_blob;
        const long long *offsets = n < 3 ? model_offsets : target_offsets;
        int i = 3 * (n < 3 ? model : target) + n % 3;
        text[n].bytes = blob + offsets[i];
        text[n].length = (tail_size_t)(offsets[i + 1] - offsets[i]);
    }
    Names names = {text[0], text[1], text[2], text[3], text[4], text[5]};
    return names;
}

TAIL_FN unsigned long long double_bits(double x) {
#ifdef __CUDACC__
    return (unsigned long long)__double_as_longlong(x);
#else
    unsigned long long u;
    memcpy(&u, &x, 8);
    return u;
#endif
}

TAIL_FN char *put_u32(char *at, tail_u32 value) {
    for (int b = 0; b < 4; b++) at[b] = (char)(value >> (24 - 8 * b));
    return at + 4;
}

TAIL_FN char *put_u64(char *at, unsigned long long value) {
    for (int b = 0; b < 8; b++) at[b] = (char)(value >> (56 - 8 * b));
    return at + 8;
}

// A signed int as int64 (ienv, jenv, iali, jali, sqfrom, sqto, L): sign-extended first.
TAIL_FN char *put_i64(char *at, int value) { return put_u64(at, (unsigned long long)(long long)value); }

TAIL_FN char *put_f32(char *at, float value) { return put_u32(at, float_bits(value)); }

TAIL_FN char *put_f64(char *at, double value) { return put_u64(at, double_bits(value)); }

// `length` bytes and their NUL.
TAIL_FN char *put_text(char *at, const char *bytes, tail_size_t length) {
    for (tail_size_t c = 0; c < length; c++) at[c] = bytes[c];
    at[length] = 0;
    return at + length + 1;
}

// The names at the end of every P7_ALIDISPLAY, unset ones as empty strings.
TAIL_FN tail_size_t alidisplay_names_bytes(const Names *names) {
    return names->model_name.length + names->model_accession.length + names->model_description.length +
           names->target_name.length + names->target_accession.length + names->target_description.length + 6;
}

// The P7_HIT's own strings: the name always, the accession and description only where set.
TAIL_FN tail_size_t hit_names_bytes(const Names *names) {
    const Text *acc = &names->target_accession, *desc = &names->target_description;
    return names->target_name.length + 1 + (acc->length ? acc->length + 1 : 0) + (desc->length ? desc->length + 1 : 0);
}

// The record's exact size for `ndom` domains of `lines` alignment lines each (4, plus the RF and
// CS lines where the model has them).
TAIL_FN tail_size_t hit_record_bytes(const Hit *, const Domain *domains, int ndom, int lines, const Names *names) {
    tail_size_t bytes = HIT_FIXED_BYTES + hit_names_bytes(names);
    for (int d = 0; d < ndom; d++)
        bytes += DOMAIN_FIXED_BYTES + ALIDISPLAY_FIXED_BYTES + (tail_size_t)lines * (domains[d].N + 1) +
                 alidisplay_names_bytes(names);
    return bytes;
}

// p7_alidisplay_Serialize of domain `d`'s lines (model, match, target, posterior, then RF and CS
// where present), in serialized order: rf, cs, model, mline, aseq, pp; then the names.
TAIL_FN char *put_alidisplay(char *at, const Domain *d, int M, int L, int has_rf, int has_cs, const Names *names) {
    const int N = d->N, lines = 4 + has_rf + has_cs;
    at = put_u32(at, (tail_u32)(ALIDISPLAY_FIXED_BYTES + (tail_size_t)lines * (N + 1) + alidisplay_names_bytes(names)));
    at = put_u32(at, (tail_u32)N);
    at = put_u32(at, (tail_u32)d->hmmfrom);
    at = put_u32(at, (tail_u32)d->hmmto);
    at = put_u32(at, (tail_u32)M);
    at = put_i64(at, d->iali);
    at = put_i64(at, d->jali);
    at = put_i64(at, L);
    *at++ = (char)(LINE_PP | LINE_ASEQ | (has_rf ? LINE_RF : 0) | (has_cs ? LINE_CS : 0));
    const char *text = d->text;
    if (has_rf) at = put_text(at, text + 4 * N, N);
    if (has_cs) at = put_text(at, text + (4 + has_rf) * N, N);
    for (int line = 0; line < 4; line++) at = put_text(at, text + line * N, N);  // model, mline, aseq, pp
    const Text *order[6] = {&names->model_name,  &names->model_accession,  &names->model_description,
                            &names->target_name, &names->target_accession, &names->target_description};
    for (int n = 0; n < 6; n++) at = put_text(at, order[n]->bytes, order[n]->length);
    return at;
}

// p7_domain_Serialize of domain `d`, flagged as p7_Pipeline flags it under bit cutoffs: reported
// at bitscore ≥ domT, included if also ≥ incdomT (float32 compared in double).
TAIL_FN char *put_domain(char *at, const Domain *d, int M, int L, int has_rf, int has_cs, const Names *names,
                         const RecordSettings *settings) {
    int reported = settings->use_bit_cutoffs && (double)d->bitscore >= settings->domT;
    int included = reported && (double)d->bitscore >= settings->incdomT;
    at = put_u32(at, DOMAIN_FIXED_BYTES);
    at = put_i64(at, d->ienv);
    at = put_i64(at, d->jenv);
    at = put_i64(at, d->iali);
    at = put_i64(at, d->jali);
    at = put_i64(at, 0);  // iorf
    at = put_i64(at, 0);  // jorf
    at = put_f32(at, d->envsc);
    at = put_f32(at, d->domcorrection);
    at = put_f32(at, d->dombias);
    at = put_f32(at, d->oasc);
    at = put_f32(at, d->bitscore);
    at = put_f64(at, d->lnP);
    at = put_u32(at, (tail_u32)reported);
    at = put_u32(at, (tail_u32)included);
    at = put_u32(at, 0);  // no per-position scores
    return put_alidisplay(at, d, M, L, has_rf, has_cs, names);
}

// p7_hit_Serialize of the hit `hit` with its `ndom` domains into `out`; `counts` are nregions,
// nclustered, noverlaps, nenvelopes; M is the model's length, L the target's. Under bit cutoffs
// the hit is reported at score ≥ T and included at score ≥ incT. Returns the bytes written.
TAIL_FN tail_size_t write_hit_record(char *out, const Hit *hit, const Domain *domains, int ndom, float nexpected,
                                     const int counts[4], int M, int L, int has_rf, int has_cs, const Names *names,
                                     const RecordSettings *settings) {
    tail_u32 flags = 0;
    if (settings->use_bit_cutoffs && (double)hit->score >= settings->T)
        flags = HIT_REPORTED | ((double)hit->score >= settings->incT ? HIT_INCLUDED : 0);
    const Text *acc = &names->target_accession, *desc = &names->target_description;
    char *at = put_u32(out, (tail_u32)(HIT_FIXED_BYTES + hit_names_bytes(names)));
    at = put_u32(at, 0);  // window_length
    at = put_f64(at, settings->inc_by_E ? -hit->lnP : (double)hit->score);
    at = put_f32(at, hit->score);
    at = put_f32(at, hit->pre_score);
    at = put_f32(at, hit->sum_score);
    at = put_f64(at, hit->lnP);
    at = put_f64(at, hit->pre_lnP);
    at = put_f64(at, hit->sum_lnP);
    at = put_f32(at, nexpected);
    for (int c = 0; c < 4; c++) at = put_u32(at, (tail_u32)counts[c]);
    at = put_u32(at, (tail_u32)ndom);
    at = put_u32(at, flags);
    at = put_u32(at, 0);  // nreported
    at = put_u32(at, 0);  // nincluded
    at = put_u32(at, (tail_u32)hit->best_domain);
    at = put_u64(at, 0);  // seqidx
    at = put_u64(at, 0);  // subseq_start
    *at++ = (char)((acc->length ? 1 : 0) | (desc->length ? 2 : 0));
    at = put_text(at, names->target_name.bytes, names->target_name.length);
    if (acc->length) at = put_text(at, acc->bytes, acc->length);
    if (desc->length) at = put_text(at, desc->bytes, desc->length);
    for (int d = 0; d < ndom; d++) at = put_domain(at, domains + d, M, L, has_rf, has_cs, names, settings);
    return (tail_size_t)(at - out);
}

}  // namespace gpuhmm::tail
