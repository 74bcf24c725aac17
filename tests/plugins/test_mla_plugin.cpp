// attention/mla through the ABI against a double-precision multi-head attention over keys and values expanded from
// the latent rows (attn_kv_b read from a GGUF written here, given to the plugin as the model's tensors). One call
// mixes a prefill from position 0, decodes, a decode after 1100 cached rows (several splits of the absorbed path,
// several chunks of the naive one) and trees of drafts (own rows, ancestors, itself); the pool's other rows are NaN,
// so reading a row it should not poisons the output. Every path, pool type, kernel and parallel_for must agree with
// the reference. Refusals: a call that is not MLA, a shape that is not the model's, no model, a model without MLA.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "core/gguf/gguf_writer.h"
#include "core/plugin_host/plugin_model_services.h"
#include "kernels/fp16.h"
#include "kernels/ref/quants.h"
#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

namespace fs = std::filesystem;

// Odd sizes: heads not a multiple of the absorbed path's group of 8, ranks and dims not multiples of 8 lanes.
constexpr int32_t n_layers = 2, n_heads = 10, rank = 40, nope = 12, rope = 6, v_dim = 10;
constexpr int32_t head_dim = nope + rope, latent = rank + rope, per_head = nope + v_dim;
constexpr int32_t block_size = 4;

// One sequence of the call: `cached` rows already in the cache, `n_own` causal tokens, then a tree of draft nodes
// (parents[n] = -1: a child of the last own or cached row).
struct sequence_plan {
    int32_t cached;
    int32_t n_own;
    std::vector<int32_t> parents;

    int32_t n_rows() const { return cached + n_own + static_cast<int32_t>(parents.size()); }
    int32_t depth(int32_t n) const { return parents[n] < 0 ? 0 : 1 + depth(parents[n]); }
};

const std::vector<sequence_plan> plans = {
    {0, 9, {}}, {1, 1, {}}, {12, 1, {}}, {1100, 2, {}}, {6, 2, {-1, 0, 0, 1, 3}}, {3, 0, {-1, -1, 1}},
};

// The rows token i of a sequence's step reads (i counts own tokens, then nodes).
std::vector<int32_t> rows_read(const sequence_plan& s, int32_t i) {
    std::vector<int32_t> rows;
    const int32_t first = s.cached + s.n_own;
    if (i < s.n_own) {
        for (int32_t r = 0; r <= s.cached + i; ++r) rows.push_back(r);
        return rows;
    }
    for (int32_t r = 0; r < first; ++r) rows.push_back(r);
    std::vector<int32_t> chain;
    for (int32_t n = i - s.n_own; n >= 0; n = s.parents[n]) chain.push_back(first + n);
    rows.insert(rows.end(), chain.rbegin(), chain.rend());
    return rows;
}

