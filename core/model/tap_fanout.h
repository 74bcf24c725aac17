// tap_fanout: several tap sinks as one (cpu_llama takes one): wanted() is the union, and each observation goes to
// the sinks that want its tap, in the order given; the first failure fails the step.
#pragma once

#include <memory>
#include <vector>

#include "core/model/tap_sink.h"

namespace troupe {

class tap_fanout final : public tap_sink {
public:
    explicit tap_fanout(std::vector<std::shared_ptr<tap_sink>> sinks);
    uint64_t wanted() const override { return wanted_; }
    status observe(const tap_data& data) override;

private:
    std::vector<std::shared_ptr<tap_sink>> sinks_;
    std::vector<uint64_t> wanted_by_;  // [sinks_.size()] each sink's wanted(), asked once
    uint64_t wanted_ = 0;
};

}  // namespace troupe
