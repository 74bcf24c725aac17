// cuda_lane_stream: a lane of the CUDA backend's context (one cudaStream_t) as the device_stream an actor's lane
// owns (core/runtime/device_stream.h), through the backend's revision-5 ops: lane_record / lane_wait /
// lane_synchronize, with events freed through event_destroy when the last shared_ptr to them goes.
#pragma once

#include <memory>
#include <string>

#include "core/backend/cuda_library.h"
#include "core/runtime/device_stream.h"

namespace troupe {

class cuda_lane_event final : public device_event {
public:
    cuda_lane_event(std::shared_ptr<const cuda_library> lib, troupe_cuda_event* e) : lib_(std::move(lib)), e_(e) {}
    ~cuda_lane_event() override { lib_->ops().event_destroy(e_); }
    cuda_lane_event(const cuda_lane_event&) = delete;
    cuda_lane_event& operator=(const cuda_lane_event&) = delete;
    const troupe_cuda_event* handle() const { return e_; }

private:
    std::shared_ptr<const cuda_library> lib_;
    troupe_cuda_event* e_;
};

class cuda_lane_stream final : public device_stream {
public:
    // Null where the library lacks revision 5's lane ops. ctx must outlive the stream (the runner owns both).
    static std::shared_ptr<cuda_lane_stream> create(std::shared_ptr<const cuda_library> lib, troupe_cuda_context* ctx,
                                                    int32_t lane, std::string name);

    std::string name() const override { return name_; }
    void* native() const override;
    result<std::shared_ptr<const device_event>> record() override;
    status wait(const device_event& e) override;
    status synchronize() override;
    int32_t lane() const { return lane_; }

private:
    cuda_lane_stream(std::shared_ptr<const cuda_library> lib, troupe_cuda_context* ctx, int32_t lane, std::string name)
        : lib_(std::move(lib)), ctx_(ctx), lane_(lane), name_(std::move(name)) {}
    std::shared_ptr<const cuda_library> lib_;
    troupe_cuda_context* ctx_;
    int32_t lane_;
    std::string name_;
};

// Whether the library has the lane ops of revision 5.
bool cuda_has_lane_events(const cuda_library& lib);

}  // namespace troupe