// A GGUF with the deepseek2 keys attention/mla reads and each layer's attn_kv_b, stored as `weights` (f32, f16 or
// bf16; kv_b() gives the stored values, which the plugin reads as they are).
class mla_model_file {
public:
    explicit mla_model_file(bool with_mla, ggml_type weights = ggml_type::f32) {
        dir_ = fs::temp_directory_path() / ("troupe_mla_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(dir_);
        gguf::gguf_writer w;
        w.set_string("general.architecture", "deepseek2");
        w.set_u32("deepseek2.block_count", n_layers);
        w.set_u32("deepseek2.attention.head_count", n_heads);
        w.set_u32("deepseek2.attention.key_length", head_dim);
        w.set_u32("deepseek2.attention.value_length", v_dim);
        w.set_u32("deepseek2.rope.dimension_count", rope);
        if (with_mla) w.set_u32("deepseek2.attention.kv_lora_rank", rank);
        for (int32_t il = 0; il < n_layers; ++il) {
            kv_b_.push_back(random_floats(static_cast<size_t>(n_heads) * per_head * rank, 40 + il, -0.4f, 0.4f));
            const std::string name = "blk." + std::to_string(il) + ".attn_kv_b.weight";
            if (weights == ggml_type::f32) {
                w.add_tensor_f32(name, {rank, n_heads * per_head}, kv_b_[il]);
                continue;
            }
            std::vector<uint8_t> bytes(kv_b_[il].size() * 2);
            for (size_t i = 0; i < kv_b_[il].size(); ++i) {
                const uint16_t h = weights == ggml_type::bf16 ? fp32_to_bf16(kv_b_[il][i]) : fp32_to_fp16(kv_b_[il][i]);
                kv_b_[il][i] = weights == ggml_type::bf16 ? bf16_to_fp32(h) : fp16_to_fp32(h);
                std::memcpy(bytes.data() + 2 * i, &h, 2);
            }
            w.add_tensor(name, weights, {rank, n_heads * per_head}, std::move(bytes));
        }
        const std::string path = (dir_ / "model.gguf").string();
        EXPECT_TRUE(w.write(path).ok());
        auto f = gguf::gguf_file::open(path);
        EXPECT_TRUE(f.ok()) << f.message();
        file_ = *f;
    }
    ~mla_model_file() {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    plugin_host host() const {
        return plugin_host(plugin_host_options{TROUPE_DEFAULT_PLUGIN_DIR}, make_model_services(file_));
    }
    const std::vector<float>& kv_b(int32_t il) const { return kv_b_[il]; }

private:
    fs::path dir_;
    std::shared_ptr<const gguf::gguf_file> file_;
    std::vector<std::vector<float>> kv_b_;
};

// out[v_dim] of head h: softmax over rows of scale · q·[W_UK_h c ; k_pe], weights on W_UV_h c (double).
void reference_head(const float* q, const std::vector<float>& latent_rows, const std::vector<int32_t>& rows,
                    const std::vector<float>& kv_b, int32_t h, float scale, double* out) {
    std::vector<double> scores;
    std::vector<std::vector<double>> values;
    for (int32_t r : rows) {
        const float* c = latent_rows.data() + static_cast<size_t>(r) * latent;
        double s = 0.0;
        std::vector<double> v(v_dim, 0.0);
        for (int32_t o = 0; o < per_head; ++o) {
            const float* w = kv_b.data() + (static_cast<size_t>(h) * per_head + o) * rank;
            double x = 0.0;
            for (int32_t j = 0; j < rank; ++j) x += double{w[j]} * c[j];
            if (o < nope) {
                s += double{q[o]} * x;
            } else {
                v[o - nope] = x;
            }
        }
        for (int32_t d = 0; d < rope; ++d) s += double{q[nope + d]} * c[rank + d];
        scores.push_back(s * scale);
        values.push_back(v);
    }
    const double mx = *std::max_element(scores.begin(), scores.end());
    double sum = 0.0;
    for (double& s : scores) sum += (s = std::exp(s - mx));
    for (int32_t d = 0; d < v_dim; ++d) {
        out[d] = 0.0;
        for (size_t j = 0; j < rows.size(); ++j) out[d] += scores[j] / sum * values[j][d];
    }
}

struct mla_case {
    const char* path;
    bool f16;
    const char* kernel;
    bool threaded;
    ggml_type weights = ggml_type::f32;  // how the file stores attn_kv_b
};

const char* weights_name(ggml_type t) {
    return t == ggml_type::f32 ? "f32" : t == ggml_type::f16 ? "f16" : "bf16";
}

void PrintTo(const mla_case& c, std::ostream* os) {
    *os << c.path << (c.f16 ? " f16 " : " f32 ") << c.kernel << (c.threaded ? " threaded" : " inline") << ", attn_kv_b "
        << weights_name(c.weights);
}

class mla_plugin : public ::testing::TestWithParam<mla_case> {};

TEST_P(mla_plugin, matches_multi_head_attention_over_expanded_latents_for_prefill_decode_long_context_and_trees) {
    const mla_case& c = GetParam();
    if (std::string(c.kernel) == "avx2" && !__builtin_cpu_supports("avx2")) GTEST_SKIP() << "this CPU lacks avx2";
    mla_model_file model(true, c.weights);
    plugin_host host = model.host();
    auto op = host.load_attention("mla", yaml(std::string("{path: ") + c.path + ", kernel: " + c.kernel + "}"));
    ASSERT_TRUE(op.ok()) << op.message();
    EXPECT_EQ((*op)->name(), "attention/mla");
    EXPECT_NE((*op)->features() & attention_mla, 0u);
    EXPECT_TRUE((*op)->supports(kv_dtype::f16));
    EXPECT_TRUE((*op)->supports_trees());

    const int32_t n_seqs = static_cast<int32_t>(plans.size());
    const int32_t layer = 1;
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    // Blocks: sequence s's b-th block is b * n_seqs + (n_seqs - 1 - s), so sequences interleave in the pool.
    std::vector<std::vector<int32_t>> tables(n_seqs);
    int32_t n_blocks = 0;
    for (int32_t s = 0; s < n_seqs; ++s) {
        for (int32_t b = 0; b < (plans[s].n_rows() + block_size - 1) / block_size; ++b) {
            tables[s].push_back(b * n_seqs + (n_seqs - 1 - s));
            n_blocks = std::max(n_blocks, tables[s].back() + 1);
        }
    }
    std::vector<const int32_t*> table_ptrs;
    for (auto& t : tables) table_ptrs.push_back(t.data());
    const size_t pool_elements = static_cast<size_t>(n_blocks) * block_size * latent;
    std::vector<float> pool32(pool_elements, NAN);
    std::vector<uint16_t> pool16(pool_elements, 0x7e00);  // NaN halves
    // Each sequence's latent rows as the cache will hold them (rounded to halves for F16), and its queries.
    std::vector<std::vector<float>> latents, queries;
    for (int32_t s = 0; s < n_seqs; ++s) {
        latents.push_back(random_floats(static_cast<size_t>(plans[s].n_rows()) * latent, 100 + s, -1.5f, 1.5f));
        if (c.f16) {
            for (float& x : latents.back()) x = fp16_to_fp32(fp32_to_fp16(x));
        }
        queries.push_back(random_floats(static_cast<size_t>(plans[s].n_rows()) * n_heads * head_dim, 200 + s));
    }
    const auto at = [&](int32_t s, int32_t r) {  // element offset of sequence s's cache row r
        return (static_cast<size_t>(tables[s][r / block_size]) * block_size + r % block_size) * latent;
    };
    for (int32_t s = 0; s < n_seqs; ++s) {
        for (int32_t r = 0; r < plans[s].cached; ++r) {
            for (int32_t d = 0; d < latent; ++d) {
                const float x = latents[s][static_cast<size_t>(r) * latent + d];
                pool32[at(s, r) + d] = x;
                pool16[at(s, r) + d] = fp32_to_fp16(x);
            }
        }
    }

    // The call: sequences' tokens interleaved round by round; tree fields for every token.
    struct token {
        int32_t seq, i, row;
    };
    std::vector<token> tokens;
    for (int32_t round = 0; round < 16; ++round) {
        for (int32_t s = n_seqs - 1; s >= 0; --s) {
            const int32_t n = plans[s].n_own + static_cast<int32_t>(plans[s].parents.size());
            if (round < n) tokens.push_back({s, round, plans[s].cached + round});
        }
    }
    const int32_t n_tokens = static_cast<int32_t>(tokens.size());
    std::vector<float> q, k;
    std::vector<int32_t> positions, seq_of, rows, mask_base;
    std::vector<uint64_t> mask;
    for (const token& t : tokens) {
        const sequence_plan& p = plans[t.seq];
        const int32_t first = p.cached + p.n_own;
        const bool node = t.i >= p.n_own;
        q.insert(q.end(), queries[t.seq].begin() + static_cast<ptrdiff_t>(t.row) * n_heads * head_dim,
                 queries[t.seq].begin() + static_cast<ptrdiff_t>(t.row + 1) * n_heads * head_dim);
        k.insert(k.end(), latents[t.seq].begin() + static_cast<ptrdiff_t>(t.row) * latent,
                 latents[t.seq].begin() + static_cast<ptrdiff_t>(t.row + 1) * latent);
        positions.push_back(node ? first + p.depth(t.i - p.n_own) : t.row);
        seq_of.push_back(t.seq);
        rows.push_back(t.row);
        mask_base.push_back(node ? first : t.row + 1);
        uint64_t bits = 0;
        for (int32_t n = node ? t.i - p.n_own : -1; n >= 0; n = p.parents[n]) bits |= uint64_t{1} << n;
        mask.push_back(bits);
    }
    std::vector<float> out(static_cast<size_t>(n_tokens) * n_heads * v_dim, NAN);
    attention_call call{n_tokens,
                        n_heads,
                        1,
                        head_dim,
                        scale,
                        q.data(),
                        k.data(),
                        nullptr,
                        out.data(),
                        positions.data(),
                        seq_of.data(),
                        n_seqs,
                        table_ptrs.data(),
                        block_size,
                        c.f16 ? reinterpret_cast<float*>(pool16.data()) : pool32.data(),
                        nullptr};
    call.kv_type = c.f16 ? kv_dtype::f16 : kv_dtype::f32;
    call.rows = rows.data();
    call.mask_base = mask_base.data();
    call.mask = mask.data();
    call.mask_words = 1;
    call.layer = layer;
    call.kv_lora_rank = rank;
    call.rope_dim = rope;
    call.v_head_dim = v_dim;
    const status st = (*op)->forward(call, c.threaded ? threaded_parallel_for() : no_parallel_for());
    ASSERT_TRUE(st.ok()) << st.message();

    for (int32_t t = 0; t < n_tokens; ++t) {
        const token& tk = tokens[t];
        const size_t row_at = at(tk.seq, tk.row);
        const float* written = latents[tk.seq].data() + static_cast<size_t>(tk.row) * latent;
        for (int32_t d = 0; d < latent; ++d) {
            const float got = c.f16 ? fp16_to_fp32(pool16[row_at + d]) : pool32[row_at + d];
            ASSERT_EQ(got, written[d]) << "cache row " << tk.row << " of sequence " << tk.seq << ", element " << d;
        }
        const std::vector<int32_t> seen = rows_read(plans[tk.seq], tk.i);
        for (int32_t h = 0; h < n_heads; ++h) {
            double want[v_dim];
            reference_head(q.data() + (static_cast<size_t>(t) * n_heads + h) * head_dim, latents[tk.seq], seen,
                           model.kv_b(layer), h, scale, want);
            for (int32_t d = 0; d < v_dim; ++d) {
                const float got = out[(static_cast<size_t>(t) * n_heads + h) * v_dim + d];
                ASSERT_NEAR(got, want[d], 1e-4 + 1e-4 * std::fabs(want[d]))
                    << "sequence " << tk.seq << " token " << tk.i << " (row " << tk.row << ") head " << h << " dim "
                    << d;
            }
        }
    }
}

std::vector<mla_case> all_cases() {
    std::vector<mla_case> cases;
    int i = 0;
    for (const char* path : {"naive", "absorbed", "auto"}) {
        for (bool f16 : {false, true}) {
            for (const char* kernel : {"scalar", "avx2"}) cases.push_back({path, f16, kernel, (i++ % 2) == 0});
        }
    }
    // attn_kv_b stored as halves: read in place, converted as the kernels read it.
    for (const ggml_type weights : {ggml_type::f16, ggml_type::bf16}) {
        for (const char* path : {"naive", "absorbed"}) {
            for (const char* kernel : {"scalar", "avx2"})
                cases.push_back({path, true, kernel, (i++ % 2) == 0, weights});
        }
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(mla, mla_plugin, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<mla_case>& info) {
                             const mla_case& c = info.param;
                             return std::string(c.path) + (c.f16 ? "_f16_" : "_f32_") + c.kernel +
                                    (c.threaded ? "_threaded" : "_inline") + "_kv_b_" + weights_name(c.weights);
                         });

// One decoding token of sequence 0 at position 0 (a minimal valid MLA call over a one-block pool).
struct one_token_call {
    std::vector<float> q = random_floats(n_heads * head_dim, 1), k = random_floats(latent, 2);
    std::vector<float> out = std::vector<float>(n_heads * v_dim), pool = std::vector<float>(block_size * latent);
    int32_t position = 0, seq = 0;
    std::vector<int32_t> table = {0};
    const int32_t* tables[1] = {table.data()};
    attention_call call() {
        attention_call c{1,          n_heads,   1,    head_dim, 0.25f,  q.data(),   k.data(),    nullptr,
                         out.data(), &position, &seq, 1,        tables, block_size, pool.data(), nullptr};
        c.kv_lora_rank = rank;
        c.rope_dim = rope;
        c.v_head_dim = v_dim;
        return c;
    }
};

// One decoding token of a one-layer model (3 heads, kv_lora_rank 64 so that rows are whole Q8_0 blocks) whose file
// stores attn_kv_b as `type` (`bytes`), at position 5 over a pool of random rows; returns out.
std::vector<float> one_layer_decode(ggml_type type, std::vector<uint8_t> bytes, const char* path) {
    constexpr int32_t H = 3, R = 64, nope_dims = 8, rope_dims = 4, v_dims = 8, lw = R + rope_dims;
    const fs::path dir = fs::temp_directory_path() / ("troupe_mla_q8_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    gguf::gguf_writer w;
    w.set_string("general.architecture", "deepseek2");
    w.set_u32("deepseek2.block_count", 1);
    w.set_u32("deepseek2.attention.head_count", H);
    w.set_u32("deepseek2.attention.key_length", nope_dims + rope_dims);
    w.set_u32("deepseek2.attention.value_length", v_dims);
    w.set_u32("deepseek2.rope.dimension_count", rope_dims);
    w.set_u32("deepseek2.attention.kv_lora_rank", R);
    w.add_tensor("blk.0.attn_kv_b.weight", type, {R, H * (nope_dims + v_dims)}, std::move(bytes));
    const std::string file_path = (dir / "model.gguf").string();
    EXPECT_TRUE(w.write(file_path).ok());
    auto file = gguf::gguf_file::open(file_path);
    std::error_code ec;
    fs::remove_all(dir, ec);
    EXPECT_TRUE(file.ok()) << file.message();
    if (!file.ok()) return {};
    plugin_host host(plugin_host_options{TROUPE_DEFAULT_PLUGIN_DIR}, make_model_services(*file));
    auto op = host.load_attention("mla", yaml(std::string("{path: ") + path + "}"));
    EXPECT_TRUE(op.ok()) << op.message();
    if (!op.ok()) return {};
    std::vector<float> q = random_floats(H * (nope_dims + rope_dims), 11), k = random_floats(lw, 12);
    std::vector<float> pool = random_floats(2 * 4 * lw, 13), out(H * v_dims);
    const int32_t position = 5, seq = 0;
    const std::vector<int32_t> table = {1, 0};
    const int32_t* tables[1] = {table.data()};
    attention_call c{
        1, H,      1, nope_dims + rope_dims, 0.3f,   q.data(), k.data(), nullptr, out.data(), &position, &seq,
        1, tables, 4, pool.data(),           nullptr};
    c.kv_lora_rank = R;
    c.rope_dim = rope_dims;
    c.v_head_dim = v_dims;
    const status st = (*op)->forward(c, no_parallel_for());
    EXPECT_TRUE(st.ok()) << st.message();
    return out;
}

TEST(mla_plugin_weights, a_block_format_attn_kv_b_is_read_as_its_decoded_weights_held_as_halves) {
    constexpr int64_t n = 3 * (8 + 8) * 64;
    const std::vector<float> x = random_floats(n, 10, -0.4f, 0.4f);
    std::vector<uint8_t> q8(static_cast<size_t>(n / 32) * sizeof(block_q8_0));
    ref::quantize_row_q8_0(x.data(), reinterpret_cast<block_q8_0*>(q8.data()), n);
    std::vector<float> decoded(n);
    ref::dequantize_row_q8_0(reinterpret_cast<const block_q8_0*>(q8.data()), decoded.data(), n);
    std::vector<uint8_t> halves(static_cast<size_t>(n) * 2);
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = fp32_to_fp16(decoded[i]);
        std::memcpy(halves.data() + 2 * i, &h, 2);
    }
    for (const char* path : {"naive", "absorbed"}) {
        const std::vector<float> from_q8 = one_layer_decode(ggml_type::q8_0, q8, path);
        const std::vector<float> from_f16 = one_layer_decode(ggml_type::f16, halves, path);
        ASSERT_EQ(from_q8.size(), 24u);
        ASSERT_EQ(from_f16.size(), 24u);
        for (size_t i = 0; i < from_q8.size(); ++i) {
            ASSERT_TRUE(std::isfinite(from_q8[i])) << path << " output " << i;
            EXPECT_EQ(from_q8[i], from_f16[i]) << path << " output " << i;
        }
        EXPECT_NE(std::count(from_q8.begin(), from_q8.end(), 0.0f), 24) << path << ": all outputs zero";
    }
}

TEST(mla_plugin_refusals, a_call_without_latent_attention_is_refused_naming_attention_gqa) {
    mla_model_file model(true);
    plugin_host host = model.host();
    auto op = host.load_attention("mla");
    ASSERT_TRUE(op.ok()) << op.message();
    one_token_call one;
    attention_call call = one.call();
    call.kv_lora_rank = 0;
    const status st = (*op)->forward(call, no_parallel_for());
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("not latent, use attention/gqa"), std::string::npos) << st.message();
}

TEST(mla_plugin_refusals, a_call_whose_shape_is_not_the_models_is_refused_with_both_shapes) {
    mla_model_file model(true);
    plugin_host host = model.host();
    auto op = host.load_attention("mla");
    ASSERT_TRUE(op.ok()) << op.message();
    one_token_call one;
    attention_call call = one.call();
    call.layer = n_layers;  // one past the last
    status st = (*op)->forward(call, no_parallel_for());
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("does not fit the model (10 heads, kv_lora_rank 40"), std::string::npos)
        << st.message();
    call = one.call();
    EXPECT_TRUE((*op)->forward(call, no_parallel_for()).ok()) << "the instance keeps working after a refusal";
}

TEST(mla_plugin_refusals, an_instance_without_a_model_or_for_a_model_without_mla_is_refused_at_load) {
    plugin_host bare(plugin_host_options{TROUPE_DEFAULT_PLUGIN_DIR});
    auto op = bare.load_attention("mla");
    ASSERT_FALSE(op.ok());
    EXPECT_NE(op.message().find("needs the model's tensors"), std::string::npos) << op.message();

    mla_model_file plain(false);
    plugin_host host = plain.host();
    op = host.load_attention("mla");
    ASSERT_FALSE(op.ok());
    EXPECT_NE(op.message().find("no deepseek2.attention.kv_lora_rank"), std::string::npos) << op.message();
    EXPECT_NE(op.message().find("use attention/gqa"), std::string::npos) << op.message();
    EXPECT_EQ(op.message().find("internal error"), std::string::npos) << op.message();
}

}  // namespace
}  // namespace troupe::testing
