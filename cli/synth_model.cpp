// synth_model: seeded random weights of a shape and architecture (see synth_model.h, synth_arch.h).
#include "cli/synth_model.h"

#include <algorithm>
#include <cctype>
#include <thread>
#include <vector>

#include "core/gguf/gguf_writer.h"
#include "kernels/ref/quants.h"

namespace troupe::cli {
namespace {

// The MoE architectures at a dense shape get 8 experts (top 2) of a quarter to a third of its FFN. moe-1B is a
// Mixtral-like shape of ~1.2B parameters of which ~0.38B run per token (8 experts of 2816 units, top 2).
constexpr synth_shape shapes[] = {
    {"tiny", 256, 2, 8, 4, 768, 512, {8, 2, 256}},
    {"110M", 768, 12, 12, 12, 2048, 1024, {8, 2, 512}},
    {"1B", 2048, 22, 32, 4, 5632, 2048, {8, 2, 1408}},
    {"moe-1B", 1024, 16, 16, 4, 2816, 2048, {8, 2, 2816}, true},
};

uint64_t splitmix64(uint64_t& state) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

}  // namespace

uint32_t gguf_file_type(ggml_type t) {
    switch (t) {
        case ggml_type::f32:
            return 0;
        case ggml_type::f16:
            return 1;
        case ggml_type::q4_0:
            return 2;
        case ggml_type::q4_1:
            return 3;
        case ggml_type::q8_0:
            return 7;
        case ggml_type::q5_0:
            return 8;
        case ggml_type::q2_k:
            return 10;  // Q2_K: all matrices Q2_K
        case ggml_type::q3_k:
            return 11;  // Q3_K_S: all matrices Q3_K
        case ggml_type::q4_k:
            return 14;  // Q4_K_S: all matrices Q4_K
        case ggml_type::q5_k:
            return 16;  // Q5_K_S: all matrices Q5_K
        case ggml_type::q6_k:
            return 18;
        default:
            return 0;
    }
}

namespace {

// The tensor's bytes in `type`, rows generated and quantized on n_threads threads.
std::vector<uint8_t> make_matrix(uint64_t seed, uint64_t tensor, int64_t n_in, int64_t n_rows, ggml_type type,
                                 int n_threads) {
    const size_t rb = row_bytes(type, n_in);
    std::vector<uint8_t> bytes(rb * static_cast<size_t>(n_rows));
    auto work = [&](int64_t begin, int64_t end) {
        std::vector<float> row(static_cast<size_t>(n_in));
        for (int64_t r = begin; r < end; ++r) {
            random_row(seed, tensor, static_cast<uint64_t>(r), 0.02f, row.data(), n_in);
            ref::quantize_row(type, row.data(), bytes.data() + static_cast<size_t>(r) * rb, n_in);
        }
    };
    const int64_t n_workers = std::min<int64_t>(n_threads, std::max<int64_t>(1, n_rows / 16));
    std::vector<std::thread> threads;
    for (int64_t t = 1; t < n_workers; ++t) {
        threads.emplace_back(work, n_rows * t / n_workers, n_rows * (t + 1) / n_workers);
    }
    work(0, n_rows / n_workers);
    for (auto& th : threads) th.join();
    return bytes;
}

}  // namespace

void random_row(uint64_t seed, uint64_t tensor, uint64_t row, float std_dev, float* out, int64_t n) {
    uint64_t state = seed;
    state = splitmix64(state) ^ (tensor * 0xD1B54A32D192ED03ull);
    state = splitmix64(state) ^ (row * 0x8CB92BA72F3D8DD7ull);
    splitmix64(state);
    // Sum of four 16-bit uniforms in [0, 1): mean 2, variance 1/3.
    const float scale = std_dev * 1.7320508f / 65536.0f;
    for (int64_t i = 0; i < n; ++i) {
        const uint64_t r = splitmix64(state);
        const auto sum = static_cast<float>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48));
        out[i] = (sum - 2.0f * 65535.5f) * scale;
    }
}

std::span<const synth_shape> synth_shapes() {
    return shapes;
}

const synth_shape* find_synth_shape(std::string_view name) {
    for (const auto& s : shapes) {
        if (s.name.size() == name.size() && std::equal(s.name.begin(), s.name.end(), name.begin(), [](char a, char b) {
                return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
            })) {
            return &s;
        }
    }
    return nullptr;
}

