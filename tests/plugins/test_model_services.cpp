// Tensors by name (tensors.h): the host's troupe_model_services over GGUF files written here, read directly and
// by a C fixture plugin (fixtures/tensors_probe.c) that reads a model tensor, a side file's tensor and a metadata
// key in create. Refusals: a missing tensor, a corrupt side file (bad magic, truncated): one error naming the file,
// and the host keeps working.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/gguf/gguf_writer.h"
#include "core/plugin_host/plugin_model_services.h"
#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

namespace fs = std::filesystem;

// A fresh folder per test, removed at the end.
class model_services : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("troupe_model_services_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(dir_);
        gguf::gguf_writer model;
        model.set_string("general.architecture", "probe");
        model.set_u32("probe.count", 5);
        model.set_f32("probe.scale", 0.25f);
        model.set_bool("probe.flag", true);
        model.add_tensor_f32("blk.0.probe.weight", {3}, std::vector<float>{7.0f, 8.0f, 9.0f});
        model.add_tensor_f32("blk.1.probe.weight", {2, 2}, std::vector<float>{1.0f, -2.0f, 3.0f, -4.0f});
        ASSERT_TRUE(model.write(path("model.gguf")).ok());
        auto f = gguf::gguf_file::open(path("model.gguf"));
        ASSERT_TRUE(f.ok()) << f.message();
        model_file_ = *f;

        gguf::gguf_writer side;
        side.add_tensor_f32("heads.0.weight", {2}, std::vector<float>{42.0f, 43.0f});
        ASSERT_TRUE(side.write(path("heads.gguf")).ok());
    }
    void TearDown() override {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }

    fs::path dir_;
    std::shared_ptr<const gguf::gguf_file> model_file_;
};

TEST_F(model_services, a_model_tensor_is_found_by_name_with_its_type_shape_and_data) {
    auto m = make_model_services(model_file_);
    troupe_tensor t{};
    ASSERT_EQ(m->tensor(m->host_ctx, m->model, "blk.1.probe.weight", &t), TROUPE_OK) << m->last_error(m->host_ctx);
    EXPECT_STREQ(t.name, "blk.1.probe.weight");
    EXPECT_EQ(t.type, uint32_t{TROUPE_TYPE_F32});
    EXPECT_EQ(t.n_dims, 2);
    EXPECT_EQ(t.ne[0], 2);
    EXPECT_EQ(t.ne[1], 2);
    EXPECT_EQ(t.ne[2], 1);
    EXPECT_EQ(t.n_bytes, size_t{16});
    float v[4];
    std::memcpy(v, t.data, sizeof v);
    EXPECT_EQ(v[3], -4.0f);

    EXPECT_EQ(m->n_tensors(m->host_ctx, m->model), 2);
    ASSERT_EQ(m->tensor_at(m->host_ctx, m->model, 0, &t), TROUPE_OK);
    EXPECT_STREQ(t.name, "blk.0.probe.weight");
    EXPECT_EQ(m->tensor_at(m->host_ctx, m->model, 2, &t), TROUPE_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(m->last_error(m->host_ctx)), path("model.gguf") + ": tensor index 2 is outside 0..1");
}

struct metadata_case {
    const char* key;
    const char* kind;  // "int", "float", "string"
    int32_t status;
    const char* value_or_error;  // the value printed, or the last_error after the file's path
};

