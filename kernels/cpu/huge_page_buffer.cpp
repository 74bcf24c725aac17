#include "kernels/cpu/huge_page_buffer.h"

#include <sys/mman.h>

#include <utility>

namespace troupe::cpu {
namespace {

constexpr size_t huge_page = size_t{2} << 20;

}  // namespace

bool huge_page_buffer::allocate(size_t n_bytes) {
    release();
    if (n_bytes == 0) return true;
    // Over-allocate by one huge page and trim, so the block starts on a 2 MiB boundary (huge pages can then
    // back it from its first byte).
    const size_t rounded = (n_bytes + huge_page - 1) / huge_page * huge_page;
    void* raw = ::mmap(nullptr, rounded + huge_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return false;
    auto* base = static_cast<uint8_t*>(raw);
    const size_t head = (huge_page - reinterpret_cast<uintptr_t>(base) % huge_page) % huge_page;
    if (head > 0) ::munmap(base, head);
    if (huge_page - head > 0) ::munmap(base + head + rounded, huge_page - head);
    data_ = base + head;
    size_ = rounded;
    huge_pages_ = ::madvise(data_, size_, MADV_HUGEPAGE) == 0;
    return true;
}

huge_page_buffer::huge_page_buffer(huge_page_buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      huge_pages_(other.huge_pages_) {}

huge_page_buffer& huge_page_buffer::operator=(huge_page_buffer&& other) noexcept {
    if (this != &other) {
        release();
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
        huge_pages_ = other.huge_pages_;
    }
    return *this;
}

huge_page_buffer::~huge_page_buffer() {
    release();
}

void huge_page_buffer::release() {
    if (data_) ::munmap(data_, size_);
    data_ = nullptr;
    size_ = 0;
    huge_pages_ = false;
}

}  // namespace troupe::cpu
