// losses: distillation losses on rows of logits (a student's against the target's), and smooth-L1 on features.
//
// Per row, p = softmax(target logits), q = softmax(student logits z):
//   forward KL    KL(p ‖ q) = Σ p (log p − log q)              dz = q − p
//   hard labels   −log q[y]                                    dz = q − onehot(y)
//   reverse KL    KL(q ‖ p) = Σ q (log q − log p)              dz_k = q_k (log q_k − log p_k − KL(q ‖ p))
// (the reverse KL is the exact per-token gradient over the student's whole distribution at each position of the
// target's sequences, not MiniLLM's sampled policy gradient.)
//   smooth-L1 (Huber, β = 1) of x − t per element, averaged over the row: d = x − t, |d| < 1: d²/2 else |d| − 1/2
//
// The functions return the sums over rows; gradients are scaled by `weight` (1 / rows for a mean).
#pragma once

#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace troupe::train {

enum class distill_loss { kl, kl_hard, reverse_kl };

struct loss_sums {
    double kl = 0;      // Σ_rows KL(p ‖ q), or KL(q ‖ p) for reverse_kl
    double hard = 0;    // Σ_rows −log q[y] (rows with a label; computed for every kind, in the gradient for kl_hard)
    int64_t agree = 0;  // rows whose argmax q equals argmax p
    int64_t n_rows = 0;
};

// dz [n, n_vocab] is overwritten. hard_tokens [n] (or null): the label of each row, -1 for none.
loss_sums logit_loss(distill_loss kind, const float* target_logits, const float* z, const int32_t* hard_tokens,
                     int64_t n, int64_t n_vocab, float weight, float hard_weight, float* dz, cpu::thread_pool& pool);

// Σ_rows mean_i smooth_l1(x − t); dx [n, dim] += weight · ∂/∂x (dx may be null).
double smooth_l1(const float* x, const float* t, float* dx, int64_t n, int64_t dim, float weight);

// log softmax of one row into out.
void log_softmax(const float* z, float* out, int64_t n);

}  // namespace troupe::train
