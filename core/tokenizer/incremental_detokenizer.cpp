#include "core/tokenizer/incremental_detokenizer.h"

#include <algorithm>

#include "core/tokenizer/utf8.h"

namespace troupe {

incremental_detokenizer::incremental_detokenizer(std::shared_ptr<const tokenizer> tok, bool strip_leading_space)
    : tok_(std::move(tok)), strip_leading_space_(strip_leading_space) {
    TROUPE_ASSERT(tok_ != nullptr, "incremental_detokenizer needs a tokenizer");
}

void incremental_detokenizer::show_control_tokens(std::vector<int32_t> ids) {
    std::sort(ids.begin(), ids.end());
    shown_ = std::move(ids);
}

std::string incremental_detokenizer::push(int32_t id) {
    const bool is_bos = id == tok_->bos_id() && id >= 0;
    if (n_pushed_ == 0) first_was_bos_ = is_bos;
    const bool first_text = first_was_bos_ ? n_pushed_ == 1 : n_pushed_ == 0;
    ++n_pushed_;
    const bool shown = !shown_.empty() && std::binary_search(shown_.begin(), shown_.end(), id);
    held_ += tok_->output_piece(id, strip_leading_space_ && first_text, shown);
    std::string out;
    const size_t consumed = tok::sanitize_utf8(held_, out, false);
    held_.erase(0, consumed);
    return out;
}

std::string incremental_detokenizer::flush() {
    std::string out;
    tok::sanitize_utf8(held_, out, true);
    held_.clear();
    return out;
}

}  // namespace troupe
