#include "tests/cuda/cuda_test_support.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/gguf/gguf_file.h"
#include "kernels/ref/quants.h"

namespace troupe::testing {
namespace {

struct backend_state {
    std::string skip_reason;
    std::shared_ptr<const cuda_library> lib;
};

const backend_state& state() {
    static const backend_state s = [] {
        backend_state st;
        if (auto located = cuda_library::locate(); !located.ok()) {
            st.skip_reason = "the CUDA backend was not built (nvcc not found at configure time?): " + located.message();
            return st;
        }
        if (status d = cuda_library::check_driver(); !d.ok()) {
            st.skip_reason = d.message();
            return st;
        }
        auto lib = cuda_library::load();
        if (!lib.ok()) {
            st.skip_reason = lib.message();
            return st;
        }
        int32_t n = 0;
        if (const char* e = lib.value()->ops().device_count(&n)) {
            st.skip_reason = e;
            return st;
        }
        st.lib = lib.value();
        return st;
    }();
    return s;
}

}  // namespace

const std::string& cuda_skip_reason() {
    return state().skip_reason;
}

const troupe_cuda_ops& cuda_ops() {
    TROUPE_ASSERT(state().lib != nullptr, "cuda_ops() without a GPU: " + state().skip_reason);
    return state().lib->ops();
}

bool nvidia_device_node_present() {
    std::error_code ec;
    return std::filesystem::exists("/dev/nvidiactl", ec) || std::filesystem::exists("/dev/nvidia0", ec);
}

result<llama_weights> load_llama_weights(const std::string& path) {
    auto file = gguf::gguf_file::open(path);
    if (!file.ok()) return file.err();
    return bind_llama_weights(file.value());
}

std::vector<float> logits_row(const forward_output& out, size_t seq, int32_t i) {
    const auto r = out.row(seq, i);
    return {r.begin(), r.end()};
}

float max_rel_error(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float err = 0.0f, scale = 1.0f;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        EXPECT_TRUE(std::isfinite(a[i])) << "element " << i;
        err = std::max(err, std::fabs(a[i] - b[i]));
        scale = std::max(scale, std::fabs(b[i]));
    }
    return err / scale;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    TROUPE_ASSERT(a.size() == b.size(),
                  "max_abs_diff of " + std::to_string(a.size()) + " and " + std::to_string(b.size()) + " values");
    float d = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo, float hi) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

std::unique_ptr<tiny_model> make_tiny_model(ggml_type type, bool tied_output, uint32_t seed) {
    auto m = std::make_unique<tiny_model>();
    llama_weights_view& v = m->view;
    v.name = "tiny.gguf";
    v.hp.n_vocab = 50;
    v.hp.dim = 32;
    v.hp.n_layers = 2;
    v.hp.n_heads = 4;
    v.hp.n_kv_heads = 2;
    v.hp.head_dim = 8;
    v.hp.ffn_dim = 64;
    v.hp.n_ctx = 64;
    uint32_t next_seed = seed;
    const auto matrix = [&](int64_t n_in, int64_t n_out, ggml_type t) {
        const std::vector<float> x = random_floats(static_cast<size_t>(n_in * n_out), next_seed++, -0.3f, 0.3f);
        const size_t row = row_bytes(t, n_in);
        auto& buf = m->storage.emplace_back(row * n_out);
        for (int64_t r = 0; r < n_out; ++r) ref::quantize_row(t, x.data() + r * n_in, buf.data() + r * row, n_in);
        return weight_view{t, buf.data(), n_in, n_out, row};
    };
    const auto norm = [&](int64_t n) {
        std::vector<float> x = random_floats(static_cast<size_t>(n), next_seed++, 0.8f, 1.2f);
        auto& buf = m->storage.emplace_back(n * sizeof(float));
        std::memcpy(buf.data(), x.data(), buf.size());
        return weight_view{ggml_type::f32, buf.data(), n, 1, n * sizeof(float)};
    };
    const int64_t dim = v.hp.dim, q = v.hp.n_heads * v.hp.head_dim, kv = v.hp.n_kv_heads * v.hp.head_dim;
    for (int32_t il = 0; il < v.hp.n_layers; ++il) {
        v.layers.push_back({norm(dim), matrix(dim, q, type), matrix(dim, kv, type), matrix(dim, kv, type),
                            matrix(q, dim, type), norm(dim), matrix(dim, v.hp.ffn_dim, type),
                            matrix(dim, v.hp.ffn_dim, type), matrix(v.hp.ffn_dim, dim, type)});
    }
    v.token_embd = matrix(dim, v.hp.n_vocab, type);
    v.output_norm = norm(dim);
    v.output = tied_output ? v.token_embd : matrix(dim, v.hp.n_vocab, type);
    return m;
}

}  // namespace troupe::testing