std::optional<ggml_type> parse_synth_type(std::string_view name) {
    if (name == "f32") return ggml_type::f32;
    if (name == "f16") return ggml_type::f16;
    if (name == "q8_0") return ggml_type::q8_0;
    if (name == "q4_0") return ggml_type::q4_0;
    if (name == "q5_0") return ggml_type::q5_0;
    if (name == "q2_k") return ggml_type::q2_k;
    if (name == "q3_k") return ggml_type::q3_k;
    if (name == "q4_k") return ggml_type::q4_k;
    if (name == "q5_k") return ggml_type::q5_k;
    if (name == "q6_k") return ggml_type::q6_k;
    if (name == "q4_1") return ggml_type::q4_1;
    if (name == "w4_g64") return ggml_type::w4_g64;
    if (name == "w4_g128") return ggml_type::w4_g128;
    return std::nullopt;
}

result<synth_summary> write_synth_model(const synth_params& p, const gguf::gguf_file& vocab,
                                        const std::string& out_path) {
    const synth_shape& s = p.shape;
    TROUPE_ASSERT(s.dim % s.n_heads == 0 && s.n_heads % s.n_kv_heads == 0, std::string(s.name));
    auto tokens = vocab.get_string_array("tokenizer.ggml.tokens");
    if (!tokens) return make_error(vocab.path() + ": no vocabulary to copy (" + tokens.message() + ")");
    const auto n_vocab = static_cast<int64_t>(tokens->size());
    const int n_threads = p.n_threads > 0 ? p.n_threads : std::max(1u, std::thread::hardware_concurrency());

    gguf::gguf_writer w;
    const std::vector<synth_tensor> plan = plan_synth_arch(p.arch, s, n_vocab, w);
    w.set_string("general.name", "troupe-synth-" + std::string(synth_arch_name(p.arch)) + "-" + std::string(s.name));
    // troupe's own W4_G64 / W4_G128 have no llama.cpp file type: the key is left out for them.
    if (p.type != ggml_type::w4_g64 && p.type != ggml_type::w4_g128)
        w.set_u32("general.file_type", gguf_file_type(p.type));
    if (p.type != ggml_type::f32 && p.type != ggml_type::f16) w.set_u32("general.quantization_version", 2);
    w.set_scalar("troupe.synth.seed", p.seed);
    w.copy_metadata(vocab, "tokenizer.");

    synth_summary summary;
    summary.n_vocab = n_vocab;
    for (size_t t = 0; t < plan.size(); ++t) {
        const synth_tensor& tp = plan[t];
        if (tp.what == synth_tensor::kind::norm || tp.what == synth_tensor::kind::bias) {  // 1, small random values
            std::vector<float> values(static_cast<size_t>(tp.dims[0]), 1.0f);
            if (tp.what == synth_tensor::kind::bias) random_row(p.seed, t, 0, 0.02f, values.data(), tp.dims[0]);
            w.add_tensor_f32(tp.name, tp.dims, values);
            summary.n_params += tp.dims[0];
            summary.n_active_params += tp.dims[0];
            continue;
        }
        ggml_type type = p.type;
        if (tp.dims[0] % traits(type).block_size != 0) type = ggml_type::f16;
        if (tp.what == synth_tensor::kind::router && type != ggml_type::f32) type = ggml_type::f16;
        int64_t n_rows = 1;  // a 3-D tensor of stacked experts is their rows one after another
        for (size_t d = 1; d < tp.dims.size(); ++d) n_rows *= tp.dims[d];
        auto bytes = make_matrix(p.seed, t, tp.dims[0], n_rows, type, n_threads);
        w.add_tensor(tp.name, type, tp.dims, std::move(bytes));
        summary.n_params += tp.dims[0] * n_rows;
        // Of stacked experts, a token runs n_used.
        const int64_t idle = tp.dims.size() == 3 ? tp.dims[0] * tp.dims[1] * (tp.dims[2] - s.moe.n_used) : 0;
        summary.n_active_params += tp.dims[0] * n_rows - idle;
    }
    if (auto st = w.write(out_path); !st) return st.err();
    auto written = gguf::gguf_file::open(out_path);
    if (!written) return make_error("wrote " + out_path + " but cannot read it back: " + written.message());
    summary.n_bytes = (*written)->file_size();
    return summary;
}

}  // namespace troupe::cli
