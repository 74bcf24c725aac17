#include "query_tiles.h"

#include "attention_kernels.h"

#include <algorithm>

namespace troupe::gqa {

int32_t make_query_tiles(const troupe_attention_call& call, int32_t max_tokens, query_tile* tiles) {
    int32_t n_tiles = 0;
    for (int32_t t = 0; t < call.n_tokens;) {
        int32_t n = 1;
        while (n < max_tokens && t + n < call.n_tokens && call.seq_of[t + n] == call.seq_of[t] &&
               call.positions[t + n] == call.positions[t] + n && plain_causal(call, t) && plain_causal(call, t + n)) {
            ++n;
        }
        tiles[n_tiles++] = {t, n};
        t += n;
    }
    const auto cost = [&call](const query_tile& tile) {
        return static_cast<int64_t>(tile.n_tokens) * (call.positions[tile.first_token + tile.n_tokens - 1] + 1);
    };
    std::stable_sort(tiles, tiles + n_tiles,
                     [&cost](const query_tile& a, const query_tile& b) { return cost(a) > cost(b); });
    return n_tiles;
}

}  // namespace troupe::gqa