TEST_F(model_services, metadata_is_read_by_key_and_kind) {
    auto m = make_model_services(model_file_);
    const std::vector<metadata_case> cases = {
        {"probe.count", "int", TROUPE_OK, "5"},
        {"probe.flag", "int", TROUPE_OK, "1"},
        {"probe.scale", "float", TROUPE_OK, "0.25"},
        {"general.architecture", "string", TROUPE_OK, "probe"},
        {"probe.scale", "int", TROUPE_ERR_INVALID_ARGUMENT, ": metadata key 'probe.scale' is f32, not an integer"},
        {"probe.count", "string", TROUPE_ERR_INVALID_ARGUMENT, ": metadata key 'probe.count' is u32, not a string"},
        {"probe.missing", "float", TROUPE_ERR_INVALID_ARGUMENT, ": no metadata key 'probe.missing'"},
    };
    for (const metadata_case& c : cases) {
        std::string got;
        int32_t rc;
        if (std::string(c.kind) == "int") {
            int64_t v = 0;
            rc = m->metadata_int(m->host_ctx, m->model, c.key, &v);
            got = std::to_string(v);
        } else if (std::string(c.kind) == "float") {
            double v = 0;
            rc = m->metadata_float(m->host_ctx, m->model, c.key, &v);
            got = std::to_string(v).substr(0, 4);
        } else {
            const char* v = "";
            rc = m->metadata_string(m->host_ctx, m->model, c.key, &v);
            got = v;
        }
        EXPECT_EQ(rc, c.status) << c.key;
        if (c.status == TROUPE_OK) {
            EXPECT_EQ(got, c.value_or_error) << c.key;
        } else {
            EXPECT_EQ(m->last_error(m->host_ctx), path("model.gguf") + c.value_or_error) << c.key;
        }
    }
}

TEST_F(model_services, a_side_file_is_opened_read_and_closed_and_a_closed_file_is_refused) {
    auto m = make_model_services(model_file_);
    troupe_tensor_file* side = nullptr;
    ASSERT_EQ(m->open_file(m->host_ctx, path("heads.gguf").c_str(), &side), TROUPE_OK) << m->last_error(m->host_ctx);
    troupe_tensor t{};
    ASSERT_EQ(m->tensor(m->host_ctx, side, "heads.0.weight", &t), TROUPE_OK);
    EXPECT_EQ(t.ne[0], 2);
    EXPECT_EQ(m->tensor(m->host_ctx, side, "blk.0.probe.weight", &t), TROUPE_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(m->last_error(m->host_ctx)), path("heads.gguf") + ": no tensor 'blk.0.probe.weight'");
    m->close_file(m->host_ctx, side);
    EXPECT_EQ(m->n_tensors(m->host_ctx, side), -1);
    EXPECT_EQ(std::string(m->last_error(m->host_ctx)),
              "n_tensors: the file is not open (closed, or not from open_file)");
    m->close_file(m->host_ctx, const_cast<troupe_tensor_file*>(m->model));  // ignored: not the plugin's to close
    EXPECT_EQ(m->n_tensors(m->host_ctx, m->model), 2);
}

TEST_F(model_services, last_error_belongs_to_the_calling_thread) {
    auto m = make_model_services(model_file_);
    troupe_tensor t{};
    ASSERT_EQ(m->tensor(m->host_ctx, m->model, "nope", &t), TROUPE_ERR_INVALID_ARGUMENT);
    std::string other_before, other_after;
    std::thread other([&] {
        other_before = m->last_error(m->host_ctx);
        (void)m->tensor(m->host_ctx, m->model, "other", &t);
        other_after = m->last_error(m->host_ctx);
    });
    other.join();
    EXPECT_EQ(other_before, "");
    EXPECT_EQ(other_after, path("model.gguf") + ": no tensor 'other'");
    EXPECT_EQ(std::string(m->last_error(m->host_ctx)), path("model.gguf") + ": no tensor 'nope'");
}

TEST_F(model_services, a_plugin_reads_a_model_tensor_a_side_file_tensor_and_metadata_in_create) {
    plugin_host host(plugin_host_options{TROUPE_TEST_FIXTURE_DIR, plugin_backend::cpu},
                     make_model_services(model_file_));
    auto p = host.load(plugin_kind::spec, "tensors",
                       yaml("{model_tensor: blk.0.probe.weight, side_file: '" + path("heads.gguf") +
                            "', side_tensor: heads.0.weight, metadata_key: probe.count}"));
    ASSERT_TRUE(p.ok()) << p.message();
    auto proposed = propose_chain(*p->spec, std::vector<int32_t>{1}, 16);
    ASSERT_TRUE(proposed.ok()) << proposed.message();
    EXPECT_EQ(*proposed, (std::vector<int32_t>{7, 8, 9, 42, 43, 5}));
}

