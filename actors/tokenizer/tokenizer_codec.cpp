#include "actors/tokenizer/tokenizer_codec.h"

#include "core/result.h"
#include "core/tokenizer/incremental_detokenizer.h"
#include "core/tokenizer/tokenizer.h"

namespace troupe {
namespace {

class tokenizer_decoder final : public text_decoder {
public:
    explicit tokenizer_decoder(std::shared_ptr<const tokenizer> tok) : detok_(std::move(tok), false) {}
    tokenizer_decoder(std::shared_ptr<const tokenizer> tok, std::vector<int32_t> shown)
        : detok_(std::move(tok), false) {
        detok_.show_control_tokens(std::move(shown));
    }
    std::string push(int32_t id) override { return detok_.push(id); }
    std::string flush() override { return detok_.flush(); }

private:
    incremental_detokenizer detok_;
};

class tokenizer_codec final : public text_codec {
public:
    explicit tokenizer_codec(std::shared_ptr<const tokenizer> tok) : tok_(std::move(tok)) {}
    int32_t n_vocab() const override { return tok_->n_vocab(); }
    std::vector<int32_t> encode(std::string_view text) const override { return tok_->encode(text, true, true); }
    std::unique_ptr<text_decoder> make_decoder() const override { return std::make_unique<tokenizer_decoder>(tok_); }
    std::unique_ptr<text_decoder> make_decoder_showing(const std::vector<std::string>& special_texts) const override {
        std::vector<int32_t> ids;  // the texts that are one token of the vocabulary (a text of several stays text)
        for (const auto& text : special_texts) {
            if (const int32_t id = tok_->vocab().find(text); id >= 0) ids.push_back(id);
        }
        return std::make_unique<tokenizer_decoder>(tok_, std::move(ids));
    }
    std::vector<int32_t> eog_ids() const override { return tok_->eog_ids(); }
    std::string piece(int32_t id) const override {
        if (id < 0 || id >= tok_->n_vocab()) return {};
        return tok_->token_to_piece(id);
    }

private:
    std::shared_ptr<const tokenizer> tok_;
};

}  // namespace

std::shared_ptr<const text_codec> make_tokenizer_codec(std::shared_ptr<const tokenizer> tok) {
    TROUPE_ASSERT(tok != nullptr, "tokenizer codec needs a tokenizer");
    return std::make_shared<tokenizer_codec>(std::move(tok));
}

}  // namespace troupe
