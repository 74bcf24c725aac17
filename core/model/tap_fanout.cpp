#include "core/model/tap_fanout.h"

namespace troupe {

tap_fanout::tap_fanout(std::vector<std::shared_ptr<tap_sink>> sinks) : sinks_(std::move(sinks)) {
    for (const auto& s : sinks_) {
        wanted_by_.push_back(s->wanted());
        wanted_ |= wanted_by_.back();
    }
}

status tap_fanout::observe(const tap_data& data) {
    for (size_t i = 0; i < sinks_.size(); ++i) {
        if ((wanted_by_[i] & tap_bit(data.tap)) == 0) continue;
        if (status st = sinks_[i]->observe(data); !st.ok()) return st;
    }
    return {};
}

}  // namespace troupe
