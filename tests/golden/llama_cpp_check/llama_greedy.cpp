// llama_greedy: llama.cpp's greedy continuation of prompt ids, built against a llama.cpp checkout by
// check_greedy.py (never part of troupe's build).
//
//   llama_greedy MODEL.gguf N_NEW THREADS ID,ID,...
//
// F32 KV cache (as the goldens), the prompt decoded as one batch, then one token per step. Prints the generated
// ids comma-separated on one line, then the first step's logits of ids 0..7 and its largest logit, then each
// step's largest logit.
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>
#include "llama.h"
int main(int argc, char** argv) {
    if (argc < 5) {
        fprintf(stderr, "usage\n");
        return 1;
    }
    llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
    ggml_backend_load_all();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    int n_gen = atoi(argv[2]), threads = atoi(argv[3]);
    std::vector<llama_token> ids;
    std::stringstream ss(argv[4]);
    std::string t;
    while (std::getline(ss, t, ',')) ids.push_back(atoi(t.c_str()));
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = ids.size() + n_gen + 8;
    cp.n_batch = cp.n_ctx;
    cp.n_ubatch = cp.n_ctx;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    llama_context* ctx = llama_init_from_model(model, cp);
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    llama_batch b = llama_batch_get_one(ids.data(), ids.size());
    std::vector<int> out;
    std::vector<float> first, top;
    for (int i = 0; i < n_gen; ++i) {
        if (llama_decode(ctx, b)) {
            fprintf(stderr, "decode failed\n");
            return 1;
        }
        const float* l = llama_get_logits_ith(ctx, -1);
        int best = 0;
        for (int v = 1; v < n_vocab; ++v)
            if (l[v] > l[best]) best = v;
        if (i == 0) first.assign(l, l + 8), first.push_back(l[best]);
        out.push_back(best);
        top.push_back(l[best]);
        static llama_token tok;
        tok = best;
        b = llama_batch_get_one(&tok, 1);
    }
    for (size_t i = 0; i < out.size(); ++i) printf("%s%d", i ? "," : "", out[i]);
    printf("\n");
    for (float f : first) printf("%.9g ", f);
    printf("\n");
    for (float f : top) printf("%.9g ", f);
    printf("\n");
    llama_free(ctx);
    llama_model_free(model);
}
