// Decode-sized steps replayed as CUDA graphs (cuda_step_graphs.h).
#include "kernels/cuda/cuda_step_graphs.h"

#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_context.h"

namespace troupe::cuda {

step_graphs::step_graphs() {
    const char* env = std::getenv("TROUPE_CUDA_GRAPHS");
    enabled_ = env == nullptr || std::strcmp(env, "0") != 0;
}

step_graphs::~step_graphs() {
    clear();
}

void step_graphs::clear() {
    for (auto& [shape, exec] : graphs_) {
        if (exec) cudaGraphExecDestroy(exec);
    }
    graphs_.clear();
}

const char* step_graphs::run(const step_shape& shape, const step_buffers& buffers, cudaStream_t stream,
                             const std::function<const char*()>& enqueue) {
    if (!enabled_ || shape.n_tokens > max_tokens) return enqueue();
    if (buffers != buffers_) {
        clear();  // their launches point into buffers that have moved
        buffers_ = buffers;
    }
    if (auto it = graphs_.find(shape); it != graphs_.end()) {
        if (it->second == nullptr) return enqueue();
        TROUPE_CUDA_TRY(cudaGraphLaunch(it->second, stream));
        return nullptr;
    }
    if (seen_.insert(shape).second) return enqueue();  // first of its shape: plans and buffers are made eagerly
    if (graphs_.size() >= max_graphs) clear();

    // Thread-local: the other lanes' threads (block copies, swaps) go on while this one captures.
    TROUPE_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const char* message = enqueue();
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    cudaGraphExec_t exec = nullptr;
    const bool captured = message == nullptr && ended == cudaSuccess && graph != nullptr &&
                          cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    if (graph) cudaGraphDestroy(graph);
    if (!captured) {
        cudaGetLastError();  // a failed capture's error is not the step's: the step runs eagerly below
        graphs_[shape] = nullptr;
        return enqueue();
    }
    graphs_[shape] = exec;
    TROUPE_CUDA_TRY(cudaGraphLaunch(exec, stream));
    return nullptr;
}

}  // namespace troupe::cuda
