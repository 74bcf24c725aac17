// Internal: the kernels take one contiguous weight; a weight stored in pieces (matmul_weight::pieces) is handed to
// them one piece at a time.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/ref/ops.h"

namespace troupe::cpu::detail {

// Calls fn(piece, first_row, r0, r1) for each piece of w that rows [r0, r1) touch: piece is that piece as a weight
// of its own (its rows or panels), first_row its first row in w, [r0, r1) the rows wanted relative to it. A weight
// without pieces is one piece.
template <class Fn>
void for_each_piece(const matmul_weight& w, int64_t r0, int64_t r1, const Fn& fn) {
    if (w.n_pieces == 0) {
        fn(w, int64_t{0}, r0, r1);
        return;
    }
    for (int32_t i = 0; i < w.n_pieces; ++i) {
        const int64_t begin = w.pieces[i].row_begin;
        const int64_t end = i + 1 < w.n_pieces ? w.pieces[i + 1].row_begin : w.n_out;
        const int64_t a = std::max(r0, begin), b = std::min(r1, end);
        if (a >= b) continue;
        const matmul_weight piece{w.type,       w.pieces[i].data,   w.n_in, end - begin,
                                  w.row_stride, w.pieces[i].panels, w.codes};
        fn(piece, begin, a - begin, b - begin);
    }
}

// Whether w's products read q8 panels (its own, or every piece's).
inline bool has_panels(const matmul_weight& w) {
    return w.n_pieces == 0 ? w.panels != nullptr : w.pieces[0].panels != nullptr;
}

// Whether w's rows are all there (a loader may keep only the panels of a weight, matmul_weight::panels).
inline bool has_rows(const matmul_weight& w) {
    if (w.n_pieces == 0) return w.data != nullptr;
    return std::all_of(w.pieces, w.pieces + w.n_pieces, [](const weight_piece& p) { return p.data != nullptr; });
}

}  // namespace troupe::cpu::detail
