// The device layout of quant/fp8's CUDA path (fp8_cuda.h), host side: the CPU path's panel form (fp8_panels.h)
// rewritten as rows before the upload. Plain C++ without CUDA, so it is tested on every machine
// (tests/cuda/cuda_quant_layout_test.cpp), GPU or not.
//
//   codes [n_out][row_codes(n_in)]: row r's code of weight k at r * row_codes + k; codes past n_in are 0 (+0.0)
#pragma once

#include <cstdint>
#include <cstring>

#include "fp8_panels.h"

namespace troupe::fp8_cuda {

// Codes per device row: n_in rounded up to the prefill's k step (32), so every 16-byte chunk a kernel reads exists.
constexpr int64_t row_codes(int64_t n_in) {
    return (n_in + 31) / 32 * 32;
}

// Writes m's codes as rows into `codes` ([n_out][row_codes(n_in)] bytes). The panel form: row r's code k at panel
// r / panel_rows, step k, lane r % panel_rows.
inline void rows_from_panels(const fp8_panels::matrix& m, uint8_t* codes) {
    const int64_t stride = row_codes(m.n_in);
    for (int64_t r = 0; r < m.n_out; ++r) {
        const uint8_t* panel = m.codes + static_cast<size_t>(r / fp8_panels::panel_rows) *
                                             static_cast<size_t>(m.n_in * fp8_panels::panel_rows);
        const int64_t lane = r % fp8_panels::panel_rows;
        uint8_t* dst = codes + static_cast<size_t>(r * stride);
        for (int64_t k = 0; k < m.n_in; ++k) dst[k] = panel[k * fp8_panels::panel_rows + lane];
        std::memset(dst + m.n_in, 0, static_cast<size_t>(stride - m.n_in));
    }
}

}  // namespace troupe::fp8_cuda
