#pragma once
// Internal: SHA-256 for the HTML report's Content-Security-Policy, which allows exactly one inline
// script by its hash ('sha256-<base64>'), so that nothing a job printed can run even if it escaped.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace oomh::detail {

std::array<uint8_t, 32> sha256(std::string_view data);
std::string base64(const uint8_t* data, size_t size);

}  // namespace oomh::detail
