#include "core/model/linear.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "kernels/cpu/q8_panels.h"

namespace troupe {
namespace {

// After a weight has been copied out of the read-only file mapping: drops this process's references to the
// whole pages inside [p, p + n_bytes) so they do not count twice in its resident memory. The mapping stays
// valid; a later read (e.g. the embedding rows of a tied output matrix) faults the page back in from the
// page cache.
void release_mapped_pages(const void* p, size_t n_bytes) {
    static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    const auto end = (reinterpret_cast<uintptr_t>(p) + n_bytes) / page * page;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace

result<linear> linear::make(const weight_view& w, quant_op* quant, const std::string& name,
                            cpu::activation_recipe recipe) {
    linear l;
    l.w_ = w;
    l.recipe_ = recipe;
    if (quant && quant->claims(w.type)) {
        auto prepared = quant->prepare(w);
        if (!prepared.ok()) return make_error(name + ": quant plugin " + quant->name() + ": " + prepared.message());
        l.quant_ = quant;
        l.prepared_ = std::move(*prepared);
        return l;
    }
    if (!matmul_supports(w.type)) {
        return make_error(name + ": no kernel for weight type " + std::string(traits(w.type).name) +
                          (quant ? "" : " (configure a quant plugin that handles it)"));
    }
    return l;
}

size_t linear::n_bytes() const {
    return prepared_ ? prepared_->n_bytes() : w_.row_stride * w_.n_out;
}

matmul_weight linear::kernel_weight() const {
    matmul_weight w{w_.type, w_.data, w_.n_in, w_.n_out, w_.row_stride};
    w.panels = panels_;
    return w;
}

// Where the kernels have panels for the type and recipe, they are packed instead of copying the rows: the
// panels serve every token count in both recipes (kernels/cpu/q8_panels.h).
bool linear::packs_panels() const {
    return cpu::q8_panels_supported(w_.type, recipe_);
}

bool linear::keeps_rows() const {
    return !packs_panels();
}

size_t linear::placed_bytes() const {
    if (prepared_) return 0;
    const size_t rows = keeps_rows() ? (w_.row_stride * w_.n_out + 63) / 64 * 64 : 0;
    return rows + (packs_panels() ? cpu::q8_panels_bytes(kernel_weight()) : 0);
}

void linear::place(uint8_t* dst, cpu::thread_pool* pool) {
    TROUPE_ASSERT(!prepared_, "linear::place: the weight belongs to a plugin");
    const void* file_rows = w_.data;
    const size_t n = w_.row_stride * w_.n_out;
    if (packs_panels()) {
        const size_t at = keeps_rows() ? (n + 63) / 64 * 64 : 0;
        cpu::pack_q8_panels(kernel_weight(), dst + at, pool);
        panels_ = dst + at;
    }
    // Without a copy of the rows, w_.data keeps pointing at the file's (released) rows: valid, faulted back in
    // if anything reads them.
    if (keeps_rows()) {
        std::memcpy(dst, file_rows, n);
        w_.data = dst;
    }
    release_mapped_pages(file_rows, n);
}

std::optional<linear> linear::concatenated(std::span<const linear* const> parts) {
    if (parts.empty() || parts.front()->prepared_) return std::nullopt;
    linear all = *parts.front();
    for (size_t i = 1; i < parts.size(); ++i) {
        const linear& prev = *parts[i - 1];
        const linear& part = *parts[i];
        if (part.prepared_ || part.w_.type != all.w_.type || part.recipe_ != all.recipe_ ||
            part.w_.n_in != all.w_.n_in || part.w_.row_stride != all.w_.row_stride ||
            (part.panels_ == nullptr) != (all.panels_ == nullptr)) {
            return std::nullopt;
        }
        if (all.panels_ != nullptr) {
            // Panels of a part's last rows are padded with zero rows: only whole panels concatenate.
            if (prev.w_.n_out % cpu::q8_panel_rows != 0 ||
                part.panels_ !=
                    static_cast<const uint8_t*>(prev.panels_) + cpu::q8_panels_bytes(prev.kernel_weight())) {
                return std::nullopt;
            }
        } else if (part.w_.data != static_cast<const uint8_t*>(prev.w_.data) + prev.w_.row_stride * prev.w_.n_out) {
            return std::nullopt;
        }
        all.w_.n_out += part.w_.n_out;
    }
    // With panels the parts' rows (if kept at all) are not contiguous: the view has none.
    if (all.panels_ != nullptr) all.w_.data = nullptr;
    return all;
}

status linear::forward(const float* x, float* y, int64_t n_tokens, const compute_context& ctx) const {
    if (prepared_) return quant_->matmul(*prepared_, x, y, n_tokens, ctx.parallel_for);
    cpu::matmul(kernel_weight(), x, y, n_tokens, *ctx.pool, recipe_);
    return {};
}

}  // namespace troupe
