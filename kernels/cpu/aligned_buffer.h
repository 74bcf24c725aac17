// A grow-only, 64-byte aligned scratch buffer (per-thread scratch of the kernels).
//
// Its functions live in aligned_buffer.cpp, built without ISA flags: an inline function defined in a header
// and compiled into a SIMD file could be the copy the linker keeps for every caller.
#pragma once

#include <cstddef>

namespace troupe::cpu {

class aligned_buffer {
public:
    aligned_buffer() = default;
    ~aligned_buffer();
    aligned_buffer(const aligned_buffer&) = delete;
    aligned_buffer& operator=(const aligned_buffer&) = delete;

    // At least n_bytes, 64-byte aligned; the contents are not kept when it grows.
    void* reserve(size_t n_bytes);

    template <class T>
    T* as(size_t n) {
        return static_cast<T*>(reserve(n * sizeof(T)));
    }

private:
    void* data_ = nullptr;
    size_t capacity_ = 0;
};

}  // namespace troupe::cpu
