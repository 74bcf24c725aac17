#include "core/model/linear.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "kernels/cpu/weight_panels.h"

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
    w.codes = panel_codes_;
    w.pieces = pieces_.empty() ? nullptr : pieces_.data();
    w.n_pieces = static_cast<int32_t>(pieces_.size());
    return w;
}

// Where the kernels have panels for the type and recipe, they are packed instead of copying the rows: the
// panels serve every token count (kernels/cpu/weight_panels.h).
bool linear::packs_panels() const {
    return cpu::panels_supported(w_.type, recipe_);
}

bool linear::packed() const {
    return pieces_.empty() ? panels_ != nullptr : pieces_.front().panels != nullptr;
}

std::vector<weight_piece> linear::storage() const {
    if (!pieces_.empty()) return pieces_;
    return {weight_piece{0, w_.data, panels_}};
}

namespace {

size_t panel_bytes(const weight_view& w, int64_t n_rows) {
    return cpu::panels_bytes(matmul_weight{w.type, nullptr, w.n_in, n_rows, w.row_stride});
}

// Whether piece b's rows and panels continue piece a's (a holds n_rows rows).
bool continues(const weight_view& w, const weight_piece& a, const weight_piece& b, int64_t n_rows) {
    const bool rows = a.data != nullptr && b.data == static_cast<const uint8_t*>(a.data) + w.row_stride * n_rows;
    const bool panels = a.panels == nullptr
                            ? b.panels == nullptr
                            : n_rows % cpu::weight_panel_rows == 0 &&
                                  b.panels == static_cast<const uint8_t*>(a.panels) + panel_bytes(w, n_rows);
    return rows && panels;
}

}  // namespace

void linear::set_pieces(std::vector<weight_piece> pieces) {
    std::vector<weight_piece> merged;
    for (const weight_piece& p : pieces) {
        if (!merged.empty() && continues(w_, merged.back(), p, p.row_begin - merged.back().row_begin)) continue;
        merged.push_back(p);
    }
    if (merged.size() == 1) {
        w_.data = merged.front().data;
        panels_ = merged.front().panels;
        pieces_.clear();
        return;
    }
    w_.data = merged.front().data;  // unused by the kernels, which read the pieces
    panels_ = nullptr;
    pieces_ = std::move(merged);
}

std::optional<linear> linear::concatenated(std::span<const linear* const> parts) {
    if (parts.empty()) return std::nullopt;
    const linear& first = *parts.front();
    std::vector<weight_piece> pieces;
    int64_t n_out = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
        const linear& part = *parts[i];
        if (part.prepared_ || part.w_.type != first.w_.type || part.recipe_ != first.recipe_ ||
            part.w_.n_in != first.w_.n_in || part.w_.row_stride != first.w_.row_stride ||
            part.packed() != first.packed() || (part.packed() && part.panel_codes_ != first.panel_codes_)) {
            return std::nullopt;
        }
        // Panels of a part's last rows are padded with zero rows: only whole panels concatenate (and rows that
        // place() will pack into panels, so the concatenation can be placed and its parts taken back as rows).
        if ((part.packed() || part.packs_panels()) && i + 1 < parts.size() &&
            part.w_.n_out % cpu::weight_panel_rows != 0)
            return std::nullopt;
        for (weight_piece p : part.storage()) {
            p.row_begin += n_out;
            pieces.push_back(p);
        }
        n_out += part.w_.n_out;
    }
    linear all = first;
    all.w_.n_out = n_out;
    all.set_pieces(std::move(pieces));
    return all;
}

