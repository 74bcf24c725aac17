// sse_parser: Server-Sent Events framing, fed bytes as they arrive.
//
// An event is a block of lines ended by an empty line ("\n\n", "\r\n\r\n" or mixed); its `data:` lines
// are joined with '\n' (one leading space after the colon is dropped). Comment lines (":...") and other
// fields (event:, id:, retry:) are ignored; a block without data lines yields nothing. Bytes of an
// unfinished event wait for the next feed, so events may be split anywhere across reads.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace troupe::bench {

class sse_parser {
public:
    // Appends the data of every event completed by `bytes` to `events`.
    void feed(std::string_view bytes, std::vector<std::string>& events);
    // Bytes held for an unfinished event.
    size_t pending() const { return buffer_.size(); }

private:
    void line(std::string_view l, std::vector<std::string>& events);

    std::string buffer_;  // an unfinished line
    std::string data_;    // the current event's data so far
    bool has_data_ = false;
};

}  // namespace troupe::bench
