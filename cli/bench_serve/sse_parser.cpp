// SSE framing (see sse_parser.h).
#include "cli/bench_serve/sse_parser.h"

namespace troupe::bench {

void sse_parser::feed(std::string_view bytes, std::vector<std::string>& events) {
    buffer_.append(bytes);
    size_t start = 0;
    while (true) {
        const size_t eol = buffer_.find('\n', start);
        if (eol == std::string::npos) break;
        std::string_view l(buffer_.data() + start, eol - start);
        if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
        line(l, events);
        start = eol + 1;
    }
    buffer_.erase(0, start);
}

void sse_parser::line(std::string_view l, std::vector<std::string>& events) {
    if (l.empty()) {
        if (has_data_) events.push_back(std::move(data_));
        data_.clear();
        has_data_ = false;
        return;
    }
    if (l[0] == ':') return;
    const size_t colon = l.find(':');
    const std::string_view field = l.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? std::string_view{} : l.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
    if (field != "data") return;
    if (has_data_) data_ += '\n';
    data_.append(value);
    has_data_ = true;
}

}  // namespace troupe::bench
