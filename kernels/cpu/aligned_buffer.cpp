#include "kernels/cpu/aligned_buffer.h"

#include <cstdlib>
#include <new>

namespace troupe::cpu {

aligned_buffer::~aligned_buffer() {
    std::free(data_);
}

void* aligned_buffer::reserve(size_t n_bytes) {
    if (n_bytes > capacity_) {
        std::free(data_);
        capacity_ = (n_bytes + 63) / 64 * 64;
        data_ = std::aligned_alloc(64, capacity_);
        if (data_ == nullptr) throw std::bad_alloc();
    }
    return data_;
}

}  // namespace troupe::cpu
