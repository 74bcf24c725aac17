// Fakes for the actor tests and the overhead benchmark: a byte-level codec and a model runner whose
// logits are a fixed function of the token stored in its (paged, block-addressed) cache.
//
// fake_codec: id 0 unknown, 1 BOS, 2 EOS, 3 + b for byte b; encode() adds BOS; text containing
// "#throw" makes encode() throw (supervision tests).
//
// fake_model_runner: the row for position p favours next(cache[p]) by a margin of 4 logits, where
// next(BOS) = 'a', next('z') = EOS, next(byte b) = b + 1, next(anything else) = 'a': a prompt "ab"
// continues "cdef...". A prompt containing the byte '!' makes forward() throw. The cache is written through the block
// tables, so a wrong table, a wrong position or a stale row shows up as wrong text; copy_blocks copies those rows.
#pragma once

#include <algorithm>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "actors/tokenizer/text_codec.h"
#include "core/model/model_runner.h"
#include "core/sampling/sampler.h"

namespace troupe::testing {

constexpr int32_t k_fake_bos = 1;
constexpr int32_t k_fake_eos = 2;
constexpr int32_t k_fake_vocab = 300;

inline int32_t fake_id(char c) {
    return 3 + static_cast<unsigned char>(c);
}

inline std::vector<int32_t> fake_ids(std::string_view text, bool bos = true) {
    std::vector<int32_t> ids;
    if (bos) ids.push_back(k_fake_bos);
    for (char c : text) ids.push_back(fake_id(c));
    return ids;
}

class fake_decoder : public text_decoder {
public:
    std::string push(int32_t id) override {
        if (id >= 3 && id < 3 + 256) return std::string(1, static_cast<char>(id - 3));
        return {};
    }
    std::string flush() override { return {}; }
};

class fake_codec : public text_codec {
public:
    int32_t n_vocab() const override { return k_fake_vocab; }
    std::vector<int32_t> encode(std::string_view text) const override {
        if (text.find("#throw") != std::string_view::npos) throw std::runtime_error("fake codec: asked to throw");
        return fake_ids(text);
    }
    std::unique_ptr<text_decoder> make_decoder() const override { return std::make_unique<fake_decoder>(); }
    std::vector<int32_t> eog_ids() const override { return {k_fake_eos}; }
    std::string piece(int32_t id) const override { return fake_decoder().push(id); }
};

inline int32_t fake_next(int32_t token) {
    if (token == k_fake_bos) return fake_id('a');
    if (token == fake_id('z')) return k_fake_eos;
    if (token >= 3 && token < 3 + 255) return token + 1;
    return fake_id('a');
}

struct fake_model_params {
    int32_t n_ctx = 64;
    int32_t block_size = 64;  // = n_ctx: contiguous, one block per sequence
    int32_t n_blocks = 8;
    std::chrono::microseconds step_time{0};  // busy time per forward
    bool separate_memory = false;            // swap_out / swap_in copy rows to a host map (like a GPU)
};

class fake_model_runner : public model_runner {
public:
    explicit fake_model_runner(fake_model_params p = {})
        : p_(p), cache_(static_cast<size_t>(p.n_blocks) * p.block_size, -1) {}

    std::string description() const override { return "fake model: byte successor, vocab 300"; }
    int32_t n_vocab() const override { return k_fake_vocab; }
    int32_t n_ctx() const override { return p_.n_ctx; }
    kv_geometry kv() const override { return {p_.block_size, p_.n_blocks}; }
    size_t kv_bytes_per_token() const override { return 4; }

