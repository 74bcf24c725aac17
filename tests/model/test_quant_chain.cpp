// quant_chain (plugins.quant as a list): a weight goes to the first op that claims its type, its product to the
// op that prepared it; a type nobody claims and a weight from elsewhere are errors, not crashes.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/model/quant_chain.h"

namespace troupe {
namespace {

// Claims `types`; its product writes `mark` into y[0], so the test sees which op ran.
class marking_op final : public quant_op {
public:
    marking_op(std::string name, std::vector<ggml_type> types, float mark)
        : name_(std::move(name)), types_(std::move(types)), mark_(mark) {}
    std::string name() const override { return name_; }
    bool claims(ggml_type type) const override {
        for (ggml_type t : types_) {
            if (t == type) return true;
        }
        return false;
    }
    result<std::shared_ptr<const prepared_weight>> prepare(const weight_view& w) override {
        if (w.n_in == 0) return make_error("empty rows");
        ++n_prepared;
        return std::shared_ptr<const prepared_weight>(std::make_shared<weight>(this));
    }
    status matmul(const prepared_weight& w, const float*, float* y, int64_t, const parallel_for_fn&) override {
        const auto* mine = dynamic_cast<const weight*>(&w);
        if (mine == nullptr || mine->owner != this) return make_error(name_ + ": not my weight");
        y[0] = mark_;
        return status::success();
    }
    int n_prepared = 0;

private:
    struct weight final : prepared_weight {
        explicit weight(const marking_op* o) : owner(o) {}
        size_t n_bytes() const override { return 123; }
        const marking_op* owner;
    };
    std::string name_;
    std::vector<ggml_type> types_;
    float mark_;
};

TEST(quant_chain, each_weight_goes_to_the_first_op_that_claims_its_type) {
    auto q8 = std::make_shared<marking_op>("quant/q8", std::vector<ggml_type>{ggml_type::q8_0, ggml_type::f32}, 1.0f);
    auto w4 =
        std::make_shared<marking_op>("quant/w4a16", std::vector<ggml_type>{ggml_type::q4_1, ggml_type::f32}, 2.0f);
    quant_chain chain({q8, w4});
    EXPECT_EQ(chain.name(), "quant/q8 + quant/w4a16");
    struct tcase {
        ggml_type type;
        float mark;  // which op multiplies it
    };
    for (const tcase& c : {tcase{ggml_type::q8_0, 1.0f}, tcase{ggml_type::q4_1, 2.0f}, tcase{ggml_type::f32, 1.0f}}) {
        ASSERT_TRUE(chain.claims(c.type));
        auto p = chain.prepare(weight_view{c.type, nullptr, 32, 4, 40});
        ASSERT_TRUE(p.ok()) << p.message();
        EXPECT_EQ((*p)->n_bytes(), 123u);
        float y = 0.0f, x = 0.0f;
        ASSERT_TRUE(chain.matmul(**p, &x, &y, 1, {}).ok());
        EXPECT_EQ(y, c.mark) << traits(c.type).name;
    }
    EXPECT_EQ(q8->n_prepared, 2);
    EXPECT_EQ(w4->n_prepared, 1);
}

TEST(quant_chain, unclaimed_types_failed_prepares_and_foreign_weights_are_errors) {
    auto q8 = std::make_shared<marking_op>("quant/q8", std::vector<ggml_type>{ggml_type::q8_0}, 1.0f);
    auto w4 = std::make_shared<marking_op>("quant/w4a16", std::vector<ggml_type>{ggml_type::q4_1}, 2.0f);
    quant_chain chain({q8, w4});
    EXPECT_FALSE(chain.claims(ggml_type::q4_k));
    auto none = chain.prepare(weight_view{ggml_type::q4_k, nullptr, 256, 1, 144});
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.message(), "no plugin of quant/q8 + quant/w4a16 takes Q4_K weights");
    auto failed = chain.prepare(weight_view{ggml_type::q4_1, nullptr, 0, 1, 0});
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.message(), "quant/w4a16: empty rows");
    auto foreign = q8->prepare(weight_view{ggml_type::q8_0, nullptr, 32, 1, 34});
    ASSERT_TRUE(foreign.ok());
    float y = 0.0f, x = 0.0f;
    const status st = chain.matmul(**foreign, &x, &y, 1, {});
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.message(), "quant/q8 + quant/w4a16: matmul got a weight prepared by another quant op");
}

}  // namespace
}  // namespace troupe
