// --expect spec parsing, against the real policy registry.

#include <gtest/gtest.h>

#include "oomharness/runner/cli_specs.h"

namespace oomh {
namespace {

ExpectSpec ok(const std::string& text) {
  auto r = parse_expect_spec(text);
  EXPECT_TRUE(r) << r.error();
  return r ? *r : ExpectSpec{};
}

std::string error_of(const std::string& text) {
  auto r = parse_expect_spec(text);
  EXPECT_FALSE(r) << "expected an error for '" << text << "'";
  return r.error();
}

TEST(ExpectSpec, KeywordArguments) {
  ExpectSpec e = ok("batch_halving:factor=0.25,min=8");
  EXPECT_EQ(e.policy, "batch_halving");
  EXPECT_DOUBLE_EQ(e.args["factor"].get<double>(), 0.25);
  EXPECT_EQ(e.args["min"], 8);
}

TEST(ExpectSpec, BareNameTakesDefaults) {
  ExpectSpec e = ok("batch_halving");
  EXPECT_EQ(e.policy, "batch_halving");
  EXPECT_DOUBLE_EQ(e.args["factor"].get<double>(), 0.5);  // filled in by the registry
}

TEST(ExpectSpec, ScalarValues) {
  EXPECT_EQ(ok("exit=0").args["code"], 0);
  EXPECT_EQ(ok("exit=3").args["code"], 3);
  EXPECT_EQ(ok("exit:3").args["code"], 3);
  EXPECT_EQ(ok("peak_below:8GiB").args["bytes"].get<uint64_t>(), 8ull << 30);
  EXPECT_EQ(ok("peak_below=1024").args["bytes"].get<uint64_t>(), 1024u);
}

TEST(ExpectSpec, TypedValues) {
  EXPECT_EQ(ok("batch_halving:no_sample_loss").args["no_sample_loss"], true);
  EXPECT_EQ(ok("batch_halving:no_sample_loss=false").args["no_sample_loss"], false);
  EXPECT_DOUBLE_EQ(ok("no_hang:stall=30s").args["stall"].get<double>(), 30.0);
  EXPECT_EQ(ok("memory_stable:growth_per_step=2MiB").args["growth_per_step"].get<uint64_t>(), 2ull << 20);
  EXPECT_TRUE(ok("checkpoint_resume:reference={\"metric\":\"loss\",\"rtol\":0.001}").args["reference"].is_object());
}

TEST(ExpectSpec, ErrorsQuoteTheSpec) {
  EXPECT_EQ(error_of("batch_halvng"), "bad --expect 'batch_halvng': unknown policy 'batch_halvng' (did you mean 'batch_halving'?)");
  EXPECT_EQ(error_of("batch_halving:factr=0.5"),
            "bad --expect 'batch_halving:factr=0.5': policy 'batch_halving' has no argument 'factr' (did you mean 'factor'?)");
  EXPECT_EQ(error_of("batch_halving:factor=half"),
            "bad --expect 'batch_halving:factor=half': argument 'factor' must be a number, not 'half'");
  EXPECT_EQ(error_of("batch_halving=0.5").rfind("bad --expect 'batch_halving=0.5': policy 'batch_halving' takes named arguments", 0), 0u);
  EXPECT_EQ(error_of("exit:code=x"), "bad --expect 'exit:code=x': argument 'code' must be a whole number, not 'x'");
  EXPECT_NE(error_of("exit:").find("nothing after ':'"), std::string::npos);
  EXPECT_NE(error_of(":x").find("no policy name"), std::string::npos);
  EXPECT_NE(error_of("batch_halving:min=2,min=3").find("given twice"), std::string::npos);
  // Issue 44: an exit status holds 8 bits; `exit=256` could never pass.
  EXPECT_EQ(error_of("exit=256"), "bad --expect 'exit=256': exit's 'code' must be from 0 to 255 (an exit status holds 8 bits), got 256");
  EXPECT_EQ(ok("exit=255").args["code"], 255);
  // normalise_args's own checks reach the user too, behind the same prefix.
  EXPECT_EQ(error_of("peak_below:lots").rfind("bad --expect 'peak_below:lots': ", 0), 0u);
}

}  // namespace
}  // namespace oomh
