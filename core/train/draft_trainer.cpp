#include <random>

#include "core/train/adam.h"
#include "core/train/distill.h"

namespace troupe::train {
namespace {

struct draft_rows {
    std::vector<int32_t> tokens, positions, labels;  // [N]
    std::vector<int64_t> bounds;                     // [n_samples + 1]
    std::vector<float> target_logits;                // [N, n_vocab]
};

draft_rows make_draft_rows(const std::vector<const distill_sample*>& samples) {
    draft_rows out;
    out.bounds.push_back(0);
    for (const distill_sample* s : samples) {
        const int32_t n = s->size();
        for (int32_t j = 0; j < n; ++j) {
            out.tokens.push_back(s->tokens[j]);
            out.positions.push_back(j);
            out.labels.push_back(j + 1 < n ? s->tokens[j + 1] : -1);
        }
        out.target_logits.insert(out.target_logits.end(), s->logits.begin(), s->logits.end());
        out.bounds.push_back(out.bounds.back() + n);
    }
    return out;
}

}  // namespace

std::vector<curve_point> train_draft(tiny_llama& model, const distill_dataset& data, const train_params& p,
                                     cpu::thread_pool& pool, const progress_fn& progress) {
    const int64_t nv = model.hp().n_vocab;
    adam opt(model.params(), adam_params{p.lr});
    std::mt19937_64 rng(p.seed);
    std::uniform_int_distribution<size_t> pick(0, data.train.size() - 1);
    std::vector<curve_point> curve;
    std::vector<float> logits, dlogits;
    for (int32_t step = 0; step < p.steps; ++step) {
        std::vector<const distill_sample*> chosen;
        for (int64_t rows = 0; rows < p.batch;) {
            chosen.push_back(&data.train[pick(rng)]);
            rows += chosen.back()->size();
        }
        const draft_rows r = make_draft_rows(chosen);
        const int64_t n = static_cast<int64_t>(r.tokens.size());
        logits.resize(n * nv);
        dlogits.resize(n * nv);
        zero_grads(model.params(), &pool);
        model.forward(r.tokens, r.positions, r.bounds, logits.data(), pool);
        const loss_sums ls = logit_loss(p.loss, r.target_logits.data(), logits.data(), r.labels.data(), n, nv,
                                        1.0f / static_cast<float>(n), p.hard_weight, dlogits.data(), pool);
        model.backward(r.tokens, r.bounds, dlogits.data(), pool);
        opt.step(lr_schedule(step, p.steps), &pool);
        curve_point pt{step + 1};
        pt.kl = ls.kl / n;
        pt.hard = ls.hard / n;
        pt.top1 = static_cast<double>(ls.agree) / n;
        pt.loss = pt.kl + (p.loss == distill_loss::kl_hard ? p.hard_weight * pt.hard : 0);
        curve.push_back(pt);
        if (progress) progress(pt);
    }
    return curve;
}

double draft_accuracy(tiny_llama& model, const std::vector<distill_sample>& samples, cpu::thread_pool& pool) {
    const int64_t nv = model.hp().n_vocab;
    int64_t agree = 0, total = 0;
    std::vector<float> logits, dz;
    for (const distill_sample& s : samples) {
        const draft_rows r = make_draft_rows({&s});
        const int64_t n = static_cast<int64_t>(r.tokens.size());
        logits.resize(n * nv);
        dz.resize(n * nv);
        model.forward(r.tokens, r.positions, r.bounds, logits.data(), pool);
        const loss_sums ls =
            logit_loss(distill_loss::kl, r.target_logits.data(), logits.data(), nullptr, n, nv, 0, 0, dz.data(), pool);
        agree += ls.agree;
        total += n;
    }
    return total == 0 ? 0.0 : static_cast<double>(agree) / static_cast<double>(total);
}

}  // namespace troupe::train
