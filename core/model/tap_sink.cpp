#include "core/model/tap_sink.h"

namespace troupe {

const char* tap_name(tap_point t) {
    switch (t) {
        case tap_point::attn_norm:
            return "attn_norm";
        case tap_point::q:
            return "q";
        case tap_point::k:
            return "k";
        case tap_point::v:
            return "v";
        case tap_point::attn_out:
            return "attn_out";
        case tap_point::ffn_norm:
            return "ffn_norm";
        case tap_point::ffn_hidden:
            return "ffn_hidden";
        case tap_point::layer_out:
            return "layer_out";
        case tap_point::output_norm:
            return "output_norm";
        case tap_point::logits:
            return "logits";
    }
    return "unknown tap";
}

}  // namespace troupe
