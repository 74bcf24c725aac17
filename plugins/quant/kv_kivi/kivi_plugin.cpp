// kv/kivi: KIVI's 2-bit KV cache (kivi_format.h), at most a quarter of an f16 cache's bytes per token plus the
// open block of each running sequence in float.
//
// Parameters:
//   kernel: auto | scalar | avx2 | avx512   (default auto: AVX-512 where the CPU has it, else AVX2)
//   value_group: channels per (scale, min) of a value row, 1..256 (default 32; capped at head_dim, which it
//                must divide)
//   residual_blocks: KIVI's float residual R, in blocks: each running sequence's newest 1..64 blocks (the open
//                one and those before it) are read in float from its window (default 8: KIVI's R = 128 tokens at
//                kv.block_size 16; 1 keeps only the open block, for the least memory)
#include <troupe/plugin.h>

#include <cstring>
#include <utility>

#include "kivi_format.h"
#include "plugins/quant/kv_common/kv_driver.h"

namespace troupe::kv {
namespace {

const kivi_format& fmt(const void* f) {
    return *static_cast<const kivi_format*>(f);
}

void kivi_write(const void* f, uint8_t*, float* win_k, float* win_v, int32_t, int32_t row, const float* k,
                const float* v) {
    const size_t hd = static_cast<size_t>(fmt(f).geometry.head_dim);
    std::memcpy(win_k + row * hd, k, hd * sizeof(float));
    std::memcpy(win_v + row * hd, v, hd * sizeof(float));
}

void kivi_close(const void* f, uint8_t* block, const float* win_k, const float* win_v, int32_t h) {
    const kivi_format& F = fmt(f);
    const int32_t hd = F.geometry.head_dim;
    const int32_t bs = F.geometry.block_size;
    auto* k_rows = const_cast<uint8_t*>(F.k_group(block, h, 0));
    auto* v_rows = const_cast<uint8_t*>(F.v_group(block, h, 0));
    std::memset(k_rows, 0, F.head_bytes());
    std::memset(v_rows, 0, F.v_head_bytes());
    // Keys: channel c over the block's rows, one code per row.
    auto* kp = const_cast<uint16_t*>(F.k_params(block, h));
    for (int32_t c = 0; c < hd; ++c) {
        uint8_t* group = k_rows + static_cast<size_t>(c / 4) * bs;
        kivi_quantize(
            win_k + c, bs, hd,
            [&](int32_t r) {
                return std::pair{group + r, 2 * (c % 4)};
            },
            kp + 2 * c);
    }
    // Values: each row's groups of value_group channels.
    for (int32_t r = 0; r < bs; ++r) {
        auto* vp = const_cast<uint16_t*>(F.v_params(block, h, r));
        for (int32_t j = 0; j < F.value_groups(); ++j) {
            uint8_t* group = v_rows + static_cast<size_t>(r / 4) * hd + j * F.value_group;
            kivi_quantize(
                win_v + static_cast<size_t>(r) * hd + j * F.value_group, F.value_group, 1,
                [&](int32_t i) {
                    return std::pair{group + i, 2 * (r % 4)};
                },
                vp + 2 * j);
        }
    }
}

void kivi_reload(const void* f, const uint8_t* block, float* win_k, float* win_v, int32_t h, int32_t n_rows) {
    const kivi_format& F = fmt(f);
    const int32_t hd = F.geometry.head_dim;
    const uint16_t* kp = F.k_params(block, h);
    for (int32_t r = 0; r < n_rows; ++r) {
        const uint16_t* vp = F.v_params(block, h, r);
        for (int32_t c = 0; c < hd; ++c) {
            const int32_t j = c / F.value_group;
            win_k[static_cast<size_t>(r) * hd + c] =
                fp16_to_fp32(kp[2 * c + 1]) + fp16_to_fp32(kp[2 * c]) * F.k_code(block, h, r, c);
            win_v[static_cast<size_t>(r) * hd + c] =
                fp16_to_fp32(vp[2 * j + 1]) + fp16_to_fp32(vp[2 * j]) * F.v_code(block, h, r, c);
        }
    }
}

class kivi_choice final : public format_choice {
public:
    kivi_choice(int32_t value_group, int32_t residual_blocks)
        : value_group_(value_group), residual_blocks_(residual_blocks) {}

    std::string make(const kv_geometry& g, kernel_level level, block_codec& codec, troupe_kv_layout& layout) override {
        const int32_t group = std::min(value_group_, g.head_dim);
        if (g.head_dim % 4 != 0 || g.head_dim % group != 0) {
            return "head_dim " + std::to_string(g.head_dim) + " must be a multiple of 4 and of params.value_group " +
                   std::to_string(group);
        }
        format_.geometry = g;
        format_.value_group = group;
        codec.format = &format_;
        codec.window_keys = true;
        codec.window_values = true;
        codec.residual_blocks = residual_blocks_;
        codec.write = kivi_write;
        codec.close = kivi_close;
        codec.reload = kivi_reload;
        codec.kernels = level == kernel_level::scalar          ? kivi_kernels_ref()
                        : level == kernel_level::avx2          ? kivi_kernels_avx2_for(format_)
                        : __builtin_cpu_supports("avx512vnni") ? kivi_kernels_avx512_vnni_for(format_)
                                                               : kivi_kernels_avx512_for(format_);
        layout.bytes_per_token = format_.bytes_per_token();
        layout.bytes_per_block = format_.bytes_per_block();
        return "";
    }

private:
    int32_t value_group_;
    int32_t residual_blocks_;
    kivi_format format_;
};

std::unique_ptr<format_choice> parse(param_reader& reader) {
    const auto value_group = static_cast<int32_t>(reader.integer("value_group", 1, max_head_dim, 32));
    const auto residual = static_cast<int32_t>(reader.integer("residual_blocks", 1, max_residual_blocks, 8));
    return std::make_unique<kivi_choice>(value_group, residual);
}

const plugin_description description{"kv/kivi", {"value_group", "residual_blocks"}, parse};

int32_t kivi_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    return create(description, params, out);
}

const troupe_plugin_descriptor descriptor = make_descriptor(
    "kivi", "KIVI 2-bit KV cache: keys per channel, values per token group, open block in float (CPU: scalar, AVX-512)",
    kivi_create);

}  // namespace
}  // namespace troupe::kv

extern "C" TROUPE_PLUGIN_EXPORT const troupe_plugin_descriptor* troupe_plugin_query(uint32_t, uint32_t,
                                                                                    const troupe_host_services* host) {
    troupe::plugin_support::host_log::attach(host);
    return &troupe::kv::descriptor;
}