linear linear::rows(int64_t r0, int64_t r1) const {
    TROUPE_ASSERT(!prepared_ && 0 <= r0 && r0 < r1 && r1 <= w_.n_out, "linear::rows: bad range");
    TROUPE_ASSERT(!packed() || r0 % cpu::weight_panel_rows == 0, "linear::rows: rows must start a panel");
    const std::vector<weight_piece> all = storage();
    std::vector<weight_piece> view;
    for (size_t i = 0; i < all.size(); ++i) {
        const int64_t begin = all[i].row_begin, end = i + 1 < all.size() ? all[i + 1].row_begin : w_.n_out;
        const int64_t a = std::max(r0, begin), b = std::min(r1, end);
        if (a >= b) continue;
        const int64_t skip = a - begin;  // a starts a panel when the weight has panels (begin does too)
        const auto* data = static_cast<const uint8_t*>(all[i].data);
        const auto* panels = static_cast<const uint8_t*>(all[i].panels);
        view.push_back(weight_piece{a - r0, data ? data + w_.row_stride * skip : nullptr,
                                    panels ? panels + panel_bytes(w_, skip) : nullptr});
    }
    linear l = *this;
    l.w_.n_out = r1 - r0;
    l.set_pieces(std::move(view));
    return l;
}

int64_t linear::placement_rows() const {
    return prepared_ ? prepared_->placement_rows() : cpu::weight_panel_rows;
}

size_t linear::placed_bytes(int64_t r0, int64_t r1) const {
    if (prepared_) return prepared_->placement_rows() > 0 ? (prepared_->placed_bytes(r0, r1) + 63) / 64 * 64 : 0;
    if (packs_panels()) return panel_bytes(w_, r1 - r0);
    return (w_.row_stride * static_cast<size_t>(r1 - r0) + 63) / 64 * 64;
}

status linear::place(std::span<const int64_t> bounds, std::span<uint8_t* const> dsts, cpu::thread_pool* pool) {
    TROUPE_ASSERT(bounds.size() == dsts.size() + 1 && bounds.front() == 0 && bounds.back() == w_.n_out,
                  "linear::place: shard bounds must run from 0 to n_out");
    if (prepared_) return prepared_->place(bounds, dsts);  // the plugin moves its prepared rows
    const std::vector<weight_piece> from = storage();      // the file's rows
    const bool panels = packs_panels();
    std::vector<weight_piece> placed;
    for (size_t s = 0; s + 1 < bounds.size(); ++s) {
        const int64_t r0 = bounds[s], r1 = bounds[s + 1];
        if (r0 == r1) continue;
        TROUPE_ASSERT(!panels || r0 % cpu::weight_panel_rows == 0, "linear::place: a shard must start a panel");
        uint8_t* dst = dsts[s];
        const void* single_source = nullptr;  // the shard's rows in the file, where they lie in one piece
        for (size_t i = 0; i < from.size(); ++i) {
            const int64_t begin = from[i].row_begin, end = i + 1 < from.size() ? from[i + 1].row_begin : w_.n_out;
            const int64_t a = std::max(r0, begin), b = std::min(r1, end);
            if (a >= b) continue;
            const auto* src = static_cast<const uint8_t*>(from[i].data) + w_.row_stride * (a - begin);
            if (a == r0 && b == r1) single_source = src;
            if (panels) {  // sources start panels: parts of a concatenation are whole panels
                const matmul_weight part{w_.type, src, w_.n_in, b - a, w_.row_stride};
                panel_codes_ = cpu::pack_panels(part, dst + panel_bytes(w_, a - r0), pool);
            } else {
                std::memcpy(dst + w_.row_stride * (a - r0), src, w_.row_stride * (b - a));
            }
        }
        // Panels: the rows stay in the file (faulted back in if a kernel without panels ever reads them).
        placed.push_back(weight_piece{r0, panels ? single_source : dst, panels ? dst : nullptr});
    }
    for (size_t i = 0; i < from.size(); ++i) {
        const int64_t end = i + 1 < from.size() ? from[i + 1].row_begin : w_.n_out;
        release_mapped_pages(from[i].data, w_.row_stride * (end - from[i].row_begin));
    }
    set_pieces(std::move(placed));
    return {};
}

status linear::forward(const float* x, float* y, int64_t n_tokens, const compute_context& ctx) const {
    if (prepared_) return quant_->matmul_on(*prepared_, x, y, n_tokens, ctx);
    cpu::matmul(kernel_weight(), x, y, n_tokens, *ctx.pool, recipe_);
    return {};
}

}  // namespace troupe
