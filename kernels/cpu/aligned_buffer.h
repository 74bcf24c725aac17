// A grow-only, 64-byte aligned scratch buffer (per-thread scratch of the kernels).
#pragma once

#include <cstddef>
#include <cstdlib>

namespace troupe::cpu {

class aligned_buffer {
public:
    aligned_buffer() = default;
    ~aligned_buffer() { std::free(data_); }
    aligned_buffer(const aligned_buffer&) = delete;
    aligned_buffer& operator=(const aligned_buffer&) = delete;

    // At least n_bytes, 64-byte aligned; the contents are not kept when it grows.
    void* reserve(size_t n_bytes) {
        if (n_bytes > capacity_) {
            std::free(data_);
            capacity_ = (n_bytes + 63) / 64 * 64;
            data_ = std::aligned_alloc(64, capacity_);
        }
        return data_;
    }

    template <class T>
    T* as(size_t n) {
        return static_cast<T*>(reserve(n * sizeof(T)));
    }

private:
    void* data_ = nullptr;
    size_t capacity_ = 0;
};

}  // namespace troupe::cpu
