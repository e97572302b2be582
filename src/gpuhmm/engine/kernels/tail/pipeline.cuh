// HMMER 3.4's p7_Pipeline for one target from the Forward parser on (src/p7_pipeline.c), in
// hmmsearch mode: p7_ForwardParser and the F3 test, p7_BackwardParser, domain definition, then
// the per-sequence and per-domain scores of the hit, bit for bit (tests/oracle/pipeline.py).
//
// Thread → data: one thread per (model, target) pair (stages.cuh runs them). Rounding: scores are float32 nats until
// the bit conversions (float)((double)x / ln 2); the null2 sequence bias is
// p7_FLogsum(0, (float)(log ω + Σ n2sc)) with the sum Kahan-compensated and p7_FLogsum's table
// built on the host as p7_FLogsumInit builds it; the glibc logs that depend only on L (null1, the
// length correction log(L / (L + 3))) come from the host; P-values are esl_exp_logsurv in double.
// The F3 test compares exp(−λ(x − τ)) with F3: the device exp may differ from glibc's in the
// last place, so a P-value within 1e−12 (relative) of F3 is TAIL_UNCERTAIN and goes to pyhmmer.
// Which hits are reported and included (exp(lnP)·Z against E) is decided on the host.
#pragma once
#include "domaindef.cuh"

namespace gpuhmm::tail {

TAIL_CONST double LN2 = 0.69314718055994529;  // eslCONST_LOG2
TAIL_CONST double LOG_OMEGA = -5.545177444479562;  // log(1/256), the prior of the null2 model
TAIL_CONST int FLOGSUM_ENTRIES = 16000;

// What a pair needs besides the model: the host's per-target terms and the pipeline's settings.
struct PairInput {
    const unsigned char *dsq;
    int L;
    float filter_score;  // the bias filter's score (null1 without that filter)
    float nullsc;  // p7_bg_NullOne for length L
    double log_length;  // log((float)L / (float)(L + 3))
};

struct PipelineSettings {
    double F3;
    int do_null2;
    tail_u32 seed;
    const float *flogsum;  // FLOGSUM_ENTRIES values: (float)log(1 + exp(−i / 1000))
};

// A P7_HIT's numbers. `passed` is 0 where F3 stops the target, `has_hit` 0 where it has no
// region, envelope or domain.
struct Hit {
    int passed, has_hit, best_domain;
    float score, pre_score, sum_score;
    double lnP, pre_lnP, sum_lnP;
};

TAIL_FN float flogsum(const float *table, float a, float b) {
    float high = a > b ? a : b, low = a > b ? b : a;
    if (low == bits_float(0xff800000u) || high - low >= 15.7f) return high;  // low = −∞
    return high + table[(int)((high - low) * 1000.0f)];
}

TAIL_FN float bits(float nats) { return (float)((double)nats / LN2); }

TAIL_FN double log_survival(float score, const Profile *om) {
    return (double)score < (double)om->tau ? 0.0 : -(double)om->lam * ((double)score - (double)om->tau);
}

// The F3 test: P of (fwdsc − filtersc) / ln 2 at most F3; TAIL_UNCERTAIN where exp's last bit
// could decide it.
TAIL_FN int forward_filter(const Profile *om, float fwdsc, float filter_score, double F3, int *passed) {
    float x = bits(fwdsc - filter_score);
    if ((double)x < (double)om->tau) {
        *passed = !(1.0 > F3);
        return TAIL_OK;
    }
    double p = host_or_device_exp(-(double)om->lam * ((double)x - (double)om->tau));
    double gap = p - F3;
    if ((gap < 0 ? -gap : gap) <= F3 * 1e-12) return TAIL_UNCERTAIN;
    *passed = !(p > F3);
    return TAIL_OK;
}

// The end of p7_Pipeline: the hit's scores and each domain's bit score, bias and P-value.
TAIL_FN void score_hit(const Profile *om, const PairInput *in, const PipelineSettings *settings, float fwdsc,
                       const float *n2sc, Definition *def, Hit *hit) {
    const int L = in->L;
    const float nullsc = in->nullsc;
    hit->has_hit = def->nregions && def->nenvelopes && def->ndom;
    if (!hit->has_hit) return;
    const float *table = settings->flogsum;
    float seqbias = 0.0f;
    if (settings->do_null2) seqbias = flogsum(table, 0.0f, (float)(LOG_OMEGA + (double)kahan_sum(n2sc, L + 1)));
    float pre_score = bits(fwdsc - nullsc);
    float seq_score = bits(fwdsc - (nullsc + seqbias));
    float sum = 0.0f, bias = 0.0f;
    int covered = 0;
    for (int d = 0; d < def->ndom; d++) {
        const Domain *dom = def->domains + d;
        int counts = settings->do_null2 ? dom->envsc - dom->domcorrection > 0.0f : dom->envsc > 0.0f;
        if (counts) {
            sum = sum + dom->envsc;
            covered += dom->jenv - dom->ienv + 1;
            bias = bias + dom->domcorrection;
        }
    }
    bias = settings->do_null2 ? flogsum(table, 0.0f, (float)(LOG_OMEGA + (double)bias)) : 0.0f;
    sum = (float)((double)sum + (double)(L - covered) * in->log_length);
    float pre2_score = bits(sum - nullsc);
    float sum_score = bits(sum - (nullsc + bias));
    if (covered > 0 && sum_score > seq_score) seq_score = sum_score, pre_score = pre2_score;
    hit->score = seq_score, hit->pre_score = pre_score, hit->sum_score = sum_score;
    hit->lnP = log_survival(seq_score, om);
    hit->pre_lnP = log_survival(pre_score, om);
    hit->sum_lnP = log_survival(sum_score, om);
    hit->best_domain = 0;
    for (int d = 0; d < def->ndom; d++) {
        Domain *dom = def->domains + d;
        float bitscore = (float)((double)dom->envsc + (double)(L - (dom->jenv - dom->ienv + 1)) * in->log_length);
        dom->dombias = settings->do_null2 ? flogsum(table, 0.0f, (float)(LOG_OMEGA + (double)dom->domcorrection)) : 0.0f;
        dom->bitscore = bits(bitscore - (nullsc + dom->dombias));
        dom->lnP = log_survival(dom->bitscore, om);
        if (dom->bitscore > def->domains[hit->best_domain].bitscore) hit->best_domain = d;
    }
}

}  // namespace gpuhmm::tail
