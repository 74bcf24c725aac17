// kv/int8: a KV cache of int8 codes (int8_format.h), about half the bytes of an f16 cache per token.
//
// Parameters:
//   kernel: auto | scalar | avx2 | avx512   (default auto: AVX-512 where the CPU has it, with VNNI where it has that
//                                           too; else AVX2)
#include <troupe/plugin.h>

#include "int8_format.h"
#include "plugins/quant/kv_common/kv_driver.h"

namespace troupe::kv {
namespace {

const int8_format& fmt(const void* f) {
    return *static_cast<const int8_format*>(f);
}

// Keys to the window (quantized when the block closes), values quantized now.
void int8_write(const void* f, uint8_t* block, float* win_k, float*, int32_t h, int32_t row, const float* k,
                const float* v) {
    const int8_format& F = fmt(f);
    const int32_t hd = F.geometry.head_dim;
    std::memcpy(win_k + static_cast<size_t>(row) * hd, k, hd * sizeof(float));
    int8_t codes[max_head_dim];
    const_cast<float*>(F.v_scales(block, h))[row] = int8_quantize(v, hd, 1, codes, 1);
    auto* group = const_cast<int8_t*>(F.v_group(block, h, row / 4));
    for (int32_t c = 0; c < hd; ++c) group[c * 4 + row % 4] = codes[c];
}

// Per channel: the block's scale and codes (biased by 128, channel groups of 4: int8_format.h).
void int8_close(const void* f, uint8_t* block, const float* win_k, const float*, int32_t h) {
    const int8_format& F = fmt(f);
    const int32_t hd = F.geometry.head_dim;
    const int32_t bs = F.geometry.block_size;
    auto* scales = const_cast<float*>(F.k_scales(block, h));
    int8_t codes[max_block_size];
    for (int32_t c = 0; c < hd; ++c) {
        scales[c] = int8_quantize(win_k + c, bs, hd, codes, 1);
        auto* group = const_cast<uint8_t*>(F.k_group(block, h, c / 4));
        for (int32_t r = 0; r < bs; ++r) group[r * 4 + c % 4] = static_cast<uint8_t>(codes[r] + 128);
    }
}

void int8_reload(const void* f, const uint8_t* block, float* win_k, float*, int32_t h, int32_t n_rows) {
    const int8_format& F = fmt(f);
    const int32_t hd = F.geometry.head_dim;
    const float* scales = F.k_scales(block, h);
    for (int32_t r = 0; r < n_rows; ++r) {
        for (int32_t c = 0; c < hd; ++c)
            win_k[static_cast<size_t>(r) * hd + c] = scales[c] * static_cast<float>(F.k_code(block, h, r, c));
    }
}

class int8_choice final : public format_choice {
public:
    std::string make(const kv_geometry& g, kernel_level level, block_codec& codec, troupe_kv_layout& layout) override {
        if (g.head_dim % 4 != 0) {
            return "head_dim " + std::to_string(g.head_dim) +
                   " is not a multiple of 4; kv/int8 stores keys in groups of 4 channels";
        }
        format_.geometry = g;
        codec.format = &format_;
        codec.window_keys = true;
        codec.window_values = false;
        codec.write = int8_write;
        codec.close = int8_close;
        codec.reload = int8_reload;
        codec.kernels = level == kernel_level::scalar          ? int8_kernels_ref()
                        : level == kernel_level::avx2          ? int8_kernels_avx2()
                        : __builtin_cpu_supports("avx512vnni") ? int8_kernels_avx512_vnni()
                                                               : int8_kernels_avx512();
        layout.bytes_per_token = format_.bytes_per_token();
        layout.bytes_per_block = format_.bytes_per_block();
        return "";
    }

private:
    int8_format format_;
};

std::unique_ptr<format_choice> parse(param_reader&) {
    return std::make_unique<int8_choice>();
}

const plugin_description description{"kv/int8", {}, parse};

int32_t int8_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    return create(description, params, out);
}

const troupe_plugin_descriptor descriptor = make_descriptor(
    "int8", "int8 KV cache: keys per channel per block, values per token (CPU: scalar, AVX-512)", int8_create);

}  // namespace
}  // namespace troupe::kv

extern "C" TROUPE_PLUGIN_EXPORT const troupe_plugin_descriptor* troupe_plugin_query(uint32_t, uint32_t,
                                                                                    const troupe_host_services* host) {
    troupe::plugin_support::host_log::attach(host);
    return &troupe::kv::descriptor;
}