    status forward(const forward_batch& batch, forward_output& out) override {
        if (keep_) {
            std::lock_guard lock(mutex_);
            batches_.push_back(batch);
        }
        out.n_vocab = k_fake_vocab;
        out.row_begin.clear();
        out.n_rows.clear();
        int32_t rows = 0;
        for (const auto& s : batch.seqs) {
            const int32_t n = static_cast<int32_t>(s.tokens.size());
            out.row_begin.push_back(rows);
            out.n_rows.push_back(s.all_logits ? n : 1);
            rows += s.all_logits ? n : 1;
            if (static_cast<int64_t>(s.block_table.size()) * p_.block_size < s.pos0 + n)
                return make_error("fake model: sequence " + std::to_string(s.seq_id) + " has blocks for " +
                                  std::to_string(s.block_table.size() * p_.block_size) + " positions, needs " +
                                  std::to_string(s.pos0 + n));
            if (s.pos0 + n > p_.n_ctx) return make_error("fake model: position past the context");
            for (int32_t t : s.tokens) {
                if (s.pos0 == 0 && t == fake_id('!')) throw std::runtime_error("fake model: '!' in a prompt");
            }
        }
        out.logits.assign(static_cast<size_t>(rows) * k_fake_vocab, 0.0f);
        for (size_t i = 0; i < batch.seqs.size(); ++i) {
            const auto& s = batch.seqs[i];
            const int32_t n = static_cast<int32_t>(s.tokens.size());
            for (int32_t j = 0; j < n; ++j) at(s, s.pos0 + j) = s.tokens[j];
            for (int32_t r = 0; r < out.n_rows[i]; ++r) {
                const int32_t pos = s.pos0 + (s.all_logits ? r : n - 1);
                float* row = out.logits.data() + static_cast<size_t>(out.row_begin[i] + r) * k_fake_vocab;
                for (int32_t v = 0; v < k_fake_vocab; ++v)
                    row[v] = -1.0f + 0.01f * static_cast<float>((v * 7 + pos) % 13);
                row[fake_next(at(s, pos))] += 4.0f;
            }
        }
        if (p_.step_time.count() > 0) {
            auto until = std::chrono::steady_clock::now() + p_.step_time;
            while (std::chrono::steady_clock::now() < until) {
            }
        }
        return status::success();
    }

    bool separate_kv_memory() const override { return p_.separate_memory; }
    status swap_out(int64_t seq_id, std::span<const int32_t> blocks, int32_t n_tokens) override {
        if (!p_.separate_memory) return model_runner::swap_out(seq_id, blocks, n_tokens);
        auto& host = host_[seq_id];
        host.clear();
        for (int32_t pos = 0; pos < n_tokens; ++pos) {
            int32_t& row =
                cache_[static_cast<size_t>(blocks[pos / p_.block_size]) * p_.block_size + pos % p_.block_size];
            host.push_back(row);
            row = -1;  // the device rows are gone: a resumption that skipped swap_in would read garbage
        }
        n_swaps_out_++;
        return status::success();
    }
    status swap_in(int64_t seq_id, std::span<const int32_t> blocks, int32_t n_tokens) override {
        if (!p_.separate_memory) return model_runner::swap_in(seq_id, blocks, n_tokens);
        auto it = host_.find(seq_id);
        if (it == host_.end() || static_cast<int32_t>(it->second.size()) != n_tokens)
            return make_error("fake model: nothing swapped out for sequence " + std::to_string(seq_id));
        for (int32_t pos = 0; pos < n_tokens; ++pos)
            cache_[static_cast<size_t>(blocks[pos / p_.block_size]) * p_.block_size + pos % p_.block_size] =
                it->second[pos];
        host_.erase(it);
        n_swaps_in_++;
        return status::success();
    }
    void forget(int64_t seq_id) override { host_.erase(seq_id); }
    status copy_blocks(std::span<const int32_t> src, std::span<const int32_t> dst) override {
        for (size_t i = 0; i < src.size(); ++i) {
            std::copy_n(cache_.begin() + static_cast<std::ptrdiff_t>(src[i]) * p_.block_size, p_.block_size,
                        cache_.begin() + static_cast<std::ptrdiff_t>(dst[i]) * p_.block_size);
        }
        n_block_copies_ += static_cast<int>(src.size());
        return status::success();
    }
    int n_block_copies() const { return n_block_copies_; }
    size_t n_host_copies() const { return host_.size(); }
    int n_swaps_out() const { return n_swaps_out_; }
    int n_swaps_in() const { return n_swaps_in_; }

    std::vector<forward_batch> batches() const {
        std::lock_guard lock(mutex_);
        return batches_;
    }
    void keep_batches(bool keep) { keep_ = keep; }  // the benchmark keeps none

private:
    int32_t& at(const sequence_step& s, int32_t pos) {
        return cache_[static_cast<size_t>(s.block_table[pos / p_.block_size]) * p_.block_size + pos % p_.block_size];
    }

    fake_model_params p_;
    std::vector<int32_t> cache_;                              // [n_blocks, block_size] token stored at each KV row
    std::unordered_map<int64_t, std::vector<int32_t>> host_;  // swapped-out rows per sequence
    int n_swaps_out_ = 0, n_swaps_in_ = 0;
    int n_block_copies_ = 0;
    mutable std::mutex mutex_;
    std::vector<forward_batch> batches_;
    bool keep_ = true;
};

// Greedy sampling of at most max_tokens tokens (the engine tests' requests).
inline sampling_params greedy(int32_t max_tokens) {
    sampling_params p;
    p.temperature = 0;
    p.max_tokens = max_tokens;
    return p;
}

}  // namespace troupe::testing
