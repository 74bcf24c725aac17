// huge_page_buffer: a block of anonymous memory advised for transparent huge pages, for data the kernels
// stream from DRAM: the model's weights (kernels.weights: copy) and the bandwidth probe that measures the
// bound those weights are read against.
//
// Why: decode streams every weight once per step, and streaming from 4 KiB pages (a file's page cache, or
// a plain allocation) measured ~20% slower than from huge pages on Zen 5 (110M F32 decode: ~95 vs ~118
// tokens/s, same kernels): one TLB entry covers 2 MiB instead of 4 KiB, and the hardware prefetcher is not
// stopped at every 4 KiB page boundary.
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe::cpu {

class huge_page_buffer {
public:
    huge_page_buffer() = default;
    huge_page_buffer(huge_page_buffer&& other) noexcept;
    huge_page_buffer& operator=(huge_page_buffer&& other) noexcept;
    huge_page_buffer(const huge_page_buffer&) = delete;
    huge_page_buffer& operator=(const huge_page_buffer&) = delete;
    ~huge_page_buffer();

    // n_bytes of zeroed memory, 2 MiB aligned (replacing what the buffer held); false (errno set) when the
    // system refuses it.
    bool allocate(size_t n_bytes);

    uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    bool huge_pages() const { return huge_pages_; }  // whether the kernel accepted the huge-page advice

private:
    void release();

    uint8_t* data_ = nullptr;
    size_t size_ = 0;
    bool huge_pages_ = false;
};

}  // namespace troupe::cpu