TEST_F(model_services, a_plugin_made_without_a_model_is_told_so) {
    plugin_host host(plugin_host_options{TROUPE_TEST_FIXTURE_DIR, plugin_backend::cpu});
    auto p = host.load(plugin_kind::spec, "tensors", yaml("{model_tensor: blk.0.probe.weight}"));
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.message(), "plugin spec/tensors: needs the model's tensors (made without a model)");
}

// Writes a copy of heads.gguf spoiled by `spoil` as `name`.
std::string spoiled_copy(const std::string& from, const std::string& to, void (*spoil)(std::string&)) {
    std::ifstream in(from, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    spoil(bytes);
    std::ofstream(to, std::ios::binary) << bytes;
    return to;
}

struct refusal_case {
    const char* what;
    std::string params;    // YAML with {dir} for the temp folder
    std::string expected;  // the message after "plugin spec/tensors: ", with {dir}
};

std::string with_dir(std::string s, const std::string& dir) {
    for (size_t at = s.find("{dir}"); at != std::string::npos; at = s.find("{dir}")) s.replace(at, 5, dir);
    return s;
}

TEST_F(model_services, a_missing_tensor_or_a_corrupt_side_file_is_one_error_naming_the_file_and_nothing_breaks) {
    spoiled_copy(path("heads.gguf"), path("bad_magic.gguf"), [](std::string& b) { b[0] = 'X'; });
    // Cut inside the tensor data: the header and tensor table are whole, heads.0.weight's 8 bytes are not.
    auto heads = gguf::gguf_file::open(path("heads.gguf"));
    ASSERT_TRUE(heads.ok());
    static size_t cut;
    cut = (*heads)->data_offset() + 4;
    spoiled_copy(path("heads.gguf"), path("truncated.gguf"), [](std::string& b) { b.resize(cut); });
    spoiled_copy(path("heads.gguf"), path("stub.gguf"), [](std::string& b) { b.resize(3); });
    const std::vector<refusal_case> cases = {
        {"missing model tensor", "{model_tensor: blk.9.nope.weight}",
         "params.model_tensor: {dir}/model.gguf: no tensor 'blk.9.nope.weight'"},
        {"missing side tensor", "{side_file: '{dir}/heads.gguf', side_tensor: heads.7.weight}",
         "params.side_tensor: {dir}/heads.gguf: no tensor 'heads.7.weight'"},
        {"absent side file", "{side_file: '{dir}/absent.gguf'}", "params.side_file: {dir}/absent.gguf: cannot open"},
        {"bad magic", "{side_file: '{dir}/bad_magic.gguf'}",
         "params.side_file: {dir}/bad_magic.gguf: bad magic \"XGUF\", expected \"GGUF\": not a GGUF file"},
        {"truncated", "{side_file: '{dir}/truncated.gguf'}", "params.side_file: {dir}/truncated.gguf: tensor data"},
        {"stub", "{side_file: '{dir}/stub.gguf'}", "params.side_file: {dir}/stub.gguf: file is truncated"},
    };
    plugin_host host(plugin_host_options{TROUPE_TEST_FIXTURE_DIR, plugin_backend::cpu},
                     make_model_services(model_file_));
    const std::string dir = dir_.string();
    for (const refusal_case& c : cases) {
        auto p = host.load(plugin_kind::spec, "tensors", yaml(with_dir(c.params, dir)));
        ASSERT_FALSE(p.ok()) << c.what;
        const std::string expected = "plugin spec/tensors: " + with_dir(c.expected, dir);
        EXPECT_EQ(p.message().substr(0, expected.size()), expected) << c.what << ": " << p.message();
        EXPECT_EQ(p.message().find('\n'), std::string::npos) << c.what << ": one line";
    }
    // The host and the same services still work after every refusal.
    auto p = host.load(plugin_kind::spec, "tensors",
                       yaml("{side_file: '" + path("heads.gguf") + "', side_tensor: heads.0.weight}"));
    ASSERT_TRUE(p.ok()) << p.message();
    auto proposed = propose_chain(*p->spec, std::vector<int32_t>{1}, 4);
    ASSERT_TRUE(proposed.ok());
    EXPECT_EQ(*proposed, (std::vector<int32_t>{42, 43}));
}

}  // namespace
}  // namespace troupe::testing
