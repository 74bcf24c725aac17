/*
 * troupe plugin SDK: speculative decoding (kind SPEC).
 *
 * A spec plugin proposes tokens that may follow each running sequence; the core verifies every proposal against
 * the target model in the same forward pass that runs the sequence's next token, so a plugin changes speed only,
 * never what is emitted (greedy output is identical; sampled output has exactly the target's distribution).
 *
 * A proposal is a tree of candidate tokens in topological order: node i holds tokens[i] and parents[i], -1 for a
 * root (a candidate for the token after the context's last one) or the index of an earlier node. A chain is the
 * tree whose parents are -1, 0, 1, 2, ...
 *
 *   context ... t_n ─┬─ node 0 "the" ─┬─ node 2 "cat"
 *                    │                └─ node 3 "dog"
 *                    └─ node 1 "a"  ─── node 4 "cat"          parents = {-1, -1, 0, 0, 1}
 *
 * The target runs t_n and every node in one pass (node i at position n + depth(i), attending to the context and
 * its own ancestors). Verification walks from the root: greedy takes the child whose token is the target's argmax
 * (the longest accepted path); sampling goes through the children of a node in order and accepts child x_i with
 * probability min(1, p(x_i) / q_i(x_i)), else replaces p by normalize(max(0, p - q_i)) and tries the next child;
 * when every child is rejected it samples from what p has become. This is exact when each node's token was drawn
 * from its q row independently of its siblings (duplicates allowed), or when the plugin gives no q (deterministic
 * drafts: q_i is then the one-hot of the token, which turns the rule into "accept with probability p(x_i), else
 * remove x_i from p").
 *
 * Lifecycle, all on the executor's lane (never concurrently for one instance):
 *   begin(seq, prompt)            the sequence enters (or re-enters after preemption) the running set
 *   propose_batch(requests)       each step, one request per sequence that may draft
 *   accepted(seq, tokens, nodes)  what the step appended to the sequence: the accepted nodes then the token the
 *                                 target sampled itself (node -1)
 *   end(seq, reason)              finished, cancelled, or preempted (its KV rows are gone; begin follows on return)
 *
 * Hidden states: a plugin that fills the descriptor's `taps` table observes the target's intermediates in the same
 * pass; troupe_tap_data.nodes (version 2) says which proposal node each row is (-1: the sequence's own tokens).
 * Tensors by name (token embeddings, the output matrix) and a second model run by the host (a draft model, with its
 * KV rows in pools parallel to the target's) come through troupe_plugin_params.model (tensors.h).
 */
#ifndef TROUPE_SPEC_H
#define TROUPE_SPEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe_plugin_instance troupe_plugin_instance;
typedef struct troupe_parallel troupe_parallel;

/* One running sequence the host asks a proposal for. */
typedef struct troupe_spec_request {
    uint32_t struct_size;
    uint32_t version; /* 1 */
    int64_t seq_id;
    const int32_t* tokens; /* [n_tokens] everything known: prompt and generated tokens */
    int64_t n_tokens;
    /* The target runs the last n_new tokens of `tokens` this step (usually 1: the token it sampled last); the
     * KV rows of positions [0, n_tokens - n_new) are in the cache. */
    int32_t n_new;
    int32_t max_nodes; /* capacity of the proposal (and the KV rows reserved for it) */
    int32_t max_depth; /* the deepest path the host verifies */
    float temperature; /* the request's sampling temperature (0: greedy); a drafter may match it */
    /* The sequence's KV blocks, covering positions [0, n_tokens + max_nodes); a drafter run through the model
     * service (tensors.h) writes its own rows through the same table. */
    const int32_t* block_table;
    int32_t n_blocks;
    int32_t block_size;
} troupe_spec_request;

#define TROUPE_SPEC_REQUEST_VERSION 1u

/* The plugin's answer for one request; the host owns every array (capacity max_nodes rows). */
typedef struct troupe_spec_proposal {
    uint32_t struct_size;
    uint32_t version; /* 1 */
    int32_t n_nodes;  /* out: 0 = no proposal */
    int32_t* tokens;  /* [max_nodes] out */
    int32_t* parents; /* [max_nodes] out: -1 or an earlier node */
    /* [max_nodes, n_vocab] out, optional: row i is the distribution node i's token was drawn from. Set has_q = 1
     * when filled; leave 0 for deterministic drafts. */
    float* q;
    int32_t n_vocab;
    int32_t has_q;
} troupe_spec_proposal;

#define TROUPE_SPEC_PROPOSAL_VERSION 1u

/* Why a sequence ended (troupe_spec_ops.end). */
typedef enum troupe_spec_end_reason {
    TROUPE_SPEC_END_FINISHED = 0, /* finished or cancelled */
    TROUPE_SPEC_END_PREEMPTED = 1 /* preempted: its KV rows are gone; begin follows when it runs again */
} troupe_spec_end_reason;

typedef struct troupe_spec_ops {
    uint32_t struct_size;
    uint32_t version; /* 2 */
    /* Version 1: proposes up to max_draft tokens (a chain) to follow tokens[0..n) into out[0..max_draft). Returns
     * the number proposed (0 when it has nothing), or a negative status code (-TROUPE_ERR_...) on failure. The
     * host uses it when propose_batch is absent. */
    int32_t (*propose)(troupe_plugin_instance* instance, const int32_t* tokens, int64_t n, int32_t max_draft,
                       int32_t* out);
    /* Version 2 (SDK 2). Each may be null. */
    int32_t (*begin)(troupe_plugin_instance* instance, int64_t seq_id, const int32_t* prompt, int64_t n);
    /* The step appended tokens[0..n) to the sequence; nodes[i] is the proposal node token i was, -1 for the token
     * the target sampled (always the last). */
    int32_t (*accepted)(troupe_plugin_instance* instance, int64_t seq_id, const int32_t* tokens, int32_t n,
                        const int32_t* nodes);
    void (*end)(troupe_plugin_instance* instance, int64_t seq_id, int32_t reason);
    /* Proposals for n requests at once (out[i] answers requests[i]); a status other than TROUPE_OK drops this
     * step's proposals (the host logs error_message and runs the step without drafts). */
    int32_t (*propose_batch)(troupe_plugin_instance* instance, const troupe_spec_request* requests, int32_t n,
                             troupe_spec_proposal* out, const troupe_parallel* parallel);
    /* The most nodes this instance proposes per sequence (its params: tree size, max_draft); the host reserves KV
     * rows for that many per sequence and refuses, at load, a tree larger than the KV budget can hold. */
    int32_t (*max_nodes)(troupe_plugin_instance* instance);
} troupe_spec_ops;

#define TROUPE_SPEC_OPS_VERSION 2u

#ifdef __cplusplus
}
#endif

#endif /* TROUPE_SPEC_H */
